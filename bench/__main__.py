"""Run every benchmark: ``python -m bench [--quick]``."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

SKIP = {"report", "__main__"}


def main() -> int:
    quick = ["--quick"] if "--quick" in sys.argv[1:] else []
    names = sorted(m.name for m in pkgutil.iter_modules([str(Path(__file__).parent)]) if m.name not in SKIP
                   and not m.name.startswith("_"))
    failed = []
    for name in names:
        mod = importlib.util.find_spec(f"bench.{name}")
        if mod is None:
            continue
        print(f"== bench.{name}", flush=True)
        if subprocess.call([sys.executable, "-m", f"bench.{name}", *quick]) != 0:
            failed.append(name)
    if failed:
        print(f"benchmarks failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
