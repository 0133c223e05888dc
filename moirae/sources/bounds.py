"""Admission control for the sources built on Spark's own readers: how many files or
rows one micro-batch may take, so a query that fell behind (a burst, a restart after
downtime) takes its backlog in batches of the usual size instead of one batch that
grows with the backlog and costs more per row (docs/ARCHITECTURE.md 3.7, "Bounded
micro-batches").

- Files (the ``file`` kind, and the inboxes of the ``prometheus`` and ``alertmanager``
  receivers, one file per request): Spark's ``maxFilesPerTrigger``, here
  :data:`DEFAULT_MAX_FILES` unless the source's options say otherwise; ``0`` lifts the
  bound (Spark's own default: every new file in one batch).
- Rows of the ``rate`` kind: Spark's paced ``rate`` source (``rowsPerSecond``) has no
  admission control, each batch takes every row due since the last; with ``rowsPerBatch``
  the kind is Spark's ``rate-micro-batch`` instead, which admits exactly that many rows per
  batch (event time advancing ``advanceMillisPerBatch`` per batch): the bounded form of a
  rate whose backlog never runs dry.

The engine's own sources bound their batches themselves (``maxBatch`` of NATS and MQTT,
``maxRowsPerBatch`` of ``replay`` and ``maritime``, ``maxSpanSeconds`` of ``cluster``).

>>> max_files({}, "file source"), max_files({"maxFilesPerTrigger": "20"}, "x"), max_files({"maxfilespertrigger": 0}, "x")
(1000, 20, None)
>>> max_files({"maxFilesPerTrigger": "many"}, "file source")
Traceback (most recent call last):
...
moirae.sources.errors.InvalidSourceOption: file source: option 'maxFilesPerTrigger' must be a whole number, 0 for no bound, got 'many'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from moirae.sources.errors import InvalidSourceOption

#: files per micro-batch at most unless ``maxFilesPerTrigger`` says otherwise (as
#: Databricks' Auto Loader does by default): a receiver's file is one request, a
#: ``file`` source's usually one export, so a batch stays near what a trigger brings
DEFAULT_MAX_FILES = 1000

#: the ``rate`` kind's options that choose its bounded form, ``rate-micro-batch``
RATE_BOUNDED = ("rowsPerBatch", "advanceMillisPerBatch", "startTimestamp")
#: the ``rate`` kind's options of its paced form only
RATE_PACED = ("rowsPerSecond", "rampUpTime")


def max_files(options: Mapping[str, Any], where: str) -> int | None:
    """``maxFilesPerTrigger`` of a file source's ``options`` (any case): the default when
    absent, None for 0 (no bound); ``where`` names the source in the error."""
    raw = next((v for k, v in options.items() if str(k).lower() == "maxfilespertrigger"), None)
    if raw is None:
        return DEFAULT_MAX_FILES
    try:
        n = int(str(raw))
    except ValueError:
        n = -1
    if n < 0 or isinstance(raw, bool):
        raise InvalidSourceOption(f"{where}: option 'maxFilesPerTrigger' must be a whole number, 0 for no bound, "
                                  f"got {raw!r}")
    return n or None


def rate_format(options: Mapping[str, Any]) -> str:
    """Spark's format for the ``rate`` kind's ``options``: ``rate-micro-batch`` (bounded)
    when ``rowsPerBatch`` is given, else ``rate`` (paced, unbounded); the two forms'
    options are not mixed.

    >>> rate_format({"rowsPerSecond": 10}), rate_format({"rowsPerBatch": 100, "numPartitions": 2})
    ('rate', 'rate-micro-batch')
    >>> rate_format({"rowsPerSecond": 10, "rowsPerBatch": 100})
    Traceback (most recent call last):
    ...
    moirae.sources.errors.InvalidSourceOption: rate source: option 'rowsPerSecond' paces the unbounded form; with 'rowsPerBatch' (the bounded form, rate-micro-batch) give 'advanceMillisPerBatch' for event time instead
    >>> rate_format({"advanceMillisPerBatch": 1000})
    Traceback (most recent call last):
    ...
    moirae.sources.errors.InvalidSourceOption: rate source: option 'advanceMillisPerBatch' needs 'rowsPerBatch' (the bounded form, rate-micro-batch)
    """
    if "rowsPerBatch" not in options:
        for k in RATE_BOUNDED:
            if k in options:
                raise InvalidSourceOption(f"rate source: option {k!r} needs 'rowsPerBatch' (the bounded form, "
                                          "rate-micro-batch)")
        return "rate"
    for k in RATE_PACED:
        if k in options:
            raise InvalidSourceOption(f"rate source: option {k!r} paces the unbounded form; with 'rowsPerBatch' "
                                      "(the bounded form, rate-micro-batch) give 'advanceMillisPerBatch' for event "
                                      "time instead")
    return "rate-micro-batch"
