"""Broker payloads to Arrow: JSON objects read by a Spark schema's column names.

Shared by the broker sources (:mod:`moirae.sources.nats`, :mod:`moirae.sources.mqtt`).
A payload that is not a JSON object, and a value that does not fit its column, become
nulls: a row without an event time then reaches the archive's dead-letter table with
its reason (docs/ARCHITECTURE.md, 3.1), rather than failing the source or vanishing.

>>> from pyspark.sql.types import StructType
>>> s = StructType.fromJson({"type": "struct", "fields": [
...     {"name": "ts", "type": "timestamp", "nullable": True, "metadata": {}},
...     {"name": "v", "type": "double", "nullable": True, "metadata": {}}]})
>>> b = to_arrow([{"ts": 1.5, "v": "2"}, {"ts": "2024-01-01T00:00:00Z", "v": "x"}], s)
>>> b.column(0).to_pylist()[0].isoformat(), b.column(1).to_pylist()
('1970-01-01T00:00:01.500000+00:00', [2.0, None])
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def decode(payload: bytes) -> dict[str, Any]:
    """The JSON object in ``payload``, or ``{}`` when it is not one."""
    try:
        obj = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        return {}
    return obj if isinstance(obj, dict) else {}


def _timestamp(v: Any) -> datetime | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int | float):
        if not math.isfinite(v) or abs(v) > 2.5e11:
            return None
        return datetime.fromtimestamp(v, UTC)
    if isinstance(v, str):
        try:
            t = datetime.fromisoformat(v.strip().replace("Z", "+00:00"))
        except ValueError:
            return None
        return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)
    return None


def _double(v: Any) -> float | None:
    if isinstance(v, bool):
        return float(v)
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _long(v: Any) -> int | None:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, float):
        return int(v) if v.is_integer() and abs(v) < 2**63 else None
    try:
        n = int(v)
    except (TypeError, ValueError):
        return None
    return n if -(2**63) <= n < 2**63 else None


def _boolean(v: Any) -> bool | None:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.lower() in ("true", "false"):
        return v.lower() == "true"
    return None


def _string(v: Any) -> str | None:
    if v is None:
        return None
    return v if isinstance(v, str) else json.dumps(v, separators=(",", ":"), default=str)


_CONVERT = {"timestamp": _timestamp, "double": _double, "float": _double, "long": _long, "integer": _long,
            "short": _long, "boolean": _boolean}


def arrow_type(kind: str):
    import pyarrow as pa

    return {"timestamp": pa.timestamp("us", tz="UTC"), "double": pa.float64(), "float": pa.float32(),
            "long": pa.int64(), "integer": pa.int32(), "short": pa.int16(), "boolean": pa.bool_()
            }.get(kind, pa.string())


def to_arrow(records: list[dict[str, Any]], schema, extra: dict[str, list] | None = None):
    """A pyarrow RecordBatch of ``records`` (dicts) with the columns of the Spark
    ``schema``; ``extra`` gives whole columns by name (e.g. the stream sequence)."""
    import pyarrow as pa

    arrays, names = [], []
    for f in schema.fields:
        kind = f.dataType.typeName()
        if extra and f.name in extra:
            values = extra[f.name]
        else:
            conv = _CONVERT.get(kind, _string)
            values = [conv(r.get(f.name)) if r.get(f.name) is not None else None for r in records]
        typ = arrow_type(kind)
        if kind == "integer":
            values = [v if v is None or -(2**31) <= v < 2**31 else None for v in values]
        elif kind == "short":
            values = [v if v is None or -(2**15) <= v < 2**15 else None for v in values]
        arrays.append(pa.array(values, type=typ))
        names.append(f.name)
    return pa.RecordBatch.from_arrays(arrays, names=names)


def options_of(options) -> dict[str, str]:
    """A data source's options with lower-case keys."""
    return {str(k).lower(): str(v) for k, v in dict(options).items()}


def declared_schema(options, fmt: str, error: type[Exception]) -> str:
    """The Spark DDL schema a broker data source ``fmt`` was given (its ``schema`` option,
    which ``DataStreamReader.schema(...)`` also sets), or ``error`` saying how to give one."""
    schema = options_of(options).get("schema")
    if not schema:
        raise error(f"{fmt} needs a schema: the option 'schema' (a Spark DDL string) or DataStreamReader.schema(...)")
    return schema
