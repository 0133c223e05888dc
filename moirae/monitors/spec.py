"""A monitor as parsed from its file: frozen sections, its version, its origin.

The sections mirror the engine's deploy calls (M 3-4): sources (``Engine.source``), the
event-query (M 3.1), context-queries (M 3.3), Recalls (M 3.2), the Similarity Recall
(M 3.4) and the incident grouping (M 3.3). ``version`` is a digest of the normalized
definition: the same definition, however its file is laid out (key order, comments,
quoting), has the same version; any change of a value makes a new one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from moirae.monitors.marked import Marked, Path

EVENT_PREFIX, CONTEXT_PREFIX = "ev_", "cx_"


def version_of(data: Any) -> str:
    """16 hex digits of the SHA-256 of the definition's canonical JSON."""
    canon = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str, ensure_ascii=False)
    return hashlib.sha256(canon.encode()).hexdigest()[:16]


def _frozen(m: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(m or {}))


@dataclass(frozen=True)
class SourceSpec:
    """One declared source: its kind and options, its declared schema and columns, and
    what ``Engine.source`` takes (event time, lateness, indexes, sparse)."""

    name: str
    kind: str
    options: Mapping[str, Any] = field(default_factory=lambda: _frozen(None))
    schema: Mapping[str, str] = field(default_factory=lambda: _frozen(None))
    columns: Mapping[str, str] = field(default_factory=lambda: _frozen(None))
    drop: tuple[str, ...] = ()
    ts: str = "ts"
    lateness: str = "10 seconds"
    indexes: tuple[tuple[str, ...], ...] = ()
    chunk_interval: str | None = None
    sparse: bool = False


@dataclass(frozen=True)
class EventQuerySpec:
    """The event-query: Spark SQL text, or a Python ``module:function`` (with ``args``, a
    factory called with them), over ``inputs``; its events carry ``eid`` and ``ts``."""

    sql: str | None = None
    python: str | None = None
    args: Mapping[str, Any] | None = None
    inputs: tuple[str, ...] = ()
    eid: str = "eid"
    ts: str = "ts"


@dataclass(frozen=True)
class ContextSpec:
    name: str
    sql: str | None = None
    python: str | None = None
    inputs: tuple[str, ...] = ()
    window: str | float = "5m"
    after: str | float = 0
    surrounding: bool = False


@dataclass(frozen=True)
class RecallSpec:
    name: str
    sql: str
    period: str | float | None = None
    bound: str | float | None = None
    time_column: str | None = None
    tickets: int | None = None
    feedback_period: int | None = None
    extrapolate: bool = True


@dataclass(frozen=True)
class SimilaritySpec:
    name: str
    k: int | None = None
    numeric: tuple[str, ...] = ()
    bound: str | float | None = None
    exclude_recent: str | float | None = None
    tickets: int | None = None
    explain_terms: int | None = None


@dataclass(frozen=True)
class IncidentsSpec:
    keys: tuple[str, ...] | None = None  # None: the event-query window's keys
    window: str | float | None = None  # None: the event-query window's size (and slide as the gap)
    gap: str | float | None = None
    metric: str | None = None
    threshold: float | None = None
    series: tuple[str, str] | None = None
    norm: str | None = None


@dataclass(frozen=True)
class MonitorSpec:
    """One monitor file, parsed and schema-checked (not yet validated against an engine)."""

    name: str
    version: str
    source_text: str
    origin: str
    description: str
    sources: tuple[SourceSpec, ...]
    event_query: EventQuerySpec
    contexts: tuple[ContextSpec, ...] = ()
    recalls: tuple[RecallSpec, ...] = ()
    similarity: SimilaritySpec | None = None
    incidents: IncidentsSpec | None = None
    #: sections whose engine side other parts of the code base provide (raw, as written)
    rules: tuple[Mapping[str, Any], ...] = ()
    reference_tables: tuple[Mapping[str, Any], ...] = ()
    alerts: tuple[Mapping[str, Any], ...] = ()
    #: the parsed document with the line of every key (for errors)
    doc: Marked = field(default=None, repr=False, compare=False)  # type: ignore[assignment]

    def source(self, name: str) -> SourceSpec | None:
        return next((s for s in self.sources if s.name == name), None)

    def streams_written(self) -> list[str]:
        """The archived streams this monitor creates: its events and its contexts'."""
        return [f"{EVENT_PREFIX}{self.name}", *(f"{CONTEXT_PREFIX}{self.name}_{c.name}" for c in self.contexts)]

    def operators(self) -> list[str]:
        """The recall operators it attaches (Recalls, then the Similarity Recall)."""
        return [*(r.name for r in self.recalls), *([self.similarity.name] if self.similarity else [])]

    def error(self, path: Path, message: str, cls=None, line: int | None = None):
        """A :class:`~moirae.monitors.errors.MonitorFileError` at ``path`` of this file."""
        return self.doc.error(path, message, **({"cls": cls} if cls else {}), line=line)


def build_spec(doc: Marked, text: str) -> MonitorSpec:
    """The :class:`MonitorSpec` of a schema-checked document."""
    d = doc.data
    sources = tuple(SourceSpec(
        name, s["kind"], _frozen(s.get("options")), _frozen(s.get("schema")), _frozen(s.get("columns")),
        tuple(s.get("drop", ())), s.get("ts", "ts"), str(s.get("lateness", "10 seconds")),
        tuple(tuple(ix) for ix in s.get("indexes", ())), s.get("chunk_interval"), bool(s.get("sparse", False)))
        for name, s in d["sources"].items())
    q = d["event_query"]
    eq = EventQuerySpec(q.get("sql"), q.get("python"), _frozen(q["args"]) if "args" in q else None,
                        tuple(q.get("inputs", ())), q.get("eid", "eid"), q.get("ts", "ts"))
    contexts = tuple(ContextSpec(c["name"], c.get("sql"), c.get("python"), tuple(c.get("inputs", ())),
                                 c.get("window", "5m"), c.get("after", 0), bool(c.get("surrounding", False)))
                     for c in d.get("contexts", ()))
    recalls = tuple(RecallSpec(r["name"], r["sql"], r.get("period"), r.get("bound"), r.get("time_column"),
                               r.get("tickets"), r.get("feedback_period"), r.get("extrapolate", True))
                    for r in d.get("recalls", ()))
    s = d.get("similarity")
    sim = None if s is None else SimilaritySpec(s.get("name", f"{d['name']}_similar"), s.get("k"),
                                                tuple(s.get("numeric", ())), s.get("bound"), s.get("exclude_recent"),
                                                s.get("tickets"), s.get("explain_terms"))
    i = d.get("incidents")
    inc = None if i is None else IncidentsSpec(tuple(i["keys"]) if "keys" in i else None, i.get("window"), i.get("gap"),
                                               i.get("metric"), i.get("threshold"),
                                               tuple(i["series"]) if "series" in i else None, i.get("norm"))
    return MonitorSpec(d["name"], version_of(d), text, doc.origin, d.get("description", ""), sources, eq,
                       contexts, recalls, sim, inc, tuple(_frozen(r) for r in d.get("rules", ())),
                       tuple(_frozen(r) for r in d.get("reference_tables", ())),
                       tuple(_frozen(r) for r in d.get("alerts", ())), doc)
