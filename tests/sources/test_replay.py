"""File replay: determinism, target fractions, delays, errors and rejected rows (DEBS'19 §2)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moirae.sources.analyze import analyze
from moirae.sources.disorder import DISTRIBUTIONS, ReplayConfig, disorder, register_distribution
from moirae.sources.errors import (
    InvalidDelayRange,
    InvalidFraction,
    InvalidReplayOption,
    MissingColumn,
    MoiraeError,
    NonTemporalColumn,
    SourceFileNotFound,
    UnsupportedFormat,
)
from moirae.sources.replay import analyze_file, event_ns, replay_file, replay_frame


def cfg(**kw) -> ReplayConfig:
    base = dict(ts_col="ts", unit="ms", out_of_order=25.0, min_delay_ms=50, max_delay_ms=900, seed=11)
    base.update(kw)
    return ReplayConfig(**base)


def test_same_file_and_config_give_identical_bytes(dense_csv, tmp_path):
    a = replay_file(dense_csv, cfg()).to_csv_bytes()
    b = replay_file(dense_csv, cfg()).to_csv_bytes()
    assert a == b
    out1, out2 = tmp_path / "o1.parquet", tmp_path / "o2.parquet"
    replay_file(dense_csv, cfg()).write(out1)
    replay_file(dense_csv, cfg()).write(out2)
    assert out1.read_bytes() == out2.read_bytes()


def test_different_seed_gives_different_stream(dense_csv):
    assert replay_file(dense_csv, cfg(seed=1)).to_csv_bytes() != replay_file(dense_csv, cfg(seed=2)).to_csv_bytes()


def test_parquet_and_csv_sources_replay_alike(dense_csv, tmp_path):
    pq = tmp_path / "dense.parquet"
    pd.read_csv(dense_csv).to_parquet(pq, index=False)
    a, b = replay_file(dense_csv, cfg()), replay_file(pq, cfg())
    pd.testing.assert_frame_equal(a.rows, b.rows)


@settings(max_examples=12, deadline=None)
@given(target=st.floats(min_value=0, max_value=80), seed=st.integers(0, 2**32 - 1))
def test_measured_fraction_is_within_two_points_of_target(target, seed):
    # Dense stream: 1 event / 10 ms, delays >= 50 ms, so every delayed tuple is overtaken.
    ev = np.arange(20_000, dtype="int64") * 10_000_000
    d = disorder(ev, cfg(out_of_order=target, seed=seed))
    measured = analyze(ev[d.order]).out_of_order_pct
    assert abs(measured - target) <= 2.0


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), frac=st.floats(0, 100),
       lo=st.floats(0, 500), width=st.floats(0, 1500),
       dist=st.sampled_from(sorted(DISTRIBUTIONS)))
def test_event_times_kept_delays_bounded_and_sorted_by_ingestion(seed, frac, lo, width, dist):
    rng = np.random.default_rng(seed)
    ev = np.cumsum(rng.integers(0, 30, 2_000)).astype("int64") * 1_000_000
    c = cfg(out_of_order=frac, min_delay_ms=lo, max_delay_ms=lo + width, seed=seed, distribution=dist)
    d = disorder(ev, c)
    # Event times are never changed: the delivery order is a permutation of the input.
    assert sorted(d.order.tolist()) == list(range(len(ev)))
    ing = d.ingest_ns[d.order]
    assert np.all(np.diff(ing) >= 0)
    extra = d.delay_ns[d.delayed]
    assert np.all(extra >= np.rint(lo * 1e6) - 1) and np.all(extra <= np.rint((lo + width) * 1e6) + 1)
    assert np.all(d.delay_ns[~d.delayed] == 0)  # source is in order: undelayed tuples on time
    # Stable sort: tuples with equal ingestion times keep their source order.
    same = np.diff(ing) == 0
    assert np.all(np.diff(d.order)[same] > 0)


def test_source_out_of_order_tuples_keep_their_place():
    ev = np.array([0, 10, 5, 20, 15, 30], dtype="int64") * 1_000_000
    d = disorder(ev, cfg(out_of_order=0))
    assert d.order.tolist() == [0, 1, 2, 3, 4, 5]
    assert analyze(ev[d.order]).out_of_order == 2
    assert d.delay_ns.tolist() == [0, 0, 5_000_000, 0, 5_000_000, 0]


def test_choice_of_delayed_tuples_independent_of_delay_distribution():
    ev = np.arange(5_000, dtype="int64") * 1_000_000
    a = disorder(ev, cfg(distribution="uniform"))
    b = disorder(ev, cfg(distribution="exponential"))
    assert np.array_equal(a.delayed, b.delayed)
    assert not np.array_equal(a.delay_ns, b.delay_ns)


def test_distributions_have_their_shape():
    ev = np.arange(50_000, dtype="int64") * 1_000_000
    means = {}
    for name in ("uniform", "exponential", "normal"):
        d = disorder(ev, cfg(out_of_order=100, min_delay_ms=100, max_delay_ms=1000, distribution=name))
        means[name] = d.delay_ns[d.delayed].mean() / 1e6
    assert abs(means["uniform"] - 550) < 10
    assert abs(means["normal"] - 550) < 10
    assert means["exponential"] < 450  # mass piled near the minimum


def test_registered_distribution_is_used():
    register_distribution("constant_max", lambda u, lo, hi: np.full_like(u, hi))
    try:
        d = disorder(np.arange(100, dtype="int64") * 1_000_000,
                     cfg(out_of_order=50, distribution="constant_max", max_delay_ms=300))
        assert set((d.delay_ns[d.delayed] // 1_000_000).tolist()) == {300}
    finally:
        DISTRIBUTIONS.pop("constant_max")


def test_analyzer_report(dense_csv):
    r = replay_file(dense_csv, cfg(out_of_order=10, min_delay_ms=100, max_delay_ms=500))
    s = r.stats()
    assert s.rows == 20_000 and abs(s.event_rate_per_s - 100) < 0.1
    assert 90 <= s.max_delay_ms <= 500 and sum(s.histogram_counts) == s.out_of_order
    assert '"out_of_order_pct"' in s.to_json() and "delay histogram" in s.to_text()
    assert analyze_file(dense_csv, "ts", "ms").out_of_order == 0


# -- errors -------------------------------------------------------------------------------


def test_missing_file(tmp_path):
    with pytest.raises(SourceFileNotFound, match="nope.csv"):
        replay_file(tmp_path / "nope.csv", cfg())
    assert issubclass(SourceFileNotFound, FileNotFoundError) and issubclass(SourceFileNotFound, MoiraeError)


def test_unsupported_format(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("{}")
    with pytest.raises(UnsupportedFormat, match="x.json"):
        replay_file(p, cfg())


def test_missing_column_is_named(dense_csv):
    with pytest.raises(MissingColumn, match="'when'"):
        replay_file(dense_csv, cfg(ts_col="when"))


def test_non_temporal_column_is_named(tmp_path):
    p = tmp_path / "names.csv"
    pd.DataFrame({"ts": ["alice", "bob"], "v": [1, 2]}).to_csv(p, index=False)
    with pytest.raises(NonTemporalColumn, match="'ts'"):
        replay_file(p, cfg(unit=None))
    with pytest.raises(NonTemporalColumn, match="'v'.*unit"):
        replay_file(p, cfg(ts_col="v", unit=None))


@pytest.mark.parametrize("bad", [-0.5, 100.5, 250])
def test_fraction_out_of_range_gives_value(bad):
    with pytest.raises(InvalidFraction, match=str(bad)):
        cfg(out_of_order=bad)
    assert issubclass(InvalidFraction, ValueError)


def test_min_above_max():
    with pytest.raises(InvalidDelayRange, match="min_delay_ms.*500.*max_delay_ms.*100"):
        cfg(min_delay_ms=500, max_delay_ms=100)


@pytest.mark.parametrize("kw, needle", [
    ({"unit": "minutes"}, "unit"), ({"distribution": "zipf"}, "zipf"), ({"speedup": 0}, "speedup"),
    ({"speedup": "fast"}, "fast"), ({"seed": -1}, "seed"), ({"min_delay_ms": -1}, "min_delay_ms"),
])
def test_other_bad_options(kw, needle):
    with pytest.raises((InvalidReplayOption, InvalidDelayRange), match=needle):
        cfg(**kw)


def test_unparseable_rows_returned_with_reasons(tmp_path):
    p = tmp_path / "mixed.csv"
    p.write_text("ts,v\n0,a\n100,b\nsoon,c\n,d\n200,e\n1e30,f\n")
    r = replay_file(p, cfg(out_of_order=0))
    assert r.rows["v"].tolist() == ["a", "b", "e"]
    got = dict(zip(r.rejected["row"], r.rejected["reason"], strict=True))
    assert got == {2: "cannot parse 'soon' as a number of ms", 3: "missing event time",
                   5: "event time '1e30' ms is out of range"}
    assert r.rejected["v"].tolist() == ["c", "d", "f"]


def test_malformed_csv_lines_are_rejected_not_dropped(tmp_path):
    p = tmp_path / "ragged.csv"
    p.write_text("ts,v\n0,a\n100,b,EXTRA,FIELDS\n200,c\n")
    r = replay_file(p, cfg(out_of_order=0))
    assert r.rows["v"].tolist() == ["a", "c"]
    assert len(r.rejected) == 1 and "EXTRA" in r.rejected["reason"].iat[0]


def test_iso_string_and_temporal_columns(tmp_path):
    df = pd.DataFrame({"ts": ["2024-03-01T00:00:02Z", "2024-03-01T00:00:01Z", "later"], "v": [1, 2, 3]})
    r = replay_frame(df, cfg(unit=None, out_of_order=0))
    assert r.rows["v"].tolist() == [1, 2] and r.rows["delay_ms"].tolist() == [0.0, 1000.0]
    p = tmp_path / "t.parquet"
    pd.DataFrame({"ts": pd.to_datetime([3, 1, 2], unit="s", utc=True), "v": [1, 2, 3]}).to_parquet(p)
    r2 = replay_file(p, cfg(unit=None, out_of_order=0))
    assert event_ns(r2.rows["ts"]).tolist() == [3_000_000_000, 1_000_000_000, 2_000_000_000]
    with pytest.raises(InvalidReplayOption, match="already a timestamp"):
        replay_file(p, cfg(unit="s"))
