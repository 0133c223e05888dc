"""A receiver's inbox: a folder of Parquet files that Spark's file source streams.

HTTP receivers (Prometheus remote write, :mod:`moirae.sources.prometheus`; Alertmanager
webhooks, :mod:`moirae.sources.alerts_in`) turn each request into one Parquet file, written
under a hidden name, flushed to disk and renamed into place, before they answer. Spark's
file source (``spark.readStream.parquet``) lists the folder; its checkpoint records which
files each micro-batch read, so a restarted query reads every file once and the
archive's batch log keeps a replayed batch from being written twice (docs/ARCHITECTURE.md,
3.1). A sender whose request failed retries it (Prometheus does), so nothing answered
with success is lost; a request retried after a success that did not reach the sender
is archived twice.

The folder of ``(kind, name)`` is ``<data_dir>/inbox/<kind>/<name>``; a receiver accepts
only names whose folder a source created (:func:`Inbox.open`).
"""

from __future__ import annotations

import os
import re
import time
import uuid
from pathlib import Path

from moirae.sources.bounds import DEFAULT_MAX_FILES, max_files
from moirae.sources.errors import InvalidSourceOption, SourceError

NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


class InboxError(SourceError, LookupError):
    """A bad receiver name, or no source listening under that name."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def inbox_dir(data_dir: str | os.PathLike, kind: str, name: str) -> Path:
    if not NAME.fullmatch(name or ""):
        raise InboxError(f"receiver name must be 1-64 letters, digits, '_' or '-', got {name!r}")
    return Path(data_dir).resolve() / "inbox" / kind / name


class Inbox:
    """The folder of one receiver."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, data_dir, kind: str, name: str) -> Inbox:
        """The inbox of a source, created if new (private to the engine's user)."""
        path = inbox_dir(data_dir, kind, name)
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        return cls(path)

    @classmethod
    def open(cls, data_dir, kind: str, name: str) -> Inbox:
        """The inbox a source created; :class:`InboxError` when no source did."""
        path = inbox_dir(data_dir, kind, name)
        if not path.is_dir():
            raise InboxError(f"no {kind} source named {name!r} is registered on this engine")
        return cls(path)

    def write(self, table) -> Path | None:
        """Write ``table`` (pyarrow) as one new file, durably; None when it has no rows."""
        import pyarrow.parquet as pq

        if table.num_rows == 0:
            return None
        stem = f"{time.time_ns():020d}-{uuid.uuid4().hex[:12]}.parquet"
        tmp = self.path / f".{stem}.tmp"
        pq.write_table(table, tmp)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        final = self.path / stem
        os.replace(tmp, final)
        return final

    def stream(self, spark, schema, max_files: int | None = DEFAULT_MAX_FILES):
        """The streaming DataFrame over this inbox (files in name order, i.e. arrival), at
        most ``max_files`` files (requests) per micro-batch (None: no bound)."""
        reader = spark.readStream.schema(schema).option("latestFirst", "false")
        if max_files is not None:
            reader = reader.option("maxFilesPerTrigger", int(max_files))
        return reader.parquet(str(self.path))


def receiver_source(spark, options: dict, kind: str, error: type[Exception], parse_labels, schema_ddl):
    """The streaming DataFrame of a receiver source kind (``prometheus``,
    ``alertmanager``): options ``name`` (the receiver's, in its URL), ``data_dir`` (the
    engine's), ``labels`` (label names as columns, parsed by ``parse_labels``; the
    schema is ``schema_ddl(labels)``) and ``maxFilesPerTrigger`` (requests per micro-batch
    at most, default :data:`moirae.sources.bounds.DEFAULT_MAX_FILES`, 0: no bound). A bad
    option raises ``error`` naming it."""
    import json

    opts = {str(k).lower(): v for k, v in options.items()}
    unknown = sorted(set(opts) - {"name", "data_dir", "labels", "maxfilespertrigger"})
    if unknown:
        raise error(f"unknown {kind} source option(s): {', '.join(unknown)} (known: name, data_dir, labels, "
                    "maxFilesPerTrigger)")
    for key in ("name", "data_dir"):
        if not opts.get(key):
            raise error(f"the {kind} source needs the option {key!r}")
    labels = parse_labels(opts.get("labels"))
    try:
        bound = max_files(opts, f"{kind} source {opts['name']!r}")
    except InvalidSourceOption as exc:
        raise error(str(exc)) from None
    inbox = Inbox.create(opts["data_dir"], kind, str(opts["name"]))
    (inbox.path.parent / f"{opts['name']}.json").write_text(json.dumps({"labels": list(labels)}))
    return inbox.stream(spark, schema_ddl(labels), bound)
