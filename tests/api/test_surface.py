"""The fronts' one surface (:mod:`moirae.read.abc`): the Engine and the read-only engine
both implement every member of :class:`EngineSurface` with a compatible signature, and
no front reaches around it into an engine's internals."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from moirae.engine.engine import Engine
from moirae.read.abc import EngineSurface, ReadSurface, SteerSurface
from moirae.read.readonly import ReadOnlyEngine

ROOT = Path(__file__).resolve().parents[2]
IMPLEMENTATIONS = [Engine, ReadOnlyEngine]
FRONTS = ["moirae/api", "moirae/cli", "moirae/read"]


def _members() -> dict[str, object]:
    """Every member the Protocol declares: name -> property or function."""
    out = {}
    for proto in (ReadSurface, SteerSurface):
        for name, value in vars(proto).items():
            if not name.startswith("_") and isinstance(value, property | type(_members)):
                out[name] = value
    return out


def test_the_surface_declares_reads_and_steering():
    members = _members()
    assert {"events", "results", "incidents", "bus", "archive", "settings", "tasks", "steerable"} <= set(members)
    assert {"cancel", "cancel_many", "accelerate"} <= set(members)
    assert {ReadSurface, SteerSurface} <= set(EngineSurface.__mro__)


def _compatible(declared: inspect.Signature, actual: inspect.Signature) -> str | None:
    """Why ``actual`` cannot stand for ``declared`` (None: it can): every declared
    parameter is there with the same name and kind (and a default if declared with
    one); every extra parameter has a default."""
    have = dict(actual.parameters)
    for name, p in declared.parameters.items():
        q = have.pop(name, None)
        if q is None:
            return f"lacks parameter {name!r}"
        if q.kind != p.kind:
            return f"parameter {name!r} is {q.kind.description}, declared {p.kind.description}"
        if p.default is not p.empty and q.default is p.empty:
            return f"parameter {name!r} has no default (declared {p.default!r})"
    extra = [n for n, q in have.items() if q.default is q.empty and q.kind not in (q.VAR_POSITIONAL, q.VAR_KEYWORD)]
    return f"extra parameters without default: {extra}" if extra else None


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("name", sorted(_members()))
def test_every_member_is_implemented_with_a_compatible_signature(impl, name):
    declared = _members()[name]
    actual = inspect.getattr_static(impl, name, None)
    if isinstance(declared, property):
        assigned = re.search(rf"\bself\.{name}\s*[:=]", inspect.getsource(impl.__init__)) is not None
        assert isinstance(actual, property) or assigned, f"{impl.__name__}.{name} is neither a property nor set in __init__"
        return
    assert inspect.isfunction(actual), f"{impl.__name__}.{name} is not a method"
    why = _compatible(inspect.signature(declared), inspect.signature(actual))
    assert why is None, f"{impl.__name__}.{name}{inspect.signature(actual)} {why}"


def test_no_front_reaches_around_the_surface():
    """The fronts call what the surface declares, never an engine's Deploy Manager,
    Archiver or private attributes."""
    pattern = re.compile(r"\bengine\.(deploy|archiver|_\w+)\b")
    found = [f"{path.relative_to(ROOT)}:{i}: {line.strip()}"
             for front in FRONTS for path in sorted((ROOT / front).rglob("*.py"))
             for i, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]
    assert found == []


@pytest.mark.postgres
def test_both_engines_are_instances_of_the_surface(engine):
    ro = ReadOnlyEngine(engine.settings, poll=None)
    try:
        assert isinstance(engine, EngineSurface) and isinstance(ro, EngineSurface)
        assert engine.steerable() and not ro.steerable()
        assert ro.tasks() == [] and ro.scheduler_state() is None and ro.live_status() is None
    finally:
        ro.close()
