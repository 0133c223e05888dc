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
    """The order to run ``items`` in at each of ``reps`` repetitions, in cycles of
    ``len(items)`` repetitions (twice that for an odd count): a Williams design. Over
    each cycle every item runs in every position equally often, so a drift that speeds
    later runs up (the JVM's JIT still compiling after the warm-up) favours none of them,
    and right after every other item equally often, so a run that leaves the next one
    slower (the JIT recompiling code another configuration's types deoptimized) does not
    always hit the same one.

    A plain rotation balances positions but not successors: each item always follows
    the same one. In bench/provenance.py's rotation of (np, backward, ank1, ankn) the
    no-provenance run followed ANK-N in 9 of 12 repetitions, backward in none, and
    no-provenance came out the slower of the two (2026-11-25 and -27). Normalized by
    its repetition's mean, a run right after ANK-N was 2-6 % slower than one that was
    not (12 repetitions in mirrored rotations, 2026-11-27; nothing of ANK-N's kept
    running after it: 0.1-0.2 core-seconds over the next 4 idle seconds). Alternated in one JVM, the JIT's
    CPU falling from 5.7 to 1.8 core-seconds a run over eight runs, whichever of the two
    ran second was the faster in 3 of 4 pairs.

    The balance holds over whole cycles only: give ``reps`` a multiple of the cycle.
    fig7_partial_index ran three rounds of its three layouts, half a cycle, in which the
    fully indexed layout ran right after the half indexed one in two rounds of three
    (2026-11-27).

    >>> run_orders("abcd", 4)
    [('a', 'b', 'd', 'c'), ('b', 'c', 'a', 'd'), ('c', 'd', 'b', 'a'), ('d', 'a', 'c', 'b')]
    >>> run_orders("abc", 3)
    [('a', 'b', 'c'), ('b', 'c', 'a'), ('c', 'a', 'b')]
    >>> run_orders("abc", 6)[3:]
    [('c', 'b', 'a'), ('a', 'c', 'b'), ('b', 'a', 'c')]
    """
    items = tuple(items)
    n = len(items)
    base = [(j + 1) // 2 if j % 2 else (n - j // 2) % n for j in range(n)]  # 0, 1, n-1, 2, n-2, ...
    square = [[items[(b + r) % n] for b in base] for r in range(n)]
    cycle = square if n % 2 == 0 else square + [row[::-1] for row in square]
    return [tuple(cycle[rep % len(cycle)]) for rep in range(reps)]


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
        "# Benchmarks\n\nRun all with `make bench`, some with `make bench ARGS=\"NAME ...\"`, one with `python -m bench.NAME`. Each "
        "compares against a baseline measured in the same run, as a ratio.\n"
    )
    pattern = re.compile(rf"<!-- bench:{re.escape(name)} -->.*?<!-- /bench:{re.escape(name)} -->", re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _m: section, text)
    else:
        text = text.rstrip() + "\n\n" + section + "\n"
    BENCHMARKS_MD.write_text(text)
