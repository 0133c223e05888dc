"""Run benchmarks: ``python -m bench [NAME ...] [--quick]``, ``python -m bench NAME [OPTION ...]``.

With no NAME, every benchmark runs in turn (``make bench``); with names, only those
(``python -m bench engine_e2e fairness``). A benchmark lives in the subpackage of its
area (``bench/engine/engine_e2e.py``) and is named by its module alone. A name that is
not a benchmark is refused before anything runs: a typo would otherwise start every
benchmark, an hour or more of a shared machine. ``--quick`` applies to every benchmark;
the options of one benchmark (``--rounds 3``) are passed on when it is the only one named.

>>> available()[:3]
['archive_chunks', 'archive_ingest', 'bursts']
>>> chosen(["engine_e2e", "--quick"])
(['engine_e2e'], ['--quick'])
>>> chosen(["engine_e2e", "--rounds", "3"])
(['engine_e2e'], ['--rounds', '3'])
>>> chosen(["engin_e2e"])  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
SystemExit: python -m bench: no benchmark named 'engin_e2e'; there are: archive_chunks, archive_ingest, ..., engine_e2e, ...
>>> chosen(["engine_e2e", "fairness", "--rounds", "3"])
Traceback (most recent call last):
...
SystemExit: python -m bench: only --quick applies to every benchmark; name one benchmark to pass it '--rounds'
>>> module_of("engine_e2e")
'bench.engine.engine_e2e'
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _modules() -> dict[str, str]:
    """Benchmark name -> module: every public module of an area's subpackage."""
    return {p.stem: f"bench.{p.parent.name}.{p.stem}" for p in sorted(HERE.glob("*/*.py"))
            if not p.stem.startswith("_") and (p.parent / "__init__.py").exists()}


def available() -> list[str]:
    """The benchmarks, by name."""
    return sorted(_modules())


def module_of(name: str) -> str:
    """The module that runs benchmark ``name``."""
    return _modules()[name]


def chosen(args: list[str]) -> tuple[list[str], list[str]]:
    """The benchmarks ``args`` name (all when none) and the options passed to each."""
    names, opts, known = [], [], available()
    for a in args:
        if a.startswith("-") or (opts and a not in known):  # an option, or the value of one
            opts.append(a)
        elif a not in known:
            raise SystemExit(f"python -m bench: no benchmark named {a!r}; there are: {', '.join(known)}")
        else:
            names.append(a)
    own = [o for o in opts if o.startswith("-") and o != "--quick"]
    if own and len(names) != 1:
        raise SystemExit(f"python -m bench: only --quick applies to every benchmark; name one benchmark to pass it "
                         f"{own[0]!r}")
    return names or known, opts


def main(argv: list[str] | None = None) -> int:
    names, opts = chosen(sys.argv[1:] if argv is None else argv)
    failed = []
    for name in names:
        print(f"== bench {name} ({module_of(name)})", flush=True)
        if subprocess.call([sys.executable, "-m", module_of(name), *opts]) != 0:
            failed.append(name)
    if failed:
        print(f"benchmarks failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
