"""The resolver of window digests for a live event-query (ananke.digest, A 5.1 on Moirae).

A sink batch's windows that kept only a digest get their source tuples from the archive
(:func:`archive.contributors.window_rows`), matched against the digest
(:func:`ananke.digest.match`). Before reading, the resolver waits for the source's
archive to reach the newest window's end, as it does for context-queries; a window whose
tuples are still short of its count is read again, with backoff, until the same timeout
(not once :data:`MISSES_BEFORE_NO_REREAD` windows in a row went unmatched: that source
gives the event-query other rows than the archive, and each batch would stall).

Nothing is dropped silently: a window that cannot be matched gets every candidate the
archive holds (a superset when Spark dropped tuples the digest could not single out,
a subset when the archive never caught up), is logged with its key and bounds, and is
counted in :attr:`ArchiveResolver.stats` (shown by ``/api/status``'s live section).

A digest window's polynomial needs its tuples' values (:meth:`ArchiveResolver.values`,
ananke.poly_spark). The columns its last call asked for are read with the windows' rows
in the next resolve, and kept until the one after, so a batch's values come from the
read that resolved its digests, not from a second read of the archive; ids the kept
rows lack (a batch resolved before the columns were known, or rerun later) are read.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Sequence
from datetime import datetime

from ananke.digest import Digest, DigestSpec, match
from ananke.ids import from_micros
from archive import Archiver
from archive.brin_summary import Summarizer
from archive.contributors import ensure_time_index, time_index, unarchivable, window_rows
from archive.names import quote
from moirae.ingest.archive_waits import ArchiveWaits

log = logging.getLogger(__name__)

#: after this many unmatched windows in a row (and until one matches), a short window is
#: not read again: it is taken as the archive holds it at once
MISSES_BEFORE_NO_REREAD = 3


def _weak_now(summaries: Summarizer):
    """``summaries.now`` that does not keep ``summaries`` alive (a dropped resolver's
    summarizer still ends its passes, archive.brin_summary); 0 once it is gone."""
    ref = weakref.ref(summaries)

    def now(lo: datetime, hi: datetime) -> int:
        s = ref()
        return 0 if s is None else s.now(lo, hi)

    return now


class ArchiveResolver:
    """Resolves one event-query's window digests against the archive."""

    def __init__(self, archiver: Archiver, spec: DigestSpec, waits: ArchiveWaits, trigger_s: float) -> None:
        self.archiver = archiver
        self.waits = waits
        self.trigger_s = trigger_s
        self.spec = spec
        #: the stream's rows are written sorted by the windows' keys (the first such
        #: resolver of the stream wins), so its BRIN index skips other keys' rows
        self.cluster = ensure_time_index(archiver, spec.stream, spec.keys)
        #: the stream's BRIN summaries kept up with its newest rows every quarter trigger
        #: after this process archived more of it, off the batch thread
        #: (archive.brin_summary), from when the query starts
        self.summaries = Summarizer(archiver, spec.stream, lambda: time_index(archiver, spec.stream), trigger_s / 4,
                                    written=lambda: waits.written(spec.stream))
        #: a history-query over the stream's present chunks (a Recall's) brings their
        #: summaries up to date through the same summarizer first, one pass at a time
        #: (archive.archiver.Archiver.summarize_for)
        if isinstance(getattr(archiver, "summarizers", None), dict):
            archiver.summarizers[spec.stream] = _weak_now(self.summaries)
        self._lock = threading.Lock()
        #: windows resolved; read again after waiting; tuples removed as dropped by Spark;
        #: windows left unmatched; seconds waiting for the archive to reach the windows'
        #: end; seconds reading and matching (rereads and their backoff included)
        self.stats = {"windows": 0, "reread": 0, "late_removed": 0, "unmatched": 0, "wait_seconds": 0.0,
                      "read_seconds": 0.0}
        self._logged = -1e9  # monotonic time of the last unmatched-window line
        self._quiet = 0  # unmatched windows counted since then
        self._misses = 0  # unmatched windows since the last matched one
        #: the columns :meth:`values` was last asked for, read with the windows' rows
        self._value_columns: tuple[str, ...] = ()
        #: the last resolve's rows' values of ``_value_columns``, by source id
        self._kept: tuple[tuple[str, ...], dict[int, tuple]] = ((), {})

    def timeout(self) -> float:
        """How long to wait for the archive: as for context-queries (moirae.deploy.manager)."""
        return 5 * self.trigger_s + 2

    def __call__(self, spec: DigestSpec, digests: Sequence[Digest]) -> list[list[tuple[int, datetime]]]:
        if spec != self.spec:
            raise ValueError(f"resolver of {self.spec} given digests of {spec}")
        if not digests:
            return []
        windows = [(d.keys, from_micros(d.lo_us), from_micros(d.hi_us)) for d in digests]
        timeout = self.timeout()
        t0 = time.monotonic()
        self.waits.wait([spec.stream], max(w[2] for w in windows), timeout,
                                  why=f"provenance of {len(digests)} window(s) of {spec.stream!r}")
        waited = time.monotonic() - t0
        # a source no longer archived (the read archiving it stopped first) gets no newer row
        stopped = self.waits.stopped_short([spec.stream], max(w[2] for w in windows))
        # a stream whose last windows all went unmatched gives this query other rows than
        # its archive (a source sampled per query): rereading would only stall each batch
        deadline = t0 + timeout if self._misses < MISSES_BEFORE_NO_REREAD and not stopped else 0.0
        out: list[list[tuple[int, datetime]] | None] = [None] * len(digests)
        pending, delay, reread = [], 0.05, 0
        columns, kept = self._value_columns, {}
        for i, d in enumerate(digests):
            why = unarchivable(d.keys)
            if why is not None:  # its tuples are dead letters: nothing to read or wait for
                out[i] = []
                self._unmatched(windows[i], d, 0, f"a key value {why}: its tuples are dead letters")
            else:
                pending.append(i)
        self.summaries.ensure()  # not after stop(): a batch may still run while its query stops
        if pending:
            self.summaries.now(min(windows[i][1] for i in pending), max(windows[i][2] for i in pending))
        while pending:
            rows = window_rows(self.archiver, spec.stream, spec.keys, [windows[i] for i in pending],
                               summarize=False, columns=columns)
            if columns:
                for cands in rows:
                    kept.update((r[0], r[3:]) for r in cands)
                rows = [[r[:3] for r in cands] for cands in rows]
            short = []
            for i, cands in zip(pending, rows, strict=True):
                d = digests[i]
                m = match(cands, d.n, d.x)
                if m.rows is not None:
                    out[i] = [(sid, ts) for sid, ts, _ in m.rows]
                    with self._lock:
                        self.stats["late_removed"] += m.removed
                        self._misses = 0
                elif m.short and time.monotonic() + delay < deadline:
                    short.append(i)
                else:
                    out[i] = [(sid, ts) for sid, ts, _ in cands]
                    self._unmatched(windows[i], d, len(cands), self._stopped_why(stopped, windows[i][2]))
            if short:
                reread += len(short)
                time.sleep(delay)
                delay = min(delay * 2, 1.0)
            pending = short
        self._kept = (columns, kept)
        with self._lock:
            self.stats["windows"] += len(digests)
            self.stats["reread"] += reread
            self.stats["wait_seconds"] += waited
            self.stats["read_seconds"] += time.monotonic() - t0 - waited
        return out  # type: ignore[return-value]

    def _stopped_why(self, stopped: dict, hi: datetime) -> str:
        """Why a window ending at ``hi`` went short, when its source's archive stopped
        before ``hi`` (:meth:`ArchiveWaits.stopped_short`); else "" (the default reason)."""
        if self.spec.stream not in stopped:
            return ""
        upto = stopped[self.spec.stream]
        if upto is not None and upto >= hi:
            return ""
        return (f"the archive of {self.spec.stream!r} stopped short of the window's end (archived up to "
                f"{'nothing' if upto is None else upto.isoformat()}): the query archiving it was stopped while "
                "this one still ran")

    def _unmatched(self, window, d: Digest, have: int, why: str = "") -> None:
        """Count an unmatched window; log it, or (within a minute of the last line) only
        count it for the next line, so a source that never matches does not flood the log."""
        now = time.monotonic()
        with self._lock:
            self.stats["unmatched"] += 1
            self._misses += 1
            self._quiet += 1
            if now - self._logged < 60:
                return
            quiet, self._quiet, self._logged = self._quiet - 1, 0, now
        log.warning("moirae: provenance of the window %s..%s of %r keys %s=%s: the archive holds %d tuple(s), the "
                    "window aggregated %d%s; taking the archive's (%s)%s",
                    window[1].isoformat(), window[2].isoformat(), self.spec.stream, list(self.spec.keys),
                    list(d.keys), have, d.n, " with another id XOR" if have == d.n else "",
                    why or "a source that gives each streaming query other rows, such as one stamped with the "
                    "query's own clock, does this",
                    f"; {quiet} more unmatched window(s) since the last such line" if quiet else "")

    def values(self, stream: str, columns, ids, lo: datetime, hi: datetime) -> dict[int, tuple]:
        """The archived values of ``columns`` of the source tuples ``ids`` of ``stream``
        with event time in ``[lo, hi)``, by id: a digest window's per-tuple values for
        its polynomial (ananke.poly_spark), read with the ids the digest resolved to: those
        the last resolve's read kept (module doc), the rest from the archive."""
        if not ids:
            return {}
        columns = tuple(columns)
        self._value_columns = columns if stream == self.spec.stream else self._value_columns
        held, kept = self._kept
        out: dict[int, tuple] = {}
        if held == columns and stream == self.spec.stream:
            rest = []
            for i in ids:
                v = kept.get(i)
                if v is None:
                    rest.append(i)
                else:
                    out[i] = v
            if not rest:
                return out
            ids = rest
        spec = self.archiver.stream(stream)
        ts = quote(spec.ts_col)
        cols = ", ".join(quote(c) for c in columns)
        with self.archiver.db.connection() as conn, conn.cursor() as cur:
            cur.execute(f"SELECT _sid, {cols} FROM {quote(spec.name)} WHERE {ts} >= %s AND {ts} < %s "
                        "AND _sid = ANY(%s::bigint[])", (lo, hi, list(ids)))
            out.update((r[0], tuple(r[1:])) for r in cur.fetchall())
        return out

    def start(self) -> None:
        """Start keeping the stream's BRIN summaries up (idempotent; a batch's digests
        start them too)."""
        self.summaries.start()

    def stop(self) -> None:
        """Stop the background summaries."""
        self.summaries.stop()

    def status(self) -> dict:
        with self._lock:
            return {**self.stats, "wait_seconds": round(self.stats["wait_seconds"], 3),
                    "read_seconds": round(self.stats["read_seconds"], 3), "summaries": self.summaries.status()}
