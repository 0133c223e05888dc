"""Bulk loading with COPY: a pandas frame to CSV through Arrow's C++ writer, streamed
into PostgreSQL. Nulls are written unquoted-empty and every valid value is quoted, so
``NULL`` and ``''`` stay distinct."""

from __future__ import annotations

import io
from collections.abc import Sequence

import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv

from archive.names import quote
from archive.types import ColumnType


def frame_to_csv(frame: pd.DataFrame, columns: Sequence[tuple[str, ColumnType]]) -> bytes:
    arrays = []
    for name, ctype in columns:
        s = frame[name]
        if ctype is ColumnType.TEXT:
            arr = pa.array(s.astype(object).where(s.notna(), None), type=pa.string())
        elif ctype is ColumnType.TIMESTAMPTZ:
            arr = pa.array(s, type=ctype.arrow, from_pandas=True)
        else:
            arr = pa.array(s, type=ctype.arrow, from_pandas=True)
        arrays.append(arr)
    table = pa.Table.from_arrays(arrays, names=[n for n, _ in columns])
    sink = io.BytesIO()
    pacsv.write_csv(table, sink, pacsv.WriteOptions(include_header=False, quoting_style="all_valid"))
    return sink.getvalue()


def copy_csv(cur, table: str, column_names: Sequence[str], payload: bytes) -> None:
    cols = ", ".join(quote(c) for c in column_names)
    cur.copy_expert(f"COPY {quote(table)} ({cols}) FROM STDIN WITH (FORMAT csv)", io.BytesIO(payload))
