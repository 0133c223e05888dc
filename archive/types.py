"""Column types of archived streams, and coercion of incoming values to them.

A stream's schema maps each payload column to one of five SQL types. Incoming batches
(pandas, Arrow or Spark) are coerced column by column; a value that does not fit its
column's type makes its row a dead letter, with the column and value named.
"""

from __future__ import annotations

from enum import StrEnum

import numpy as np
import pandas as pd
import pyarrow as pa

from archive.errors import UnsupportedType


class ColumnType(StrEnum):
    BIGINT = "bigint"
    DOUBLE = "double precision"
    TEXT = "text"
    BOOLEAN = "boolean"
    TIMESTAMPTZ = "timestamptz"

    @property
    def arrow(self) -> pa.DataType:
        return {
            ColumnType.BIGINT: pa.int64(),
            ColumnType.DOUBLE: pa.float64(),
            ColumnType.TEXT: pa.string(),
            ColumnType.BOOLEAN: pa.bool_(),
            ColumnType.TIMESTAMPTZ: pa.timestamp("us", tz="UTC"),
        }[self]


_ALIASES = {
    "int": ColumnType.BIGINT, "integer": ColumnType.BIGINT, "long": ColumnType.BIGINT,
    "bigint": ColumnType.BIGINT, "int64": ColumnType.BIGINT,
    "float": ColumnType.DOUBLE, "double": ColumnType.DOUBLE, "float64": ColumnType.DOUBLE,
    "double precision": ColumnType.DOUBLE,
    "str": ColumnType.TEXT, "string": ColumnType.TEXT, "text": ColumnType.TEXT,
    "bool": ColumnType.BOOLEAN, "boolean": ColumnType.BOOLEAN,
    "timestamp": ColumnType.TIMESTAMPTZ, "timestamptz": ColumnType.TIMESTAMPTZ,
}


def parse_type(name: str, where: str) -> ColumnType:
    """``'int'``, ``'double'``, ``'string'``... to a ColumnType; the error names ``where``."""
    try:
        return _ALIASES[str(name).strip().lower()]
    except KeyError:
        raise UnsupportedType(f"{where}: unsupported column type {name!r} "
                              f"(use one of {sorted(set(_ALIASES))})") from None


def from_arrow(t: pa.DataType, where: str) -> ColumnType:
    if pa.types.is_integer(t):
        return ColumnType.BIGINT
    if pa.types.is_floating(t) or pa.types.is_decimal(t):
        return ColumnType.DOUBLE
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_dictionary(t):
        return ColumnType.TEXT
    if pa.types.is_boolean(t):
        return ColumnType.BOOLEAN
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        return ColumnType.TIMESTAMPTZ
    raise UnsupportedType(f"{where}: cannot archive Arrow type {t}")


def from_spark(t, where: str) -> ColumnType:
    """A pyspark DataType (imported lazily: only the sink adapter needs Spark)."""
    name = t.typeName()
    mapping = {
        "byte": ColumnType.BIGINT, "short": ColumnType.BIGINT, "integer": ColumnType.BIGINT,
        "long": ColumnType.BIGINT, "float": ColumnType.DOUBLE, "double": ColumnType.DOUBLE,
        "decimal": ColumnType.DOUBLE, "string": ColumnType.TEXT, "boolean": ColumnType.BOOLEAN,
        "timestamp": ColumnType.TIMESTAMPTZ, "timestamp_ntz": ColumnType.TIMESTAMPTZ,
        "date": ColumnType.TIMESTAMPTZ,
    }
    if name not in mapping:
        raise UnsupportedType(f"{where}: cannot archive Spark type {t.simpleString()}")
    return mapping[name]


def coerce(values: pd.Series, ctype: ColumnType) -> tuple[pd.Series, np.ndarray]:
    """Coerce ``values`` to ``ctype``. Returns the coerced series and a boolean mask of
    rows whose (non-null) value could not be coerced."""
    present = values.notna().to_numpy()
    if ctype is ColumnType.TIMESTAMPTZ:
        out = to_utc(values)
    elif ctype is ColumnType.BIGINT:
        out = _to_bigint(values)
    elif ctype is ColumnType.DOUBLE:
        if isinstance(values.dtype, pd.Float64Dtype):
            out = values  # nullable: NaN and null stay distinct (as Spark keeps them)
        else:
            out = pd.to_numeric(values, errors="coerce").astype("float64")
    elif ctype is ColumnType.BOOLEAN:
        out = values.map(_to_bool, na_action="ignore").astype("boolean")
    elif pd.api.types.infer_dtype(values, skipna=True) in ("string", "empty"):
        out = values.astype("string")  # already text: no per-value Python call
    else:
        out = values.map(lambda v: v if isinstance(v, str) else str(v), na_action="ignore").astype("string")
    bad = present & out.isna().to_numpy()
    return out, bad


_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1


def _to_bigint(values: pd.Series) -> pd.Series:
    """Integers exactly (never through float64, which would round ids above 2**53);
    integral floats and numeric strings are accepted, anything else becomes NA.

    >>> _to_bigint(pd.Series([2**63 - 1, None, "12", 3.0, 2.5, "x", True], dtype=object)).tolist()
    [9223372036854775807, <NA>, 12, 3, <NA>, <NA>, <NA>]
    """
    if pd.api.types.is_integer_dtype(values.dtype):
        return values.astype("Int64")
    if pd.api.types.is_float_dtype(values.dtype):
        ok = values.notna() & np.isfinite(values.astype("float64").fillna(0)) & (values == np.floor(values))
        ok &= (values >= _I64_MIN) & (values < 2.0**63)
        return values.where(ok).astype("Float64").astype("Int64")
    return pd.Series(pd.array([_int_or_na(v) for v in values], dtype="Int64"), index=values.index)


def _int_or_na(v):
    if v is None or v is pd.NA or isinstance(v, bool | np.bool_):
        return pd.NA
    if isinstance(v, int | np.integer):
        n = int(v)
    elif isinstance(v, float | np.floating):
        if not np.isfinite(v) or v != np.floor(v):
            return pd.NA
        n = int(v)
    elif isinstance(v, str):
        try:
            n = int(v.strip())
        except ValueError:
            try:
                f = float(v)
            except ValueError:
                return pd.NA
            return _int_or_na(f)
    else:
        return pd.NA
    return n if _I64_MIN <= n <= _I64_MAX else pd.NA


def to_utc(values: pd.Series) -> pd.Series:
    """Event times to tz-aware UTC; unparseable values become NaT. Naive values are
    taken as UTC."""
    if pd.api.types.is_datetime64_any_dtype(values):
        out = values
    elif pd.api.types.is_numeric_dtype(values):
        out = pd.to_datetime(values, unit="s", utc=True, errors="coerce")
    else:
        out = pd.to_datetime(values, utc=True, errors="coerce", format="mixed")
    if getattr(out.dt, "tz", None) is None:
        out = out.dt.tz_localize("UTC")
    return out.dt.tz_convert("UTC").astype("datetime64[us, UTC]")


_TRUE = {"true", "t", "1", "yes", "y"}
_FALSE = {"false", "f", "0", "no", "n"}


def _to_bool(v):
    if isinstance(v, bool | np.bool_):
        return bool(v)
    if isinstance(v, int | np.integer) and v in (0, 1):
        return bool(v)
    s = str(v).strip().lower()
    if s in _TRUE:
        return True
    if s in _FALSE:
        return False
    return None


NULLABLE_DTYPES = {pa.int64(): pd.Int64Dtype(), pa.int32(): pd.Int64Dtype(), pa.float64(): pd.Float64Dtype(),
                   pa.bool_(): pd.BooleanDtype()}
"""Arrow -> pandas types for ``to_pandas(types_mapper=NULLABLE_DTYPES.get)``: not through
float64, which would round bigint ids above 2**53 and make NaN indistinguishable from null."""
