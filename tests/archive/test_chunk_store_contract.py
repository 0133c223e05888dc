"""The chunk-store contract (:class:`archive.abc.ChunkStore`, M 4.1 and M 4.3), run against
every implementation on each PostgreSQL backend.

Each test checks what a method's docstring in ``archive/abc.py`` declares, through the
contract's methods only; the writes it needs (``ChunkStore`` declares reads) go through the
implementation's :class:`Opened` adapter. Adding an implementation is one entry in
:data:`IMPLEMENTATIONS`.
"""

from __future__ import annotations

import inspect
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import pandas as pd
import pyarrow as pa
import pytest

from archive import Archiver, ArchiveSettings, Database, StreamSpec
from archive.abc import EPOCH, ChunkGrid, ChunkInfo, ChunkStore, HistoryQuery, Read, Tier
from archive.errors import (
    HistoryQueryCancelled,
    HistoryQueryFailed,
    HistoryQueryTimeout,
    MissingParameter,
    UnknownStream,
    UnsafeQuery,
)
from archive.simindex import IndexStore
from tests.archive.arch_helpers import T0, metrics_spec, rows

HOUR = timedelta(hours=1)
#: the store's own statement timeout in this suite (what a history-query gets without ``timeout_ms``)
STORE_TIMEOUT_MS = 1500
#: a value that would be SQL if it were formatted into the query
EVIL = "h0' OR '1'='1'; DROP TABLE metrics; --"


@dataclass
class Opened:
    """One implementation opened on one test schema: the store, and the writes the
    contract's checks need.

    ``register(spec, interval)`` registers a stream with a fixed chunk interval;
    ``write(stream, batch_id, frame)`` archives rows, committed on return;
    ``seal(horizon)`` moves the chunks ending at or before ``horizon`` out of the present
    tier; ``reopen()`` opens another store on the same archive (as another process would).
    """

    store: ChunkStore
    register: Callable[[StreamSpec, timedelta], None]
    write: Callable[[str, int, pd.DataFrame], None]
    seal: Callable[[datetime], None]
    reopen: Callable[[], ChunkStore]
    close: Callable[[], None]


@dataclass(frozen=True)
class Implementation:
    """A ChunkStore implementation: its class, and how to open it on a test schema with a
    given statement timeout."""

    name: str
    cls: type
    open: Callable[[Database, int], Opened]


def open_archiver(db: Database, statement_timeout_ms: int) -> Opened:
    settings = ArchiveSettings(chunk_span=HOUR, recent_chunks=2, statement_timeout_ms=statement_timeout_ms)
    arch = Archiver(db, settings)
    others: list[Archiver] = []

    def reopen() -> Archiver:
        other = Archiver(Database(db.dsn, schema=db.schema), settings)
        others.append(other)
        return other

    def seal(horizon: datetime) -> None:
        arch.demote(horizon)
        arch.age()

    def close() -> None:
        for other in others:
            other.close()
        arch.close()

    return Opened(arch, lambda spec, interval: arch.register_stream(spec, interval),
                  lambda stream, batch_id, frame: arch.append(stream, batch_id, frame), seal, reopen, close)


IMPLEMENTATIONS = [
    Implementation("archiver", Archiver, open_archiver),
]


@dataclass
class Loaded:
    """An opened store holding three streams: ``metrics`` and ``logs`` on a one-hour grid,
    ``alerts`` on a four-hour one; ``frames`` is what was written to each."""

    opened: Opened
    frames: dict[str, pd.DataFrame] = field(default_factory=dict)

    @property
    def store(self) -> ChunkStore:
        return self.opened.store


@pytest.fixture(params=IMPLEMENTATIONS, ids=lambda i: i.name)
def chunk_store(request, pg) -> Iterator[Loaded]:
    """Each implementation on this test's ``pg`` schema, loaded; its chunks older than
    ``T0 + 4h`` sealed (so several tiers exist)."""
    opened = request.param.open(pg, STORE_TIMEOUT_MS)
    loaded = Loaded(opened)
    alerts = rows(12, step=timedelta(minutes=50), hosts=2)
    alerts.loc[3, "host"] = EVIL
    for name, interval, frame in (("metrics", HOUR, rows(60, step=timedelta(minutes=7))),
                                  ("logs", HOUR, rows(20, start=T0 + 2 * HOUR, step=timedelta(minutes=11))),
                                  ("alerts", 4 * HOUR, alerts)):
        opened.register(metrics_spec(name, indexes=[]), interval)
        opened.write(name, 0, frame)
        loaded.frames[name] = frame
    opened.seal(T0 + 4 * HOUR)
    yield loaded
    opened.close()


def expected_chunks(frame: pd.DataFrame, grid: ChunkGrid) -> dict[int, int]:
    """chunk id -> rows of ``frame`` in it, on ``grid``."""
    out: dict[int, int] = {}
    for ts in frame["ts"]:
        cid = grid.chunk_of(ts.to_pydatetime())
        out[cid] = out.get(cid, 0) + 1
    return out


def in_interval(frame: pd.DataFrame, grid: ChunkGrid, chunk_id: int) -> bool:
    lo, hi = grid.bounds(chunk_id)
    return all(lo <= pd.Timestamp(ts).to_pydatetime() < hi for ts in frame["ts"])


# -- the implementation is a ChunkStore ----------------------------------------------------


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=lambda i: i.name)
def test_the_implementation_is_a_chunk_store_implementing_every_abstract_member(impl):
    assert issubclass(impl.cls, ChunkStore)
    assert not inspect.isabstract(impl.cls), f"{impl.name} leaves {sorted(impl.cls.__abstractmethods__)} abstract"
    assert ChunkStore.__abstractmethods__, "the contract declares abstract members"
    for name in sorted(ChunkStore.__abstractmethods__):
        member = getattr(impl.cls, name)
        assert member is not getattr(ChunkStore, name), f"{impl.name}.{name} is not implemented"
        declared = inspect.signature(getattr(ChunkStore, name)).parameters
        accepted = inspect.signature(member).parameters
        for param in declared:
            assert param in accepted, f"{impl.name}.{name} does not accept {param!r} as the contract declares"


def test_an_opened_store_is_a_chunk_store_with_a_default_grid(chunk_store):
    assert isinstance(chunk_store.store, ChunkStore)
    assert isinstance(chunk_store.store.grid, ChunkGrid)


# -- streams ---------------------------------------------------------------------------------


def test_stream_returns_the_registered_spec(chunk_store):
    spec = chunk_store.store.stream("metrics")
    assert (spec.name, spec.ts_col) == ("metrics", "ts")
    assert list(spec.columns) == ["host", "v", "n"]  # schema order


def test_streams_lists_every_registered_stream(chunk_store):
    assert sorted(s.name for s in chunk_store.store.streams()) == ["alerts", "logs", "metrics"]


UNKNOWN_STREAM_CALLS = {
    "stream": lambda s: s.stream("nope"),
    "chunks": lambda s: s.chunks("nope"),
    "chunk_ids": lambda s: s.chunk_ids(["metrics", "nope"]),
    "grid_of": lambda s: s.grid_of("nope"),
    "grid_for": lambda s: s.grid_for(["metrics", "nope"]),
    "copy_reads": lambda s: s.copy_reads([Read("nope", [("n", "e.n::text")])], 0, ["metrics"]),
}
#: methods the class contract exempts: a stream whose interval is not fixed yet gets the default grid
DEFAULT_GRID_CALLS = {"grid_of", "grid_for"}


@pytest.mark.parametrize("method", sorted(set(UNKNOWN_STREAM_CALLS) - DEFAULT_GRID_CALLS))
def test_an_unregistered_stream_raises_unknown_stream_naming_it(chunk_store, method):
    with pytest.raises(UnknownStream, match="nope") as info:
        UNKNOWN_STREAM_CALLS[method](chunk_store.store)
    assert isinstance(info.value, LookupError)


def test_a_stream_without_a_fixed_interval_gets_the_default_grid(chunk_store):
    store = chunk_store.store
    assert store.grid_of("nope") == store.grid
    assert store.grid_for(["nope"]) == store.grid


# -- chunks, grids and task ids --------------------------------------------------------------


def test_chunks_of_a_stream_come_newest_first_with_their_intervals_and_rows(chunk_store):
    store = chunk_store.store
    for name, frame in chunk_store.frames.items():
        grid = store.grid_of(name)
        infos = store.chunks(name)
        assert all(isinstance(c, ChunkInfo) and c.stream == name for c in infos)
        ids = [c.chunk_id for c in infos]
        assert ids == sorted(set(ids), reverse=True), f"{name}: not distinct and newest first"
        assert {c.chunk_id: c.rows for c in infos} == expected_chunks(frame, grid)
        for c in infos:
            assert (c.start, c.end) == grid.bounds(c.chunk_id)


def test_chunks_of_every_stream_are_newest_first_then_by_stream_name(chunk_store):
    every = chunk_store.store.chunks()
    assert {c.stream for c in every} == {"metrics", "logs", "alerts"}
    same_grid = [(c.chunk_id, c.stream) for c in every if c.stream in ("metrics", "logs")]
    assert same_grid == sorted(same_grid, key=lambda k: (-k[0], k[1]))


def test_chunks_filter_by_tier(chunk_store):
    store = chunk_store.store
    every = store.chunks()
    assert len({c.tier for c in every}) > 1, "the fixture should leave chunks in several tiers"
    for tier in Tier:
        assert store.chunks(tier=tier) == [c for c in every if c.tier == tier]
        assert store.chunks("metrics", tier) == [c for c in every if c.tier == tier and c.stream == "metrics"]


def test_grids_are_each_streams_own_and_a_query_runs_on_the_coarsest(chunk_store):
    store = chunk_store.store
    assert store.grid_of("metrics").span == HOUR
    assert store.grid_of("alerts").span == 4 * HOUR
    assert store.grid_for(["metrics"]) == store.grid_of("metrics")
    assert store.grid_for(["metrics", "alerts"]).span == 4 * HOUR
    assert store.grid_for(["alerts", "logs", "metrics"]).span == 4 * HOUR


@pytest.mark.parametrize("streams", [["metrics"], ["logs"], ["metrics", "logs"], ["metrics", "alerts"]])
def test_chunk_ids_are_the_distinct_task_intervals_over_existing_chunks_newest_first(chunk_store, streams):
    store = chunk_store.store
    ids = store.chunk_ids(streams)
    assert ids == sorted(set(ids), reverse=True)
    task = store.grid_for(streams)
    expected = set()
    for name in streams:
        for c in store.chunks(name):
            expected.update(range(task.chunk_of(c.start), task.chunk_of(c.end - timedelta(microseconds=1)) + 1))
    assert set(ids) == expected


def test_another_store_sees_what_one_commits(chunk_store):
    other = chunk_store.opened.reopen()
    before = other.chunk_ids(["metrics"])  # read first, so nothing it holds may hide the new chunk
    assert [c.chunk_id for c in other.chunks("metrics")] == [c.chunk_id for c in chunk_store.store.chunks("metrics")]
    late = rows(2, start=T0 + 30 * HOUR, first=1000)
    chunk_store.opened.write("metrics", 1, late)
    new = other.grid_of("metrics").chunk_of(late["ts"][0].to_pydatetime())
    assert new not in before
    assert other.chunk_ids(["metrics"])[0] == new
    assert other.chunks("metrics")[0].chunk_id == new


# -- prepare ---------------------------------------------------------------------------------


def test_prepare_describes_the_streams_and_placeholders(chunk_store):
    q = chunk_store.store.prepare(
        "SELECT m.n, a.host FROM metrics m JOIN alerts a ON a.n = m.n WHERE m.host = :host AND m.v > :v "
        "AND a.host <> :host")
    assert isinstance(q, HistoryQuery)
    assert set(q.streams) == {"metrics", "alerts"} and len(q.streams) == 2
    assert set(q.params) == {"host", "v"} and len(q.params) == 2


@pytest.mark.parametrize(("sql", "named"), [
    ("DELETE FROM metrics", "DELETE"),
    ("UPDATE metrics SET v = 0", "UPDATE"),
    ("INSERT INTO metrics (ts) VALUES (now())", "INSERT"),
    ("DROP TABLE metrics", "DROP"),
    ("SELECT n FROM metrics; SELECT n FROM logs", "statement"),
    ("SELECT n FROM metrics; DELETE FROM metrics", "statement"),
    ("WITH gone AS (DELETE FROM metrics RETURNING n) SELECT n FROM gone", "DELETE"),
    ("SELECT * FROM secrets", "secrets"),
])
def test_prepare_refuses_anything_but_one_read_only_select_over_registered_streams(chunk_store, sql, named):
    with pytest.raises(UnsafeQuery, match=named) as info:
        chunk_store.store.prepare(sql)
    assert isinstance(info.value, ValueError)
    store = chunk_store.store
    count = store.prepare("SELECT count(*) AS n FROM metrics")
    left = sum(int(store.run_history_query(count, {}, cid)["n"].iloc[0]) for cid in store.chunk_ids(["metrics"]))
    assert left == len(chunk_store.frames["metrics"]), "a refused template ran"


def test_prepare_never_runs_the_template(chunk_store):
    started = time.monotonic()
    chunk_store.store.prepare("SELECT pg_sleep(30), n FROM metrics")
    chunk_store.store.prepare("SELECT 1 / 0 AS boom FROM metrics")  # would fail if it ran
    assert time.monotonic() - started < 5


# -- run_history_query -----------------------------------------------------------------------


@pytest.mark.parametrize("streams", [["metrics"], ["alerts"]])
def test_each_task_interval_reads_only_its_rows_and_together_they_read_each_row_once(chunk_store, streams):
    store = chunk_store.store
    name = streams[0]
    q = store.prepare(f"SELECT n, ts FROM {name}")
    grid = store.grid_for(streams)
    seen = []
    for cid in store.chunk_ids(streams):
        frame = store.run_history_query(q, {}, cid)
        assert in_interval(frame, grid, cid), f"chunk {cid} returned rows of another interval"
        seen.extend(frame["n"])
    assert sorted(seen) == sorted(chunk_store.frames[name]["n"])


def test_a_join_runs_per_interval_of_the_coarsest_grid(chunk_store):
    store = chunk_store.store
    q = store.prepare("SELECT m.n, m.ts FROM metrics m JOIN alerts a ON a.host = m.host")
    grid = store.grid_for(q.streams)
    assert grid.span == 4 * HOUR
    m, a = chunk_store.frames["metrics"], chunk_store.frames["alerts"]
    expected = 0
    for cid in store.chunk_ids(q.streams):
        frame = store.run_history_query(q, {}, cid)
        assert in_interval(frame, grid, cid)
        lo, hi = grid.bounds(cid)
        mi, ai = m[(m.ts >= lo) & (m.ts < hi)], a[(a.ts >= lo) & (a.ts < hi)]
        want = len(mi.merge(ai, on="host"))
        assert len(frame) == want, f"task {cid}: the join saw rows of another interval"
        expected += want
    assert expected > 0


def test_an_interval_with_no_rows_gives_an_empty_frame_with_the_querys_columns(chunk_store):
    store = chunk_store.store
    q = store.prepare("SELECT n, host AS who FROM metrics WHERE v >= :v")
    far = store.chunk_ids(["metrics"])[0] + 1000
    frame = store.run_history_query(q, {"v": 0}, far)
    assert frame.empty
    assert list(frame.columns) == ["n", "who"]


def test_a_parameter_value_holding_sql_is_data(chunk_store):
    store = chunk_store.store
    q = store.prepare("SELECT n, host FROM alerts WHERE host = :host")
    hits = pd.concat([store.run_history_query(q, {"host": EVIL}, cid) for cid in store.chunk_ids(["alerts"])])
    assert hits["host"].tolist() == [EVIL]  # matched as a literal, the OR did not widen it
    miss = store.prepare("SELECT n FROM metrics WHERE host = :host")
    for cid in store.chunk_ids(["metrics"]):
        assert store.run_history_query(miss, {"host": "x' OR '1'='1"}, cid).empty
    assert sum(c.rows for c in store.chunks("metrics")) == len(chunk_store.frames["metrics"])


def test_a_missing_parameter_raises_missing_parameter_naming_it(chunk_store):
    store = chunk_store.store
    q = store.prepare("SELECT n FROM metrics WHERE host = :host AND n > :floor")
    with pytest.raises(MissingParameter, match="floor"):
        store.run_history_query(q, {"host": "h1"}, store.chunk_ids(["metrics"])[0])


def test_a_history_query_runs_read_only(chunk_store):
    store = chunk_store.store
    q = store.prepare("SELECT current_setting('transaction_read_only') AS ro FROM metrics LIMIT 1")
    cid = store.chunk_ids(["metrics"])[-1]
    assert store.run_history_query(q, {}, cid)["ro"].tolist() == ["on"]
    locking = "SELECT n FROM metrics FOR UPDATE"  # a row lock is a write: refused one way or the other
    with pytest.raises((UnsafeQuery, HistoryQueryFailed)):
        store.run_history_query(store.prepare(locking), {}, cid)


def test_timeout_ms_is_enforced(chunk_store):
    store = chunk_store.store
    q = store.prepare("SELECT pg_sleep(10), n FROM metrics LIMIT 1")
    started = time.monotonic()
    with pytest.raises(HistoryQueryTimeout) as info:
        store.run_history_query(q, {}, store.chunk_ids(["metrics"])[-1], timeout_ms=200)
    assert isinstance(info.value, TimeoutError)
    assert time.monotonic() - started < 5


def test_without_timeout_ms_the_stores_statement_timeout_is_enforced(chunk_store):
    store = chunk_store.store
    q = store.prepare("SELECT pg_sleep(10), n FROM metrics LIMIT 1")
    started = time.monotonic()
    with pytest.raises(HistoryQueryTimeout):
        store.run_history_query(q, {}, store.chunk_ids(["metrics"])[-1])
    assert STORE_TIMEOUT_MS / 1000 - 0.2 <= time.monotonic() - started < 8


def test_a_cancelled_connection_raises_history_query_cancelled(chunk_store):
    store = chunk_store.store
    q = store.prepare("SELECT pg_sleep(10), n FROM metrics LIMIT 1")
    conn = store.connect()
    try:
        timer = threading.Timer(0.3, conn.cancel)
        timer.start()
        with pytest.raises(HistoryQueryCancelled):
            store.run_history_query(q, {}, store.chunk_ids(["metrics"])[-1], conn=conn, timeout_ms=8000)
        timer.join()
    finally:
        conn.close()


def test_a_database_refusal_raises_history_query_failed_with_its_message(chunk_store):
    store = chunk_store.store
    q = store.prepare("SELECT 1 / (n - n) AS boom FROM metrics")
    with pytest.raises(HistoryQueryFailed, match="division by zero"):
        store.run_history_query(q, {}, store.chunk_ids(["metrics"])[-1])


def test_a_connection_from_connect_runs_history_queries(chunk_store):
    store = chunk_store.store
    q = store.prepare("SELECT n FROM metrics")
    first, second = store.connect(), store.connect()
    try:
        assert first is not second
        cid = store.chunk_ids(["metrics"])[-1]
        assert store.run_history_query(q, {}, cid, conn=first).equals(store.run_history_query(q, {}, cid, conn=second))
        assert store.run_history_query(q, {}, cid, conn=first).equals(store.run_history_query(q, {}, cid))
    finally:
        first.close()
        second.close()


def test_history_queries_from_several_threads_at_once_agree_with_one_at_a_time(chunk_store):
    store = chunk_store.store
    q = store.prepare("SELECT n, host FROM metrics WHERE v >= :v ORDER BY n")
    ids = store.chunk_ids(["metrics"])
    alone = [store.run_history_query(q, {"v": 1}, cid) for cid in ids]
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda cid: store.run_history_query(q, {"v": 1}, cid), ids * 2))
    for i, frame in enumerate(together):
        assert frame.equals(alone[i % len(ids)])


# -- copy_reads ------------------------------------------------------------------------------


def test_copy_reads_gives_one_table_per_read_restricted_to_the_task_interval(chunk_store):
    store = chunk_store.store
    reads = [Read("metrics", [("n", "e.n::text"), ("host", "e.host::text")]),
             Read("alerts", [("host", "e.host::text")], with_ts=False, coded=True)]
    grid = store.grid_for(["metrics", "alerts"])
    seen = []
    for cid in store.chunk_ids(["metrics", "alerts"]):
        lo, hi = grid.bounds(cid)
        metrics, alerts = store.copy_reads(reads, cid, ["metrics", "alerts"])
        assert isinstance(metrics, pa.Table) and isinstance(alerts, pa.Table)
        assert metrics.column_names == ["_ts_us", "n", "host"]
        assert alerts.column_names == ["host"]
        assert pa.types.is_dictionary(alerts.schema.field("host").type)
        lo_us, hi_us = ((t - EPOCH) // timedelta(microseconds=1) for t in (lo, hi))
        assert all(lo_us <= us < hi_us for us in metrics.column("_ts_us").to_pylist())
        m, a = chunk_store.frames["metrics"], chunk_store.frames["alerts"]
        assert sorted(metrics.column("n").to_pylist()) == sorted(str(n) for n in m.n[(m.ts >= lo) & (m.ts < hi)])
        assert sorted(alerts.column("host").to_pylist()) == sorted(a.host[(a.ts >= lo) & (a.ts < hi)])
        seen.extend(metrics.column("n").to_pylist())
    assert sorted(seen, key=int) == [str(n) for n in sorted(chunk_store.frames["metrics"]["n"])]


def test_copy_reads_of_an_interval_with_no_rows_gives_empty_tables(chunk_store):
    store = chunk_store.store
    far = store.chunk_ids(["metrics"])[0] + 1000
    (table,) = store.copy_reads([Read("metrics", [("n", "e.n::text")])], far, ["metrics"], conn=None)
    assert table.num_rows == 0
    assert table.column_names == ["_ts_us", "n"]


def test_copy_reads_enforces_timeout_ms_and_runs_on_a_given_connection(chunk_store):
    store = chunk_store.store
    cid = store.chunk_ids(["metrics"])[-1]
    conn = store.connect()
    try:
        (table,) = store.copy_reads([Read("metrics", [("n", "e.n::text")])], cid, ["metrics"], conn=conn)
        assert table.num_rows > 0
        sleepy = [Read("metrics", [("s", "pg_sleep(10)::text")])]
        started = time.monotonic()
        with pytest.raises(HistoryQueryTimeout):
            store.copy_reads(sleepy, cid, ["metrics"], conn=conn, timeout_ms=200)
        assert time.monotonic() - started < 5
        started = time.monotonic()
        with pytest.raises(HistoryQueryTimeout):  # the store's statement timeout
            store.copy_reads(sleepy, cid, ["metrics"], conn=conn)
        assert time.monotonic() - started < 8
        (again,) = store.copy_reads([Read("metrics", [("n", "e.n::text")])], cid, ["metrics"], conn=conn)
        assert again.equals(table)
    finally:
        conn.close()


def test_copy_reads_is_read_only(chunk_store):
    store = chunk_store.store
    cid = store.chunk_ids(["metrics"])[-1]
    (table,) = store.copy_reads([Read("metrics", [("ro", "current_setting('transaction_read_only')")])], cid,
                                ["metrics"])
    assert set(table.column("ro").to_pylist()) == {"on"}


# -- retry and index_store -------------------------------------------------------------------


def test_retry_returns_the_result_and_lets_other_errors_through_at_once(chunk_store):
    store = chunk_store.store
    assert store.retry(lambda: 42, "answer") == 42
    calls = []

    def bad():
        calls.append(1)
        raise ValueError("not an outage")

    with pytest.raises(ValueError, match="not an outage"):
        store.retry(bad, "bad", on_lost=lambda: pytest.fail("on_lost called for an error that is no outage"))
    assert calls == [1]


def test_retry_runs_again_after_a_lost_connection_calling_on_lost_first(chunk_store):
    store = chunk_store.store
    q = store.prepare("SELECT n FROM metrics")
    cid = store.chunk_ids(["metrics"])[-1]
    want = store.retry(lambda: store.run_history_query(q, {}, cid), "warm-up")
    held = {"conn": store.connect()}
    held["conn"].autocommit = True
    with held["conn"].cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        pid = cur.fetchone()[0]
    killer = store.connect()
    lost = []

    def on_lost():
        lost.append(held["conn"])
        held["conn"] = store.connect()

    try:
        killer.autocommit = True
        with killer.cursor() as cur:
            cur.execute("SELECT pg_terminate_backend(%s)", (pid,))
        time.sleep(0.2)
        got = store.retry(lambda: store.run_history_query(q, {}, cid, conn=held["conn"]), "query", on_lost=on_lost)
        assert got.equals(want)
        assert lost, "on_lost was not called before the retry"
    finally:
        for c in (killer, held["conn"], *lost):
            c.close()


def test_index_store_persists_per_operator_across_stores(chunk_store):
    store = chunk_store.store
    mine = store.index_store("sim")
    if mine is None:
        pytest.skip("this store keeps no similarity indexes (allowed by the contract)")
    assert isinstance(mine, IndexStore)
    cid = store.chunk_ids(["metrics"])[-1]
    mine.save(cid, ["metrics"], 3, b"blob", ["host"])
    assert chunk_store.opened.reopen().index_store("sim").load(cid) == b"blob"
    assert store.index_store("other").load(cid) is None
