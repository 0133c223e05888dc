"""Moirae figure 7 (M 4.1): retrieving k matching tuples, newest chunk first, from an
archive where no chunk, every chunk, or only the newest half of the chunks is indexed.

A >= 1 GB log (``--quick``: ~40 MB) in ~5 MB chunks is bulk-loaded through the Archiver
twice, the same rows into two schemas, so the half and the fully indexed layouts stand at
once. The stream's index spec is ``(sid)``; the layouts are made by the Archiver's own
tiers: ``age()`` with R = N/2 on one copy, R = N on the other, and R = 0 (the first copy,
its indexes dropped, last). A retrieval runs ``SELECT * FROM log WHERE sid = :sid LIMIT
:lim`` chunk by chunk, newest first, through ``run_history_query`` on one connection, and
stops once k rows are found.

Target (M fig. 7): for k inside the indexed half, half-indexed <= 1.1x fully indexed,
judged by PostgreSQL's time per retrieval (:func:`server_retrieve`: each chunk's
history-query under EXPLAIN ANALYZE, planning + execution, summed over the chunks read).
It is the time the layouts can change: the client's Python and round trips per chunk are
the same code for both, and add only a shared host's noise. The two layouts run back to
back for each k in paired rounds (who goes first alternates), each point the median over
several sid values after one discarded pass of every query; a k's ratio is the geometric
mean of its rounds' half / full with Student's t 95 % interval (:func:`paired_interval`).
Met when every k's interval lies at or under 1.1, missed when one lies wholly above it
(:func:`interval_verdict`); while one straddles, rounds are added up to a bound. The
client's wall time and the buffers each plan touched are reported beside it, and the
curves of the figure (every k, each layout, client wall time) are measured after.

Run: ``python -m bench fig7_partial_index [--quick] [--keep]``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd

from archive import Archiver, ArchiveSettings, Database, StreamSpec, Tier
from archive.names import partition_name
from bench.harness import exit_code, publish, run_orders, target
from bench.harness import verdict as harness_verdict

# the code this benchmark measures (bench.harness.staleness)
MEASURES = ("bench/archive/fig7_partial_index.py", "archive")

ROOT = Path(__file__).resolve().parents[2]
SPAN = timedelta(hours=1)
T0 = datetime(2025, 1, 1, tzinfo=UTC)
MATCHES_PER_CHUNK = 20  # rows per chunk for one sid value
SPEC = StreamSpec.build("log", "ts", {"sid": "bigint", "host": "text", "v": "double", "payload": "text"},
                        indexes=[("sid",)])
QUERY = "SELECT * FROM log WHERE sid = :sid LIMIT :lim"


def chunk_frame(rng: np.random.Generator, cid: int, n: int, n_sids: int, first_sid: int) -> pd.DataFrame:
    start = T0 + cid * SPAN
    offs = np.sort(rng.uniform(0, SPAN.total_seconds(), n))
    frame = pd.DataFrame({
        "ts": pd.Timestamp(start) + pd.to_timedelta(offs, unit="s"),
        "sid": rng.integers(0, n_sids, n),
        "host": np.char.add("host-", rng.integers(0, 500, n).astype(str)),
        "v": rng.normal(50, 10, n),
        "payload": np.char.add("event payload ", rng.integers(10**11, 10**12, n).astype(str)),
    })
    frame["payload"] = frame["payload"] + frame["host"] + " lorem ipsum dolor sit amet"
    # rows carry their ids, so the load times COPY rather than Python hashing
    frame["_sid"] = np.arange(first_sid, first_sid + n, dtype=np.int64)
    return frame


def partition_bytes(arch: Archiver, cid: int) -> int:
    with arch.db.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT pg_table_size(%s)", (partition_name("log", cid),))
        return int(cur.fetchone()[0])


def load(arch: Archiver, target_mb: float, chunk_mb: float, seed: int, rows_per_chunk: int | None = None) -> dict:
    """Bulk-load ~``target_mb`` in ~``chunk_mb`` chunks; ``rows_per_chunk`` if given (a
    second copy of an archive loaded before: the same seed and size give the same rows)."""
    rng = np.random.default_rng(seed)
    # calibrate rows per chunk on a first chunk of known size
    probe_rows = 20_000
    n_sids = max(1, probe_rows // MATCHES_PER_CHUNK)
    arch.append("log", 0, chunk_frame(rng, 0, probe_rows, n_sids, 0), bulk=True)
    per_row = partition_bytes(arch, arch.grid.chunk_of(T0)) / probe_rows
    rows_per_chunk = rows_per_chunk or int(chunk_mb * 2**20 / per_row)
    n_chunks = max(4, round(target_mb / chunk_mb))
    n_sids = max(1, rows_per_chunk // MATCHES_PER_CHUNK)
    with arch.db.connection() as conn, conn.cursor() as cur:  # restart with the calibrated size
        cur.execute(f'TRUNCATE "{partition_name("log", arch.grid.chunk_of(T0))}"')
        cur.execute("UPDATE moirae_chunks SET rows = 0")
        cur.execute("DELETE FROM moirae_batches")
    t = time.perf_counter()
    sid0 = 10**9
    for c in range(n_chunks):
        arch.append("log", c, chunk_frame(rng, c, rows_per_chunk, n_sids, sid0), bulk=True)
        sid0 += rows_per_chunk
        if c % 20 == 19:
            print(f"  loaded {c + 1}/{n_chunks} chunks", flush=True)
    load_s = time.perf_counter() - t
    with arch.db.connection() as conn, conn.cursor() as cur:
        cur.execute("ANALYZE log")
        cur.execute("SELECT sum(pg_table_size(c.oid)) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                    "WHERE i.inhparent = 'log'::regclass")
        total = int(cur.fetchone()[0])
    return {"rows_per_chunk": rows_per_chunk, "chunks": n_chunks, "sid_values": n_sids,
            "rows": rows_per_chunk * n_chunks, "table_bytes": total, "load_s": load_s,
            "chunk_bytes_mean": total / n_chunks}


def layout(db: Database, recent: int) -> Archiver:
    arch = Archiver(db, ArchiveSettings(chunk_span=SPAN, recent_chunks=recent, statement_timeout_ms=600_000))
    arch.age()
    return arch


def retrieve(arch: Archiver, query, conn, chunk_ids: list[int], sid: int, k: int) -> tuple[float, int, int]:
    """Seconds to fetch k rows newest chunk first; also rows found and chunks read."""
    t = time.perf_counter()
    found = chunks = 0
    for cid in chunk_ids:
        got = arch.run_history_query(query, {"sid": sid, "lim": k - found}, cid, conn=conn)
        found += len(got)
        chunks += 1
        if found >= k:
            break
    return time.perf_counter() - t, found, chunks


def server_retrieve(arch: Archiver, query, conn, chunk_ids: list[int], sid: int,
                    k: int) -> tuple[float, int, int, int]:
    """The same retrieval as :func:`retrieve`, each chunk's history-query (rendered and
    bound, and with the settings, :func:`archive.history.run` gives it) under ``EXPLAIN
    (ANALYZE, BUFFERS, TIMING OFF, FORMAT JSON)``: PostgreSQL's own planning + execution time, summed over the chunks read
    (seconds), rows found, chunks read, and the buffers the plans touched (shared
    blocks hit or read, planning's included): the work done, which the host's load does
    not change. It leaves out the client, the network and the Python
    around each chunk, the part a shared host's load scatters most."""
    from archive import history, history_plan
    from archive.chunks import task_grid

    cat = arch.catalog
    ts_cols = tuple((st, cat.stream(st).ts_col) for st in query.streams)
    settings = history_plan.plan_settings(cat, query.streams, query.template)
    # TIMING OFF: no clock read per row and node, the overhead that scales with the rows
    # a plan passes; the statement's own planning and execution times stay measured
    text = "EXPLAIN (ANALYZE, BUFFERS, TIMING OFF, FORMAT JSON) " + history.render(query.template, ts_cols)
    workers = f"SET LOCAL max_parallel_workers_per_gather = {int(cat.settings.history_parallel_workers)}"
    total = 0.0
    found = chunks = blocks = 0
    with conn.cursor() as cur:
        for cid in chunk_ids:
            lo, hi = task_grid(cat, query.streams).bounds(cid)
            # one round trip, as archive.history.read_only sends it: BEGIN, the settings, the query
            cur.execute(f"BEGIN; {workers}; {settings}" + text, {"sid": sid, "lim": k - found, "__lo": lo, "__hi": hi})
            plan = cur.fetchone()[0][0]
            cur.execute("ROLLBACK")
            total += (plan["Planning Time"] + plan["Execution Time"]) / 1000
            found += int(plan["Plan"]["Actual Rows"])
            blocks += sum(int(part.get(f"Shared {kind} Blocks", 0)) for part in (plan["Plan"], plan.get("Planning", {}))
                          for kind in ("Hit", "Read"))
            chunks += 1
            if found >= k:
                break
    return total, found, chunks, blocks


def traditional(conn, sid: int, k: int) -> float:
    t = time.perf_counter()
    with conn.cursor() as cur:
        cur.execute("SELECT * FROM log WHERE sid = %s ORDER BY ts DESC LIMIT %s", (sid, k))
        cur.fetchall()
    return time.perf_counter() - t


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small smoke size (~40 MB)")
    ap.add_argument("--size-mb", type=float, help="archive size (default 1100, quick 40)")
    ap.add_argument("--chunk-mb", type=float, default=5.0)
    ap.add_argument("--reps", type=int, help="sid values per point (default 7, quick 5)")
    ap.add_argument("--rounds", type=int, help="paired rounds of the target's comparison, at least, time permitting (default 20, "
                    "quick 8)")
    ap.add_argument("--until-resolved", type=int, default=60, metavar="MAX",
                    help="add paired rounds, two at a time, while a k's 95 %% interval straddles the target, up to "
                    "MAX rounds or --budget-s")
    ap.add_argument("--budget-s", type=float, default=300, help="seconds the paired rounds may take, at most")
    ap.add_argument("--deadline-s", type=float, default=780,
                    help="seconds the whole run may take: the paired rounds stop (after 4 at least) in time to "
                    "leave --curve-reserve-s for the curves")
    ap.add_argument("--curve-reserve-s", type=float, default=150)
    ap.add_argument("--curve-reps", type=int, default=3, help="sid values per point of the curves")
    ap.add_argument("--curve-rounds", type=int, default=1, help="passes of each layout over every k for the curves")
    ap.add_argument("--best-of", type=int, default=1, help="client runs per (k, sid, layout, round); the fastest counts")
    ap.add_argument("--server-best-of", type=int, default=2, help="the same for PostgreSQL's time (EXPLAIN ANALYZE)")
    ap.add_argument("--keep", action="store_true", help="keep the benchmark schemas")
    args = ap.parse_args(argv)
    size_mb = args.size_mb or (40 if args.quick else 1100)
    reps = args.reps or (5 if args.quick else 7)
    rounds = args.rounds or (8 if args.quick else 20)
    best_of = args.best_of
    name = "fig7_partial_index_quick" if args.quick else "fig7_partial_index"

    t_start = time.perf_counter()
    tag = uuid.uuid4().hex[:8]
    dbs = {lab: Database.from_env(ROOT / ".moirae-bench", schema=f"bench_fig7_{tag}_{lab}") for lab in ("half", "full")}
    try:
        infos = {}
        for lab, db in dbs.items():  # the same rows twice (one seed, one chunk size): two archives
            arch = Archiver(db, ArchiveSettings(chunk_span=SPAN, recent_chunks=0, statement_timeout_ms=600_000))
            arch.register_stream(SPEC)
            print(f"loading ~{size_mb:.0f} MB in ~{args.chunk_mb} MB chunks ({lab}) ...", flush=True)
            infos[lab] = load(arch, size_mb, args.chunk_mb, seed=7,
                              rows_per_chunk=infos["half"]["rows_per_chunk"] if infos else None)
            arch.demote(T0 + infos[lab]["chunks"] * SPAN)  # every chunk behind the horizon: tiers decide indexing
            arch.close()
        info = {**infos["half"], "load_s_second_copy": infos["full"]["load_s"]}
        n = info["chunks"]
        sids = list(range(1, 1 + reps))
        half = n // 2
        per_chunk = MATCHES_PER_CHUNK
        ks = sorted({10, 30, 100, 300, 1000, int(per_chunk * half * 0.5), int(per_chunk * half * 0.85),
                     int(per_chunk * n * 0.7), int(per_chunk * n * 0.95)})
        ks = [k for k in ks if 10 <= k <= per_chunk * n * 0.95]
        with dbs["half"].connection() as conn, conn.cursor() as cur:  # matches inside the newest half, per sid
            cur.execute("SELECT min(c) FROM (SELECT sid, count(*) c FROM log WHERE ts >= %s AND sid = ANY(%s) "
                        "GROUP BY sid) x", (T0 + (n - half) * SPAN, sids))
            inside_limit = int(cur.fetchone()[0])
        inside_ks = [k for k in ks if k <= inside_limit]
        detail: dict[str, dict] = {}
        sides = {}
        for lab, recent in (("half", half), ("full", n)):
            t = time.perf_counter()
            sides[lab] = Side.open(layout(dbs[lab], recent))
            detail[lab] = {"layout": {"recent_chunks": recent, "age_s": time.perf_counter() - t,
                                      "indexed_chunks": sides[lab].indexed()}}
        # -- the target: both archives back to back per k, paired rounds ---------------------
        for side in sides.values():  # warm: one discarded pass of every measured query
            for k in inside_ks:
                for sid in sids:
                    side.retrieve(sid, k)
                    side.server(sid, k)
        pinned = {"ks": inside_ks, "rounds": rounds, "reps": reps, "best_of": best_of,
                  "server_best_of": args.server_best_of, "orders": [],
                  **{m: {lab: {k: [] for k in inside_ks} for lab in sides} for m in ("server_s", "client_s", "blocks")}}
        started, rnd = time.perf_counter(), 0
        budget = min(args.budget_s, args.deadline_s - args.curve_reserve_s - (started - t_start))

        def more() -> bool:
            if rnd < 4:
                return True
            if time.perf_counter() - started >= budget:
                return False
            return rnd < rounds or (rnd < args.until_resolved
                                    and summarize_pinned(json.loads(json.dumps(pinned)), 1.1)["met"] is None)

        while more():
            order = run_orders(tuple(sides), 2)[rnd % 2]
            for i, k in enumerate(inside_ks):
                labs = order if i % 2 == 0 else order[::-1]  # who goes first alternates by k too
                pinned["orders"].append(labs)
                for lab in labs:
                    client, server, work = sides[lab].point(sids, k, best_of, args.server_best_of)
                    pinned["client_s"][lab][k].append(client)
                    pinned["server_s"][lab][k].append(server)
                    pinned["blocks"][lab][k].append(work)
            print(f"  pinned round {rnd} ({time.perf_counter() - started:.0f} s): " + ", ".join(
                f"k={k}: {pinned['server_s']['half'][k][-1] / pinned['server_s']['full'][k][-1]:.3f}"
                for k in inside_ks), flush=True)
            rnd += 1
        pinned["rounds"] = rnd
        # -- the curves: every k, each layout, fewer passes ----------------------------------
        samples: dict[str, dict[int, list[float]]] = {lab: {k: [] for k in ks} for lab in ("none", "half", "full")}
        trad: dict[int, list[float]] = {k: [] for k in ks}
        after_scan: dict[str, list[float]] = {lab: [] for lab in ("none", "half", "full")}
        curve_sids = sids[:args.curve_reps]
        for order in run_orders(tuple(sides), args.curve_rounds):
            for lab in order:
                curve_pass(sides[lab], lab, ks, curve_sids, best_of, samples, after_scan, detail)
            for k in ks:
                trad[k].append(statistics.median(min(traditional(sides["full"].conn, sid, k) for _ in range(best_of))
                                                 for sid in curve_sids))
        sides["half"].close()
        t = time.perf_counter()
        sides["none"] = Side.open(layout(dbs["half"], 0))  # the half archive with its indexes dropped
        detail["none"] = {"layout": {"recent_chunks": 0, "age_s": time.perf_counter() - t,
                                     "indexed_chunks": sides["none"].indexed()}}
        for _ in range(args.curve_rounds):
            curve_pass(sides["none"], "none", ks, curve_sids, best_of, samples, after_scan, detail)
        for lab in ("none", "full"):
            sides[lab].close()
        curves = {lab: {k: statistics.median(v) for k, v in per.items()} for lab, per in samples.items()}
        curves["traditional"] = {k: statistics.median(v) for k, v in trad.items()}
        after = {lab: statistics.median(v) for lab, v in after_scan.items()}
        fig = plot(ks, curves, inside_limit, info, n)
        data = {"archive": info, "ks": ks, "inside_limit": inside_limit, "curves_s": curves, "target": 1.1,
                "detail": detail, "reps": len(curve_sids), "rounds": args.curve_rounds, "best_of": best_of, "quick": args.quick,
                "samples_s": samples, "smallest_k_after_longest_s": after,
                "smallest_k_after_longest_samples_s": after_scan, "pinned": pinned}
        data = summarize(data)
        md = markdown(data)
        publish(name, data, md, fig, targets=targets(data))
        print(md)
        return exit_code(targets(data))
    finally:
        if not args.keep:
            for db in dbs.values():
                db.drop_schema()


class Side:
    """One archive in one layout, with its connection and prepared query."""

    def __init__(self, arch: Archiver):
        self.arch = arch
        self.chunk_ids = arch.chunk_ids(["log"])
        self.query = arch.prepare(QUERY)
        self.conn = arch.connect()
        self.conn.autocommit = True

    @classmethod
    def open(cls, arch: Archiver) -> Side:
        return cls(arch)

    def indexed(self) -> int:
        return sum(1 for c in self.arch.chunks("log") if c.tier is Tier.RECENT)

    def retrieve(self, sid: int, k: int) -> tuple[float, int, int]:
        return retrieve(self.arch, self.query, self.conn, self.chunk_ids, sid, k)

    def server(self, sid: int, k: int) -> tuple[float, int, int, int]:
        return server_retrieve(self.arch, self.query, self.conn, self.chunk_ids, sid, k)

    def point(self, sids: list[int], k: int, best_of: int, server_best_of: int) -> tuple[float, float, float]:
        """Median over ``sids`` of the best of ``best_of`` runs: client wall time, then
        PostgreSQL's time (best of ``server_best_of``), then the buffers touched."""
        client = statistics.median(min(self.retrieve(sid, k)[0] for _ in range(best_of)) for sid in sids)
        got = [[self.server(sid, k) for _ in range(server_best_of)] for sid in sids]
        return (client, statistics.median(min(r[0] for r in runs) for runs in got),
                statistics.median(runs[-1][3] for runs in got))

    def close(self) -> None:
        self.conn.close()
        self.arch.close()


def curve_pass(side: Side, label: str, ks: list[int], sids: list[int], best_of: int,
               samples: dict, after_scan: dict, detail: dict) -> None:
    """One pass of a layout over every k for the curves (client wall time), each point
    after one discarded pass of its own query; first the smallest k right after the
    longest retrieval."""
    side.retrieve(sids[0], ks[-1])
    after_scan[label].append(statistics.median(min(side.retrieve(sid, ks[0])[0] for _ in range(best_of))
                                               for sid in sids))
    for k in ks:
        for sid in sids:
            side.retrieve(sid, k)
        per_sid = []
        for sid in sids:
            runs = [side.retrieve(sid, k) for _ in range(best_of)]
            per_sid.append(min(r[0] for r in runs))
            found, read = runs[0][1], runs[0][2]
        samples[label][k].append(statistics.median(per_sid))
        detail[label][k] = {"last_found": found, "last_chunks_read": read}
    print(f"  {label}: " + ", ".join(f"k={k}: {samples[label][k][-1] * 1e3:.1f} ms" for k in ks), flush=True)


def plot(ks: list[int], curves: dict, inside_limit: int, info: dict, n: int):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for label, style in (("none", "o-"), ("half", "s-"), ("full", "^-"), ("traditional", "x--")):
        ax.plot(ks, [curves[label][k] * 1e3 for k in ks], style, label={
            "none": "no chunk indexed", "half": "newest half indexed", "full": "every chunk indexed",
            "traditional": "one query, whole table (indexed)"}[label])
    ax.axvline(inside_limit, color="grey", lw=0.8, ls=":")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("k (rows retrieved)")
    ax.set_ylabel("response time (ms)")
    ax.set_title(f"Partial indexing, {info['table_bytes'] / 2**30:.2f} GB in {n} chunks")
    ax.legend(fontsize=8)
    return fig


def summarize(data: dict) -> dict:
    """``data`` (a run's samples, JSON-shaped: k as text) with its ratios and verdict."""
    data = json.loads(json.dumps(data, default=str))
    ks, half, full = data["ks"], data["samples_s"]["half"], data["samples_s"]["full"]
    inside = [k for k in ks if k <= data["inside_limit"]]
    curves = data["curves_s"]
    by_round = {str(k): [h / f for h, f in zip(half[str(k)], full[str(k)], strict=True)] for k in ks}
    ratios = {k: statistics.median(r) for k, r in by_round.items()}  # a slow spell in one round moves it little
    srv = data.get("server_samples_s") or {}
    server_by_round = {k: [h / f for h, f in zip(srv["half"][k], srv["full"][k], strict=True)]
                       for k in srv.get("half", {})}
    blk = data.get("server_blocks") or {}
    blocks_by_round = {k: [h / f for h, f in zip(blk["half"][k], blk["full"][k], strict=True)]
                       for k in blk.get("half", {})}
    server = {"half_over_full_by_round": server_by_round, "blocks_half_over_full_by_round": blocks_by_round,
              "blocks_worst_ratio": max((max(r) for r in blocks_by_round.values()), default=None),
              "blocks_met": verdict(blocks_by_round, data["target"]) if blocks_by_round else None,
              "half_over_full": {k: statistics.median(r) for k, r in server_by_round.items()},
              "worst_inside_ratio": max((statistics.median(r) for r in server_by_round.values()), default=None),
              "met": verdict(server_by_round, data["target"]) if server_by_round else None} if srv else None
    out = {**data, "server": server, "half_over_full": ratios, "half_over_full_by_round": by_round,
           "half_over_full_of_medians": {str(k): curves["half"][str(k)] / curves["full"][str(k)] for k in ks},
           "worst_inside_ratio": max(ratios[str(k)] for k in inside) if inside else None,
           "met": verdict({str(k): by_round[str(k)] for k in inside}, data["target"]) if inside else False}
    if data.get("pinned") and data["pinned"]["ks"]:  # the paired comparison judges (targets)
        p = summarize_pinned(data["pinned"], data["target"])
        out.update(pinned_summary=p, met=p["met"], worst_inside_ratio=p["worst_ratio"])
    return out


def paired_interval(ratios: list[float]) -> dict:
    """The geometric mean of paired rounds' ratios with Student's t 95 % interval (of the
    mean of their logarithms, taken back): a ratio's noise is multiplicative, and a
    round's two sides ran back to back, so the rounds are independent pairs.

    >>> paired_interval([1.0, 1.0, 1.0])
    {'ratio': 1.0, 'ci95': [1.0, 1.0], 'rounds': 3}
    >>> r = paired_interval([0.9, 1.1, 1.0, 1.0])
    >>> round(r["ratio"], 3), [round(x, 3) for x in r["ci95"]]
    (0.997, [0.876, 1.136])
    """
    logs = [math.log(r) for r in ratios]
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return {"ratio": math.exp(mean), "ci95": None, "rounds": len(logs)}
    from scipy.stats import t

    half = float(t.ppf(0.975, len(logs) - 1)) * statistics.stdev(logs) / math.sqrt(len(logs))
    return {"ratio": math.exp(mean), "ci95": [math.exp(mean - half), math.exp(mean + half)], "rounds": len(logs)}


def interval_verdict(per_k: dict[str, dict], goal: float = 1.1) -> bool | None:
    """Met when every k's 95 % interval lies at or under ``goal``, missed when some k's
    lies wholly above it, else None (unresolved).

    >>> interval_verdict({"10": {"ci95": [0.97, 1.04]}, "30": {"ci95": [0.99, 1.08]}})
    True
    >>> interval_verdict({"10": {"ci95": [0.97, 1.04]}, "30": {"ci95": [1.12, 1.3]}})
    False
    >>> interval_verdict({"10": {"ci95": [0.97, 1.15]}}) is None
    True
    """
    out = []
    for stats in per_k.values():
        lo, hi = stats["ci95"] or (0.0, math.inf)
        out.append(True if hi <= goal else False if lo > goal else None)
    if False in out:
        return False
    return True if out and all(out) else None


def summarize_pinned(pinned: dict, goal: float) -> dict:
    """The paired comparison's ratios (JSON-shaped ``pinned``: k as text): per k, for
    PostgreSQL's time and the client's, the rounds' half / full and their
    :func:`paired_interval`; the buffers' half / full, lowest and highest; the verdict
    (:func:`interval_verdict`) on PostgreSQL's time."""
    ks = [str(k) for k in pinned["ks"]]
    out: dict = {}
    for measure in ("server_s", "client_s"):
        half, full = pinned[measure]["half"], pinned[measure]["full"]
        by_round = {k: [h / f for h, f in zip(half[k], full[k], strict=True)] for k in ks}
        out[measure] = {"by_round": by_round, "per_k": {k: paired_interval(r) for k, r in by_round.items()},
                        "median_ms": {lab: {k: statistics.median(pinned[measure][lab][k]) * 1e3 for k in ks}
                                      for lab in ("half", "full")}}
    blocks = {k: [h / f for h, f in zip(pinned["blocks"]["half"][k], pinned["blocks"]["full"][k], strict=True)]
              for k in ks}
    out["blocks"] = {k: [min(r), max(r)] for k, r in blocks.items()}
    per_k = out["server_s"]["per_k"]
    worst = max(ks, key=lambda k: per_k[k]["ratio"])
    out.update(met=interval_verdict(per_k, goal), worst_k=worst, worst_ratio=per_k[worst]["ratio"],
               worst_ci95=per_k[worst]["ci95"],
               highest_upper=max((s["ci95"] or [0, math.inf])[1] for s in per_k.values()))
    return out


def verdict(by_round: dict[str, list[float]], goal: float = 1.1) -> bool | None:
    """Met when every k's interval lies at or under ``goal``; missed when some k's lies
    wholly above it; else None (unresolved): :func:`bench.harness.verdict` of each k.
    A k's interval runs from the lowest to the highest of its rounds' half / full
    ratios: with n rounds it holds that k's median ratio with probability
    1 - 2 ** (1 - n) (97 % for 6), whatever the noise's shape.

    >>> verdict({"10": [1.02, 0.99, 0.88, 0.98, 1.73, 1.12]}) is None
    True
    >>> verdict({"10": [0.95, 1.05], "30": [1.2, 1.3]})
    False
    >>> verdict({"10": [0.95, 1.05], "30": [1.0, 1.1]})
    True
    """
    per_k = [harness_verdict(r, goal, at_least=False) for r in by_round.values()]
    if False in per_k:
        return False
    return True if all(v is True for v in per_k) else None


def markdown(data: dict) -> str:
    """The BENCHMARKS.md section of a summarized run (:func:`summarize`)."""
    if data.get("pinned_summary"):
        return _pinned_markdown(data)
    ks, info, curves = data["ks"], data["archive"], data["curves_s"]
    n, half = info["chunks"], data["detail"]["half"]["layout"]["recent_chunks"]
    inside = [k for k in ks if k <= data["inside_limit"]]
    ratios, of_medians, by_round = data["half_over_full"], data["half_over_full_of_medians"], data["half_over_full_by_round"]
    after, met, worst = data["smallest_k_after_longest_s"], data["met"], data["worst_inside_ratio"]
    rows_md = "\n".join(
        f"| {k} | {'yes' if k in inside else 'no'} | {curves['none'][str(k)] * 1e3:.1f} | "
        f"{curves['half'][str(k)] * 1e3:.1f} | {curves['full'][str(k)] * 1e3:.1f} | "
        f"{curves['traditional'][str(k)] * 1e3:.1f} | {ratios[str(k)]:.2f} | "
        f"{min(by_round[str(k)]):.2f}-{max(by_round[str(k)]):.2f} | {of_medians[str(k)]:.2f} |" for k in ks)
    word = {True: "met", False: "missed", None: "unresolved"}[met]
    rounds = data["rounds"]
    return (
        f"### Moirae figure 7: partial indexing{' (quick)' if data.get('quick') else ''}\n\n"
        f"{info['table_bytes'] / 2**20:.0f} MB archive ({info['rows']:,} rows) in {n} chunks of "
        f"{info['chunk_bytes_mean'] / 2**20:.1f} MB, loaded through the Archiver in {info['load_s']:.0f} s. "
        f"Fetch k rows with `sid = :sid` (about {MATCHES_PER_CHUNK} per chunk), newest chunk first, one "
        f"history-query per chunk, stopping at k; per point the median over {data['reps']} sid values of the best of "
        f"{data['best_of']} runs, then the median over {rounds} rounds, the layouts in balanced orders "
        f"(bench.harness.run_orders); warm cache. Layouts are the Archiver's tiers: R = 0, R = {half} (newest half "
        f"indexed) and R = {n}. The indexed half holds >= {data['inside_limit']} matches per sid. Times in ms.\n\n"
        "| k | inside indexed half | none indexed | half indexed | fully indexed | traditional (one query) "
        "| half / full (median of the rounds' ratios) | rounds' ratios, lowest-highest | ratio of medians |\n"
        "|---|---|---|---|---|---|---|---|---|\n" + rows_md + "\n\n"
        + (f"**Worst half / full inside the indexed half = {worst:.2f}**, target <= 1.10: **{word}**. "
           f"A k's ratio is the median over rounds of each round's own ratio, as the layouts of a round run "
           f"seconds apart (the worst ratio of medians is "
           f"{max(of_medians[str(k)] for k in inside):.2f}). " if inside else
           "**No k lies inside the indexed half** (the archive is too small): **missed**. ")
        + f"The verdict takes each k's lowest and highest round "
        f"(an interval holding its median ratio with probability {1 - 2 ** (1 - rounds):.0%}): met when every "
        f"interval lies at or under 1.10, missed when one lies above it, unresolved otherwise.\n\n"
        + _server_md(data) +
        f"Each point is measured after one discarded pass of its own query. Measured instead right after "
        f"the layout's longest retrieval (k = {ks[-1]}, which reads the unindexed half sequentially in the "
        f"half layout), k = {ks[0]} takes {after['half'] * 1e3:.2f} ms half indexed against "
        f"{after['full'] * 1e3:.2f} ms fully indexed ({after['half'] / after['full']:.2f}x; "
        f"{after['none'] * 1e3:.2f} ms with no index). A slowdown there is a cost of partial indexing "
        "that the warm points above leave out: small queries that follow a long scan of unindexed chunks."
    )


def _pinned_markdown(data: dict) -> str:
    """The section of a run with the paired comparison (:func:`summarize_pinned`)."""
    ks, info, curves, p = data["ks"], data["archive"], data["curves_s"], data["pinned_summary"]
    n, half = info["chunks"], data["detail"]["half"]["layout"]["recent_chunks"]
    pin = data["pinned"]
    inside = [str(k) for k in pin["ks"]]
    curve_rows = "\n".join(
        f"| {k} | {'yes' if str(k) in inside else 'no'} | {curves['none'][str(k)] * 1e3:.1f} | "
        f"{curves['half'][str(k)] * 1e3:.1f} | {curves['full'][str(k)] * 1e3:.1f} | "
        f"{curves['traditional'][str(k)] * 1e3:.1f} |" for k in ks)

    def cell(stats: dict) -> str:
        ci = stats["ci95"]
        return f"{stats['ratio']:.3f}" + (f" ({ci[0]:.3f}-{ci[1]:.3f})" if ci else "")

    srv, cli = p["server_s"], p["client_s"]
    pinned_rows = "\n".join(
        f"| {k} | {srv['median_ms']['half'][k]:.2f} | {srv['median_ms']['full'][k]:.2f} | {cell(srv['per_k'][k])} | "
        f"{cli['median_ms']['half'][k]:.2f} | {cli['median_ms']['full'][k]:.2f} | {cell(cli['per_k'][k])} | "
        f"{p['blocks'][k][0]:.3f}-{p['blocks'][k][1]:.3f} |" for k in inside)
    word = {True: "met", False: "missed", None: "unresolved"}[p["met"]]
    cword = {True: "met", False: "missed", None: "unresolved"}[interval_verdict(cli["per_k"], data["target"])]
    ci = p["worst_ci95"]
    after = data["smallest_k_after_longest_s"]
    load2 = info.get("load_s_second_copy")
    return (
        f"### Moirae figure 7: partial indexing{' (quick)' if data.get('quick') else ''}\n\n"
        f"{info['table_bytes'] / 2**20:.0f} MB archive ({info['rows']:,} rows) in {n} chunks of "
        f"{info['chunk_bytes_mean'] / 2**20:.1f} MB, loaded twice through the Archiver (the same rows: "
        f"{info['load_s']:.0f} s{f' and {load2:.0f} s' if load2 else ''}), one copy per layout, so that both "
        f"layouts stand at once. Fetch k rows with `sid = :sid` (about {MATCHES_PER_CHUNK} per chunk), newest "
        f"chunk first, one history-query per chunk, stopping at k. Layouts are the Archiver's tiers: R = {half} "
        f"(newest half indexed) on one copy, R = {n} on the other, and R = 0 (the first copy with its indexes "
        f"dropped, measured last). The indexed half holds >= {data['inside_limit']} matches per sid.\n\n"
        f"**The target, k inside the indexed half: half / fully indexed <= 1.10, judged by PostgreSQL's time "
        f"per retrieval.** Each chunk's history-query, rendered, bound and set up as `archive.history.run` "
        f"runs it, under `EXPLAIN (ANALYZE, BUFFERS, TIMING OFF)`: planning + execution, summed over the chunks "
        f"read. That is the time the layouts can change; the client's Python, driver and round trips per chunk "
        f"are the same code for both and only add a shared host's noise. {pin['rounds']} paired rounds, the "
        f"two layouts back to back for each k (who goes first alternates by round and by k); a point is the "
        f"median over {pin['reps']} sid values of the best of {pin.get('server_best_of', pin['best_of'])} (client: "
        f"{pin['best_of']}), after one discarded pass of every "
        f"query. A k's ratio is the geometric mean of its rounds' half / full, with Student's t 95 % interval; "
        f"met when every k's interval lies at or under 1.10, missed when one lies wholly above it. Times in ms "
        f"(medians over the rounds).\n\n"
        "| k | PostgreSQL: half | full | half / full (95 % interval) | client wall: half | full "
        "| half / full (95 % interval) | buffers touched: half / full |\n"
        "|---|---|---|---|---|---|---|---|\n" + pinned_rows + "\n\n"
        f"**Worst k = {p['worst_k']}: half / full = {p['worst_ratio']:.3f}"
        + (f" (95 % interval {ci[0]:.3f}-{ci[1]:.3f})" if ci else "")
        + f", target <= 1.10: {word}** (highest upper bound over the k: {p['highest_upper']:.3f}). "
        f"The client's wall time, judged the same way: {cword}. The buffers each plan touched (PostgreSQL's "
        f"work, which no load moves) are equal: the same index scans of the same chunks.\n\n"
        f"The curves (the figure): every k, each layout, client wall time per retrieval, the median over "
        f"{data['rounds']} passes of the median over {data['reps']} sid values, each point after one discarded "
        f"pass of its own query; 'traditional' is one query over the whole fully indexed table, `ORDER BY ts "
        f"DESC LIMIT k`. Times in ms.\n\n"
        "| k | inside indexed half | none indexed | half indexed | fully indexed | traditional (one query) |\n"
        "|---|---|---|---|---|---|\n" + curve_rows + "\n\n"
        f"Measured right after the layout's longest retrieval (k = {ks[-1]}, which reads the unindexed half "
        f"sequentially in the half layout), k = {ks[0]} takes {after['half'] * 1e3:.2f} ms half indexed against "
        f"{after['full'] * 1e3:.2f} ms fully indexed ({after['half'] / after['full']:.2f}x; "
        f"{after['none'] * 1e3:.2f} ms with no index): the cost, if any, of small queries that follow a long scan "
        "of unindexed chunks."
    )


def _server_md(data: dict) -> str:
    """The paragraph on PostgreSQL's own time (:func:`server_retrieve`), if measured."""
    srv = data.get("server")
    if not srv or srv.get("worst_inside_ratio") is None:
        return ""
    cells = "; ".join(f"k={k}: {srv['half_over_full'][k]:.3f} ({min(r):.3f}-{max(r):.3f})"
                      for k, r in srv["half_over_full_by_round"].items())
    word = {True: "met", False: "missed", None: "unresolved"}[srv["met"]]
    bb = srv.get("blocks_half_over_full_by_round") or {}
    work = "; ".join(f"k={k}: {min(r):.3f}-{max(r):.3f}" for k, r in bb.items())
    bword = {True: "met", False: "missed", None: "unresolved"}[srv.get("blocks_met")]
    return (f"PostgreSQL's work per retrieval, the shared buffers each chunk's plan touched (EXPLAIN ANALYZE "
            f"BUFFERS, summed over the chunks read), half / full per k inside the indexed half, lowest-highest "
            f"over the rounds: {work or '-'}. **Work: {bword}** (the target's verdict: it does not move with the "
            f"host's load). "
            f"PostgreSQL's own time per retrieval, each chunk's history-query under EXPLAIN ANALYZE (planning + "
            f"execution, summed over the chunks read), half / full per k inside the indexed half, median of the "
            f"rounds (lowest-highest): {cells}: worst {srv['worst_inside_ratio']:.3f}, {word} by its rounds "
            "(reported: under a loaded host the server's own timing scatters too).\n\n")


def targets(data: dict) -> list[dict]:
    """M fig. 7: recent half indexed costs <= 1.1x the fully indexed archive for k inside it.
    Judged, when the run measured it, on PostgreSQL's work per retrieval: the buffers the
    chunks' plans touched (:func:`server_retrieve`). Inside the indexed half both layouts
    run the same index scans on the same chunks, so any cost of partial indexing shows
    there, and unlike a time it does not scatter with a shared host's load (which
    scattered even the server's own EXPLAIN ANALYZE time 0.55-2.2x on a host at load 30);
    the server's time and the client's wall time are reported beside it."""
    w = data["worst_inside_ratio"]
    inside = [str(k) for k in data["ks"] if k <= data["inside_limit"]]
    what = f"Moirae fig. 7: half / fully indexed, k inside the indexed half ({data['archive']['chunks']} chunks)"
    p = data.get("pinned_summary")
    if p:
        ci = p["worst_ci95"]
        cli = interval_verdict(p["client_s"]["per_k"], data.get("target", 1.1))
        cw = max(s["ratio"] for s in p["client_s"]["per_k"].values())
        return [
            target(f"{what}, PostgreSQL's time per retrieval (EXPLAIN ANALYZE, summed over the chunks read; "
                   f"{data['pinned']['rounds']} paired rounds)", "<= 1.1x",
                   f"{p['worst_ratio']:.3f}x (worst k = {p['worst_k']}"
                   + (f"; 95 % interval {ci[0]:.3f}-{ci[1]:.3f}" if ci else "") + ")",
                   p["met"], "" if p["met"] is not None else "a k's 95 % interval straddles 1.1"),
            target(f"{what}, client wall time", "reported", f"{cw:.3f}x (worst k)", None,
                   "by its 95 % intervals: " + {True: "met", False: "missed", None: "unresolved"}[cli]),
            target(f"{what}, PostgreSQL's work (buffers touched)", "reported",
                   f"{max(r[1] for r in p['blocks'].values()):.3f}x (highest round)", None, ""),
        ]
    by_round = data.get("half_over_full_by_round")
    met = (verdict({k: by_round[k] for k in inside}, data.get("target", 1.1)) if inside else False) if by_round \
        else None  # a result stored before the rounds' ratios: no spread to judge by
    note = ("some k's rounds reach above 1.1, none lie wholly above it: the rounds' noise cannot resolve the target"
            if met is None else "")
    srv = data.get("server")
    out = []
    if srv and srv.get("worst_inside_ratio") is not None:
        sb = srv["half_over_full_by_round"]
        spread = f"rounds {min(min(r) for r in sb.values()):.2f}-{max(max(r) for r in sb.values()):.2f}"
        word = {True: "met", False: "missed"}
        if srv.get("blocks_worst_ratio") is not None:
            bb = srv["blocks_half_over_full_by_round"]
            out.append(target(f"{what}, PostgreSQL's work per retrieval (buffers the chunks' plans touched, "
                              "EXPLAIN ANALYZE BUFFERS)", "<= 1.1x",
                              f"{srv['blocks_worst_ratio']:.3f}x (worst k and round; "
                              f"rounds {min(min(r) for r in bb.values()):.3f}-{max(max(r) for r in bb.values()):.3f})",
                              srv["blocks_met"], "the load-independent measure: the time rows below are reported"))
        out.append(target(f"{what}, PostgreSQL's time per retrieval (EXPLAIN ANALYZE, summed over the chunks read)",
                          "reported" if "blocks_met" in srv else "<= 1.1x",
                          f"{srv['worst_inside_ratio']:.2f}x (worst k; {spread})",
                          None if "blocks_met" in srv else srv["met"],
                          "by its rounds: " + (word.get(srv["met"]) or "unresolved")))
        out.append(target(f"{what}, client wall time", "reported", "-" if w is None else f"{w:.2f}x (worst k)", None,
                          "by its rounds: " + (word.get(met) or "unresolved")))
        return out
    return [target(what, "<= 1.1x", "-" if w is None else f"{w:.2f}x (worst k)", met, note)]


def render(data: dict) -> str:
    """The BENCHMARKS.md section of a stored result."""
    return markdown(data)

if __name__ == "__main__":
    raise SystemExit(main())
