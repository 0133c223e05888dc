"""One chunk of one stream's columns, read with ``COPY ... TO STDOUT`` into Arrow.

The bulk read behind the Similarity Recall index build (issue 10 §1): a chunk's events
and contexts are read in their wide, archived form (one row per tuple, not one per
attribute) and parsed by Arrow's C++ CSV reader, so no Python object is made per row.
The read runs like a history-query (:mod:`archive.history`): read-only, with a statement
timeout, over the chunk's interval on the grid of the given streams.

Values arrive as PostgreSQL writes them in CSV, which is each type's text output, the
same as ``col::text``. ``NULL`` is an unquoted empty field and ``''`` a quoted one; the
reader keeps them apart (``quoted_strings_can_be_null=False``). The event time arrives as
integer microseconds since the epoch (``_ts_us``), exact and independent of the session's
time zone.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import psycopg2
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from archive.history import HistoryQueryCancelled, HistoryQueryFailed, HistoryQueryTimeout
from archive.names import quote
from archive.pg import is_connection_lost

TS_US = "_ts_us"


def copy_chunk(archiver, stream: str, exprs: Sequence[tuple[str, str]], chunk_id: int,
               grid_streams: Iterable[str], conn: Any = None, timeout_ms: int | None = None,
               with_ts: bool = True, coded: bool = False) -> pa.Table:
    """``stream``'s rows in chunk ``chunk_id`` (bounds of ``grid_streams``' grid) as an
    Arrow table: ``_ts_us`` (int64; unless ``with_ts`` is false), then one string column
    per ``(name, expression)`` of ``exprs`` (nulls kept; dictionary-encoded while parsed
    when ``coded``, see :func:`codes`). The expressions read the stream as ``e`` and are
    SQL the caller built from validated identifiers (e.g. ``e."user"::text``), never
    user text."""
    spec = archiver.stream(stream)
    lo, hi = archiver.grid_for(list(grid_streams)).bounds(chunk_id)
    ts = f"e.{quote(spec.ts_col)}"
    columns = [n for n, _ in exprs]
    select = ", ".join([*([f"(extract(epoch FROM {ts}) * 1000000)::int8"] if with_ts else []),
                        *(x for _, x in exprs)])
    timeout = int(timeout_ms or archiver.settings.statement_timeout_ms)
    own = conn is None
    conn = conn or archiver.connect()
    buf = io.BytesIO()
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            sql = cur.mogrify(f"COPY (SELECT {select} FROM {quote(stream)} AS e WHERE {ts} >= %s AND {ts} < %s) "
                              "TO STDOUT WITH (FORMAT csv)", (lo, hi)).decode()
            try:
                cur.execute("BEGIN TRANSACTION READ ONLY; SET LOCAL statement_timeout = %s", (timeout,))
                cur.copy_expert(sql, buf, size=1 << 20)
            except psycopg2.errors.QueryCanceled as exc:
                cur.execute("ROLLBACK")
                if "timeout" in str(exc):
                    raise HistoryQueryTimeout(f"read of {stream!r} chunk {chunk_id} exceeded {timeout} ms") from None
                raise HistoryQueryCancelled(f"read of {stream!r} chunk {chunk_id} was cancelled") from None
            except psycopg2.Error as exc:
                if is_connection_lost(exc):
                    raise
                if not conn.closed:
                    cur.execute("ROLLBACK")
                msg = (exc.pgerror or str(exc)).strip().splitlines()[0]
                raise HistoryQueryFailed(f"read of {stream!r} chunk {chunk_id} failed: {msg}") from None
            cur.execute("ROLLBACK")
    finally:
        if own:
            conn.close()
    return parse(buf.getvalue(), columns, with_ts, coded)


def codes(table: pa.Table, name: str) -> tuple[np.ndarray, list]:
    """Column ``name`` dictionary-coded: int64 codes (-1 for null) and the distinct values.

    >>> codes(pa.table({"v": ["b", None, "a", "b"]}), "v")
    (array([ 0, -1,  1,  0]), ['b', 'a'])
    """
    col = table.column(name).combine_chunks()
    enc = col if pa.types.is_dictionary(col.type) else col.dictionary_encode()
    idx = pc.fill_null(enc.indices.cast(pa.int64()), -1).to_numpy(zero_copy_only=False)
    return np.asarray(idx, dtype=np.int64), enc.dictionary.to_pylist()


def texts(table: pa.Table, name: str) -> np.ndarray:
    """Column ``name`` as an object array of str / None."""
    return np.asarray(table.column(name).to_numpy(zero_copy_only=False), dtype=object)


def parse(payload: bytes, columns: Sequence[str], with_ts: bool = True, coded: bool = False) -> pa.Table:
    """PostgreSQL CSV (``_ts_us``, then ``columns`` as text) as an Arrow table.

    >>> t = parse(b'5,a,\\n6,"",x\\n', ["u", "v"])
    >>> t.column("_ts_us").to_pylist(), t.column("u").to_pylist(), t.column("v").to_pylist()
    ([5, 6], ['a', ''], [None, 'x'])
    """
    names = [TS_US, *columns] if with_ts else list(columns)
    text = pa.dictionary(pa.int32(), pa.string()) if coded else pa.string()
    types = {TS_US: pa.int64(), **{c: text for c in columns}}
    if not payload:
        return pa.table({n: pa.array([], type=types[n]) for n in names})
    return pacsv.read_csv(
        io.BytesIO(payload),
        read_options=pacsv.ReadOptions(column_names=names, use_threads=False, block_size=1 << 24),
        parse_options=pacsv.ParseOptions(newlines_in_values=True),
        convert_options=pacsv.ConvertOptions(column_types=types, null_values=[""], strings_can_be_null=True,
                                             quoted_strings_can_be_null=False),
    )
