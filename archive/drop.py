"""Dropping an archived stream whole: its partitioned table (every chunk), its stage
table, and its rows in the registry, the chunk catalog, the batch log, the partition
records, the dead letters and the archive state (its horizon).

Used when a monitor is undeployed with its archive (``moirae undeploy NAME
--drop-archive``); a stream is never dropped otherwise. When a monitor's event-query
changes, only its streams' batch log is forgotten (:func:`forget_batches`). One transaction under the
archive's DDL lock, so a concurrent ``register`` or chunk creation waits for it.
"""

from __future__ import annotations

from archive.names import quote, stage_name
from archive.schema import DDL_LOCK, table_exists

__all__ = ["drop_stream_sql", "forget_batches", "forget_tag"]

#: the catalog tables that name a stream in their ``stream`` column (moirae_streams last:
#: moirae_chunks references it)
_BY_STREAM = ("moirae_chunks", "moirae_batches", "moirae_batch_parts", "moirae_dead_letters", "moirae_streams")


def drop_stream_sql(cur, name: str) -> None:
    """Drop stream ``name`` in the transaction of ``cur`` (see the module docstring)."""
    cur.execute("SELECT pg_advisory_xact_lock(%s)", (DDL_LOCK,))
    cur.execute(f"DROP TABLE IF EXISTS {quote(name)} CASCADE")
    cur.execute(f"DROP TABLE IF EXISTS {quote(stage_name(name))}")
    for table in _BY_STREAM:
        cur.execute(f"DELETE FROM {table} WHERE stream = %s", (name,))
    cur.execute("DELETE FROM moirae_archive_state WHERE key = %s", (f"horizon:{name}",))
    _forget_checkpoint(cur, [name])


def _forget_checkpoint(cur, streams: list[str]) -> None:
    """The recorded checkpoint identities of ``streams`` (:mod:`archive.checkpoint_identity`) go."""
    if table_exists(cur, "moirae_checkpoints"):
        cur.execute("DELETE FROM moirae_checkpoints WHERE stream = ANY(%s)", (streams,))


def forget_batches(arch, streams) -> None:
    """Forget the batch log of ``streams`` (their rows stay): the query writing them
    starts from a new checkpoint, whose batch ids would otherwise be skipped as done
    (a monitor's changed event-query; :mod:`archive.checkpoint_identity`)."""
    streams = list(streams)
    if not streams:
        return
    with arch.catalog.transaction() as conn, conn.cursor() as cur:
        cur.execute("DELETE FROM moirae_batches WHERE stream = ANY(%s)", (streams,))
        cur.execute("DELETE FROM moirae_batch_parts WHERE stream = ANY(%s)", (streams,))
        _forget_checkpoint(cur, streams)


def forget_tag(arch, streams, tag: str) -> None:
    """Remove materialization ``tag`` from every chunk of ``streams``
    (:func:`archive.materialized.tag_sources` set it): a query whose definition changed
    has materialized none of them."""
    streams = list(streams)
    if not streams:
        return
    with arch.catalog.transaction() as conn, conn.cursor() as cur:
        cur.execute("UPDATE moirae_chunks SET materialized = array_remove(materialized, %s) "
                    "WHERE stream = ANY(%s) AND %s = ANY(materialized)", (tag, streams, tag))
