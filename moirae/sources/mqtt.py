"""MQTT as a Spark 4 Python Data Source: format ``moirae_mqtt``.

Usage::

    register_mqtt_source(spark)
    df = (spark.readStream.format("moirae_mqtt").option("topic", "sensors/#")
          .option("schema", "ts timestamp, id string, temp double").option("idField", "id").load())

or :func:`build` (the ``mqtt`` source kind of monitor files). Payloads are JSON objects
read by the schema's column names (:mod:`moirae.sources.payloads`).

How it reads: the driver side of the source holds one MQTT client (paho) subscribed at
QoS 1 with a persistent session (``clean_session`` off, a fixed ``clientId``). Each
message received is numbered; an offset is ``{"n": k}``, the k-th message received, and
a micro-batch ships its messages to the executors inside its partition. A message whose
``idField`` value was seen among the last ``dedupWindow`` ids (default 100 000) is
dropped: QoS 1 means *at least once*, and a broker redelivers a message it did not see
acknowledged.

Limits (MQTT has no replay; what is lost or duplicated, when):

- **While the engine is down** the broker keeps the session's QoS 1 messages and
  delivers them on reconnect, up to its own queue limit (Mosquitto's
  ``max_queued_messages``, 1000 by default; beyond it they are dropped by the broker) and
  only as long as the broker keeps the session (Mosquitto keeps it across its own
  restarts only with ``persistence true``).
- **A crash of the engine** loses the messages received (and acknowledged to the broker)
  since the last committed micro-batch: they lived only in the source's memory. A
  micro-batch Spark replays after the crash finds none of them and is empty.
- **Duplicates** are removed only by ``idField`` and only within the window held in
  memory: after a restart the window starts empty, so a publisher's retry of an old
  message is archived again. Without ``idField`` nothing is deduplicated.
- Retained messages are delivered at subscription like any other.

For replay across restarts use NATS JetStream (:mod:`moirae.sources.nats`).

Options: ``topic`` (required; MQTT wildcards allowed), ``host`` (127.0.0.1), ``port``
(1883), ``clientId`` (default ``moirae-<topic>``), ``qos`` (0 or 1, default 1),
``idField``, ``dedupWindow``, ``username``, ``password``, ``topicColumn`` (a schema
column filled with the message's topic), ``schema``, ``maxBatch`` (the source's admission
control: messages per micro-batch at most, default :data:`DEFAULT_MAX_BATCH`; 0: no
bound), so a backlog is taken in bounded batches instead of one that grows with it.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from moirae.sources.errors import SourceError
from moirae.sources.payloads import declared_schema, decode, options_of, to_arrow

FORMAT = "moirae_mqtt"
_KNOWN = {"topic", "host", "port", "clientid", "qos", "idfield", "dedupwindow", "username", "password",
          "topiccolumn", "schema", "maxbatch"}
#: messages per micro-batch at most unless ``maxBatch`` says otherwise
DEFAULT_MAX_BATCH = 100_000


#: the ``mqtt`` source kind's options, for monitor files (moirae/sources/kinds.py)
OPTIONS_SCHEMA = {"type": "object", "required": ["topic"], "additionalProperties": False, "properties": {
    "topic": {"type": "string", "minLength": 1}, "host": {"type": "string"}, "port": {"type": ["integer", "string"]},
    "clientId": {"type": "string"}, "qos": {"enum": [0, 1, "0", "1"]}, "idField": {"type": "string"},
    "dedupWindow": {"type": ["integer", "string"]}, "username": {"type": "string"}, "password": {"type": "string"},
    "topicColumn": {"type": "string"}, "schema": {"type": "string"}, "maxBatch": {"type": ["integer", "string"]}}}


class MqttSourceError(SourceError, ValueError):
    """A bad ``moirae_mqtt`` option, or a broker that refuses the connection."""


def parse_options(options) -> dict[str, Any]:
    """Checked options (the message names the option and value at fault)."""
    opts = options_of(options)
    unknown = sorted(set(opts) - _KNOWN)
    if unknown:
        raise MqttSourceError(f"unknown {FORMAT} option(s): {', '.join(unknown)} (known: {', '.join(sorted(_KNOWN))})")
    if not opts.get("topic"):
        raise MqttSourceError(f"{FORMAT} needs the option 'topic'")
    out: dict[str, Any] = {"topic": opts["topic"], "host": opts.get("host", "127.0.0.1"),
                           "client_id": opts.get("clientid") or "moirae-" + re.sub(r"[^A-Za-z0-9_-]", "_", opts["topic"]),
                           "id_field": opts.get("idfield"), "username": opts.get("username"),
                           "password": opts.get("password"), "topic_col": opts.get("topiccolumn")}
    for key, default, lo, hi in (("port", 1883, 1, 65535), ("qos", 1, 0, 1), ("dedupwindow", 100_000, 1, 10**8),
                                 ("maxbatch", DEFAULT_MAX_BATCH, 0, 10**9)):
        raw = opts.get(key, str(default))
        try:
            out[key] = int(raw)
        except ValueError:
            raise MqttSourceError(f"option {key!r} must be a whole number, got {raw!r}") from None
        if not lo <= out[key] <= hi:
            raise MqttSourceError(f"option {key!r} must be within {lo}-{hi}, got {raw!r}")
    return out


class Receiver:
    """The subscribed client and the received messages not yet committed, numbered from 1.

    ``dedup`` remembers the last ``window`` ids seen (of the ``id_field``)."""

    def __init__(self, opts: dict[str, Any]) -> None:
        import paho.mqtt.client as mqtt

        self.opts = opts
        self._lock = threading.Lock()
        self.base = 0  # number of the message before the first one held
        self.held: list[tuple[str, bytes]] = []
        self.seen: OrderedDict[str, None] = OrderedDict()
        self.duplicates = 0
        self._numbered = False
        self._subscribed = threading.Event()
        c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=opts["client_id"], clean_session=False,
                        protocol=mqtt.MQTTv311)
        if opts["username"]:
            c.username_pw_set(opts["username"], opts["password"])
        c.on_connect = self._on_connect
        c.on_subscribe = lambda *a: self._subscribed.set()
        c.on_message = self._on_message
        try:
            c.connect(opts["host"], opts["port"], keepalive=30)
        except OSError as exc:
            raise MqttSourceError(f"cannot connect to the MQTT broker at {opts['host']}:{opts['port']}: {exc}") from None
        self.client = c
        c.loop_start()
        if not self._subscribed.wait(10):
            raise MqttSourceError(f"the MQTT broker at {opts['host']}:{opts['port']} did not confirm the "
                                  f"subscription to {opts['topic']!r}")

    def _on_connect(self, client, userdata, flags, reason_code, properties=None) -> None:
        client.subscribe(self.opts["topic"], qos=self.opts["qos"])

    def _on_message(self, client, userdata, msg) -> None:
        key = None
        if self.opts["id_field"]:
            v = decode(msg.payload).get(self.opts["id_field"])
            key = None if v is None else str(v)
        with self._lock:
            if key is not None:
                if key in self.seen:
                    self.duplicates += 1
                    return
                self.seen[key] = None
                if len(self.seen) > self.opts["dedupwindow"]:
                    self.seen.popitem(last=False)
            self.held.append((msg.topic, bytes(msg.payload)))

    def latest(self, start: int) -> int:
        with self._lock:
            if not self._numbered:  # the first ask: number on after the checkpoint's last offset
                self.base, self._numbered = max(self.base, start), True
            return self.base + len(self.held)

    def between(self, start: int, end: int) -> list[tuple[str, bytes]]:
        with self._lock:
            if not self._numbered:  # a batch of the run before a restart: its messages are gone
                self.base, self._numbered = max(self.base, end), True
                return []
            lo, hi = max(0, start - self.base), max(0, end - self.base)
            return self.held[lo:hi]

    def commit(self, end: int) -> None:
        with self._lock:
            drop = max(0, min(len(self.held), end - self.base))
            del self.held[:drop]
            self.base += drop

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


class Messages(InputPartition):
    """A micro-batch's messages, shipped with the partition."""

    def __init__(self, messages: list[tuple[str, bytes]]) -> None:
        super().__init__(len(messages))
        self.messages = messages


class MqttDataSource(DataSource):
    """``moirae_mqtt``: an MQTT topic at QoS 1 (see the module's limits)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self):
        return declared_schema(self.options, FORMAT, MqttSourceError)

    def streamReader(self, schema) -> DataSourceStreamReader:
        return MqttStreamReader(parse_options(self.options), schema)


class MqttStreamReader(DataSourceStreamReader):
    """The receiver starts on the driver with the first offset asked for; executors only
    convert the messages a partition carries."""

    def __init__(self, opts: dict[str, Any], schema) -> None:
        self.opts, self.schema = opts, schema
        self._receiver: Receiver | None = None

    def __getstate__(self) -> dict:
        return {"opts": self.opts, "schema": self.schema, "_receiver": None}

    @property
    def receiver(self) -> Receiver:
        if self._receiver is None:
            self._receiver = Receiver(self.opts)
        return self._receiver

    def initialOffset(self) -> dict:
        self.receiver  # noqa: B018 - subscribe now: messages from here on are kept
        return {"n": 0}

    def getDefaultReadLimit(self):
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

        return ReadMaxRows(self.opts["maxbatch"]) if self.opts.get("maxbatch") else ReadAllAvailable()

    def latestOffset(self, start: dict, limit) -> dict:
        from pyspark.sql.streaming.datasource import ReadMaxRows

        n = int(start["n"])
        last = self.receiver.latest(n)
        if isinstance(limit, ReadMaxRows):  # admission control: a backlog goes in bounded batches
            last = min(last, n + limit.max_rows)
        return {"n": last}

    def partitions(self, start: dict, end: dict):
        msgs = self.receiver.between(int(start["n"]), int(end["n"]))
        return [Messages(msgs)] if msgs else []

    def read(self, partition: Messages):
        if not partition.messages:
            return
        extra = {self.opts["topic_col"]: [m[0] for m in partition.messages]} if self.opts["topic_col"] else None
        yield to_arrow([decode(m[1]) for m in partition.messages], self.schema, extra)

    def commit(self, end: dict) -> None:
        self.receiver.commit(int(end["n"]))

    def stop(self) -> None:
        if self._receiver is not None:
            self._receiver.close()
            self._receiver = None


def register_mqtt_source(spark) -> None:
    """Register ``moirae_mqtt`` with ``spark`` (idempotent)."""
    spark.dataSource.register(MqttDataSource)


def build(spark, options: dict, schema=None):
    """The ``mqtt`` source kind: a streaming DataFrame over an MQTT topic."""
    parse_options({k: v for k, v in options.items() if k.lower() != "schema"})
    register_mqtt_source(spark)
    reader = spark.readStream.format(FORMAT)
    for k, v in options.items():
        reader = reader.option(k, str(v))
    if schema is not None:
        reader = reader.schema(schema)
    return reader.load()
