"""The terminal printout of ``moirae run``: one block per incident
with the current top-k similar incidents sorted by score, revisions applied, novelty and
the norm with its coverage."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from moirae.cli.board import Board
from recall.api import Interval, Output, OutputKind
from similarity.incidents import IncidentRule, IncidentTracker

T0 = datetime(2026, 1, 8, tzinfo=UTC)


def _board():
    tr = IncidentTracker(IncidentRule(("sid",), timedelta(minutes=5)))
    return Board({"similar"}, lambda m: tr.assign(m["eid"], m["attrs"]["sid"], m["ts"]).incident)


def _event(eid, minute, sid="s1"):
    return {"type": "event", "event": "overload", "eid": eid, "ts": (T0 + timedelta(minutes=minute)).isoformat(),
            "attrs": {"sid": sid, "avg_bw": 950.0}, "context": [{"user": "backup"}]}


def _out(eid, op, kind, key, row, seq=1, days=2):
    return Output(op, eid, T0, kind, seq, key, row, Interval(T0 - timedelta(days=days), T0))


def _sim(incident, score, res=None):
    return {"incident": incident, "past_eid": incident, "past_ts": "2026-01-01T10:00:00+00:00", "score": score,
            "windows": 3, "resolution": res, "shared_terms": [{"term": "user=backup", "share": score * 0.7}]}


def test_one_block_per_incident_sorted_with_revisions_applied():
    b = _board()
    assert b.apply(_event("e1", 0)) == b.apply(_event("e2", 5))  # consecutive windows: one incident
    other = b.apply(_event("e3", 0, sid="s2"))
    assert len(b.blocks) == 2 and other == "e3"
    for item in [_out("e2", "similar", OutputKind.INSERT, "p1", _sim("p1", 0.4)),
                 _out("e2", "similar", OutputKind.INSERT, "p2", _sim("p2", 0.9, "restarted rsync")),
                 _out("e2", "similar", OutputKind.INSERT, "p3", _sim("p3", 0.6)),
                 _out("e2", "similar", OutputKind.DELETE, "p1", _sim("p1", 0.4)),
                 _out("e2", "similar", OutputKind.DELETE, "p3", _sim("p3", 0.6)),
                 _out("e2", "similar", OutputKind.INSERT, "p0", _sim("p0", 0.7)),  # p3 merged into p0
                 _out("e2", "norm", OutputKind.INSERT, "s1", {"mean_bw": 420.0, "sd_bw": 80.0}, days=7)]:
        assert b.apply(item) == "e1"
    text = b.render("e1")
    assert text.startswith("INCIDENT e1  overload  2 alerts")
    lines = [ln for ln in text.splitlines() if ln.startswith("    ")]
    assert [ln.split()[1:3] for ln in lines] == [["0.90", "p2"], ["0.70", "p0"]]  # sorted, no p1/p3, no duplicates
    assert "resolved: restarted rsync" in lines[0] and "user=backup 0.63" in lines[0]
    assert "norm: mean_bw 420.0, sd_bw 80.0 over 2026-01-01 00:00 .. 2026-01-08 00:00 (7.0 d of history)" in text
    assert "NOVEL" not in text


def test_novel_status_is_shown():
    b = _board()
    b.apply(_event("e1", 0))
    b.apply(_out("e1", "similar", OutputKind.INSERT, "__status__", {"status": "novel", "novel": True, "k": 5}))
    assert "NOVEL: no similar past incident" in b.render("e1").splitlines()[0]
    assert "(none yet)" in b.render("e1")


@pytest.mark.postgres
def test_printer_follows_the_bus_prints_each_change_once_and_the_final_blocks(pg, capsys):
    """Not a terminal: a block is printed when its text changes, never twice the same;
    on stop every incident's final block is printed. Real bus, real incident store."""
    import io
    import time
    from types import SimpleNamespace

    from moirae.cli.board import BoardPrinter
    from moirae.incidents.store import IncidentStore
    from recall.outputs import Bus

    bus = Bus()
    store = IncidentStore(pg)
    store.configure("overload", keys="sid", window=timedelta(minutes=5))
    engine = SimpleNamespace(bus=bus, incidents=store, similarity_operators=lambda: {"similar"})
    printer = BoardPrinter(engine, live=False, out=io.StringIO()).start()
    try:
        bus.publish(_event("e1", 0))
        bus.publish(_event("e2", 5))
        bus.publish(_out("e2", "similar", OutputKind.INSERT, "p2", _sim("p2", 0.9, "restarted rsync")))
        bus.publish(_out("e2", "similar", OutputKind.INSERT, "p1", _sim("p1", 0.5)))
        deadline = time.monotonic() + 10
        while printer.board.alerts < 2 or "p1" not in printer.board.render("e1"):
            assert time.monotonic() < deadline, "the printer did not follow the bus"
            time.sleep(0.05)
        time.sleep(0.6)
    finally:
        printer.stop()
    out = capsys.readouterr().out
    live_part, final = out.split("final similar incidents per incident:")
    blocks = [b.strip() for b in live_part.split("INCIDENT ") if b.strip()]
    assert blocks and all(b.startswith("e1 ") for b in blocks)  # one incident: both alerts in it
    assert len(blocks) == len(set(blocks))  # printed once per change, never the same text twice
    lines = [ln for ln in final.splitlines() if ln.startswith("    ")]
    assert [ln.split()[1:3] for ln in lines] == [["0.90", "p2"], ["0.50", "p1"]]


def test_the_board_keeps_the_incidents_with_the_latest_alerts_and_a_few_alerts_each():
    """A run lasts for weeks: the board keeps the incidents with the latest alerts and
    the latest alerts of each (it used to keep every incident and alert it ever saw),
    and never the latest alert whose similar incidents the block shows."""
    tr = IncidentTracker(IncidentRule(("sid",), timedelta(minutes=5)))
    b = Board({"similar"}, lambda m: tr.assign(m["eid"], m["attrs"]["sid"], m["ts"]).incident,
              keep_blocks=3, keep_alerts=2)
    for i in range(3):
        b.apply(_event(f"x{i}", 0, sid=f"s{i}"))
    b.apply(_event("x0b", 5, sid="s0"))                           # s0 alerts again: the latest alerted now
    for i in range(3, 5):                                         # two more incidents: s1's and s2's go
        b.apply(_event(f"x{i}", 5, sid=f"s{i}"))
    assert list(b.blocks) == ["x0", "x3", "x4"] and b.dropped_blocks == 2
    assert b.apply(_out("x1", "similar", OutputKind.INSERT, "p1", _sim("p1", 0.5))) is None  # let go: not shown

    assert b.apply(_out("x0b", "similar", OutputKind.INSERT, "p9", _sim("p9", 0.8))) == "x0"
    for n, minute in enumerate([10, 15, 20], 1):                 # three more alerts, none with results yet
        b.apply(_event(f"x0{n}", minute, sid="s0"))
    block = b.blocks["x0"]
    assert [a.eid for a in block.alerts] == ["x0b", "x03"]        # the shown one stays, the latest stays
    text = b.render("x0")
    assert text.startswith("INCIDENT x0  overload  5 alerts") and "latest alert x03" in text
    assert "0.80  p9" in text                                     # the similar incidents shown are x0b's
    assert b.apply(_out("x01", "similar", OutputKind.INSERT, "p2", _sim("p2", 0.9))) is None
    assert len(b._alert_block) == sum(len(x.alerts) for x in b.blocks.values())
