"""Batch re-materialization computes contexts from the archive as the retractions say
it is (moirae/materialize/replica.py:FlaggedReads, moirae/queries/context_sql.py).

Real Spark and PostgreSQL. An overload on s2 had 'miner' and 'alice' logged in (the
users context, once as SQL and once as a Spark function). The 'miner' rows are
retracted and one 'alice' row is corrected to 'carol'; the unit re-materialized holds
the contexts of an archive that never held the bad values, through both kinds of
context-query. Without the flags the same rows would come back."""

from __future__ import annotations

import pandas as pd
import pytest

import tests.moirae.scenario_small as sc
from moirae.queries.hybrid import context_stream
from tests.moirae.test_context_sql import _engine
from tests.moirae.test_replica_unchanged import USERS_5M
from tests.retract.users_flags import retract_miner_correct_alice

pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.slow]

EID = "s2:2024-03-01 03:04:29.999999"  # an overload of s2 (test_replica_unchanged's)


def _users(pg, name: str) -> set[str]:
    with pg.connection() as conn, conn.cursor() as cur:
        cur.execute(f'SELECT "user" FROM {context_stream("overload", name)} WHERE eid = %s', (EID,))
        return {r[0] for r in cur.fetchall()}


def test_rematerialized_contexts_leave_out_retracted_rows_and_read_corrected_ones(spark, pg, tmp_path, monkeypatch):
    if not pg.dsn.startswith("host=127.0.0.1"):
        pytest.skip("one backend is enough for this Spark test (slow)")
    hist = sc.history()
    users = sc.users_history(hist)
    engine = _engine(spark, pg, tmp_path, monkeypatch, chunk_span="30m")
    try:
        engine.context_query("overload", USERS_5M, name="users", window="5m")
        engine.context_query("overload", sc.users_context, inputs=["users"], name="by_spark", window="5m")
        engine.archiver.append("metrics", 0, hist)
        engine.archiver.append("users", 0, users)
        m = engine.materializer
        unit = m.unit_grid("overload").chunk_of(pd.Timestamp("2024-03-01 03:05", tz="UTC").to_pydatetime())
        m.materialize_chunk("overload", unit)
        assert _users(pg, "users") == _users(pg, "by_spark") == {"alice", "miner"}

        retract_miner_correct_alice(engine)

        m.materialize_chunk("overload", unit)
        assert _users(pg, "users") == {"carol"}  # SQL context: through the flags inside its query
        assert _users(pg, "by_spark") == {"carol"}  # Spark context: its inputs read through the flags
    finally:
        engine.close()
