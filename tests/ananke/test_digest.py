"""Window digests (ananke.digest): matching a digest against the archive's candidates,
and which windows of an instrumented query keep a digest instead of their list."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ananke.digest import MAX_SUBSETS, match, xor_ids

ids64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


@settings(max_examples=200, deadline=None)
@given(st.lists(ids64, min_size=1, max_size=60, unique=True), st.integers(0, 3), st.randoms(use_true_random=False))
def test_match_removes_the_tuples_that_arrived_after_the_window(ids, dropped, rnd):
    """Candidates in arrival order; the window saw all but ``dropped`` of the newest ones
    (never the whole list). The match returns exactly what it saw."""
    dropped = min(dropped, len(ids) - 1)
    batches = sorted(rnd.randrange(5) for _ in ids)
    cands = [(i, f"t{k}", b) for k, (i, b) in enumerate(zip(ids, batches, strict=True))]
    newest = sorted(range(len(cands)), key=lambda k: cands[k][2], reverse=True)[:max(dropped, 0) + 3]
    gone = set(rnd.sample(newest, dropped))
    seen = [c for k, c in enumerate(cands) if k not in gone]
    m = match(cands, len(seen), xor_ids(c[0] for c in seen))
    assert m.rows is not None and m.removed == dropped
    assert sorted(m.rows) == sorted(seen)


@given(st.lists(ids64, min_size=0, max_size=20, unique=True), st.integers(1, 5))
def test_match_reports_missing_tuples(ids, more):
    cands = [(i, None, 0) for i in ids]
    m = match(cands, len(ids) + more, 0)
    assert m.rows is None and m.short and m.removed == -more


def test_match_refuses_a_digest_no_subset_explains():
    cands = [(i, None, i) for i in (1, 2, 4, 8)]
    assert match(cands, 4, 0).rows is None  # right count, wrong XOR
    assert match(cands, 2, 1 ^ 16).rows is None  # no two of them XOR to 1 ^ 16 ^ 15
    assert not match(cands, 2, 1 ^ 16).short


def test_match_gives_up_after_max_subsets():
    rnd = random.Random(3)
    cands = [(rnd.getrandbits(63), None, 0) for _ in range(400)]
    m = match(cands, 397, 12345)  # 3 to remove among 400: more subsets than the bound, none fits
    assert m.rows is None and m.removed == 3
    assert MAX_SUBSETS < 400 * 399 * 398 // 6


@pytest.mark.spark
def test_windows_keep_a_digest_only_over_one_source_with_keys_and_time_unchanged(spark):
    from pyspark.sql import functions as F

    from ananke.query import ProvQuery

    df = spark.createDataFrame([], "ts timestamp, sid string, bw double")

    def sink(build, digest=True):
        q = ProvQuery(digest=digest)
        return build(q.source(df, "metrics", "ts", lateness="1 minute")).sink("s")

    def win(s, keys=("sid",), col="bw"):
        return s.window("5 minutes", keys=list(keys), aggs=[F.avg(col).alias("a")], ts_out="ts")

    plain = sink(lambda s: win(s).filter(F.col("a") > 1).with_column("eid", F.lit("e")))
    assert plain.digest is not None and plain.digest.stream == "metrics" and plain.digest.keys == ("sid",)
    assert plain.df.schema["_prov"].dataType.simpleString().startswith("struct<n:bigint,x:bigint,lo:timestamp")
    assert sink(lambda s: win(s.with_column("x", F.lit(1)).select("ts", "sid", "bw"))).digest is not None
    assert sink(lambda s: win(s, keys=())).digest is not None  # one window for all
    assert sink(lambda s: win(s.filter(F.col("bw") > 0))).digest is None  # a filter: not every tuple counts
    assert sink(lambda s: win(s.with_column("sid", F.lit("x")))).digest is None  # key recomputed
    assert sink(lambda s: win(s.select("sid", "bw", F.col("ts").alias("t2")), keys=("sid",))).digest is not None
    assert sink(lambda s: win(s.select(F.upper("sid").alias("sid"), "bw"))).digest is None
    twice = sink(lambda s: win(win(s), keys=("sid",), col="a"))  # a window over windows: lists
    assert twice.digest is None and twice.df.schema["_prov"].dataType.simpleString().startswith("array")
    assert sink(lambda s: win(s), digest=False).digest is None
    assert ProvQuery(enabled=False, digest=True).digest is False

    from ananke.ank1 import Ank1
    from ananke.query import ProvenanceError
    from ananke.spark_adapter import Ank1SparkSink, collect_batch

    q = ProvQuery(digest=True)
    s = win(q.source(df, "metrics", "ts", lateness="1 minute")).sink("s")
    with pytest.raises(ProvenanceError, match="give a resolver"):
        Ank1SparkSink(s, Ank1.from_query(q).build())
    with pytest.raises(ProvenanceError, match="give a resolver"):
        collect_batch(s, s.df)
