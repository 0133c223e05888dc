"""The archive's partition writers inside a query's own plan (archive/shared.py): a
micro-batch replayed after a partition committed and its task failed archives each row
once, whether the batch writes into chunks or stages (the stream's interval not chosen
yet); a replay of a committed batch writes nothing."""

from __future__ import annotations

from datetime import UTC, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from archive.shared import SharedArchive, shared_batch_id
from archive.spark_sink import archive_layout
from tests.archive.arch_helpers import fresh_archiver, table_rows
from tests.archive.test_exec_sink import _source, fail_once_after

pytestmark = [pytest.mark.spark, pytest.mark.postgres]


def _run(shared: SharedArchive, df, batch_id: int) -> int:
    """One micro-batch as an event-query runs it: begin, the job (the writers, then a
    shuffle and an aggregate after them), commit."""
    sc = df.sparkSession.sparkContext
    shared.begin(sc, batch_id)
    try:
        n = shared.plan(df).groupBy("host").count().toArrow().column("count").to_pylist()
    finally:
        shared.end(sc)
    shared.commit(batch_id)
    return sum(n)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.integers(1, 5), fail=st.integers(0, 4), hosts=st.integers(1, 7), staged=st.booleans())
def test_replay_after_a_partition_committed_and_failed_archives_each_row_once(spark, pg_dsn, tmp_path_factory,
                                                                               monkeypatch, parts, fail, hosts, staged):
    after_part = fail_once_after(fail % parts, tmp_path_factory.mktemp("m") / "failed")
    # staged: the interval is chosen from the batch's rows (11 per host, 13 minutes apart)
    with fresh_archiver(pg_dsn, chunk_target_rows=20 if staged else None) as arch:
        frame, df = _source(spark, 11, hosts, parts)
        df = archive_layout(df, arch.stream("metrics"))
        if not staged:
            arch.fix_interval("metrics", 0, timedelta(0))
        shared = SharedArchive(arch, "metrics", "q", after_part=after_part)
        with pytest.raises(Exception, match="injected failure"):
            _run(shared, df, 3)
        assert arch.batch_ids("metrics") == []
        assert _run(shared, df, 3) == len(frame)  # the replay: the query still sees every row
        again = SharedArchive(arch, "metrics", "q")  # a restarted process replays the batch once more
        assert _run(again, df, 3) == len(frame)
        got = table_rows(arch)
        assert sorted(got["n"]) == sorted(frame["n"]) and got["_sid"].is_unique
        assert set(got["_batch"]) == {shared_batch_id("q", 3)}
        assert arch.batch_ids("metrics") == [shared_batch_id("q", 3)]
        assert sum(c.rows for c in arch.chunks("metrics")) == len(frame)  # the catalog counted each row once
        assert max(got["ts"]) == max(frame["ts"]).replace(tzinfo=UTC)
        with arch.db.connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT count(*) FROM moirae_batch_parts")
            assert cur.fetchone()[0] == 0
            cur.execute("SELECT to_regclass('metrics__stage') IS NOT NULL")
            assert cur.fetchone()[0] == staged
            if staged:
                cur.execute("SELECT count(*) FROM metrics__stage")
                assert cur.fetchone()[0] == 0
        if staged:  # chosen from the rows' rate, not chunk_span
            assert arch.grid_of("metrics").span != arch.settings.chunk_span
