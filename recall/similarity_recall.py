"""The Similarity Recall operator (M 3.4, 4.5.2): for each new event, the k past events
of the same type whose contexts are most similar (TF-IDF cosine, M 3.5).

Its task walks the materialized events and contexts of the event type, newest chunk
first. The Recall Manager asks :meth:`SimilarityRecall.fetch_chunk` for each chunk: its
sparse TF matrix is built once from the chunk's archived events and contexts (one
``COPY`` per stream, :func:`similarity.index.build_coded`), in the background when the
chunk is sealed or materialized (:mod:`recall.similarity_prebuild`), persisted and
cached (:mod:`recall.similarity_source`); each event's task scores it against the new context
with the *current* IDF (:class:`similarity.QueryScorer`) and merges it into its top k
past incidents (:class:`recall.similarity_incidents.IncidentTop`, array passes per
chunk). Small sealed chunks whose indexes are in memory are read in runs, as one chunk
(:meth:`SimilarityRecall.fetch_run`, up to ``coalesce_rows`` past events): M 4.5.2's
per-chunk top k and revisions then come once per run, and the results after it are
those chunk by chunk would have reached. The operator's history-query (the same tuples in long form,
``(eid, ts, attr, value, part)``, with each event's incident key as ``value``) names the
streams and grid, and :meth:`on_chunk` also accepts its rows (:func:`similarity.index.build`).
Only past events better than the k already produced are emitted (INSERT); one that is
pushed out is retracted (DELETE), M 4.5.2. Each output carries the past event's id,
time, score, context and surrounding information (e.g. how it was resolved, M 3.3), and
``shared_terms``: the five shared terms that contributed most, each with its share of
the cosine (:mod:`similarity.explain`; numeric attributes with both values and their
kernel weight). Results are past incidents, not windows (see :class:`SimilarityRecall`).

Statistics (E, C_k) are learned once per event, live or materialized
(:meth:`learn_event`), and can be snapshotted for persistence.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd

from archive.abc import ChunkStore, HistoryQuery
from recall.api import EndReason, Interval, Output, OutputKind, TaskSpec
from recall.errors import SimilarityRecallError
from recall.operator import as_utc
from recall.replica2 import SearchProgress
from recall.similarity_incidents import IncidentTop, PastIncident, ResolutionLookup, resolution_of
from recall.similarity_source import DEFAULT_CACHE_BYTES, ChunkSource
from similarity import ContextStatistics, NumericSpec, QueryScorer, SimilarityConfig, TopK
from similarity.errors import NonNumericValue, SnapshotError
from similarity.explain import explain
from similarity.incidents import ChunkGroups, IncidentRule, chunk_groups
from similarity.index import ChunkIndex
from similarity.index import build as build_index
from similarity.learned import LearnedIds
from similarity.novelty import NoveltyCalibrator

log = logging.getLogger(__name__)
STATUS_KEY = "__status__"
#: refused contexts whose reasons an operator keeps (the latest)
REJECTED_KEPT = 1000
#: past events a run of chunks read as one holds at most (SimilarityRecall.fetch_run)
COALESCE_ROWS = 2048


@dataclass
class _State:
    spec: TaskSpec
    scorer: QueryScorer
    top: TopK
    seq: int = 0
    covered: Interval | None = None
    oldest_chunk: int | None = None
    rows: dict[str, dict] = field(default_factory=dict)  # incident id -> output row of those held
    incidents: IncidentTop | None = None
    chunks: int = 0
    status: dict | None = None  # the status row held (a partial one while the search pauses)
    progress: SearchProgress | None = None  # how far replica2 has searched (recall.replica2)
    progress_at: float | None = None  # monotonic time of the last progress row
    newest_ns: int | None = None  # the newest past time a result may have (event time - exclude_recent)
    explained: dict[str, tuple[Any, list, list]] = field(default_factory=dict)
    """Per past eid emitted, its context and shared terms: both depend on the eid and the
    task's scorer alone, so a held incident re-emitted with the same best window (a
    revision of its extent) does not explain it again."""


@dataclass(frozen=True)
class NoveltySpec:
    """The settings of a :class:`~similarity.novelty.NoveltyCalibrator` (each build
    gets a fresh calibrator: its learned scores belong to the logic, not the spec)."""

    quantile: float = 0.05
    min_samples: int = 20
    window: int = 2000
    fixed: float | None = None

    @classmethod
    def of(cls, calibrator: NoveltyCalibrator) -> NoveltySpec:
        return cls(calibrator.quantile, calibrator.min_samples, calibrator.window, calibrator.fixed)

    def build(self) -> NoveltyCalibrator:
        return NoveltyCalibrator(quantile=self.quantile, min_samples=self.min_samples, window=self.window,
                                 fixed=self.fixed)


@dataclass(frozen=True)
class SimilarityRecallSpec:
    """The Similarity Recall operator (M 3.4, 4.5.2); the fields are the arguments of
    :class:`recall.similarity_recall.SimilarityRecall`, which documents them.
    ``numeric`` may be given as a mapping or as attribute names (default specs); it is
    kept as sorted ``(name, NumericSpec)`` pairs."""

    name: str
    event: str
    context_streams: tuple[str, ...]
    k: int = 5
    surrounding_streams: tuple[str, ...] = ()
    event_stream: str | None = None
    numeric: tuple[tuple[str, NumericSpec], ...] = ()
    tickets: int = 100
    feedback_period: int | None = 20
    feedback_timeout: float | None = None
    bound: timedelta | None = None
    eid_attr: str = "eid"
    ts_attr: str = "ts"
    exclude_recent: timedelta = timedelta(0)
    incidents: IncidentRule | None = None
    novelty: NoveltySpec = NoveltySpec()
    explain_terms: int = 5
    idf: str = "paper"
    index_cache_bytes: int = DEFAULT_CACHE_BYTES
    persist_index: bool = True
    coalesce_rows: int = COALESCE_ROWS

    def __post_init__(self) -> None:
        object.__setattr__(self, "context_streams", tuple(self.context_streams))
        object.__setattr__(self, "surrounding_streams", tuple(self.surrounding_streams))
        numeric: Mapping[str, NumericSpec] | Iterable[Any] = self.numeric
        if isinstance(numeric, Mapping):
            pairs = numeric.items()
        else:
            pairs = [(n, NumericSpec()) if isinstance(n, str) else tuple(n) for n in numeric]
        object.__setattr__(self, "numeric", tuple(sorted(pairs, key=lambda p: p[0])))
        if isinstance(self.novelty, NoveltyCalibrator):
            object.__setattr__(self, "novelty", NoveltySpec.of(self.novelty))

    def build(self, store: ChunkStore, resolutions: ResolutionLookup | None = None) -> SimilarityRecall:
        """The operator logic on ``store``; ``resolutions`` looks up recorded resolutions."""
        kw = {f.name: getattr(self, f.name) for f in fields(self)}
        kw["numeric"] = dict(self.numeric)
        kw["novelty"] = self.novelty.build()
        return SimilarityRecall(kw.pop("name"), store=store, resolutions=resolutions, **kw)


class SimilarityRecall:
    """``SimilarityRecall(name, event=..., store=..., context_streams=[...], k=5)``: the
    operator's logic (:class:`recall.abc.RecallOperator`, :class:`recall.abc.ChunkFetcher`,
    :class:`recall.abc.Snapshotting`); its frozen description is :attr:`spec`
    (:class:`SimilarityRecallSpec`, whose ``build`` makes one).

    ``context_streams`` are the archived streams of the event type's context-queries
    (``(eid, ts, attrs...)``), ``surrounding_streams`` those of its surrounding queries
    (returned, not compared), ``event_stream`` the archived events (default
    ``ev_<event>``). ``numeric`` declares numeric attributes (name -> NumericSpec, or a
    list of names with default specs). Unbounded by default: the task suspends every
    ``feedback_period`` chunks for user feedback (M 4.4).

    Results are past **incidents** (:mod:`recall.similarity_incidents`), grouped by
    ``incidents`` (an :class:`~similarity.incidents.IncidentRule`; the engine passes the
    event type's rule: its key attributes, a gap of one window). Without a rule every
    past event is its own incident. The live event's ongoing incident is never a
    result. ``resolutions(incident_ids) -> {id: text}`` looks up resolutions recorded
    elsewhere (the engine's incident store); otherwise a ``resolution`` attribute in any
    window's surrounding rows is the incident's resolution. Each result carries the
    shared terms that contribute most to its score (:mod:`similarity.explain`).
    ``novelty`` decides when the final status says ``novel``
    (:mod:`similarity.novelty`). ``idf="smooth"`` picks the smoothed IDF option
    (:class:`similarity.SimilarityConfig`). ``exclude_recent`` additionally leaves out past events
    less than that long before the new one. ``index_cache_bytes`` bounds the memory of
    cached chunk indexes; ``persist_index`` stores each sealed chunk's index in
    PostgreSQL (:mod:`recall.similarity_source`). ``coalesce_rows`` bounds the past events
    of a run of chunks read as one (:meth:`fetch_run`; 0 reads every chunk alone).
    """

    def __init__(self, name: str, *, event: str, store: ChunkStore, context_streams: Sequence[str],
                 k: int = 5, surrounding_streams: Sequence[str] = (), event_stream: str | None = None,
                 numeric: Mapping[str, NumericSpec] | Iterable[str] = (), tickets: int = 100,
                 feedback_period: int | None = 20, feedback_timeout: float | None = None,
                 bound: timedelta | None = None, eid_attr: str = "eid", ts_attr: str = "ts",
                 exclude_recent: timedelta = timedelta(0), incidents: IncidentRule | None = None,
                 resolutions: ResolutionLookup | None = None, novelty: NoveltyCalibrator | None = None,
                 explain_terms: int = 5, idf: str = "paper", index_cache_bytes: int = DEFAULT_CACHE_BYTES,
                 persist_index: bool = True, coalesce_rows: int = COALESCE_ROWS) -> None:
        if k < 1:
            raise SimilarityRecallError(f"Similarity Recall {name!r}: k must be >= 1, got {k!r}")
        novelty = novelty or NoveltyCalibrator()
        specs = numeric if isinstance(numeric, Mapping) else {n: NumericSpec() for n in numeric}
        self.spec = SimilarityRecallSpec(
            name, event, tuple(context_streams), k=k, surrounding_streams=tuple(surrounding_streams),
            event_stream=event_stream, numeric=specs, tickets=tickets, feedback_period=feedback_period,
            feedback_timeout=feedback_timeout, bound=bound, eid_attr=eid_attr, ts_attr=ts_attr,
            exclude_recent=exclude_recent, incidents=incidents, novelty=NoveltySpec.of(novelty),
            explain_terms=explain_terms, idf=idf, index_cache_bytes=index_cache_bytes, persist_index=persist_index,
            coalesce_rows=coalesce_rows)
        self.name, self.event, self.k = name, event, k
        self.store = store
        self.event_stream = event_stream or f"ev_{event}"
        self.context_streams = tuple(context_streams)
        self.surrounding_streams = tuple(surrounding_streams)
        self.config = SimilarityConfig(numeric=dict(specs), idf=idf)  # idf: "paper" (M 3.5) or "smooth"
        self.stats = ContextStatistics(self.config, event_type=event)
        self.tickets, self.feedback_period, self.feedback_timeout = tickets, feedback_period, feedback_timeout
        self.bound, self.eid_attr, self.ts_attr = bound, eid_attr, ts_attr
        self.exclude_recent = exclude_recent
        self.incident_rule = incidents
        self.resolutions = resolutions
        self.novelty = novelty
        self.explain_terms = explain_terms
        self.coalesce_rows = coalesce_rows
        self._learned = LearnedIds()  # 8 bytes an event, for the life of the operator
        self._unsaved: list[str] = []  # learned since the last state_delta (persisted incrementally)
        self._lock = threading.Lock()
        #: (eid, reason) of the latest contexts refused by learn_event (``refused`` counts all)
        self.rejected: deque[tuple[str, str]] = deque(maxlen=REJECTED_KEPT)
        self.refused = 0
        self.query: HistoryQuery = self.store.prepare(_history_sql(self))
        self.source = ChunkSource(self, index_cache_bytes, persist_index)

    def key_expr(self) -> str:
        """The incident key of a past event ``e`` as SQL text, as
        :meth:`IncidentRule.key_of` makes it."""
        return _incident_key_sql(self.incident_rule, self.eid_attr, self.name)

    def _columns(self, stream: str) -> list[str]:
        """The context columns of ``stream`` (all but the event id and time)."""
        return _plain_columns(self.store, stream, self.eid_attr, self.ts_attr)

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
                self.refused += 1
                return False
            self._learned.add(eid)
            self._unsaved.append(eid)
            return True

    def forget_event(self, eid: str, context: Sequence[Mapping[str, Any]]) -> bool:
        """Take a learned event's context back out of E and C_k (the event was retracted):
        the exact inverse of :meth:`learn_event`, so later scores are those of a history
        without it. False when ``eid`` was not learned; ``NotLearned`` when ``context`` is
        not what was learned (nothing changes either way)."""
        with self._lock:
            if eid not in self._learned:
                return False
            self.stats.unlearn_one(list(context))
            self._learned.discard(eid)
            if eid in self._unsaved:
                self._unsaved.remove(eid)
            return True

    def learn_contexts(self, events: pd.DataFrame, contexts: Sequence[pd.DataFrame]) -> list[tuple[str, str]]:
        """Learn materialized events with their context rows (one frame per context-query)."""
        refused = []
        for eid, ctx in _contexts_by_eid(events, contexts, self.eid_attr, self.ts_attr).items():
            if not self.learn_event(eid, ctx):
                refused.append(self.rejected[-1])
        return refused

    def snapshot(self) -> dict[str, Any]:
        """The whole state: the statistics, the ids of every event learned (a
        :class:`~similarity.learned.LearnedIds` copy: as hashes, not JSON; a save writes
        :meth:`state_delta`'s ids), the novelty calibration."""
        with self._lock:
            return {"stats": self.stats.snapshot(), "learned": self._learned.copy(),
                    "novelty": self.novelty.snapshot()}

    def state_delta(self) -> tuple[dict[str, Any], list[str]]:
        """What a periodic save writes (:func:`moirae.ingest.persist.save_similarity`): the
        state without the learned ids, and the ids learned since the last call, taken
        together (the statistics count exactly the ids saved with them), so a save
        never rewrites every learned id."""
        with self._lock:
            new, self._unsaved = self._unsaved, []
            return {"stats": self.stats.snapshot(), "novelty": self.novelty.snapshot()}, new

    def keep_unsaved(self, eids: Sequence[str]) -> None:
        """A save of :meth:`state_delta`'s ids failed: they go with the next one."""
        with self._lock:
            self._unsaved[:0] = list(eids)

    def restore(self, snap: Mapping[str, Any]) -> bool:
        """Continue E, C_k and the novelty calibration from a saved snapshot, under this
        operator's configuration (a changed ``idf`` applies at once). Statistics learned
        under another context declaration are dropped with a warning and relearned from
        the events to come: mixing them would score with synopses of other attributes.
        False when dropped (the saved ids of learned events are then stale too)."""
        try:
            stats = ContextStatistics.restore(snap["stats"], config=self.config)
        except SnapshotError as exc:
            log.warning("similarity recall %r: not restoring its statistics: %s", self.name, exc)
            return False
        learned = snap.get("learned", ())
        learned = learned.copy() if isinstance(learned, LearnedIds) else LearnedIds(learned)
        with self._lock:
            self.stats = stats
            self._learned = learned
            # ids a snapshot held in its JSON (before they were saved apart) are saved apart next
            self._unsaved = sorted(e for e in snap.get("learned_unsaved", ()) if e in learned)
        self.novelty.restore(snap.get("novelty") or {})
        self.source.invalidate_all()  # term ids are checked against the persisted vocabulary again
        return True

    # -- RecallOperator --------------------------------------------------------------------

    def task_for(self, event: Mapping[str, Any]) -> TaskSpec:
        eid = str(event[self.eid_attr] if self.eid_attr in event else event["eid"])
        ts = as_utc(event[self.ts_attr] if self.ts_attr in event else event["ts"], f"event {eid!r} time")
        bound = ts - self.bound if self.bound is not None else None
        key = eid if self.incident_rule is None else self.incident_rule.key_of(event)
        return TaskSpec(operator=self.name, eid=eid, event_ts=ts, query=self.query, params={}, bound=bound,
                        tickets=self.tickets, feedback_period=self.feedback_period if bound is None else None,
                        feedback_timeout=self.feedback_timeout if bound is None else None,
                        extra={"context": list(event.get("context") or []), "incident_key": key})

    def _rule(self) -> IncidentRule:
        return self.incident_rule or IncidentRule((), timedelta(microseconds=1), timedelta(0))

    def start(self, spec: TaskSpec) -> _State:
        with self._lock:
            table = self.stats.table()
        key = str(spec.extra.get("incident_key", spec.eid))
        live_ts = pd.Timestamp(spec.event_ts).tz_convert(None).to_datetime64()
        top = IncidentTop(self.k, self._rule(), spec.eid, key, live_ts, distinct_keys=self.incident_rule is None)
        return _State(spec, QueryScorer(table, list(spec.extra.get("context", []))), TopK(self.k), incidents=top)

    def fetch_chunk(self, state: _State, chunk_id: int, conn: Any = None,
                    timeout_ms: int | None = None) -> ChunkIndex:
        """The Recall Manager's read of one chunk for this operator: the chunk's index
        (cached, persisted or built once, :mod:`recall.similarity_source`), not its rows."""
        return self.source.fetch(chunk_id, conn, timeout_ms)

    def fetch_run(self, state: _State, chunk_ids: Sequence[int], conn: Any = None,
                  timeout_ms: int | None = None) -> tuple[int, ChunkIndex]:
        """The Recall Manager's read of a task's next chunks (newest first,
        :class:`recall.abc.ChunkRunFetcher`): the first ones as one index when they are
        sealed with their indexes in memory (:meth:`ChunkSource.run`, at most
        ``coalesce_rows`` past events), else the first alone (:meth:`fetch_chunk`); with
        how many chunks it holds."""
        if len(chunk_ids) > 1 and self.coalesce_rows > 0:
            got = self.source.run(chunk_ids, self.coalesce_rows)
            if got is not None:
                return got
        return 1, self.source.fetch(chunk_ids[0], conn, timeout_ms)

    def index_rows(self, rows: pd.DataFrame) -> ChunkIndex:
        """One chunk's long-form rows as a :class:`ChunkIndex`, vectorised (new terms grow
        the shared vocabulary, hence the lock)."""
        with self._lock:
            return build_index(rows, self.stats.vocabulary, self.config)

    def on_chunk(self, state: _State, chunk_id: int, covered: Interval,
                 rows: pd.DataFrame | ChunkIndex) -> list[Output]:
        """Score one chunk (its index, or its history-query rows) and merge it into the results."""
        state.covered = covered if state.covered is None else Interval(covered.start, state.covered.end)
        state.oldest_chunk = chunk_id
        before = state.chunks
        state.chunks += rows.span if isinstance(rows, ChunkIndex) else 1
        out = self._scored(state, rows)
        period = state.spec.feedback_period
        if period and state.chunks // period > before // period:  # the task pauses for feedback: say so far
            best = state.incidents.held[0].score if state.incidents.held else 0.0
            out += self._status(state, {"status": "partial", "k": self.k, "found": len(state.rows),
                                        "best_score": float(best), "novel": self.novelty.is_novel(best),
                                        "novelty_threshold": self.novelty.threshold(),
                                        "live_incident": state.incidents.live_incident, "chunks": state.chunks,
                                        **self._reach(state)})
        return out

    def on_history(self, state: _State, progress: SearchProgress) -> list[Output]:
        """How far the search has gone over the raw archive (replica2, :mod:`recall.replica2`):
        kept for the final status; while history remains, a ``searching`` status row says
        so, at most once a second."""
        state.progress = progress
        now = time.monotonic()
        if progress.remaining_chunks == 0 or (state.progress_at is not None and now - state.progress_at < 1.0):
            return []
        state.progress_at = now
        best = state.incidents.held[0].score if state.incidents is not None and state.incidents.held else 0.0
        return self._status(state, {"status": "searching", "k": self.k, "found": len(state.rows),
                                     "best_score": float(best), "chunks": state.chunks, **self._reach(state)})

    def _reach(self, state: _State) -> dict[str, Any]:
        """``searched_back_to``, ``remaining_chunks``, ``materialized_until``,
        ``reprocessed_chunks`` (None where unknown) of a status row."""
        p = state.progress
        starts = [t for t in (state.covered.start if state.covered else None,
                              p.searched_back_to if p else None) if t is not None]
        return {"searched_back_to": min(starts).isoformat() if starts else None,
                "remaining_chunks": None if p is None else p.remaining_chunks,
                "materialized_until": None if p is None or p.materialized_until is None
                else p.materialized_until.isoformat(),
                "reprocessed_chunks": None if p is None else p.reprocessed}

    def _status(self, state: _State, row: dict) -> list[Output]:
        """Replace the held status row (DELETE the previous one, INSERT this one)."""
        out = [] if state.status is None else [self._output(state, OutputKind.DELETE, STATUS_KEY, state.status)]
        state.status = row
        return [*out, self._output(state, OutputKind.INSERT, STATUS_KEY, row)]

    def _scored(self, state: _State, rows: pd.DataFrame | ChunkIndex) -> list[Output]:
        ix = rows if isinstance(rows, ChunkIndex) else self.index_rows(rows)
        if ix.n == 0:
            return []
        chunk = ix.chunk
        if state.newest_ns is None:
            state.newest_ns = pd.Timestamp(state.spec.event_ts - self.exclude_recent).as_unit("ns").value
        newest = state.newest_ns
        latest, at = ix.memo("eid_set", lambda: (int(chunk.ts.max()), frozenset(chunk.eids.tolist())))
        if latest < newest and state.spec.eid not in at:  # the usual case: the whole chunk is past
            keep = np.ones(chunk.n, dtype=bool)
        else:
            keep = (chunk.eids != state.spec.eid) & (chunk.ts < newest)
            if not keep.any():
                return []
        scores = state.scorer.score(chunk).scores
        eids, ts, keys = chunk.eids, chunk.ts, ix.keys.get("key")
        if self.incident_rule and keys is not None:
            keys = ix.memo("keys", lambda: np.where(pd.isna(keys), "", keys))
        else:
            keys = eids
        rule, distinct = self._rule(), self.incident_rule is None
        groups = None
        if keep.all():  # the chunk's incidents depend on the chunk alone: found once, kept with it
            groups = ix.memo(("groups", rule, distinct), lambda: chunk_groups(keys, ts, eids, rule, distinct))
        else:
            eids, ts, keys, scores = eids[keep], ts[keep], keys[keep], scores[keep]
        state.top.offered += len(scores)
        contexts = ix.memo("contexts", lambda: _Contexts(ix, self.stats.vocabulary))
        surrounding = ix.memo("surrounding", lambda: _surrounding_by_eid(ix.surrounding))
        return self._emit(state, eids, ts, keys, scores, contexts, surrounding, groups)

    def _emit(self, state: _State, eids: np.ndarray, ts_ns: np.ndarray, keys: np.ndarray, scores: np.ndarray,
              contexts: Mapping[str, list[dict]], surrounding: Mapping[str, dict[str, list[dict]]],
              groups: ChunkGroups | None = None) -> list[Output]:
        """After scoring: merge one chunk into the held top-k past incidents and emit
        the revisions (DELETE what changed, INSERT it as it is now), best first."""
        deleted, inserted = state.incidents.offer(eids, ts_ns, keys, scores, surrounding, contexts, groups)
        out = [self._output(state, OutputKind.DELETE, p.id, state.rows.pop(p.id)) for p in deleted]
        recorded: Mapping[str, str] = {}
        if inserted and self.resolutions is not None:
            recorded = self.resolutions([x for p in inserted for x in dict.fromkeys((p.id, p.eid))]) or {}
        for rank, p in enumerate(inserted):
            row = self._row(state, p, contexts, recorded)
            row["rank_in_chunk"] = rank
            state.rows[p.id] = row
            out.append(self._output(state, OutputKind.INSERT, p.id, row))
        return out

    def _row(self, state: _State, p: PastIncident, contexts: Mapping[str, list[dict]],
             recorded: Mapping[str, str]) -> dict[str, Any]:
        held = state.explained.get(p.eid)
        if held is None or held[0] is not p.contexts:
            context = p.context
            why = explain(state.scorer.table, state.scorer.bag, context)
            held = state.explained[p.eid] = (p.contexts, context, [c.to_json() for c in why.top(self.explain_terms)])
        _, context, shared = held
        return {"incident": p.id, "past_eid": p.eid, "past_ts": _iso(p.ts),
                "score": float(p.score), "windows": p.windows, "start": _iso(p.first_ns), "end": _iso(p.last_ns),
                "resolution": resolution_of(p, recorded), "context": context,
                "shared_terms": shared,
                "surrounding": p.surrounding}

    def on_end(self, state: _State, reason: EndReason) -> list[Output]:
        held = state.incidents.held if state.incidents is not None else []
        best = held[0].score if held else 0.0
        searched = state.oldest_chunk is not None
        if searched and reason in (EndReason.DONE, EndReason.EXHAUSTED):
            novel = self.novelty.is_novel(best)  # judged before this event joins the calibration
            self.novelty.observe(best)
        else:
            novel = None
        status = {"status": "no_history" if not state.rows and not searched else reason.value,
                  "k": self.k, "found": len(state.rows), "best_score": float(best), "novel": novel,
                  "novelty_threshold": self.novelty.threshold(), "live_incident": state.incidents.live_incident
                  if state.incidents is not None else state.spec.eid, **self._reach(state)}
        whole = self._whole_archive(state, status["searched_back_to"])
        status["whole_archive"] = whole
        if reason is EndReason.DONE and not whole:
            status["status"] = "exhausted"
            status["materialized_until"] = status["materialized_until"] or (
                None if state.covered is None else state.covered.start.isoformat())
        if novel:  # NOVEL of the whole archive, or of the span searched (novel_span)
            status["novel_span"] = [status["searched_back_to"], pd.Timestamp(state.spec.event_ts).isoformat()]
            if whole:
                status["end"] = status["status"]
                status["status"] = "novel"
        return self._status(state, status)

    def _whole_archive(self, state: _State, searched_back_to: str | None) -> bool:
        """Whether the search covered all the history it may read: its time bound, every
        raw unit (replica2 says none remains), or back to the oldest raw chunk."""
        if state.spec.bound is not None:
            return True
        if state.progress is not None:
            return state.progress.remaining_chunks == 0
        raw_oldest = self._archive_oldest()
        if raw_oldest is None:
            return True
        return searched_back_to is not None and pd.Timestamp(searched_back_to) <= raw_oldest

    def _archive_oldest(self) -> pd.Timestamp | None:
        """The start of the oldest raw chunk holding rows (None: no raw history)."""
        raw = [c.start for c in self.store.chunks() if c.rows and not c.stream.startswith(("ev_", "cx_"))]
        return pd.Timestamp(min(raw)) if raw else None

    def _output(self, state: _State, kind: OutputKind, key: str, row: Mapping[str, Any]) -> Output:
        state.seq += 1
        return Output(self.name, state.spec.eid, state.spec.event_ts, kind, state.seq, str(key), dict(row),
                      state.covered)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _iso(ns: int) -> str:
    """``pd.Timestamp(ns, tz="UTC").isoformat()``, through :mod:`datetime` when the time
    has no nanoseconds (a tenth of the cost; one row has three of them;
    tests/recall/test_similarity_iso.py pins the equality)."""
    ns = int(ns)
    if ns % 1000:
        return pd.Timestamp(ns, tz="UTC").isoformat()
    return (_EPOCH + timedelta(microseconds=ns // 1000)).isoformat()


def _history_sql(op: SimilarityRecall) -> str:
    """The operator's history-query: its events and their context and surrounding rows
    in long form ``(eid, ts, attr, value, part)``, each event's incident key as ``value``."""
    parts = [f"SELECT e.{op.eid_attr}::text AS eid, e.{op.ts_attr} AS ts, NULL::text AS attr, "
             f"{op.key_expr()} AS value, 'event' AS part FROM {op.event_stream} e"]
    for kind, streams in (("context", op.context_streams), ("surrounding", op.surrounding_streams)):
        for stream in streams:
            for col in op._columns(stream):
                parts.append(f"SELECT c.{op.eid_attr}::text, c.{op.ts_attr}, '{col}', c.\"{col}\"::text, "
                             f"'{kind}:{stream}' FROM {stream} c")
    return " UNION ALL ".join(parts)


def _incident_key_sql(rule: IncidentRule | None, eid_attr: str, name: str) -> str:
    """The incident key of a past event ``e`` (text) in SQL; without a rule, its eid."""
    keys = () if rule is None else rule.keys
    for c in keys:
        if not c.replace("_", "").isalnum():
            raise SimilarityRecallError(f"incident key {c!r} of {name!r} is not a plain identifier")
    if not keys:
        return f"e.{eid_attr}::text" if rule is None else "''::text"
    if len(keys) == 1:
        return f'e."{keys[0]}"::text'
    return "json_build_array(" + ", ".join(f'e."{c}"' for c in keys) + ")::text"


def _plain_columns(store: ChunkStore, stream: str, eid_attr: str, ts_attr: str) -> list[str]:
    cols = [c for c in store.stream(stream).columns if c not in (eid_attr, ts_attr)]
    for c in cols:
        if not c.replace("_", "").isalnum():
            raise SimilarityRecallError(f"context column {c!r} of {stream!r} is not a plain identifier")
    return cols


def _contexts_by_eid(events: pd.DataFrame, contexts: Sequence[pd.DataFrame], eid_attr: str,
                     ts_attr: str) -> dict[str, list[dict]]:
    """Each event's context tuples (every event of ``events``, with none if it has none)."""
    by_eid: dict[str, list[dict]] = {str(e): [] for e in events[eid_attr]} if len(events) else {}
    for frame in contexts:
        if frame is None or frame.empty:
            continue
        cols = [c for c in frame.columns if c not in (eid_attr, ts_attr)]
        for eid, *vals in frame[[eid_attr, *cols]].itertuples(index=False):
            by_eid.setdefault(str(eid), []).append({c: v for c, v in zip(cols, vals, strict=True)})
    return by_eid


def _surrounding_by_eid(frame: pd.DataFrame) -> dict[str, dict[str, list[dict]]]:
    """``{eid: {stream: [row, ...]}}`` of a chunk's long-form surrounding rows."""
    out: dict[str, dict[str, dict[Any, dict]]] = {}
    for eid, ts, attr, value, part in frame[["eid", "ts", "attr", "value", "part"]].itertuples(index=False):
        out.setdefault(eid, {}).setdefault(part.split(":", 1)[1], {}).setdefault(ts, {})[attr] = value
    return {e: {stream: list(rows.values()) for stream, rows in by.items()} for e, by in out.items()}


class _Contexts(Mapping):
    """``eid -> context`` of one chunk index, made only for the eids asked for (results)."""

    def __init__(self, ix: ChunkIndex, vocabulary) -> None:
        self.ix, self.vocabulary = ix, vocabulary
        self._at = pd.Index(ix.chunk.eids)

    def __getitem__(self, eid: str) -> list[dict]:
        try:
            i = self._at.get_loc(eid)
        except KeyError:
            raise KeyError(eid) from None
        return self.ix.context_of(int(i), self.vocabulary)

    def __iter__(self):
        return iter(self._at)

    def __len__(self) -> int:
        return len(self._at)
