"""Run benchmarks: ``python -m bench [NAME ...] [--quick]``.

With no NAME, every benchmark runs in turn (``make bench``); with names, only those
(``python -m bench engine_e2e fairness``), the same as ``python -m bench.NAME`` for each.
A name that is not a benchmark is refused before anything runs: a typo would otherwise
start every benchmark, an hour or more of a shared machine.

>>> available()[:3]
['archive_chunks', 'archive_ingest', 'cluster_workers']
>>> chosen(["engine_e2e", "--quick"])
(['engine_e2e'], ['--quick'])
>>> chosen(["engin_e2e"])  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
SystemExit: python -m bench: no benchmark named 'engin_e2e'; there are: archive_chunks, archive_ingest, ..., engine_e2e, ...
>>> chosen(["--rounds", "3"])
Traceback (most recent call last):
...
SystemExit: python -m bench: only --quick applies to every benchmark; run python -m bench.NAME for '--rounds'
"""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

SKIP = {"report", "cpu_share", "__main__"}  # the report and a helper, not benchmarks


def available() -> list[str]:
    """The benchmark modules, by name (not helpers: ``_*`` and :data:`SKIP`)."""
    return sorted(m.name for m in pkgutil.iter_modules([str(Path(__file__).parent)])
                  if m.name not in SKIP and not m.name.startswith("_"))


def chosen(args: list[str]) -> tuple[list[str], list[str]]:
    """The benchmarks ``args`` name (all when none) and the options passed to each."""
    names, opts, known = [], [], available()
    for a in args:
        if a == "--quick":
            opts.append(a)
        elif a.startswith("-"):
            raise SystemExit(f"python -m bench: only --quick applies to every benchmark; run python -m bench.NAME for {a!r}")
        elif a not in known:
            raise SystemExit(f"python -m bench: no benchmark named {a!r}; there are: {', '.join(known)}")
        else:
            names.append(a)
    return names or known, opts


def main(argv: list[str] | None = None) -> int:
    names, opts = chosen(sys.argv[1:] if argv is None else argv)
    failed = []
    for name in names:
        print(f"== bench.{name}", flush=True)
        if subprocess.call([sys.executable, "-m", f"bench.{name}", *opts]) != 0:
            failed.append(name)
    if failed:
        print(f"benchmarks failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
