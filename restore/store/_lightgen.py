"""Writes ``_light_model.py``: plain twins of the saved session's attrs
classes (``SessionLeaf`` and the records in it), for the light read of the
store (``_outline``), as ``multiserver._lightgen`` writes the protocol's.
``make faces`` runs it; ``tests/restore/store/test_outline.py`` fails when
the module is stale."""

from __future__ import annotations

from pathlib import Path

from multiserver import twin_module_text, write_module
from restore.store._model import PendingLaunch, RestorationRef, SessionLeaf

TARGET = Path(__file__).with_name("_light_model.py")


def module_text() -> str:
    return twin_module_text(
        [RestorationRef, PendingLaunch, SessionLeaf],
        source="restore/store/_model.py",
        generator="restore/store/_lightgen.py",
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
