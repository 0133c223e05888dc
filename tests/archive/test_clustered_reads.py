"""Rows clustered by the window key as the executors write them (archive.exec_sink,
archive.contributors): the stream's BRIN index on event time and key, the partition
writer's sort, the per-window reads skipping other keys' pages, and the summaries kept
up in the background (archive.brin_summary)."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from archive import Database, StreamSpec, contributors, exec_sink, exec_udf
from archive.abc import Tier
from archive.brin_summary import Summarizer, summarize
from archive.contributors import ensure_time_index, time_index, time_index_name, window_rows
from archive.exec_sink import PartitionJob, write_partition
from archive.ids import source_ids
from archive.names import partition_name
from tests.archive.arch_helpers import T0, make_archiver, metrics_spec, rows, table_rows

pytestmark = pytest.mark.postgres
HOUR_US = 3_600_000_000


def _brin_indexes(archiver, stream: str = "metrics") -> dict[str, str]:
    """The BRIN indexes of the stream's table: name -> definition."""
    with archiver.db.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT c.relname, pg_get_indexdef(c.oid) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                    "WHERE i.indrelid = to_regclass(%s) AND pg_get_indexdef(c.oid) ILIKE '%%USING brin%%'",
                    (f'"{stream}"',))
        return dict(cur.fetchall())


def _partition(archiver, frame: pd.DataFrame, stream: str = "metrics") -> pa.Table:
    """``frame`` as Spark hands a partition over: ``_sid``, event time (us, UTC), payload."""
    spec = archiver.stream(stream)
    frame = frame.copy()
    frame.insert(0, "_sid", source_ids(stream, frame, spec.id_columns))
    table = pa.Table.from_pandas(frame, preserve_index=False)
    return table.set_column(1, "ts", table.column("ts").cast(pa.timestamp("us", "UTC")))


@pytest.fixture
def writer(archiver):
    """Write a partition of ``frame`` into ``stream`` as an executor does, with the
    stream's cluster keys as the driver hands them on (the batch property)."""
    def write(frame: pd.DataFrame, batch: int, part: int = 0, stream: str = "metrics") -> None:
        archiver.fix_interval(stream, 0, timedelta(0))
        prop = json.loads(exec_udf.batch_property(batch, HOUR_US, None, cluster=archiver.cluster_keys(stream)))
        job = PartitionJob(archiver.db.dsn, archiver.db.schema, archiver.stream(stream), batch, HOUR_US,
                           cluster=tuple(prop["cluster"]))
        assert write_partition(job, part, _partition(archiver, frame, stream))[3] == []
        archiver.commit_parts(stream, batch)

    yield write
    exec_sink.drop_worker_connection(archiver.db.dsn, archiver.db.schema)


def test_the_first_keys_asked_for_cluster_the_stream_and_its_one_brin_index(archiver, pg):
    assert ensure_time_index(archiver, "metrics") == ()
    assert list(_brin_indexes(archiver)) == ["metrics__ts_brin"]
    assert ensure_time_index(archiver, "metrics", ["host"]) == ("host",)
    assert archiver.cluster_keys("metrics") == ("host",)
    indexes = _brin_indexes(archiver)
    assert list(indexes) == ["metrics__ts_host_brin"]  # the plain one went: this one serves its reads
    assert "(ts, host)" in indexes["metrics__ts_host_brin"]
    assert ensure_time_index(archiver, "metrics", ["n"]) == ("host",)  # rows have one order: the first wins
    assert ensure_time_index(archiver, "metrics") == ("host",)
    assert list(_brin_indexes(archiver)) == ["metrics__ts_host_brin"]
    with pytest.raises(KeyError, match="nope"):
        ensure_time_index(archiver, "metrics", ["nope"])
    archiver.register_stream(StreamSpec.build("flags", "ts", {"ok": "boolean", "host": "text"}))
    assert ensure_time_index(archiver, "flags", ["ok", "host"]) == ("host",)  # BRIN has no boolean summary
    assert list(_brin_indexes(archiver, "flags")) == ["flags__ts_host_brin"]


def test_a_process_with_other_keys_keeps_the_index_a_live_process_reads_through(archiver, pg):
    """Two processes window one stream by different keys: each keeps the other's index
    while the other lives (each used to drop the other's at start, and the other's
    window reads then scanned whole chunks); once a process is gone, or its claims'
    session is, its index is dropped at the next start, as a redeploy with new keys
    needs. A claim the server lost is taken again by the keep-alive."""
    other = make_archiver(Database(pg.dsn, schema=pg.schema))  # another process: sessions of its own
    both = {"metrics__ts_host_brin", "metrics__ts_n_brin"}
    try:
        assert ensure_time_index(archiver, "metrics", ["host"]) == ("host",)
        assert ensure_time_index(other, "metrics", ["n"]) == ("n",)
        assert set(_brin_indexes(archiver)) == both                    # the first process's index stayed
        assert ensure_time_index(archiver, "metrics", ["host"]) == ("host",)
        assert set(_brin_indexes(archiver)) == both                    # and the second's too
        _archive_rows(archiver)
        got = window_rows(other, "metrics", ["n"], [((3,), T0, T0 + timedelta(hours=3))])
        assert [r[0] for r in got[0]] == table_rows(archiver).query("n == 3")._sid.tolist()

        with archiver.db.connection() as conn, conn.cursor() as cur:  # the server loses the second's claims
            cur.execute("SELECT pg_terminate_backend(%s)", (other.index_claims._conn.get_backend_pid(),))
        assert other.index_claims.keep_alive(every=0) is True and other.index_claims.renewed >= 1
        assert ensure_time_index(archiver, "metrics", ["host"]) == ("host",)
        assert set(_brin_indexes(archiver)) == both                    # claimed again: kept

        other.close()                                                   # the second process stops
        assert ensure_time_index(archiver, "metrics", ["host"]) == ("host",)
        assert set(_brin_indexes(archiver)) == {"metrics__ts_host_brin"}
        archiver.close()                                                # and the first, redeployed with new keys
        fresh = make_archiver(Database(pg.dsn, schema=pg.schema))
        try:
            assert ensure_time_index(fresh, "metrics", ["n"]) == ("n",)
            assert set(_brin_indexes(fresh)) == {"metrics__ts_n_brin"}
        finally:
            fresh.close()
    finally:
        other.close()


def test_an_index_dropped_while_the_server_had_lost_its_claim_is_built_again(archiver, pg):
    """The server loses this process's claims (a restart); before the keep-alive takes
    them again, a process started with other keys finds the index unclaimed and drops
    it. The next background pass renews the claims and builds the index again on the
    stream's table and each present chunk; before, this process's window reads then
    scanned whole chunks until it restarted."""
    other = make_archiver(Database(pg.dsn, schema=pg.schema))  # another process: sessions of its own
    try:
        assert ensure_time_index(archiver, "metrics", ["host"]) == ("host",)
        _archive_rows(archiver)
        with archiver.db.connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT pg_terminate_backend(%s, 10000)", (archiver.index_claims._conn.get_backend_pid(),))
        assert ensure_time_index(other, "metrics", ["n"]) == ("n",)
        assert set(_brin_indexes(archiver)) == {"metrics__ts_n_brin"}  # ours went with the claim
        archiver.index_claims._checked = float("-inf")  # the keep-alive's check is due
        Summarizer(archiver, "metrics", lambda: time_index(archiver, "metrics"), 1).run_once()
        assert archiver.index_claims.renewed == 1
        assert set(_brin_indexes(archiver)) == {"metrics__ts_host_brin", "metrics__ts_n_brin"}
        present = {partition_name("metrics", c.chunk_id) for c in archiver.chunks("metrics", Tier.PRESENT)}
        assert present and _indexed_chunks(archiver, "metrics__ts_host_brin") == present
        assert ensure_time_index(other, "metrics", ["n"]) == ("n",)  # claimed again: the other keeps it
        assert set(_brin_indexes(archiver)) == {"metrics__ts_host_brin", "metrics__ts_n_brin"}
    finally:
        other.close()


def _indexed_chunks(archiver, index: str) -> set[str]:
    """The chunk tables with their own part of the stream's index ``index``."""
    with archiver.db.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT t.relname FROM pg_inherits h JOIN pg_index i ON i.indexrelid = h.inhrelid "
                    "JOIN pg_class t ON t.oid = i.indrelid WHERE h.inhparent = to_regclass(%s)", (f'"{index}"',))
        return {r[0] for r in cur.fetchall()}


def _archive_rows(archiver) -> None:
    for b, frame in enumerate([rows(30, step=timedelta(minutes=3)), rows(5, start=T0 + timedelta(minutes=1), first=40)]):
        archiver.append("metrics", b, frame)


def test_an_executor_writes_each_chunk_sorted_by_the_cluster_keys(archiver, writer):
    frame = rows(60, step=timedelta(minutes=2), hosts=7)  # two hourly chunks, hosts in turn
    writer(frame, 1)  # before any keys were asked for: as it came
    ensure_time_index(archiver, "metrics", ["host"])
    writer(rows(60, step=timedelta(minutes=2), hosts=7, first=60), 2)
    with archiver.db.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT tableoid::regclass::text, _batch, host FROM metrics ORDER BY tableoid, ctid")
        got = cur.fetchall()
    for chunk in {c for c, _, _ in got}:
        first = [h for c, b, h in got if c == chunk and b == 1]
        second = [h for c, b, h in got if c == chunk and b == 2]
        assert first != sorted(first)
        assert second == sorted(second) and len(set(second)) == 7
    assert len(got) == 120  # nothing lost to the sort


def test_a_clustered_read_of_one_key_skips_the_other_keys_pages(archiver, writer, monkeypatch):
    """The same rows, written by four partitions with and without the sort: one key's
    window reads the same rows either way, and several times fewer heap pages clustered."""
    monkeypatch.setattr(contributors, "PAGES_PER_RANGE", 4)  # fine ranges: a small table shows the difference
    n = 40_000
    i = np.arange(n)
    frame = pd.DataFrame({"ts": [T0 + timedelta(milliseconds=int(x)) for x in i * 50], "host": [f"h{x % 100:03d}" for x in i],
                          "v": i / 4, "n": i})
    archiver.register_stream(metrics_spec("plain"))
    ensure_time_index(archiver, "metrics", ["host"])
    ensure_time_index(archiver, "plain")
    for part in range(4):
        piece = frame.iloc[part * n // 4:(part + 1) * n // 4]
        writer(piece, 1, part, "metrics")
        writer(piece, 1, part, "plain")
    lo, hi = T0, T0 + timedelta(hours=1)
    windows = [(("h042",), lo, hi), (("h007",), lo + timedelta(minutes=10), hi)]
    got = {s: window_rows(archiver, s, ["host"], windows) for s in ("metrics", "plain")}
    assert [len(w) for w in got["metrics"]] == [400, 280]  # 100 keys over 33 min 20 s
    assert [sorted(t for _, t, _ in w) for w in got["metrics"]] == [sorted(t for _, t, _ in w) for w in got["plain"]]

    def heap_pages(stream: str) -> int:
        with archiver.db.connection() as conn, conn.cursor() as cur:
            cur.execute("SET enable_seqscan = off")
            cur.execute(f'EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT _sid FROM "{stream}" '
                        "WHERE ts >= %s AND ts < %s AND host = %s", (lo, hi, "h042"))
            plan = cur.fetchone()[0][0]["Plan"]
            assert "Bitmap Heap Scan" in json.dumps(plan)
            return plan["Shared Hit Blocks"] + plan["Shared Read Blocks"]

    clustered, plain = heap_pages("metrics"), heap_pages("plain")
    assert clustered * 5 < plain, (clustered, plain)


def test_a_summarizer_keeps_up_with_new_pages_in_the_background(archiver):
    ensure_time_index(archiver, "metrics", ["host"])
    s = Summarizer(archiver, "metrics", lambda: time_index(archiver, "metrics"), 0.05)
    archiver.append("metrics", 0, rows(20_000, step=timedelta(milliseconds=100)))  # several full 32-page ranges
    assert s.run_once() > 0
    assert s.run_once() == 0  # each range once
    before = s.stats["ranges"]
    s.start()
    try:
        archiver.append("metrics", 1, rows(20_000, start=T0 + timedelta(hours=1), step=timedelta(milliseconds=100)))
        target = s.stats["passes"] + 2  # a whole pass begun after the append returned
        deadline = time.monotonic() + 30
        while s.stats["passes"] < target and time.monotonic() < deadline:
            time.sleep(0.05)
        assert s.stats["ranges"] > before and s.stats["errors"] == 0
        assert s.now(T0, T0 + timedelta(hours=2)) == 0  # nothing left for a reader to summarize
    finally:
        s.stop()
    assert s._thread is None
    passes = s.stats["passes"]
    time.sleep(0.2)
    assert s.stats["passes"] == passes  # stopped


def test_summarize_caches_each_chunks_index_name_and_forgets_a_dropped_one(archiver):
    ensure_time_index(archiver, "metrics", ["host"])
    archiver.append("metrics", 0, rows(20_000, step=timedelta(milliseconds=400)))  # more than one chunk
    index = time_index(archiver, "metrics")
    assert index == time_index_name("metrics", ["host"])
    ids = [c.chunk_id for c in archiver.chunks("metrics")]
    assert len(ids) > 1
    names: dict = {}
    assert summarize(archiver, "metrics", [*ids, max(ids) + 5], index, names) > 0  # one chunk not created yet
    assert set(names) == {(index, partition_name("metrics", c)) for c in ids}
    part = partition_name("metrics", ids[0])
    real = names[(index, part)]
    names[(index, part)] = "no_such_index"  # as if the chunk was dropped after it was cached
    summarize(archiver, "metrics", ids, index, names)
    assert (index, part) not in names
    summarize(archiver, "metrics", ids, index, names)
    assert names[(index, part)] == real


def test_the_index_is_built_on_present_chunks_only_and_comes_with_each_new_chunk(archiver):
    """A first deploy on an archive does not read its past chunks (module doc of
    ensure_time_index): only present chunks get the index, and later ones have it."""
    archiver.append("metrics", 0, rows(60, step=timedelta(minutes=10)))  # 10 hours
    archiver.demote(T0 + timedelta(hours=6))
    present = {c.chunk_id for c in archiver.chunks("metrics", Tier.PRESENT)}
    past = {c.chunk_id for c in archiver.chunks("metrics")} - present
    assert present and past

    def indexed() -> set[int]:
        index = time_index(archiver, "metrics")
        names = {}
        summarize(archiver, "metrics", [c.chunk_id for c in archiver.chunks("metrics")], index, names)
        return {c.chunk_id for c in archiver.chunks("metrics") if (index, partition_name("metrics", c.chunk_id)) in names}

    ensure_time_index(archiver, "metrics", ["host"])
    assert indexed() == present
    ensure_time_index(archiver, "metrics", ["host"])  # idempotent: each attached once
    assert indexed() == present
    archiver.append("metrics", 1, rows(12, start=T0 + timedelta(hours=12), step=timedelta(minutes=10)))
    new = {c.chunk_id for c in archiver.chunks("metrics")} - present - past
    assert new and indexed() == present | new
    # a window over past and present chunks reads the same rows either way
    all_rows = table_rows(archiver)
    lo, hi = T0 + timedelta(hours=4), T0 + timedelta(hours=13)
    got = window_rows(archiver, "metrics", ["host"], [(("h1",), lo, hi)])[0]
    want = all_rows[(all_rows.host == "h1") & (all_rows.ts >= lo) & (all_rows.ts < hi)]
    assert sorted(r[0] for r in got) == sorted(want._sid) and len(got) > 0


def test_a_history_query_pinning_a_cluster_key_is_read_through_the_index(archiver, writer, monkeypatch):
    """A present chunk has no statistics, and PostgreSQL costs a BRIN scan by a column's
    global order, which a chunk of sorted runs lacks: left alone it scans the whole chunk
    for one key (archive.history_plan). The history-query of one key is planned through
    the index, present or recent, and returns the same rows; a template that does not
    pin the key, or a stream not clustered, is left to the planner."""
    from archive import history, history_plan

    monkeypatch.setattr(contributors, "PAGES_PER_RANGE", 4)
    n = 40_000
    i = np.arange(n)
    frame = pd.DataFrame({"ts": [T0 + timedelta(milliseconds=int(x)) for x in i * 80], "host": [f"h{x % 100:03d}" for x in i],
                          "v": i / 4, "n": i})
    one = archiver.prepare("SELECT count(*) AS c, sum(h.n) AS s FROM metrics h WHERE h.host = :host AND h.v >= 0")
    assert history_plan.plan_settings(archiver, one.streams, one.template) == ""  # not clustered yet
    ensure_time_index(archiver, "metrics", ["host"])
    for part in range(4):
        writer(frame.iloc[part * n // 4:(part + 1) * n // 4], 1, part)
    whole = archiver.prepare("SELECT count(*) AS c FROM metrics h WHERE h.host = :host OR h.v < 0")
    chunk = archiver.grid_for(("metrics",)).chunk_of(T0)
    lo, hi = archiver.grid_for(("metrics",)).bounds(chunk)

    def plan(query, prefix: str) -> str:
        with archiver.db.connection() as conn, conn.cursor() as cur:
            cur.execute("BEGIN")
            if prefix:
                cur.execute(prefix)
            cur.execute("EXPLAIN (FORMAT JSON) " + history.render(query.template, (("metrics", "ts"),)),
                        {"host": "h042", "__lo": lo, "__hi": hi})
            out = json.dumps(cur.fetchone()[0])
            cur.execute("ROLLBACK")
            return out

    prefix = history_plan.plan_settings(archiver, one.streams, one.template)
    assert "enable_seqscan = off" in prefix
    assert "Seq Scan" in plan(one, "") and "Index Scan" not in plan(one, "")  # what the planner picks alone
    assert "Bitmap Index Scan" in plan(one, prefix) and "_ts_host_" in plan(one, prefix)  # the chunk's BRIN
    assert history_plan.plan_settings(archiver, whole.streams, whole.template) == ""  # not pinned: an OR
    got = archiver.run_history_query(one, {"host": "h042"}, chunk).to_dict("records")
    assert got == [{"c": 400, "s": int(i[i % 100 == 42].sum())}]

    archiver.demote(T0 + timedelta(hours=1))  # recent: the stream's B-tree on host too
    assert "Index Scan" in plan(one, prefix)
    assert archiver.run_history_query(one, {"host": "h042"}, chunk).to_dict("records") == got
    archiver.register_stream(metrics_spec("plain"))
    other = archiver.prepare("SELECT count(*) AS c FROM plain WHERE host = :host")
    assert history_plan.plan_settings(archiver, other.streams, other.template) == ""


def test_an_append_writes_each_chunk_sorted_by_the_cluster_keys(archiver):
    """The driver's append (bulk history, derived streams) keeps the executors' order:
    a pinned history-query reads its chunks through the BRIN index (archive.history_plan)."""
    frame = rows(60, step=timedelta(minutes=2), hosts=7)
    archiver.append("metrics", 1, frame)  # not clustered: as it came
    ensure_time_index(archiver, "metrics", ["host"])
    archiver.append("metrics", 2, rows(60, step=timedelta(minutes=2), hosts=7, first=60))
    with archiver.db.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT tableoid::regclass::text, _batch, host FROM metrics ORDER BY tableoid, ctid")
        got = cur.fetchall()
    for chunk in {c for c, _, _ in got}:
        assert [h for c, b, h in got if c == chunk and b == 1] != sorted(h for c, b, h in got if c == chunk and b == 1)
        second = [h for c, b, h in got if c == chunk and b == 2]
        assert second == sorted(second) and len(set(second)) == 7
    assert sorted(table_rows(archiver).n) == list(range(120))
