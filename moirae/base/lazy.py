"""Lazy re-exports for a package's ``__init__``: its public names, imported on first use.

A package front door names its public surface without paying for the imports behind it
(pandas, pyspark, psycopg2), so ``import moirae.queries.hybrid`` stays cheap:

>>> __getattr__ = lazy_exports("json", {"dumps": "json"})
>>> __getattr__("dumps")([1])
'[1]'
>>> __getattr__("nope")
Traceback (most recent call last):
...
AttributeError: module 'json' has no attribute 'nope'
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping


def lazy_exports(package: str, where: Mapping[str, str]) -> Callable[[str], object]:
    """A module ``__getattr__`` that imports ``where[name]`` and returns its ``name``."""

    def __getattr__(name: str) -> object:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(where[name]), name)

    return __getattr__
