"""The maritime scenario's vessel traffic as a Moirae source kind: ``maritime``.

``build(spark, options, schema)`` generates the rows of :mod:`moirae.sources.maritime`
for the options (``vessels``, ``hours``, ``seed``, ``start``, ``period_s``,
``decoy_rate``) into a Parquet file, once (the file's name is a digest of the options,
so the same options reuse it; under ``<data_dir>/maritime``, or the folder ``dir``), and
replays it with ``moirae_replay`` (:mod:`moirae.sources.spark_replay`) at ``speedup``
scenario seconds per wall second (``max``: as fast as the query takes them), with the
optional disorder knobs ``out_of_order``, ``max_delay_ms`` and a ``maxRowsPerBatch``
cap. The stream's columns are :data:`moirae.sources.maritime.COLUMNS`.

>>> sorted(OPTIONS_SCHEMA["properties"])[:4]
['data_dir', 'decoy_rate', 'dir', 'hours']
>>> generator_config({"vessels": "3", "hours": 2}).vessels
3
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from moirae.sources.errors import InvalidReplayOption
from moirae.sources.maritime import MaritimeConfig, MaritimeScenario

_GEN = {"vessels": int, "hours": float, "seed": int, "start": str, "period_s": float, "decoy_rate": float}
_REPLAY = ("speedup", "out_of_order", "max_delay_ms", "maxRowsPerBatch")
_NUM = {"type": ["number", "string"]}
OPTIONS_SCHEMA = {
    "type": "object", "additionalProperties": False,
    "properties": {"vessels": {"type": ["integer", "string"]}, "hours": _NUM, "seed": {"type": ["integer", "string"]},
                   "start": {"type": "string"}, "period_s": _NUM, "decoy_rate": _NUM, "speedup": _NUM,
                   "out_of_order": _NUM, "max_delay_ms": _NUM, "maxRowsPerBatch": {"type": ["integer", "string"]},
                   "dir": {"type": "string"}, "data_dir": {"type": "string"}},
}


def generator_config(options: Mapping[str, Any]) -> MaritimeConfig:
    """The generator's config from source options (strings accepted for numbers)."""
    kw = {}
    for key, cast in _GEN.items():
        if key in options and options[key] is not None:
            try:
                kw[key] = cast(options[key])
            except (TypeError, ValueError):
                raise InvalidReplayOption(f"maritime option {key!r} must be {cast.__name__}, "
                                          f"got {options[key]!r}") from None
    return MaritimeConfig(**kw)


def rows_file(options: Mapping[str, Any]) -> Path:
    """The Parquet file of the options' rows, generated when absent."""
    cfg = generator_config(options)
    folder = Path(str(options.get("dir") or Path(str(options.get("data_dir") or ".moirae")) / "maritime"))
    digest = hashlib.sha256(json.dumps(cfg.__dict__, sort_keys=True).encode()).hexdigest()[:12]
    path = folder.resolve() / f"vessels-{digest}.parquet"
    if not path.exists():
        tmp = path.with_name(path.stem + ".part.parquet")
        MaritimeScenario(cfg).write(tmp)
        tmp.replace(path)
    return path


def build(spark, options: Mapping[str, Any], schema) -> Any:
    """The ``maritime`` source kind's streaming DataFrame (see the module docstring)."""
    from moirae.sources.spark_replay import FORMAT, register_replay_source

    path = rows_file(options)
    register_replay_source(spark)
    reader = spark.readStream.format(FORMAT).option("path", str(path)).option("ts_col", "ts")
    reader = reader.option("speedup", str(options.get("speedup", "max")))
    for key in _REPLAY[1:]:
        if options.get(key) is not None:
            reader = reader.option(key, str(options[key]))
    return reader.load().drop("ingest_ts", "delay_ms")
