"""Which checkpoint the batch log of a stream belongs to.

The archive's batch log (``moirae_batches``) makes appends exactly-once by remembering
the batch ids a streaming query committed; the ids only mean something together with
the checkpoint that numbered them. ``moirae_checkpoints`` records, per stream, the
identity of that checkpoint (a random id kept in the checkpoint directory,
:mod:`moirae.runtime.checkpoint_identity`), so that a lost checkpoint (Spark starts
again at batch 0, which the log would skip as done) or another one (a copy from
elsewhere) is noticed before a batch is skipped.
"""

from __future__ import annotations

CHECKPOINTS_DDL = ("CREATE TABLE IF NOT EXISTS moirae_checkpoints (stream text PRIMARY KEY, identity text NOT NULL, "
                   "recorded_at timestamptz NOT NULL DEFAULT now())")


def recorded(db, stream: str) -> tuple[str | None, int | None]:
    """The checkpoint identity recorded for ``stream`` (None: none yet) and the highest
    micro-batch id (>= 0) its batch log holds (None: none)."""
    with db.connection() as conn, conn.cursor() as cur:
        cur.execute(CHECKPOINTS_DDL)
        cur.execute("SELECT identity FROM moirae_checkpoints WHERE stream = %s", (stream,))
        row = cur.fetchone()
        cur.execute("SELECT to_regclass('moirae_batches') IS NOT NULL")
        last = None
        if cur.fetchone()[0]:
            # Spark numbers micro-batches from 0; negative ids are the driver's own loads
            # (history, replays), which no checkpoint numbered
            cur.execute("SELECT max(batch_id) FROM moirae_batches WHERE stream = %s AND batch_id >= 0", (stream,))
            last = cur.fetchone()[0]
    return (row[0] if row else None), last


def record(db, stream: str, identity: str) -> None:
    """Tie ``stream``'s batch log to the checkpoint ``identity`` (first writer wins: a
    concurrent engine recording another identity does not overwrite it)."""
    with db.connection() as conn, conn.cursor() as cur:
        cur.execute(CHECKPOINTS_DDL)
        cur.execute("INSERT INTO moirae_checkpoints (stream, identity) VALUES (%s, %s) ON CONFLICT (stream) DO NOTHING",
                    (stream, identity))


def forget(db, stream: str) -> None:
    """Drop ``stream``'s recorded identity (its batch log starts over with a new checkpoint)."""
    with db.connection() as conn, conn.cursor() as cur:
        cur.execute(CHECKPOINTS_DDL)
        cur.execute("DELETE FROM moirae_checkpoints WHERE stream = %s", (stream,))
