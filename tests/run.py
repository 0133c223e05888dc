"""``make test``: the whole suite in two passes of pytest, with one exit status.

1. **Shared**: every test not marked ``alone``, spread over ``MOIRAE_TEST_WORKERS``
   worker processes (pytest-xdist; default 2, ``1`` runs them in this process's
   pytest). Each worker has its own Spark session; all share the two PostgreSQL
   servers, and every test works in a schema of its own. A module's tests stay on one
   worker (``--dist loadfile``), so module fixtures are built once.
2. **Alone**: the tests marked ``alone`` (:data:`tests.areas.ALONE`), one at a time
   after the first pass. They take what every test shares: a Spark standalone cluster
   takes the machine's cores for minutes.

Arguments are pytest's and go to both passes. The exit status is the first pass's
failure if it failed, else the second's; a selection that leaves both passes empty
exits 5 (nothing collected), as plain pytest does, but one empty pass does not fail.
"""

from __future__ import annotations

import os
import subprocess
import sys

NO_TESTS = 5  # pytest's exit status when nothing was collected


def _start_embedded() -> None:
    """Start the embedded server once, before the workers race to start it."""
    if os.environ.get("MOIRAE_TEST_QUICK") == "1":
        return
    from archive.pg import embedded_dsn
    from tests.conftest import TEST_DATA_DIR

    embedded_dsn(TEST_DATA_DIR)


def _pass(part: str, args: list[str]) -> int:
    workers = os.environ.get("MOIRAE_TEST_WORKERS", "2")
    spread = ["-n", workers, "--dist", "loadfile"] if part == "shared" and workers not in ("0", "1") else []
    env = {**os.environ, "MOIRAE_TEST_PART": part}
    print(f"tests/run.py: the {part} pass" + (f" on {workers} workers" if spread else ""), flush=True)
    return subprocess.call([sys.executable, "-m", "pytest", *spread, *args], env=env)


def main(args: list[str]) -> int:
    _start_embedded()
    shared = _pass("shared", args)
    alone = _pass("alone", args)
    if shared == alone == NO_TESTS:
        return NO_TESTS
    for status in (shared, alone):
        if status not in (0, NO_TESTS):
            return status
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
