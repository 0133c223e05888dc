"""A monitor file whose event-query is a MATCH_RECOGNIZE row pattern
(moirae/monitors/pattern_sql.py): bad patterns are refused naming the file, the line and
the pattern's position; a good one deploys on a running engine, and its matches are
archived as events with their bound rows as provenance and U = WITHIN."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pandas as pd
import pytest

from moirae.monitors import MonitorFileError, MonitorUnavailable, deploy, loads, validate
from moirae.patterns import compile_pattern, reference_matches
from tests.moirae.scenario_small import wait

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

MONITOR = """\
name: {name}
sources:
  {src}:
    kind: file
    options: {{path: "{path}", format: csv, maxFilesPerTrigger: 1}}
    schema: {{ts: timestamp, vessel: string, speed: double}}
    lateness: 30 seconds
event_query:
  sql: |
    SELECT * FROM {src} MATCH_RECOGNIZE (
      PARTITION BY vessel ORDER BY ts
      MEASURES FIRST(A.ts) AS since, COUNT(A.*) AS stops, LAST(B.speed) AS off_speed
      PATTERN (A{{3,}} B)
      WITHIN INTERVAL '10' MINUTE
      DEFINE A AS speed < 1, B AS speed >= 1)
"""

#: (mistake, text replaced, replacement, what the message says, line of the SQL it is on)
MISTAKES = [
    ("undefined symbol", "PATTERN (A{{3,}} B)", "PATTERN (A{{3,}} C)", "symbol C used but not defined", 4),
    ("unbounded without WITHIN", "      WITHIN INTERVAL '10' MINUTE\n", "", "needs WITHIN", 4),
    ("unknown column", "B AS speed >= 1", "B AS sog >= 1", "sog", 6),
    ("syntax", "PATTERN (A{{3,}} B)", "PATTERN (A{{3,}} B", "expected ')'", 5),
]


@pytest.mark.parametrize("mistake, old, new, says, sql_line", MISTAKES, ids=[m[0] for m in MISTAKES])
def test_a_bad_pattern_is_refused_naming_the_line_and_position(running_engine, tmp_path, mistake, old, new, says,
                                                              sql_line):
    good = MONITOR.format(name="pings_bad", src="pings_bad_in", path=tmp_path)
    text = good.replace(old.format(), new.format())
    assert text != good
    with pytest.raises(MonitorFileError) as err:
        validate(loads(text, "pings.yaml"), running_engine)
    e = err.value
    assert says in str(e) and "pattern 'pings_bad' at " in str(e), str(e)
    sql_first = text[:text.index("    SELECT")].count("\n") + 1
    assert e.file == "pings.yaml" and e.line == sql_first + sql_line - 1, str(e)
    assert "pings_bad" not in running_engine.deploy.event_queries


class _HostWithoutPatterns:
    """The running engine seen through a host of a build without pattern event-queries."""

    def __init__(self, engine) -> None:
        self._engine = engine

    def __getattr__(self, name: str):
        if name == "pattern_query":
            raise AttributeError(name)
        return getattr(self._engine, name)


def test_a_host_without_pattern_query_refuses_the_monitor_as_unavailable(running_engine, tmp_path):
    text = MONITOR.format(name="pings_nopat", src="pings_nopat_in", path=tmp_path)
    with pytest.raises(MonitorUnavailable) as err:
        validate(loads(text, "pings.yaml"), _HostWithoutPatterns(running_engine))
    assert "not available in this build" in str(err.value) and "pattern_query()" in str(err.value), str(err.value)
    assert err.value.file == "pings.yaml"
    validate(loads(text, "pings.yaml"), running_engine)  # the same file passes on the engine
    assert "pings_nopat" not in running_engine.deploy.event_queries


def _pings() -> pd.DataFrame:
    """Two vessels reporting every 20 s for 40 minutes, each stopping (speed < 1) a few
    times for 1-3 minutes."""
    t0 = pd.Timestamp("2025-03-01", tz="UTC")
    rng = np.random.default_rng(5)
    parts = []
    for v in ("v1", "v2"):
        ts = pd.date_range(t0 + pd.Timedelta(seconds=7 if v == "v2" else 0), periods=120, freq="20s", tz="UTC")
        speed = rng.uniform(3, 12, len(ts))
        for start in rng.choice(range(5, 110, 15), 4, replace=False):
            speed[start:start + rng.integers(3, 9)] = rng.uniform(0, 0.9)
        parts.append(pd.DataFrame({"ts": ts, "vessel": v, "speed": speed.round(2)}))
    return pd.concat(parts).sort_values("ts", kind="stable").reset_index(drop=True)


def test_pattern_matches_are_archived_as_events_with_provenance(running_engine, tmp_path):
    engine = running_engine
    inbox = tmp_path / "pings"
    inbox.mkdir()
    text = MONITOR.format(name="stops", src="pings", path=inbox)
    deploy(loads(text, "stops.yaml"), engine)
    flow = engine.deploy.flows["stops"]
    assert flow.U == timedelta(minutes=10)  # U follows WITHIN (A 4)
    rows = _pings()
    end = pd.DataFrame({"ts": [rows["ts"].max() + pd.Timedelta(hours=1)], "vessel": ["zz"], "speed": [5.0]})
    blocks = [rows.iloc[:120], rows.iloc[120:], end]
    for i, b in enumerate(blocks):
        tmp = inbox / f".p{i}.csv"
        b.assign(ts=b["ts"].dt.strftime("%Y-%m-%dT%H:%M:%SZ")).to_csv(tmp, index=False, header=False,
                                                                       columns=["ts", "vessel", "speed"])
        tmp.rename(inbox / f"p{i}.csv")
    sql = text[text.index("    SELECT"):].replace("\n    ", "\n")
    cp = compile_pattern(sql, name="stops", columns=["ts", "vessel", "speed"])
    ref = reference_matches(cp, rows.assign(row_id=np.arange(len(rows))))
    assert len(ref) >= 4
    wait(lambda: len(engine.deploy.events.list("stops", limit=500)) >= len(ref), timeout=240,
         what="the pattern's matches as events")
    events = engine.archiver.read("ev_stops", rows["ts"].min(), rows["ts"].max() + pd.Timedelta(hours=2))
    assert len(events) == len(ref) and events["eid"].is_unique
    assert sorted(pd.to_datetime(events["ts"], utc=True)) == sorted(pd.Timestamp(m.last_ts) for m in ref)
    g = engine.provenance_graph("stops")
    linked = g._query(f"SELECT s.payload->>'eid', src.tuple_ts FROM {g.e} e "
                      f"JOIN {g.v} s ON s.kind = 'sink' AND s.id = e.sink_id "
                      f"JOIN {g.v} src ON src.kind = 'source' AND src.id = e.source_id", ())
    by_event: dict[str, list] = {}
    for eid, t in linked:
        by_event.setdefault(eid, []).append(pd.Timestamp(t).tz_convert("UTC"))
    want = sorted(tuple(sorted(rows["ts"].iloc[[rid for rid, _ in m.rows]])) for m in ref)
    assert sorted(tuple(sorted(v)) for v in by_event.values()) == want
    engine.undeploy_monitor("stops")
