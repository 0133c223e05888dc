"""The MQTT source (``moirae_mqtt``) against the machine's real Mosquitto, at QoS 1.

- Every message published reaches the stream once; messages a publisher sends again
  with the same id (its ``idField``) are dropped.
- What the module documents about restarts holds: messages published while the query
  is down are kept by the broker for the persistent session and arrive on restart.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest

from moirae.sources.mqtt import MqttSourceError, parse_options, register_mqtt_source
from tests.sources.brokers import need

SCHEMA = "ts timestamp, id long, v double, topic string"


def _publish(topic: str, payloads: list[dict]) -> None:
    import paho.mqtt.client as mqtt

    p = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"pub-{uuid.uuid4().hex[:8]}")
    p.connect("127.0.0.1", 1883)
    p.loop_start()
    try:
        for body in payloads:
            p.publish(topic, json.dumps(body), qos=1).wait_for_publish(10)
    finally:
        p.loop_stop()
        p.disconnect()


def _start(spark, topic: str, client: str, table: str):
    register_mqtt_source(spark)
    df = (spark.readStream.format("moirae_mqtt").option("topic", topic).option("clientId", client)
          .option("idField", "id").option("topicColumn", "topic").option("schema", SCHEMA).load())
    return df.writeStream.format("memory").queryName(table).trigger(processingTime="200 milliseconds").start()


def _wait_rows(spark, q, table: str, n: int, timeout: float = 90) -> int:
    deadline = time.monotonic() + timeout
    got = 0
    while time.monotonic() < deadline:
        got = spark.sql(f"SELECT count(*) FROM {table}").collect()[0][0]
        if got >= n:
            break
        time.sleep(0.3)
    q.processAllAvailable()
    return spark.sql(f"SELECT count(*) FROM {table}").collect()[0][0]


def test_qos1_stream_drops_publisher_duplicates_and_keeps_the_session(spark):
    need(1883, "Mosquitto")
    topic, client = f"moirae-test/{uuid.uuid4().hex[:8]}", f"moirae-t-{uuid.uuid4().hex[:8]}"
    table = f"mq_{uuid.uuid4().hex[:8]}"
    q = _start(spark, topic, client, table)
    try:
        deadline = time.monotonic() + 60
        while not q.recentProgress and time.monotonic() < deadline:  # subscribed once a batch has run
            time.sleep(0.2)
        sent = [{"ts": 1_700_000_000 + i, "id": i, "v": i / 2} for i in range(200)]
        _publish(topic, sent + sent[50:80])  # the publisher retries 30 of them
        assert _wait_rows(spark, q, table, 200) == 200
        rows = spark.sql(f"SELECT count(DISTINCT id), min(id), max(id), max(topic) FROM {table}").collect()[0]
        assert tuple(rows) == (200, 0, 199, topic)
    finally:
        q.stop()
    # down: the broker keeps the persistent session's QoS 1 messages for the next start
    _publish(topic, [{"ts": 1_700_001_000 + i, "id": 1000 + i, "v": 0.0} for i in range(20)])
    table2 = f"mq_{uuid.uuid4().hex[:8]}"
    q2 = _start(spark, topic, client, table2)
    try:
        assert _wait_rows(spark, q2, table2, 20) == 20
        assert spark.sql(f"SELECT min(id), max(id) FROM {table2}").collect()[0][:] == (1000, 1019)
    finally:
        q2.stop()


def test_bad_options_name_the_option():
    with pytest.raises(MqttSourceError, match="'topic'"):
        parse_options({})
    with pytest.raises(MqttSourceError, match="'qos'"):
        parse_options({"topic": "a", "qos": "2"})
    with pytest.raises(MqttSourceError, match="'port'"):
        parse_options({"topic": "a", "port": "x"})
