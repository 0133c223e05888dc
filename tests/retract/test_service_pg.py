"""Retractions on a real PostgreSQL, without Spark: the archive, an Ananke graph, the
event log, incidents and the recall results built by hand, then retracted, looked up,
undone and raced by rows arriving late (moirae/retract/service.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest

from ananke.items import Edge, SinkVertex, SourceVertex
from ananke.store import GraphStore
from archive.archiver import Archiver
from archive.settings import ArchiveSettings
from archive.streams import StreamSpec
from moirae.errors import BadPredicate, BadSelection, NoSuchRetraction, TooBroad, UnknownRetractStream
from moirae.incidents.store import IncidentStore
from moirae.ingest.events import EventLog, EventRecord
from moirae.retract.evaluate import LineageEvaluator
from moirae.retract.lookup import QueryGraph
from moirae.retract.service import Retractions
from recall.api import Output, OutputKind
from recall.outputs import StoredOutputs
from recall.revision_ops import apply_revision

T0 = datetime(2026, 3, 1, 10, 0, tzinfo=UTC)


def _rows(host: str, start: int, n: int, cpu: float = 95.0) -> pd.DataFrame:
    return pd.DataFrame({"ts": [T0 + timedelta(seconds=start + i) for i in range(n)],
                         "host": [host] * n, "cpu": [cpu] * n})


class World:
    """One event-query ``hot`` over stream ``cpu``, its graph and its alerts."""

    def __init__(self, pg) -> None:
        self.pg = pg
        self.arch = Archiver(pg, ArchiveSettings(chunk_span=timedelta(hours=1)))
        self.arch.register_stream(StreamSpec.build("cpu", "ts", {"host": "text", "cpu": "double"}))
        self.arch.register_stream(StreamSpec.build("ev_hot", "ts", {"eid": "text", "host": "text"}, kind="event"))
        # a quiet background: many rows so a small retraction is a small share
        self.arch.append("cpu", 0, pd.concat([_rows("a", 0, 3), _rows("b", 3, 3), _rows("z", 100, 200, 10.0)]))
        self.graph = GraphStore(pg.connect, "ank_hot").create()
        self.log = EventLog(pg)
        self.published: list = []
        self.incidents = IncidentStore(pg, publish=self.published.append, events=self.log)
        self.incidents.configure("hot", keys="host", window=timedelta(minutes=1))
        self.log.listeners.append(self.incidents.record)
        self.results = StoredOutputs(pg)
        self.audit: list[tuple] = []
        self.graphs = {"hot": QueryGraph("hot", self.graph, "eid", ("cpu",))}
        self.svc = Retractions(pg, self.arch, lambda: self.graphs, LineageEvaluator(lambda: self.graphs),
                               self.results, self.published.append, self.incidents,
                               audit=lambda *a: self.audit.append(a))
        self.sink = 0

    def sids(self, host: str) -> list[int]:
        f = self.arch.read("cpu", T0 - timedelta(hours=1), T0 + timedelta(hours=1), with_ids=True)
        return sorted(int(s) for s in f[f["host"] == host]["_sid"])

    def alert(self, eid: str, host: str, at: int) -> None:
        """Alert ``eid`` of host ``host`` from every archived row of that host."""
        self.sink += 1
        ts, w = T0 + timedelta(seconds=at), T0 + timedelta(minutes=5)
        items = [SinkVertex(self.sink, "hot", ts, w, {"eid": eid, "host": host})]
        for sid in self.sids(host):
            items += [SourceVertex(sid, T0, w), Edge(sid, self.sink, w)]
        self.graph(items)
        self.arch.append("ev_hot", self.sink, pd.DataFrame({"ts": [ts], "eid": [eid], "host": [host]}))
        self.log.add([EventRecord("hot", eid, ts, {"host": host})])

    def output(self, op: str, eid: str, seq: int, key: str, row: dict) -> None:
        self.results.append(Output(op, eid, T0, OutputKind.INSERT, seq, key, row, None))
        self.results.flush()

    def current(self, eid: str) -> dict:
        rows: dict = {}
        for o in self.results.read(eid):
            apply_revision(rows, o)
        return rows

    def close(self) -> None:
        self.results.close()
        self.log.close()
        self.graph.close()
        self.arch.close()


@pytest.fixture
def world(pg):
    w = World(pg)
    w.alert("e1", "a", 2)
    w.alert("e2", "b", 5)
    w.output("norm", "e1", 1, "a", {"mean_cpu": 20.0, "sd_cpu": 5.0})
    w.output("similar", "e2", 1, "e1", {"incident": "e1", "past_eid": "e1", "score": 0.9})
    yield w
    w.close()


def test_refusals_change_nothing(world):
    svc = world.svc
    cases = [
        ({"stream": "cpu", "predicate": "cpu > (select 1)"}, BadPredicate, "subquery"),
        ({"stream": "cpu", "predicate": "pg_sleep(1) is null"}, BadPredicate, "function 'pg_sleep'"),
        ({"stream": "cpu", "predicate": "nope > 1"}, BadPredicate, "unknown column 'nope'"),
        ({"stream": "cpu", "predicate": "cpu > 1; delete from cpu"}, BadPredicate, "2 statements"),
        ({"stream": "nope", "predicate": "cpu > 1"}, UnknownRetractStream, "unknown stream 'nope'"),
        ({"stream": "cpu", "key": {"nope": "a"}, "start": T0.isoformat()}, BadSelection, "no column 'nope'"),
        ({"stream": "cpu", "predicate": "cpu > 0"}, TooBroad, "confirm"),
        ({"ids": [424242]}, BadSelection, "names no archived row"),
        ({}, BadSelection, "no rows named"),
    ]
    for sel, err, words in cases:
        with pytest.raises(err, match=words) as info:
            svc.retract(sel, "bad sensor", "ann")
        assert "\n" not in str(info.value)
    with pytest.raises(BadSelection, match="event time"):
        svc.retract({"stream": "cpu", "key": {"host": "a"}, "start": T0.isoformat()}, "x", "ann",
                    set_values={"ts": 1})
    with pytest.raises(NoSuchRetraction):
        svc.undo(99, "ann")
    assert svc.list() == [] and world.svc.store.retracted() == set() and world.audit == []


def test_retract_lookup_and_undo(world):
    svc = world.svc
    before = svc.lookup({"ids": world.sids("a")[:1]})
    assert [a["eid"] for a in before["alerts"]] == ["e1"] and before["alerts"][0]["open"]
    assert before["counts"]["feeding"] == 1 and before["sources"][0]["expired"] is False

    out = svc.retract({"stream": "cpu", "key": {"host": "a"}, "start": T0.isoformat(),
                       "end": (T0 + timedelta(seconds=3)).isoformat()}, "sensor a was wrong", "ann")
    assert out["rows"] == 3 and out["retracted"] == ["e1"] and out["kept"] == []
    assert world.svc.store.status_of(["e1"])["e1"]["status"] == "retracted"
    inc = world.incidents.get("e1")
    assert inc["status"] == "resolved" and "sensor a was wrong" in inc["resolution"]
    assert world.current("e1") == {}  # its norm revised away
    assert world.current("e2") == {}  # e2's similar-incident list no longer names it
    assert world.arch.read("ev_hot", T0, T0 + timedelta(minutes=1))["eid"].tolist() == ["e2"]
    after = svc.lookup({"stream": "cpu", "key": {"host": "a"}, "start": T0.isoformat(),
                        "end": (T0 + timedelta(minutes=1)).isoformat()})
    assert after["alerts"][0]["status"] == "retracted" and not after["alerts"][0]["open"]
    assert after["counts"]["retracted"] == 1 and after["counts"]["sources"] == 3
    assert {a[1] for a in world.audit} == {"retraction", "alert retracted"}

    undone = svc.undo(out["id"], "bob")
    assert undone["restored"] == ["e1"]
    assert world.svc.store.status_of(["e1"])["e1"]["status"] == "active"
    assert world.incidents.get("e1")["status"] == "open"
    assert world.current("e1") == {"a": {"mean_cpu": 20.0, "sd_cpu": 5.0}}
    assert "e1" in world.current("e2")
    assert sorted(world.arch.read("ev_hot", T0, T0 + timedelta(minutes=1))["eid"]) == ["e1", "e2"]
    assert svc.undo(out["id"], "bob")["undone"] is False
    assert svc.get(out["id"])["active"] is False


def test_a_retraction_racing_ingestion_ends_as_if_it_came_after(world):
    svc = world.svc
    first = svc.retract({"stream": "cpu", "predicate": "host = 'c'"}, "host c is a test box", "ann")
    assert first["rows"] == 0 and first["retracted"] == []
    world.arch.append("cpu", 7, _rows("c", 10, 2))  # the range's rows arrive after the retraction
    world.alert("e3", "c", 12)
    out = svc.reconcile()
    assert out == {"flagged": 2, "retracted": ["e3"]}
    assert world.svc.store.status_of(["e3"])["e3"]["status"] == "retracted"
    assert svc.reconcile() == {"flagged": 0, "retracted": []}


def test_a_correction_raises_the_alert_bad_data_hid_and_its_undo_withdraws_it(world):
    from ananke.polynomial import AggSpec, PolyPlan

    minute = 60_000_000
    plan = PolyPlan("hot", "window", 1, ("cpu",), ("cpu",), (AggSpec("avg_cpu", "avg", "cpu", 0, "cpu"),),
                    ("host",), "ts", minute, minute, conditions=("(avg_cpu > CAST(90 AS DOUBLE))",),
                    structural=("host",))
    world.svc.plans = lambda: {"hot": plan}
    world.svc.events = world.log
    # host z read 10 where it read 99: its window [T0+1 min, T0+2 min) was hot
    out = world.svc.retract({"stream": "cpu", "key": {"host": "z"}, "start": (T0 + timedelta(seconds=100)).isoformat(),
                             "end": (T0 + timedelta(seconds=120)).isoformat()}, "z's agent divided by 10", "ann",
                            set_values={"cpu": 99.0}, confirm=True)
    assert out["kind"] == "correction" and out["rows"] == 20
    assert len(out["raised"]) == 1 and out["raised"][0].startswith("hot:z:")
    raised = world.log.get(out["raised"][0])
    assert raised.attrs["avg_cpu"] == pytest.approx(99.0) and raised.ts == T0 + timedelta(minutes=2)
    assert world.svc.store.status_of(out["raised"])[out["raised"][0]]["status"] == "active"
    undone = world.svc.undo(out["id"], "bob")
    assert undone["withdrawn"] == out["raised"]
    assert world.svc.store.status_of(out["raised"])[out["raised"][0]]["status"] == "retracted"


def test_a_retraction_of_low_readings_raises_the_window_they_held_down(world):
    from ananke.polynomial import AggSpec, PolyPlan
    from moirae.retract.hidden import archive_aggregator, archive_reader, hidden_windows
    from moirae.retract.selection import Selection, resolve

    minute = 60_000_000
    plan = PolyPlan("hot", "window", 1, ("cpu",), ("cpu",), (AggSpec("avg_cpu", "avg", "cpu", 0, "cpu"),
                    AggSpec("n", "count", "1", None, None)), ("host",), "ts", minute, minute,
                    conditions=("(avg_cpu > CAST(90 AS DOUBLE))",), structural=("host",))
    world.svc.plans = lambda: {"hot": plan}
    world.svc.events = world.log
    world.arch.append("cpu", 9, pd.concat([_rows("y", 130, 10, 95.0), _rows("y", 140, 10, 10.0)]))
    out = world.svc.retract({"stream": "cpu", "predicate": "host = 'y' AND cpu < 50"}, "y's probe misread", "ann",
                            confirm=True)
    assert out["rows"] == 10 and len(out["raised"]) == 1 and out["raised"][0].startswith("hot:y:")
    assert world.log.get(out["raised"][0]).attrs["avg_cpu"] == pytest.approx(95.0)
    # PostgreSQL's aggregates and the rows read back agree
    removed, corrected = world.svc.store.active_flags()
    rows = [(sid, ts, vals) for _, sid, ts, vals in resolve(world.arch, Selection("cpu", predicate="host = 'y'"))]
    pushed = hidden_windows(plan, archive_reader(world.arch, "cpu", "ts"), rows, removed, corrected, set(),
                            archive_aggregator(world.arch, "cpu", "ts"))
    read = hidden_windows(plan, archive_reader(world.arch, "cpu", "ts"), rows, removed, corrected, set())
    assert [w for w, _ in pushed] == [w for w, _ in read] and len(read) == 1
    assert pushed[0][1]["avg_cpu"] == pytest.approx(read[0][1]["avg_cpu"]) and pushed[0][1]["n"] == read[0][1]["n"] == 10
