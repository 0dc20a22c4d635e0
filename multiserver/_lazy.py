"""A package's face: its public names, imported from their modules on
first use (PEP 562), so that a process that needs one name does not pay
for the rest (the daemon never loads the client library; the command
line's fast path never loads trio).

A face writes each public name once, in one table (module -> names)::

    EXPORTS = {"restore.store._store": ("ArrangementStore", "StoreError"), ...}
    __getattr__, __dir__, __all__ = lazy_exports(__name__, EXPORTS, globals())

Type checkers cannot follow ``__getattr__``, so each face has an
``__init__.pyi`` beside it, generated from that table (``stub_text``;
``make faces`` writes them; ``tests/test_faces.py`` fails when one is
stale), as protobuf's ``_pb2`` modules are from their ``.proto``.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from pathlib import Path
    from types import ModuleType
    from typing import Any

    Exports = Mapping[str, tuple[str, ...]]


def lazy_exports(
    package: str, exports: Exports, namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """``__getattr__``, ``__dir__`` and ``__all__`` for ``package`` from
    ``exports`` (module -> the names it defines); a name once loaded is
    kept in the package's ``namespace``."""
    homes = {name: module for module, names in exports.items() for name in names}

    def getattr_(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home), name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted({*namespace, *homes})

    return getattr_, dir_, sorted(homes)


# Names a face defines itself (not lazily), and their type in its stub.
_OWN = {"__version__": "str"}


def stub_text(face: ModuleType) -> str:
    """The ``__init__.pyi`` of ``face`` (a package whose ``EXPORTS`` is
    its table)."""
    exports: Exports = face.EXPORTS
    lines = [
        f"# The face of {face.__name__} for type checkers, generated from EXPORTS in",
        "# __init__.py by `make faces` (tests/test_faces.py fails when it is stale).",
        "",
    ]
    for module in sorted(exports):
        # isort's order (constants, classes, the rest), as ruff keeps it.
        names = sorted(exports[module], key=lambda n: (not n.isupper(), not n[0].isupper(), n))
        lines.append(f"from {module} import (")
        lines += [f"    {name} as {name}," for name in names]
        lines.append(")")
    own = [f"{name}: {kind}" for name, kind in _OWN.items() if name in vars(face)]
    if own:
        lines += ["", *own]
    return "\n".join(lines) + "\n"


def stub_path(face: ModuleType) -> Path:
    from pathlib import Path

    assert face.__file__ is not None
    return Path(face.__file__).with_suffix(".pyi")


def write_stubs(packages: list[str]) -> None:
    """Write the stubs of ``packages`` (``make faces``)."""
    for name in packages:
        face = importlib.import_module(name)
        path = stub_path(face)
        text = stub_text(face)
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            print(f"wrote {path}")
