"""The supervisor on real failed Spark queries (disk pressure): a query
stopped by ENOSPC is paused and restarted only once the data directory has room; any
other failure is reported with its own error line and never restarted."""

from __future__ import annotations

import errno
import time

import pytest

from moirae.runtime.supervise import LiveQuery, Supervisor

pytestmark = [pytest.mark.faults, pytest.mark.spark]


def _failing(spark, exc: BaseException, checkpoint, name: str):
    def fail(_df, _batch_id):
        raise exc

    return (spark.readStream.format("rate").option("rowsPerSecond", 10).load().writeStream.queryName(name)
            .foreachBatch(fail).option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="200 milliseconds").start())


def test_disk_full_is_paused_until_room_and_other_failures_are_reported(spark, tmp_path):
    full = _failing(spark, OSError(errno.ENOSPC, "No space left on device"), tmp_path / "full", "sup_full")
    bad = _failing(spark, ValueError("bad row 7"), tmp_path / "bad", "sup_bad")
    deadline = time.monotonic() + 120
    while (full.isActive or bad.isActive) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not full.isActive and not bad.isActive
    restarts: list[str] = []
    queries = [LiveQuery("sup_full", full, tmp_path / "full", lambda: restarts.append("sup_full")),
               LiveQuery("sup_bad", bad, tmp_path / "bad", lambda: restarts.append("sup_bad"))]
    sup = Supervisor(tmp_path, lambda: queries, min_free=1 << 62)  # more than any disk: still "full"

    assert sup.check() == {"sup_bad": "ValueError: bad row 7"}
    assert list(sup.paused) == ["sup_full"] and "No space left on device" in sup.paused["sup_full"].error
    assert sup.check() == {"sup_bad": "ValueError: bad row 7"} and restarts == []  # no room: stays paused

    sup.min_free = 1  # space returns
    sup.check()
    assert restarts == ["sup_full"] and not sup.paused
    status = sup.status()
    assert [r["query"] for r in status["resumed"]] == ["sup_full"] and status["failed"] == {"sup_bad": "ValueError: bad row 7"}
    sup.reset()
    assert not sup.failures and status["resumed"]
