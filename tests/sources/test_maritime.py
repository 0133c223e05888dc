"""The maritime scenario's generator (moirae/sources/maritime.py): seeded rows, planted
behaviours of T Defs. 5.10-5.16 that an independent reading of the definitions finds
exactly (no more, no fewer), its patterns (moirae/sources/maritime_patterns.py) through
the pattern matcher, its monitor files, and the ``maritime`` source kind's file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from moirae.sources.errors import ScenarioConfigError
from moirae.sources.maritime import COLUMNS, MaritimeConfig, MaritimeScenario
from moirae.sources.maritime_patterns import BEHAVIOUR_PATTERNS, variants
from moirae.sources.maritime_track import BEHAVIOURS

MONITORS = Path(__file__).resolve().parents[2] / "config" / "monitors" / "maritime"

# T Defs. 5.10-5.15, read straight from the paper: (row condition, minimum run)
DEFS = {
    "hsnc": (lambda d: d.near_coast & (d.speed > 5), 1),
    "anchored": (lambda d: (d.near_port | d.in_anchorage) & (d.speed < 0.5), 3),
    "drifting": (lambda d: (d.heading_diff > 30) & (d.speed > 0.5), 3),
    "trawling": (lambda d: (d.ship_type == "fishing") & d.in_fishing & (d.speed > 1.0) & (d.speed < 9.0), 3),
    "sar": (lambda d: (d.heading_change > 15) & (d.ship_type == "sar") & (d.speed > 2.7), 3),
    "loitering": (lambda d: ~d.near_port & ~d.near_coast & (d.speed < 0.5), 3),
}


def episodes(df: pd.DataFrame) -> set[tuple]:
    """Every behaviour episode in the rows, found by scanning each vessel's rows: maximal
    runs of a definition's condition (with a row after them), and port approaches (T Def.
    5.16: a row at 7-10 km, rows at 5-7 km, a row under 5 km, of one port)."""
    out = set()
    for vid, g in df.sort_values(["vessel_id", "ts"], kind="stable").groupby("vessel_id", sort=False):
        ts = g["ts"].to_numpy()
        for name, (cond, k) in DEFS.items():
            m = cond(g).to_numpy()
            edges = np.flatnonzero(np.diff(np.concatenate([[0], m.astype(int), [0]])))
            for a, b in zip(edges[::2], edges[1::2], strict=True):
                if b - a >= k and b < len(m):
                    out.add((vid, name, ts[a], ts[b - 1]))
        d, p = g["dist_port_km"].to_numpy(), g["nearest_port"].to_numpy()
        i = 0
        while i < len(d) - 2:
            if 7 < d[i] < 10 and 5 < d[i + 1] < 7 and p[i + 1] == p[i]:
                j = i + 1
                while j < len(d) and 5 < d[j] < 7 and p[j] == p[i]:
                    j += 1
                if j < len(d) and d[j] < 5 and p[j] == p[i]:
                    out.add((vid, "approach", ts[i], ts[j]))
                    i = j
            i += 1
    return out


def truth_set(scen: MaritimeScenario) -> set[tuple]:
    t = scen.truth()
    return {(r.vessel_id, r.behaviour, r.start.tz_convert(None).to_datetime64(), r.end.tz_convert(None).to_datetime64())
            for r in t.itertuples()}


@pytest.fixture(scope="module")
def scen() -> MaritimeScenario:
    return MaritimeScenario(MaritimeConfig(vessels=80, hours=4.0, seed=11))


@pytest.fixture(scope="module")
def rows(scen) -> pd.DataFrame:
    return scen.frame()


def test_rows_are_seeded_ordered_and_complete(scen, rows):
    cfg = scen.config
    assert list(rows.columns) == list(COLUMNS)
    assert len(rows) == cfg.vessels * cfg.rows_per_vessel
    assert rows["ts"].is_monotonic_increasing and str(rows["ts"].dt.tz) == "UTC"
    again = MaritimeScenario(MaritimeConfig(vessels=80, hours=4.0, seed=11)).frame()
    pd.testing.assert_frame_equal(rows, again)
    other = MaritimeScenario(MaritimeConfig(vessels=80, hours=4.0, seed=12)).frame()
    assert not rows[["lon", "lat"]].equals(other[["lon", "lat"]])
    chunks = list(scen.chunks(900.0))
    assert len(chunks) > 4
    pd.testing.assert_frame_equal(pd.concat(chunks, ignore_index=True), rows)
    per = rows.groupby("vessel_id")["ts"]
    assert (per.size() == cfg.rows_per_vessel).all() and per.apply(lambda s: s.is_monotonic_increasing).all()
    assert rows["speed"].between(0, 20).all() and rows["heading_diff"].between(0, 180).all()


def test_planted_behaviours_are_exactly_the_episodes_in_the_rows(scen, rows):
    """Precision and recall of the generator itself: every planted behaviour is an
    episode by the paper's definitions with exactly the recorded first and last rows,
    and normal traffic and the near misses hold no other episode."""
    truth = truth_set(scen)
    found = episodes(rows.assign(ts=rows["ts"].dt.tz_convert(None)))
    assert found == truth
    kinds = {b for _, b, _, _ in truth}
    assert kinds >= set(BEHAVIOURS) - {"sar"}  # SAR vessels are rare; the larger scenario below has them
    assert len(scen.decoys()) > 10


def test_every_behaviour_is_planted_at_a_larger_size():
    t = MaritimeScenario(MaritimeConfig(vessels=150, hours=3.0, seed=5)).truth()
    assert set(t["behaviour"]) == set(BEHAVIOURS)
    assert (t["end"] >= t["start"]).all()


def test_patterns_find_exactly_the_planted_behaviours():
    from moirae.patterns import Matcher, compile_pattern

    scen = MaritimeScenario(MaritimeConfig(vessels=30, hours=4.0, seed=3))
    rows = scen.frame().assign(row_id=lambda d: np.arange(len(d)))
    found = set()
    for name, sql in BEHAVIOUR_PATTERNS.items():
        m = Matcher(compile_pattern(sql, name=name, columns=list(rows.columns)))
        ms, states = m.advance_frame({}, rows)
        for st in states.values():
            ms.extend(m.finish(st)[0])
        found |= {(x.key[0], name, pd.Timestamp(x.measures["start_ts"]), pd.Timestamp(x.measures["end_ts"]))
                  for x in ms}
    truth = {(r.vessel_id, r.behaviour, r.start, r.end) for r in scen.truth().itertuples()}
    assert len(truth) > 8 and found == truth


def test_variants_compile_with_unique_names():
    from moirae.patterns import compile_pattern

    vs = variants(48)
    assert len({n for n, _ in vs}) == 48 and vs[:7] == list(BEHAVIOUR_PATTERNS.items())
    for name, sql in vs:
        cp = compile_pattern(sql, name=name, columns=list(COLUMNS))
        assert cp.partition_by == ("vessel_id",) and cp.within_ns == 3600 * 10**9
    with pytest.raises(ValueError, match="at most"):
        variants(500)


def test_monitor_files_hold_the_behaviour_patterns():
    from moirae.monitors import load

    assert sorted(s.name for s in load(MONITORS)) == sorted(BEHAVIOURS)  # the file schema's checks
    files = {f.stem: yaml.safe_load(f.read_text()) for f in MONITORS.glob("*.yaml")}
    assert set(files) == set(BEHAVIOURS)
    for name, spec in files.items():
        assert spec["name"] == name
        assert spec["event_query"]["sql"].strip() == BEHAVIOUR_PATTERNS[name].strip()
        assert spec["sources"]["vessels"]["kind"] == "maritime"
        assert spec["similarity"]["k"] >= 1 and spec["contexts"] and spec["recalls"]


@pytest.mark.parametrize("key,value", [("vessels", 0), ("hours", -1), ("period_s", "x"), ("decoy_rate", 2),
                                       ("start", "2026-01-01T00:00:00")])
def test_bad_config_names_the_key(key, value):
    with pytest.raises(ScenarioConfigError, match=key):
        MaritimeConfig(**{key: value})


def test_source_kind_generates_its_file_once(tmp_path):
    from moirae.sources.kinds import kind
    from moirae.sources.maritime_source import generator_config, rows_file

    k = kind("maritime")
    assert k.engine_options == ("data_dir",)
    opts = {"vessels": "4", "hours": "1", "seed": 9, "data_dir": str(tmp_path)}
    path = rows_file(opts)
    assert path.parent == (tmp_path / "maritime").resolve() and path.suffix == ".parquet"
    stamp = path.stat().st_mtime_ns
    assert rows_file(opts) == path and path.stat().st_mtime_ns == stamp
    back = pd.read_parquet(path)
    want = MaritimeScenario(generator_config(opts)).frame()
    assert len(back) == len(want) and list(back["vessel_id"]) == list(want["vessel_id"])
    assert rows_file({**opts, "seed": 10}) != path
    csv = tmp_path / "rows.csv"
    assert MaritimeScenario(generator_config(opts)).write(csv, header=False) == len(want)
    first = csv.read_text().splitlines()[0].split(",")
    assert len(first) == len(COLUMNS) and first[1].count(":") == 2 and first[12] in ("true", "false")
