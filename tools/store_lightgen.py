"""Writes ``restore/store/_light_model.py``: plain twins of the saved
session's attrs classes (``SessionLeaf`` and the records in it), for the
light read of the store (``_outline``), as ``tools/lightgen.py`` writes the
protocol's, with its code.
``make faces`` runs it; ``tests/restore/store/test_outline.py`` fails when
the module is stale."""

from __future__ import annotations

from pathlib import Path

from restore.store._model import PendingLaunch, RestorationRef, SessionLeaf
from tools.lightgen import twin_module_text, write_module

TARGET = Path(__file__).resolve().parent.parent / "restore" / "store" / "_light_model.py"


def module_text() -> str:
    return twin_module_text(
        [RestorationRef, PendingLaunch, SessionLeaf],
        source="restore/store/_model.py",
        generator="tools/store_lightgen.py",
        test="``tests/restore/store/test_outline.py``",
        about=(
            "A saved session and the records in it as plain classes, for the light\n"
            "read of the store (``_outline``), which imports neither attrs nor cattrs.\n"
            "To a type checker each is its attrs class."
        ),
        public=["RestorationRef", "SessionLeaf"],
    )


def write() -> bool:
    """Write ``_light_model.py`` if it differs; whether it did."""
    return write_module(TARGET, module_text())


if __name__ == "__main__":
    print(f"{TARGET}: {'written' if write() else 'up to date'}")
