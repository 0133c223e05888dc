"""Archived rows as the active retractions say they are, for re-runs over the archive.

Retracted rows stay in the archive (:mod:`moirae.retract.store`), so every path that runs
a query over archived rows again must apply the flags itself, or a retracted row counts
again and a retracted alert comes back. :class:`ArchiveFlags` is what batch
re-materialization (``moirae/materialize/replica.py:Materializer.detect``: ``moirae
rematerialize``, replica1 and replica2) applies: a raw frame read with its source ids loses
its removed rows and takes its corrected rows' new values (:meth:`ArchiveFlags.rows`), and
the events detected lose those of alerts now retracted (:meth:`ArchiveFlags.events`), so
what is written back equals a run over an archive that never held the bad values. Recall
re-evaluation applies the same flags inside SQL (:mod:`moirae.retract.norms`).

>>> import pandas as pd
>>> f = pd.DataFrame({"_sid": [1, 2, 3], "bw": [90.0, 10.0, 20.0]})
>>> apply_flags(f, {1}, {3: {"bw": 99.0}}).to_dict("list")
{'bw': [10.0, 99.0]}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd


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
    retraction was ever made (its tables do not exist)."""

    def __init__(self, db) -> None:
        self.db = db

    def _exists(self, cur) -> bool:
        cur.execute("SELECT to_regclass('moirae_retracted_rows') IS NOT NULL AND "
                    "to_regclass('moirae_alert_status') IS NOT NULL")
        return bool(cur.fetchone()[0])

    def flags(self, stream: str, lo=None, hi=None) -> tuple[set[int], dict[int, dict]]:
        """Removed and corrected (newest values) source ids of ``stream``, in ``[lo, hi]`` if given."""
        removed: set[int] = set()
        corrected: dict[int, dict] = {}
        with self.db.connection() as conn, conn.cursor() as cur:
            if not self._exists(cur):
                return removed, corrected
            span = "" if lo is None else " AND x.ts >= %s AND x.ts <= %s"
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
        the flags say it is, without ``_sid``."""
        if not len(frame):
            return frame.drop(columns=["_sid"], errors="ignore")
        removed, corrected = self.flags(stream, frame[ts_col].min(), frame[ts_col].max())
        return apply_flags(frame, removed, corrected)

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
