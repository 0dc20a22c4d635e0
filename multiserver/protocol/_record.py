"""Records for the light paths: dataclass-like classes to a type checker
(PEP 681 ``dataclass_transform``: constructors and frozenness are checked,
and ``attrs.evolve`` of one is an error), a few lines at run time, so that a
command that needs a handful of small records does not import attrs (22
ms, more than the interpreter's own start-up here).

What they make, at run time: an ``__init__`` taking the annotated fields in
order (by position or name; a class attribute is the field's default), and
``__repr__``, ``__eq__`` (same class, same fields) and ``__match_args__``;
a frozen record also refuses ``setattr`` and hashes by its fields, as attrs'
frozen classes do. ``ClassVar`` annotations are not fields. What they do not
do: validators, converters, factories, inheritance of fields; a class that
needs them is an attrs class. ``replaced`` (below) copies either kind.
``tests/multiserver/protocol/test_record.py`` holds them to attrs.
"""

from __future__ import annotations


class Twin:
    """The base of the plain twins ``tools/lightgen.py`` writes (their
    fields are their slots): shown and compared by class and fields, as
    attrs shows and compares the classes they are twins of."""

    __slots__: tuple[str, ...] = ()

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__slots__)
        return f"{type(self).__name__}({inner})"

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n in self.__slots__)

    __hash__ = None  # type: ignore[assignment]


TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import TypeVar, dataclass_transform

    C = TypeVar("C", bound=type)
    R = TypeVar("R")

    @dataclass_transform(frozen_default=True)
    def record(cls: C) -> C: ...

    @dataclass_transform()
    def mutable_record(cls: C) -> C: ...

else:

    def _fields(cls: type) -> tuple[str, ...]:
        # Not inspect.get_annotations: inspect costs a light command 7 ms.
        annotations = cls.__dict__.get("__annotations__", {})  # noqa: RUF063
        for base in cls.__mro__[1:]:
            if getattr(base, "__record_fields__", ()):
                raise TypeError(f"{cls.__name__}: a record's fields are not inherited")
        return tuple(n for n, t in annotations.items() if not str(t).startswith("ClassVar"))

    def _init(cls: type, names: tuple[str, ...], frozen: bool) -> None:
        defaults = {n: cls.__dict__[n] for n in names if n in cls.__dict__}
        seen_default = False
        params = []
        for n in names:
            if n in defaults:
                seen_default = True
                params.append(f"{n}=_defaults[{n!r}]")
            elif seen_default:
                raise TypeError(f"{cls.__name__}.{n}: a field without a default after one with")
            else:
                params.append(n)
        setter = "_set(self, {0!r}, {0})" if frozen else "self.{0} = {0}"
        body = "\n".join(f"    {setter.format(n)}" for n in names) or "    pass"
        source = f"def __init__(self, {', '.join(params)}):\n{body}\n"
        for n in defaults:  # the default lives on __init__ now, not as a class attribute
            delattr(cls, n)

        def __init__(self: object, *args: object, **kwargs: object) -> None:
            # Compiled on the first construction, not at the class's
            # creation: a process that makes no instance of a record (the
            # codec makes its own; most commands build few messages) pays
            # nothing for it. 27 message classes compiled at import cost a
            # command 1.1 ms.
            namespace = {"_defaults": defaults, "_set": object.__setattr__}
            exec(source, namespace)  # our own field names, checked identifiers
            cls.__init__ = namespace["__init__"]
            cls.__init__(self, *args, **kwargs)

        cls.__init__ = __init__
        cls.__record_defaults__ = defaults

    def _make(cls: type, frozen: bool) -> type:
        names = _fields(cls)
        if not all(n.isidentifier() for n in names):
            raise TypeError(f"{cls.__name__}: field names must be identifiers")
        _init(cls, names, frozen)

        def values(self: object) -> tuple[object, ...]:
            return tuple(getattr(self, n) for n in names)

        def __repr__(self: object) -> str:
            inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in names)
            return f"{type(self).__name__}({inner})"

        def __eq__(self: object, other: object) -> bool:
            if other.__class__ is not self.__class__:
                return NotImplemented
            return values(self) == values(other)

        cls.__repr__ = __repr__
        cls.__eq__ = __eq__
        cls.__match_args__ = names
        cls.__record_fields__ = names
        if frozen:

            def __setattr__(self: object, name: str, value: object = None) -> None:
                raise AttributeError(f"{type(self).__name__} is frozen: cannot set {name}")

            def __hash__(self: object) -> int:
                return hash((type(self).__name__, *values(self)))

            cls.__setattr__ = __setattr__
            cls.__delattr__ = __setattr__
            cls.__hash__ = __hash__
        else:
            cls.__hash__ = None
        return cls

    def record(cls: type) -> type:
        """A frozen record of ``cls``'s annotated fields (attrs.frozen's,
        to a type checker)."""
        return _make(cls, frozen=True)

    def mutable_record(cls: type) -> type:
        """A record whose fields may change (attrs.define's, to a type
        checker)."""
        return _make(cls, frozen=False)


def replaced(record: R, **changes: object) -> R:
    """A copy of a record (a message, a ``record``, a generated twin, or an
    attrs class) with ``changes``."""
    cls = type(record)
    attrs_fields = getattr(cls, "__attrs_attrs__", None)
    if attrs_fields is not None:
        names = [a.name for a in attrs_fields]
    else:  # a record, or a generated twin (its slots)
        names = getattr(cls, "__record_fields__", None) or cls.__slots__  # type: ignore[attr-defined]
    return cls(**{n: changes[n] if n in changes else getattr(record, n) for n in names})
