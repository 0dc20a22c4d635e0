"""The light records (``_record``) behave as the attrs classes they are
to a type checker, for what the light paths use of them."""

from __future__ import annotations

from typing import ClassVar

import attrs
import pytest

from multiserver.internal import mutable_record, record, replaced


def _pair(decorate: object) -> type:
    class View:
        KIND: ClassVar[str] = "view"
        socket: str
        pid: int
        children: tuple[int, ...] = ()
        label: str = "-"

        @property
        def where(self) -> str:
            return f"{self.socket}:{self.pid}"

    return decorate(View)  # type: ignore[operator,no-any-return]


LIGHT, ATTRS = _pair(record), _pair(attrs.frozen)


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [(("s", 1), {}), (("s",), {"pid": 2, "label": "x"}), ((), {"socket": "a", "pid": 3})],
)
def test_a_record_is_made_compared_shown_and_hashed_as_attrs_frozen(
    args: tuple[object, ...], kwargs: dict[str, object]
) -> None:
    light, heavy = LIGHT(*args, **kwargs), ATTRS(*args, **kwargs)
    assert repr(light) == repr(heavy)
    assert light == LIGHT(*args, **kwargs) and light != heavy
    assert hash(light) == hash(LIGHT(*args, **kwargs))
    assert light.where == heavy.where and light.KIND == "view"
    assert LIGHT.__match_args__ == ATTRS.__match_args__
    assert replaced(light, pid=9) == LIGHT(light.socket, 9, light.children, light.label)


def test_a_frozen_record_refuses_changes_and_wrong_arguments() -> None:
    light = LIGHT("s", 1)
    with pytest.raises(AttributeError):
        light.pid = 2
    with pytest.raises(AttributeError):
        del light.pid
    for bad in ((), ("s", 1, (), "-", "extra")):
        with pytest.raises(TypeError):
            LIGHT(*bad)
        with pytest.raises(TypeError):
            ATTRS(*bad)
    with pytest.raises(TypeError):
        LIGHT("s", 1, colour="red")


def test_a_mutable_record_changes_and_is_not_hashable() -> None:
    @mutable_record
    class Counter:
        name: str
        count: int = 0

    c = Counter("a")
    c.count += 1
    assert c == Counter("a", 1) and repr(c) == "Counter(name='a', count=1)"
    with pytest.raises(TypeError):
        hash(c)


def test_what_a_record_cannot_hold_is_refused_when_it_is_made() -> None:
    with pytest.raises(TypeError, match="without a default after one"):

        @record
        class Bad:
            a: int = 0
            b: int

    @record
    class Base:
        a: int

    with pytest.raises(TypeError, match="not inherited"):

        @record
        class Sub(Base):
            b: int
