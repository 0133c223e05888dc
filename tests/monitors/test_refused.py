"""A bad monitor file is refused whole: the error names the file, the line and the key,
and the running engine is left as it was (no source, query, stream or operator added)."""

from __future__ import annotations

import pytest

from moirae.monitors import MonitorFileError, deploy, load, loads

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

GOOD = """\
name: {name}
sources:
  {src}:
    kind: rate
    options: {{rowsPerSecond: 5}}
    columns:
      ts: timestamp
      zone: concat('z', cast(value % 3 AS string))
      load: cast(value % 100 AS double)
event_query:
  sql: |
    SELECT zone, window_time(window) AS ts, avg(load) AS avg_load,
           concat_ws(':', zone, date_format(window_time(window), 'HHmmss')) AS eid
    FROM {src}
    GROUP BY window(ts, '10 seconds'), zone
    HAVING avg(load) > 40
contexts:
  - name: peers
    sql: SELECT e.eid, e.ts, s.zone AS peer FROM events e JOIN {src} s ON s.ts <= e.ts AND s.ts > e.ts - interval '10 seconds'
recalls:
  - name: norm
    sql: SELECT h.zone, avg(h.load) AS mean_load FROM {src} h WHERE h.zone = :zone GROUP BY h.zone
similarity: {{k: 2}}
"""

#: (mistake, the text it replaces, what replaces it, what the message must say)
MISTAKES = [
    ("unknown key", "similarity: {{k: 2}}", "similarity: {{k: 2, kk: 3}}", "unknown key 'kk'"),
    ("bad SQL", "HAVING avg(load) > 40", "HAVING (avg(load) > 40", "bad sql"),
    ("unknown stream", "    FROM {src}\n", "    FROM loads\n", "unknown stream 'loads'"),
    ("type mismatch", "HAVING avg(load) > 40", "HAVING max(zone) > 40", "type mismatch"),
    ("unsafe history template", "SELECT h.zone, avg(h.load) AS mean_load FROM {src} h WHERE h.zone = :zone "
     "GROUP BY h.zone", "SELECT h.zone FROM {src} h WHERE h.zone = :zone; DELETE FROM {src}", "unsafe"),
    ("unsafe history template (write through a function)",
     "SELECT h.zone, avg(h.load) AS mean_load FROM {src} h WHERE h.zone = :zone GROUP BY h.zone",
     "SELECT set_config('default_transaction_read_only', 'off', false) FROM {src} h", "unsafe"),
]


def _state(engine) -> dict:
    """What a deploy would change: live queries, sources, archived streams, event-queries,
    recall operators, deployed monitors."""
    return {"queries": sorted(q.name for q in engine.spark.streams.active),
            "sources": sorted(s.name for s in engine.sources),
            "streams": sorted(s.name for s in engine.archive.streams()),
            "event_queries": sorted(engine.deploy.event_queries),
            "operators": sorted(d.operator for d in engine.deploy.manager.descriptions()),
            "monitors": sorted(m["name"] for m in engine.monitors()) if hasattr(engine, "monitors") else []}


def _line_of(text: str, needle: str) -> int:
    return text[:text.index(needle)].count("\n") + 1


@pytest.mark.parametrize("mistake, old, new, says", MISTAKES, ids=[m[0] for m in MISTAKES])
def test_a_bad_monitor_is_refused_whole_naming_the_line(running_engine, mistake, old, new, says):
    engine = running_engine
    fmt = {"name": "busy_zone", "src": "zone_load"}
    good = GOOD.format(**fmt)
    bad_piece = new.format(**fmt)
    text = good.replace(old.format(**fmt), bad_piece)
    assert text != good
    before = _state(engine)
    with pytest.raises(MonitorFileError) as err:
        deploy(loads(text, "busy_zone.yaml"), engine)
    assert _state(engine) == before  # nothing added, nothing started
    e = err.value
    assert e.file == "busy_zone.yaml"
    assert says.lower() in str(e).lower(), str(e)
    first_changed = _line_of(text, bad_piece.strip().splitlines()[0])
    assert e.line == first_changed, str(e)
    assert f"busy_zone.yaml:{e.line}:" in str(e)


def test_the_good_monitor_deploys(running_engine):
    """The file the mistakes are made in is itself fine (so each refusal is its mistake's)."""
    engine = running_engine
    before = _state(engine)
    deploy(loads(GOOD.format(name="calm_zone", src="calm_load"), "calm_zone.yaml"), engine)
    after = _state(engine)
    assert "calm_zone" in after["event_queries"] and "calm_load" in after["sources"]
    assert {"norm", "calm_zone_similar"} <= set(after["operators"]) - set(before["operators"])
    if hasattr(engine, "undeploy_monitor"):
        engine.undeploy_monitor("calm_zone")


@pytest.mark.parametrize("scenario", ["cluster", "host"])
def test_the_builtin_monitor_files_validate(running_engine, scenario):
    """The scenarios' monitor files (config/monitors/) pass every check on an engine,
    changing nothing."""
    from pathlib import Path

    from moirae.monitors import validate

    (spec,) = load(Path(__file__).resolve().parents[2] / "config" / "monitors" / scenario)
    before = _state(running_engine)
    checked = validate(spec, running_engine)
    assert _state(running_engine) == before
    assert checked.inputs == ("metrics",) and checked.compiled is not None and checked.compiled.windowed
    assert set(checked.output.fieldNames()) == {"sid", "avg_bw", "max_bw", "ts", "eid"}


PY = """\
name: py_overload
sources:
  py_metrics:
    kind: rate
    options: {{rowsPerSecond: 5}}
    columns: {{ts: timestamp, sid: "concat('s', cast(value % 2 AS string))", bw: cast(value % 900 AS double)}}
event_query:
  python: {ref}
  args: {{threshold: 600}}
  inputs: [py_metrics]
"""


def test_a_python_event_query_is_checked_like_a_sql_one(running_engine):
    """``python: module:function`` (a factory called with ``args``) is imported and its
    plan analysed on the sources' schemas; a missing function names its line."""
    from moirae.monitors import validate

    before = _state(running_engine)
    checked = validate(loads(PY.format(ref="moirae.scenarios.queries:overload_query"), "py.yaml"), running_engine)
    assert checked.output.fieldNames() == ["sid", "avg_bw", "max_bw", "ts", "eid"]
    with pytest.raises(MonitorFileError) as err:
        validate(loads(PY.format(ref="moirae.scenarios.queries:overlord"), "py.yaml"), running_engine)
    assert err.value.line == 8 and "has no 'overlord'" in str(err.value)
    assert _state(running_engine) == before


def test_reference_tables_and_rules_deploy_with_the_monitor(running_engine, tmp_path):
    """A monitor's reference table (read by its context-query) and its rule over its norm
    Recall go through the engine's reference_table and rule (M 4.3, fig. 2)."""
    (tmp_path / "zones.csv").write_text("zone,team\nz0,ops\nz1,ops\nz2,lab\n")
    text = GOOD.format(name="ref_zone", src="ref_load").replace(
        "contexts:\n  - name: peers\n    sql: SELECT e.eid, e.ts, s.zone AS peer FROM events e JOIN ref_load s "
        "ON s.ts <= e.ts AND s.ts > e.ts - interval '10 seconds'",
        "contexts:\n  - name: team\n    sql: SELECT e.eid, e.ts, z.team FROM events e JOIN zones z ON z.zone = e.zone")
    text = text.replace("avg(h.load) AS mean_load FROM", "avg(h.load) AS mean_load, stddev(h.load) AS sd_load FROM")
    text += ("reference_tables:\n  - {name: zones, csv: zones.csv, key: [zone]}\n"
             "rules:\n  - {kind: suppress, recall: norm, k: 2, metric: avg_load}\n")
    path = tmp_path / "ref_zone.yaml"
    path.write_text(text)
    (spec,) = load(path)
    deploy(spec, running_engine)
    try:
        assert "zones" in {t["name"] for t in running_engine.reference_tables()}
        assert "ref_zone" in running_engine.deploy.event_queries
        assert any(r.event == "ref_zone" for r in running_engine.rules.rules.values())
    finally:
        running_engine.undeploy_monitor("ref_zone")


def test_deploy_text_names_the_file(running_engine):
    """The engine's text path (``moirae run --monitors``) names the file in its errors."""
    bad = GOOD.format(name="texty", src="texty_load").replace("similarity: {k: 2}", "similarity: {k: 2, kk: 3}")
    before = _state(running_engine)
    with pytest.raises(MonitorFileError, match=r"^texty\.yaml:\d+: key 'similarity\.kk': unknown key"):
        running_engine.deploy_text(bad, origin="texty.yaml")
    assert _state(running_engine) == before
