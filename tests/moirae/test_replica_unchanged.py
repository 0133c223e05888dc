"""The replica skips a growing unit that nothing has reached since it was materialized,
and computes it again once a row arrives in any stream it reads (moirae.materialize.unit_inputs).

Real Spark and PostgreSQL. Four hours of readings from three servers, archived live
(present tier: every unit is growing), with the overloads of 03:00-03:10 on s2 (30-second windows); a SQL
context-query reads the users logged in on the server.
"""

from __future__ import annotations

import pandas as pd
import pytest

import tests.moirae.scenario_small as sc
from archive import Tier
from moirae.materialize.replica import Materializer, ReplicaOperator
from moirae.queries.hybrid import context_stream
from tests.moirae.test_context_sql import _engine

pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.slow]

USERS_5M = ('SELECT DISTINCT e.eid, e.ts, u."user" FROM events e JOIN users u '
            "ON u.sid = e.sid AND u.ts <= e.ts AND u.ts > e.ts - interval '5 minutes'")


def _users(pg, eid: str) -> set[str]:
    with pg.connection() as conn, conn.cursor() as cur:
        cur.execute(f'SELECT "user" FROM {context_stream("overload", "users")} WHERE eid = %s', (eid,))
        return {r[0] for r in cur.fetchall()}


def test_the_replica_skips_an_unchanged_growing_unit_and_redoes_a_changed_one(spark, pg, tmp_path, monkeypatch):
    hist = sc.history()
    users = sc.users_history(hist)
    engine = _engine(spark, pg, tmp_path, monkeypatch, chunk_span="30m")
    calls: list[int] = []
    real = Materializer.materialize_chunk

    def counted(self, name, unit):
        calls.append(unit)
        return real(self, name, unit)

    try:
        engine.context_query("overload", USERS_5M, name="users", window="5m")
        engine.archiver.append("metrics", 0, hist)  # live appends: present chunks
        engine.archiver.append("users", 0, users)
        assert {c.tier for c in engine.archiver.chunks("metrics")} == {Tier.PRESENT}
        grid = engine.materializer.unit_grid("overload")
        unit = grid.chunk_of(pd.Timestamp("2024-03-01 03:05", tz="UTC").to_pydatetime())
        engine.materializer.materialize_chunk("overload", unit)
        eid = "s2:2024-03-01 03:04:29.999999"  # test_context_wait's overload: 30 s windows
        assert _users(pg, eid) == {"alice", "miner"}
        monkeypatch.setattr(Materializer, "materialize_chunk", counted)
        op = ReplicaOperator(engine.materializer, "overload", engine.settings.recall.default_tickets)
        chunk = engine.archiver.grid_of("metrics").chunk_of(grid.bounds(unit)[0])

        def replica_pass() -> None:  # a new replica task reaching the unit
            state = op.start(op.task_for({"eid": "replica", "ts": hist["ts"].max().to_pydatetime()}))
            op.on_chunk(state, chunk, None, None)

        replica_pass()
        assert calls == []  # growing, but no row reached it since
        # a context input (not the event-query's input) gets a row inside the unit's window
        engine.archiver.append("users", 1, pd.DataFrame({"ts": [pd.Timestamp("2024-03-01 03:04", tz="UTC")],
                                                         "sid": ["s2"], "user": ["carol"]}))
        replica_pass()
        assert calls == [unit]
        assert _users(pg, eid) == {"alice", "miner", "carol"}  # computed again, from the new row
        replica_pass()
        assert calls == [unit]  # and not a third time
        # a row in a neighbouring unit, more than the look-back away, does not reach it
        engine.archiver.append("users", 2, pd.DataFrame({"ts": [pd.Timestamp("2024-03-01 02:00", tz="UTC")],
                                                         "sid": ["s2"], "user": ["dave"]}))
        replica_pass()
        assert calls == [unit]
        # the event-query's own input gets a row inside the unit
        engine.archiver.append("metrics", 1, pd.DataFrame({"ts": [pd.Timestamp("2024-03-01 03:20", tz="UTC")],
                                                           "sid": ["s0"], "bw": [50.0]}))
        replica_pass()
        assert calls == [unit, unit]
    finally:
        engine.close()
