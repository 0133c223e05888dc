"""GraphStore in PostgreSQL: idempotent, exactly-once under replay, backward/forward queries."""

from __future__ import annotations

from datetime import timedelta

import pytest
from ank_helpers import at

from ananke.ank1 import Ank1
from ananke.items import SinkTuple
from ananke.store import BadPrefix, GraphStore

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
