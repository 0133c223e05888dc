"""A correction that moves a row to another key (a reading re-assigned to another host)
is followed by every read through the flags: a history-query pinned to a key and a
context's plain read (archive/row_flags.py, moirae/materialize/replica.py:FlaggedReads)
see the row under its new key and not under its old one, and a pattern event-query's
re-match (moirae/retract/patterns.py) runs the new key's rows with it."""

from __future__ import annotations

from datetime import timedelta

import pandas as pd
import pytest

from archive import Archiver, ArchiveSettings, StreamSpec
from archive.history import prepare
from moirae.materialize.replica import FlaggedReads
from moirae.patterns import compile_pattern
from moirae.retract.flagged import ArchiveFlags
from moirae.retract.patterns import PatternQuery, PatternRematcher
from moirae.retract.store import RetractionStore

pytestmark = pytest.mark.postgres

T0 = pd.Timestamp("2025-01-01", tz="UTC")


def _archive(pg, rows) -> tuple[Archiver, dict[float, tuple[int, object]]]:
    arch = Archiver(pg, ArchiveSettings(chunk_span=timedelta(hours=1)))
    arch.register_stream(StreamSpec.build("cpu", "ts", {"host": "text", "x": "double"}))
    arch.append("cpu", 0, pd.DataFrame(rows, columns=["ts", "host", "x"]))
    with pg.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT x, _sid, ts FROM cpu")
        return arch, {r[0]: (r[1], r[2]) for r in cur.fetchall()}


def test_history_queries_and_context_reads_see_a_moved_row_under_its_new_key(pg):
    arch, sid_of = _archive(pg, [(T0 + pd.Timedelta(minutes=i), h, x)
                                 for i, (h, x) in enumerate([("a", 1.0), ("a", 2.0), ("b", 3.0), ("b", 4.0)])])
    sid, ts = sid_of[1.0]
    RetractionStore(pg).create("correction", "cpu", {"ids": [sid]}, "read from the wrong host", "ann",
                               [(sid, ts, {"host": "b"})])
    arch.row_flags = ArchiveFlags(pg)  # as the engine sets it
    q = prepare("SELECT count(*) AS n, sum(x) AS s FROM cpu WHERE host = :host", {"cpu"})
    (cid,) = arch.chunk_ids(["cpu"])
    per = {h: arch.run_history_query(q, {"host": h}, cid).to_dict("records")[0] for h in ("a", "b")}
    assert per == {"a": {"n": 1, "s": 2.0}, "b": {"n": 3, "s": 8.0}}
    frame = FlaggedReads(arch, arch.row_flags).read("cpu", T0.to_pydatetime(), (T0 + pd.Timedelta(hours=1)).to_pydatetime())
    assert sorted(frame[frame["host"] == "b"]["x"]) == [1.0, 3.0, 4.0]
    assert list(frame[frame["host"] == "a"]["x"]) == [2.0]
    arch.close()


def test_a_pattern_rematch_runs_the_new_keys_rows_with_a_moved_row(pg):
    # v2 holds A B C (one B: no match); v1's B at 7 s, moved to v2, makes v2's A B B C
    rows = [(T0 + pd.Timedelta(seconds=s), k, x) for s, k, x in
            [(0, "v2", -1.0), (5, "v2", 20.0), (7, "v1", 30.0), (10, "v2", -1.0), (30, "v1", -1.0)]]
    arch, sid_of = _archive(pg, rows)
    sid, _ = sid_of[30.0]
    sql = """SELECT * FROM cpu MATCH_RECOGNIZE (PARTITION BY host ORDER BY ts MEASURES COUNT(B.*) AS n
      PATTERN (A B{2,} C) WITHIN INTERVAL '60' SECOND DEFINE A AS x < 0, B AS x > 10, C AS x < 0)"""
    cp = compile_pattern(sql, name="burst", columns=["ts", "host", "x", "moirae_pat_rid"], row_id="moirae_pat_rid")
    pq = PatternQuery("burst", (cp,), None, "eid", "ts", "cpu")
    rm = PatternRematcher(pg, arch, None, None, None, None)
    old, new = rm._runs(pq, arch.stream("cpu"), {sid}, T0 - pd.Timedelta(minutes=2), T0 + pd.Timedelta(minutes=2),
                        (set(), {}), (set(), {sid: {"host": "v2"}}), None)
    assert old == {}
    ((match, measures, _),) = new.values()
    assert match.key == ("v2",) and measures == {"n": 2}
    arch.close()
