"""The lazy faces (``multiserver``, ``restore``): each public name written
once, in its face's table, under the module that defines it; the stub
type checkers read is the one generated from that table."""

from __future__ import annotations

import importlib
import inspect

import pytest

from multiserver._lazy import lazy_exports, stub_path, stub_text

LAZY_FACES = ("multiserver", "multiserver.internal", "restore")


@pytest.mark.parametrize("package", LAZY_FACES)
def test_the_stub_is_generated_from_the_table(package: str) -> None:
    face = importlib.import_module(package)
    path = stub_path(face)
    assert path.exists() and path.read_text() == stub_text(face), (
        f"{path} is stale: run `make faces`"
    )


@pytest.mark.parametrize("package", LAZY_FACES)
def test_each_name_loads_from_the_module_that_defines_it(package: str) -> None:
    face = importlib.import_module(package)
    assert face.__all__ == sorted(n for names in face.EXPORTS.values() for n in names)
    for module, names in face.EXPORTS.items():
        home = importlib.import_module(module)
        for name in names:
            value = getattr(face, name)
            assert value is getattr(home, name)
            if inspect.isclass(value) or inspect.isfunction(value):
                assert value.__module__ == module, f"{package}.{name} is defined elsewhere"


def test_an_unknown_name_is_an_attribute_error() -> None:
    getattr_, dir_, all_ = lazy_exports("p", {"json": ("dumps",)}, {})
    assert getattr_("dumps") is importlib.import_module("json").dumps
    assert all_ == ["dumps"] and "dumps" in dir_()
    with pytest.raises(AttributeError, match="module 'p' has no attribute 'loads'"):
        getattr_("loads")
