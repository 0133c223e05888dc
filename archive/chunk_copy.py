"""One chunk of one stream's columns, read with ``COPY ... TO STDOUT`` into Arrow.

The bulk read behind the Similarity Recall index build: a chunk's events
and contexts are read in their wide, archived form (one row per tuple, not one per
attribute) and parsed by Arrow's C++ CSV reader, so no Python object is made per row.
The reads of one chunk run like a history-query (:mod:`archive.history`): read-only,
with a statement timeout, over the chunk's interval on the grid of the given streams,
all in one transaction.

Values arrive as each type's text output, the same as ``col::text``: in PostgreSQL's
text format when the bytes hold no escape (no backslash but that of a ``NULL``,
``\\N``; ``''`` is an empty field), else in CSV (``NULL`` an unquoted empty field, ``''`` a quoted
one; the reader keeps them apart with ``quoted_strings_can_be_null=False``). The event
time becomes integer microseconds since the epoch (``_ts_us``), exact and independent of
the session's time zone: from ``ts AT TIME ZONE 'UTC'`` text (under the default ISO
DateStyle), or ``extract(epoch ...)`` in CSV.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from archive.abc import Read
from archive.chunks import task_grid
from archive.history import read_only_errors
from archive.names import quote

if TYPE_CHECKING:
    from archive.catalog import Catalog

TS_US = "_ts_us"


def copy_chunk(catalog: Catalog, stream: str, exprs: Sequence[tuple[str, str]], chunk_id: int,
               grid_streams: Iterable[str], conn: Any = None, timeout_ms: int | None = None,
               with_ts: bool = True, coded: bool = False) -> pa.Table:
    """``stream``'s rows in chunk ``chunk_id`` (bounds of ``grid_streams``' grid) as an
    Arrow table: ``_ts_us`` (int64; unless ``with_ts`` is false), then one string column
    per ``(name, expression)`` of ``exprs`` (nulls kept; dictionary-encoded while parsed
    when ``coded``, see :func:`codes`). One :class:`Read` of :func:`copy_reads`."""
    return copy_reads(catalog, [Read(stream, exprs, with_ts, coded)], chunk_id, grid_streams, conn, timeout_ms)[0]


def copy_reads(catalog: Catalog, reads: Sequence[Read], chunk_id: int, grid_streams: Iterable[str], conn: Any = None,
               timeout_ms: int | None = None) -> list[pa.Table]:
    """Each of ``reads`` over chunk ``chunk_id``, in one read-only transaction (one
    snapshot, one statement timeout each): see :func:`copy_chunk` for the tables.

    Each stream is read in PostgreSQL's text format first (cheaper for the server to
    write than CSV: no quoting decisions), the event time as ``timestamp`` text in UTC.
    The session's DateStyle is left alone, so every other value reads as ``col::text``
    gives it in a history-query; under a DateStyle whose times are not ISO text the
    times do not parse and the CSV path below is taken.
    Text format escapes a backslash, tab, newline or carriage return (and \\b, \\f,
    \\v) inside a value with a backslash, which the fast reader does not undo; a
    stream whose bytes hold any backslash other than that of a ``\\N`` (NULL) is read
    again as CSV (exact for every value), as is one whose times do not parse."""
    if conn is None:  # a pooled connection (archive.pool)
        with catalog.db.connection() as own:
            return copy_reads(catalog, reads, chunk_id, grid_streams, own, timeout_ms)
    grid = task_grid(catalog, list(grid_streams))
    lo, hi = grid.bounds(chunk_id)
    timeout = int(timeout_ms or catalog.settings.statement_timeout_ms)
    out: list[pa.Table] = []
    conn.autocommit = True
    what = f"read of {', '.join(r.stream for r in reads)} chunk {chunk_id}"
    with conn.cursor() as cur, read_only_errors(conn, cur, what, f"{what} exceeded {timeout} ms"):
        cur.execute("BEGIN TRANSACTION READ ONLY; SET LOCAL statement_timeout = %s", (timeout,))
        for r in reads:
            out.append(_read(catalog, cur, r, lo, hi))
    return out


def _read(catalog: Catalog, cur, r: Read, lo, hi) -> pa.Table:
    spec = catalog.stream(r.stream)
    ts = f"e.{quote(spec.ts_col)}"
    columns = [n for n, _ in r.exprs]
    where = f"FROM {quote(r.stream)} AS e WHERE {ts} >= %s AND {ts} < %s"
    text_ts = [f"({ts} AT TIME ZONE 'UTC')"] if r.with_ts else []
    sql = cur.mogrify(f"COPY (SELECT {', '.join([*text_ts, *(x for _, x in r.exprs)])} {where}) TO STDOUT",
                      (lo, hi)).decode()
    buf = io.BytesIO()
    cur.copy_expert(sql, buf, size=1 << 20)
    payload = buf.getvalue()
    if payload.find(b"\\") < 0 or payload.count(b"\\") == payload.count(b"\\N"):  # every backslash starts a NULL
        try:
            return parse_text(payload, columns, r.with_ts, r.coded)
        except pa.ArrowInvalid:  # e.g. a time outside the ISO years: the exact CSV path below
            pass
    epoch = [f"(extract(epoch FROM {ts}) * 1000000)::int8"] if r.with_ts else []
    sql = cur.mogrify(f"COPY (SELECT {', '.join([*epoch, *(x for _, x in r.exprs)])} {where}) "
                      "TO STDOUT WITH (FORMAT csv)", (lo, hi)).decode()
    buf = io.BytesIO()
    cur.copy_expert(sql, buf, size=1 << 20)
    return parse(buf.getvalue(), columns, r.with_ts, r.coded)


def codes(table: pa.Table, name: str, as_array: bool = False) -> tuple[np.ndarray, list | np.ndarray]:
    """Column ``name`` dictionary-coded: int64 codes (-1 for null) and the distinct values
    (a list, or an object array when ``as_array``).

    >>> codes(pa.table({"v": ["b", None, "a", "b"]}), "v")
    (array([ 0, -1,  1,  0]), ['b', 'a'])
    """
    col = table.column(name).combine_chunks()
    enc = col if pa.types.is_dictionary(col.type) else col.dictionary_encode()
    idx = pc.fill_null(enc.indices.cast(pa.int64()), -1).to_numpy(zero_copy_only=False)
    values = enc.dictionary.to_numpy(zero_copy_only=False) if as_array else enc.dictionary.to_pylist()
    return np.asarray(idx, dtype=np.int64), values


def texts(table: pa.Table, name: str) -> np.ndarray:
    """Column ``name`` as an object array of str / None."""
    return np.asarray(table.column(name).to_numpy(zero_copy_only=False), dtype=object)


def parse_text(payload: bytes, columns: Sequence[str], with_ts: bool = True, coded: bool = False) -> pa.Table:
    """PostgreSQL text format holding no escape (the caller checks: every backslash
    starts a ``\\N``, a NULL): the UTC ``timestamp`` text, then ``columns``, as
    :func:`parse` returns them.

    >>> t = parse_text(b"1970-01-01 00:00:00.000005\\ta\\t\\\\N\\n1970-01-01 00:00:00.5\\t\\tx\\n", ["u", "v"])
    >>> t.column("_ts_us").to_pylist(), t.column("u").to_pylist(), t.column("v").to_pylist()
    ([5, 500000], ['a', ''], [None, 'x'])
    """
    names = [TS_US, *columns] if with_ts else list(columns)
    text = pa.dictionary(pa.int32(), pa.string()) if coded else pa.string()
    types = {TS_US: pa.timestamp("us"), **{c: text for c in columns}}
    if not payload:
        return pa.table({n: pa.array([], type=pa.int64() if n == TS_US else text) for n in names})
    t = pacsv.read_csv(
        io.BytesIO(payload),
        read_options=pacsv.ReadOptions(column_names=names, use_threads=False, block_size=1 << 24),
        parse_options=pacsv.ParseOptions(delimiter="\t", quote_char=False, double_quote=False, escape_char=False,
                                         newlines_in_values=False),
        convert_options=pacsv.ConvertOptions(column_types=types, null_values=["\\N"], strings_can_be_null=True),
    )
    if with_ts:
        t = t.set_column(0, TS_US, t.column(0).cast(pa.int64()))
    return t


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
