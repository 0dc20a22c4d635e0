"""A package's public names, imported from their modules on first use
(PEP 562): a process that needs one name does not pay for the rest (the
daemon never loads the client library; the command line's fast path never
loads trio)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, homes: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``: name -> its module
    (``homes``); a name once loaded is kept in the package's ``namespace``."""

    def getattr_(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home), name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted([*namespace, *homes])

    return getattr_, dir_
