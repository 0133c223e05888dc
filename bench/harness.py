"""The harness every benchmark shares: timing, rounds and their orders, percentiles,
verdicts, and writing a result (JSON naming the commit it measured, a plot, a section of
BENCHMARKS.md, the glance table).

Every benchmark calls :func:`publish` once, with its targets (:func:`target`), and its
``main`` returns :func:`exit_code` of them, so a missed target fails ``make bench``.
Sections in BENCHMARKS.md are delimited by ``<!-- bench:NAME -->`` markers, so
benchmarks can be re-run one at a time and each only rewrites its own section.

A benchmark module declares the source paths it measures in ``MEASURES`` (a tuple of
literal paths, files or folders, relative to the repository). A result records the
commit it was measured at (:func:`commit`); the glance table marks it stale when those
paths changed since (:func:`staleness`), and a result with no commit is stale.

A target is met only when the whole spread of its rounds lies on the right side of its
goal (:func:`verdict`); a spread that straddles the goal leaves it unresolved, and the
glance table counts it as open, as a miss is.

The "Targets at a glance" table is generated from every ``bench/results/*.json``
(:func:`write_glance`, also ``python -m bench.report``), never typed: a full run's
figures are shown where one exists, else the quick run's, marked as such.
"""

from __future__ import annotations

import ast
import importlib
import json
import math
import os
import platform
import re
import subprocess
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
BENCHMARKS_MD = ROOT / "BENCHMARKS.md"
BENCH = Path(__file__).resolve().parent


# -- measuring ---------------------------------------------------------------------------

def timed(fn: Callable[..., Any], *args, **kwargs) -> tuple[float, Any]:
    """(seconds of wall time, result) of one call of ``fn``.

    >>> seconds, out = timed(sum, [1, 2, 3])
    >>> out, seconds >= 0
    (6, True)
    """
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return time.perf_counter() - t0, out


def percentile(values: Iterable[float], q: float) -> float | None:
    """The ``q``-th percentile (``q`` from 0 to 100) of ``values``, interpolated linearly
    between the two nearest ranks (numpy's default); None for no values.

    >>> percentile([4, 1, 3, 2], 50)
    2.5
    >>> percentile([1, 2, 3, 4, 5], 90)
    4.6
    >>> percentile([7.0], 99), percentile([], 50)
    (7.0, None)
    """
    xs = sorted(float(v) for v in values)
    if not 0 <= q <= 100:
        raise ValueError(f"percentile: q is on a 0-100 scale, not {q}")
    if not xs:
        return None
    pos = (len(xs) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return round(xs[lo] + (xs[hi] - xs[lo]) * (pos - lo), 12)


def run_orders(items, reps: int) -> list[tuple]:
    """The order to run ``items`` in at each of ``reps`` repetitions, in cycles of
    ``len(items)`` repetitions (twice that for an odd count): a Williams design. Over
    each cycle every item runs in every position equally often, so a drift that speeds
    later runs up (the JVM's JIT still compiling after the warm-up) favours none of them,
    and right after every other item equally often, so a run that leaves the next one
    slower (the JIT recompiling code another configuration's types deoptimized) does not
    always hit the same one. A plain rotation balances positions but not successors:
    each item always follows the same one.

    The balance holds over whole cycles only: give ``reps`` a multiple of the cycle.

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


# -- verdicts ----------------------------------------------------------------------------

def target(what: str, goal: str, measured: str, met: bool | None, note: str = "") -> dict:
    """One target of a benchmark: ``met`` is True, False (missed), or None when the run
    cannot tell (its rounds straddle the goal, or its baseline came out slower than the
    thing measured: noise)."""
    return {"what": what, "target": goal, "measured": measured, "met": met, "note": note}


def verdict(rounds: Iterable[float], goal: float, *, at_least: bool = True, exact: bool = False) -> bool | None:
    """Met (True) when every round lies on the right side of ``goal`` (``>= goal`` when
    ``at_least``, else ``<= goal``), missed (False) when every round lies on the wrong
    side, else None: unresolved, the spread straddles the goal. One round has no spread:
    unresolved, unless ``exact`` says the measure has no noise (a count, an equality).

    >>> verdict([0.73, 0.69, 0.71, 0.72], 0.7) is None  # one round under the goal
    True
    >>> verdict([0.73, 0.71], 0.7), verdict([0.58, 0.61], 0.7)
    (True, False)
    >>> verdict([201_936], 200_000) is None, verdict([0], 0, at_least=False, exact=True)
    (True, True)
    """
    xs = [float(x) for x in rounds]
    if not xs or (len(xs) == 1 and not exact):
        return None
    right = [x >= goal if at_least else x <= goal for x in xs]
    if all(right):
        return True
    return False if not any(right) else None


def spread_note(rounds: Iterable[float], goal: float) -> str:
    """Why a verdict is unresolved, for a target's note ('' when it is not).

    >>> spread_note([0.69, 0.73], 0.7)
    'the rounds (0.69-0.73) straddle 0.7'
    >>> spread_note([0.554], 0.5)
    'one run: no spread to judge by'
    """
    xs = [float(x) for x in rounds]
    if len(xs) == 1:
        return "one run: no spread to judge by"
    lo, hi = min(xs), max(xs)
    return f"the rounds ({lo:.3g}-{hi:.3g}) straddle {goal:g}" if lo < goal <= hi or lo <= goal < hi else ""


def exit_code(targets: list[dict]) -> int:
    """1 when any target was missed, else 0 (a benchmark ``main`` returns this)."""
    return 1 if any(t.get("met") is False for t in targets) else 0


# -- the commit a result measured ----------------------------------------------------------

def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    # not strip(): a porcelain status line starts with a space (" M path")
    return out.stdout.rstrip() if out.returncode == 0 else None


def commit(paths: Iterable[str] = ()) -> dict | None:
    """The commit checked out (``git rev-parse HEAD``) and whether the tree was dirty;
    with the measured ``paths``, those of them with uncommitted changes and their
    content's fingerprint, so a result measured before its code was committed can be
    matched with the commit that holds that code. None outside a git checkout."""
    sha = _git("rev-parse", "HEAD")
    if sha is None:
        return None
    status = _git("status", "--porcelain", "--untracked-files=no") or ""
    out = {"sha": sha, "dirty": bool(status)}
    paths = list(paths)
    if paths:
        dirty = _git("status", "--porcelain", "--", *paths) or ""
        out["dirty_measured"] = sorted(line[3:].split(" -> ")[-1] for line in dirty.splitlines())  # a rename: its new path
        if out["dirty_measured"]:
            out["measured_fingerprint"] = _worktree_fingerprint(paths)
    return out


def _worktree_fingerprint(paths: list[str]) -> str | None:
    files = (_git("ls-files", "--cached", "--others", "--exclude-standard", "--", *paths) or "").split()
    files = [f for f in sorted(set(files)) if (ROOT / f).is_file()]
    blobs = _git("hash-object", "--", *files) if files else ""
    return None if blobs is None else _digest(zip(files, blobs.split(), strict=True))


def _head_fingerprint(paths: list[str]) -> str | None:
    tree = _git("ls-tree", "-r", "HEAD", "--", *paths)
    if tree is None:
        return None
    return _digest(sorted((line.split("\t", 1)[1], line.split()[2]) for line in tree.splitlines()))


def _digest(pairs) -> str:
    import hashlib

    return hashlib.sha1("\n".join(f"{p} {b}" for p, b in pairs).encode()).hexdigest()


@cache
def measured_paths(name: str) -> tuple[str, ...] | None:
    """The paths benchmark ``name`` (or ``name_quick``, or a result ``name_PART`` that
    module writes) declares in ``MEASURES``, read from its source without importing it;
    None when it declares none."""
    base = name.removesuffix("_quick")
    while (path := module_file(base)) is None and "_" in base:  # engine_jvm_soak: written by engine_jvm
        base = base.rsplit("_", 1)[0]
    if path is None:
        return None
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "MEASURES" for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    return None


def staleness(payload: dict, paths: tuple[str, ...] | None) -> str:
    """Why a stored result no longer measures the code it names ('' when it does): no
    commit recorded, no measured paths declared, or those paths changed since; for a
    result that keeps parts of earlier runs (``workloads``, each with its own commit),
    the first stale part. A result with no commit also says whether its code changed
    since the commit that stored it."""
    parts = payload.get("workloads") if isinstance(payload.get("workloads"), dict) else {}
    for part, figures in parts.items():  # parts measured in earlier runs, kept beside this run's
        if isinstance(figures, dict) and "commit" in figures and figures["commit"] != payload.get("commit"):
            if why := staleness({"benchmark": payload.get("benchmark"), "commit": figures["commit"]}, paths):
                return f"{part}: {why}"
    c = payload.get("commit") or {}
    sha = c.get("sha")
    if not sha:
        stored = _git("log", "-1", "--format=%H", "--", f"bench/results/{payload.get('benchmark')}.json")
        since = (_git("log", "--format=%h", f"{stored}..HEAD", "--", *paths) or "").split() if stored and paths else []
        return "no commit recorded" + (f"; its code changed in {len(since)} commits after the one that stored it"
                                       if since else "")
    if not paths:
        return "its benchmark declares no measured paths"
    if _git("merge-base", "--is-ancestor", sha, "HEAD") is None:
        return f"measured at {sha[:7]}, not in this history"
    changed = (_git("log", "--format=%h", f"{sha}..HEAD", "--", *paths) or "").split()
    if c.get("dirty_measured"):  # measured before its code was committed: compare the code itself
        if c.get("measured_fingerprint") and c["measured_fingerprint"] == _head_fingerprint(list(paths)):
            return ""
        return f"measured with uncommitted changes to {', '.join(c['dirty_measured'][:3])} at {sha[:7]}"
    if changed:
        return f"code changed since {sha[:7]} ({len(changed)} commit{'s' if len(changed) > 1 else ''}, last {changed[0]})"
    return ""


# -- writing a result --------------------------------------------------------------------

def publish(name: str, data: dict, markdown: str, figure=None, targets: list[dict] | None = None) -> Path:
    """Write ``bench/results/NAME.json`` (+ ``NAME.png`` from a matplotlib figure), with
    the commit measured, replace the ``NAME`` section of BENCHMARKS.md with
    ``markdown``, and regenerate the at-a-glance table from every result's targets."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    payload = {"benchmark": name, "measured_at": stamp, "commit": commit(measured_paths(name) or ()),
               "machine": machine(), **data}
    if targets is not None:
        payload["targets"] = targets
    out = RESULTS / f"{name}.json"
    out.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    if figure is not None:
        figure.savefig(RESULTS / f"{name}.png", dpi=110, bbox_inches="tight")
    replace_section(name, section(name, payload, markdown, figure is not None or (RESULTS / f"{name}.png").exists()))
    write_glance()
    return out


def section(name: str, payload: dict, markdown: str, plot: bool) -> str:
    """The BENCHMARKS.md section of a result: its text, its plot, and what it was
    measured on, at which commit."""
    m, c = payload.get("machine") or {}, payload.get("commit") or {}
    at = f" at commit `{c['sha'][:7]}`{' (uncommitted changes)' if c.get('dirty') else ''}" if c.get("sha") else ""
    plot_line = f"\n![{name}](bench/results/{name}.png)\n" if plot else ""
    return (f"<!-- bench:{name} -->\n{markdown.strip()}\n{plot_line}\n"
            f"_Measured {payload.get('measured_at', '?')}{at} on {m.get('cpus')} CPUs, {m.get('memory_gib')} GiB, "
            f"Python {m.get('python')}; raw figures in `bench/results/{name}.json`._\n<!-- /bench:{name} -->")


def replace_section(name: str, text_of_section: str) -> None:
    """Put ``text_of_section`` in place of benchmark ``name``'s section (appended when new)."""
    text = BENCHMARKS_MD.read_text() if BENCHMARKS_MD.exists() else (
        "# Benchmarks\n\nRun all with `make bench`, some with `make bench ARGS=\"NAME ...\"`, one with "
        "`python -m bench.NAME`. Each compares against a baseline measured in the same run, as a ratio.\n")
    pattern = re.compile(rf"<!-- bench:{re.escape(name)} -->.*?<!-- /bench:{re.escape(name)} -->", re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _m: text_of_section, text)
    else:
        text = text.rstrip() + "\n\n" + text_of_section + "\n"
    BENCHMARKS_MD.write_text(text)


# -- the glance table --------------------------------------------------------------------

def module_file(name: str) -> Path | None:
    """The source file of benchmark module ``name`` (``bench/NAME.py`` or
    ``bench/AREA/NAME.py``)."""
    for path in (BENCH / f"{name}.py", *BENCH.glob(f"*/{name}.py")):
        if path.is_file():
            return path
    return None


def module_name(name: str) -> str:
    """The importable name of benchmark module ``name`` (``bench.NAME`` or
    ``bench.AREA.NAME``)."""
    path = module_file(name)
    if path is None:
        return f"bench.{name}"
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def _status(t: dict) -> str:
    met = t.get("met")
    if met is None and t.get("target") == "reported":  # a figure asked for, with no goal to meet
        word = "reported"
    else:
        word = "met" if met else ("**missed**" if met is False else "**unresolved**")
    return f"{word}: {t['note']}" if t.get("note") else word


def targets_of(payload: dict) -> list[dict]:
    """A result's targets, judged again by its module's ``targets(data)`` under the
    current verdict rules; the stored ones when the module has none or cannot read the
    result."""
    base = payload.get("benchmark", "").removesuffix("_quick")
    try:
        fn = getattr(importlib.import_module(module_name(base)), "targets", None)
    except Exception:  # a result without a module (renamed benchmark): its stored targets
        fn = None
    if fn is not None:
        try:
            return fn(payload)
        except (KeyError, TypeError, ValueError, IndexError) as exc:  # a result older than its module's targets
            if "targets" not in payload:
                return [target(f"`{payload.get('benchmark')}`: stored result predates the benchmark's current "
                               f"targets (missing {exc})", "-", "rerun the benchmark", None)]
    return payload.get("targets", [])


def glance_rows() -> list[tuple[str, dict, dict]]:
    """(benchmark, its stored payload, target) for every target, full runs over quick ones."""
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
        if not isinstance(payload, dict) or "benchmark" not in payload:
            continue  # not a result (e.g. the fault tests' records)
        for t in targets_of(payload):
            rows.append((name, payload, t))
    for name in sorted(modules_with_targets() - {n.removesuffix("_quick") for n in payloads}):
        rows.append((name, {"measured_at": "never"},
                     target(f"`{name}`: no stored result", "its targets", "not run yet", None,
                            note=f"run `python -m bench {name}`")))
    return sorted(rows, key=lambda r: r[0])


def modules_with_targets() -> set[str]:
    """Benchmark modules that define ``targets(data)`` (read from source, not imported)."""
    return {p.stem for p in (*BENCH.glob("*.py"), *BENCH.glob("*/*.py"))
            if not p.stem.startswith("_") and p.stem not in ("report", "harness")
            and "\ndef targets(" in p.read_text()}


def write_glance() -> None:
    """Regenerate the ``<!-- glance -->`` section of BENCHMARKS.md from the results."""
    rows, stale_of = glance_rows(), {}
    table = []
    for name, payload, t in rows:
        if name not in stale_of:
            stale_of[name] = staleness(payload, measured_paths(name)) if payload.get("measured_at") != "never" else ""
        shown = name.replace("_quick", " *(quick)*")
        code = f"**stale**: {stale_of[name]}" if stale_of[name] else f"current (`{payload['commit']['sha'][:7]}`)" \
            if payload.get("commit") else "-"
        table.append(f"| `{shown}` ({str(payload.get('measured_at', '?'))[:10]}) | {t['what']} | {t['target']} | "
                     f"{t['measured']} | {_status(t)} | {code} |")
    goals = [t for _, _, t in rows if t.get("target") != "reported"]
    met = sum(1 for t in goals if t.get("met") is True)
    missed = sum(1 for t in goals if t.get("met") is False)
    lines = ["<!-- glance -->", "## Targets at a glance", "",
             "Generated from `bench/results/*.json` by `bench/harness.py` (`python -m bench.report`); "
             "a run marked *quick* is a smoke size, not the target's scale. A target is met only when every "
             "round of its run lies on the right side of it; otherwise it is unresolved, and open. A result "
             "is stale when the code it measures changed since the commit it names, or it names none.", "",
             f"**{len(goals)} targets: {met} met, {len(goals) - met} open ({missed} missed, "
             f"{len(goals) - met - missed} unresolved); {sum(1 for s in stale_of.values() if s)} of "
             f"{len(stale_of)} results stale.**", "",
             "| benchmark | what | target | measured | status | code measured |", "|---|---|---|---|---|---|",
             *table, "<!-- /glance -->"]
    text = BENCHMARKS_MD.read_text() if BENCHMARKS_MD.exists() else "# Benchmarks\n"
    pattern = re.compile(r"<!-- glance -->.*?<!-- /glance -->", re.S)
    block = "\n".join(lines)
    text = pattern.sub(lambda _m: block, text) if pattern.search(text) else text.rstrip() + "\n\n" + block + "\n"
    BENCHMARKS_MD.write_text(text)
