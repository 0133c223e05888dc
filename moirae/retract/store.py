"""Retractions in PostgreSQL: what was marked bad, by whom and why, and what it changed.

Rows are never deleted from the archive by a retraction: they are *flagged* here, and
every reader that must not count them (the alerts' re-evaluation, retention) asks
this store. The tables:

- ``moirae_retractions``: one row per retraction or correction (its stream, how its rows
  were named, the reason, the author, when; ``undone_at`` once undone). A retraction
  named by a range or a predicate keeps that selection, so rows arriving after it that
  match are flagged too (a retraction racing live ingestion ends as if it came after).
- ``moirae_retracted_rows``: the flagged source ids of each retraction, with the new
  values of a correction (``new_values``, NULL for a plain retraction).
- ``moirae_alert_status``: the alerts a retraction turned ``retracted``, with the
  reason and the retraction; an undone retraction sets them back to ``active``.
- ``moirae_retracted_sinks``: the provenance sink vertices of retracted alerts, per
  edge table, so retention can treat the rows only they used as unsupported
  (``moirae/ingest/persist.py:contributing_view``).
- ``moirae_retraction_revisions``: every revision tuple a retraction published (the
  row an alert's Recall output held before its DELETE), so an undo can publish the
  inverse.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from moirae.retract.errors import NoSuchRetraction

DDL = """
CREATE TABLE IF NOT EXISTS moirae_retractions (
    id          bigserial PRIMARY KEY,
    kind        text NOT NULL CHECK (kind IN ('retraction', 'correction')),
    stream      text NOT NULL,
    selection   jsonb NOT NULL,
    reason      text NOT NULL,
    author      text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    undone_at   timestamptz,
    undone_by   text
);
CREATE TABLE IF NOT EXISTS moirae_retracted_rows (
    retraction  bigint NOT NULL REFERENCES moirae_retractions (id),
    stream      text NOT NULL,
    source_id   bigint NOT NULL,
    ts          timestamptz NOT NULL,
    new_values  jsonb,
    PRIMARY KEY (retraction, source_id)
);
CREATE INDEX IF NOT EXISTS moirae_retracted_rows_sid ON moirae_retracted_rows (source_id);
CREATE TABLE IF NOT EXISTS moirae_alert_status (
    eid         text PRIMARY KEY,
    event       text NOT NULL,
    status      text NOT NULL CHECK (status IN ('active', 'retracted')),
    reason      text,
    retraction  bigint,
    at          timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS moirae_retracted_sinks (
    edge_table  text NOT NULL,
    sink_id     bigint NOT NULL,
    eid         text NOT NULL,
    PRIMARY KEY (edge_table, sink_id)
);
CREATE TABLE IF NOT EXISTS moirae_retraction_revisions (
    retraction  bigint NOT NULL,
    operator    text NOT NULL,
    eid         text NOT NULL,
    key         text NOT NULL,
    event_ts    timestamptz NOT NULL,
    row         jsonb NOT NULL,
    cause       text NOT NULL,
    PRIMARY KEY (retraction, operator, eid, key)
);
"""


@dataclass(frozen=True)
class Retraction:
    """One retraction or correction as stored."""

    id: int
    kind: str
    stream: str
    selection: Mapping[str, Any]
    reason: str
    author: str
    created_at: datetime
    undone_at: datetime | None = None
    undone_by: str | None = None
    rows: int = 0

    @property
    def active(self) -> bool:
        return self.undone_at is None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "stream": self.stream, "selection": dict(self.selection),
                "reason": self.reason, "author": self.author, "created_at": self.created_at.isoformat(),
                "undone_at": None if self.undone_at is None else self.undone_at.isoformat(),
                "undone_by": self.undone_by, "rows": self.rows, "active": self.active}


_COLS = "r.id, r.kind, r.stream, r.selection, r.reason, r.author, r.created_at, r.undone_at, r.undone_by"


class RetractionStore:
    """The tables above in ``db`` (an :class:`archive.pg.Database`), created on first use."""

    def __init__(self, db) -> None:
        self.db = db
        with db.connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(hashtext('moirae_retractions'))")
            cur.execute(DDL)

    # -- retractions --------------------------------------------------------------

    def create(self, kind: str, stream: str, selection: Mapping[str, Any], reason: str, author: str,
               rows: Iterable[tuple[int, datetime, Mapping[str, Any] | None]]) -> int:
        """Record a retraction and flag ``rows`` (source id, event time, new values or
        None) in one transaction; returns its id."""
        rows = list(rows)
        with self.db.connection(autocommit=False) as conn, conn.cursor() as cur:
            cur.execute("INSERT INTO moirae_retractions (kind, stream, selection, reason, author) "
                        "VALUES (%s, %s, %s, %s, %s) RETURNING id",
                        (kind, stream, json.dumps(dict(selection), default=str), reason, author))
            rid = cur.fetchone()[0]
            self._flag(cur, rid, stream, rows)
        return rid

    def flag(self, rid: int, stream: str, rows: Iterable[tuple[int, datetime, Mapping[str, Any] | None]]) -> list[int]:
        """Flag more rows for retraction ``rid`` (rows that arrived after it); returns the
        source ids flagged now (not before)."""
        with self.db.connection(autocommit=False) as conn, conn.cursor() as cur:
            return self._flag(cur, rid, stream, list(rows))

    @staticmethod
    def _flag(cur, rid: int, stream: str, rows: list) -> list[int]:
        if not rows:
            return []
        from psycopg2.extras import execute_values

        got = execute_values(cur, "INSERT INTO moirae_retracted_rows (retraction, stream, source_id, ts, new_values) "
                                  "VALUES %s ON CONFLICT DO NOTHING RETURNING source_id",
                             [(rid, stream, int(sid), ts, None if nv is None else json.dumps(dict(nv), default=str))
                              for sid, ts, nv in rows], page_size=1000, fetch=True)
        return [int(r[0]) for r in got]

    def get(self, rid: int) -> Retraction:
        found = self._list("WHERE r.id = %s", (rid,))
        if not found:
            raise NoSuchRetraction(f"no retraction with id {rid!r}")
        return found[0]

    def list(self, active_only: bool = False, limit: int = 100) -> list[Retraction]:
        return self._list("WHERE r.undone_at IS NULL" if active_only else "", (), limit)

    def _list(self, where: str, args: tuple, limit: int = 100) -> list[Retraction]:
        with self.db.connection() as conn, conn.cursor() as cur:
            cur.execute(f"SELECT {_COLS}, (SELECT count(*) FROM moirae_retracted_rows x WHERE x.retraction = r.id) "
                        f"FROM moirae_retractions r {where} ORDER BY r.id DESC LIMIT %s", (*args, limit))
            return [Retraction(*row) for row in cur.fetchall()]

    def mark_undone(self, rid: int, who: str) -> bool:
        """Mark retraction ``rid`` undone; False when it was undone already."""
        with self.db.connection() as conn, conn.cursor() as cur:
            cur.execute("UPDATE moirae_retractions SET undone_at = now(), undone_by = %s "
                        "WHERE id = %s AND undone_at IS NULL", (who, rid))
            return cur.rowcount == 1

    def rows_of(self, rid: int) -> list[tuple[str, int, datetime, dict | None]]:
        """(stream, source id, time, new values) of the rows retraction ``rid`` flagged."""
        with self.db.connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT stream, source_id, ts, new_values FROM moirae_retracted_rows WHERE retraction = %s "
                        "ORDER BY ts, source_id", (rid,))
            return [(s, i, t, v) for s, i, t, v in cur.fetchall()]

    def active_flags(self, source_ids: Iterable[int] | None = None) -> tuple[set[int], dict[int, dict]]:
        """The flagged source ids of every active retraction (of ``source_ids`` only,
        if given): the removed ones and the corrected ones with their newest values."""
        where, args = "", ()
        if source_ids is not None:
            where, args = "AND x.source_id = ANY(%s)", ([int(s) for s in source_ids],)
        with self.db.connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT x.source_id, x.new_values FROM moirae_retracted_rows x JOIN moirae_retractions r "
                        f"ON r.id = x.retraction WHERE r.undone_at IS NULL {where} ORDER BY r.id", args)
            removed: set[int] = set()
            corrected: dict[int, dict] = {}
            for sid, nv in cur.fetchall():
                if nv is None:
                    removed.add(sid)
                else:
                    corrected[sid] = {**corrected.get(sid, {}), **nv}
        return removed, corrected

    # -- alert status -------------------------------------------------------------

    def set_status(self, eids: Mapping[str, str], status: str, reason: str | None, rid: int | None) -> None:
        """Set the status of alerts ``eids`` (eid -> event-query)."""
        if not eids:
            return
        from psycopg2.extras import execute_values

        with self.db.connection(autocommit=False) as conn, conn.cursor() as cur:
            execute_values(cur, "INSERT INTO moirae_alert_status (eid, event, status, reason, retraction) VALUES %s "
                                "ON CONFLICT (eid) DO UPDATE SET status = EXCLUDED.status, reason = EXCLUDED.reason, "
                                "retraction = EXCLUDED.retraction, at = now()",
                           [(e, q, status, reason, rid) for e, q in eids.items()])

    def status_of(self, eids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """Per eid with a recorded status: ``status``, ``reason``, ``retraction``, ``at``."""
        with self.db.connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT eid, status, reason, retraction, at FROM moirae_alert_status WHERE eid = ANY(%s)",
                        ([str(e) for e in eids],))
            return {e: {"status": s, "reason": r, "retraction": rid, "at": at.isoformat()}
                    for e, s, r, rid, at in cur.fetchall()}

    def retracted_by(self, rid: int) -> dict[str, str]:
        """The alerts (eid -> event-query) now retracted by retraction ``rid``."""
        with self.db.connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT eid, event FROM moirae_alert_status WHERE retraction = %s AND status = 'retracted'",
                        (rid,))
            return dict(cur.fetchall())

    def raised_by(self, rid: int) -> dict[str, str]:
        """The alerts (eid -> event-query) retraction or correction ``rid`` raised that still stand."""
        with self.db.connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT eid, event FROM moirae_alert_status WHERE retraction = %s AND status = 'active' "
                        "AND reason LIKE 'raised by retraction %%'", (rid,))
            return dict(cur.fetchall())

    def retracted(self) -> set[str]:
        """Every alert now retracted."""
        with self.db.connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT eid FROM moirae_alert_status WHERE status = 'retracted'")
            return {r[0] for r in cur.fetchall()}

    def set_sinks(self, edge_table: str, sinks: Mapping[int, str], retracted: bool) -> None:
        """Record (or forget) the sink vertices (sink id -> eid) of retracted alerts in ``edge_table``."""
        if not sinks:
            return
        with self.db.connection(autocommit=False) as conn, conn.cursor() as cur:
            if retracted:
                cur.execute("INSERT INTO moirae_retracted_sinks (edge_table, sink_id, eid) "
                            "SELECT %s, unnest(%s::bigint[]), unnest(%s::text[]) ON CONFLICT DO NOTHING",
                            (edge_table, list(sinks), list(sinks.values())))
            else:
                cur.execute("DELETE FROM moirae_retracted_sinks WHERE edge_table = %s AND sink_id = ANY(%s)",
                            (edge_table, list(sinks)))

    # -- revisions ----------------------------------------------------------------

    def keep_revisions(self, rid: int, rows: Iterable[tuple[str, str, str, datetime, Mapping[str, Any], str]]) -> None:
        """Remember the rows (operator, eid, key, event time, row, the retracted alert
        that caused it) retraction ``rid`` deleted by revision."""
        rows = [(rid, op, eid, key, ts, json.dumps(dict(row), default=str), cause)
                for op, eid, key, ts, row, cause in rows]
        if not rows:
            return
        from psycopg2.extras import execute_values

        with self.db.connection(autocommit=False) as conn, conn.cursor() as cur:
            execute_values(cur, "INSERT INTO moirae_retraction_revisions (retraction, operator, eid, key, event_ts, "
                                "row, cause) VALUES %s ON CONFLICT DO NOTHING", rows)

    def move_revisions(self, rid: int, other: int, cause: str) -> None:
        """Hand the rows retraction ``rid`` deleted because of alert ``cause`` to retraction
        ``other`` (which now withdraws that alert), so undoing ``other`` restores them."""
        with self.db.connection() as conn, conn.cursor() as cur:
            cur.execute("UPDATE moirae_retraction_revisions SET retraction = %s WHERE retraction = %s AND cause = %s",
                        (other, rid, cause))

    def take_revisions(self, rid: int, causes: Iterable[str]) -> list[tuple[str, str, str, datetime, dict]]:
        """The rows retraction ``rid`` deleted because alerts ``causes`` were retracted,
        forgotten as they are returned."""
        with self.db.connection(autocommit=False) as conn, conn.cursor() as cur:
            cur.execute("DELETE FROM moirae_retraction_revisions WHERE retraction = %s AND cause = ANY(%s) "
                        "RETURNING operator, eid, key, event_ts, row", (rid, list(causes)))
            return [(op, e, k, ts, row) for op, e, k, ts, row in cur.fetchall()]
