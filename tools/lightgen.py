"""Writes plain twins of attrs classes and their field table, as protobuf's
``_pb2`` modules are written from their ``.proto``: the store's light read
(``tools/store_lightgen.py`` writes ``restore/store/_light_model.py``) holds
a saved session without importing attrs or cattrs. The protocol's messages
need none: they are plain records, defined once (``multiserver/protocol/
_messages.py``), and their codec reads their annotations.

Each field's kind, as the table spells it (``_codec.kind_of`` reads the
same kinds): ``int float str bool bytes``, ``lit:A|B`` (a Literal), a class
name (a nested record), ``[K]`` (a list of K), and ``?K`` (K or None).
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import attrs


def kind_of(tp: Any) -> str:
    """A field's type, as the table spells it."""
    if tp in (int, float, str, bool, bytes):
        return str(tp.__name__)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Literal:
        return "lit:" + "|".join(args)
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) != 1 or len(args) != 2:
            raise TypeError(f"no light form for {tp!r}")
        return "?" + kind_of(rest[0])
    if origin is list:
        return f"[{kind_of(args[0])}]"
    if attrs.has(tp):
        return str(tp.__name__)
    raise TypeError(f"no light form for {tp!r}")


_NO_DEFAULT = "REQUIRED"


def fields_of(
    cls: type, omitting: Mapping[str, tuple[str, ...]] | None = None
) -> list[tuple[str, str, str, bool]]:
    """(name, kind, default as source or REQUIRED, omitted at its default)."""
    hints = typing.get_type_hints(cls, include_extras=True)
    omitted = (omitting or {}).get(cls.__name__, ())
    out = []
    for f in attrs.fields(cls):
        if f.default is attrs.NOTHING:
            default = _NO_DEFAULT
        elif isinstance(f.default, int | float | str | bytes | bool | None):
            default = repr(f.default)
        else:
            raise TypeError(f"{cls.__name__}.{f.name}: a default the light form cannot hold")
        omit = default != _NO_DEFAULT and ("*" in omitted or f.name in omitted)
        out.append((f.name, kind_of(hints[f.name]), default, omit))
    return out


_HEADER = '''"""GENERATED from {source} by {generator}
(``make faces``); do not edit. {test} fails
when it is stale.

{about}
"""

from __future__ import annotations

TYPE_CHECKING = False
'''


def _class_source(cls: type, omitted: Mapping[str, tuple[str, ...]]) -> str:
    fields = fields_of(cls, omitted)
    names = [f[0] for f in fields]
    params = ", ".join(n if d == _NO_DEFAULT else f"{n}={d}" for n, _k, d, _o in fields)
    lines = [
        "",
        "",
        f"    class {cls.__name__}(Twin):",
        f"        __slots__ = ({', '.join(repr(n) for n in names)},)",
    ]
    if hasattr(cls, "TYPE"):
        lines.append(f"        TYPE = {cls.TYPE}")
    blob = getattr(cls, "BLOB", None)
    if blob is not None:
        lines.append(f"        BLOB = {blob!r}")
    lines.append("")
    lines.append(f"        def __init__(self, {params}):")
    lines += [f"            self.{n} = {n}" for n in names]
    return "\n".join(lines)


def twin_module_text(
    classes: Sequence[type],
    *,
    source: str,
    generator: str,
    test: str,
    about: str,
    omitted: Mapping[str, tuple[str, ...]] | None = None,
    extra: Sequence[str] = (),
    public: Sequence[str] = (),
) -> str:
    """A module of plain twins of the attrs ``classes`` (records nested in
    others first) and their field table ``FIELDS``, then ``extra`` lines.
    ``omitted``: fields left out at their default, by class name;
    ``public``: classes also named ``Light<Name>``, for a face to export
    beside the attrs class of that name."""
    names = [c.__name__ for c in classes]
    out = [_HEADER.format(source=source, generator=generator, test=test, about=about)]
    out.append("if TYPE_CHECKING:")
    for module in sorted({c.__module__ for c in classes}):
        out.append(f"    from {module} import (")
        out += [
            f"        {n} as {n},"
            for n in sorted(c.__name__ for c in classes if c.__module__ == module)
        ]
        out.append("    )")
    for name in public:
        module = next(c.__module__ for c in classes if c.__name__ == name)
        out.append(f"    from {module} import {name} as Light{name}")
    if public:
        out.append(f"    __all__ = [{', '.join(repr('Light' + n) for n in public)}]")
    out.append("else:")
    out.append("    from multiserver.internal import Twin")
    out += [_class_source(c, omitted or {}) for c in classes]
    if public:
        out.append("")
        out += [f"    Light{name} = {name}" for name in public]
    out.append("")
    out.append("")
    out.append("# name -> ((field, kind, default or REQUIRED, omitted at its default), ...)")
    out.append("FIELDS: dict[str, tuple[tuple[str, str, object, bool], ...]] = {")
    for c in classes:
        out.append(f"    {c.__name__!r}: (")
        for n, k, d, o in fields_of(c, omitted or {}):
            out.append(f"        ({n!r}, {k!r}, {d if d != _NO_DEFAULT else repr(d)}, {o}),")
        out.append("    ),")
    out.append("}")
    out.append(f"REQUIRED = {_NO_DEFAULT!r}")
    assert len(set(names)) == len(names)
    out += list(extra)
    return "\n".join(out) + "\n"


def write_module(target: Path, text: str) -> bool:
    """Write ``text`` to ``target`` if it differs; whether it did."""
    if target.exists() and target.read_text() == text:
        return False
    target.write_text(text)
    return True
