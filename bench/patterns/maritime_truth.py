"""Maritime ground truth: recall and precision of the behaviour patterns (T Defs. 5.10-5.16).

The maritime scenario (``moirae/sources/maritime.py``) plants each behaviour exactly
(among normal traffic and near misses) and records where: (vessel, behaviour, first
row's time, last row's time). The seven patterns of
``moirae.sources.maritime_patterns.BEHAVIOUR_PATTERNS`` run over the same rows; a match
is a true positive when a planted behaviour of its vessel and kind overlaps it in time
(and *exact* when its first and last row times are the planted ones). Per behaviour:
recall = planted found / planted, precision = matches that are planted / matches.

Through which path: ``--path engine`` runs the patterns as live pattern event-queries of a
Moirae engine (``Engine.pattern_query`` on Spark Structured Streaming, the rows replayed
from a file with ``moirae_replay``, the matches read back from the archived event
streams); ``--path matcher`` (the default) runs ``moirae.patterns.Matcher`` over the rows
directly. The JSON and the section say which ran.

Targets: recall >= 0.95 and precision >= 0.95 for every behaviour.

Run: ``python -m bench maritime_truth [--quick] [--path engine|matcher]`` (published as
``maritime_truth_quick`` when quick).
"""

from __future__ import annotations

import argparse
import time

import pandas as pd

from bench.harness import exit_code, publish, target
from moirae.sources.maritime import MaritimeConfig, MaritimeScenario
from moirae.sources.maritime_patterns import BEHAVIOUR_PATTERNS
from moirae.sources.maritime_track import BEHAVIOURS

# the code this benchmark measures (bench.harness.staleness)
MEASURES = ("bench/patterns/maritime_truth.py", "moirae/patterns", "moirae/sources/maritime.py",
            "moirae/sources/maritime_track.py", "moirae/sources/maritime_geo.py",
            "moirae/sources/maritime_patterns.py")

GOAL = 0.95


def matcher_matches(rows: pd.DataFrame) -> pd.DataFrame:
    """Every behaviour's matches (``behaviour, vessel_id, start, end``) by the matcher."""
    from moirae.patterns import Matcher, compile_pattern

    rows = rows.assign(row_id=range(len(rows)))
    recs = []
    for name, sql in BEHAVIOUR_PATTERNS.items():
        m = Matcher(compile_pattern(sql, name=name, columns=list(rows.columns)))
        found, states = m.advance_frame({}, rows)
        for st in states.values():
            found.extend(m.finish(st)[0])
        recs += [(name, x.key[0], pd.Timestamp(x.measures["start_ts"]), pd.Timestamp(x.measures["end_ts"]))
                 for x in found]
    return _frame(recs)


def _frame(recs) -> pd.DataFrame:
    df = pd.DataFrame(recs, columns=["behaviour", "vessel_id", "start", "end"])
    for c in ("start", "end"):
        df[c] = pd.to_datetime(df[c], utc=True)
    return df


def score(truth: pd.DataFrame, found: pd.DataFrame) -> dict[str, dict]:
    """Recall, precision and exact-boundary share per behaviour."""
    out = {}
    for b in BEHAVIOURS:
        t = truth[truth["behaviour"] == b]
        f = found[found["behaviour"] == b]
        pairs = t.merge(f, on=["vessel_id"], suffixes=("_t", "_f"))
        overlap = pairs[(pairs["start_f"] <= pairs["end_t"]) & (pairs["end_f"] >= pairs["start_t"])]
        exact = overlap[(overlap["start_f"] == overlap["start_t"]) & (overlap["end_f"] == overlap["end_t"])]
        hit_t = overlap.drop_duplicates(["vessel_id", "start_t"])
        hit_f = overlap.drop_duplicates(["vessel_id", "start_f"])
        out[b] = {"planted": len(t), "matches": len(f), "found": len(hit_t), "true_matches": len(hit_f),
                  "exact": len(exact.drop_duplicates(["vessel_id", "start_t"])),
                  "recall": round(len(hit_t) / len(t), 4) if len(t) else None,
                  "precision": round(len(hit_f) / len(f), 4) if len(f) else None}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench maritime_truth")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--path", choices=("matcher", "engine"), default="matcher")
    ap.add_argument("--vessels", type=int, default=None)
    ap.add_argument("--hours", type=float, default=None)
    args = ap.parse_args(argv)
    name = "maritime_truth_quick" if args.quick else "maritime_truth"
    vessels = args.vessels or (60 if args.quick else 200)
    hours = args.hours or (6.0 if args.quick else 24.0)
    scen = MaritimeScenario(MaritimeConfig(vessels=vessels, hours=hours))
    rows = scen.frame()
    truth, decoys = scen.truth(), scen.decoys()
    t0 = time.perf_counter()
    if args.path == "engine":
        from bench.patterns._maritime_engine import engine_matches

        found = engine_matches(rows)
    else:
        found = matcher_matches(rows)
    secs = time.perf_counter() - t0
    data = {"path": args.path, "vessels": vessels, "hours": hours, "rows": len(rows), "seconds": round(secs, 2),
            "planted": len(truth), "decoys": len(decoys), "decoys_by_behaviour":
            decoys["behaviour"].value_counts().to_dict(), "scores": score(truth, found)}
    ts = targets(data)
    publish(name, data, markdown(data, name), figure(data), targets=ts)
    print(markdown(data, name))
    return exit_code(ts)


def targets(data: dict) -> list[dict]:
    out = []
    for b, s in data["scores"].items():
        for k in ("recall", "precision"):
            v = s[k]
            out.append(target(f"maritime_truth: {k} of {b} ({data['path']})", f">= {GOAL:g}",
                              "no planted behaviour" if v is None else f"{v:.3f}",
                              None if v is None else v >= GOAL))
    return out


def markdown(data: dict, name: str) -> str:
    via = ("live pattern event-queries of a Moirae engine (Spark Structured Streaming, matches read back "
           "from the archive)" if data["path"] == "engine" else
           "`moirae.patterns.Matcher` over the rows directly (not the Spark engine path)")
    lines = [f"## Patterns: maritime ground truth (`{name}`)", "",
             f"The maritime scenario's {data['rows']:,} rows ({data['vessels']} vessels, {data['hours']:g} h) with "
             f"{data['planted']} planted behaviours (T Defs. 5.10-5.16) and {data['decoys']} near misses; the "
             f"seven behaviour patterns ran through {via} in {data['seconds']:g} s. A match counts when it "
             "overlaps a planted behaviour of its vessel and kind; *exact* when its first and last row are "
             "the planted ones.", "",
             "| behaviour | planted | matches | recall | precision | exact |", "|---|---:|---:|---:|---:|---:|"]
    for b, s in data["scores"].items():
        lines.append(f"| {b} | {s['planted']} | {s['matches']} | {s['recall']} | {s['precision']} | "
                     f"{s['exact']}/{s['planted']} |")
    lines += ["", "Goal: recall and precision >= 0.95 for every behaviour."]
    return "\n".join(lines)


def figure(data: dict):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(data["scores"])
    fig, ax = plt.subplots(figsize=(7, 3.2))
    xs = range(len(names))
    for off, key in ((-0.2, "recall"), (0.2, "precision")):
        ax.bar([x + off for x in xs], [data["scores"][b][key] or 0 for b in names], 0.4, label=key)
    ax.axhline(GOAL, color="grey", linestyle="--", linewidth=1, label=f"goal {GOAL:g}")
    ax.set_xticks(list(xs), names)
    ax.set_ylim(0, 1.05)
    ax.set_title(f"{data['planted']} planted behaviours, {data['rows']:,} rows ({data['path']})")
    ax.legend(loc="lower right")
    fig.tight_layout()
    return fig


def render(data: dict) -> str:
    """The BENCHMARKS.md section of a stored result."""
    return markdown(data, data["benchmark"])


if __name__ == "__main__":
    raise SystemExit(main())
