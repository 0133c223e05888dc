"""Summarizing the BRIN index of a stream's newest pages on demand: the step a reader of
live windows takes first (:mod:`archive.contributors`), and each background pass of an
:class:`archive.brin_summary.Summarizer`.

A BRIN index summarizes a range of heap pages once asked to (or once autovacuum gets to
it); until then a scan reads every page of the range. ``brin_summarize_new_values``
summarizes the pages written since the last summary, each page once over the stream's
life.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime

from archive.names import partition_name, quote

log = logging.getLogger(__name__)


def span_chunks(archiver, stream: str, lo: datetime, hi: datetime) -> range:
    """The ids of the stream's chunks that ``[lo, hi]`` falls in (existing or not)."""
    grid = archiver.grid_of(stream)
    return range(grid.chunk_of(lo), grid.chunk_of(hi) + 1)


def summarize(archiver, stream: str, chunk_ids: Iterable[int], index: str,
              names: dict[tuple[str, str], str] | None = None) -> int:
    """Summarize the new pages of the BRIN index ``index`` (of the stream's table) on each
    of ``chunk_ids`` that exists; returns how many page ranges it summarized. ``names``,
    when given, caches each chunk's index name (by index and chunk table), so a caller
    summarizing the same chunks again reads the catalog only for new ones."""
    parts = [partition_name(stream, c) for c in chunk_ids]
    if not parts:
        return 0
    cache = names if names is not None else {}
    done = 0
    with archiver.db.connection() as conn, conn.cursor() as cur:
        unknown = [p for p in parts if (index, p) not in cache]
        if unknown:  # a chunk not yet created has no index: looked up again next time
            cur.execute("SELECT p.relname, c.oid::regclass::text FROM pg_inherits h "
                        "JOIN pg_class c ON c.oid = h.inhrelid JOIN pg_index i ON i.indexrelid = c.oid "
                        "JOIN pg_class p ON p.oid = i.indrelid "
                        "WHERE h.inhparent = to_regclass(%s) AND p.relname = ANY(%s)", (quote(index), unknown))
            cache.update({(index, part): ix for part, ix in cur.fetchall()})
        indexes = [cache[(index, p)] for p in parts if (index, p) in cache]
        if not indexes:
            return 0
        cur.execute("SET lock_timeout = '100ms'")  # autocommit: each statement its own transaction
        try:
            for ix in indexes:
                try:
                    cur.execute("SELECT brin_summarize_new_values(%s::regclass)", (ix,))
                    done += cur.fetchone()[0]
                except Exception as exc:
                    code = getattr(exc, "pgcode", None)
                    if code == "42P01":  # the chunk was dropped since it was cached
                        for key in [k for k, v in cache.items() if v == ix]:
                            del cache[key]
                    elif code == "55P03":  # autovacuum holds the lock: read unsummarized pages
                        log.info("archive: BRIN index %s busy (autovacuum?); reading its unsummarized pages", ix)
                    else:
                        raise
        finally:
            cur.execute("SET lock_timeout = 0")
    return done
