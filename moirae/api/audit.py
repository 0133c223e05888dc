"""The audit log: who cancelled, accelerated, acknowledged, resolved, deployed or
retracted what, and when, in the table ``moirae_audit`` of the engine's database.

:func:`audit` writes one row; :func:`audit_request` takes the actor from a request that
passed :meth:`moirae.api.access.Access.mutate` (``token`` or ``console``, with the
``by`` name the caller gave, if any). Writing is best effort: a failure is logged and
never fails the change it records. :func:`recent` reads the newest rows
(``GET /api/audit``).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from archive.schema import table_exists
from moirae.base.redact import redact, redact_all

log = logging.getLogger(__name__)

AUDIT_DDL = ("CREATE TABLE IF NOT EXISTS moirae_audit (id bigserial PRIMARY KEY, at timestamptz NOT NULL DEFAULT now(), "
             "actor text NOT NULL, action text NOT NULL, target text, detail jsonb)")
_ready: set[tuple[str, str | None]] = set()  # (dsn, schema) whose table exists


def audit(db, actor: str, action: str, target: str | None, detail: dict[str, Any] | None = None) -> None:
    """Record that ``actor`` did ``action`` to ``target`` (``detail``: JSON-able), in
    ``db`` (an :class:`archive.pg.Database`)."""
    try:
        with db.connection() as conn, conn.cursor() as cur:
            if (db.dsn, db.schema) not in _ready:
                cur.execute(AUDIT_DDL)
                _ready.add((db.dsn, db.schema))
            cur.execute("INSERT INTO moirae_audit (actor, action, target, detail) VALUES (%s, %s, %s, %s)",
                        (redact(actor), action, redact(target), json.dumps(redact_all(detail), default=str)
                         if detail is not None else None))
    except Exception as exc:  # noqa: BLE001 - the audit must not undo the change it records
        log.warning("could not write the audit record (%s %s %s): %s", actor, action, target, exc)


def audit_request(request, action: str, target: str | None, detail: dict[str, Any] | None = None,
                  by: str | None = None) -> None:
    """:func:`audit` for a route: the actor is how the request was allowed, plus ``by``."""
    actor = getattr(request.state, "actor", None) or "anonymous"
    if by:
        actor = f"{actor}:{by}"
    client = request.client.host if request.client else None
    audit(request.app.state.engine.db, actor, action, target, {**(detail or {}), "client": client})


def recent(db, limit: int = 100) -> list[dict[str, Any]]:
    """The newest ``limit`` audit records, newest first."""
    with db.connection() as conn, conn.cursor() as cur:
        if not table_exists(cur, "moirae_audit"):
            return []
        cur.execute("SELECT id, at, actor, action, target, detail FROM moirae_audit ORDER BY id DESC LIMIT %s",
                    (limit,))
        return [{"id": i, "at": at.isoformat(), "actor": a, "action": act, "target": t, "detail": d}
                for i, at, a, act, t, d in cur.fetchall()]
