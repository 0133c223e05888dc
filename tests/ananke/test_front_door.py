"""Ananke's front door: its public names, its errors, and its extension points."""

from __future__ import annotations

import inspect
import subprocess
import sys

import ananke
import ananke.errors
from ananke.abc import GraphSink, HorizonListener, LateListener, Resolver
from ananke.items import ListSink
from moirae.base.errors import MoiraeError


def test_every_public_name_is_importable():
    for name in ananke.__all__:
        assert getattr(ananke, name) is not None, name


def test_every_error_derives_from_the_package_root():
    assert issubclass(ananke.AnankeError, MoiraeError)
    errors = [c for _, c in inspect.getmembers(ananke.errors, inspect.isclass) if c.__module__ == "ananke.errors"]
    assert len(errors) > 1
    assert sorted(c.__name__ for c in errors) == sorted(ananke.errors.__all__)
    for cls in errors:
        assert issubclass(cls, ananke.AnankeError), cls
        assert getattr(ananke, cls.__name__) is cls  # every error is public


def test_the_errors_raised_are_the_packages():
    from datetime import timedelta

    import pytest

    from ananke.ank1 import Ank1

    with pytest.raises(ananke.AnankeError):
        Ank1(sinks=(), U=timedelta(0))
    with pytest.raises(ananke.UnknownSinkName):
        Ank1(sinks=("K",), U=timedelta(0)).build().on_watermark("nope", ananke.ids.EPOCH)


def test_extension_points_accept_plain_callables():
    assert isinstance(ListSink(), GraphSink)
    for proto in (GraphSink, Resolver, HorizonListener, LateListener):
        assert isinstance(lambda *a: None, proto)


def test_importing_the_package_loads_neither_spark_nor_postgres_drivers():
    code = ("import sys, ananke; "
            "print(sorted(m for m in ('pyspark', 'psycopg2', 'pyarrow', 'pandas') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
