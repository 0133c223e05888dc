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


def test_index_keeps_no_pending_list_and_a_lookup_by_many_ids_is_exact(pg):
    """A retraction looks up many source ids at once: the GIN index keeps no pending list
    (an index made before is converted and merged by ``create``), and the lookup, taken
    through the index, finds exactly the sink tuples naming one of the ids."""
    with pg.connection() as conn, conn.cursor() as cur:  # an index made with the default pending list
        cur.execute("CREATE TABLE pold (sink text NOT NULL, sink_id bigint NOT NULL, tuple_ts timestamptz NOT NULL, "
                    "ids bigint[] NOT NULL, vals bytea, PRIMARY KEY (sink, sink_id))")
        cur.execute("CREATE INDEX pold_ids ON pold USING gin (ids)")
    store = PolyStore(pg.connect, prefix="pold", borrow=pg.connection).create()
    fresh = PolyStore(pg.connect, prefix="pnew", borrow=pg.connection).create()
    with pg.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT c.relname, c.reloptions FROM pg_class c WHERE c.relname IN ('pold_ids', 'pnew_ids')")
        assert {n: o for n, o in cur.fetchall()} == {"pold_ids": ["fastupdate=off"], "pnew_ids": ["fastupdate=off"]}
    rng = np.random.default_rng(5)
    ids = rng.integers(-(2**62), 2**62, size=(200, 6))
    for s in (store, fresh):
        s.put_plan(PolyPlan("r", "row", 1, ("m",)))
        s.put("r", [(i, T, Poly(ids[i], None)) for i in range(200)])
    asked = rng.choice(ids.ravel(), size=300, replace=False).tolist() + [7, 8]
    want = sorted(i for i in range(200) if set(ids[i].tolist()) & set(asked))
    for s in (store, fresh):
        assert [sid for _, sid, _ in s.affected(asked)] == want
        assert [sid for _, sid, _, _ in s.polys_of(asked)] == want
