"""History-query safety and correctness (DESIGN.md §6 "History-queries"; M 4.3-4.4):
one read-only SELECT, bound parameters only, a statement timeout, and the chunk's
interval applied by the Archiver."""

from __future__ import annotations

import threading
from datetime import timedelta

import pandas as pd
import pytest

from archive import HistoryQueryCancelled, HistoryQueryTimeout, MissingParameter, UnsafeQuery
from archive.errors import HistoryQueryFailed
from tests.archive.arch_helpers import T0, rows

pytestmark = pytest.mark.postgres


@pytest.fixture
def loaded(archiver):
    """300 rows over 35 hours (chunks of one hour), half of the chunks demoted."""
    archiver.append("metrics", 0, rows(300, step=timedelta(minutes=7), hosts=4))
    archiver.demote(T0 + timedelta(hours=18))
    archiver.age()
    return archiver


@pytest.mark.parametrize(("sql", "why"), [
    ("DELETE FROM metrics", "single SELECT, got DELETE"),
    ("UPDATE metrics SET v = 0", "single SELECT, got UPDATE"),
    ("SELECT 1 FROM metrics; SELECT 2 FROM metrics", "single statement, got 2"),
    ("SELECT * FROM metrics; DROP TABLE metrics", "single statement, got 2"),
    ("SELECT * INTO stolen FROM metrics", "may only read; it contains INTO"),
    ("SELECT set_config('statement_timeout', '0', true) FROM metrics", "may not call set_config()"),
    ("SELECT pg_terminate_backend(1) FROM metrics", "may not call pg_terminate_backend()"),
    ("SELECT * FROM secrets", "unknown stream 'secrets'"),
    ("SELECT * FROM pg_catalog.pg_authid", "schema-qualified"),
    ("SELECT * FROM public.metrics", "schema-qualified"),
    ("SELECT * FROM metrics WHERE host IN (SELECT usename FROM pg_user)", "unknown stream 'pg_user'"),
    ("WITH x AS (DELETE FROM metrics RETURNING *) SELECT * FROM x", "DELETE"),
    ("WITH metrics AS (SELECT * FROM metrics) SELECT * FROM metrics", "CTE after the archived stream 'metrics'"),
    ("WITH metrics AS (SELECT * FROM metrics) SELECT * FROM metrics JOIN alerts USING (n)", "CTE after"),
    ("SELECT 1", "reads no archived stream"),
    ("", "empty"),
    ("SELEC * FROM metrics", ""),
    ("SELECT * FROM metrics WHERE n = ?", "positional placeholder"),
    ("SELECT * FROM metrics WHERE n = %s", "positional placeholder"),
    ("SELECT * FROM metrics WHERE n = $1", "positional parameter"),
])
def test_unsafe_templates_are_rejected_with_a_clear_error(archiver, sql, why):
    from tests.archive.arch_helpers import metrics_spec

    archiver.register_stream(metrics_spec("alerts", indexes=[]))
    with pytest.raises(UnsafeQuery) as info:
        archiver.prepare(sql)
    assert why in str(info.value)


def test_injection_attempt_in_a_parameter_is_just_a_value(loaded):
    q = loaded.prepare("SELECT n FROM metrics WHERE host = :host")
    evil = "'; DROP TABLE metrics; --"
    for cid in loaded.chunk_ids(["metrics"]):
        assert loaded.run_history_query(q, {"host": evil}, cid).empty
    with loaded.db.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM metrics")
        assert cur.fetchone()[0] == 300


def test_missing_parameter_is_named(loaded):
    q = loaded.prepare("SELECT n FROM metrics WHERE host = :host AND n > :floor")
    with pytest.raises(MissingParameter, match=":floor"):
        loaded.run_history_query(q, {"host": "h1"}, loaded.chunk_ids(["metrics"])[0])


def test_timeout_raises_history_query_timeout(loaded):
    q = loaded.prepare("SELECT pg_sleep(2), n FROM metrics")
    cid = loaded.grid.chunk_of(T0)
    with pytest.raises(HistoryQueryTimeout, match="exceeded 100 ms"):
        loaded.run_history_query(q, {}, cid, timeout_ms=100)
    # the connection is usable afterwards, and a later query is not limited by it
    conn = loaded.connect()
    try:
        with pytest.raises(HistoryQueryTimeout):
            loaded.run_history_query(q, {}, cid, conn=conn, timeout_ms=50)
        fast = loaded.prepare("SELECT count(*) AS c FROM metrics")
        assert loaded.run_history_query(fast, {}, cid, conn=conn)["c"].item() > 0
    finally:
        conn.close()


def test_cancel_from_another_thread_raises_cancelled(loaded):
    q = loaded.prepare("SELECT pg_sleep(5), n FROM metrics")
    conn = loaded.connect()
    try:
        timer = threading.Timer(0.3, conn.cancel)
        timer.start()
        with pytest.raises(HistoryQueryCancelled):
            loaded.run_history_query(q, {}, loaded.grid.chunk_of(T0), conn=conn)
        timer.join()
    finally:
        conn.close()


def test_only_the_chunk_interval_is_read(loaded):
    q = loaded.prepare("SELECT ts, n FROM metrics m WHERE m.n >= :lo")
    for cid in loaded.chunk_ids(["metrics"]):
        start, end = loaded.grid.bounds(cid)
        got = loaded.run_history_query(q, {"lo": 0}, cid)
        assert not got.empty
        assert all(start <= t < end for t in got["ts"])
    # subqueries and joins are sliced too
    q2 = loaded.prepare("SELECT a.n FROM metrics a JOIN metrics b ON a.host = b.host "
                        "WHERE b.n = (SELECT max(n) FROM metrics)")
    cid = loaded.grid.chunk_of(T0)
    in_chunk = loaded.run_history_query(loaded.prepare("SELECT n, host FROM metrics"), {}, cid)
    top_host = in_chunk.loc[in_chunk["n"].idxmax(), "host"]
    got = loaded.run_history_query(q2, {}, cid)
    assert sorted(got["n"]) == sorted(in_chunk.loc[in_chunk["host"] == top_host, "n"])


def test_results_summed_over_chunks_equal_a_whole_table_query(loaded):
    q = loaded.prepare("SELECT host, count(*) AS c, sum(v) AS s FROM metrics WHERE n % :m = 0 GROUP BY host")
    parts = [loaded.run_history_query(q, {"m": 3}, cid) for cid in loaded.chunk_ids(["metrics"])]
    per_chunk = pd.concat(parts).groupby("host")[["c", "s"]].sum().sort_index()
    with loaded.db.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT host, count(*), sum(v) FROM metrics WHERE n %% %s = 0 GROUP BY host ORDER BY host", (3,))
        whole = pd.DataFrame(cur.fetchall(), columns=["host", "c", "s"]).set_index("host")
    assert per_chunk["c"].tolist() == whole["c"].tolist()
    assert per_chunk["s"].astype(float).tolist() == pytest.approx(whole["s"].astype(float).tolist())
    assert int(whole["c"].sum()) == 100


def test_writes_are_impossible_even_through_a_function(loaded):
    """Defence in depth: a template that passes the parser but calls a writing function
    still cannot write, because it runs in a READ ONLY transaction."""
    with loaded.db.connection() as conn, conn.cursor() as cur:
        cur.execute("CREATE FUNCTION wipe() RETURNS int LANGUAGE sql AS 'DELETE FROM metrics RETURNING 1'")
    q = loaded.prepare("SELECT wipe() FROM metrics")
    with pytest.raises(HistoryQueryFailed, match="read-only"):
        loaded.run_history_query(q, {}, loaded.grid.chunk_of(T0))
    with loaded.db.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM metrics")
        assert cur.fetchone()[0] == 300


def test_a_percent_sign_in_the_template_is_literal(loaded):
    q = loaded.prepare("SELECT n FROM metrics WHERE host LIKE 'h%' AND host = :h AND n % 2 = 0")
    got = loaded.run_history_query(q, {"h": "h2"}, loaded.grid.chunk_of(T0))
    assert not got.empty and all(x % 2 == 0 for x in got["n"])


def test_template_may_join_two_streams_inside_one_chunk(loaded):
    from tests.archive.arch_helpers import metrics_spec

    loaded.register_stream(metrics_spec("alerts", indexes=[]))
    loaded.append("alerts", 0, rows(10, step=timedelta(minutes=30), first=0))
    q = loaded.prepare("SELECT a.n, m.v FROM alerts a JOIN metrics m ON m.n = a.n")
    cid = loaded.grid.chunk_of(T0)
    got = loaded.run_history_query(q, {}, cid)
    # alerts 0 and 1 are inside chunk T0 (0 and 30 min); metrics n=0 and n=1 too (0, 7 min)
    assert sorted(got["n"]) == [0, 1]
    assert loaded.prepare("SELECT * FROM alerts a JOIN metrics m ON m.n = a.n").streams == ("alerts", "metrics")


@pytest.mark.parametrize("workers", [None, 2])
def test_a_history_query_starts_no_parallel_workers_unless_configured(pg, workers):
    """recall.max_concurrent bounds the history's share of the database only if each
    history-query is one server process (archive.history_plan); a machine with cores to
    spare may allow workers."""
    from tests.archive.arch_helpers import make_archiver, metrics_spec

    arch = make_archiver(pg, **({} if workers is None else {"history_parallel_workers": workers}))
    try:
        arch.register_stream(metrics_spec())
        arch.append("metrics", 0, rows(3))
        q = arch.prepare("SELECT current_setting('max_parallel_workers_per_gather') AS w FROM metrics LIMIT 1")
        got = arch.run_history_query(q, {}, arch.grid_for(("metrics",)).chunk_of(T0))
        assert got.w.tolist() == [str(workers or 0)]
    finally:
        arch.close()


def test_pinned_columns_reads_each_reference_of_a_stream():
    from archive.history_plan import pinned_columns

    assert pinned_columns("SELECT * FROM metrics m WHERE m.host = :h AND (m.n = 3 AND m.v > 1)") == {
        "metrics": frozenset({"host", "n"})}
    assert pinned_columns("SELECT * FROM metrics WHERE host IN (SELECT host FROM metrics WHERE n = :n)") == {
        "metrics": frozenset()}  # the outer reference pins nothing
    assert pinned_columns("SELECT * FROM metrics a JOIN metrics b ON a.n = b.n WHERE a.host = :h AND b.host = :h") == {
        "metrics": frozenset({"host"})}
    assert pinned_columns("SELECT * FROM metrics a JOIN metrics b ON a.n = b.n WHERE a.host = :h") == {
        "metrics": frozenset()}
    assert pinned_columns("SELECT * FROM metrics WHERE host = n") == {"metrics": frozenset()}  # not a value
    assert pinned_columns("SELECT * FROM metrics WHERE n = CAST(:n AS bigint) AND :h::text = host") == {
        "metrics": frozenset({"n", "host"})}
    assert pinned_columns("WITH x AS (SELECT * FROM metrics WHERE host = :h) SELECT * FROM x") == {
        "metrics": frozenset({"host"})}
