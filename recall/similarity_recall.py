"""The Similarity Recall operator (M 3.4, 4.5.2): for each new event, the k past events
of the same type whose contexts are most similar (TF-IDF cosine, M 3.5).

Its task walks the materialized events and contexts of the event type, newest chunk
first. Each chunk's history-query returns the chunk's past events and their context
(and surrounding) tuples in long form, ``(eid, ts, attr, value, part)``; the chunk is
turned into a sparse TF matrix, scored against the new context with the *current* IDF
(:class:`similarity.QueryScorer`), and merged into the event's :class:`similarity.TopK`.
Only past events better than the k already produced are emitted (INSERT); one that is
pushed out is retracted (DELETE), M 4.5.2. Each output carries the past event's id,
time, score, context and surrounding information (e.g. how it was resolved, M 3.3).

Statistics (E, C_k) are learned once per event, live or materialized
(:meth:`learn_event`), and can be snapshotted for persistence.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd

from archive.abc import ChunkStore, HistoryQuery
from recall.api import EndReason, Interval, Output, OutputKind, TaskSpec
from recall.operator import as_utc
from scheduler.errors import MoiraeError
from similarity import ContextChunk, ContextStatistics, NumericSpec, QueryScorer, SimilarityConfig, TopK
from similarity.errors import NonNumericValue

STATUS_KEY = "__status__"


class SimilarityRecallError(MoiraeError, ValueError):
    """A Similarity Recall that cannot be built; names the operator and the problem."""


@dataclass
class _State:
    spec: TaskSpec
    scorer: QueryScorer
    top: TopK
    seq: int = 0
    covered: Interval | None = None
    oldest_chunk: int | None = None
    rows: dict[str, dict] = field(default_factory=dict)  # eid -> output row of those held


class SimilarityRecall:
    """``SimilarityRecall(name, event=..., store=..., context_streams=[...], k=5)``.

    ``context_streams`` are the archived streams of the event type's context-queries
    (``(eid, ts, attrs...)``), ``surrounding_streams`` those of its surrounding queries
    (returned, not compared), ``event_stream`` the archived events (default
    ``ev_<event>``). ``numeric`` declares numeric attributes (name -> NumericSpec, or a
    list of names with default specs). Unbounded by default: the task suspends every
    ``feedback_period`` chunks for user feedback (M 4.4). ``exclude_recent`` leaves out
    past events less than that long before the new one (e.g. earlier alerts of the same
    ongoing incident, which are similar but tell the operator nothing new).
    """

    def __init__(self, name: str, *, event: str, store: ChunkStore, context_streams: Sequence[str],
                 k: int = 5, surrounding_streams: Sequence[str] = (), event_stream: str | None = None,
                 numeric: Mapping[str, NumericSpec] | Iterable[str] = (), tickets: int = 100,
                 feedback_period: int | None = 20, feedback_timeout: float | None = None,
                 bound: timedelta | None = None, eid_attr: str = "eid", ts_attr: str = "ts",
                 exclude_recent: timedelta = timedelta(0)) -> None:
        if k < 1:
            raise SimilarityRecallError(f"Similarity Recall {name!r}: k must be >= 1, got {k!r}")
        self.name, self.event, self.k = name, event, k
        self.store = store
        self.event_stream = event_stream or f"ev_{event}"
        self.context_streams = tuple(context_streams)
        self.surrounding_streams = tuple(surrounding_streams)
        specs = numeric if isinstance(numeric, Mapping) else {n: NumericSpec() for n in numeric}
        self.config = SimilarityConfig(numeric=dict(specs))
        self.stats = ContextStatistics(self.config, event_type=event)
        self.tickets, self.feedback_period, self.feedback_timeout = tickets, feedback_period, feedback_timeout
        self.bound, self.eid_attr, self.ts_attr = bound, eid_attr, ts_attr
        self.exclude_recent = exclude_recent
        self._learned: set[str] = set()
        self._lock = threading.Lock()
        self.rejected: list[tuple[str, str]] = []  # (eid, reason) of contexts refused by learn_event
        self.query = self._build_query()

    def _build_query(self) -> HistoryQuery:
        parts = [f"SELECT e.{self.eid_attr}::text AS eid, e.{self.ts_attr} AS ts, NULL::text AS attr, "
                 f"NULL::text AS value, 'event' AS part FROM {self.event_stream} e"]
        for kind, streams in (("context", self.context_streams), ("surrounding", self.surrounding_streams)):
            for stream in streams:
                for col in self._columns(stream):
                    parts.append(f"SELECT c.{self.eid_attr}::text, c.{self.ts_attr}, '{col}', c.\"{col}\"::text, "
                                 f"'{kind}:{stream}' FROM {stream} c")
        return self.store.prepare(" UNION ALL ".join(parts))

    def _columns(self, stream: str) -> list[str]:
        spec = getattr(self.store, "stream", None)
        if spec is None:
            raise SimilarityRecallError(f"Similarity Recall {self.name!r} needs a store that describes streams")
        cols = [c for c in spec(stream).columns if c not in (self.eid_attr, self.ts_attr)]
        for c in cols:
            if not c.replace("_", "").isalnum():
                raise SimilarityRecallError(f"context column {c!r} of {stream!r} is not a plain identifier")
        return cols

    # -- statistics (M 3.5: incremental E and C_k) ----------------------------------------

    def learn_event(self, eid: str, context: Sequence[Mapping[str, Any]]) -> bool:
        """Count one event's context in E and C_k, once per event id. Returns False (and
        records why in ``rejected``) when a numeric attribute holds a non-number."""
        with self._lock:
            if eid in self._learned:
                return True
            try:
                self.stats.learn_one(list(context))
            except NonNumericValue as exc:
                self.rejected.append((eid, str(exc)))
                return False
            self._learned.add(eid)
            return True

    def learn_contexts(self, events: pd.DataFrame, contexts: Sequence[pd.DataFrame]) -> list[tuple[str, str]]:
        """Learn materialized events with their context rows (one frame per context-query)."""
        by_eid: dict[str, list[dict]] = {str(e): [] for e in events[self.eid_attr]} if len(events) else {}
        for frame in contexts:
            if frame is None or frame.empty:
                continue
            cols = [c for c in frame.columns if c not in (self.eid_attr, self.ts_attr)]
            for eid, *vals in frame[[self.eid_attr, *cols]].itertuples(index=False):
                by_eid.setdefault(str(eid), []).append({c: v for c, v in zip(cols, vals, strict=True)})
        refused = []
        for eid, ctx in by_eid.items():
            if not self.learn_event(eid, ctx):
                refused.append(self.rejected[-1])
        return refused

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {"stats": self.stats.snapshot(), "learned": sorted(self._learned)}

    def restore(self, snap: Mapping[str, Any]) -> None:
        with self._lock:
            self.stats = ContextStatistics.restore(snap["stats"])
            self._learned = set(snap.get("learned", ()))

    # -- RecallOperator --------------------------------------------------------------------

    def task_for(self, event: Mapping[str, Any]) -> TaskSpec:
        eid = str(event[self.eid_attr] if self.eid_attr in event else event["eid"])
        ts = as_utc(event[self.ts_attr] if self.ts_attr in event else event["ts"], f"event {eid!r} time")
        bound = ts - self.bound if self.bound is not None else None
        return TaskSpec(operator=self.name, eid=eid, event_ts=ts, query=self.query, params={}, bound=bound,
                        tickets=self.tickets, feedback_period=self.feedback_period if bound is None else None,
                        feedback_timeout=self.feedback_timeout if bound is None else None,
                        extra={"context": list(event.get("context") or [])})

    def start(self, spec: TaskSpec) -> _State:
        with self._lock:
            table = self.stats.table()
        return _State(spec, QueryScorer(table, list(spec.extra.get("context", []))), TopK(self.k))

    def on_chunk(self, state: _State, chunk_id: int, covered: Interval, rows: pd.DataFrame) -> list[Output]:
        state.covered = covered if state.covered is None else Interval(covered.start, state.covered.end)
        state.oldest_chunk = chunk_id
        if rows.empty:
            return []
        newest = state.spec.event_ts - self.exclude_recent
        rows = rows[(rows["eid"] != state.spec.eid) & (pd.to_datetime(rows["ts"], utc=True) < newest)]
        events = rows[rows["part"] == "event"].drop_duplicates("eid")
        if events.empty:
            return []
        ctx_rows = rows[rows["part"].str.startswith("context:")]
        contexts: dict[str, list[dict]] = {e: [] for e in events["eid"]}
        for eid, attr, value in ctx_rows[["eid", "attr", "value"]].itertuples(index=False):
            if eid in contexts:
                contexts[eid].append({attr: self._typed(attr, value)})
        eids = list(contexts)
        ts = pd.to_datetime(events.set_index("eid").loc[eids, "ts"], utc=True).to_numpy(dtype="datetime64[ns]")
        with self._lock:  # new terms grow the shared vocabulary
            chunk = ContextChunk.from_contexts(np.asarray(eids, dtype=object), ts, list(contexts.values()), self.stats)
        inserted, displaced = state.top.offer(state.scorer.score(chunk))
        out = []
        for n in displaced:
            out.append(self._output(state, OutputKind.DELETE, n.eid, state.rows.pop(n.eid)))
        surrounding = rows[rows["part"].str.startswith("surrounding:")]
        for rank, n in enumerate(inserted):
            row = {"past_eid": n.eid, "past_ts": pd.Timestamp(n.ts, tz="UTC").isoformat(), "score": float(n.score),
                   "context": contexts[n.eid], "surrounding": _surrounding(surrounding, n.eid), "rank_in_chunk": rank}
            state.rows[n.eid] = row
            out.append(self._output(state, OutputKind.INSERT, n.eid, row))
        return out

    def _typed(self, attr: str, value: Any) -> Any:
        if attr in self.config.numeric and value is not None:
            try:
                return float(value)
            except ValueError:
                return value  # the scorer names attribute and value (NonNumericValue)
        return value

    def on_end(self, state: _State, reason: EndReason) -> list[Output]:
        status = {"status": "no_history" if not state.rows and state.oldest_chunk is None else reason.value,
                  "k": self.k, "found": len(state.rows)}
        raw_oldest = self._archive_oldest()
        if reason is EndReason.DONE and raw_oldest is not None and (state.oldest_chunk is None
                                                                    or state.oldest_chunk > raw_oldest):
            status["status"] = "exhausted"
            status["materialized_until"] = None if state.covered is None else state.covered.start.isoformat()
        return [self._output(state, OutputKind.INSERT, STATUS_KEY, status)]

    def _archive_oldest(self) -> int | None:
        chunks = getattr(self.store, "chunks", None)
        if chunks is None:
            return None
        raw = [c.chunk_id for c in chunks() if c.rows and not c.stream.startswith(("ev_", "cx_"))]
        return min(raw) if raw else None

    def _output(self, state: _State, kind: OutputKind, key: str, row: Mapping[str, Any]) -> Output:
        state.seq += 1
        return Output(self.name, state.spec.eid, state.spec.event_ts, kind, state.seq, str(key), dict(row),
                      state.covered)


def _surrounding(frame: pd.DataFrame, eid: str) -> dict[str, list[dict]]:
    mine = frame[frame["eid"] == eid]
    out: dict[str, dict[datetime, dict]] = {}
    for ts, attr, value, part in mine[["ts", "attr", "value", "part"]].itertuples(index=False):
        out.setdefault(part.split(":", 1)[1], {}).setdefault(ts, {})[attr] = value
    return {stream: list(rows.values()) for stream, rows in out.items()}
