"""Rules over Recall results on a real engine's Recall Manager and PostgreSQL (no Spark
queries): suppression within k standard deviations of the norm (M fig. 2), with a
revision that crosses the line and says so; a suppressed alert opens no incident and
pages no one; escalation; a Recall's output joined with a live stream under event and
present analysis (M figs. 10, 12)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pytest

from archive.streams import StreamSpec
from moirae.ingest.events import EventRecord
from moirae.rules import RuleError
from recall.operator import Recall

NORM = ("SELECT h.sid, avg(h.bw) AS mean_bw, stddev(h.bw) AS sd_bw, count(*) AS n FROM metrics h "
        "WHERE h.sid = :sid GROUP BY h.sid")
T0 = datetime(2026, 4, 1, tzinfo=UTC)
NOW = T0 + timedelta(hours=3)  # the alerts' time: the archive's 3 hours lie before it


def history() -> pd.DataFrame:
    """3 hours of 10-second bandwidth of 3 servers. ``flip``: quiet (20 +- 2) for two
    hours, then busy (100 +- 10) in the last hour, so its newest chunk's norm (the
    first estimate) is far from its whole history's. ``calm``, ``steady``: 50 +- 10."""
    rng = np.random.default_rng(3)
    ts = pd.date_range(T0, NOW - timedelta(seconds=10), freq="10s")
    frames = []
    for sid in ("flip", "calm", "steady"):
        bw = rng.normal(50, 10, len(ts))
        if sid == "flip":
            bw = np.where(ts >= T0 + timedelta(hours=2), rng.normal(100, 10, len(ts)), rng.normal(20, 2, len(ts)))
        frames.append(pd.DataFrame({"ts": ts, "sid": sid, "bw": bw}))
    return pd.concat(frames, ignore_index=True)


@pytest.fixture
def engine(engine_factory):
    e = engine_factory(archive={"chunk_span": "30m", "chunk_target_rows": 0},
                       recall={"max_concurrent": 2, "tickets_per_result": 0})
    e.archiver.register_stream(StreamSpec.build("metrics", "ts", {"sid": "text", "bw": "double"}, indexes=[("sid",)]))
    e.archiver.append("metrics", -1, history(), bulk=True)
    e.deploy.manager.register(Recall("norm", NORM, store=e.archiver, period=timedelta(hours=4), time_column="h.ts"))
    e.deploy.incidents.configure("overload", keys="sid", metric="avg_bw", norm="norm")
    yield e
    e.close()


def alert(engine, sid: str, value: float, minutes: int = 0) -> EventRecord:
    """An alert as the Deploy Manager records it: logged (the gate listens), then recalled."""
    rec = EventRecord("overload", f"ov:{sid}:{minutes}", NOW + timedelta(minutes=minutes), {"sid": sid, "avg_bw": value})
    assert engine.deploy.events.add([rec]) == [rec]
    engine.deploy.manager.submit(rec.as_event(), ["norm"])
    return rec


def final(engine, eid: str, timeout: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        d = engine.dispositions.get(eid)
        if d is not None and d["final"]:
            return d
        time.sleep(0.05)
    raise AssertionError(f"no final disposition for {eid}: {engine.dispositions.get(eid)}")


def test_suppression_within_k_sigma_and_a_revision_that_crosses_the_line(engine):
    engine.rule("overload", "norm", "suppress", name="quiet", k=1.0, hold="30s")
    pages = []
    engine.rules.pagers.append(pages.append)
    calm = alert(engine, "calm", 54.0)  # z ~ 0.4 against 50 +- 10 throughout: suppressed
    flip = alert(engine, "flip", 105.0)  # newest chunk 100 +- 10: z ~ 0.5; all 3 hours 47 +- 38: z ~ 1.5
    d_calm, d_flip = final(engine, calm.eid), final(engine, flip.eid)
    assert d_calm["disposition"] == "suppressed" and d_calm["incident_opened"] is False
    assert engine.incidents.incident_of([calm.eid]) == {}  # no incident
    assert [p["eid"] for p in pages] == [flip.eid]  # no page for the suppressed alert
    # flip: suppressed on the first estimate, un-suppressed by a later revision, and said so
    notes = [c["note"] for c in d_flip["changes"]]
    assert any(n.startswith("suppressed (provisional)") for n in notes), notes
    assert any(n.startswith("un-suppressed by a revision") for n in notes), notes
    assert d_flip["disposition"] == "raised" and d_flip["incident_opened"] is True
    assert engine.incidents.incident_of([flip.eid]) == {flip.eid: flip.eid}
    # the rule's outputs carry its verdict and revisions beside the Recall's (API, terminal)
    engine.results.flush(5.0)
    outs = [o for o in engine.results.read(flip.eid) if o.operator == "quiet"]
    states = [o.row["disposition"] for o in outs]
    assert states[0] == "suppressed" and states[-1] == "raised" and outs[-1].row["final"] is True
    # visible under the API's filter, with the changes that say what crossed the line
    from moirae.api import create_app
    from tests.api.api_helpers import client as api_client

    client = api_client(create_app(engine))
    listed = client.get("/api/events", params={"suppressed": "true"}).json()["events"]
    assert [(e["eid"], e["disposition"], e["final"]) for e in listed] == [(calm.eid, "suppressed", True)]
    assert [e["eid"] for e in client.get("/api/events", params={"suppressed": "false"}).json()["events"]] == [
        flip.eid]
    detail = client.get(f"/api/events/{flip.eid}").json()
    assert detail["disposition"]["disposition"] == "raised" and detail["incident"] == flip.eid
    assert [h["row"]["disposition"] for h in detail["results"]["quiet"]["history"]][:1] == ["suppressed"]


def test_escalation_and_rule_errors(engine):
    engine.rule("overload", "norm", "suppress", name="quiet", k=2.0)
    engine.rule("overload", "norm", "escalate", name="loud", k=6.0)
    hot = alert(engine, "steady", 200.0)  # z ~ 15
    mild = alert(engine, "steady", 75.0, minutes=5)  # z ~ 2.5: raised, not escalated
    d_hot, d_mild = final(engine, hot.eid), final(engine, mild.eid)
    assert d_hot["disposition"] == "escalated" and d_hot["incident_opened"] is True
    assert d_hot["verdicts"]["loud"]["z"] > 6 and d_hot["verdicts"]["quiet"]["disposition"] == "raised"
    assert d_mild["disposition"] == "raised"
    with pytest.raises(RuleError, match="recall 'nope' is not deployed"):
        engine.rule("overload", "nope", "suppress")
    with pytest.raises(RuleError, match="kind must be one of"):
        engine.rule("overload", "norm", "drop")
    with pytest.raises(RuleError, match="k must be a positive number"):
        engine.rule("overload", "norm", "suppress", name="q2", k=-1)
    with pytest.raises(RuleError, match="already taken"):
        engine.rule("overload", "norm", "suppress", name="quiet")
    with pytest.raises(RuleError, match="stream 'ping' is not an archived stream"):
        engine.rule("overload", "norm", "join", name="j", stream="ping", on="sid")


def test_a_held_alert_is_raised_when_its_norm_is_late(engine):
    engine.rule("overload", "norm", "suppress", name="quiet", k=2.0, hold="0.3s")
    rec = EventRecord("overload", "ov:late", NOW, {"sid": "calm", "avg_bw": 60.0})
    engine.deploy.events.add([rec])  # logged, but its recall is not submitted yet
    assert engine.dispositions.get(rec.eid)["disposition"] == "pending"
    assert engine.incidents.incident_of([rec.eid]) == {}
    # the gate hands the alert over, then records why: wait for both, as a reader would
    def released():
        changes = engine.dispositions.get(rec.eid)["changes"]
        return engine.incidents.incident_of([rec.eid]) and changes and "hold passed" in changes[-1]["note"]
    deadline = time.monotonic() + 10
    while not released() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert engine.incidents.incident_of([rec.eid]) == {rec.eid: rec.eid}  # fail open
    assert "hold passed" in engine.dispositions.get(rec.eid)["changes"][-1]["note"]


def test_join_with_a_live_stream_under_event_and_present_analysis(engine):
    engine.archiver.register_stream(StreamSpec.build("ping", "ts", {"sid": "text", "ms": "double"}))
    engine.archiver.append("ping", 1, pd.DataFrame({
        "ts": [NOW - timedelta(minutes=2), NOW - timedelta(minutes=1), NOW + timedelta(minutes=3)],
        "sid": ["steady", "steady", "steady"], "ms": [5.0, 7.0, 40.0]}))
    engine.rule("overload", "norm", "join", name="at_event", stream="ping", on="sid", analysis="event")
    engine.rule("overload", "norm", "join", name="now", stream="ping", on="sid", analysis="present")
    rec = alert(engine, "steady", 90.0)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and {o.operator for o in engine.results.read(rec.eid)
                                           if o.kind.value == "boundary"} != {"norm", "at_event", "now"}:
        engine.results.flush(1.0)
        time.sleep(0.05)

    def current(op):
        rows = {}
        for o in engine.results.read(rec.eid, op):
            if o.kind.value != "boundary":
                rows[o.key] = None if o.kind.value == "delete" else dict(o.row)
        return [r for r in rows.values() if r is not None]

    ev, pr = current("at_event"), current("now")
    assert len(ev) == 1 and ev[0]["ms"] == 7.0 and ev[0]["sid"] == "steady" and "mean_bw" in ev[0]
    assert len(pr) == 1 and pr[0]["ms"] == 40.0


def test_rules_of_a_retired_recall_retire_with_it(engine):
    """A monitor undeployed unregisters its Recall; redeployed, it registers a new one:
    its rules then go (held alerts move on) and the same rule can be declared again."""
    engine.rule("overload", "norm", "suppress", name="quiet", k=2.0, hold="60s")
    rec = EventRecord("overload", "ov:held", NOW, {"sid": "calm", "avg_bw": 54.0})
    engine.deploy.events.add([rec])  # held: its recall is never submitted
    assert engine.incidents.incident_of([rec.eid]) == {}
    engine.deploy.manager.unregister("norm")
    engine.deploy.manager.register(Recall("norm", NORM, store=engine.archiver, period=timedelta(hours=4),
                                          time_column="h.ts"))
    deadline = time.monotonic() + 10
    while "quiet" in engine.rules.rules and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "quiet" not in engine.rules.rules  # retired in the background
    assert engine.incidents.incident_of([rec.eid]) == {rec.eid: rec.eid}  # the held alert moved on
    assert engine.rule("overload", "norm", "suppress", name="quiet", k=2.0).name == "quiet"
    calm = alert(engine, "calm", 54.0, minutes=10)
    assert final(engine, calm.eid)["disposition"] == "suppressed"  # the new rule judges the new recall


def test_a_suppressed_alert_is_delivered_to_no_webhook(engine):
    """The alert routes follow the rules: with a suppress rule, a webhook gets the alerts
    handed to the incident store and never a suppressed one."""
    from tests.delivery.receiver import Receiver

    hook = Receiver()
    try:
        engine.rule("overload", "norm", "suppress", name="quiet", k=1.0, hold="30s")
        engine.route_alerts("overload", [{"kind": "webhook", "url": hook.url, "retries": 0}])
        engine.alerts.wait_similar = 0.0  # no Similarity Recall here: send as soon as allowed
        engine.alerts.start()
        calm = alert(engine, "calm", 54.0)  # suppressed
        loud = alert(engine, "steady", 200.0, minutes=5)  # z ~ 15: raised
        for rec in (calm, loud):  # what the Deploy Manager publishes beside logging the event
            engine.deploy.manager.bus.publish({"type": "event", **rec.to_json()})
        assert final(engine, calm.eid)["disposition"] == "suppressed"
        assert final(engine, loud.eid)["disposition"] == "raised"
        sent = hook.wait(1, timeout=20)
        time.sleep(1.0)  # a suppressed alert would have been sent by now
        assert [body["eid"] for _, body in hook.requests] == [loud.eid], hook.requests
        assert [body["eid"] for _, body in sent][:1] == [loud.eid]
    finally:
        engine.alerts.stop()
        hook.close()
