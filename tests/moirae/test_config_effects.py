"""What configuration keys do, through the configuration (the index of
every key's test is tests/test_config_keys.py): Spark settings reach the session and
the streaming queries, the maintenance interval paces the maintenance job, numeric
similarity settings reach Similarity Recall, and the Ananke keys choose the provenance
the live engine runs."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import tests.moirae.scenario_small as sc
from archive import StreamSpec
from similarity import NumericSpec
from tests.engine_factory import make_engine

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.postgres


def _engine(tmp_path, pg, monkeypatch, **over):
    return make_engine(pg, tmp_path / "data", monkeypatch, **over)


CHILD = """
import json, sys
from moirae import Engine
e = Engine.from_config(None, data_dir=sys.argv[1], postgres={"dsn": sys.argv[2], "schema": sys.argv[3]},
                       spark={"master": "local[1]", "ui": True})
sc = e.spark.sparkContext
print(json.dumps({"master": sc.master, "ui": sc.uiWebUrl}))
e.spark.stop()
e.close()
"""


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("pg_dsn", ["embedded"], indirect=True)  # one backend: Spark settings are the subject
def test_spark_master_and_ui_reach_the_session(spark, pg, tmp_path):
    """spark.master and spark.ui are fixed when a JVM starts: a child process with other
    values gets a session with them (this process's session has the defaults)."""
    import json

    assert (spark.sparkContext.master, spark.sparkContext.uiWebUrl) == ("local[2]", None)
    res = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "d"), pg.dsn, pg.schema], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got["master"] == "local[1]" and got["ui"] and got["ui"].startswith("http")


@pytest.mark.spark
@pytest.mark.parametrize("pg_dsn", ["embedded"], indirect=True)  # one backend: Spark settings are the subject
def test_shuffle_partitions_and_trigger(spark, pg, tmp_path, monkeypatch):
    folder = tmp_path / "in"
    folder.mkdir()
    e = _engine(tmp_path, pg, monkeypatch, spark={"shuffle_partitions": 3, "trigger": "7s"})
    try:
        assert e.spark.conf.get("spark.sql.shuffle.partitions") == "3"
        df = spark.readStream.schema(sc.SCHEMA).csv(str(folder))
        e.source("metrics", df, ts="ts", lateness="30 seconds")
        e.start()
        query = e.sources.by_name["metrics"].query
        trigger = query._jsq.streamingQuery().trigger()  # the JVM's ProcessingTimeTrigger
        assert trigger.intervalMs() == 7000
    finally:
        e.close()
        spark.conf.set("spark.sql.shuffle.partitions", "2")  # the shared session's default again


def test_maintenance_interval_paces_the_maintenance_job(pg, tmp_path, monkeypatch):
    """Chunks demoted to recent beyond R are aged to old by the maintenance job: within
    a second at a 50 ms interval, not at all at 1 h."""
    t0 = datetime(2024, 1, 1, tzinfo=UTC)
    rows = pd.DataFrame({"ts": [t0 + timedelta(minutes=10 * i) for i in range(60)], "v": np.arange(60.0)})
    tiers = {}
    for interval in ("50ms", "1h"):
        e = _engine(tmp_path, pg, monkeypatch,
                    archive={"chunk_span": "1h", "chunk_target_rows": 0, "recent_chunks": 1, "maintenance_interval": interval})
        try:
            name = f"m{interval.replace('ms', '')}"
            e.archiver.register_stream(StreamSpec.build(name, "ts", {"v": "double"}))
            e.archiver.append(name, 0, rows)
            e.archiver.demote(t0 + timedelta(hours=9), [name])  # 9 chunks leave the present tier: recent
            e.maintenance.start()
            time.sleep(1.0)
            e.maintenance.request_stop()
            e.maintenance.join(10)
            tiers[interval] = sorted({c.tier.value for c in e.archiver.chunks(name)})
        finally:
            e.close()
    assert tiers["50ms"] == ["old", "present", "recent"]
    assert tiers["1h"] == ["present", "recent"]


@pytest.mark.spark
@pytest.mark.parametrize("pg_dsn", ["embedded"], indirect=True)  # one backend: the keys reaching it are the subject
def test_similarity_settings_reach_similarity_recall(spark, pg, tmp_path, monkeypatch):
    """similarity.k, .bandwidth, .histogram_bins and .idf become the Similarity Recall's k and
    the NumericSpec of every numeric attribute it declares by name; learning the same
    contexts then gives another kernel bandwidth and another histogram."""
    rng = np.random.default_rng(3)
    contexts = [[{"load": float(v)}] for v in rng.normal(50, 10, 400)]
    got = {}
    for label, sim in (("default", {}), ("set", {"k": 3, "bandwidth": 0.5, "histogram_bins": 8, "novelty": 0.3,
                                               "novelty_quantile": 0.2, "index_cache_mb": 3,
                                               "idf": "paper"})):
        e = _engine(tmp_path, pg, monkeypatch, similarity=sim, archive={"chunk_span": "30m", "chunk_target_rows": 0})
        try:
            df = spark.readStream.schema(sc.SCHEMA).csv(str(tmp_path))
            e.source("metrics", df, ts="ts", lateness="30 seconds")
            e.event_query("overload", sc.overload, inputs=["metrics"])
            op = e.similarity_recall("overload", numeric=["load"], name=f"sim_{label}")
            explicit = e.similarity_recall("overload", numeric={"load": NumericSpec(bandwidth=2.0)},
                                           name=f"exp_{label}")
            op.stats.learn_many(contexts)
            table = op.stats.table().numeric["load"]
            got[label] = (op.k, op.config.numeric["load"], table.h, len(table.means), op.novelty.fixed,
                          op.novelty.quantile, op.source.budget, op.config.idf, op.stats.config.idf)
            assert explicit.config.numeric["load"].bandwidth == 2.0  # an explicit spec wins
        finally:
            e.close()
    assert got["set"][:2] == (3, NumericSpec(bandwidth=0.5, bins_per_sigma=8))
    assert got["default"][:2] == (5, NumericSpec())
    assert got["set"][2] == 0.5 and got["default"][2] != 0.5  # Silverman's rule by default
    assert got["set"][3] < got["default"][3]  # 8 bins per sd: a coarser histogram than 64
    assert got["set"][4:6] == (0.3, 0.2) and got["default"][4:6] == (None, 0.05)  # novelty: fixed, or calibrated
    assert got["set"][6] == 3 * 2**20 and got["default"][6] == 256 * 2**20  # index cache budget
    assert got["set"][7:] == ("paper", "paper") and got["default"][7:] == ("smooth", "smooth")  # the IDF flavour


@pytest.mark.spark
@pytest.mark.parametrize("pg_dsn", ["embedded"], indirect=True)  # one backend: the keys choosing it are the subject
def test_ananke_enabled_and_variant_choose_the_provenance(spark, pg, tmp_path, monkeypatch):
    """ananke.enabled: false runs no provenance; the variant picks ANK-1 or ANK-N (the
    live ANK-N run: tests/moirae/test_ankn_live.py)."""
    flows = {}
    for label, ananke in (("off", {"enabled": False}), ("ank1", {}), ("ankn", {"variant": "ankn"})):
        e = _engine(tmp_path, pg, monkeypatch, ananke=ananke, archive={"chunk_span": "30m", "chunk_target_rows": 0})
        try:
            df = spark.readStream.schema(sc.SCHEMA).csv(str(tmp_path))
            e.source("metrics", df, ts="ts", lateness="30 seconds")
            e.event_query("overload", sc.overload, inputs=["metrics"])
            f = e.deploy.flows["overload"]
            flows[label] = (f.graph is not None, f.logic is not None, f.ankn is not None)
        finally:
            e.close()
    assert flows == {"off": (False, False, False), "ank1": (True, True, False), "ankn": (True, False, True)}
