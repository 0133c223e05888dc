"""Similarity Recall at scale (M 3.5 and 4.5.2).

History: 1M past events of one type, ~20 attribute values each, drawn from zipfian
domains per attribute (a few very common hosts, users, processes, ports and
destinations, long tails of rare ones); TF > 1 happens when a context repeats a value.
Chunks of 50k events, newest first; the newest one plays the present tier. For each of
Q new events (drawn from the same distribution) the benchmark

(a) times the first top-10: ``learn_one`` of the new event, a fresh IDF table, scoring
    the present chunk and the newest archived chunk, and merging (target <= 100 ms);
(b) times scoring all chunks with :class:`similarity.QueryScorer` (IDF applied at query
    time: dot products and norms) against a *bare* scipy sparse mat-vec ``W @ q`` over
    the same TF-IDF matrix, precomputed, per chunk, in the same run (target: ratio
    bare/ours >= 0.5). "Cold" is the real case: every new event is learned first, so
    its IDF table is new and every chunk's norms are computed. "Warm" scores an event
    with a table whose norms are already remembered on the chunks (events between two
    learns);
(c) checks that the chunked top-10 equals the brute-force top-10 (all history in one
    matrix, scored in one shot, fully sorted), and that its scores agree with an
    independent computation from the TF-IDF matrix.

The history's statistics are loaded as a snapshot (as after a restart); building 1M
dict contexts in Python would only time the data generator. ``learn_many`` and
``ContextChunk.from_contexts`` throughputs are measured on a sample and reported.

Run: ``python -m bench similarity_scale [--quick]`` (quick: 100k events, chunks of 10k;
published as ``similarity_scale_quick``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from bench.harness import exit_code, percentile, publish, target
from similarity import (
    ContextChunk,
    ContextStatistics,
    QueryScorer,
    TopK,
    brute_force,
    search,
)
from similarity.stats import SNAPSHOT_KIND, SNAPSHOT_VERSION

# the code this benchmark measures (bench.harness.staleness)
MEASURES = ("bench/similarity/similarity_scale.py", "similarity")

# attribute -> (domain size, zipf exponent, values per context)
ATTRIBUTES = {
    "host": (2_000, 1.2, 1),
    "user": (5_000, 1.1, 3),
    "proc": (20_000, 1.05, 8),
    "port": (5_000, 1.2, 4),
    "dst": (50_000, 1.0, 3),
    "severity": (5, 0.8, 1),
}
K = 10


@dataclass
class History:
    terms: list[str]
    tf: sp.csr_matrix  # all past events, one row each
    offsets: dict[str, int]
    probs: dict[str, np.ndarray]


def _zipf(size: int, s: float) -> np.ndarray:
    p = np.arange(1, size + 1, dtype=np.float64) ** -s
    return p / p.sum()


def generate(n: int, rng: np.random.Generator) -> History:
    terms: list[str] = []
    offsets, probs = {}, {}
    rows, cols = [], []
    for attr, (size, s, per) in ATTRIBUTES.items():
        offsets[attr] = len(terms)
        probs[attr] = _zipf(size, s)
        terms += [f"{attr}={attr[0]}{r}" for r in range(size)]
        draws = rng.choice(size, size=(n, per), p=probs[attr])
        rows.append(np.repeat(np.arange(n, dtype=np.int32), per))
        cols.append((draws + offsets[attr]).astype(np.int32).ravel())
    r, c = np.concatenate(rows), np.concatenate(cols)
    tf = sp.csr_matrix((np.ones(r.size), (r, c)), shape=(n, len(terms)))
    tf.sum_duplicates()
    return History(terms, tf, offsets, probs)


def new_context(h: History, rng: np.random.Generator) -> list[dict[str, str]]:
    """A new event's context as a bag of tuples (what the Similarity Recall operator gets)."""
    ctx = []
    for attr, (size, _s, per) in ATTRIBUTES.items():
        for r in rng.choice(size, size=per, p=h.probs[attr]):
            ctx.append({"eid": "new", attr: f"{attr[0]}{r}"})
    return ctx


def stats_from(h: History) -> ContextStatistics:
    doc_freq = np.diff(h.tf.tocsc().indptr).astype(int)  # rows containing each term
    return ContextStatistics.restore({
        "kind": SNAPSHOT_KIND, "version": SNAPSHOT_VERSION, "event_type": "bench",
        "config": {"numeric": {}, "ignore": ["eid", "ts"], "log_base": float(np.e)},
        "events": h.tf.shape[0], "terms": h.terms, "doc_freq": doc_freq.tolist(), "numeric": {},
    })


_EVICT = np.zeros(1 << 25)  # 256 MiB


def _evict() -> None:
    """Write a buffer larger than the last-level cache, so no matrix starts cached."""
    np.add(_EVICT, 1.0, out=_EVICT)


def ms(seconds: float) -> float:
    return round(seconds * 1e3, 3)


def run(n: int, chunk_size: int, queries: int, exact_checks: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    t = time.perf_counter()
    hist = generate(n, rng)
    gen_s = time.perf_counter() - t
    stats = stats_from(hist)
    ts = np.arange(n, dtype=np.int64) * 1_000  # ms
    bounds = list(range(0, n, chunk_size))
    t = time.perf_counter()
    chunks = [ContextChunk.from_tf(np.arange(lo, min(lo + chunk_size, n)), ts[lo : lo + chunk_size],
                                   hist.tf[lo : lo + chunk_size]) for lo in bounds]
    build_s = time.perf_counter() - t
    newest_first = chunks[::-1]
    nnz = int(hist.tf.nnz)

    # sample throughputs of the Python-facing paths
    sample = [new_context(hist, rng) for _ in range(min(20_000, n))]
    side = ContextStatistics()
    t = time.perf_counter()
    side.learn_many(sample)
    learn_rate = len(sample) / (time.perf_counter() - t)
    t = time.perf_counter()
    ContextChunk.from_contexts(np.arange(len(sample)), np.arange(len(sample)), sample, side)
    build_rate = len(sample) / (time.perf_counter() - t)

    first_ms, cold_ms, warm_ms, bare_ms, e2e_ms = [], [], [], [], []
    exact_ok, max_diff, checked = True, 0.0, 0
    for qi in range(queries):
        ctx = new_context(hist, rng)
        # (a) time to the first top-10: present + newest chunk, cold table
        _evict()
        t0 = time.perf_counter()
        stats.learn_one(ctx)
        table = stats.table()
        scorer = QueryScorer(table, ctx)
        tracker = TopK(K)
        tracker.offer(scorer.score(newest_first[0]))
        tracker.offer(scorer.score(newest_first[1]))
        first_ms.append(ms(time.perf_counter() - t0))
        # (b) scoring every chunk: the two chunks above remember norms for that table, so
        # the next new event (a new table) measures the cold case over all chunks
        ctx = new_context(hist, rng)
        stats.learn_one(ctx)
        table = stats.table()
        # baseline: bare mat-vec over the same TF-IDF matrix, per chunk
        idf = table.idf_for_columns(len(hist.terms))
        w_chunks = [sp.csr_matrix(c.tf.multiply(idf[None, :])) for c in newest_first]
        qvec = np.zeros(len(hist.terms))
        for term_, tf in table.bag(ctx).terms.items():
            col = table.vocabulary.index(term_)
            if col is not None:
                qvec[col] += tf * idf[col]
        # every timed pass starts with the matrices out of the CPU caches (a 105 MB L3
        # would otherwise favour whichever matrix was touched last)
        _evict()
        t0 = time.perf_counter()
        raw = [w @ qvec for w in w_chunks]
        bare_ms.append(ms(time.perf_counter() - t0))
        _evict()
        scorer = QueryScorer(table, ctx)
        t0 = time.perf_counter()
        all_scores = [scorer.score(c) for c in newest_first]
        cold_ms.append(ms(time.perf_counter() - t0))
        _evict()
        t0 = time.perf_counter()
        for c in newest_first:
            scorer.score(c)
        warm_ms.append(ms(time.perf_counter() - t0))
        t0 = time.perf_counter()
        tracker = TopK(K)
        for s in all_scores:
            tracker.offer(s)
        e2e_ms.append(ms(time.perf_counter() - t0) + cold_ms[-1])
        # (c) exactness
        if qi < exact_checks:
            got = search(table, ctx, newest_first, K)
            want = brute_force(table, ctx, chunks, K)
            exact_ok &= got == want and tracker.items == want.neighbours
            # independent: cosine from the TF-IDF matrix
            row_norm = {}
            for w, c in zip(w_chunks, newest_first, strict=True):
                norms = np.sqrt(np.asarray(w.multiply(w).sum(axis=1)).ravel())
                row_norm.update(zip(c.eids.tolist(), norms.tolist(), strict=True))
            dots = dict(zip(np.concatenate([c.eids for c in newest_first]).tolist(),
                            np.concatenate(raw).tolist(), strict=True))
            qn = float(np.sqrt(qvec @ qvec + sum(
                (tf * table.unknown_idf) ** 2 for t_, tf in table.bag(ctx).terms.items()
                if table.vocabulary.index(t_) is None)))
            for nb in want.neighbours:
                max_diff = max(max_diff, abs(nb.score - dots[nb.eid] / (row_norm[nb.eid] * qn)))
            checked += 1
        del w_chunks

    def med(xs: list[float]) -> float:
        return round(statistics.median(xs), 3)

    per_event = n  # contexts scored per new event
    cold_rate = per_event / (med(cold_ms) / 1e3)
    warm_rate = per_event / (med(warm_ms) / 1e3)
    bare_rate = per_event / (med(bare_ms) / 1e3)
    return {
        "events": n, "chunk_size": chunk_size, "chunks": len(chunks), "nnz": nnz,
        "terms_per_event": round(nnz / n, 2), "vocabulary": len(hist.terms),
        "tf_gt_1": int((hist.tf.data > 1).sum()), "queries": queries, "k": K,
        "generate_s": round(gen_s, 2), "chunk_build_from_tf_s": round(build_s, 2),
        "learn_many_contexts_per_s": round(learn_rate), "from_contexts_per_s": round(build_rate),
        "first_topk_ms": {"median": med(first_ms), "p90": round(percentile(first_ms, 90), 3),
                          "max": max(first_ms), "all": first_ms},
        "score_all_ms": {"cold": med(cold_ms), "warm": med(warm_ms), "bare_matvec": med(bare_ms),
                         "cold_with_topk": med(e2e_ms)},
        "contexts_per_s": {"cold": round(cold_rate), "warm": round(warm_rate), "bare_matvec": round(bare_rate)},
        "ratio_vs_bare": {"cold": round(cold_rate / bare_rate, 3), "warm": round(warm_rate / bare_rate, 3)},
        "exact": {"identical_to_brute_force": bool(exact_ok), "queries_checked": checked,
                  "max_abs_score_diff_vs_independent": max_diff},
        "per_query": {"first_ms": first_ms, "cold_ms": cold_ms, "warm_ms": warm_ms, "bare_ms": bare_ms},
    }


def figure(res: dict):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    pq = res["per_query"]
    x = np.arange(len(pq["first_ms"]))
    ax1.plot(x, pq["first_ms"], "o-", label="first top-10 (present + newest chunk)")
    ax1.plot(x, pq["cold_ms"], "s-", label=f"all {res['chunks']} chunks, cold")
    ax1.plot(x, pq["bare_ms"], "^-", label="bare mat-vec, all chunks")
    ax1.axhline(100, color="grey", ls="--", lw=1, label="target 100 ms")
    ax1.set_xlabel("new event")
    ax1.set_ylabel("ms")
    ax1.set_title(f"{res['events']:,} past events, k={res['k']}")
    ax1.legend(fontsize=8)
    rates = res["contexts_per_s"]
    names = ["bare mat-vec", "scorer (cold)", "scorer (warm)"]
    vals = [rates["bare_matvec"] / 1e6, rates["cold"] / 1e6, rates["warm"] / 1e6]
    ax2.bar(names, vals, color=["grey", "tab:blue", "tab:green"])
    ax2.axhline(rates["bare_matvec"] / 2e6, color="red", ls="--", lw=1, label="target: 0.5 x bare")
    ax2.set_ylabel("million contexts scored / s")
    ax2.set_title("scoring throughput (median)")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    return fig


def markdown(res: dict, name: str) -> str:
    f, r = res["first_topk_ms"], res["ratio_vs_bare"]
    c, ex = res["contexts_per_s"], res["exact"]
    load = [res["load_average"]["before"][0], res["load_average"]["after"][0]]
    ok = lambda b: "met" if b else "**missed**"  # noqa: E731
    return f"""## Similarity Recall at scale (`{name}`)

{res['events']:,} past events of one type, {res['terms_per_event']} terms each (zipfian
values of {len(ATTRIBUTES)} attributes, vocabulary {res['vocabulary']:,}), chunks of
{res['chunk_size']:,}, k = {res['k']}, {res['queries']} new events. Baseline: a bare
scipy CSR mat-vec `W @ q` over the same TF-IDF matrix, per chunk, same run.

| what | measured | target | |
|---|---|---|---|
| first top-10 (learn + IDF table + present + newest chunk) | median {f['median']} ms, p90 {f['p90']} ms, max {f['max']} ms | <= 100 ms | {ok(f['max'] <= 100)} |
| scoring, cold (new IDF table: dots + norms) | {c['cold']:,} contexts/s = {r['cold']} x bare | >= 0.5 x bare | {ok(r['cold'] >= 0.5)} |
| scoring, warm (norms remembered for the table) | {c['warm']:,} contexts/s = {r['warm']} x bare | | |
| bare mat-vec | {c['bare_matvec']:,} contexts/s | baseline | |
| final top-10 == brute force | {ex['identical_to_brute_force']} ({ex['queries_checked']} events; max score diff vs independent {ex['max_abs_score_diff_vs_independent']:.1e}) | identical | {ok(ex['identical_to_brute_force'])} |

The scorer beats a full mat-vec on the dot product because it reads only the new
context's columns of each chunk's CSC matrix; the norms (`TF^2 @ IDF^2`, a full pass
over every entry) are the price of applying the *current* IDF at query time, so the cold
case (one new IDF table per new event) costs about one bare mat-vec plus the column
dots, and sits near the 0.5 target: {r['cold']} here. Events learned together (one
table per micro-batch) get the warm figure. Every timed pass starts with caches evicted.
The machine was shared while measuring (load average {load[0]} before, {load[1]} after,
on {os.cpu_count()} CPUs), so single figures are noisy; medians are reported.
Python-facing paths, for scale: `learn_many` {res['learn_many_contexts_per_s']:,}
contexts/s, `ContextChunk.from_contexts` {res['from_contexts_per_s']:,} contexts/s
(dict parsing). The history's statistics are restored from a snapshot.
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="100k events, chunks of 10k")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)
    if args.quick:
        n, chunk, queries, checks, name = 100_000, 10_000, 8, 3, "similarity_scale_quick"
    else:
        n, chunk, queries, checks, name = 1_000_000, 50_000, 20, 5, "similarity_scale"
    load_before = os.getloadavg()
    res = run(n, chunk, queries, checks, args.seed)
    res["load_average"] = {"before": [round(x, 2) for x in load_before],
                           "after": [round(x, 2) for x in os.getloadavg()]}
    summary = {k: v for k, v in res.items() if k != "per_query"}
    print(summary)
    publish(name, res, markdown(res, name), figure(res), targets=targets(res))
    return exit_code(targets(res))


def targets(data: dict) -> list[dict]:
    """Similarity targets: first top-10 <= 100 ms; scoring >= 0.5 of a bare mat-vec; exact."""
    first, ratio = data["first_topk_ms"]["median"], data["ratio_vs_bare"]["cold"]
    exact = data["exact"]["identical_to_brute_force"]
    n = f"{data['events']:,} past events, prebuilt chunks"
    return [target(f"similarity: first top-10 ({n})", "<= 100 ms median", f"{first:.1f} ms", first <= 100),
            target(f"similarity: scoring vs bare sparse mat-vec ({n})", ">= 0.5x", f"{ratio:.2f}x", ratio >= 0.5),
            target(f"similarity: final top-k vs brute force ({n})", "identical", str(exact), bool(exact))]



def render(data: dict) -> str:
    """The BENCHMARKS.md section of a stored result."""
    return markdown(data, data["benchmark"])

if __name__ == "__main__":
    raise SystemExit(main())
