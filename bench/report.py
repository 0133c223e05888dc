"""Writing benchmark results: JSON, a plot, and a section of BENCHMARKS.md.

Every benchmark calls :func:`publish` once. Sections in BENCHMARKS.md are delimited by
``<!-- bench:NAME -->`` markers, so benchmarks can be re-run one at a time and each only
rewrites its own section.
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


def publish(name: str, data: dict, markdown: str, figure=None) -> Path:
    """Write ``bench/results/NAME.json`` (+ ``NAME.png`` from a matplotlib figure) and
    replace the ``NAME`` section of BENCHMARKS.md with ``markdown``."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    payload = {"benchmark": name, "measured_at": stamp, "machine": machine(), **data}
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
    return out


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
