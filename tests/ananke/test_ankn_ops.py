"""The paper's Delay and Forward Once operators from Spark's own operators (A 5.2, figs. 7-9).

Random tuples on batch DataFrames: D delays every tuple once to delay(τ), with U < delay
- τ <= 2U; FO turns each group of same-key tuples spanning less than U into exactly one
tuple, stamped delay(t_1.τ), carrying t_n's payload, whichever of figure 9's cases the
group falls in (inside one window of both Aggregates, or split by either one's boundary).
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from ananke.ankn import delay, delay_of, forward_once

pytestmark = [pytest.mark.spark, pytest.mark.slow]

U = timedelta(seconds=10)
T0 = datetime(2024, 3, 1, 12, 0, 0, tzinfo=UTC)


def _at(ms: int) -> datetime:
    return T0 + timedelta(milliseconds=ms)


def _aware(ts: datetime) -> datetime:
    """A collected timestamp (naive, in the session's UTC) as an aware one."""
    return ts.replace(tzinfo=UTC)


def test_delay_stamps_each_tuple_once_with_delay_of_its_time(spark):
    rng = random.Random(11)
    rows = [(i, f"p{i}", _at(rng.randrange(0, 120_000))) for i in range(200)]
    rows += [(900, "edge", T0 + 3 * U)]  # on a window's left boundary: delayed by exactly 2U
    df = spark.createDataFrame(rows, "id long, body string, ts timestamp")
    got = {r["id"]: (r["body"], _aware(r["ts"])) for r in delay(df, "ts", U).collect()}
    assert delay(df, "ts", U).count() == len(rows)  # once each
    for i, body, ts in rows:
        out_body, out_ts = got[i]
        assert out_body == body and out_ts == delay_of(ts, U)
        assert U < out_ts - ts <= 2 * U
    assert got[900][1] - (T0 + 3 * U) == 2 * U


@pytest.mark.parametrize("seed", [1, 2])
def test_forward_once_emits_each_group_once_at_delay_of_its_first(spark, seed):
    rng = random.Random(seed)
    rows, expected = [], {}
    for key in range(60):
        # groups spanning less than U, starting anywhere: some inside one window of both
        # Aggregates, some across an A_1 boundary (even multiples of U), some across an
        # A_2 boundary (odd multiples); a key may come back in a later, separate group
        first = rng.randrange(0, 200_000)
        if key % 3 == 0:  # across the boundary at the next multiple of U
            first = (first // 10_000 + 1) * 10_000 - rng.randrange(1, 4_000)
        times = sorted({first} | {first + rng.randrange(0, 9_999) for _ in range(rng.randrange(0, 5))})
        for n, t in enumerate(times):
            rows.append((key, f"k{key}-{n}", _at(t)))
        expected[key] = (f"k{key}-{len(times) - 1}", delay_of(_at(first), U))
    df = spark.createDataFrame(rows, "id long, body string, ts timestamp")
    out = forward_once(df, "ts", ["id"], U).collect()
    assert sorted(r["id"] for r in out) == sorted(expected)  # exactly once per group
    for r in out:
        body, ts = expected[r["id"]]
        assert (r["body"], _aware(r["ts"])) == (body, ts), r["id"]
    across = [k for k in expected if k % 3 == 0]
    assert across  # figure 9's split case was exercised


def test_forward_once_forwards_a_key_again_after_its_group(spark):
    rows = [(1, "a", _at(1_000)), (1, "b", _at(5_000)), (1, "c", _at(61_000))]
    df = spark.createDataFrame(rows, "id long, body string, ts timestamp")
    out = sorted((_aware(r["ts"]), r["body"]) for r in forward_once(df, "ts", ["id"], U).collect())
    assert out == [(delay_of(_at(1_000), U), "b"), (delay_of(_at(61_000), U), "c")]


def test_delay_with_an_anchor_forwards_each_key_once_at_delay_of_its_anchor(spark):
    """D then FO (the live path's Aggregate): the occurrences of a key that carries its first
    time ``a`` (a source vertex's τ_s) arrive at times in [a, a + U]; one output each,
    stamped delay(a), wherever the occurrences fall relative to the window boundaries."""
    rng = random.Random(5)
    rows, expected = [], {}
    for key in range(60):
        a = rng.randrange(0, 100_000)
        expected[key] = delay_of(_at(a), U)
        times = [a, a + 10_000] + [a + rng.randrange(0, 10_001) for _ in range(rng.randrange(0, 4))]
        rows += [(key, _at(a).timestamp() * 1e6, _at(t)) for t in times]
    df = spark.createDataFrame([(k, int(a), t) for k, a, t in rows], "id long, a long, ts timestamp")
    out = delay(df, "ts", U, anchor="a").collect()
    assert sorted(r["id"] for r in out) == sorted(expected)  # once each
    assert {r["id"]: _aware(r["ts"]) for r in out} == expected


def test_delay_names_an_anchor_that_is_not_in_the_payload(spark):
    from ananke.errors import AnankeError

    df = spark.createDataFrame([(1, T0)], "id long, ts timestamp")
    with pytest.raises(AnankeError, match="'nope'"):
        delay(df, "ts", U, anchor="nope")


def test_delay_with_later_holds_those_tuples_one_u_more(spark):
    """``later`` = 1 stamps a tuple delay(anchor) + U (ANK-N's source labels, after every
    edge of their source); = 0 keeps delay(anchor). Either way once per key, for ``ts`` in
    [anchor, anchor + U], the ends included."""
    rng = random.Random(8)
    rows, expected = [], {}
    for key in range(40):
        a, later = rng.randrange(0, 100_000), key % 2
        if key % 5 == 0:
            a = (a // 10_000) * 10_000  # on a window boundary
        expected[key] = delay_of(_at(a), U) + later * U
        times = [a, a + 10_000] + [a + rng.randrange(0, 10_001) for _ in range(rng.randrange(0, 3))]
        rows += [(key, int(_at(a).timestamp() * 1e6), later, _at(t)) for t in times]
    df = spark.createDataFrame(rows, "id long, a long, later int, ts timestamp")
    out = delay(df, "ts", U, anchor="a", later="later").collect()
    assert sorted(r["id"] for r in out) == sorted(expected)  # once each
    assert {r["id"]: _aware(r["ts"]) for r in out} == expected


def test_delay_refuses_later_without_an_anchor(spark):
    from ananke.errors import AnankeError

    df = spark.createDataFrame([(1, 0, T0)], "id long, later int, ts timestamp")
    with pytest.raises(AnankeError, match="later needs an anchor"):
        delay(df, "ts", U, later="later")
