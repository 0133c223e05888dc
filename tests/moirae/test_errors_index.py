"""``moirae.errors`` re-exports every error of the code base: each :class:`MoiraeError`
subclass defined in any package is reachable there under its own name, as itself."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import moirae.errors
from moirae.base.errors import MoiraeError

PACKAGES = ("moirae", "scheduler", "similarity", "archive", "ananke", "recall")


def _import_everything() -> None:
    for name in PACKAGES:
        pkg = importlib.import_module(name)
        for mod in pkgutil.walk_packages(pkg.__path__, f"{name}."):
            if not mod.name.endswith("__main__"):
                importlib.import_module(mod.name)


def _subclasses(cls: type) -> set[type]:
    out = set()
    for sub in cls.__subclasses__():
        out |= {sub, *_subclasses(sub)}
    return out


def _defined_errors() -> list[type]:
    _import_everything()
    return sorted((c for c in _subclasses(MoiraeError) if c.__module__.split(".")[0] in PACKAGES),
                  key=lambda c: f"{c.__module__}.{c.__qualname__}")


def test_every_moirae_error_is_exported_by_the_index():
    missing = [f"{c.__module__}.{c.__qualname__}" for c in _defined_errors()
               if getattr(moirae.errors, c.__name__, None) is not c]
    assert not missing, f"add to moirae/errors.py: {missing}"


@pytest.mark.parametrize("name", moirae.errors.__all__)
def test_each_exported_name_is_a_moirae_error(name):
    err = getattr(moirae.errors, name)
    assert isinstance(err, type) and issubclass(err, MoiraeError) and err.__name__ == name
