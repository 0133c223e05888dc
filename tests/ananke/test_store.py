"""GraphStore in PostgreSQL: idempotent, exactly-once under replay, backward/forward queries."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from ananke.ank1 import Ank1
from ananke.items import SinkTuple
from ananke.store import BadPrefix, GraphStore
from tests.ananke.ank_helpers import at

pytestmark = pytest.mark.postgres

U = timedelta(minutes=15)
INPUT = [
    ("K2", SinkTuple(2, at(8, 10), {"car": 2, "mean_speed": 120.0}), [(201, at(8, 0)), (202, at(8, 5))]),
    ("K1", SinkTuple(1, at(8, 15), {"car": 1, "n": 3}), [(101, at(8, 0)), (102, at(8, 5)), (103, at(8, 10))]),
    ("K2", SinkTuple(3, at(8, 15), {"car": 2, "mean_speed": 115.0}), [(202, at(8, 5)), (203, at(8, 10))]),
]


def feed(store, upto_wm):
    """A fresh ANK-1 (as after an engine restart) fed the whole input into ``store``."""
    ank = Ank1(("K1", "K2"), U).build(store)
    for sink in ("K1", "K2"):
        ank.on_watermark(sink, at(8, 10))
    for sink, st, prov in INPUT:
        ank.on_tuple(sink, st, prov)
    for sink in ("K1", "K2"):
        ank.on_watermark(sink, upto_wm)
    return ank


def test_replay_after_restart_is_exactly_once_and_queries_answer(pg):
    store = GraphStore(pg.connect, prefix="prov").create()
    feed(store, at(8, 21))  # W - U = 8:06: sources at 8:00 and 8:05 expired
    first = store.counts()
    assert first == {"source": 6, "sink": 3, "edge": 7, "label": 3 + 4}
    keys = store.keys()
    # the engine restarts and replays everything, this time up to a later watermark
    feed(store, at(8, 21))
    assert store.counts() == first and store.keys() == keys
    feed(store, at(9, 0))
    assert store.counts() == {"source": 6, "sink": 3, "edge": 7, "label": 3 + 6}
    assert store.sources_of(3) == [(202, at(8, 5)), (203, at(8, 10))]
    fwd = store.alerts_of(202)
    assert [(s, k) for s, k, _ in fwd.alerts] == [("K2", 2), ("K2", 3)] and fwd.expired
    assert store.alerts_of(999).alerts == () and not store.alerts_of(999).expired
    store.create()  # idempotent DDL
    assert store.counts()["edge"] == 7


def test_forward_answer_is_not_final_while_alive(pg):
    store = GraphStore(pg.connect).create()
    feed(store, at(8, 21))
    fwd = store.alerts_of(203)
    assert [k for _, k, _ in fwd.alerts] == [3] and not fwd.expired


def test_bad_prefix_is_refused(pg):
    with pytest.raises(BadPrefix, match="'x; drop'"):
        GraphStore(pg.connect, prefix="x; drop")


class CountingStore:
    """A GraphStore wrapper that counts its write calls and can refuse the first ones."""

    def __init__(self, store: GraphStore, fail: int = 0) -> None:
        self.store, self.fail, self.calls = store, fail, 0

    def __call__(self, items) -> None:
        self.calls += 1
        if self.fail:
            self.fail -= 1
            raise ConnectionError("graph store unreachable (test)")
        self.store(items)


def dangling_edges(pg, prefix: str) -> int:
    with pg.connection() as conn, conn.cursor() as cur:
        cur.execute(f"SELECT count(*) FROM {prefix}_edge e WHERE NOT EXISTS (SELECT 1 FROM {prefix}_vertex v "
                    "WHERE v.kind = 'source' AND v.id = e.source_id)")
        return cur.fetchone()[0]


def test_a_batch_is_written_in_one_call_and_a_refused_one_is_not_lost(pg):
    store = GraphStore(pg.connect, prefix="bat").create()
    sink = CountingStore(store, fail=1)
    ank = Ank1(("K1", "K2"), U).build(sink)
    with pytest.raises(ConnectionError), ank.batched():  # what the Spark adapter does per micro-batch
        for name in ("K1", "K2"):
            ank.on_watermark(name, at(8, 10))
        for name, st, prov in INPUT[:2]:
            ank.on_tuple(name, st, prov)
            assert sink.calls == 0
    # nothing before the block ended, then one call, which failed
    assert sink.calls == 1 and store.counts() == {"source": 0, "sink": 0, "edge": 0, "label": 0}
    with ank.batched():  # the next batch carries the refused items first
        ank.on_tuple(*INPUT[2])
    assert sink.calls == 2
    assert store.counts() == {"source": 6, "sink": 3, "edge": 7, "label": 3}
    assert dangling_edges(pg, "bat") == 0
    ank.on_watermark("K1", at(8, 21))
    ank.on_watermark("K2", at(8, 21))  # outside a block: written at once
    assert sink.calls == 3 and store.counts()["label"] == 3 + 4
    store.close()


def test_the_write_connection_is_kept_and_replaced_when_it_breaks(pg):
    store = GraphStore(pg.connect, prefix="conn").create()
    ank = feed(store, at(8, 10))
    pid = store._writer().info.backend_pid
    ank.on_watermark("K1", at(8, 21))
    assert store._writer().info.backend_pid == pid  # one connection for every write
    with pg.connection() as conn, conn.cursor() as cur:  # the server drops it (as on a restart)
        cur.execute("SELECT pg_terminate_backend(%s)", (pid,))
    ank.on_watermark("K2", at(8, 21))  # written on a new connection, nothing lost
    assert store._writer().info.backend_pid != pid
    assert store.counts() == {"source": 6, "sink": 3, "edge": 7, "label": 3 + 4}
    last = store._writer().info.backend_pid
    store.close()  # no server process left behind
    with pg.connection() as conn, conn.cursor() as cur:
        for _ in range(50):
            cur.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (last,))
            if cur.fetchone()[0] == 0:
                break
            time.sleep(0.1)
        else:
            raise AssertionError(f"backend {last} still open after close()")


def test_a_statement_error_is_raised_and_the_connection_stays_usable(pg):
    from ananke.items import Edge

    store = GraphStore(pg.connect, prefix="err").create()
    with pytest.raises(Exception, match="out of range"):
        store([Edge(2**63 + 1, 1, at(8, 0))])  # not a bigint: the server refuses it
    feed(store, at(8, 21))
    assert store.counts()["edge"] == 7
    store.close()


def test_queries_borrow_a_pooled_connection_when_given_one(pg):
    opened = []

    def connect():
        opened.append(1)
        return pg.connect()

    store = GraphStore(connect, prefix="pool", borrow=pg.connection).create()
    feed(store, at(8, 10))
    writes = len(opened)  # the tables and the write connection
    before = pg.connections_made()
    for _ in range(5):
        assert store.counts()["sink"] == 3
        store.alerts_of(1)
        store.sources_of(1)
    assert len(opened) == writes  # no connection of its own per query
    assert pg.connections_made() - before <= 1  # one from the pool, reused
    store.close()
