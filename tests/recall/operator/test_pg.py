"""On a real PostgreSQL: the per-chunk partial SQL, run over each chunk's table and
merged by the Recall operator, gives the one-shot query's result (M 4.3)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from psycopg2.extras import execute_values

from recall.aggregate import RowMerge, to_py
from recall.api import EndReason, Interval
from recall.operator import Recall
from recall.revision_ops import ResultTable
from tests.recall.operator.recall_op_helpers import bound_sql, close, run_pg

pytestmark = pytest.mark.postgres

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CHUNKS = 5
EVENT = {"eid": "ev", "ts": T0 + timedelta(days=CHUNKS), "sid": "a", "lo": 10.0}

TEMPLATES = [
    ("SELECT h.sid, avg(h.x) AS a, stddev(h.x) AS sd, count(*) AS n FROM m h GROUP BY h.sid "
     "HAVING h.sid = e.sid", False),
    ("SELECT h.sid, sum(h.k) AS s, min(h.x) AS lo, max(h.x) AS hi, var_pop(h.x) AS vp, variance(h.x) AS v, "
     "stddev_pop(h.x) AS sdp, count(DISTINCT h.k) AS dk, avg(DISTINCT h.k) AS adk, count(h.x) AS nx "
     "FROM m h GROUP BY h.sid", False),
    ("SELECT h.sid, count(*) AS n FROM m h WHERE h.x > :lo GROUP BY h.sid HAVING count(*) >= 2 "
     "ORDER BY n DESC, h.sid LIMIT 2", True),
    ("SELECT count(*) AS n, sum(h.x) AS s, avg(h.k) AS a, max(h.ts) AS latest FROM m h WHERE h.sid = :sid", False),
    ("SELECT h.ts, h.x FROM m h WHERE h.sid = :sid ORDER BY h.x DESC NULLS LAST, h.ts LIMIT 4", True),
    ("SELECT DISTINCT h.sid FROM m h WHERE h.k > 0", False),
    ("SELECT h.sid, h.k FROM m h WHERE h.x < :lo", False),
    ("SELECT h.k FROM m h WHERE h.k IS NOT NULL ORDER BY h.k LIMIT 3 OFFSET 1", True),
    ("SELECT h.sid, avg(h.x) FILTER (WHERE h.k > 2) AS af, sum(h.x) / count(h.x) AS ratio FROM m h "
     "GROUP BY h.sid HAVING avg(h.x) BETWEEN 0 AND 500 OR count(*) > 3", False),
    ("SELECT h.sid, stddev_samp(h.x) AS sd FROM m h JOIN hosts s ON s.sid = h.sid WHERE s.rack = :rack "
     "GROUP BY h.sid", False),
]


@pytest.fixture
def conn(pg):
    with pg.connection() as c:
        with c.cursor() as cur:
            for name in ["m", *(f"m_c{i}" for i in range(CHUNKS))]:
                cur.execute(f"CREATE TABLE {name} (ts timestamptz, sid text, x double precision, k bigint)")
            cur.execute("CREATE TABLE hosts (sid text, rack text)")
            cur.execute("INSERT INTO hosts VALUES ('a', 'r1'), ('b', 'r1'), ('c', 'r2')")
        yield c


def _load(conn, rows) -> None:
    with conn.cursor() as cur:
        cur.execute("TRUNCATE m, " + ", ".join(f"m_c{i}" for i in range(CHUNKS)))
        full = [(T0 + timedelta(days=c, minutes=i), sid, x, k) for i, (sid, x, k, c) in enumerate(rows)]
        if full:
            execute_values(cur, "INSERT INTO m VALUES %s", full)
            for c in range(CHUNKS):
                cur.execute(f"INSERT INTO m_c{c} SELECT * FROM m WHERE ts >= %s AND ts < %s",
                            (T0 + timedelta(days=c), T0 + timedelta(days=c + 1)))


def _recall(conn, op: Recall, event) -> list[dict]:
    spec = op.task_for(event)
    state, table = op.start(spec), ResultTable()
    append_only = isinstance(state.merge, RowMerge) and state.merge.append_only
    covered = None
    for c in reversed(range(CHUNKS)):  # newest first
        rows = run_pg(conn, bound_sql(op.split.chunk_sql, {"m": f"m_c{c}"}), spec.params)
        chunk = Interval(T0 + timedelta(days=c), T0 + timedelta(days=c + 1))
        covered = chunk if covered is None else Interval(chunk.start, covered.end)
        for o in op.on_chunk(state, c, covered, rows):
            table.apply(o)
        if not append_only:
            assert table.rows("ev") == dict(state.merge.result(op.factor(state)))
    merge = state.merge  # on_end frees it
    for o in op.on_end(state, EndReason.DONE):
        table.apply(o)
    applied = list(table.rows("ev").values())
    return (applied if append_only else [dict(r) for _, r in merge.result()]), applied


def _same(got: list[dict], want: list[tuple], ordered: bool) -> None:
    got_t = [tuple(r.values()) for r in got]
    if not ordered:
        key = repr
        got_t, want = sorted(got_t, key=key), sorted(want, key=key)
    assert len(got_t) == len(want), (got_t, want)
    for g, w in zip(got_t, want, strict=True):
        assert all(close(a, b, rel=1e-6, abs_=1e-6) for a, b in zip(g, w, strict=True)), (g, w)


row = st.tuples(st.sampled_from(["a", "b", "c"]),
                st.one_of(st.none(), st.integers(-4000, 4000).map(lambda v: v / 4)),
                st.one_of(st.none(), st.integers(-3, 6)),
                st.integers(0, CHUNKS - 1))


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          phases=[Phase.explicit, Phase.reuse, Phase.generate])  # shrinking over a database is slow
@given(rows=st.lists(row, max_size=40), rack=st.sampled_from(["r1", "r2"]))
def test_chunked_recall_equals_one_shot_query(conn, rows, rack):
    _load(conn, rows)
    event = {**EVENT, "rack": rack}
    for sql, ordered in TEMPLATES:
        op = Recall("r", sql)
        final, emitted = _recall(conn, op, event)
        one_shot = run_pg(conn, bound_sql(sql), {p: event[p] for p in op.split.params})
        want = [tuple(r) for r in one_shot.itertuples(index=False)]
        want = [tuple(to_py(v) for v in r) for r in want]
        _same(final, want, ordered)
        _same(emitted, want, False)  # the applied outputs hold the same rows


def test_archiver_accepts_the_chunk_sql(pg):
    """The per-chunk SQL passes the Archiver's own validation (``ChunkStore.prepare``)."""
    from archive.history import prepare

    for sql, _ in TEMPLATES:
        q = prepare(Recall("r", sql).split.chunk_sql, {"m", "hosts"})
        assert "m" in q.streams


def test_paper_template_over_the_archiver(pg):
    """M 3.2's template, with "this week" extrapolation (M 4.5.1), run chunk by chunk by
    the real Archiver (which adds each chunk's interval itself)."""
    import numpy as np
    import pandas as pd

    from archive.archiver import Archiver
    from archive.settings import ArchiveSettings
    from archive.streams import StreamSpec

    arch = Archiver(pg, ArchiveSettings(chunk_span=timedelta(days=1)))
    try:
        arch.register_stream(StreamSpec.build("history", "ts", {"sid": "text", "bw": "double"}))
        n = 14 * 24  # two weeks of hourly samples for two servers
        ts = pd.to_datetime(T0) + pd.to_timedelta(np.arange(n), unit="h")
        bw = np.arange(n, dtype="float64") % 17
        frame = pd.concat([pd.DataFrame({"ts": ts, "sid": s, "bw": bw + i}) for i, s in enumerate("ab")])
        arch.append("history", 0, frame, bulk=True)
        event = {"eid": "e", "ts": T0 + timedelta(days=14), "sid": "b"}
        op = Recall("norm", "SELECT h.sid, avg(h.bw) AS mean, stddev(h.bw) AS sd, count(*) AS n FROM History h "
                    "GROUP BY h.sid HAVING h.sid = e.sid", store=arch, period=timedelta(days=7))
        assert op.time_column == "h.ts" and "h.ts >= :moirae_from" in op.split.chunk_sql  # from the Archiver
        spec = op.task_for(event)
        assert spec.query.streams == ("history",)
        state, table = op.start(spec), ResultTable()
        newest_first = [c for c in arch.chunk_ids(["history"]) if arch.grid.bounds(c)[0] >= spec.bound]
        assert len(newest_first) == 7
        for i, c in enumerate(newest_first):
            lo, hi = arch.grid.bounds(c)
            covered = Interval(lo, arch.grid.bounds(newest_first[0])[1])
            for o in op.on_chunk(state, c, covered, arch.run_history_query(spec.query, spec.params, c)):
                assert o.covered == covered
                table.apply(o)
            [row] = table.rows("e").values()
            assert row["n"] == pytest.approx(24 * 7)  # 24 rows a day, extrapolated to the week
            assert close(row["mean"], float(frame[(frame.sid == "b") & (frame.ts >= lo) & (frame.ts < event["ts"])]
                                            ["bw"].mean()))
            assert i or row["sd"] is not None
        for o in op.on_end(state, EndReason.DONE):
            table.apply(o)
        [row] = table.rows("e").values()
        week = frame[(frame.sid == "b") & (frame.ts >= spec.bound) & (frame.ts < event["ts"])]["bw"]
        assert row["n"] == 24 * 7 and close(row["sd"], float(week.std()), rel=1e-9)
    finally:
        arch.close()
