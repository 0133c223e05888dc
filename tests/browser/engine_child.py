"""A real engine on the small cluster scenario in its own process (its own JVM), with
the API and console served, for the browser tests. Prints ``READY <url>`` once every
live query runs, then serves until stdin closes.

``python -m tests.browser.engine_child DSN SCHEMA DATA_DIR`` (from the repository root)
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _settle(get, timeout: float) -> bool:
    """Wait until the query ``get()`` returns has made progress (True) or failed (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        q = get()
        if q.exception() is not None:
            return False
        if q.lastProgress is not None:
            return True
        time.sleep(0.5)
    raise SystemExit(f"live query {get().name} made no progress in {timeout:.0f} s")


def start(engine, tries: int = 10, timeout: float = 120.0) -> None:
    """Start the engine; restart, one at a time (so one Python worker starts at once),
    each live query whose Python worker missed Spark's fixed 10 s connect-back timeout
    (a loaded machine; bench/engine_e2e.py retries the same way)."""
    engine.start()
    pairs = [*(((lambda s=s: s.query), (lambda s=s: engine.sources.start(s))) for s in engine.sources.by_name.values()
               if s.query is not None),  # a source its event-query's read archives has no query of its own
             *(((lambda f=f: f.streaming), (lambda f=f: engine.deploy._start_flow(f)))
               for f in engine.deploy.flows.values())]
    failed = [(get, again) for get, again in pairs if not _settle(get, timeout)]
    for get, again in failed:
        for attempt in range(tries):
            exc = str(get().exception())
            if "connect back" not in exc or attempt == tries - 1:
                print(exc, file=sys.stderr, flush=True)  # whole, Java frames included: the fixture quotes them
                raise SystemExit(f"live query {get().name} failed: {exc.splitlines()[0][:300]}")
            print(f"restarting {get().name} (its Python worker missed the connect-back timeout)",
                  file=sys.stderr, flush=True)
            time.sleep(2)
            again()
            if _settle(get, timeout):
                break


def main() -> None:
    from moirae.api import serve
    from moirae.scenarios import cluster
    from tests.engine_factory import make_engine

    dsn, schema, data = sys.argv[1:4]
    out, sys.stdout = sys.stdout, sys.stderr  # stdout carries only the READY line
    warnings.simplefilter("ignore")
    engine = make_engine((dsn, schema), data,
                         spark={"trigger": "1s", "master": "local[2]"},
                         recall={"feedback_period": 4, "max_concurrent": 2})
    try:
        cluster.deploy(engine, live=True, progress=False, scenario_file=HERE / "cluster_small.yaml")
        start(engine)
        with serve(engine, host="127.0.0.1", port=0) as server:
            print(f"READY {server.url}", file=out, flush=True)
            sys.stdin.read()  # until the test closes our stdin
    finally:
        engine.close()


if __name__ == "__main__":
    main()
