"""A staged batch read back into Arrow with ``COPY ... TO STDOUT``, never row by row.

A shared read's first batches are COPYed into the stream's stage table while its chunk
interval waits for a rate (:mod:`archive.shared`); the driver then reads the batch back
and archives it. That batch may be a whole start-up backlog, so the read must cost the
same per row at any size: rows as Python tuples cost several times the COPY that wrote
them. Here fixed-width columns without NULLs (the usual metrics: times, numbers,
booleans) come as PostgreSQL's binary COPY, viewed in place by numpy; any other shape
(a text column, a NULL) as CSV parsed by Arrow's C++ reader, event times as integer
microseconds so no time zone is involved.

>>> import struct
>>> payload = _SIGNATURE + bytes(8) + struct.pack(">hiqiq", 2, 8, 5, 8, 0) + struct.pack(">h", -1)
>>> t = parse_binary(payload, ["n", "ts"], {"n": ColumnType.BIGINT, "ts": ColumnType.TIMESTAMPTZ})
>>> t.column("n").to_pylist(), t.column("ts").cast("int64").to_pylist()  # the time: 2000-01-01 in Unix us
([5], [946684800000000])
>>> parse_binary(payload, ["n"], {"n": ColumnType.TEXT}) is None
True
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from archive.names import quote
from archive.types import ColumnType

#: (bytes, numpy type) of each fixed-width type in PostgreSQL's binary COPY
_FIXED = {ColumnType.BIGINT: (8, ">i8"), ColumnType.DOUBLE: (8, ">f8"), ColumnType.TIMESTAMPTZ: (8, ">i8"),
          ColumnType.BOOLEAN: (1, "u1")}
_SIGNATURE = b"PGCOPY\n\xff\r\n\x00"
_PG_EPOCH_US = 946_684_800_000_000  # PostgreSQL's binary times count from 2000-01-01 UTC


def read_rows(cur, table: str, names: Sequence[str], types: Mapping[str, ColumnType], where: str,
              params: tuple) -> pa.Table:
    """``names`` of ``table``'s rows matching ``where`` (SQL with ``%s`` for ``params``)
    as an Arrow table of the columns' Arrow types (:attr:`ColumnType.arrow`)."""
    select = f"SELECT {', '.join(quote(c) for c in names)} FROM {quote(table)} WHERE {where}"
    if all(types[c] in _FIXED for c in names):
        got = parse_binary(_copy(cur, f"COPY ({select}) TO STDOUT WITH (FORMAT binary)", params), names, types)
        if got is not None:
            return got
    cols = [f"(extract(epoch FROM {quote(c)}) * 1000000)::int8" if types[c] == ColumnType.TIMESTAMPTZ else quote(c)
            for c in names]
    sql = f"COPY (SELECT {', '.join(cols)} FROM {quote(table)} WHERE {where}) TO STDOUT WITH (FORMAT csv)"
    return parse_csv(_copy(cur, sql, params), names, types)


def _copy(cur, sql: str, params: tuple) -> bytes:
    buf = io.BytesIO()
    cur.copy_expert(cur.mogrify(sql, params).decode(), buf, size=1 << 20)
    return buf.getvalue()


def parse_binary(payload: bytes, names: Sequence[str], types: Mapping[str, ColumnType]) -> pa.Table | None:
    """Binary COPY of fixed-width columns into Arrow, or None when it holds another shape
    (a NULL changes a row's width; a text column has none)."""
    if any(types[c] not in _FIXED for c in names) or payload[:11] != _SIGNATURE or len(payload) < 21:
        return None
    start = 19 + int.from_bytes(payload[15:19], "big")  # after the header extension
    fields = [("n", ">i2")]
    for i, c in enumerate(names):
        fields += [(f"l{i}", ">i4"), (f"v{i}", _FIXED[types[c]][1])]
    row = np.dtype(fields)
    body = memoryview(payload)[start:len(payload) - 2]  # less the trailer
    if len(body) % row.itemsize:
        return None
    rec = np.frombuffer(body, dtype=row)
    if (rec["n"] != len(names)).any() or any((rec[f"l{i}"] != _FIXED[types[c]][0]).any() for i, c in enumerate(names)):
        return None
    cols = {}
    for i, c in enumerate(names):
        v = rec[f"v{i}"]
        if types[c] == ColumnType.TIMESTAMPTZ:
            cols[c] = pa.array(v.astype(np.int64) + _PG_EPOCH_US).cast(types[c].arrow)
        elif types[c] == ColumnType.BOOLEAN:
            cols[c] = pa.array(v.astype(bool))
        else:
            cols[c] = pa.array(v.astype(v.dtype.newbyteorder("=")))
    return pa.table(cols)


def parse_csv(payload: bytes, names: Sequence[str], types: Mapping[str, ColumnType]) -> pa.Table:
    """PostgreSQL CSV (times as integer microseconds) into Arrow: ``NULL`` is an unquoted
    empty field, ``''`` a quoted one; booleans are ``t`` / ``f``."""
    if not payload:
        return pa.table({c: pa.array([], type=types[c].arrow) for c in names})
    read = {c: pa.int64() if types[c] == ColumnType.TIMESTAMPTZ else types[c].arrow for c in names}
    t = pacsv.read_csv(
        io.BytesIO(payload),
        read_options=pacsv.ReadOptions(column_names=list(names), block_size=1 << 24),
        parse_options=pacsv.ParseOptions(newlines_in_values=True),
        convert_options=pacsv.ConvertOptions(column_types=read, null_values=[""], strings_can_be_null=True,
                                             quoted_strings_can_be_null=False, true_values=["t"],
                                             false_values=["f"]))
    for i, c in enumerate(names):
        if types[c] == ColumnType.TIMESTAMPTZ:
            t = t.set_column(i, c, t.column(i).cast(types[c].arrow))
    return t
