"""The polynomial store (H 5): one table for every event-query, keyed inserts (a replay
stores nothing twice), round-trips of ids and values, and the forward lookup across
queries through the GIN index on the source ids."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np

from ananke.poly_store import PolyStore
from ananke.polynomial import AggSpec, Poly, PolyPlan

T = datetime(2024, 1, 1, tzinfo=UTC)


def test_polynomials_round_trip_and_answer_forward_across_queries(pg):
    store = PolyStore(pg.connect, prefix="ptest", borrow=pg.connection).create()
    win = PolyPlan("w", "window", 1, ("m",), ("bw",), (AggSpec("a", "avg", "bw", 0, "bw"),), ("sid",), "ts",
                   300_000_000, 300_000_000, conditions=("(a > 1.0D)",))
    join = PolyPlan("j", "row", 2, ("m", "u"))
    store.put_plan(win)
    store.put_plan(join)
    assert store.plans() == {"w": win, "j": join}
    pw = Poly(np.array([1, 2, 3], dtype=np.int64), np.array([[1.5], [np.nan], [-2.0]]))
    pj = Poly(np.array([2, 9, 4, 9], dtype=np.int64), None, 2)
    for _ in range(2):  # the second is a replay: nothing changes
        store.put("w", [(10, T, pw)])
        store.put("j", [(-20, T, pj)])
    assert store.count() == 2
    assert store.get("w", [10])[10] == pw and store.get("j", [-20, 5]) == {-20: pj}
    assert store.affected([2]) == [("j", -20, T), ("w", 10, T)]
    assert store.affected([9]) == [("j", -20, T)] and store.affected([77]) == []
    (sink, sid, _, poly), = store.polys_of([3])
    assert (sink, sid, poly) == ("w", 10, pw)
    assert store.nbytes() > 0
    assert store.drop("w") == 1 and store.affected([1]) == [] and "w" not in store.plans()
