"""Engine state kept in PostgreSQL besides the archive: the similarity statistics of each
Similarity Recall (M 3.5: "computed incrementally"; restored on restart, so E and C_k
keep counting from where they were), and the view of every provenance edge that the
``contributing_only`` retention policy keeps tuples by."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence

from archive.names import quote
from archive.schema import table_exists
from similarity.learned import LearnedIds

DDL = """
CREATE TABLE IF NOT EXISTS moirae_similarity_state (
    operator   text PRIMARY KEY,
    version    int NOT NULL,
    snapshot   jsonb NOT NULL,
    saved_at   timestamptz NOT NULL DEFAULT now()
);
"""
LEARNED_DDL = """
CREATE TABLE IF NOT EXISTS moirae_similarity_learned (
    operator   text NOT NULL,
    eid        text NOT NULL,
    PRIMARY KEY (operator, eid)
);
"""
STATE_VERSION = 1
CONTRIBUTING_VIEW = "moirae_contributing"
_SAVE_LOCKS: dict[str, threading.Lock] = {}
_SAVE_LOCKS_GUARD = threading.Lock()


def save_lock(name: str) -> threading.Lock:
    """The lock every save of Similarity Recall ``name``'s state holds from taking its
    snapshot to committing it (:func:`save_operator`), one per operator name."""
    with _SAVE_LOCKS_GUARD:
        lock = _SAVE_LOCKS.get(name)
        if lock is None:
            lock = _SAVE_LOCKS[name] = threading.Lock()
        return lock


def save_operator(db, name: str, op, forgotten: Sequence[str] = ()) -> None:
    """Save Similarity Recall ``op``'s state under ``name``: its snapshot and the ids it
    learned since (``op.state_delta()``), ``forgotten`` ids out (:func:`save_similarity`).

    Snapshot and write happen under :func:`save_lock`, so saves of one operator commit
    in the order their snapshots were taken: a change made after one save's snapshot (a
    retraction's forget) is in a later snapshot, written after it, never overwritten by
    the older one. A failed write keeps the learned ids for the next save."""
    with save_lock(name):
        snap, learned = op.state_delta()
        try:
            save_similarity(db, name, snap, learned, forgotten)
        except BaseException:
            op.keep_unsaved(learned)
            raise


def ensure_similarity_tables(db) -> None:
    """Create the tables :func:`save_similarity` writes, if missing. :func:`load_similarity`
    calls it, which a deployment runs once per operator before its first save."""
    with db.connection() as conn, conn.cursor() as cur:
        cur.execute(DDL + LEARNED_DDL)


def save_similarity(db, name: str, snapshot: dict, learned: Sequence[str] = (),
                    forgotten: Sequence[str] = ()) -> None:
    """Save a Similarity Recall's state: ``snapshot`` (its statistics, as one JSON
    document) and ``learned``, the ids of the events learned since the last save, which
    are added to the operator's ids in a table of their own, in the same transaction (rewriting every id as JSON each maintenance round grows
    with the history); ``forgotten``, ids of events taken back out of the statistics
    (a retraction), leave that table in the same transaction. The tables exist
    (:func:`ensure_similarity_tables`): this runs every maintenance round."""
    with db.connection(autocommit=False) as conn, conn.cursor() as cur:
        if forgotten:
            cur.execute("DELETE FROM moirae_similarity_learned WHERE operator = %s AND eid = ANY(%s)",
                        (name, list(forgotten)))
        cur.execute("INSERT INTO moirae_similarity_state (operator, version, snapshot) VALUES (%s, %s, %s) "
                    "ON CONFLICT (operator) DO UPDATE SET version = EXCLUDED.version, snapshot = EXCLUDED.snapshot, "
                    "saved_at = now()", (name, STATE_VERSION, json.dumps(snapshot)))
        if learned:
            cur.execute("INSERT INTO moirae_similarity_learned (operator, eid) SELECT %s, unnest(%s::text[]) "
                        "ON CONFLICT DO NOTHING", (name, list(learned)))


def load_similarity(db, name: str) -> dict | None:
    """The saved snapshot, or None; a snapshot of another version is refused loudly.
    Its ``learned`` holds every id saved (:func:`save_similarity`), as the operator
    keeps them (:class:`similarity.learned.LearnedIds`, 8 bytes each: a million of them
    at start-up); ``learned_unsaved`` is the set of those a snapshot of an earlier
    release held in its JSON only, to be saved apart."""
    ensure_similarity_tables(db)
    with db.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT version, snapshot FROM moirae_similarity_state WHERE operator = %s", (name,))
        row = cur.fetchone()
        if row is None:
            return None
        if row[0] != STATE_VERSION:
            raise ValueError(f"similarity state of {name!r} has version {row[0]}, this engine reads {STATE_VERSION}")
        cur.execute("SELECT eid FROM moirae_similarity_learned WHERE operator = %s", (name,))
        saved = LearnedIds(r[0] for r in cur)
    snap = dict(row[1])
    unsaved = {e for e in snap.get("learned", ()) if e not in saved}
    saved.update(unsaved)
    snap["learned"], snap["learned_unsaved"] = saved, unsaved
    return snap


def forget_learned(db, name: str) -> None:
    """Drop the saved ids of the events ``name`` learned: its statistics were dropped
    (learned under another context declaration), so those events are to be learned
    again when they come."""
    ensure_similarity_tables(db)
    with db.connection() as conn, conn.cursor() as cur:
        cur.execute("DELETE FROM moirae_similarity_learned WHERE operator = %s", (name,))


def forget_similarity(db, name: str) -> None:
    """Drop everything saved of Similarity Recall ``name``: its statistics and its learned
    ids (its monitor was undeployed with its archive)."""
    ensure_similarity_tables(db)
    with db.connection() as conn, conn.cursor() as cur:
        cur.execute("DELETE FROM moirae_similarity_learned WHERE operator = %s", (name,))
        cur.execute("DELETE FROM moirae_similarity_state WHERE operator = %s", (name,))


def contributing_view(db, edge_tables: list[str]) -> str | None:
    """(Re)create the view of every source id with a provenance edge; None without edges.

    An edge to the sink vertex of a retracted alert (``moirae_retracted_sinks``, kept by
    :mod:`moirae.retract`) supports nothing: a row only retracted alerts used is as
    unsupported as one no alert used."""
    if not edge_tables:
        return None
    with db.connection() as conn, conn.cursor() as cur:
        retracted = table_exists(cur, "moirae_retracted_sinks")
        union = " UNION ALL ".join(
            f"SELECT source_id FROM {quote(t)} e" + (
                " WHERE NOT EXISTS (SELECT 1 FROM moirae_retracted_sinks r "
                f"WHERE r.edge_table = {_literal(t)} AND r.sink_id = e.sink_id)" if retracted else "")
            for t in edge_tables)
        cur.execute(f"CREATE OR REPLACE VIEW {CONTRIBUTING_VIEW} AS {union}")
    return CONTRIBUTING_VIEW


def _literal(name: str) -> str:
    """An edge table's name (a plain identifier, as :class:`ananke.store.GraphStore` makes
    them) as an SQL string literal.

    >>> _literal("ank_q_edge")
    "'ank_q_edge'"
    """
    if not name.replace("_", "").isalnum() or not name.isascii():
        raise ValueError(f"edge table {name!r} is not a plain identifier")
    return f"'{name}'"
