"""Archived rows as the active retractions say they are, for re-runs over the archive.

Retracted rows stay in the archive (:mod:`moirae.retract.store`), so every path that runs
a query over archived rows again must apply the flags itself, or a retracted row counts
again and a retracted alert comes back. :class:`ArchiveFlags` is what batch
re-materialization (``moirae/materialize/replica.py:Materializer.detect``: ``moirae
rematerialize``, replica1 and replica2) applies: a raw frame read with its source ids loses
its removed rows and takes its corrected rows' new values (:meth:`ArchiveFlags.rows`), and
the events detected lose those of alerts now retracted (:meth:`ArchiveFlags.events`), so
what is written back equals a run over an archive that never held the bad values.
History-queries (a new alert's Recall) and the Recall re-evaluation apply the same flags
inside SQL (:mod:`archive.row_flags`; :mod:`moirae.retract.norms`).

>>> import pandas as pd
>>> f = pd.DataFrame({"_sid": [1, 2, 3], "bw": [90.0, 10.0, 20.0]})
>>> apply_flags(f, {1}, {3: {"bw": 99.0}}).to_dict("list")
{'bw': [10.0, 99.0]}
"""

from __future__ import annotations

import threading
from bisect import bisect_left, bisect_right
from collections.abc import Mapping
from typing import Any

import pandas as pd

from archive.names import quote
from archive.schema import table_exists


def apply_flags(frame: pd.DataFrame, removed: set[int], corrected: Mapping[int, Mapping[str, Any]]) -> pd.DataFrame:
    """``frame`` (with a ``_sid`` column) without its ``removed`` rows, its ``corrected``
    rows holding their new values, and without ``_sid``."""
    sids = frame["_sid"].astype("int64")
    out = frame[~sids.isin(list(removed))].copy() if removed else frame.copy()
    if corrected:
        for i, sid in zip(out.index, out["_sid"].astype("int64"), strict=True):
            for col, value in corrected.get(int(sid), {}).items():
                if col in out.columns:
                    out.at[i, col] = value
    return out.drop(columns=["_sid"]).reset_index(drop=True)


class ArchiveFlags:
    """The active flags of the engine's database ``db`` (module doc); cheap when no
    retraction was ever made (its tables do not exist).

    It is also the archive's :class:`archive.row_flags.RowFlags` (``Archiver.row_flags``,
    set by the engine): every history-query over a stream with active flags reads it
    through them, so the Recall of an alert raised after a retraction never sees a
    removed row and sees a corrected one's new values. Which streams have flags, and a
    flagged stream's flags, are read once and kept until :meth:`invalidate` (a
    retraction, an undo or late rows flagged: :class:`moirae.retract.service.Retractions`
    calls it), so a history-query over a stream without flags costs one set lookup more,
    and one over a flagged stream reads only the corrected rows of its chunk."""

    def __init__(self, db) -> None:
        self.db = db
        self._streams: frozenset[str] | None = None
        #: stream -> (flag times, ascending; (source id, new values or None) at each)
        self._kept: dict[str, tuple[list, list[tuple[int, dict | None]]]] = {}
        self._lock = threading.Lock()

    def invalidate(self) -> None:
        """The flags changed: read them again on next use."""
        with self._lock:
            self._streams = None
            self._kept = {}

    def flagged_streams(self) -> frozenset[str]:
        """The streams with an active flag (kept until :meth:`invalidate`)."""
        streams = self._streams
        if streams is not None:
            return streams
        with self._lock:
            if self._streams is None:
                with self.db.connection() as conn, conn.cursor() as cur:
                    if not self._exists(cur):
                        self._streams = frozenset()
                    else:
                        cur.execute("SELECT DISTINCT x.stream FROM moirae_retracted_rows x JOIN moirae_retractions r "
                                    "ON r.id = x.retraction WHERE r.undone_at IS NULL")
                        self._streams = frozenset(r[0] for r in cur.fetchall())
            return self._streams

    def chunk_flags(self, stream: str, lo, hi) -> tuple[list[int], list[dict]]:
        """:meth:`archive.row_flags.RowFlags.chunk_flags`: the flagged ids of ``stream``
        with ``lo <= ts < hi``, and its corrected rows there, whole, with their new values."""
        times, flags = self._stream_flags(stream)
        inside = flags[bisect_left(times, lo):bisect_left(times, hi)]
        corrected = {sid: nv for sid, nv in inside if nv is not None}
        rows: list[dict] = []
        if corrected:
            with self.db.connection() as conn, conn.cursor() as cur:
                cur.execute(f"SELECT _sid, to_jsonb(t) FROM {quote(stream)} t WHERE _sid = ANY(%s)",
                            (sorted(corrected),))
                rows = [{**row, **corrected[int(sid)]} for sid, row in cur.fetchall()]
        return sorted(sid for sid, _ in inside), rows

    def _stream_flags(self, stream: str) -> tuple[list, list[tuple[int, dict | None]]]:
        """``stream``'s active flags by time: a removed row with None (whatever else
        flags it), a corrected one with its newest values (kept until :meth:`invalidate`)."""
        kept = self._kept.get(stream)
        if kept is not None:
            return kept
        with self._lock:
            removed, corrected = self.flags(stream)
            at: dict[int, Any] = {}
            if removed or corrected:
                with self.db.connection() as conn, conn.cursor() as cur:
                    cur.execute("SELECT DISTINCT ON (x.source_id) x.source_id, x.ts FROM moirae_retracted_rows x "
                                "JOIN moirae_retractions r ON r.id = x.retraction WHERE r.undone_at IS NULL "
                                "AND x.stream = %s", (stream,))
                    at = {int(sid): ts for sid, ts in cur.fetchall()}
            order = sorted(at, key=lambda sid: (at[sid], sid))
            kept = ([at[sid] for sid in order],
                    [(sid, None if sid in removed else dict(corrected[sid])) for sid in order])
            self._kept[stream] = kept
            return kept

    def _exists(self, cur) -> bool:
        return table_exists(cur, "moirae_retracted_rows", "moirae_alert_status")

    def flags(self, stream: str, lo=None, hi=None, half_open: bool = False) -> tuple[set[int], dict[int, dict]]:
        """Removed and corrected (newest values) source ids of ``stream``, in ``[lo, hi]``
        if given (``[lo, hi)`` when ``half_open``)."""
        removed: set[int] = set()
        corrected: dict[int, dict] = {}
        with self.db.connection() as conn, conn.cursor() as cur:
            if not self._exists(cur):
                return removed, corrected
            span = "" if lo is None else f" AND x.ts >= %s AND x.ts {'<' if half_open else '<='} %s"
            cur.execute("SELECT x.source_id, x.new_values FROM moirae_retracted_rows x JOIN moirae_retractions r "
                        f"ON r.id = x.retraction WHERE r.undone_at IS NULL AND x.stream = %s{span} ORDER BY r.id",
                        (stream, *(() if lo is None else (lo, hi))))
            for sid, nv in cur.fetchall():
                if nv is None:
                    removed.add(int(sid))
                else:
                    corrected[int(sid)] = {**corrected.get(int(sid), {}), **nv}
        return removed, corrected

    def rows(self, stream: str, frame: pd.DataFrame, ts_col: str) -> pd.DataFrame:
        """A raw frame read with ``_sid`` (:meth:`archive.Archiver.read`, ``with_ids``), as
        the flags say it is, without ``_sid`` (the flags kept, as for :meth:`chunk_flags`)."""
        if not len(frame) or stream not in self.flagged_streams():
            return frame.drop(columns=["_sid"], errors="ignore")
        times, flags = self._stream_flags(stream)
        lo, hi = (t if t.tzinfo is not None else t.tz_localize("UTC")
                  for t in (pd.Timestamp(frame[ts_col].min()), pd.Timestamp(frame[ts_col].max())))
        inside = flags[bisect_left(times, lo):bisect_right(times, hi)]
        return apply_flags(frame, {sid for sid, nv in inside if nv is None},
                           {sid: nv for sid, nv in inside if nv is not None})

    def events(self, frame: pd.DataFrame, eid_col: str) -> pd.DataFrame:
        """Detected events without those of alerts now retracted."""
        if not len(frame) or eid_col not in frame.columns:
            return frame
        with self.db.connection() as conn, conn.cursor() as cur:
            if not self._exists(cur):
                return frame
            cur.execute("SELECT eid FROM moirae_alert_status WHERE status = 'retracted' AND eid = ANY(%s)",
                        ([str(e) for e in frame[eid_col]],))
            gone = {r[0] for r in cur.fetchall()}
        return frame[~frame[eid_col].astype(str).isin(gone)].reset_index(drop=True) if gone else frame
