"""The incident store on a real PostgreSQL: live grouping by the shared rule, severity
from the norm, acknowledge / resolve, resolutions for Similarity Recall, restarts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from moirae.incidents.store import IncidentError, IncidentStore, NoSuchIncident
from moirae.ingest.events import EventLog, EventRecord
from recall.api import Output, OutputKind

pytestmark = pytest.mark.postgres
T0 = datetime(2026, 1, 1, tzinfo=UTC)
M5 = timedelta(minutes=5)


def rec(sid: str, minutes: int, bw: float = 700.0) -> EventRecord:
    ts = T0 + timedelta(minutes=minutes)
    return EventRecord("overload", f"ov:{sid}:{minutes}", ts, {"sid": sid, "avg_bw": bw})


def store_and_log(pg):
    log = EventLog(pg)
    published: list[dict] = []
    store = IncidentStore(pg, publish=published.append, events=log)
    store.configure("overload", keys="sid", window=M5, metric="avg_bw", threshold=600, norm="norm")
    log.listeners.append(store.record)
    return log, store, published


def test_consecutive_events_of_one_key_form_one_incident(pg):
    log, store, published = store_and_log(pg)
    log.add([rec("a", 5), rec("b", 10), rec("a", 10)])
    log.add([rec("a", 15), rec("a", 60)])
    rows, total = store.list()
    assert total == 3
    assert [r["id"] for r in rows] == ["ov:a:60", "ov:b:10", "ov:a:5"]  # newest first
    first = store.get("ov:a:5")
    assert first["alerts"] == 3 and [e["eid"] for e in first["events"]] == ["ov:a:5", "ov:a:10", "ov:a:15"]
    assert first["duration_s"] == 15 * 60  # first window's start to the last window's end
    assert first["status"] == "open" and published[-1]["type"] == "incident"
    assert store.list(event="other")[1] == 0 and store.list(status="resolved")[1] == 0
    with pytest.raises(IncidentError, match="status must be one of"):
        store.list(status="bogus")


def test_norm_outputs_set_severity_and_actions_record_who_and_how(pg):
    log, store, published = store_and_log(pg)
    log.add([rec("a", 5, 720.0), rec("a", 10, 900.0)])
    for seq, (eid, mean, sd) in enumerate([("ov:a:5", 120.0, 60.0), ("ov:a:10", 120.0, 30.0)]):
        store.on_output(Output("norm", eid, T0, OutputKind.INSERT, seq, "a", {"sid": "a", "mean_bw": mean,
                                                                            "sd_bw": sd, "n": 9}, None))
    inc = store.get("ov:a:5")
    assert inc["severity"] == pytest.approx((900 - 120) / 30) and inc["severity_label"] == "critical"
    assert inc["events"][0]["z"] == pytest.approx(10.0)
    assert store.acknowledge("ov:a:5", "ann")["status"] == "acknowledged"
    with pytest.raises(IncidentError, match="resolution note is required"):
        store.resolve("ov:a:5", "   ")
    done = store.resolve("ov:a:5", "killed process rsync", "bob")
    assert (done["status"], done["resolution"], done["resolved_by"], done["acknowledged_by"]) == (
        "resolved", "killed process rsync", "bob", "ann")
    assert published[-1]["status"] == "resolved"
    # by incident id, or by any eid of the incident; unresolved and unknown ids are absent
    assert store.resolutions(["ov:a:5", "ov:a:10", "nope"]) == {"ov:a:5": "killed process rsync",
                                                                "ov:a:10": "killed process rsync"}
    with pytest.raises(NoSuchIncident):
        store.acknowledge("nope")


def test_a_refined_norm_lowers_severity_and_a_repeated_one_is_not_announced(pg):
    log, store, published = store_and_log(pg)
    log.add([rec("a", 5, 720.0), rec("a", 10, 900.0)])

    def norm(eid: str, mean: float, sd: float, seq: int, operator: str = "norm") -> None:
        store.on_output(Output(operator, eid, T0, OutputKind.INSERT, seq, "a",
                               {"sid": "a", "mean_bw": mean, "sd_bw": sd, "n": 9}, None))

    norm("ov:a:5", 120.0, 60.0, 0)  # z 10
    norm("ov:a:10", 120.0, 30.0, 1)  # z 26, the incident's largest
    assert store.get("ov:a:5")["severity"] == pytest.approx(26.0)
    announced = len(published)
    norm("ov:a:10", 120.0, 30.0, 2)  # the same refinement again: nothing written or announced
    assert len(published) == announced
    norm("ov:a:10", 300.0, 150.0, 3)  # refined down to z 4: the severity is now the other event's 10
    inc = store.get("ov:a:5")
    assert inc["severity"] == pytest.approx(10.0)
    assert [e["z"] for e in inc["events"]] == [pytest.approx(10.0), pytest.approx(4.0)]
    assert published[-1]["type"] == "incident" and published[-1]["severity"] == pytest.approx(10.0)
    assert {k: v for k, v in inc.items() if k not in ("events", "updated_at")} == {
        k: v for k, v in published[-1].items() if k not in ("type", "updated_at")}  # the summary get() shows
    norm("ov:a:10", 0.0, 1.0, 4, operator="similar")  # another operator than the configured norm: ignored
    store.on_output(Output("similar", "ov:a:10", T0, OutputKind.INSERT, 5, "x", {"incident": "x", "score": 0.9},
                           None))
    assert store.get("ov:a:5")["severity"] == pytest.approx(10.0) and len(published) == announced + 1


def test_incidents_survive_a_restart(pg):
    log, store, _ = store_and_log(pg)
    log.add([rec("a", 5)])
    log2, store2, _ = store_and_log(pg)  # a new process over the same database
    log2.add([rec("a", 10)])
    assert store2.get("ov:a:5")["alerts"] == 2
    store2.resolve("ov:a:5", "rebooted")
    log2.add([rec("a", 15), rec("a", 40)])  # a new event of a resolved incident reopens it, keeping the note
    again = store2.get("ov:a:5")
    assert (again["status"], again["resolution"], again["alerts"]) == ("open", "rebooted", 3)
    assert store2.list()[1] == 2


def test_the_live_tracker_forgets_finished_keys_and_a_restart_reopens_only_live_ones(pg):
    """Memory is bounded by the keys alive within two steps (20 minutes: a step is a
    5-minute window plus the default one-window gap), not by every key ever seen; the store keeps every incident; a restart
    reopens only incidents a coming detection can join, and they keep growing."""
    log, store, _ = store_and_log(pg)
    for m in range(0, 600, 5):  # 120 servers, one alert each, 5 minutes apart
        log.add([rec(f"s{m}", m)])
        assert store.open_keys("overload") <= 5, f"{store.open_keys('overload')} keys open at minute {m}"
    log.add([rec("s590", 600)])  # joins the newest incident, still open
    assert store.get("ov:s590:590")["alerts"] == 2
    log.add([rec("s0", 605)])  # s0's incident was closed long ago: a new incident, as group() says
    assert store.get("ov:s0:605")["alerts"] == 1 and store.get("ov:s0:0")["alerts"] == 1
    assert store.list()[1] == 121

    log2, store2, _ = store_and_log(pg)  # a restart
    log2.add([rec("s590", 610)])
    assert store2.open_keys("overload") <= 5
    assert store2.get("ov:s590:590")["alerts"] == 3, "the live incident continues across the restart"


def test_resolution_lookups_are_remembered_and_a_note_shows_at_once_here_and_within_the_ttl_elsewhere(pg):
    log, store, _ = store_and_log(pg)
    log.add([rec("a", 5), rec("b", 5)])
    cache = store.resolution_cache
    asked = ["ov:a:5", "ov:b:5", "nope"]
    assert store.resolutions(asked) == {} and store.resolutions(asked) == {}
    assert cache.queries == 1  # nothing has a note: one EXISTS, no lookup
    store.resolve("ov:a:5", "killed process rsync")  # written here: seen at once
    assert store.resolutions(asked) == {"ov:a:5": "killed process rsync"}
    before = cache.queries
    assert store.resolutions(asked) == {"ov:a:5": "killed process rsync"}
    assert cache.queries == before  # remembered
    other = IncidentStore(pg)  # another process over the same database (a console) notes b
    other.resolve("ov:b:5", "rebooted")
    cache.ttl = 0.0  # the ttl passes
    assert store.resolutions(asked) == {"ov:a:5": "killed process rsync", "ov:b:5": "rebooted"}


def test_recording_announces_each_changed_incident_from_its_row_alone(pg, monkeypatch):
    """An alert's announcement costs the same however many events its incident holds:
    the summary comes from the incident's row, not a read of its events."""
    log, store, published = store_and_log(pg)
    log.add([rec("a", m) for m in range(5, 305, 5)])  # one incident of 60 events
    monkeypatch.setattr(store, "get", lambda *a, **k: pytest.fail("recording read the incident's events"))
    published.clear()
    log.add([rec("a", 305), rec("b", 305)])
    assert sorted((p["id"], p["alerts"]) for p in published) == [("ov:a:5", 61), ("ov:b:305", 1)]
    assert all(p["type"] == "incident" and "events" not in p for p in published)
