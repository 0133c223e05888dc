"""An event the replica task materialized and the live event-query archives too is
stored once (M 4.2; archive.materialized.supersede): whichever of the two writes first,
and when both run at once. The live write of the same key supersedes the replica's row;
the replica skips keys the live query already wrote."""

from __future__ import annotations

import threading
from datetime import timedelta

import pandas as pd
import pytest

from archive import StreamSpec
from archive.materialized import MATERIALIZED, replace_materialization
from tests.archive.arch_helpers import T0, catalog_rows, make_archiver, partition_counts

pytestmark = pytest.mark.postgres

EVENTS = "ev_overload"
CID = int(T0.timestamp() // 3600)  # the 1-hour chunk holding T0 and the minutes below


@pytest.fixture
def events(pg):
    arch = make_archiver(pg)
    arch.register_stream(StreamSpec.build(EVENTS, "ts", {"sid": "text", "avg_bw": "double", "eid": "text"},
                                          kind="event", indexes=[("eid",)]))
    yield arch
    arch.close()


def _events(*minutes: int, bw: float = 97.0) -> pd.DataFrame:
    return pd.DataFrame({"ts": [T0 + timedelta(minutes=m) for m in minutes],
                         "sid": "s0", "avg_bw": bw, "eid": [f"ov:s0:{m}" for m in minutes]})


def _stored(arch) -> pd.DataFrame:
    with arch.db.connection() as conn, conn.cursor() as cur:
        cur.execute(f"SELECT eid, _batch, avg_bw FROM {EVENTS} ORDER BY eid, _batch")
        return pd.DataFrame(cur.fetchall(), columns=["eid", "_batch", "avg_bw"])


def test_a_live_event_supersedes_the_replica_row_of_its_key(events):
    """The chunk is present (a live batch wrote minute 30); the replica then ran over it
    (minutes 5 and 10) and the memory mirror read it; the next live batch writes minute
    10's event (with the live value) and minute 20's. Minute 10 is stored once, as the
    live row, in PostgreSQL, the catalog's count and the mirror; minute 5 keeps its
    replica row."""
    events.append(EVENTS, 1, _events(30), key="eid")
    replace_materialization(events, EVENTS, CID, _events(5, 10, bw=90.0), "eid", [], "ev:overload")
    assert sorted(events.present_frame(EVENTS, CID)["eid"]) == ["ov:s0:10", "ov:s0:30", "ov:s0:5"]
    res = events.append(EVENTS, 3, _events(10, 20), key="eid")
    got = _stored(events)
    assert got["eid"].tolist() == ["ov:s0:10", "ov:s0:20", "ov:s0:30", "ov:s0:5"]
    assert got.set_index("eid").loc["ov:s0:10", "_batch"] == 3  # the live row, not the replica's
    assert got.set_index("eid").loc["ov:s0:5", "_batch"] == MATERIALIZED
    assert res.rows == 2
    assert catalog_rows(events, EVENTS) == partition_counts(events, EVENTS) == {CID: 4}
    mirror = events.present_frame(EVENTS, CID)
    assert sorted(mirror["eid"]) == ["ov:s0:10", "ov:s0:20", "ov:s0:30", "ov:s0:5"]  # the replica's 10 is gone
    assert mirror.set_index("eid").loc["ov:s0:10", "avg_bw"] == 97.0


def test_the_replica_skips_an_event_the_live_query_wrote_first(events):
    events.append(EVENTS, 3, _events(10), key="eid")
    assert replace_materialization(events, EVENTS, CID, _events(5, 10, bw=90.0), "eid", [], "ev:overload") == 1
    assert _stored(events)["eid"].tolist() == ["ov:s0:10", "ov:s0:5"]
    assert catalog_rows(events, EVENTS) == partition_counts(events, EVENTS) == {CID: 2}


def test_without_the_key_a_live_append_leaves_replica_rows_alone(events):
    """Raw streams pass no key: their appends delete nothing."""
    replace_materialization(events, EVENTS, CID, _events(10), "eid", [], "ev:overload")
    events.append(EVENTS, 3, _events(10))
    assert len(_stored(events)) == 2


def test_an_unknown_key_is_named(events):
    with pytest.raises(ValueError, match="key 'event_id'"):
        events.append(EVENTS, 3, _events(10), key="event_id")


@pytest.mark.parametrize("rounds", [12])
def test_replica_and_live_writing_the_same_events_at_once_store_each_once(events, rounds):
    """The replica replaces the chunk's replica rows while live batches write the same keys, in
    threads started together, over several rounds: every key ends stored exactly once,
    and the catalog's count is the partition's."""
    errors: list[BaseException] = []
    for r in range(rounds):
        minutes = [r * 2, r * 2 + 1]
        go = threading.Barrier(2)

        def replica(minutes=minutes, go=go):
            go.wait()
            try:
                replace_materialization(events, EVENTS, CID, _events(*minutes, bw=90.0), "eid", [], "ev:overload")
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        def live(minutes=minutes, go=go, r=r):
            go.wait()
            try:
                events.append(EVENTS, r, _events(*minutes), key="eid")
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=replica), threading.Thread(target=live)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert errors == []
    got = _stored(events)
    assert got["eid"].value_counts().max() == 1
    assert len(got) == 2 * rounds
    assert catalog_rows(events, EVENTS) == partition_counts(events, EVENTS) == {CID: 2 * rounds}
