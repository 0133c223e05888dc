"""NATS JetStream as a Spark 4 Python Data Source: format ``moirae_nats``.

Usage::

    register_nats_source(spark)
    df = (spark.readStream.format("moirae_nats")
          .option("stream", "METRICS").option("subject", "metrics.>")
          .option("schema", "ts timestamp, host string, cpu double").load())

or :func:`build` (the ``nats`` source kind of monitor files). Each message's payload is
a JSON object read by the schema's column names (:mod:`moirae.sources.payloads`).

**Exactly once across restarts.** An offset is a JetStream *stream sequence number*
(``{"seq": n}``: everything up to and including ``n``). A micro-batch is the sequence
range ``(start, end]``; reading it again reads the same messages, from the stream
itself, through an ephemeral consumer that starts at ``start + 1`` and acknowledges
nothing (nothing is consumed away). Spark's checkpoint records each batch's range
before it runs, and the archive's batch log keeps a replayed batch from being written
twice (docs/ARCHITECTURE.md, 3.1), so after a crash the archive holds every message
once. Messages the stream itself has dropped (its retention limits) before they were
read are gaps JetStream cannot replay.

Options: ``stream`` (required), ``servers`` (comma-separated URLs, default
``nats://127.0.0.1:4222``), ``subject`` (a filter within the stream), ``schema`` (a
Spark DDL string, unless the reader is given a schema), ``maxBatch`` (the source's
admission control: sequences per micro-batch at most, default :data:`DEFAULT_MAX_BATCH`;
0: no bound), ``partitions`` (a batch's range is split into that many reads,
default 1), ``seqColumn`` and ``subjectColumn`` (schema columns filled with the
message's stream sequence and subject instead of payload fields), ``fetch`` (messages
per fetch, default 1000).
"""

from __future__ import annotations

import asyncio
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from moirae.sources.errors import SourceError
from moirae.sources.payloads import declared_schema, decode, options_of, to_arrow

FORMAT = "moirae_nats"
DEFAULT_SERVERS = "nats://127.0.0.1:4222"
#: sequences per micro-batch at most unless ``maxBatch`` says otherwise (a backlog goes in
#: bounded batches instead of one batch that grows with it)
DEFAULT_MAX_BATCH = 100_000
_KNOWN = {"stream", "servers", "subject", "schema", "maxbatch", "partitions", "seqcolumn", "subjectcolumn",
          "fetch"}


#: the ``nats`` source kind's options, for monitor files (moirae/sources/kinds.py)
OPTIONS_SCHEMA = {"type": "object", "required": ["stream"], "additionalProperties": False, "properties": {
    "stream": {"type": "string", "minLength": 1}, "servers": {"type": ["string", "array"]},
    "subject": {"type": "string"}, "schema": {"type": "string"}, "maxBatch": {"type": ["integer", "string"]},
    "partitions": {"type": ["integer", "string"]}, "seqColumn": {"type": "string"},
    "subjectColumn": {"type": "string"}, "fetch": {"type": ["integer", "string"]}}}


class NatsSourceError(SourceError, ValueError):
    """A bad ``moirae_nats`` option, or a stream that cannot be read."""


def parse_options(options) -> dict[str, Any]:
    """Checked options (the message names the option and value at fault)."""
    opts = options_of(options)
    unknown = sorted(set(opts) - _KNOWN)
    if unknown:
        raise NatsSourceError(f"unknown {FORMAT} option(s): {', '.join(unknown)} (known: {', '.join(sorted(_KNOWN))})")
    if not opts.get("stream"):
        raise NatsSourceError(f"{FORMAT} needs the option 'stream' (the JetStream stream's name)")
    out: dict[str, Any] = {"stream": opts["stream"], "servers": opts.get("servers", DEFAULT_SERVERS).split(","),
                           "subject": opts.get("subject") or "", "seq_col": opts.get("seqcolumn"),
                           "subject_col": opts.get("subjectcolumn")}
    for key, default in (("maxbatch", DEFAULT_MAX_BATCH), ("partitions", 1), ("fetch", 1000)):
        raw = opts.get(key, str(default))
        try:
            out[key] = int(raw)
        except ValueError:
            raise NatsSourceError(f"option {key!r} must be a whole number, got {raw!r}") from None
        if out[key] < (0 if key == "maxbatch" else 1):
            raise NatsSourceError(f"option {key!r} must be positive, got {raw!r}")
    return out


async def _connect(servers: list[str]):
    import nats

    return await nats.connect(servers=servers, connect_timeout=5, max_reconnect_attempts=2, allow_reconnect=True)


async def last_sequence(servers: list[str], stream: str) -> int:
    """The stream's last sequence number (0 when empty)."""
    from nats.js.errors import NotFoundError

    nc = await _connect(servers)
    try:
        try:
            info = await nc.jetstream().stream_info(stream)
        except NotFoundError:
            raise NatsSourceError(f"no JetStream stream {stream!r} on {','.join(servers)}") from None
        return int(info.state.last_seq)
    finally:
        await nc.close()


async def read_range(servers: list[str], stream: str, subject: str, start: int, end: int,
                     fetch: int = 1000) -> list[tuple[int, str, bytes]]:
    """The messages with stream sequence in ``(start, end]`` as ``(seq, subject, payload)``,
    read through an ephemeral consumer that acknowledges nothing."""
    from nats.errors import TimeoutError as NatsTimeout
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

    if end <= start:
        return []
    nc = await _connect(servers)
    out: list[tuple[int, str, bytes]] = []
    try:
        js = nc.jetstream()
        cfg = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=start + 1,
                             ack_policy=AckPolicy.NONE, inactive_threshold=30.0, max_ack_pending=-1)
        sub = await js.pull_subscribe(subject, stream=stream, config=cfg)
        try:
            while True:
                try:
                    msgs = await sub.fetch(min(fetch, end - start), timeout=2.0)
                except NatsTimeout:
                    break  # nothing left below end: those sequences are gone from the stream
                done = False
                for m in msgs:
                    md = m.metadata
                    seq = int(md.sequence.stream)
                    if seq > end:
                        done = True
                        break
                    out.append((seq, m.subject, m.data))
                    if seq == end or md.num_pending == 0:
                        done = True
                        break
                if done:
                    break
        finally:
            try:
                await sub.unsubscribe()
            except Exception:  # the ephemeral consumer goes away on its own (inactive_threshold)
                pass
    finally:
        await nc.close()
    return out


class SeqRange(InputPartition):
    """Stream sequences ``(start, end]``."""

    def __init__(self, start: int, end: int) -> None:
        super().__init__((start, end))
        self.start, self.end = start, end


class NatsDataSource(DataSource):
    """``moirae_nats``: a JetStream stream, replayable by stream sequence."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self):
        return declared_schema(self.options, FORMAT, NatsSourceError)

    def streamReader(self, schema) -> DataSourceStreamReader:
        return NatsStreamReader(parse_options(self.options), schema)


class NatsStreamReader(DataSourceStreamReader):
    """Offsets ``{"seq": n}``: the last stream sequence a micro-batch includes."""

    def __init__(self, opts: dict[str, Any], schema) -> None:
        self.opts, self.schema = opts, schema

    def initialOffset(self) -> dict:
        return {"seq": 0}

    def getDefaultReadLimit(self):
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

        return ReadMaxRows(self.opts["maxbatch"]) if self.opts["maxbatch"] else ReadAllAvailable()

    def latestOffset(self, start: dict, limit) -> dict:
        from pyspark.sql.streaming.datasource import ReadMaxRows

        last = asyncio.run(last_sequence(self.opts["servers"], self.opts["stream"]))
        if isinstance(limit, ReadMaxRows):  # a cap counts sequences (an upper bound on messages)
            last = min(last, int(start["seq"]) + limit.max_rows)
        return {"seq": max(last, int(start["seq"]))}

    def partitions(self, start: dict, end: dict):
        a, b = int(start["seq"]), int(end["seq"])
        if b <= a:
            return []
        n = max(1, min(self.opts["partitions"], b - a))
        step = -(-(b - a) // n)
        return [SeqRange(lo, min(lo + step, b)) for lo in range(a, b, step)]

    def read(self, partition: SeqRange):
        o = self.opts
        msgs = asyncio.run(read_range(o["servers"], o["stream"], o["subject"], partition.start, partition.end,
                                      o["fetch"]))
        if not msgs:
            return
        extra = {}
        if o["seq_col"]:
            extra[o["seq_col"]] = [m[0] for m in msgs]
        if o["subject_col"]:
            extra[o["subject_col"]] = [m[1] for m in msgs]
        yield to_arrow([decode(m[2]) for m in msgs], self.schema, extra)

    def commit(self, end: dict) -> None:
        """Nothing to acknowledge: the stream keeps its messages (its own retention decides)."""


def register_nats_source(spark) -> None:
    """Register ``moirae_nats`` with ``spark`` (idempotent)."""
    spark.dataSource.register(NatsDataSource)


def build(spark, options: dict, schema=None):
    """The ``nats`` source kind: a streaming DataFrame over a JetStream stream
    (``options`` as the data source's, ``schema`` a StructType or DDL, else option ``schema``)."""
    register_nats_source(spark)
    reader = spark.readStream.format(FORMAT)
    for k, v in options.items():
        reader = reader.option(k, ",".join(v) if isinstance(v, list | tuple) else str(v))
    if schema is not None:
        reader = reader.schema(schema)
    parse_options({k: v for k, v in options.items() if k.lower() != "schema"})
    return reader.load()
