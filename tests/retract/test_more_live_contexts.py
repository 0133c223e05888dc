"""Live Spark-function contexts read the archive as the retractions say it is
(moirae/deploy/processing.py:EventProcessor.reads_for).

Real Spark and PostgreSQL. An overload on s2 had 'miner' and 'alice' logged in. The
'miner' rows are retracted and the 'alice' rows corrected to 'carol'; an overload
processed afterwards by the live event path (the event worker's
``EventProcessor.process``) gets a context from a Spark function without the removed
rows and with the corrected value, in the event log and in its archived context stream.
Before any retraction the context reads the archive itself (no flag lookup per read)."""

from __future__ import annotations

import pandas as pd
import pytest

import tests.moirae.scenario_small as sc
from moirae.materialize.replica import FlaggedReads
from moirae.queries.hybrid import context_stream
from tests.moirae.test_context_sql import _engine
from tests.retract.users_flags import retract_miner_correct_alice

pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.slow]

EID = "s2:2024-03-01 03:04:29.999999"  # an overload of s2 (tests/moirae/test_replica_unchanged.py's)


def test_live_spark_context_after_a_retraction_leaves_out_removed_rows_and_reads_corrected_ones(
        spark, pg, tmp_path, monkeypatch):
    if not pg.dsn.startswith("host=127.0.0.1"):
        pytest.skip("one backend is enough for this Spark test (slow)")
    hist = sc.history()
    engine = _engine(spark, pg, tmp_path, monkeypatch, chunk_span="30m")
    try:
        cq = engine.context_query("overload", sc.users_context, inputs=["users"], name="by_spark", window="5m")
        engine.archiver.append("metrics", 0, hist)
        engine.archiver.append("users", 0, sc.users_history(hist))
        proc, flow, q = engine.deploy.processor, engine.deploy.flows["overload"], engine.deploy.event_queries["overload"]
        assert proc.reads_for(cq) is engine.archiver  # no flags: the archive itself

        retract_miner_correct_alice(engine)
        assert isinstance(proc.reads_for(cq), FlaggedReads)

        events = engine.deploy.materializer.detect(q, pd.Timestamp("2024-03-01 03:00", tz="UTC").to_pydatetime(),
                                                   pd.Timestamp("2024-03-01 03:10", tz="UTC").to_pydatetime(), flow.U)
        frame = events[events["eid"] == EID].reset_index(drop=True)
        assert len(frame) == 1
        proc.process(flow, frame, 9, False)  # the live event path, as the event worker calls it

        rec = engine.deploy.events.get(EID)
        assert sorted({t["user"] for t in rec.context}) == ["carol"]
        with pg.connection() as conn, conn.cursor() as cur:
            cur.execute(f'SELECT "user" FROM {context_stream("overload", "by_spark")} WHERE eid = %s', (EID,))
            assert {r[0] for r in cur.fetchall()} == {"carol"}
    finally:
        engine.close()
