"""The engine's resolver of window digests (moirae.ingest.window_provenance) on a real archive:
an exact digest gives the window's tuples; a digest of a window that never saw the
newest tuple gives the others; one the archive stays short of is reread until the
timeout and then counted; one no subset explains is counted and logged, at most a line
a minute."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest

from ananke.digest import Digest, DigestSpec, xor_ids
from ananke.ids import micros
from archive import StreamSpec
from moirae.ingest.window_provenance import ArchiveResolver
from tests.engine_factory import make_engine

pytestmark = pytest.mark.postgres

T0 = datetime(2024, 5, 1, tzinfo=UTC)
SPEC = DigestSpec("metrics", "ts", ("sid",))


@pytest.fixture
def engine(pg, tmp_path, monkeypatch):
    e = make_engine(pg, tmp_path / "data", monkeypatch, spark={"trigger": "100ms"}, archive={"chunk_span": "1h", "chunk_target_rows": 0})
    e.archiver.register_stream(StreamSpec.build("metrics", "ts", {"sid": "bigint", "bw": "double"}))
    yield e
    e.close()


@pytest.fixture
def resolver(engine):
    """Makes resolvers over ``engine``'s archive, each stopped when the test ends (its
    background summaries too), whatever the test's outcome."""
    made: list[ArchiveResolver] = []

    def make() -> ArchiveResolver:
        made.append(ArchiveResolver(engine.archiver, SPEC, engine.sources.waits,
                                    engine.settings.spark.trigger.total_seconds()))
        return made[-1]

    yield make
    for r in made:
        r.stop()


def _append(engine, batch: int, rows: list[tuple[int, int, float]]) -> None:
    frame = pd.DataFrame({"ts": [T0 + timedelta(seconds=s) for s, _, _ in rows], "sid": [k for _, k, _ in rows],
                          "bw": [b for _, _, b in rows]})
    engine.archiver.append("metrics", batch, frame)


def _ids(engine, sid: int, batches=(0, 1)) -> list[int]:
    with engine.db.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT _sid FROM metrics WHERE sid = %s AND _batch = ANY(%s) AND ts < %s",
                    (sid, list(batches), T0 + timedelta(seconds=10)))
        return [r[0] for r in cur.fetchall()]


def _digest(sid: int, ids: list[int], n: int | None = None) -> Digest:
    return Digest((sid,), micros(T0), micros(T0 + timedelta(seconds=10)), len(ids) if n is None else n, xor_ids(ids))


def test_resolver_matches_removes_rereads_and_counts(engine, resolver, caplog):
    _append(engine, 0, [(s, s % 2, float(s)) for s in range(8)])
    _append(engine, 1, [(3, 1, 99.0)])  # arrives later, into sid 1's window
    r = resolver()
    all1, early1 = _ids(engine, 1), _ids(engine, 1, (0,))
    got = r(SPEC, [_digest(0, _ids(engine, 0)), _digest(1, all1), _digest(1, early1)])
    assert sorted(i for i, _ in got[0]) == sorted(_ids(engine, 0))
    assert sorted(i for i, _ in got[1]) == sorted(all1) and len(all1) == 5
    assert sorted(i for i, _ in got[2]) == sorted(early1) and len(early1) == 4  # the late one removed
    assert all(t.tzinfo is not None and T0 <= t < T0 + timedelta(seconds=10) for _, t in got[0])
    assert r.status()["late_removed"] == 1 and r.status()["unmatched"] == 0 and r.status()["windows"] == 3

    caplog.set_level(logging.WARNING, logger="moirae.ingest.window_provenance")
    assert r.timeout() == pytest.approx(2.5)
    short = r(SPEC, [_digest(0, _ids(engine, 0), n=6)])  # the archive never gets the 6th
    assert len(short[0]) == 4
    assert r.status()["unmatched"] == 1 and r.status()["reread"] >= 3 and r.status()["read_seconds"] >= 1
    assert len(caplog.records) == 1 and "holds 4 tuple(s), the window aggregated 6" in caplog.text
    wrong = r(SPEC, [Digest((0,), micros(T0), micros(T0 + timedelta(seconds=10)), 4, 12345)])
    assert len(wrong[0]) == 4 and r.status()["unmatched"] == 2
    assert len(caplog.records) == 1  # counted, not logged again within the minute
    r(SPEC, [Digest((0,), micros(T0), micros(T0 + timedelta(seconds=10)), 4, 777)])  # a third miss in a row
    before = r.status()["reread"]
    short = r(SPEC, [_digest(0, _ids(engine, 0), n=6)])  # taken at once now: no reread, no stall
    assert len(short[0]) == 4 and r.status()["reread"] == before and r.status()["unmatched"] == 4
    r(SPEC, [_digest(0, _ids(engine, 0))])  # a match: short windows are reread again
    assert r._misses == 0
    nul = r(SPEC, [Digest(("s\x00x",), micros(T0), micros(T0 + timedelta(seconds=10)), 3, 1)])
    assert nul == [[]] and r.status()["unmatched"] == 5  # no read (psycopg2 refuses a NUL), no wait
    with pytest.raises(ValueError, match="resolver of"):
        r(DigestSpec("metrics", "ts", ("bw",)), [])
    # the rows are clustered by the windows' key from now on, and summarized off the reads' path
    assert engine.archiver.cluster_keys("metrics") == ("sid",) == r.cluster
    summaries = r.status()["summaries"]
    assert summaries["now"] >= 1 and summaries["errors"] == 0
    assert r.summaries._thread is not None and r.summaries._thread.is_alive()
    r.stop()
    assert r.summaries._thread is None


def test_values_come_from_the_resolving_read(engine, resolver, monkeypatch):
    """A digest window's values (for its polynomial) come from the read that resolved the
    batch once the resolver knows the columns: no second read of the archive, and ids it
    did not read (another window's) still come from the archive, with the same values."""
    _append(engine, 0, [(s, s % 2, float(10 * s)) for s in range(8)])
    r = resolver()
    ids0, ids1 = _ids(engine, 0), _ids(engine, 1)
    span = (T0, T0 + timedelta(seconds=10))
    with engine.db.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT _sid, bw FROM metrics")
        truth = {i: (bw,) for i, bw in cur.fetchall()}
    r(SPEC, [_digest(0, ids0)])
    assert r.values("metrics", ["bw"], ids0, *span) == {i: truth[i] for i in ids0}  # the columns are learnt
    r(SPEC, [_digest(0, ids0)])  # this resolve reads bw along
    reads = []
    real = engine.archiver.db.connection

    def counted(*a, **k):
        reads.append(1)
        return real(*a, **k)

    monkeypatch.setattr(engine.archiver.db, "connection", counted)
    assert r.values("metrics", ["bw"], ids0, *span) == {i: truth[i] for i in ids0}
    assert reads == []
    assert r.values("metrics", ["bw"], ids0 + ids1, *span) == {i: truth[i] for i in ids0 + ids1}
    assert len(reads) == 1  # only sid 1's ids were read
    assert r.values("metrics", ["sid"], ids0, *span) == {i: (0,) for i in ids0}  # other columns: read
