"""Bulk loading with COPY, in PostgreSQL's binary format: no text formatting on this
side and no parsing on the server's. The executors encode Arrow batches
(:func:`arrow_to_copy_binary`); the driver's appends encode pandas frames through the
same encoder (:func:`frame_to_copy_binary`). A null is a field of length -1, so ``NULL``
and ``''`` stay distinct. Binary rather than CSV: the server then parses no field.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from archive.names import quote
from archive.types import ColumnType


def frame_to_copy_binary(frame: pd.DataFrame, columns: Sequence[tuple[str, ColumnType]]) -> bytes:
    """``frame``'s ``columns`` (values already of the archive's types, as validated by
    :func:`archive.validate.split_batch`) in PostgreSQL's binary COPY format.

    >>> import struct
    >>> frame = pd.DataFrame({"s": ["", None], "x": [1.5, None]})
    >>> body = frame_to_copy_binary(frame, [("s", ColumnType.TEXT), ("x", ColumnType.DOUBLE)])
    >>> body[:11] == b"PGCOPY\\n\\xff\\r\\n\\x00", body[-2:]
    (True, b'\\xff\\xff')
    >>> struct.unpack(">hi", body[19:25])  # two fields; the empty text has length 0, not null
    (2, 0)
    >>> struct.unpack(">hiid", body[19:37])[3]  # then the double, 8 bytes
    1.5
    >>> struct.unpack(">hii", body[37:47])  # the second row: both null (length -1)
    (2, -1, -1)
    """
    arrays = []
    for name, ctype in columns:
        s = frame[name]
        if ctype is ColumnType.TEXT:
            arr = pa.array(s.astype(object).where(s.notna(), None), type=pa.string())
        else:
            arr = pa.array(s, type=ctype.arrow, from_pandas=True)
        arrays.append(arr)
    return arrow_to_copy_binary(pa.Table.from_arrays(arrays, names=[n for n, _ in columns]), columns)


# -- binary COPY ------------------------------------------------------------------------

_PG_EPOCH_US = 946_684_800_000_000  # 2000-01-01 UTC, PostgreSQL's timestamp origin
_HEADER = b"PGCOPY\n\xff\r\n\x00" + b"\x00" * 8  # signature, flags, no header extension
_TRAILER = b"\xff\xff"
_FIXED = {ColumnType.BIGINT: ">i8", ColumnType.DOUBLE: ">f8", ColumnType.TIMESTAMPTZ: ">i8",
          ColumnType.BOOLEAN: "u1"}


def arrow_to_copy_binary(table: pa.Table, columns: Sequence[tuple[str, ColumnType]]) -> bytes:
    """``table``'s ``columns`` in PostgreSQL's binary COPY format, header and trailer
    included (:func:`arrow_to_copy_rows` gives the rows alone)."""
    return b"".join((_HEADER, arrow_to_copy_rows(table, columns), _TRAILER))


def arrow_to_copy_rows(table: pa.Table, columns: Sequence[tuple[str, ColumnType]]) -> bytes:
    """``table``'s ``columns`` as the rows of a binary COPY, without its header and
    trailer (:func:`copy_binary_stream` adds them): no text formatting on this side and
    no parsing on the server's.

    Each value becomes its field (a big-endian int32 length, -1 for null, then the
    value's big-endian bytes; a timestamp is microseconds since 2000-01-01). Fields of a
    fixed width on every row (the field count, each length, the values of a column
    without nulls) are packed side by side into one numpy record array per run
    (:class:`_Runs`); only a text column's bytes and a column with nulls break a run.
    When they do, Arrow's ``binary_join_element_wise`` concatenates each row's pieces,
    so no per-value Python call is made either way. Arrow
    columns must already have the archive's types (text may be ``string`` or
    ``large_string``).
    """
    n = table.num_rows
    if n == 0:
        return b""
    runs = _Runs(n)
    runs.field(">i2", len(columns))
    for name, ctype in columns:
        arr = table.column(name).combine_chunks()
        valid = np.asarray(arr.is_valid(), dtype=bool) if arr.null_count else None
        if ctype is ColumnType.TEXT:
            arr = arr.cast(pa.large_string())
            offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64)[arr.offset:arr.offset + n + 1]
            lens = np.diff(offsets)
            runs.field(">i4", lens if valid is None else np.where(valid, lens, -1))
            runs.piece(arr.cast(pa.large_binary()).fill_null(b""))
            continue
        width = np.dtype(_FIXED[ctype]).itemsize
        if valid is None:
            runs.field(">i4", width)
            runs.field(_FIXED[ctype], _values(arr, ctype))
            continue
        block = np.empty(n, dtype=np.dtype([("len", ">i4"), ("val", _FIXED[ctype])]))
        block["len"], block["val"] = width, _values(arr, ctype)
        runs.piece(pc.if_else(pa.array(valid), _fixed(block.view(np.uint8).reshape(n, 4 + width)),
                              pa.scalar(b"\xff\xff\xff\xff", pa.large_binary())))
    pieces = runs.done()
    if len(pieces) == 1 and isinstance(pieces[0], np.ndarray):  # fixed-width rows: already the body
        return pieces[0].tobytes()
    rows = pc.binary_join_element_wise(*(_fixed(p) if isinstance(p, np.ndarray) else p for p in pieces),
                                       pa.scalar(b"", pa.large_binary()))
    offsets = np.frombuffer(rows.buffers()[1], dtype=np.int64)[rows.offset:rows.offset + n + 1]
    return bytes(memoryview(rows.buffers()[2])[int(offsets[0]):int(offsets[-1])])


class _Runs:
    """The pieces of ``n`` binary COPY rows, left to right: a run of fixed-width fields
    becomes one packed record array (no padding between fields), filled a field at a
    time; any other piece (an Arrow binary array, one value per row) ends the run."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.pieces: list = []
        self.fields: list[tuple[str, object]] = []

    def field(self, dtype: str, values) -> None:
        """A fixed-width field of every row: a scalar or an array of ``n`` values."""
        self.fields.append((dtype, values))

    def piece(self, arr: pa.Array) -> None:
        self._close_run()
        self.pieces.append(arr)

    def done(self) -> list:
        """The pieces: (n, w) uint8 arrays for the runs, Arrow arrays for the rest."""
        self._close_run()
        return self.pieces

    def _close_run(self) -> None:
        if self.fields:
            rec = np.empty(self.n, dtype=np.dtype([(f"f{i}", d) for i, (d, _) in enumerate(self.fields)]))
            for i, (_, values) in enumerate(self.fields):
                rec[f"f{i}"] = values
            self.pieces.append(rec.view(np.uint8).reshape(self.n, rec.dtype.itemsize))
            self.fields = []


def _values(arr: pa.Array, ctype: ColumnType) -> np.ndarray:
    """A fixed-width column's values as numpy (nulls as 0; a timestamp in PostgreSQL's
    microseconds since 2000-01-01)."""
    if ctype is ColumnType.TIMESTAMPTZ:
        return np.asarray(arr.cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()).fill_null(0)) - _PG_EPOCH_US
    return np.asarray(arr.fill_null(False if ctype is ColumnType.BOOLEAN else 0))


def _fixed(block: np.ndarray) -> pa.Array:
    """Rows of a (n, w) uint8 block as an Arrow ``large_binary`` array (one value per row)."""
    block = np.ascontiguousarray(block)
    return pa.FixedSizeBinaryArray.from_buffers(pa.binary(block.shape[1]), block.shape[0],
                                                [None, pa.py_buffer(block)]).cast(pa.large_binary())


def copy_binary(cur, table: str, column_names: Sequence[str], payload: bytes) -> None:
    cols = ", ".join(quote(c) for c in column_names)
    cur.copy_expert(f"COPY {quote(table)} ({cols}) FROM STDIN WITH (FORMAT binary)", io.BytesIO(payload),
                    size=1 << 20)  # psycopg2 reads the payload this many bytes a call (default 8 KiB)


def copy_binary_stream(cur, table: str, column_names: Sequence[str], rows: Iterable[bytes]) -> None:
    """One binary COPY into ``table`` whose rows are the pieces ``rows`` yields
    (:func:`arrow_to_copy_rows`), sent as each comes: the server inserts one piece
    while the next is being made, and however many pieces there are, the server sets up
    one COPY, not one a piece (its fixed cost per statement made 10,000-row statements
    cost it about half as much again per row as 50,000-row ones).

    ``rows`` may read from elsewhere while the COPY is open, but not on this
    connection. An exception it raises makes the server abort the COPY (no row of it is
    inserted) and is raised here; the caller's transaction must then be rolled back.

    >>> class Cur:  # what the server receives
    ...     def copy_expert(self, sql, f, size):
    ...         self.sql, self.got = sql, b"".join(iter(lambda: f.read(size), b""))
    >>> cur = Cur()
    >>> copy_binary_stream(cur, "t", ["a"], iter([b"r1", b"", b"r2"]))
    >>> cur.sql, cur.got == _HEADER + b"r1r2" + _TRAILER
    ('COPY "t" ("a") FROM STDIN WITH (FORMAT binary)', True)
    """
    feed = _Feed(rows)
    cols = ", ".join(quote(c) for c in column_names)
    try:
        cur.copy_expert(f"COPY {quote(table)} ({cols}) FROM STDIN WITH (FORMAT binary)", feed, size=1 << 20)
    except Exception as exc:
        if feed.error is None:
            raise
        raise feed.error from exc  # psycopg2 aborted the COPY for it ("error in .read() call")


class _Feed:
    """The file psycopg2 reads a streamed COPY from: the header, each non-empty piece
    (of any length: psycopg2 sends what ``read`` returns), the trailer, then end. An
    exception of the pieces' source is kept and raised on: psycopg2 then aborts the COPY."""

    def __init__(self, rows: Iterable[bytes]) -> None:
        self.rows, self.started, self.ended = iter(rows), False, False
        self.error: BaseException | None = None

    def read(self, _size: int = -1) -> bytes:
        if not self.started:
            self.started = True
            return _HEADER
        while not self.ended:
            try:
                piece = next(self.rows)
            except StopIteration:
                break
            except BaseException as exc:
                self.error = exc
                raise
            if piece:
                return piece
        if self.ended:
            return b""
        self.ended = True
        return _TRAILER
