"""ANK-N's streaming query compiles: no silent fallback to Spark's interpreter.

Spark 4.0's code generator cannot compile ANK-N's sliding-window stage over Linear Road's
accident sink when common subexpressions are eliminated (see ``ananke.ankn.QUERY_CONF``).
Spark then interprets the stage and logs a long stack trace every micro-batch. With
``spark.sql.codegen.fallback`` off the same failure stops the query instead, which is how
these tests see it.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from ananke.ankn import AnkNSparkSink
from ananke.examples import linear_road as lr
from ananke.examples import workload
from ananke.items import ListSink, graph_key
from ananke.query import ProvQuery

pytestmark = [pytest.mark.spark, pytest.mark.slow]

NO_FALLBACK = {"spark.sql.codegen.fallback": "false"}
SUBEXPR = "spark.sql.subexpressionElimination.enabled"


@pytest.fixture(scope="module")
def reports_dir(tmp_path_factory):
    rows = lr.generate(vehicles=30, minutes=12, breakdowns=3, accidents=1, seed=3)
    end = rows[-1]["ts"]
    rows += workload.flush_rows({"vid": -1, "speed": 0.0, "xway": 9, "lane": 1, "dir": 0, "seg": 0, "pos": -1},
                                [end + timedelta(minutes=10), end + timedelta(minutes=20)])
    d = tmp_path_factory.mktemp("lr")
    workload.write_files(rows, d, -(-len(rows) // 4))
    return str(d)


def _run(spark, directory, tmp_path, conf):
    stream = spark.readStream.schema(lr.SCHEMA).option("maxFilesPerTrigger", 1).json(directory)
    q = ProvQuery()
    sinks = lr.build(q, stream)
    out = ListSink()
    runner = AnkNSparkSink(list(sinks.values()), out)
    query = runner.start(str(tmp_path / "ck"), {"availableNow": True}, conf=conf)
    return query, out


def test_ankn_query_compiles_and_leaves_the_session_settings(spark, reports_dir, tmp_path):
    before = spark.conf.get(SUBEXPR)
    query, out = _run(spark, reports_dir, tmp_path, NO_FALLBACK)
    query.awaitTermination(timeout=300)
    assert query.exception() is None
    assert spark.conf.get(SUBEXPR) == before  # set for the query alone
    assert spark.conf.get("spark.sql.codegen.fallback") == "true"
    keys = [graph_key(i) for i in out.items]
    assert len(keys) == len(set(keys))  # Forward-Once still holds
    assert {i.kind for i in out.items} >= {"sink", "source", "edge", "label"}
    assert {i.sink for i in out.items if i.kind == "sink"} == {"stopped", "accident"}


def test_with_subexpression_elimination_the_stage_does_not_compile(spark, reports_dir, tmp_path):
    """The control: why QUERY_CONF exists. If a Spark upgrade fixes the generator, this
    fails, and the setting can go."""
    query, _ = _run(spark, reports_dir, tmp_path, {**NO_FALLBACK, SUBEXPR: "true"})
    with pytest.raises(Exception, match="CompileException"):
        query.awaitTermination(timeout=300)
