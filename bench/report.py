"""Writing benchmark results: JSON, a plot, and a section of BENCHMARKS.md.

Every benchmark calls :func:`publish` once, with its targets (:func:`target`), and its
``main`` returns :func:`exit_code` of them, so a missed target fails ``make bench``.
Sections in BENCHMARKS.md are delimited by ``<!-- bench:NAME -->`` markers, so
benchmarks can be re-run one at a time and each only rewrites its own section.

The "Targets at a glance" table is generated from every ``bench/results/*.json``
(:func:`write_glance`, also ``python -m bench.report``), never typed: a full run's
figures are shown where one exists, else the quick run's, marked as such.
"""

from __future__ import annotations

import json
import os
import platform
import re
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
BENCHMARKS_MD = ROOT / "BENCHMARKS.md"


def machine() -> dict:
    """What the numbers were measured on."""
    mem_gib = None
    try:
        import psutil

        mem_gib = round(psutil.virtual_memory().total / 2**30, 1)
    except Exception:  # psutil missing: report without memory
        pass
    return {
        "cpus": os.cpu_count(),
        "memory_gib": mem_gib,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
    }


def run_orders(items, reps: int) -> list[tuple]:
    """The order to run ``items`` in at each of ``reps`` repetitions: rotated by one every
    two repetitions, and each second repetition the mirror of the first. Within each such
    pair of repetitions, every two items run once in each order and every item's mean
    position is the same, so a drift that speeds each run up a little (the JVM's JIT is
    still compiling after the warm-up) favours none of them.

    A plain rotation does not do this with three items or more: each item runs just
    before its neighbour in the list in all but one of every ``len(items)``
    repetitions. bench/provenance.py's no-provenance configuration ran before the
    backward one in 9 of its 12 repetitions that way, and slower than it in 8
    (2026-11-27). Alternated in one JVM, the JIT's CPU falling from 5.7 to 1.8
    core-seconds a run over eight runs, whichever of the two ran second was the faster
    in 3 of 4 pairs.

    >>> run_orders("abc", 4)
    [('a', 'b', 'c'), ('c', 'b', 'a'), ('b', 'c', 'a'), ('a', 'c', 'b')]
    >>> orders = run_orders(range(4), 8)
    >>> sum(o.index(0) < o.index(1) for o in orders), sum(o.index(0) for o in orders) == sum(o.index(3) for o in orders)
    (4, True)
    """
    items = tuple(items)
    out = []
    for rep in range(reps):
        k = (rep // 2) % len(items)
        order = items[k:] + items[:k]
        out.append(order if rep % 2 == 0 else order[::-1])
    return out


def target(what: str, goal: str, measured: str, met: bool | None, note: str = "") -> dict:
    """One target of a benchmark: ``met`` is True, False (missed), or None when the run
    cannot tell (e.g. its baseline came out slower than the thing measured: noise)."""
    return {"what": what, "target": goal, "measured": measured, "met": met, "note": note}


def exit_code(targets: list[dict]) -> int:
    """1 when any target was missed, else 0 (a benchmark ``main`` returns this)."""
    return 1 if any(t.get("met") is False for t in targets) else 0


def publish(name: str, data: dict, markdown: str, figure=None, targets: list[dict] | None = None) -> Path:
    """Write ``bench/results/NAME.json`` (+ ``NAME.png`` from a matplotlib figure),
    replace the ``NAME`` section of BENCHMARKS.md with ``markdown``, and regenerate the
    at-a-glance table from every result's ``targets``."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    payload = {"benchmark": name, "measured_at": stamp, "machine": machine(), **data}
    if targets is not None:
        payload["targets"] = targets
    out = RESULTS / f"{name}.json"
    out.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    plot_line = ""
    if figure is not None:
        png = RESULTS / f"{name}.png"
        figure.savefig(png, dpi=110, bbox_inches="tight")
        plot_line = f"\n![{name}](bench/results/{name}.png)\n"
    m = payload["machine"]
    section = (
        f"<!-- bench:{name} -->\n{markdown.strip()}\n{plot_line}\n"
        f"_Measured {stamp} on {m['cpus']} CPUs, {m['memory_gib']} GiB, Python {m['python']}; "
        f"raw figures in `bench/results/{name}.json`._\n<!-- /bench:{name} -->"
    )
    _replace_section(name, section)
    write_glance()
    return out


def _status(t: dict) -> str:
    met = t.get("met")
    if met is None and t.get("target") == "reported":  # a figure asked for, with no goal to meet
        word = "reported"
    else:
        word = "met" if met else ("**missed**" if met is False else "**unresolved**")
    return f"{word}: {t['note']}" if t.get("note") else word


def _targets_of(payload: dict) -> list[dict]:
    """A result's targets: stored by publish, or derived by its module's ``targets(data)``
    for results written before targets were stored."""
    if "targets" in payload:
        return payload["targets"]
    base = payload.get("benchmark", "").removesuffix("_quick")
    try:
        import importlib

        fn = getattr(importlib.import_module(f"bench.{base}"), "targets", None)
    except Exception:  # a result without a module (renamed benchmark): no targets
        return []
    if fn is None:
        return []
    try:
        return fn(payload)
    except (KeyError, TypeError, ValueError, IndexError) as exc:  # a result older than its module's targets
        return [target(f"`{payload.get('benchmark')}`: stored result predates the benchmark's current targets "
                       f"(missing {exc})", "-", "rerun the benchmark", None)]


def glance_rows() -> list[tuple[str, str, dict]]:
    """(benchmark, measured_at, target) for every target, full runs over quick ones."""
    payloads = {}
    for path in sorted(RESULTS.glob("*.json")):
        try:
            payloads[path.stem] = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
    rows = []
    for name, payload in sorted(payloads.items()):
        if name.endswith("_quick") and name.removesuffix("_quick") in payloads:
            continue
        for t in _targets_of(payload):
            rows.append((name, payload.get("measured_at", "?"), t))
    for name in sorted(_modules_with_targets() - {n.removesuffix("_quick") for n in payloads}):
        rows.append((name, "never", target(f"`{name}`: no stored result", "its targets", "not run yet", None,
                                           note=f"run `python -m bench.{name}`")))
    return sorted(rows, key=lambda r: r[0])


def _modules_with_targets() -> set[str]:
    """Benchmark modules that define ``targets(data)`` (read from source, not imported)."""
    here = Path(__file__).parent
    return {p.stem for p in here.glob("*.py") if not p.stem.startswith("_") and p.stem != "report"
            and "\ndef targets(" in p.read_text()}


def write_glance() -> None:
    """Regenerate the ``<!-- glance -->`` section of BENCHMARKS.md from the results."""
    lines = ["<!-- glance -->", "## Targets at a glance", "",
             "Generated from `bench/results/*.json` by `bench/report.py` (`python -m bench.report`); "
             "a run marked *quick* is a smoke size, not the target's scale.", "",
             "| benchmark | what | target | measured | status |", "|---|---|---|---|---|"]
    for name, stamp, t in glance_rows():
        shown = name.replace("_quick", " *(quick)*")
        lines.append(f"| `{shown}` ({stamp[:10]}) | {t['what']} | {t['target']} | {t['measured']} | {_status(t)} |")
    lines.append("<!-- /glance -->")
    text = BENCHMARKS_MD.read_text() if BENCHMARKS_MD.exists() else "# Benchmarks\n"
    pattern = re.compile(r"<!-- glance -->.*?<!-- /glance -->", re.S)
    block = "\n".join(lines)
    text = pattern.sub(lambda _m: block, text) if pattern.search(text) else text.rstrip() + "\n\n" + block + "\n"
    BENCHMARKS_MD.write_text(text)


if __name__ == "__main__":
    write_glance()


def _replace_section(name: str, section: str) -> None:
    text = BENCHMARKS_MD.read_text() if BENCHMARKS_MD.exists() else (
        "# Benchmarks\n\nRun all with `make bench`, one with `python -m bench.NAME`. Each "
        "compares against a baseline measured in the same run, as a ratio.\n"
    )
    pattern = re.compile(rf"<!-- bench:{re.escape(name)} -->.*?<!-- /bench:{re.escape(name)} -->", re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _m: section, text)
    else:
        text = text.rstrip() + "\n\n" + section + "\n"
    BENCHMARKS_MD.write_text(text)
