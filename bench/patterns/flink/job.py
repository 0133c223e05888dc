"""Run MATCH_RECOGNIZE patterns in Flink SQL over a CSV of maritime rows (PyFlink).

Runs inside the Flink virtual environment (bench/.venv-flink), never imported by Moirae:
``python job.py PARALLELISM`` starts one JVM (a Table environment in streaming mode) and
serves runs from its standard input, one JSON line each, ``{"csv", "patterns": [{"name",
"sql"}]}`` (a header-less CSV of the maritime columns, ordered by ``ts``; each pattern a
``SELECT ... FROM vessels MATCH_RECOGNIZE (...)`` whose measures include ``start_ts`` and
``end_ts``), until the input ends. Each run's answer is one line on standard output,
``@@RUN {"seconds", "matches": [[pattern, vessel_id, start_ts, end_ts], ...]}`` (or
``@@RUN {"error"}``); the JVM's own output never starts with ``@@RUN``. The caller
decides the order of runs (warm-up, interleaving with the other engine's runs).

A run is Flink's streaming mode over the bounded file (the ``filesystem`` connector):
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
PREFIX = "@@RUN "


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


def main(parallelism: int) -> int:
    env = make_env(parallelism)
    import pyflink.version

    print(PREFIX + json.dumps({"flink": pyflink.version.__version__}), flush=True)
    for n, line in enumerate(sys.stdin):
        if not line.strip():
            continue
        cmd = json.loads(line)
        try:
            secs, rows = run(env, cmd["csv"], cmd["patterns"], f"vessels_{n}")
            answer = {"seconds": secs, "matches": rows}
        except Exception as exc:  # noqa: BLE001 - reported to the caller, which stops
            answer = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"}
        print(PREFIX + json.dumps(answer), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 2))
