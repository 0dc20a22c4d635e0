"""Writes ``multiserver/protocol/_light_messages.py`` from the attrs message
classes, as protobuf's ``_pb2`` modules are written from their ``.proto``
(``tools/store_lightgen.py`` writes the store's twins with the same code).

The attrs classes of ``_messages`` are the protocol's one definition. The
blocking client must start without importing attrs or cattrs (each command
a person types pays for every import), so it holds messages as plain
classes with the same names, fields, defaults and type codes, generated
here, and reads and writes their bodies with ``_light``, a codec driven by
the field table generated beside them. ``make faces`` runs this;
``tests/multiserver/protocol/test_light.py`` fails when the module is stale, and runs
every message through both codecs.

Each field's kind, as the table spells it: ``int float str bool bytes os``
(an ``OsStr``), ``lit:A|B`` (a Literal), a class name (a nested record),
``[K]`` (a list of K), ``env`` (a ``dict[OsStr, OsStr]``), and ``?K`` (K or
None).
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import attrs

from multiserver.protocol import _messages
from multiserver.protocol._messages import (
    MAX_FDS,
    MESSAGE_TYPES,
    ChildInfo,
    ClaimedChild,
    is_os_str,
)
from multiserver.protocol._proto import OMIT_IF_DEFAULT

TARGET = Path(__file__).resolve().parent.parent / "multiserver" / "protocol" / "_light_messages.py"
# Records that travel inside messages, before the messages that hold them.
RECORDS: tuple[type, ...] = (ChildInfo, ClaimedChild)


def kind_of(tp: Any) -> str:
    """A field's type, as the table spells it."""
    if is_os_str(tp):
        return "os"
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
    if origin is dict and is_os_str(args[0]) and is_os_str(args[1]):
        return "env"
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
    out.append("    from multiserver import Twin")
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


def module_text() -> str:
    """The whole of ``_light_messages.py``."""
    client = sorted(c.TYPE for c in _messages.CLIENT_MESSAGES)
    return twin_module_text(
        [*RECORDS, *MESSAGE_TYPES.values()],
        source="multiserver/protocol/_messages.py",
        generator="tools/lightgen.py",
        test="``tests/multiserver/protocol/test_light.py``",
        about=(
            "The protocol's messages as plain classes, for the blocking client, which\n"
            "imports neither attrs nor cattrs (``_light`` reads and writes them). Each\n"
            "has the name, fields, defaults and type code of its attrs class; to a type\n"
            "checker it is that class."
        ),
        omitted=OMIT_IF_DEFAULT,
        public=["ChildExited", "ChildTaken"],
        extra=[
            "# type code -> class name; the codes a client sends; fds a message may carry",
            "TYPES: dict[int, str] = {"
            + ", ".join(f"{code}: {cls.__name__!r}" for code, cls in MESSAGE_TYPES.items())
            + "}",
            f"CLIENT: frozenset[int] = frozenset({{{', '.join(map(str, client))}}})",
            "MAX_FDS: dict[int, int] = {"
            + ", ".join(f"{cls.TYPE}: {n}" for cls, n in MAX_FDS.items())
            + "}",
        ],
    )


def write_module(target: Path, text: str) -> bool:
    """Write ``text`` to ``target`` if it differs; whether it did."""
    if target.exists() and target.read_text() == text:
        return False
    target.write_text(text)
    return True


def write() -> bool:
    """Write ``_light_messages.py`` if it differs; whether it did."""
    return write_module(TARGET, module_text())


if __name__ == "__main__":
    print(f"{TARGET}: {'written' if write() else 'up to date'}")
