"""Similarity Recall end to end: the real operator, the Recall Manager and
PostgreSQL, over a history of past events of one type with ~20 context terms each,
at incident level.

Setup: ``--events`` past events (1M; ``--quick`` 100k) in chunks of the configured span
(1 h, ``--per-chunk`` events each), loaded with the Archiver's bulk COPY path. Events
come in incidents: runs of 1-6 consecutive 5-minute windows of one host (20,000 hosts,
so some incidents of a host chain and span chunk boundaries), each with a cause drawn
from 2,000 (Zipf); each event has 5 context tuples of 4 attributes (20 terms) from its
cause with 30% noise. The operator groups by host with a gap of one window (the
engine's default rule). Its statistics are restored from a snapshot computed from the
same rows (learning a million contexts one by one is not what is measured).

Measured, each in this one run:

- **index build**: every chunk's index, cold: ``COPY`` of the chunk's events and
  contexts, vectorised build, encoding and binary ``COPY`` into ``moirae_simindex``
  (contexts/s = past events / wall seconds), with ``--build-threads`` threads and
  connections, ``--build-rounds`` times from scratch (the target holds when every round
  meets it; the other figures are the last round's); also the CPU it took (this process, and the PostgreSQL server's
  processes when it runs on this machine), as contexts per CPU-second, which the other
  load on a shared machine moves less than wall time; and the engine's own path after a
  seal or a materialization: a fresh operator's background builder (one worker thread,
  :mod:`recall.similarity_prebuild`) told of every chunk, timed until done;
- **first top-10**: submission -> the first output of the event (the top-10 of the
  newest chunk), and **whole history**: submission -> the task's final status, for
  ``--probes`` events one at a time, through ``RecallManager.submit``; every other
  probe continues the newest past incident (its host, its context), so the live
  incident's exclusion is exercised;
- **50 concurrent** events submitted together: p99 of their first top-10;
- **memory**: the cache's peak against its budget, and first top-10 again with a budget
  of 1/4 of the whole index (a fresh operator: indexes come back from PostgreSQL);
- **baseline**: the whole history read at once, scikit-learn's ``CountVectorizer`` +
  ``TfidfTransformer`` (together exactly ``TfidfVectorizer``; ``norm='l2'``, the IDF
  flavour the engine is configured with: ``smooth_idf=True`` for ``idf: smooth``, and
  for ``paper`` ``smooth_idf=False`` with its ``+1`` taken off, ``ln(N/df)``) and
  ``linear_kernel``, then the same incident grouping (:func:`similarity.incidents.group`
  over the whole history and the live event, the live incident dropped, each incident
  represented by its best window). Its top-10 must equal the operator's final top-10:
  same incidents in the same order, same best window, scores within 1e-9. Scores that
  differ only by float rounding (within 1e-9 but not bit-equal) may legitimately swap
  places; such near-tie blocks are compared as sets and counted in the result.

``python -m bench similarity_e2e [--quick]``; exits non-zero when a target is missed.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import threading
import time
from datetime import timedelta
from typing import Any

import numpy as np
import pandas as pd

from archive.streams import StreamSpec
from bench.harness import exit_code, percentile, publish, spread_note, target, verdict
from bench.recall._common import NOW, SPAN, database
from recall.manager import RecallManager
from recall.similarity_recall import STATUS_KEY, SimilarityRecall
from similarity import SimilarityConfig
from similarity.incidents import IncidentRule, group
from similarity.stats import SNAPSHOT_KIND, SNAPSHOT_VERSION

MEASURES = (  # the code this benchmark measures (bench.harness.staleness)
    "bench/similarity/similarity_e2e.py", "bench/recall/_common.py", "similarity", "recall", "scheduler",
    "archive",
)

ATTRS = {"user": 3000, "proc": 800, "svc": 200, "path": 5000}
TUPLES, CAUSES, K, HOSTS = 5, 2000, 10, 20_000
WINDOW = timedelta(minutes=5)
RULE = IncidentRule(("host",), WINDOW)


def configured_idf() -> str:
    """The IDF flavour the engine uses by default: ``similarity.idf`` of
    config/moirae.yaml when the key exists, else :class:`similarity.SimilarityConfig`'s."""
    from moirae import config

    return str(getattr(config.load().similarity, "idf", None) or SimilarityConfig().idf)


def generate(n: int, per_chunk: int, seed: int = 7) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``n`` events ending at NOW, about ``per_chunk`` per chunk, in incidents of 1-6
    consecutive windows of one host; contexts of TUPLES tuples from the incident's cause."""
    rng = np.random.default_rng(seed)
    chunks = -(-n // per_chunk)
    total = chunks * SPAN.total_seconds()
    lens = rng.integers(1, 7, n)
    cum = np.cumsum(lens)
    m = int(np.searchsorted(cum, n)) + 1
    lens = lens[:m].copy()
    lens[-1] -= int(cum[m - 1] - n)
    w = WINDOW.total_seconds()
    start = rng.uniform(0, total - 6 * w, m)
    inc = np.repeat(np.arange(m), lens)
    nth = np.arange(n) - np.repeat(np.cumsum(lens) - lens, lens)
    offs = start[inc] + nth * w
    order = np.argsort(offs, kind="stable")
    inc, offs = inc[order], offs[order]
    ts = pd.Timestamp(NOW - chunks * SPAN) + pd.to_timedelta(offs, unit="s")
    eid = np.char.add("p", np.arange(n).astype(str))
    host = np.char.add("h", rng.integers(0, HOSTS, m).astype(str))[inc]
    ev = pd.DataFrame({"ts": ts, "eid": eid, "host": host})
    cause = (rng.zipf(1.3, m) % CAUSES)[inc]
    k = n * TUPLES
    cx = {"ts": np.repeat(ts, TUPLES), "eid": np.repeat(eid, TUPLES)}
    for j, (attr, card) in enumerate(ATTRS.items()):
        base = (np.repeat(cause, TUPLES) * (7 + j) + np.tile(np.arange(TUPLES), n) * 13) % card
        vals = np.where(rng.random(k) < 0.3, rng.integers(0, card, k), base)
        cx[attr] = np.char.add(f"{attr[0]}", vals.astype(str))
    return ev, pd.DataFrame(cx)


def snapshot(op: SimilarityRecall, cx: pd.DataFrame, events: int) -> dict:
    """Statistics of the whole history (E, C_k), as ``ContextStatistics.snapshot`` writes them."""
    terms, counts = [], []
    for attr in ATTRS:
        vc = cx[["eid", attr]].drop_duplicates()[attr].value_counts()
        terms += (attr + "=" + vc.index.astype(str)).tolist()
        counts += vc.to_numpy().tolist()
    return {"stats": {"kind": SNAPSHOT_KIND, "version": SNAPSHOT_VERSION, "event_type": op.event,
                      "config": op.config.to_dict(), "events": int(events), "terms": terms,
                      "doc_freq": [int(x) for x in counts], "numeric": {}}, "learned": []}


def load(arch, ev: pd.DataFrame, cx: pd.DataFrame, batch: int = 500_000) -> float:
    t = time.perf_counter()
    for name, frame in (("ev_x", ev), ("cx_x", cx)):
        for i in range(0, len(frame), batch):
            part = frame.iloc[i:i + batch].copy()
            part["_sid"] = np.arange(i, i + len(part), dtype=np.int64) + (0 if name == "ev_x" else 10**12)
            arch.append(name, i // batch + 1, part, bulk=True)
    return time.perf_counter() - t


class Clock:
    """Per event: the time of its first output and of its final status, and the top-k
    it holds then: ``(incident, past_eid, score, past_ts)``, best first."""

    def __init__(self) -> None:
        self.first: dict[str, float] = {}
        self.done: dict[str, float] = {}
        self.final: dict[str, list[tuple]] = {}
        self.live: dict[str, str] = {}
        self.held: dict[str, dict[str, tuple]] = {}
        self.cond = threading.Condition()

    def __call__(self, out) -> None:
        now = time.perf_counter()
        with self.cond:
            self.first.setdefault(out.eid, now)
            if out.key == STATUS_KEY:
                if out.kind.value == "delete" or out.row.get("status") == "partial":
                    return
                self.done[out.eid] = now
                self.live[out.eid] = out.row.get("live_incident")
                held = self.held.get(out.eid, {})
                self.final[out.eid] = sorted(held.values(), key=lambda x: (-x[2], -pd.Timestamp(x[3]).value, x[0]))
                self.cond.notify_all()
            elif "past_eid" not in out.row:
                return
            elif out.kind.value == "delete":
                self.held.setdefault(out.eid, {}).pop(out.key, None)
            else:
                r = out.row
                self.held.setdefault(out.eid, {})[out.key] = (r["incident"], r["past_eid"], r["score"], r["past_ts"])

    def wait(self, eids: list[str], timeout: float = 900.0) -> None:
        with self.cond:
            if not self.cond.wait_for(lambda: all(e in self.done for e in eids), timeout):
                raise TimeoutError(f"no final status within {timeout} s for {[e for e in eids if e not in self.done]}")


def probes(rng, ev: pd.DataFrame, cx: pd.DataFrame, count: int) -> list[dict]:
    """New events: even ones continue the newest past incident (same host, its context
    with one value changed, a second after it ends), odd ones resemble a random past
    event of a host of their own."""
    out = []
    last = ev.iloc[-1]
    for i in range(count):
        j = len(ev) - 1 if i % 2 == 0 else int(rng.integers(0, len(ev)))
        rows = cx.iloc[j * TUPLES:(j + 1) * TUPLES][list(ATTRS)].to_dict("records")
        rows[0]["user"] = "u-new"
        host = str(last["host"]) if i % 2 == 0 else f"h-new{i}"
        out.append({"host": host, "context": [{a: v} for r in rows for a, v in r.items()]})
    return out


def run_events(mgr, op, clock, events: list[dict], tag: str, together: bool = False) -> list[dict]:
    out, eids = [], []
    for i, e in enumerate(events):
        eid = f"{tag}{i}"
        op.learn_event(eid, e["context"])
        ev = {"eid": eid, "ts": NOW + timedelta(seconds=1 + i), "host": e["host"], "context": e["context"]}
        t0 = time.perf_counter()
        mgr.submit(ev, op.name)
        eids.append((eid, ev["ts"], t0))
        if not together:
            clock.wait([eid])
    clock.wait([e for e, _, _ in eids])
    for (eid, ts, t0), e in zip(eids, events, strict=True):
        out.append({"eid": eid, "ts": ts, "host": e["host"], "first": clock.first[eid] - t0,
                    "whole": clock.done[eid] - t0, "final": clock.final[eid][:K], "live": clock.live[eid]})
    return out


def _copy(db, sql: str) -> pd.DataFrame:
    """A whole query through COPY and Arrow's CSV reader (the baseline's one read)."""
    import pyarrow.csv as pacsv

    buf = io.BytesIO()
    with db.connection() as conn, conn.cursor() as cur:
        cur.copy_expert(f"COPY ({sql}) TO STDOUT WITH (FORMAT csv, HEADER true)", buf, size=1 << 22)
    buf.seek(0)
    return pacsv.read_csv(buf).to_pandas()


class Baseline:
    """One-shot similarity over the whole history (module doc), fitted once; ``top``
    then answers for one new event given what the engine had learned before it."""

    def __init__(self, db, idf: str) -> None:
        from sklearn.feature_extraction.text import CountVectorizer

        self.idf = idf
        t0 = time.perf_counter()
        cx = _copy(db, "SELECT eid, " + ", ".join(f'"{a}"' for a in ATTRS) + " FROM cx_x")  # "user" unquoted is current_user
        ev = _copy(db, "SELECT eid, host, (extract(epoch FROM ts) * 1000000)::int8 AS us FROM ev_x")
        self.read_seconds = time.perf_counter() - t0
        long = pd.concat([pd.DataFrame({"eid": cx["eid"].to_numpy(), "term": a + "=" + cx[a].astype(str)})
                          for a in ATTRS], ignore_index=True)
        docs = long.groupby("eid", sort=False)["term"].agg(list)
        self.eids = docs.index.to_numpy().astype(str)
        evi = ev.set_index("eid").loc[self.eids]
        self.hosts = evi["host"].astype(str).to_numpy()
        self.ts = evi["us"].to_numpy(dtype=np.int64) * 1000
        self.vec = CountVectorizer(analyzer=lambda d: d, lowercase=False)
        self.docs = docs
        self.fit_seconds = time.perf_counter() - t0 - self.read_seconds

    def top(self, query: dict, learned: list[dict], live: dict) -> tuple[list[tuple], float]:
        """The top-K incidents ``(incident, past_eid, score, past_ts)`` for ``query``
        (learned last), and the seconds it took (the first call also fits the vocabulary)."""
        import scipy.sparse as sp
        from sklearn.feature_extraction.text import TfidfTransformer
        from sklearn.metrics.pairwise import linear_kernel

        t0 = time.perf_counter()
        doc = lambda c: [f"{a}={v}" for d in c for a, v in d.items()]  # noqa: E731
        extra = [doc(e["context"]) for e in learned] + [doc(query["context"])]
        if not hasattr(self, "x"):
            self.vec.fit(list(self.docs.to_numpy()) + extra)
            self.x = self.vec.transform(self.docs.to_numpy())
        known = set(self.vec.vocabulary_)
        if any(t not in known for d in extra for t in d):  # a term first seen in a later probe
            self.vec.fit(list(self.docs.to_numpy()) + extra)
            self.x = self.vec.transform(self.docs.to_numpy())
        xe = self.vec.transform(extra)
        tf = TfidfTransformer(norm="l2", smooth_idf=self.idf == "smooth")
        tf.fit(sp.vstack([self.x, xe]))  # the new event is learned before it is scored (M 3.5)
        if self.idf != "smooth":
            tf.idf_ = tf.idf_ - 1.0  # scikit-learn's ln(N/df) + 1 -> the paper's ln(N/df)
        s = linear_kernel(tf.transform(xe[-1]), tf.transform(self.x)).ravel()
        live_ts = np.int64(pd.Timestamp(live["ts"]).value)
        ids = group(np.append(self.hosts, live["host"]), np.append(self.ts, live_ts).astype("datetime64[ns]"),
                    np.append(self.eids, live["eid"]), RULE)
        live_id = ids[-1]
        frame = pd.DataFrame({"id": ids[:-1], "e": self.eids, "t": self.ts, "s": s})
        frame = frame[(frame["id"] != live_id) & (frame["s"] > 0)]
        best = frame.sort_values(["s", "t", "e"], ascending=[False, False, True]).drop_duplicates("id")
        best = best.sort_values(["s", "t", "id"], ascending=[False, False, True]).head(K)
        out = [(str(i), str(e), float(sc), pd.Timestamp(int(t), tz="UTC").isoformat())
               for i, e, sc, t in best[["id", "e", "s", "t"]].itertuples(index=False)]
        return out, time.perf_counter() - t0


def compare(op: list[tuple], base: list[tuple], tol: float = 1e-9) -> dict:
    """Equal top-k (module doc): same incidents, order, best windows and scores within
    ``tol``; a block of scores within ``tol`` of each other but not bit-equal (float
    rounding differs between the two implementations) is compared as a set."""
    if len(op) != len(base):
        return {"equal": False, "near_tie_blocks": 0, "why": f"{len(op)} results vs {len(base)}"}
    for i, (a, b) in enumerate(zip(op, base, strict=True)):
        if abs(a[2] - b[2]) > tol:
            return {"equal": False, "near_tie_blocks": 0, "why": f"rank {i}: score {a[2]!r} vs {b[2]!r}"}
    blocks, i = 0, 0
    while i < len(base):
        j = i + 1
        while j < len(base) and abs(base[j][2] - base[i][2]) <= tol:
            j += 1
        a, b = op[i:j], base[i:j]
        if j - i > 1 and len({x[2] for x in b}) > 1:
            blocks += 1
            same = {x[:2] for x in a} == {x[:2] for x in b}
        else:
            same = [x[:2] for x in a] == [x[:2] for x in b]
        if not same and j == len(base):  # the last block may be cut at k: only its score is certain
            same = True
        if not same:
            return {"equal": False, "near_tie_blocks": blocks, "why": f"ranks {i}-{j - 1}: {a} vs {b}"}
        i = j
    return {"equal": True, "near_tie_blocks": blocks, "why": ""}


def server_cpu(db):
    """A function giving the CPU seconds the PostgreSQL server's processes have used so
    far (the postmaster, its live children and those it has reaped), when the server
    runs on this machine where its ``postmaster.pid`` can be read; else None."""
    import psutil

    try:
        with db.connection() as conn, conn.cursor() as cur:
            cur.execute("SHOW data_directory")
            pid = int(open(os.path.join(cur.fetchone()[0], "postmaster.pid")).readline())
        pm = psutil.Process(pid)
        pm.cpu_times()
    except Exception:  # noqa: BLE001 (a remote or hidden server: not measured)
        return None

    def now() -> float:
        t = pm.cpu_times()
        total = t.user + t.system + t.children_user + t.children_system
        for child in pm.children(recursive=True):
            try:
                c = child.cpu_times()
                total += c.user + c.system
            except psutil.Error:
                pass
        return total

    return now


def cpu_figures(n: int, python_s: float, server_s: float | None) -> dict:
    """CPU spent on a build (this process, the PostgreSQL server when measured) and the
    contexts per CPU-second: a figure the other load on a shared machine does not move
    the way it moves wall time. The server's share counts all its processes (e.g. a
    checkpoint writing the history just loaded), so it can only overstate the build's."""
    out = {"cpu_python_s": python_s, "cpu_postgres_s": server_s}
    if server_s is not None:
        out["contexts_per_cpu_s"] = n / max(python_s + server_s, 1e-9)
    return out


def background_build(arch, operator, chunks: list[int], n: int, server) -> dict:
    """The engine's own path after chunks are sealed or materialized: a fresh operator's
    :class:`~recall.similarity_prebuild.IndexPrebuilder` (one worker thread) told of every
    chunk, timed until it is done; its indexes are then dropped again."""
    from recall.similarity_prebuild import IndexPrebuilder

    op = operator(256 * 2**20, name="sim_background")
    builder = IndexPrebuilder()
    builder.add(op)
    builder.request(op, chunks)
    c0, s0 = time.process_time(), server() if server else None
    t = time.perf_counter()
    builder.start()
    builder.drain()
    secs = time.perf_counter() - t
    out = {"seconds": secs, "events_per_s": n / secs, "built": builder.built, "failed": builder.failed,
           **cpu_figures(n, time.process_time() - c0, server() - s0 if server else None)}
    builder.close()
    op.source.persisted.clear()
    op.source.close()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--events", type=int)
    ap.add_argument("--per-chunk", type=int, default=10_000)
    ap.add_argument("--probes", type=int, default=20)
    ap.add_argument("--concurrent", type=int, default=50)
    ap.add_argument("--compare", type=int, default=6, help="probes whose top-10 is checked against the baseline")
    ap.add_argument("--build-threads", type=int, default=2)
    ap.add_argument("--build-rounds", type=int, default=3,
                    help="times every index is built from scratch; the build target holds only if every round meets it")
    args = ap.parse_args(argv)
    n = args.events or (100_000 if args.quick else 1_000_000)
    name = "similarity_e2e" if n >= 1_000_000 else "similarity_e2e_quick"
    rng = np.random.default_rng(1)
    idf = configured_idf()
    t = time.perf_counter()
    ev, cx = generate(n, args.per_chunk)
    gen_s = time.perf_counter() - t
    db = database("sime2e")
    from archive.archiver import Archiver
    from archive.settings import ArchiveSettings

    arch = Archiver(db, ArchiveSettings(chunk_span=SPAN, statement_timeout_ms=600_000))
    data: dict[str, Any] = {"events": n, "per_chunk": args.per_chunk, "terms_per_event": TUPLES * len(ATTRS),
                            "idf": idf, "incident_rule": {"keys": list(RULE.keys), "window_s": WINDOW.total_seconds()},
                            "load_average": os.getloadavg()}
    try:
        arch.register_stream(StreamSpec.build("ev_x", "ts", {"eid": "text", "host": "text"}))
        arch.register_stream(StreamSpec.build("cx_x", "ts", {"eid": "text", **{a: "text" for a in ATTRS}}))
        data["load_seconds"] = load(arch, ev, cx)
        with db.connection() as conn, conn.cursor() as cur:
            cur.execute("VACUUM (ANALYZE)")
        print(f"generated {n:,} events in {gen_s:.1f} s, loaded in {data['load_seconds']:.1f} s; idf {idf}", flush=True)
        snap = None

        def operator(budget: int, name: str = "sim") -> SimilarityRecall:
            nonlocal snap
            op = SimilarityRecall(name, event="x", store=arch, event_stream="ev_x", context_streams=["cx_x"],
                                  k=K, feedback_period=None, index_cache_bytes=budget, incidents=RULE, idf=idf)
            snap = snap or snapshot(op, cx, n)
            op.restore(snap)
            return op

        op = operator(64 * 2**30)
        chunks = sorted(arch.chunk_ids(["ev_x", "cx_x"]), reverse=True)
        data["chunks"] = len(chunks)
        data["load_average_build"] = os.getloadavg()
        server = server_cpu(db)
        by_round: list[float] = []
        for r in range(max(1, args.build_rounds)):
            if r:  # every index built again: none persisted, a fresh operator (an empty cache)
                op.source.close()
                with db.connection() as conn, conn.cursor() as cur:
                    cur.execute("DELETE FROM moirae_simindex WHERE operator = %s", (op.name,))
                op = operator(64 * 2**30)
            c0, s0 = time.process_time(), server() if server else None
            t = time.perf_counter()
            op.source.prebuild(chunks, args.build_threads)
            build_s = time.perf_counter() - t
            by_round.append(n / build_s)
            print(f"index build round {r + 1}: {n / build_s:,.0f} contexts/s", flush=True)
        # the last round's figures; the target is judged on every round's
        data["build"] = {"seconds": build_s, "threads": args.build_threads,
                         "events_per_s": statistics.median(by_round), "events_per_s_by_round": by_round,
                         **op.source.stats(), **cpu_figures(n, time.process_time() - c0,
                                                            server() - s0 if server else None)}
        data["build"]["build_only_events_per_s"] = n / max(op.source.build_seconds, 1e-9)
        index_bytes = op.source.cache.held
        data["index_bytes"] = index_bytes
        print(f"index build: {n / build_s:,.0f} contexts/s end to end with {args.build_threads} connection(s) "
              f"(thread-seconds: read {op.source.read_seconds:.1f}, build {op.source.build_seconds:.1f}, save "
              f"{op.source.save_seconds:.1f}); index {index_bytes / 2**20:.0f} MiB in memory; "
              f"{data['build'].get('contexts_per_cpu_s', 0):,.0f} contexts per CPU-second", flush=True)
        data["load_average_background"] = os.getloadavg()
        data["background"] = background_build(arch, operator, chunks, n, server)
        print(f"background build after a seal (one worker, as the engine runs it): "
              f"{data['background']['events_per_s']:,.0f} contexts/s", flush=True)
        queries = probes(rng, ev, cx, args.probes + args.concurrent + 2)
        clock = Clock()
        data["load_average_probes"] = os.getloadavg()
        with RecallManager(arch, max_concurrent=4, on_output=clock, timeout_ms=600_000) as mgr:
            mgr.register(op)
            run_events(mgr, op, clock, queries[:2], "warm")
            single = run_events(mgr, op, clock, queries[2:2 + args.probes], "one")
            many = run_events(mgr, op, clock, queries[2 + args.probes:], "many", together=True)
            data["cache_full"] = op.source.cache.stats()
        print(f"single: first median {statistics.median([r['first'] for r in single]) * 1e3:.0f} ms, whole "
              f"median {statistics.median([r['whole'] for r in single]):.2f} s", flush=True)
        quarter = operator(index_bytes // 4)
        clock_q = Clock()
        with RecallManager(arch, max_concurrent=4, on_output=clock_q, timeout_ms=600_000) as mgr:
            mgr.register(quarter)
            run_events(mgr, quarter, clock_q, queries[:2], "warm")
            small = run_events(mgr, quarter, clock_q, queries[2:2 + args.probes], "one")
            data["cache_quarter"] = quarter.source.cache.stats()
            data["quarter_builds"] = quarter.source.builds
        data["load_average_baseline"] = os.getloadavg()
        base = Baseline(db, idf)
        checks, base_s = [], []
        for i in range(min(args.compare, args.probes)):
            r = single[i]
            top, secs = base.top(queries[2 + i], queries[:2 + i], {"eid": r["eid"], "ts": r["ts"], "host": r["host"]})
            base_s.append(secs + (base.read_seconds + base.fit_seconds if i == 0 else 0.0))
            checks.append({"probe": r["eid"], **compare(r["final"], top), "operator": r["final"], "baseline": top,
                           "live_incident": r["live"]})
    finally:
        arch.close()
        db.drop_schema()
    data["single"] = {"first": [r["first"] for r in single], "whole": [r["whole"] for r in single]}
    data["concurrent"] = {"first": [r["first"] for r in many], "whole": [r["whole"] for r in many]}
    data["quarter"] = {"first": [r["first"] for r in small], "whole": [r["whole"] for r in small]}
    data["baseline"] = {"seconds": base_s[0], "read_seconds": base.read_seconds, "fit_seconds": base.fit_seconds,
                        "per_probe_seconds": base_s[1:]}
    data["top_equal"] = [c["equal"] for c in checks]
    data["near_tie_blocks"] = sum(c["near_tie_blocks"] for c in checks)
    data["checks"] = checks
    data["top_equal_quarter"] = [small[i]["final"] == single[i]["final"] for i in range(len(small))]
    s = summary(data)
    print(s, flush=True)
    for c in checks:
        if not c["equal"]:
            print(f"  {c['probe']}: {c['why']}", flush=True)
    publish(name, data, markdown(data, s), figure(data), targets=targets(data))
    return exit_code(targets(data))


def figure(d: dict):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.6))
    series = [("first top-10, one at a time", d["single"]["first"]),
              ("first top-10, 50 concurrent", d["concurrent"]["first"]),
              ("first top-10, cache 1/4", d["quarter"]["first"]),
              ("whole history, one at a time", d["single"]["whole"])]
    ax.boxplot([np.asarray(v) * 1e3 for _, v in series], orientation="horizontal", tick_labels=[n for n, _ in series])
    ax.axvline(100, ls="--", c="g", lw=1, label="100 ms")
    ax.axvline(2000, ls=":", c="r", lw=1, label="2 s")
    ax.axvline(d["baseline"]["seconds"] * 1e3, ls="-.", c="k", lw=1, label="baseline one-shot")
    ax.set_xscale("log")
    ax.set_xlabel("ms from submission")
    ax.set_title(f"Similarity Recall e2e, {d['events']:,} past events, {d['chunks']} chunks")
    ax.legend(fontsize=7, loc="lower right")
    return fig


def summary(d: dict) -> str:
    f, c, q = d["single"]["first"], d["concurrent"]["first"], d["quarter"]["first"]
    b = d["baseline"]["seconds"]
    return (f"{d['events']:,} past events in {d['chunks']} chunks (idf {d['idf']}); first top-10 median "
            f"{statistics.median(f) * 1e3:.0f} ms, p99 {percentile(f, 99) * 1e3:.0f} ms; whole history median "
            f"{statistics.median(d['single']['whole']):.2f} s, max {max(d['single']['whole']):.2f} s; "
            f"{len(c)} concurrent p99 first {percentile(c, 99) * 1e3:.0f} ms; budget 1/4: first median "
            f"{statistics.median(q) * 1e3:.0f} ms; baseline one-shot {b:.1f} s; index build "
            f"{d['build']['events_per_s']:,.0f} contexts/s; top-10 equal to baseline: "
            f"{sum(d['top_equal'])}/{len(d['top_equal'])}")


def markdown(d: dict, s: str) -> str:
    f, w = d["single"]["first"], d["single"]["whole"]
    b = d["baseline"]["seconds"]
    la = lambda k: f"{d[k][0]:.1f}" if k in d else "?"  # noqa: E731
    rows = [("first top-10, one event at a time", f), ("whole history, one event at a time", w),
            (f"first top-10, {len(d['concurrent']['first'])} concurrent", d["concurrent"]["first"]),
            (f"whole history, {len(d['concurrent']['first'])} concurrent", d["concurrent"]["whole"]),
            ("first top-10, cache budget 1/4 of the index", d["quarter"]["first"]),
            ("whole history, cache budget 1/4 of the index (3/4 of the chunks read back from PostgreSQL)",
             d["quarter"]["whole"])]
    lines = [f"Similarity Recall end to end through the Recall Manager and PostgreSQL: {d['events']:,} past events "
             f"(~{d['terms_per_event']} context terms each, in incidents of 1-6 windows grouped by host) in "
             f"{d['chunks']} chunks of {d['per_chunk']:,}; IDF `{d['idf']}` (the engine's configured default), "
             f"k = 10. Load average (1 min) at start {la('load_average')}, during the build "
             f"{la('load_average_build')}, the probes {la('load_average_probes')}, the baseline "
             f"{la('load_average_baseline')}, on 2 cores shared with other engineers' runs.", "",
             "| measure | median | p99 | max | baseline one-shot | baseline / median |", "|---|---|---|---|---|---|"]
    for what, xs in rows:
        med = statistics.median(xs)
        lines.append(f"| {what} | {med * 1e3:.1f} ms | {percentile(xs, 99) * 1e3:.1f} ms | {max(xs) * 1e3:.1f} ms | "
                     f"{b:.1f} s | {b / med:.0f}x |")
    bd = d["build"]
    bg = d.get("background") or {}
    cpu = lambda x: (f"{x['cpu_python_s']:.1f} CPU-s in Python + {x['cpu_postgres_s']:.1f} in PostgreSQL = "  # noqa: E731
                     f"{x['contexts_per_cpu_s']:,.0f} contexts per CPU-second") if x.get("cpu_postgres_s") is not None \
        else f"{x.get('cpu_python_s', 0):.1f} CPU-s in Python (PostgreSQL's not measured)"
    lines += ["", f"Index build (cold, every chunk: COPY of its events and contexts, vectorised build, encoding, "
              f"binary COPY into `moirae_simindex`), {bd['threads']} threads with a connection each: "
              f"**{bd['events_per_s']:,.0f} contexts/s** = past events / wall seconds"
              + (f", median of {len(bd['events_per_s_by_round'])} builds from scratch (by round: "
                 f"{', '.join(f'{x:,.0f}' for x in bd['events_per_s_by_round'])}); the last took "
                 f"{bd['seconds']:.1f} s; " if bd.get("events_per_s_by_round") else f" ({bd['seconds']:.1f} s); ")
              + f"thread-seconds: read {bd['read_seconds']:.1f}, "
              f"build {bd['build_seconds']:.1f} ({bd['build_only_events_per_s']:,.0f} contexts/s), save "
              f"{bd['save_seconds']:.1f}; {cpu(bd)}."
              + (f" The engine's own path after a seal or a materialization (one background worker, "
                 f"`recall/similarity_prebuild.py`): {bg['events_per_s']:,.0f} contexts/s ({bg['seconds']:.1f} s; "
                 f"{cpu(bg)}; load average {la('load_average_background')})." if bg else "")
              + f" Index {d['index_bytes'] / 2**20:.0f} MiB in memory. Cache with a "
              f"budget of 1/4: peak {d['cache_quarter']['peak'] / 2**20:.0f} MiB of "
              f"{d['cache_quarter']['budget'] / 2**20:.0f} MiB, {d['cache_quarter']['evictions']} evictions, "
              f"{d['quarter_builds']} rebuilds (indexes come back from PostgreSQL); its final top-10 equal to the "
              f"full cache's: {sum(d['top_equal_quarter'])}/{len(d['top_equal_quarter'])}.",
              f"Baseline: the whole history read once through COPY ({d['baseline']['read_seconds']:.1f} s), "
              f"scikit-learn CountVectorizer + TfidfTransformer (= TfidfVectorizer, norm='l2', IDF `{d['idf']}`) "
              f"and linear_kernel, then the same incident grouping; {b:.1f} s for the first probe including the "
              "read and the vocabulary fit.",
              f"Final top-10 equal to the baseline's at incident level (same incidents, order, best windows, scores "
              f"within 1e-9): **{sum(d['top_equal'])}/{len(d['top_equal'])}** probes; near-tie blocks compared as "
              f"sets: {d['near_tie_blocks']}.", "", s]
    return "\n".join(lines)


def targets(d: dict) -> list[dict]:
    f, c, q = d["single"]["first"], d["concurrent"]["first"], d["quarter"]["first"]
    w = d["single"]["whole"]
    build_rounds = d["build"].get("events_per_s_by_round") or [d["build"]["events_per_s"]]  # a result stored before the rounds: one build
    full = d["events"] >= 1_000_000
    note = "" if full else f"quick size ({d['events']:,} events), not the 1M of the target"
    b = d["baseline"]["seconds"] if isinstance(d["baseline"], dict) and "seconds" in d["baseline"] else None
    if isinstance(b, list):
        b = statistics.median(b)
    return [
        target("Similarity e2e: first top-10, median", "<= 100 ms",
               f"{statistics.median(f) * 1e3:.0f} ms (baseline one-shot {b:.1f} s)",
               None if not full else statistics.median(f) <= 0.1, note),
        target("Similarity e2e: first top-10, p99", "<= 300 ms", f"{percentile(f, 99) * 1e3:.0f} ms",
               None if not full else percentile(f, 99) <= 0.3, note),
        target("Similarity e2e: whole history per event", "<= 2 s", f"{statistics.median(w):.2f} s median, "
               f"{max(w):.2f} s max", None if not full else max(w) <= 2.0, note),
        target("Similarity e2e: 50 concurrent, p99 first top-10", "<= 500 ms", f"{percentile(c, 99) * 1e3:.0f} ms",
               None if not full else percentile(c, 99) <= 0.5, note),
        target("Similarity index build", ">= 200,000 contexts/s", f"{d['build']['events_per_s']:,.0f}/s "
               f"(build alone {d['build']['build_only_events_per_s']:,.0f}/s"
               + (f"; {d['build']['contexts_per_cpu_s']:,.0f} per CPU-second" if d["build"].get("contexts_per_cpu_s")
                  else "") + f"; load {d['load_average_build'][0]:.1f})",
               None if not full else verdict(build_rounds, 200_000),
               note or spread_note(build_rounds, 200_000)),
        target("Similarity cache: budget respected; 1/4 budget first top-10 <= 100 ms", "peak <= budget, <= 100 ms",
               f"peak {d['cache_quarter']['peak'] / 2**20:.0f}/{d['cache_quarter']['budget'] / 2**20:.0f} MiB, "
               f"{statistics.median(q) * 1e3:.0f} ms",
               None if not full else d["cache_quarter"]["peak"] <= d["cache_quarter"]["budget"]
               and statistics.median(q) <= 0.1, note),
        target("Similarity e2e: final top-10 = baseline's (incident level)", "equal",
               f"{sum(d['top_equal'])}/{len(d['top_equal'])} equal, {d.get('near_tie_blocks', 0)} near-tie blocks",
               all(d["top_equal"])),
    ]



def render(data: dict) -> str:
    """The BENCHMARKS.md section of a stored result."""
    return markdown(data, summary(data))

if __name__ == "__main__":
    raise SystemExit(main())
