"""Late rows into windows that already alerted: their alerts' polynomials gain the rows' terms (H 6).

Spark drops a row that arrives after its window left (below the watermark); the archive
keeps it. The window's alert then has a polynomial over fewer rows than the archive
holds for that window, and a retraction or correction evaluated on it would miss the
late row. HUKA maintains a polynomial under insert by adding the inserted tuple's term:
:func:`absorb` does that for every window event-query over one source
(:func:`ananke.poly_maint.late_terms`, :meth:`ananke.poly_store.PolyStore.add_terms`).

A window's alert is found from the rows the archive holds for that window: the sink
tuple of the query whose polynomial names one of them (the forward lookup,
:meth:`~ananke.poly_store.PolyStore.affected`) and whose time is the window's
(``window_time``, the end less 1 µs). A window with no alert is left to the hidden-alert
check (:mod:`moirae.retract.hidden`). Adding a term twice adds nothing, so absorbing the
same rows again (a replayed batch) changes nothing.

:class:`LateFollower` finds the late rows as the archive receives them and absorbs them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from ananke.ids import from_micros, micros
from ananke.poly_maint import late_terms
from ananke.polynomial import PolyPlan
from archive.contributors import window_rows
from archive.names import partition_name, quote


def absorb(archiver, polys, plans: Mapping[str, PolyPlan], stream: str,
           rows: Sequence[tuple[int, Mapping[str, Any]]]) -> dict[str, int]:
    """Add the archived late ``rows`` of ``stream`` (``(source id, values)``, the values
    holding the event time and every column) to the polynomials of the alerts of the
    windows they fall in, for each window plan of ``plans`` over ``stream``; return
    ``{event-query: terms added}`` (queries that gained none left out)."""
    out: dict[str, int] = {}
    if not rows:
        return out
    for name, plan in sorted(plans.items()):
        if plan.kind != "window" or plan.degree != 1 or plan.streams != (stream,) or not plan.size_us:
            continue
        terms = late_terms(plan, rows)
        if not terms:
            continue
        windows = list(terms)
        held = window_rows(archiver, stream, plan.keys, windows)
        by_time: dict[datetime, list[int]] = {}
        for w, cands in zip(windows, held, strict=True):
            by_time.setdefault(w[2] - timedelta(microseconds=1), []).extend(sid for sid, _, _ in cands)
        ids = sorted({sid for sids in by_time.values() for sid in sids})
        alert_of: dict[tuple, int] = {}
        found = [(sid, ts) for sink, sid, ts in polys.affected(ids) if sink == name] if ids else []
        if found:
            # a sink tuple stands for the window at its time whose rows its polynomial names
            named = {sid: set(p.ids.tolist()) for sid, p in polys.get(name, [s for s, _ in found]).items()}
            for w, cands in zip(windows, held, strict=True):
                at = w[2] - timedelta(microseconds=1)
                mine = {sid for sid, _, _ in cands}
                for sink_id, ts in found:
                    if ts == at and named.get(sink_id, set()) & mine:
                        alert_of[w] = sink_id
                        break
        add = {alert_of[w]: p for w, p in terms.items() if w in alert_of}
        if add:
            got = polys.add_terms(name, add)
            if got:
                out[name] = got
    return out


class LateFollower:
    """Finds the late rows the archive receives and absorbs them (:func:`absorb`), one
    :meth:`sweep` at a time (a maintenance pass calls it every few seconds), at a cost
    that follows the late rows and the alerts, not the ingest.

    Spark drops a row when a window it falls in has ended at or below the watermark its
    micro-batch runs with (the watermark the previous batch reported, which
    ``emitted(query)``, ``EventFlow.emitted_below``, returns once that batch ended). The
    archive appends it to the heap of its chunk's partition like any other. Each sweep
    takes one snapshot (a REPEATABLE READ transaction), then reads each query's
    watermark ``wm``; of every partition it reads only the heap tuples past a block
    cursor (``ctid >= (start,0)``: a TID range scan), and PostgreSQL returns only
    the candidates among them, for each window query over the stream:

    1. rows one of whose windows ended at or below ``lo``, the watermark read at the
       sweep the cursor dates from (``ts < bound``, :func:`closed_below`; with a slide,
       the earliest window holding the row). Such a row became visible after ``lo`` was
       read, so after its window had left: Spark dropped it (or aggregated it while the
       archive lagged, which adds nothing);
    2. rows of a window that ended in ``(lo, wm]`` and alerted (a stored polynomial,
       :meth:`~ananke.poly_store.PolyStore.between`), of the alert's key values, and
       not in any such alert's polynomial (a row one window kept is in the later windows
       holding it too: Spark drops a row's late windows, the earlier ones first). Most
       on-time rows fall in windows that closed in that band; without an alert, or
       named by its polynomial, none of them is read into Python.

    Together they cover every row of the range whose window has ended at or below
    ``wm``, alerted, and lacks the row. What is passed: a row is read by every sweep
    whose cursor precedes it, and the cursor moves past a block only once the rows that
    can be in it have been read by two sweeps: the sweep after the one that first saw
    them, too. A row is late for a window if the micro-batch that read it ran with a
    watermark at or above the window's end; that batch's predecessor had ended, and
    reported it, before the row can be read, when the event-query archives its source
    itself (a shared read, :mod:`archive.shared`: the row is written inside the batch
    that reads it), and for a source with an archive query of its own, when the
    event-query reads a row no later than one sweep after the archive stored it. So at
    the second of the sweeps that read it, ``wm`` is at or above the end of every window
    the row was dropped from, and the row is a candidate (1 or 2) there. Rows of a
    transaction still in progress are invisible and may sit below blocks written later,
    so the cursor moves to a sweep's block count (less one: its last block may still
    fill) only when every transaction in progress at that sweep's snapshot ended before
    the snapshot of the sweep before this one (``xmax`` at or below that ``xmin``).
    PostgreSQL may still place a heap tuple in free space below the cursor (a page
    freed by a vacuum, or the page a backend last inserted into, which its next insert
    tries first): a follower made with ``whole=True`` finds those. Its cursor never
    leaves the first block, so each of its sweeps reads every changed partition whole,
    against the same two candidate classes dated from its own previous sweep (a row
    visible to that sweep's snapshot was read by it, wherever it lies); the maintenance
    pass runs one beside the moving follower, every :data:`WHOLE_EVERY` of its sweeps.

    The partitions it finds at its first sweep are read from their end (older rows
    were not followed), by a ``whole`` follower from their start; those created later
    from their start; one that shrank (rewritten) from its start again. A chunk whose row count (the archive's catalog)
    and size have not changed for two sweeps is not read: a sweep where nothing was
    written costs one catalog read and one size read per stream and one snapshot.
    :attr:`rows_read` counts the rows handed to :func:`absorb`."""

    #: the sweeps a row is read by before the cursor may pass it
    SWEEPS = 2

    def __init__(self, archiver, polys, plans: Callable[[], Mapping[str, PolyPlan]],
                 emitted: Callable[[str], datetime | None], whole: bool = False) -> None:
        self.archiver = archiver
        self.whole = whole  # the cursor stays at the first block: every sweep reads whole partitions
        self.polys = polys
        self.plans = plans
        self.emitted = emitted
        self.rows_read = 0
        self._n = 0  # sweeps done
        self._snaps: dict[int, _Snap] = {}  # sweep -> its snapshot bounds and watermarks
        self._chunks: dict[tuple[str, int], _Cursor] = {}
        self._keys: dict[tuple[str, int], str | None] = {}  # (query, sink id) -> its key values as text

    def sweep(self) -> dict[str, int]:
        """One pass over every followed stream; ``{event-query: terms added}``."""
        by_stream: dict[str, dict[str, PolyPlan]] = {}
        for name, plan in self.plans().items():
            if plan.kind == "window" and plan.degree == 1 and len(plan.streams) == 1 and plan.size_us:
                by_stream.setdefault(plan.streams[0], {})[name] = plan
        n = self._n + 1
        self._memo: dict[tuple, list] = {}
        sizes = {s: self._sizes(s) for s in sorted(by_stream)}  # before the snapshot: see _Cursor
        out: dict[str, int] = {}
        kept = {k: c.copy() for k, c in self._chunks.items()}
        try:
            with self.archiver.db.connection(autocommit=False) as conn, conn.cursor() as cur:
                cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                cur.execute("SELECT pg_snapshot_xmin(s)::text::bigint, pg_snapshot_xmax(s)::text::bigint, "
                            "ARRAY(SELECT x::text::bigint FROM pg_snapshot_xip(s) x) FROM pg_current_snapshot() s")
                xmin, xmax, xip = cur.fetchone()
                marks = {q: self.emitted(q) for plans in by_stream.values() for q in plans}
                snap = _Snap(int(xmin), int(xmax), marks, [int(x) % 2**32 for x in xip])
                found = {stream: self._candidates(cur, n, stream, plans, sizes[stream], snap)
                         for stream, plans in sorted(by_stream.items())}
            for stream, rows in found.items():  # the snapshot released: absorb reads and writes on its own
                self.rows_read += len(rows)
                got = absorb(self.archiver, self.polys, by_stream[stream], stream, rows)
                for name, k in got.items():
                    out[name] = out.get(name, 0) + k
        except BaseException:  # read the same rows again next time
            self._chunks = kept
            raise
        self._snaps[n] = snap
        self._n = n
        self._advance(n)
        return out

    def _sizes(self, stream: str) -> dict[int, tuple[Any, int | None]]:
        """``{chunk id: (catalog row, heap blocks or None: no table)}`` of a stream's chunks."""
        chunks = self.archiver.chunks(stream)
        parts = [partition_name(stream, c.chunk_id) for c in chunks]
        with self.archiver.db.connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT p, pg_relation_size(to_regclass(quote_ident(p))) / current_setting('block_size')::bigint "
                        "FROM unnest(%s::text[]) p", (parts,))
            blocks = dict(cur.fetchall())
        return {c.chunk_id: (c, None if blocks.get(p) is None else int(blocks[p])) for c, p in zip(chunks, parts,
                                                                                                   strict=True)}

    def _candidates(self, cur, n: int, stream: str, plans: Mapping[str, PolyPlan],
                    sizes: Mapping[int, tuple[Any, int | None]], snap: _Snap) -> list[tuple[int, dict[str, Any]]]:
        spec = self.archiver.stream(stream)
        cols = [spec.ts_col, *spec.columns]
        sel = ", ".join(f"r.{quote(c)}" for c in cols)
        ts = f"r.{quote(spec.ts_col)}"
        rows: list[tuple[int, dict[str, Any]]] = []
        for key in [k for k in self._chunks if k[0] == stream and k[1] not in sizes]:
            del self._chunks[key]  # dropped from the catalog
        for chunk_id, (chunk, blocks) in sorted(sizes.items()):
            key = (stream, chunk_id)
            if blocks is None:  # no table (dropped)
                self._chunks.pop(key, None)
                continue
            cur_ = self._chunks.get(key)
            if cur_ is None:  # first seen: existing partitions from their end, new ones from their start
                # (no watermark to date its rows from: its rows may be older than the last snapshot)
                cur_ = self._chunks[key] = _Cursor(max(blocks - 1, 0) if self._n == 0 and not self.whole else 0,
                                                   None)
                if self._n == 0:
                    cur_.seen[n] = blocks
                    cur_.rows, cur_.blocks = chunk.rows, blocks
                    continue
            if cur_.start > blocks:  # rewritten
                cur_.start, cur_.since, cur_.seen = 0, None, {}
            cur_.seen[n] = blocks
            cur_.same = cur_.same + 1 if (cur_.rows, cur_.blocks) == (chunk.rows, blocks) else 0
            cur_.rows, cur_.blocks = chunk.rows, blocks
            if cur_.same >= self.SWEEPS:
                continue  # nothing written since the sweeps that read its last rows
            then = self._snaps.get(cur_.since) if cur_.since is not None else None
            lo = then.marks if then is not None else {}
            # a row that snapshot saw was read by that sweep, against its own watermarks
            fresh, fresh_params = ("true", []) if then is None else (
                "(((r.xmin::text::bigint - %s) & 4294967295) < 2147483648 OR r.xmin::text::bigint = ANY(%s))",
                [then.xmax % 2**32, then.xip])
            where, params = [], []
            for name, plan in sorted(plans.items()):
                wm, before = snap.marks.get(name), lo.get(name)
                if wm is None:
                    continue
                if before is not None:  # 1: surely late
                    bound = closed_below(plan, min(before, wm))
                    if bound > chunk.start:
                        where.append(f"({ts} < %s AND {fresh})")
                        params += [bound, *fresh_params]
                band = self._band(cur, stream, name, plan, before, wm, chunk)
                if band is not None:  # 2: in a window that closed since and alerted, and not in its polynomial
                    tees, keys, ids = band
                    kt = "ROW(" + ", ".join(f"r.{quote(k)}" for k in plan.keys) + ")::text" if plan.keys else "''"
                    where.append(f"({ts} >= %s AND {ts} <= %s "  # the alerts' span first: cheap
                                 f"AND EXISTS (SELECT 1 FROM unnest(%s::timestamptz[], %s::text[]) a(t, k) "
                                 f"WHERE a.t >= {ts} AND a.t < {ts} + %s * interval '1 microsecond' "
                                 f"AND (a.k IS NULL OR a.k = {kt})) AND NOT (r._sid = ANY(%s::bigint[])))")
                    params += [min(tees) - timedelta(microseconds=plan.size_us), max(tees),
                               tees, keys, plan.size_us, ids]
            if where:
                cur.execute(f"SELECT r._sid, {sel} FROM {quote(partition_name(stream, chunk_id))} r "
                            f"WHERE r.ctid >= %s::tid AND ({' OR '.join(where)})", [f"({cur_.start},0)", *params])
                for sid, *vals in cur.fetchall():
                    rows.append((int(sid), dict(zip(cols, vals, strict=True))))
        return rows

    def _band(self, cur, stream: str, name: str, plan: PolyPlan, before: datetime | None, wm: datetime,
              chunk) -> tuple[list[datetime], list[str | None], list[int]] | None:
        """The alerts of ``name`` whose window ended in ``(before, wm]`` and may hold rows
        of ``chunk``: their times, key values (text; None: unknown, any key) and every
        id their polynomials name; None without one."""
        one = timedelta(microseconds=1)
        upto = min(wm, chunk.end + timedelta(microseconds=plan.size_us)) - one
        after = max(before - one, chunk.start - one) if before is not None else chunk.start - one
        if upto <= after:
            return None
        memo = (name, after, upto)
        if memo not in self._memo:  # one read per query and bounds in a sweep
            self._memo[memo] = self.polys.between(name, after, upto)
        found = self._memo[memo]
        if not found:
            return None
        self._look_up_keys(cur, stream, name, plan, found)
        tees, keys, ids = [], [], []
        for sink_id, t, poly in found:
            tees.append(t)
            keys.append(self._keys.get((name, sink_id)))
            ids.extend(poly.ids.tolist())
        return tees, keys, ids

    def _look_up_keys(self, cur, stream: str, name: str, plan: PolyPlan, found) -> None:
        """Record the key values (``ROW(..)::text``; None when not found: any key) of each
        alert of ``found`` not looked up yet, from the archived row of its polynomial's
        first id, all in one read (an alert is looked up once)."""
        todo = [(sink_id, t, poly) for sink_id, t, poly in found if (name, sink_id) not in self._keys]
        if not todo:
            return
        if len(self._keys) + len(todo) > 100_000:
            self._keys.clear()
        if not plan.keys:
            self._keys.update(((name, s), "") for s, _, _ in todo)
            return
        self._keys.update(((name, s), None) for s, _, _ in todo)
        asked = [(s, t, int(p.ids[0])) for s, t, p in todo if len(p.ids)]
        if not asked:
            return
        spec = self.archiver.stream(stream)
        ts = quote(spec.ts_col)
        size = timedelta(microseconds=plan.size_us)
        kt = "ROW(" + ", ".join(f"r.{quote(k)}" for k in plan.keys) + ")::text"
        # each alert's first id, looked up in its window's time range (the partitions' time
        # bounds prune; the index on the time finds the rows)
        cur.execute(f"SELECT a.s, {kt} FROM unnest(%s::bigint[], %s::bigint[], %s::timestamptz[]) a(s, id, hi) "
                    f"JOIN {quote(stream)} r ON r._sid = a.id AND r.{ts} >= a.hi - %s AND r.{ts} < a.hi "
                    f"AND r.{ts} >= %s AND r.{ts} < %s",
                    ([s for s, _, _ in asked], [i for _, _, i in asked],
                     [t + timedelta(microseconds=1) for _, t, _ in asked], size,
                     min(t for _, t, _ in asked) + timedelta(microseconds=1) - size,
                     max(t for _, t, _ in asked) + timedelta(microseconds=1)))
        for s, key in cur.fetchall():
            self._keys[(name, int(s))] = key

    def _advance(self, n: int) -> None:
        """Move each chunk's cursor to the latest block count it may pass (see the class)."""
        past = self._snaps.get(n - self.SWEEPS + 1)
        for c in self._chunks.values():
            ok = [i for i in c.seen if i <= n - self.SWEEPS + 1 and past is not None
                  and self._snaps[i].xmax <= past.xmin]
            if ok:
                i = max(ok)
                c.start, c.since = 0 if self.whole else max(c.start, c.seen[i] - 1), i
                c.seen = {j: b for j, b in c.seen.items() if j >= i}
        oldest = min([c.since for c in self._chunks.values() if c.since is not None]
                     + [j for c in self._chunks.values() for j in c.seen] + [n - self.SWEEPS + 1])
        self._snaps = {j: s for j, s in self._snaps.items() if j >= oldest}


WHOLE_EVERY = 6
"""The moving follower's sweeps per sweep of the ``whole`` one (:class:`LateFollower`)."""


@dataclass
class _Snap:
    """One sweep's snapshot (its ``xmin``, ``xmax``, transactions in progress) and the
    watermarks read after it. A heap tuple's ``xmin`` is 32 bits: it is at or past
    ``xmax`` when their difference modulo 2^32 is below 2^31 (transaction ids in use
    lie within 2^31 of each other)."""

    xmin: int
    xmax: int
    marks: dict[str, datetime | None]
    xip: list[int] = field(default_factory=list)  # its transactions in progress, 32-bit

@dataclass
class _Cursor:
    """A chunk's reading state: the first block to read, the sweep whose watermarks
    its rows date from (None: no such sweep), each sweep's block count measured
    before its snapshot, and the catalog row count and size at its last sweep."""

    start: int
    since: int | None
    seen: dict[int, int] = field(default_factory=dict)
    rows: int | None = None
    blocks: int | None = None
    same: int = 0  # sweeps in a row that found its row count and size unchanged

    def copy(self) -> _Cursor:
        return _Cursor(self.start, self.since, dict(self.seen), self.rows, self.blocks, self.same)


def closed_below(plan: PolyPlan, wm: datetime) -> datetime:
    """The event time below which a row falls in a window of ``plan`` that ended at or
    below ``wm``: its earliest window (starts at multiples of the slide since the epoch)
    ends at or below ``wm`` exactly when its time is below the answer (5-minute tumbling
    windows and ``wm`` 00:07: 00:05; sliding by a minute and ``wm`` 00:07:30: 00:07)."""
    slide = plan.slide_us or plan.size_us
    return from_micros((micros(wm) - plan.size_us) // slide * slide + plan.size_us)
