"""The console's steps in a real browser on a real engine without Spark queries (events
recorded in the event log as the Deploy Manager records them, a real Recall Manager
and PostgreSQL): fast, and independent of Spark's Python workers. The same checks as
test_console_browser.py, which runs them on the live cluster scenario. Screenshots go
to bench/results/console/ (the cluster run's to bench/results/console/cluster/)."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from moirae.ingest.events import EventRecord
from recall.api import Output, OutputKind
from tests.browser.browser_helpers import (
    SHOTS,
    attrs,
    click,
    click_all,
    console_errors,
    count,
    sideways,
    text,
    texts,
    type_into,
    value,
    wait,
)

pytestmark = [pytest.mark.browser, pytest.mark.postgres,
              pytest.mark.parametrize("pg_dsn", ["embedded"], indirect=True)]
T0 = datetime(2024, 3, 1, tzinfo=UTC)
NOTE = "moved the backup window to 03:00 (browser test)"


def event(engine, eid: str, minutes: int, sid: str, bw: float = 91.5, submit: bool = False) -> EventRecord:
    rec = EventRecord("overload", eid, T0 + timedelta(minutes=minutes), {"sid": sid, "avg_bw": bw},
                      context=[{"user": "backup"}, {"proc": "rsync"}, {"user": "alice"}])
    assert engine.deploy.events.add([rec]) == [rec]
    engine.deploy.manager.bus.publish({"type": "event", **rec.to_json()})  # as the Deploy Manager does
    if submit:
        engine.deploy.manager.submit(rec.as_event(), ["hist"])
    return rec


def similar(engine, eid: str, past: str, score: float, seq: int, resolution: str) -> None:
    row = {"past_eid": past, "past_ts": (T0 + timedelta(minutes=20)).isoformat(), "score": score,
           "context": [{"user": "backup"}], "surrounding": {"cx_overload_resolution": [{"resolution": resolution}]},
           "shared_terms": ["user=backup", "proc=rsync"]}
    out = Output("similar", eid, T0, OutputKind.INSERT, seq, past, row, None)
    engine.deploy.results.append(out)
    engine.deploy.manager.bus.publish(out)


def test_console_steps(small, browser):
    engine, url = small
    api = httpx.Client(base_url=url, timeout=30)
    browser.get(url + "/")
    wait(lambda: text(browser, "#conn") == "live", what="the live stream")

    # incidents appear live, newest first in time order
    event(engine, "e1", 20, "s0")
    event(engine, "e2", 25, "s0")  # the same incident as e1
    event(engine, "e3", 30, "s1")
    event(engine, "e4", 120, "s2", bw=97.0, submit=True)
    wait(lambda: count(browser, ".inc") == 3, what="three incidents live")
    assert attrs(browser, ".inc", "data-id") == ["e4", "e3", "e1"]
    assert "2 alerts" in text(browser, "#inc-e1")
    browser.save_screenshot(str(SHOTS / "01-incidents-live.png"))

    # the incident view: chart, norm band, similar incidents sorted with resolutions
    similar(engine, "e4", "e3", 0.5, 100, "migrated tasks")
    similar(engine, "e4", "e1", 0.8123456789, 101, "killed process rsync")
    wait(lambda: any(t["eid"] == "e4" and t["state"] == "suspended" for t in api.get("/api/scheduler/tasks").json()["tasks"]),
         what="the norm task to suspend")
    browser.get(url + "/#/incident/e4")
    wait(lambda: count(browser, "#chart #normband") and count(browser, ".sim") == 2, what="chart, band, similar")
    assert count(browser, "#chart #iseries") and count(browser, "#chart #ithreshold")
    assert [t.split("\n")[0] for t in texts(browser, ".sim")] == ["0.81", "0.50"]
    assert "Resolved: killed process rsync" in text(browser, ".sim .res")
    assert "sd above normal" in text(browser, "#inow") and "norm mean ± sd, history" in text(browser, ".legend")
    assert texts(browser, "#ictx .chip") == ["user backup", "proc rsync", "user alice"]
    assert "Partial list" in text(browser, "#isim") and not count(browser, "#iprov[open]")
    browser.save_screenshot(str(SHOTS / "02-incident-view.png"))

    # Acknowledge and Resolve the earlier incident; its note shows in the later one
    browser.get(url + "/#/incident/e1")
    wait(lambda: "e2" in text(browser, "#ievents"), what="incident e1")
    click(browser, "#ack")
    wait(lambda: api.get("/api/incidents/e1").json()["status"] == "acknowledged", what="acknowledged")
    wait(lambda: "Acknowledged by" in text(browser, "#fb"), 10, "the acknowledge feedback")
    assert "acknowledged by" in text(browser, "#ihead"), "the header is redrawn with the feedback, not after it"
    browser.save_screenshot(str(SHOTS / "03-acknowledged.png"))
    type_into(browser, "#note", NOTE)  # a retried send_keys starts afresh
    assert value(browser, "#note") == NOTE
    click(browser, "#resolve")
    wait(lambda: api.get("/api/incidents/e1").json()["resolution"] == NOTE, what="resolved with the note",
         state=lambda: {"feedback": texts(browser, "#fb .fb"), "note box": value(browser, "#note"),
                        "incident": api.get("/api/incidents/e1").json()})
    time.sleep(1)  # redraws follow: the feedback stays
    assert "Acknowledged by" in text(browser, "#fb") and "Resolved" in text(browser, "#fb")
    wait(lambda: NOTE in text(browser, "#ires"), what="the resolution in the header")
    browser.save_screenshot(str(SHOTS / "04-resolved.png"))
    browser.get(url + "/#/incident/e4")
    wait(lambda: NOTE in text(browser, ".sim .res"), what="the note as the similar incident's resolution")
    assert api.get("/api/events/e4").json()["similar"][0]["resolution"] == NOTE
    browser.execute_script("document.querySelector('#isim').scrollIntoView()")
    browser.save_screenshot(str(SHOTS / "05-resolution-in-later-incident.png"))

    # Accelerate and Cancel take effect (checked through the API)
    wait(lambda: "searched back to" in text(browser, "#iprog"), what="the search progress")
    type_into(browser, "#tk", "250")
    click(browser, "#acc")
    wait(lambda: "accelerated 1 recall task(s) of event e4 by 250 tickets" in text(browser, "#fb"), what="accelerated")
    assert [t["tickets"] for t in api.get("/api/scheduler/tasks").json()["tasks"] if t["eid"] == "e4"] == [350]
    assert value(browser, "#tk") == "250", "the tickets box keeps its value"
    browser.save_screenshot(str(SHOTS / "06-accelerated.png"))
    click(browser, "#cancel")
    wait(lambda: "cancelled 1 recall task(s)" in text(browser, "#fb"), what="cancelled")
    wait(lambda: {t["state"] for t in api.get("/api/scheduler/tasks").json()["tasks"] if t["eid"] == "e4"}
         <= {"cancelled"}, what="the task cancelled")
    assert "accelerated" in text(browser, "#fb"), "earlier feedback stays until dismissed"
    browser.execute_script("document.querySelector('#iprog').scrollIntoView()")
    browser.save_screenshot(str(SHOTS / "07-cancelled.png"))

    # a bad tickets value is an error in words
    for bad in ("-3", "2.5", "0"):
        type_into(browser, "#tk", bad)
        click(browser, "#acc")
        wait(lambda: "Tickets must be a whole number from 1 to 1,000,000" in texts(browser, "#fb .fb")[-1],
             what=f"the error for {bad!r}")
    assert "{" not in text(browser, "#fb") and "422" not in text(browser, "#fb")
    browser.save_screenshot(str(SHOTS / "08-bad-tickets.png"))
    click_all(browser, "#fb button")
    assert not count(browser, "#fb .fb"), "feedback is dismissed"

    # nothing scrolls sideways at 1400x900; the archive page; no console errors
    for path in ("/#/", "/#/incident/e4", "/#/archive"):
        browser.get(url + path)
        time.sleep(1)
        if path.endswith("archive"):
            wait(lambda: count(browser, "#archtable"), what="the archive table")
            assert "metrics" in text(browser, "#archtable")
            browser.save_screenshot(str(SHOTS / "09-archive.png"))
        wide = sideways(browser)
        assert max(wide) <= 1, f"{path} scrolls sideways by {wide} px"
    errors = console_errors(browser)
    assert not errors, errors


def test_incidents_that_arrive_while_the_list_loads_are_kept(small, browser, monkeypatch):
    """The list's answer is a snapshot; incidents the stream delivers before that answer
    arrives are newer than it and must survive it. The server takes its snapshot, then
    holds the answer until the browser shows three incidents from the stream."""
    engine, url = small
    store = engine.deploy.incidents
    taken, release, answered = threading.Event(), threading.Event(), threading.Event()
    listed = store.list

    def held(*args):
        got = listed(*args)
        if not taken.is_set():
            taken.set()
            release.wait(60)
            answered.set()
        return got

    monkeypatch.setattr(store, "list", held)
    browser.get("about:blank")
    browser.get(url + "/")
    wait(taken.is_set, what="the list request")
    wait(lambda: text(browser, "#conn") == "live", what="the live stream")
    event(engine, "k1", 20, "s0")
    event(engine, "k2", 30, "s1")
    event(engine, "k3", 40, "s2")
    try:
        wait(lambda: count(browser, ".inc") == 3, what="three incidents from the stream")
    finally:
        release.set()
    wait(answered.is_set, what="the held answer")
    time.sleep(1.0)  # for the browser to apply it: a stale answer would leave "0 incidents"
    assert attrs(browser, ".inc", "data-id") == ["k3", "k2", "k1"]
    assert text(browser, "#range") == "1–3 of 3"
