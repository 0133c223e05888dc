"""Every docstring example in the packages runs (STYLE.md: "give an example, and doctest
it"). One test per module, so a failing example names its module."""

from __future__ import annotations

import doctest
import importlib
import pkgutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("scheduler", "similarity", "archive", "ananke", "recall", "moirae")


def _modules():
    for pkg in PACKAGES:
        yield pkg
        for info in pkgutil.walk_packages([str(ROOT / pkg)], prefix=f"{pkg}."):
            yield info.name


@pytest.mark.parametrize("name", sorted(_modules()))
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.failed == 0, f"{result.failed} doctest example(s) failed in {name}"
