"""The cost of maintaining alerts under retractions, by how-provenance polynomials, against
recomputing the affected windows in Spark (HUKA's evaluation shape, H 7).

One day of readings (hosts x one reading every few seconds) is archived in PostgreSQL;
the event-query is the bandwidth overload (M fig. 1): a host's 5-minute average above a
threshold, with hot periods planted so about one window in eight alerts. Each alert's
polynomial (its window's source ids and values, the semimodule form) is stored in the
polynomial store (``ananke/poly_store.py``), as the live capture stores it.

For a retraction of 0.1 %, 1 % and 10 % of the day's rows, and for insert/delete mixes
of 1 % of them (HUKA's ratios 1:9, 5:5, 9:1; an insert is a late row of an existing
window), both sides produce the alerts of every affected window:

- **polynomials** (:mod:`moirae.retract`): the alerts the changed rows fed by forward
  lookup in the store (one indexed query), their polynomials evaluated with the
  removed rows at zero (``ananke/poly_eval.py:evaluate_many``), and the windows without
  an alert the changes touch, and those a late row joins, recomputed without reading
  their rows: PostgreSQL's partial aggregates over the archived rows but the removed
  ones, the late rows merged in with numpy (``moirae/retract/hidden.py:hidden_windows``,
  ``moirae/retract/partials.py``; the stream has the index on ``(host, ts)`` a recent
  chunk of a stream declared with that index has);
- **Spark**: the day's rows as a cached DataFrame (read and counted before timing:
  Spark's best case), the affected windows' rows selected, the removed rows anti-joined
  out and the inserted ones unioned in, grouped, averaged and filtered, collected.

Both answers are compared (they must be equal: exactness inside the run). Each side runs
``--rounds`` times in alternating order; the ratio is Spark's time over the
polynomials' per round. Goal: >= 10x at 1 %. Storage: the polynomial tables' size over
the archived stream's (goal <= 0.3x).

Run: ``python -m bench retract_cost [--quick] [--rounds N]``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import uuid
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd

from bench.harness import ROOT, exit_code, publish, target, verdict
from bench.provenance._rounds import alternate

# the code this benchmark measures (bench.harness.staleness)
MEASURES = ("bench/provenance/retract_cost.py", "bench/provenance/_rounds.py", "moirae/retract", "ananke/poly_eval.py",
            "ananke/poly_store.py", "ananke/poly_maint.py")

T0 = datetime(2026, 3, 2, tzinfo=UTC)
WINDOW = timedelta(minutes=5)
LIMIT = 80.0
FRACTIONS = (0.001, 0.01, 0.1)
MIXES = ((1, 9), (5, 5), (9, 1))  # inserts : deletes


def day(hosts: int, step_s: int, seed: int = 7) -> pd.DataFrame:
    """A day of readings: ``hosts`` hosts, one every ``step_s`` seconds; hot periods planted."""
    n = 86_400 // step_s
    ts = pd.date_range(T0, periods=n, freq=f"{step_s}s", tz="UTC")
    rng = np.random.default_rng(seed)
    frames = []
    for h in range(hosts):
        bw = rng.normal(50, 10, n)
        hot = ((ts.hour * 60 + ts.minute) // 5 + h * 7) % 8 == 0  # one window in eight
        bw[hot] += 45
        frames.append(pd.DataFrame({"ts": ts, "host": f"h{h:02d}", "bw": bw}))
    return pd.concat(frames, ignore_index=True)


def plan():
    from ananke.polynomial import AggSpec, PolyPlan

    us = int(WINDOW / timedelta(microseconds=1))
    return PolyPlan("overload", "window", 1, ("metrics",), ("bw",), (AggSpec("avg_bw", "avg", "bw", 0, "bw"),),
                    ("host",), "ts", us, us, conditions=(f"(avg_bw > CAST({LIMIT:g} AS DOUBLE))",),
                    structural=("host",))


def windows_frame(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.assign(lo=frame["ts"].dt.floor("5min"))


def build_polys(frame: pd.DataFrame):
    """(sink id, window end - 1 µs, Poly, payload) of every alert of the day."""
    from ananke.polynomial import Poly

    out = []
    for i, ((host, lo), g) in enumerate(windows_frame(frame).groupby(["host", "lo"], sort=True)):
        avg = float(g["bw"].mean())
        if avg > LIMIT:
            ts = (lo + WINDOW - timedelta(microseconds=1)).to_pydatetime()
            out.append((i, ts, Poly(g["_sid"].to_numpy(np.int64), g[["bw"]].to_numpy(np.float64)),
                        {"host": host, "ts": ts, "avg_bw": avg}))
    return out


def poly_side(store, pl, payloads, archive, removed: set[int], inserted: list[dict], changed_rows) -> set[tuple]:
    """The alerts of every affected window, maintained from polynomials (module doc)."""
    from ananke.poly_eval import evaluate_many
    from moirae.retract.hidden import archive_aggregator, archive_reader, hidden_windows

    hit = store.polys_of(sorted(removed)) if removed else []
    outcomes = evaluate_many(pl, [(sid, poly, payloads[sid]) for _s, sid, _t, poly in hit], removed)
    standing = {sid for sid, o in outcomes.items() if o.holds}
    # a window a late row joins is recomputed from its partials (its polynomial gains a term the store has not)
    grown = {(r["host"], _floor(r["ts"])) for r in inserted}
    alerted = set()
    for sid in payloads:  # windows of every alert still standing, for the hidden-window check
        p = payloads[sid]
        lo = p["ts"] + timedelta(microseconds=1) - WINDOW
        if (sid in standing or sid not in outcomes) and (p["host"], lo) not in grown:
            alerted.add(((p["host"],), lo, lo + WINDOW))
    late = [(r["_sid"], r["ts"], {"host": r["host"], "bw": r["bw"]}) for r in inserted]
    found = hidden_windows(pl, archive_reader(archive, "metrics", "ts"), changed_rows, removed, {}, alerted,
                           archive_aggregator(archive, "metrics", "ts"), inserted=late)
    out = {(p["host"], p["ts"] + timedelta(microseconds=1) - WINDOW) for sid, p in payloads.items()
           if sid in standing} - grown
    out |= {(w[0][0], w[1]) for w, _ in found}
    affected_windows = {(r[2]["host"], _floor(r[1])) for r in changed_rows}
    return {w for w in out if w in affected_windows}


def _floor(ts: datetime) -> datetime:
    return T0 + ((ts - T0) // WINDOW) * WINDOW


def spark_side(spark, cached, removed: set[int], inserted: list[dict], affected: set[tuple]) -> set[tuple]:
    """The same windows' alerts recomputed by Spark from the cached day (module doc)."""
    from pyspark.sql import functions as F

    wins = spark.createDataFrame([(h, lo.replace(tzinfo=None)) for h, lo in affected], "host string, lo timestamp")
    rows = cached.join(F.broadcast(wins), ["host", "lo"])
    if removed:
        gone = spark.createDataFrame([(int(s),) for s in removed], "_sid long")
        rows = rows.join(F.broadcast(gone), "_sid", "left_anti")
    if inserted:
        extra = spark.createDataFrame([(int(r["_sid"]), r["ts"].replace(tzinfo=None), r["host"], float(r["bw"]))
                                       for r in inserted], "_sid long, ts timestamp, host string, bw double")
        extra = extra.withColumn("lo", F.window("ts", "5 minutes").start).join(F.broadcast(wins), ["host", "lo"])
        rows = rows.unionByName(extra.select(*rows.columns))
    got = rows.groupBy("host", "lo").agg(F.avg("bw").alias("avg_bw")).where(F.col("avg_bw") > LIMIT).collect()
    return {(r["host"], r["lo"].replace(tzinfo=UTC)) for r in got}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="8 hosts, a reading every 30 s, 2 rounds")
    ap.add_argument("--rounds", type=int, default=None)
    args = ap.parse_args(argv)
    hosts, step = (8, 30) if args.quick else (20, 10)
    rounds = args.rounds or (2 if args.quick else 3)
    name = "retract_cost_quick" if args.quick else "retract_cost"

    from ananke.poly_store import PolyStore
    from archive import Archiver, ArchiveSettings, Database, StreamSpec
    from moirae.runtime.spark import spark_session

    db = Database.from_env(ROOT / ".moirae-bench", schema=f"bench_retract_{uuid.uuid4().hex[:8]}")
    arch = Archiver(db, ArchiveSettings(chunk_span=timedelta(hours=1)))
    spark = spark_session(master="local[2]", app_name="bench-retract-cost")
    try:
        frame = day(hosts, step)
        arch.register_stream(StreamSpec.build("metrics", "ts", {"host": "text", "bw": "double"}))
        arch.append("metrics", 0, frame, bulk=True)
        with db.connection() as conn, conn.cursor() as cur:  # the recent tier's index on the key and time
            cur.execute("CREATE INDEX ON metrics (host, ts)")
            cur.execute("ANALYZE metrics")
        frame = arch.read("metrics", T0, T0 + timedelta(days=1), with_ids=True)
        frame["_sid"] = frame["_sid"].astype(np.int64)
        n = len(frame)
        pl = plan()
        store = PolyStore(db.connect, borrow=db.connection).create()
        store.put_plan(pl)
        polys = build_polys(frame)
        store.put("overload", [(sid, ts, poly) for sid, ts, poly, _ in polys])
        payloads = {sid: p for sid, _, _, p in polys}
        print(f"{n:,} rows, {len(polys):,} alerts", flush=True)
        from pyspark.sql import functions as F

        sdf = spark.createDataFrame(frame[["_sid", "ts", "host", "bw"]].assign(ts=frame["ts"].dt.tz_convert(None)),
                                    "_sid long, ts timestamp, host string, bw double")
        cached = sdf.withColumn("lo", F.window("ts", "5 minutes").start).cache()
        cached.count()
        rng = random.Random(11)
        by_sid = frame.set_index("_sid")
        cases = [(f"retract {f:.1%}", round(f * n), 0) for f in FRACTIONS]
        cases += [(f"mix {i}:{d} (1 %)", round(0.01 * n * d / (i + d)), round(0.01 * n * i / (i + d))) for i, d in MIXES]
        results = []
        for label, n_del, n_ins in cases:
            def change(r: int, n_del=n_del, n_ins=n_ins) -> dict:
                removed = set(rng.sample(list(frame["_sid"]), n_del))
                inserted = [{"_sid": 10**12 + r * 10**7 + i, "ts": T0 + timedelta(seconds=rng.randrange(86_400)),
                             "host": f"h{rng.randrange(hosts):02d}", "bw": rng.uniform(0, 100)} for i in range(n_ins)]
                changed = [(int(s), by_sid.at[s, "ts"].to_pydatetime(),
                            {"host": by_sid.at[s, "host"], "bw": by_sid.at[s, "bw"]}) for s in removed]
                changed += [(r_["_sid"], r_["ts"], {"host": r_["host"], "bw": r_["bw"]}) for r_ in inserted]
                return {"removed": removed, "inserted": inserted, "changed": changed,
                        "affected": {(v["host"], _floor(t)) for _, t, v in changed}}

            def side(name: str, c: dict) -> set[tuple]:
                if name == "poly":
                    return poly_side(store, pl, payloads, arch, c["removed"], c["inserted"], c["changed"])
                return spark_side(spark, cached, c["removed"], c["inserted"], c["affected"])

            got = alternate(("poly", "spark"), rounds, side, setup=change)
            same = [a == b for a, b in zip(got.results["poly"], got.results["spark"], strict=True)]
            for a, b in zip(got.results["poly"], got.results["spark"], strict=True):
                if a != b:
                    print(f"  {label}: MISMATCH {sorted(a ^ b)[:5]}", flush=True)
            equal = all(same)
            runs = got.seconds
            ratios = got.ratios("spark", "poly")
            results.append({"case": label, "deleted": n_del, "inserted": n_ins, "poly_s": runs["poly"],
                            "spark_s": runs["spark"], "ratio": ratios, "equal": equal})
            print(f"{label}: poly {statistics.median(runs['poly']) * 1e3:.1f} ms, spark "
                  f"{statistics.median(runs['spark']) * 1e3:.1f} ms, {statistics.median(ratios):.1f}x, "
                  f"equal={equal}", flush=True)
        with db.connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                        "JOIN pg_namespace s ON s.oid = c.relnamespace WHERE s.nspname = %s AND c.relkind = 'r' "
                        "AND c.relname LIKE 'metrics%%'", (db.schema,))
            archived = int(cur.fetchone()[0])
        poly_bytes = store.nbytes()
        data = {"quick": args.quick, "rows": n, "hosts": hosts, "step_s": step, "alerts": len(polys),
                "rounds": rounds, "cases": results, "storage": {"poly_bytes": poly_bytes, "archive_bytes": archived,
                                                                 "ratio": poly_bytes / archived if archived else None}}
        store.close()
    finally:
        arch.close()
        db.drop_schema()
    ts = targets(data)
    publish(name, data, render(data), figure(data), targets=ts)
    print(render(data))
    return exit_code(ts)


def targets(data: dict) -> list[dict]:
    one = next(c for c in data["cases"] if c["case"] == "retract 1.0%")
    st = data["storage"]
    return [
        target("retractions: maintaining every affected alert from polynomials vs Spark recomputing the affected "
               "windows, 1 % of a day's rows", ">= 10x", f"{statistics.median(one['ratio']):.1f}x "
               f"(rounds {min(one['ratio']):.1f}-{max(one['ratio']):.1f}x)", verdict(one["ratio"], 10.0)),
        target("retractions: maintained alerts equal Spark's recomputation, every case and round", "equal",
               f"{sum(c['equal'] for c in data['cases'])} of {len(data['cases'])} cases equal",
               all(c["equal"] for c in data["cases"])),
        target("retractions: polynomial storage / archived rows", "<= 0.3x",
               f"{st['ratio']:.3f}x ({st['poly_bytes'] / 2**20:.1f} MiB / {st['archive_bytes'] / 2**20:.1f} MiB)",
               verdict([st["ratio"]], 0.3, at_least=False, exact=True) if st["ratio"] is not None else None),
    ]


def render(data: dict) -> str:
    rows = "\n".join(
        f"| {c['case']} | {c['deleted']:,} | {c['inserted']:,} | {statistics.median(c['poly_s']) * 1e3:.1f} | "
        f"{statistics.median(c['spark_s']) * 1e3:.1f} | {statistics.median(c['ratio']):.1f}x | "
        f"{'yes' if c['equal'] else 'NO'} |" for c in data["cases"])
    st = data["storage"]
    return (f"## Retractions: maintaining alerts from polynomials vs recomputing in Spark\n\n"
            f"One day of readings ({data['rows']:,} rows, {data['hosts']} hosts, one every {data['step_s']} s), "
            f"the 5-minute overload query ({data['alerts']:,} alerts, each with its stored polynomial). Time to "
            f"produce the alerts of every window the changed rows touch, median of {data['rounds']} rounds "
            "(alternating order); Spark recomputes the same windows from the day cached in memory "
            "(`bench/provenance/retract_cost.py`).\n\n"
            "| change | deleted | inserted | polynomials (ms) | Spark (ms) | ratio | equal |\n|---|---:|---:|---:|---:|---:|---|\n"
            f"{rows}\n\nPolynomial storage: {st['poly_bytes'] / 2**20:.2f} MiB for "
            f"{st['archive_bytes'] / 2**20:.2f} MiB of archived rows ({st['ratio']:.3f}x; only alerts keep one)."
            + (" Quick run: smaller day, fewer rounds." if data["quick"] else ""))


def figure(data: dict):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 3.2))
    labels = [c["case"] for c in data["cases"]]
    x = np.arange(len(labels))
    ax.bar(x - 0.2, [statistics.median(c["poly_s"]) * 1e3 for c in data["cases"]], 0.4, label="polynomials")
    ax.bar(x + 0.2, [statistics.median(c["spark_s"]) * 1e3 for c in data["cases"]], 0.4, label="Spark recompute")
    ax.set_xticks(x, labels, fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("ms (log)")
    ax.set_title("Maintaining affected alerts")
    ax.legend()
    return fig


if __name__ == "__main__":
    raise SystemExit(main())
