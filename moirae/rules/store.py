"""Alert dispositions, persisted: what the rules decided for each alert, and every change.

``moirae_dispositions`` holds one row per alert under a suppress or escalate rule: its
disposition (``pending``, ``suppressed``, ``raised``, ``escalated``), whether it is final
(its recall ended) or provisional, whether the alert was handed to the incident store
(``incident_opened``: it joined or opened an incident, and so would page), and each
rule's latest verdict. ``moirae_disposition_changes`` logs every change with what caused
it: the API lists them with the event and ``GET /api/events?suppressed=true`` finds the
suppressed alerts, which exist in the event log like every other.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

DDL = """
CREATE TABLE IF NOT EXISTS moirae_dispositions (
    eid              text PRIMARY KEY,
    event            text NOT NULL,
    ts               timestamptz NOT NULL,
    disposition      text NOT NULL,
    final            boolean NOT NULL DEFAULT false,
    incident_opened  boolean NOT NULL DEFAULT false,
    verdicts         jsonb NOT NULL DEFAULT '{}',
    updated_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS moirae_dispositions_event ON moirae_dispositions (disposition, event, ts DESC);
CREATE TABLE IF NOT EXISTS moirae_disposition_changes (
    id           bigserial PRIMARY KEY,
    eid          text NOT NULL,
    at           timestamptz NOT NULL DEFAULT now(),
    before       text,
    after        text NOT NULL,
    final        boolean NOT NULL,
    note         text NOT NULL
);
CREATE INDEX IF NOT EXISTS moirae_disposition_changes_eid ON moirae_disposition_changes (eid, id);
"""

DISPOSITIONS = ("pending", "suppressed", "raised", "escalated")


class DispositionStore:
    """Read and write alert dispositions (module doc)."""

    def __init__(self, db) -> None:
        self.db = db
        with db.connection() as conn, conn.cursor() as cur:
            cur.execute(DDL)

    def put(self, eid: str, event: str, ts: datetime, disposition: str, final: bool,
            verdicts: dict[str, Any], before: str | None, note: str | None, opened: bool | None = None) -> None:
        """Upsert the alert's disposition; log a change when ``note`` is given."""
        with self.db.connection() as conn, conn.cursor() as cur:
            cur.execute("INSERT INTO moirae_dispositions (eid, event, ts, disposition, final, incident_opened, "
                        "verdicts) VALUES (%s, %s, %s, %s, %s, coalesce(%s, false), %s) ON CONFLICT (eid) DO UPDATE "
                        "SET disposition = EXCLUDED.disposition, final = EXCLUDED.final, verdicts = EXCLUDED.verdicts, "
                        "incident_opened = coalesce(%s, moirae_dispositions.incident_opened), updated_at = now()",
                        (eid, event, ts, disposition, final, opened, json.dumps(verdicts, default=str), opened))
            if note is not None:
                cur.execute("INSERT INTO moirae_disposition_changes (eid, before, after, final, note) "
                            "VALUES (%s, %s, %s, %s, %s)", (eid, before, disposition, final, note))

    def mark_opened(self, eid: str, note: str) -> None:
        """The alert went to the incident store (it joined or opened an incident)."""
        with self.db.connection() as conn, conn.cursor() as cur:
            cur.execute("UPDATE moirae_dispositions SET incident_opened = true, updated_at = now() WHERE eid = %s "
                        "RETURNING disposition, final", (eid,))
            row = cur.fetchone()
            if row is not None:
                cur.execute("INSERT INTO moirae_disposition_changes (eid, before, after, final, note) "
                            "VALUES (%s, %s, %s, %s, %s)", (eid, row[0], row[0], row[1], note))

    def get(self, eid: str) -> dict[str, Any] | None:
        """The alert's disposition with its changes, oldest first; None when no rule judges it."""
        with self.db.connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT disposition, final, incident_opened, verdicts, updated_at FROM moirae_dispositions "
                        "WHERE eid = %s", (eid,))
            row = cur.fetchone()
            if row is None:
                return None
            cur.execute("SELECT at, before, after, final, note FROM moirae_disposition_changes WHERE eid = %s "
                        "ORDER BY id", (eid,))
            changes = [{"at": a.isoformat(), "before": b, "after": af, "final": f, "note": n}
                       for a, b, af, f, n in cur.fetchall()]
        return {"disposition": row[0], "final": row[1], "provisional": not row[1], "incident_opened": row[2],
                "verdicts": row[3], "updated_at": row[4].isoformat(), "changes": changes}

    def of(self, eids) -> dict[str, dict[str, Any]]:
        """``{eid: {"disposition", "final"}}`` for those of ``eids`` a rule judges (one query)."""
        eids = [str(e) for e in eids]
        if not eids:
            return {}
        with self.db.connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT eid, disposition, final FROM moirae_dispositions WHERE eid = ANY(%s)", (eids,))
            return {e: {"disposition": d, "final": f} for e, d, f in cur.fetchall()}

    def opened(self, eid: str) -> bool | None:
        """Whether the alert went to the incident store; None when no rule judged it yet."""
        with self.db.connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT incident_opened FROM moirae_dispositions WHERE eid = %s", (eid,))
            row = cur.fetchone()
        return None if row is None else bool(row[0])

    def list_events(self, suppressed: bool, event: str | None = None, since: datetime | None = None,
                    until: datetime | None = None, limit: int = 50, offset: int = 0) -> list[tuple]:
        """Rows of the event log (``event, eid, ts, attrs, context, surrounding``), newest
        first, of the alerts that are (``suppressed``) or are not suppressed now."""
        where, args = ["true"], []
        for cond, val in (("e.event = %s", event), ("e.ts >= %s", since), ("e.ts < %s", until)):
            if val is not None:
                where.append(cond)
                args.append(val)
        where.append("d.disposition = 'suppressed'" if suppressed else
                     "(d.disposition IS NULL OR d.disposition <> 'suppressed')")
        with self.db.connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT e.event, e.eid, e.ts, e.attrs, e.context, e.surrounding FROM moirae_events e "
                        "LEFT JOIN moirae_dispositions d ON d.eid = e.eid "
                        f"WHERE {' AND '.join(where)} ORDER BY e.ts DESC, e.eid LIMIT %s OFFSET %s",
                        (*args, limit, offset))
            return cur.fetchall()

    def counts(self) -> dict[str, int]:
        """How many alerts have each disposition now."""
        with self.db.connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT disposition, count(*) FROM moirae_dispositions GROUP BY disposition")
            return dict(cur.fetchall())
