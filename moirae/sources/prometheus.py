"""Prometheus remote write in: samples become a stream with labels as columns.

Any sender of Prometheus's remote-write protocol (Prometheus, Grafana Agent) posts a
snappy-compressed protobuf ``WriteRequest`` to the engine's
``POST /api/receive/prometheus/<name>`` (:mod:`moirae.api.receivers_api`). Each request
becomes one file of the source's inbox (:mod:`moirae.sources.inbox`): one row per
sample, with columns

- ``ts`` (the sample's timestamp), ``metric`` (the ``__name__`` label), ``value``;
- one text column per label named in the source's ``labels`` option (null when a
  series has no such label);
- ``labels``: the series' other labels as a JSON object.

Stale markers (the NaN Prometheus writes when a series disappears) are not samples and
are skipped; native histograms and exemplars are ignored. :func:`build` is the
``prometheus`` source kind of monitor files.

The protocol's messages are declared here (:data:`WriteRequest`), built at import from
a descriptor, so no generated code is needed.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterable, Sequence
from typing import Any

from moirae.sources.errors import SourceError
from moirae.sources.inbox import Inbox, receiver_source

KIND = "prometheus"
DEFAULT_LABELS = ("job", "instance")
RESERVED = ("ts", "metric", "value", "labels")
#: the bit pattern of Prometheus's stale marker (a NaN)
STALE_NAN = 0x7FF0000000000002


#: the ``prometheus`` source kind's options (``data_dir`` is filled in by the engine)
OPTIONS_SCHEMA = {"type": "object", "required": ["name"], "additionalProperties": False, "properties": {
    "name": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"}, "data_dir": {"type": "string"},
    "labels": {"type": ["string", "array"]}, "maxFilesPerTrigger": {"type": ["integer", "string"]}}}


class RemoteWriteError(SourceError, ValueError):
    """A body that is not a snappy-compressed remote-write request, or a bad option."""


def _messages():
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="moirae_remote_write.proto", package="moirae.prometheus",
                                             syntax="proto3")

    def message(name: str, *fields: tuple) -> None:
        m = fdp.message_type.add(name=name)
        for fname, number, ftype, repeated, type_name in fields:
            f = m.field.add(name=fname, number=number, type=ftype,
                            label=F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL)
            if type_name:
                f.type_name = f".moirae.prometheus.{type_name}"

    message("Label", ("name", 1, F.TYPE_STRING, False, None), ("value", 2, F.TYPE_STRING, False, None))
    message("Sample", ("value", 1, F.TYPE_DOUBLE, False, None), ("timestamp", 2, F.TYPE_INT64, False, None))
    message("TimeSeries", ("labels", 1, F.TYPE_MESSAGE, True, "Label"),
            ("samples", 2, F.TYPE_MESSAGE, True, "Sample"))
    message("WriteRequest", ("timeseries", 1, F.TYPE_MESSAGE, True, "TimeSeries"))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("moirae.prometheus.WriteRequest"))


#: remote write's ``prometheus.WriteRequest`` (labels and float samples; other fields skipped)
WriteRequest = _messages()


def encode(series: Iterable[tuple[dict[str, str], Sequence[tuple[int, float]]]]) -> bytes:
    """A snappy-compressed ``WriteRequest`` of ``(labels, [(timestamp ms, value)])``
    (what a Prometheus sends; for tests and tools)."""
    import cramjam

    req = WriteRequest()
    for labels, samples in series:
        ts = req.timeseries.add()
        for k, v in sorted(labels.items()):
            ts.labels.add(name=k, value=v)
        for t, v in samples:
            ts.samples.add(timestamp=int(t), value=float(v))
    return bytes(cramjam.snappy.compress_raw(req.SerializeToString()))


def decode(body: bytes) -> list[tuple[dict[str, str], list[tuple[int, float]]]]:
    """The series of a snappy-compressed ``WriteRequest``; :class:`RemoteWriteError`
    says what is wrong with a bad body."""
    import cramjam
    from google.protobuf.message import DecodeError

    try:
        raw = bytes(cramjam.snappy.decompress_raw(body))
    except Exception as exc:  # cramjam raises its own DecompressionError
        raise RemoteWriteError(f"body is not snappy-compressed (block format): {exc}") from None
    req = WriteRequest()
    try:
        req.ParseFromString(raw)
    except DecodeError as exc:
        raise RemoteWriteError(f"body is not a remote-write WriteRequest: {exc}") from None
    return [({lb.name: lb.value for lb in ts.labels}, [(s.timestamp, s.value) for s in ts.samples])
            for ts in req.timeseries]


def _stale(v: float) -> bool:
    return math.isnan(v) and struct.unpack("<Q", struct.pack("<d", v))[0] == STALE_NAN


def parse_labels(value: Any) -> tuple[str, ...]:
    """The ``labels`` option: a list or comma-separated text of label names."""
    if value is None:
        return DEFAULT_LABELS
    names = [s.strip() for s in (value.split(",") if isinstance(value, str) else value)]
    names = [n for n in names if n]
    for n in names:
        if n in RESERVED or not n.replace("_", "a").isalnum() or n[0].isdigit():
            raise RemoteWriteError(f"option 'labels': {n!r} cannot be a column (a label name, not one of "
                                   f"{', '.join(RESERVED)})")
    return tuple(dict.fromkeys(names))


def schema_ddl(labels: Sequence[str]) -> str:
    return ", ".join(["ts timestamp", "metric string", "value double", *(f"`{n}` string" for n in labels),
                      "labels string"])


def to_table(series, labels: Sequence[str]):
    """One row per sample (see the module doc), as a pyarrow Table."""
    import pyarrow as pa

    cols: dict[str, list] = {"ts": [], "metric": [], "value": [], **{n: [] for n in labels}, "labels": []}
    for lbls, samples in series:
        kept = [(t, v) for t, v in samples if not _stale(v)]
        if not kept:
            continue
        rest = {k: v for k, v in sorted(lbls.items()) if k != "__name__" and k not in labels}
        other = json.dumps(rest, separators=(",", ":"))
        for t, v in kept:
            cols["ts"].append(t * 1000)
            cols["metric"].append(lbls.get("__name__"))
            cols["value"].append(v)
            for n in labels:
                cols[n].append(lbls.get(n))
            cols["labels"].append(other)
    arrays = [pa.array(cols["ts"], type=pa.timestamp("us", tz="UTC")), pa.array(cols["metric"], pa.string()),
              pa.array(cols["value"], pa.float64()), *(pa.array(cols[n], pa.string()) for n in labels),
              pa.array(cols["labels"], pa.string())]
    return pa.Table.from_arrays(arrays, names=["ts", "metric", "value", *labels, "labels"])


class RemoteWriteReceiver:
    """What ``POST /api/receive/prometheus/<name>`` does with a body."""

    def __init__(self, inbox: Inbox, labels: Sequence[str]) -> None:
        self.inbox, self.labels = inbox, tuple(labels)

    @classmethod
    def open(cls, data_dir, name: str) -> RemoteWriteReceiver:
        inbox = Inbox.open(data_dir, KIND, name)
        meta = json.loads((inbox.path.parent / f"{name}.json").read_text())
        return cls(inbox, meta["labels"])

    def receive(self, body: bytes) -> int:
        """Store the request's samples durably; returns how many."""
        table = to_table(decode(body), self.labels)
        self.inbox.write(table)
        return table.num_rows


def build(spark, options: dict, schema=None):
    """The ``prometheus`` source kind: options ``name`` (the receiver's name), ``data_dir``
    (the engine's), ``labels`` (label names as columns; default job, instance),
    ``maxFilesPerTrigger`` (requests per micro-batch at most, :mod:`moirae.sources.bounds`)."""
    return receiver_source(spark, options, KIND, RemoteWriteError, parse_labels, schema_ddl)
