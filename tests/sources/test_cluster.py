"""The cluster scenario (M §1, §3.1-3.5): determinism, rates, planted causes, ground truth."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from moirae.sources.analyze import analyze
from moirae.sources.cluster import ClusterScenario, ground_truth
from moirae.sources.cluster_config import load_cluster_config, parse_cluster_config
from moirae.sources.errors import ScenarioConfigError, SourceFileNotFound

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "config" / "scenarios" / "cluster.yaml"
MIN = 60_000_000_000
DAY = 1440 * MIN

SMALL = {
    "seed": 7, "start": "2026-01-01T00:00:00Z", "history_days": 2, "servers": 5,
    "users": {"alice": 0.6, "bob": 0.4, "eve": 0.01},
    "procs": {"sshd": 1.0, "nginx": 0.5, "miner": 0.005},
    "causes": [
        {"name": "common", "kind": "overload", "rate_per_day": 12, "users": ["bob"], "procs": ["nginx"],
         "metric": "bw", "level": 900, "duration_min": 20, "lead_min": 10, "resolution": "migrated tasks"},
        {"name": "rare", "kind": "overload", "rate_per_day": 3, "users": ["eve"], "procs": ["miner"],
         "metric": "bw", "level": 950, "duration_min": 30, "lead_min": 10, "resolution": "killed process miner"},
        {"name": "leak", "kind": "failure", "rate_per_day": 3, "procs": ["nginx"], "metric": "mem",
         "level": 99, "duration_min": 15, "lead_min": 5, "resolution": "rebooted"},
    ],
}


def small(**over) -> ClusterScenario:
    return ClusterScenario(parse_cluster_config({**SMALL, **over}, "test"))


def ns(col: pd.Series) -> np.ndarray:
    return col.to_numpy(dtype="datetime64[ns]").view("int64")


@pytest.fixture(scope="module")
def two_days():
    g = small()
    return g, g.frames(g.config.start_ns, g.config.history_end_ns)


def test_same_seed_same_rows_other_seed_other_rows(two_days):
    g, f = two_days
    a = g.config.start_ns
    again = small().frames(a, a + 6 * 60 * MIN)
    for stream, df in again.items():
        pd.testing.assert_frame_equal(df, f[stream][ns(f[stream]["ts"]) < a + 6 * 60 * MIN].reset_index(drop=True))
    other = small(seed=8).frames(a, a + 6 * 60 * MIN)
    assert not other["metrics"].equals(again["metrics"])


def test_rows_do_not_depend_on_the_span_asked_for(two_days):
    g, f = two_days
    a = g.config.start_ns
    cut = a + 17 * 60 * MIN + 37 * 1_000_000_000  # not on a block boundary
    fresh = small()
    left, right = fresh.frames(a, cut), small().frames(cut, g.config.history_end_ns)
    for stream in f:
        pd.testing.assert_frame_equal(pd.concat([left[stream], right[stream]], ignore_index=True), f[stream])
    chunks = list(small().history(chunk_hours=7))
    assert chunks[0][0] == a and chunks[-1][1] == g.config.history_end_ns
    assert all(chunks[i][1] == chunks[i + 1][0] for i in range(len(chunks) - 1))
    pd.testing.assert_frame_equal(pd.concat([c[2]["procs"] for c in chunks], ignore_index=True), f["procs"])


def test_configured_sampling_rates_and_schema(two_days):
    g, f = two_days
    cfg = g.config
    assert list(f["metrics"].columns) == ["ts", "sid", "cpu", "mem", "bw"]
    assert list(f["users"].columns) == ["ts", "sid", "user"]
    assert list(f["procs"].columns) == ["ts", "sid", "proc"]
    assert list(f["incidents"].columns) == ["ts", "iid", "sid", "kind", "cause", "resolution"]
    assert str(f["metrics"]["ts"].dtype) == "datetime64[ns, UTC]"
    assert len(f["metrics"]) == cfg.servers * 2 * 86_400 / cfg.metrics_period_s
    per_sid = f["metrics"].groupby("sid")["ts"].apply(lambda s: np.diff(ns(s)))
    assert all(set(d.tolist()) == {int(cfg.metrics_period_s * 1e9)} for d in per_sid)
    snaps = f["procs"][f["procs"]["proc"] == "sshd"]  # probability 1: in every snapshot
    assert len(snaps) == cfg.servers * 2 * 86_400 / cfg.context_period_s
    assert f["metrics"][["cpu", "mem"]].stack().between(0, 100).all() and (f["metrics"]["bw"] >= 0).all()


def test_cause_rates_follow_the_scenario_file():
    g = ClusterScenario.from_file(str(SCENARIO))
    cfg = g.config
    blocks = int(cfg.history_days * DAY // cfg.block_ns)
    counts = pd.Series([c.cause for b in range(blocks) for c in g.block_incidents(b)]).value_counts()
    for i, cause in enumerate(cfg.causes):
        expected = cause.rate_per_day * cfg.history_days
        assert abs(counts.get(i, 0) - expected) <= 4 * np.sqrt(expected) + 1, cause.name
    rare = min(cfg.causes, key=lambda c: c.rate_per_day)
    common = max(cfg.causes, key=lambda c: c.rate_per_day)
    assert counts.get(cfg.causes.index(rare), 0) * 10 < counts[cfg.causes.index(common)]


def test_incidents_show_in_metrics_and_context(two_days):
    g, f = two_days
    cfg = g.config
    inc = f["incidents"]
    assert len(inc) >= 20 and inc["iid"].is_unique
    by_name = {c.name: c for c in cfg.causes}
    m, users, procs = f["metrics"], f["users"], f["procs"]
    for row in inc.itertuples():
        cause = by_name[row.cause]
        t = row.ts.value
        onset = t - int(cfg.detect_min * MIN)
        on = m[(m["sid"] == row.sid) & (ns(m["ts"]) >= onset) & (ns(m["ts"]) < t)]
        if len(on) and ns(on["ts"])[0] == onset:  # the whole 5-minute window lies in history
            if cause.metric == "bw":  # the event-query of M fig. 1 fires: 5-minute average bw > X
                assert on["bw"].mean() > cfg.metrics.bw_threshold_mbps
            else:
                assert on[cause.metric].mean() > 90
        snap = t - t % int(cfg.context_period_s * 1e9)
        here_u = set(users[(users["sid"] == row.sid) & (ns(users["ts"]) == snap)]["user"])
        here_p = set(procs[(procs["sid"] == row.sid) & (ns(procs["ts"]) == snap)]["proc"])
        assert set(cause.users) <= here_u and set(cause.procs) <= here_p, row
        assert row.resolution == cause.resolution and row.kind == cause.kind


def test_baseline_traffic_stays_below_threshold(two_days):
    g, f = two_days
    m = f["metrics"].copy()
    inc = f["incidents"]
    busy = np.zeros(len(m), dtype=bool)
    for row in inc.itertuples():
        t = row.ts.value
        busy |= ((m["sid"] == row.sid) & (ns(m["ts"]) >= t - 60 * MIN) & (ns(m["ts"]) < t + 60 * MIN)).to_numpy()
    quiet = m[~busy].set_index("ts").groupby("sid")["bw"].rolling("5min").mean()
    assert quiet.max() < g.config.metrics.bw_threshold_mbps


def test_ground_truth_labels_match_incidents(two_days):
    g, f = two_days
    truth = ground_truth(g, f["incidents"])
    assert truth["iid"].tolist() == f["incidents"]["iid"].tolist()
    assert truth["cause"].tolist() == f["incidents"]["cause"].tolist()
    rare = truth[truth["cause"] == "rare"]
    assert all(u == ("eve",) and p == ("miner",) for u, p in zip(rare["cause_users"], rare["cause_procs"], strict=True))


def test_rare_causes_and_values_are_rare(two_days):
    g, f = two_days
    counts = f["incidents"]["cause"].value_counts()
    assert 0 < counts.get("rare", 0) < counts["common"] / 2
    share = (f["procs"]["proc"] == "miner").mean()
    assert 0 < share < 0.01  # a rare term: high IDF (M §3.5)


def test_live_continuation_delivers_each_row_once_out_of_order():
    g = small(live={"out_of_order": 30, "min_delay_ms": 1000, "max_delay_ms": 20_000})
    a = g.config.history_end_ns
    spans = [g.live(a + k * 30 * 1_000_000_000, a + (k + 1) * 30 * 1_000_000_000, "metrics", since_ns=a)
             for k in range(20)]
    got = pd.concat(spans, ignore_index=True)
    assert np.all(np.diff(ns(got["ingest_ts"])) >= 0)
    settled = a + 10 * MIN - 20_000_000_000  # rows whose latest ingestion falls inside the spans
    expected = g.frames(a, settled)["metrics"]
    got_settled = got[ns(got["ts"]) < settled].drop(columns="ingest_ts")
    key = ["ts", "sid"]
    assert not got_settled.duplicated(key).any()
    pd.testing.assert_frame_equal(got_settled.sort_values(key, ignore_index=True),
                                  expected.sort_values(key, ignore_index=True))
    assert analyze(ns(got["ts"])).out_of_order_pct > 5
    in_order = small().live(a, a + 5 * MIN, "users")
    pd.testing.assert_frame_equal(in_order.drop(columns="ingest_ts"), small().frames(a, a + 5 * MIN)["users"])


# -- the scenario file and its loader --------------------------------------------------------


def test_repository_scenario_file_loads_and_documents_every_key():
    cfg = load_cluster_config(SCENARIO)
    assert cfg.servers > 0 and len(cfg.causes) >= 4
    text = SCENARIO.read_text()
    for line in text.splitlines():
        stripped = line.split("#")[0].rstrip()
        if stripped.endswith(":") and not stripped.startswith(" "):
            key = stripped[:-1]
            before = text[: text.index(line)].rstrip().splitlines()
            assert before and before[-1].lstrip().startswith("#"), f"top-level key {key!r} has no comment above it"


@pytest.mark.parametrize("raw, needle", [
    ({"serverz": 3}, "unknown key 'serverz'"),
    ({"metrics": {"bw_mean": 1}}, "unknown key 'metrics.bw_mean'"),
    ({"servers": 0}, "'servers'"),
    ({"servers": "many"}, "'servers'"),
    ({"start": "yesterday"}, "'start'"),
    ({"start": "2026-01-01T00:00:00"}, "time zone"),
    ({"users": {"alice": 1.5}}, "'users.alice'"),
    ({"metrics_period_s": 7}, "'metrics_period_s'"),
    ({"live": {"out_of_order": 120}}, "'live.out_of_order'"),
    ({"live": {"min_delay_ms": 5, "max_delay_ms": 1}}, "live.min_delay_ms"),
    ({"causes": [{"name": "x", "kind": "meltdown", "rate_per_day": 1, "procs": ["p"], "metric": "bw",
                  "level": 1, "resolution": "r"}]}, "'causes[0].kind'"),
    ({"causes": [{"name": "x", "kind": "overload", "rate_per_day": -1, "procs": ["p"], "metric": "bw",
                  "level": 1, "resolution": "r"}]}, "'causes[0].rate_per_day'"),
    ({"causes": [{"name": "x", "kind": "overload", "rate_per_day": 1, "procs": ["p"], "metric": "bw",
                  "level": 1, "resolution": "r", "colour": "red"}]}, "unknown key 'causes[0].colour'"),
])
def test_bad_scenario_values_name_key_and_file(tmp_path, raw, needle):
    import yaml

    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ScenarioConfigError) as info:
        load_cluster_config(path)
    assert needle in str(info.value) and str(path) in str(info.value)


def test_missing_scenario_file(tmp_path):
    with pytest.raises(SourceFileNotFound, match="nope.yaml"):
        load_cluster_config(tmp_path / "nope.yaml")
