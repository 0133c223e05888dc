"""Run MATCH_RECOGNIZE patterns in Flink SQL over a CSV of maritime rows (PyFlink).

Runs inside the Flink virtual environment (bench/.venv-flink), never imported by Moirae:
``python job.py SPEC.json`` where the spec holds ``csv`` (a header-less CSV of the
maritime columns, ordered by ``ts``), ``workloads`` (``[{"key", "patterns": [{"name",
"sql"}]}]``: each pattern a ``SELECT ... FROM vessels MATCH_RECOGNIZE (...)`` whose
measures include ``start_ts`` and ``end_ts``), ``reps`` (timed runs per workload),
``parallelism``, ``warmup_csv`` (a small CSV the largest workload runs on first, untimed,
so the JVM, the planner and the CEP operator are warm) and ``out`` (a JSON file to
write: per workload its runs' seconds, the same on the small file (the fixed cost of a
job; skipped when ``small`` is false) and the last run's matches).

The job is Flink's streaming mode over the bounded file (the ``filesystem`` connector):
``ts`` is the rowtime with a 1 s bounded-out-of-orderness watermark, and the end of the
file moves the watermark to the end of time, so every pending match is emitted. All
patterns run in one job as a ``UNION ALL`` of their queries over the one source table;
matches are collected to the client. The timed span is from submitting the job to the
last match received.
"""

from __future__ import annotations

import json
import sys
import time

COLUMNS_DDL = """
  vessel_id STRING, ts TIMESTAMP(3), lon DOUBLE, lat DOUBLE, speed DOUBLE, course DOUBLE, heading DOUBLE,
  status STRING, ship_type STRING, dist_coast_km DOUBLE, dist_port_km DOUBLE, nearest_port STRING,
  near_coast BOOLEAN, near_port BOOLEAN, in_anchorage BOOLEAN, in_fishing BOOLEAN, in_protected BOOLEAN,
  heading_diff DOUBLE, heading_change DOUBLE,
  WATERMARK FOR ts AS ts - INTERVAL '1' SECOND
"""


def make_env(parallelism: int):
    from pyflink.table import EnvironmentSettings, TableEnvironment

    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    conf = env.get_config()
    conf.set("parallelism.default", str(parallelism))
    conf.set("table.exec.resource.default-parallelism", str(parallelism))
    conf.set("pipeline.object-reuse", "true")
    return env


def run(env, csv: str, patterns: list[dict], table: str) -> tuple[float, list[tuple]]:
    env.execute_sql(f"DROP TABLE IF EXISTS {table}")
    env.execute_sql(f"CREATE TABLE {table} ({COLUMNS_DDL}) WITH ("
                    f"'connector' = 'filesystem', 'path' = 'file://{csv}', 'format' = 'csv')")
    parts = []
    for p in patterns:
        sql = p["sql"].replace(" FROM vessels ", f" FROM {table} ")
        parts.append(f"SELECT '{p['name']}' AS pname, vessel_id, "
                     f"CAST(start_ts AS STRING) AS start_ts, CAST(end_ts AS STRING) AS end_ts FROM ({sql})")
    query = "\nUNION ALL\n".join(parts)
    t0 = time.perf_counter()
    result = env.execute_sql(query)
    rows = []
    with result.collect() as it:
        for r in it:
            rows.append((r[0], r[1], r[2], r[3]))
    return time.perf_counter() - t0, rows


def main(spec_path: str) -> int:
    spec = json.loads(open(spec_path, encoding="utf-8").read())
    env = make_env(int(spec.get("parallelism", 2)))
    import pyflink.version

    out: dict = {"flink": pyflink.version.__version__, "workloads": {}}
    workloads = spec["workloads"]
    if spec.get("warmup_csv"):  # the largest workload on a small file: every code path compiled once
        biggest = max(workloads, key=lambda w: len(w["patterns"]))
        out["warmup_s"], _ = run(env, spec["warmup_csv"], biggest["patterns"], "warm")
    n = 0
    for w in workloads:
        runs, rows = [], []
        for _ in range(int(spec.get("reps", 1))):
            secs, rows = run(env, spec["csv"], w["patterns"], f"vessels_{n}")
            n += 1
            runs.append({"seconds": secs, "matches": len(rows)})
        small = []  # the same workload on the small file: the job's fixed cost (planning, deployment)
        for _ in range(int(spec.get("reps", 1)) if spec.get("small", True) else 0):
            secs, _rows = run(env, spec["warmup_csv"], w["patterns"], f"small_{n}")
            n += 1
            small.append({"seconds": secs, "matches": len(_rows)})
        out["workloads"][w["key"]] = {"runs": runs, "small_runs": small, "matches": rows}
    with open(spec["out"], "w", encoding="utf-8") as fh:
        json.dump(out, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
