"""Webhook delivery (:mod:`moirae.delivery.send`, :mod:`moirae.delivery.signing`) against a
real HTTP receiver that verifies the HMAC signature: failed tries are retried with
backoff, the last failure is dead-lettered in PostgreSQL, and a wrong secret is caught
by the receiver. Targets with a bad key are refused, naming it."""

from __future__ import annotations

import time

import pytest

from moirae.delivery.payloads import moirae_json, slack
from moirae.delivery.send import DeadLetters, Sender
from moirae.delivery.targets import parse_target, parse_targets
from moirae.errors import DeliveryConfigError
from moirae.runtime.metrics import DELIVERIES
from tests.delivery.receiver import Receiver

ALERT = {"event": "overload", "eid": "ov:s0:1", "ts": "2024-03-01T04:14:59+00:00", "attrs": {"sid": "s0"},
         "incident": "ov:s0:1", "status": "firing", "console": "http://127.0.0.1:8642/#/incident/ov:s0:1",
         "similar": [{"eid": "ov:s1:0", "incident": "ov:s1:0", "score": 0.8, "resolution": "killed the backup"}]}


def test_signed_delivery_is_retried_until_it_succeeds(pg):
    rx = Receiver(secret="s3cret", statuses=[503, 500])
    try:
        t = parse_target({"kind": "webhook", "url": rx.url, "secret": "s3cret", "retries": 3, "backoff": "50ms"})
        before = DELIVERIES.labels(t.name, "retry")._value.get()
        t0 = time.monotonic()
        assert Sender(DeadLetters(pg)).send(t, t.url, moirae_json(ALERT), ALERT["eid"], "firing")
        took = time.monotonic() - t0
        got = rx.wait(3)
    finally:
        rx.close()
    assert [ok for ok, _ in got] == [True, True, True]  # every try signed and verified
    assert took >= 0.05 + 0.1  # backoff: 50 ms, then 100 ms
    assert got[-1][1]["similar_incidents"] == "ov:s1:0 (score 0.80): killed the backup"
    assert DELIVERIES.labels(t.name, "retry")._value.get() - before == 2
    assert DeadLetters(pg).list() == []


def test_last_failure_is_dead_lettered(pg):
    rx = Receiver(secret="right", statuses=[500] * 10)
    try:
        t = parse_target({"kind": "webhook", "url": rx.url, "secret": "wrong", "retries": 2, "backoff": 0.01})
        assert not Sender(DeadLetters(pg)).send(t, t.url, moirae_json(ALERT), ALERT["eid"], "firing")
        got = rx.wait(3)
    finally:
        rx.close()
    assert len(got) == 3 and not any(ok for ok, _ in got)  # the receiver refused the wrong signature
    (dead,) = DeadLetters(pg).list()
    assert (dead["eid"], dead["status"], dead["attempts"], dead["error"]) == (ALERT["eid"], "firing", 3, "HTTP 401")
    assert dead["payload"]["eid"] == ALERT["eid"] and dead["target"].startswith("webhook:http://127.0.0.1:")


def test_unreachable_target_is_dead_lettered(pg):
    t = parse_target({"kind": "slack", "url": "http://127.0.0.1:9/nothing", "retries": 1, "backoff": 0.01,
                      "timeout": "1s"})
    assert not Sender(DeadLetters(pg)).send(t, t.url, slack(ALERT), ALERT["eid"], "firing")
    (dead,) = DeadLetters(pg).list()
    assert dead["attempts"] == 2 and "Connection" in dead["error"] or "refused" in dead["error"]
    assert dead["payload"]["text"].startswith(":rotating_light: overload firing")


@pytest.mark.parametrize("spec, where", [
    ({"kind": "webhook"}, "alerts[0].url"),
    ({"kind": "webhook", "url": "ftp://x"}, "alerts[0].url"),
    ({"kind": "webhook", "url": "http://x", "retries": -1}, "alerts[0].retries"),
    ({"kind": "alertmanager", "url": "http://x", "resend": "soon"}, "alerts[0].resend"),
    ({"kind": "alertmanager", "url": "http://x", "secret": "s"}, "unknown key"),
    ({"kind": "webhook", "url": "http://x", "format": "xml"}, "alerts[0].format"),
])
def test_bad_targets_name_the_key(spec, where):
    with pytest.raises(DeliveryConfigError, match=where.replace("[", r"\[").replace("]", r"\]")):
        parse_targets([spec])
