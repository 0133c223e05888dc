"""The cluster scenario's deploy (moirae/scenarios/cluster.py:deploy) writes its history
clustered by the event-query's window keys, as it writes live rows: the queries are
deployed before the history is loaded, so a history-query pinned to one server (the
norm's ``h.sid = :sid``) reads that server's block ranges, not every block of the chunk.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.slow]

SMALL = Path(__file__).resolve().parents[1] / "browser" / "cluster_small.yaml"


def test_the_loaded_history_is_sorted_by_the_event_query_keys(engine_factory):
    from archive.names import partition_name, quote
    from moirae.scenarios.cluster import deploy

    engine = engine_factory()
    try:
        info = deploy(engine, live=True, materialize=False, progress=False, scenario_file=SMALL)
        assert info["history_rows_loaded"] > 0
        assert engine.archiver.cluster_keys("metrics") == ("sid",)
        chunks = [c.chunk_id for c in engine.archiver.chunks("metrics")]
        assert chunks
        runs = rows = 0
        with engine.db.connection() as conn, conn.cursor() as cur:
            for cid in chunks:
                # per bulk batch (a negative id) of the chunk: the runs of one sid in heap order
                cur.execute(f"SELECT _batch, count(*) FILTER (WHERE sid IS DISTINCT FROM before), count(*), "
                            f"count(DISTINCT sid) FROM (SELECT _batch, sid, lag(sid) OVER (PARTITION BY _batch "
                            f"ORDER BY ctid) AS before FROM {quote(partition_name('metrics', cid))}) r "
                            f"WHERE _batch < 0 GROUP BY _batch")
                for batch, n_runs, n_rows, n_sids in cur.fetchall():
                    assert n_runs == n_sids, f"chunk {cid}, batch {batch}: {n_runs} runs of {n_sids} servers"
                    runs, rows = runs + n_runs, rows + n_rows
        assert rows > 10 * runs  # rows interleaved by server (the order they are generated in) fail above
    finally:
        engine.close()
