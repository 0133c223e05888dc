"""``moirae run``: the main job.

With ``--monitors PATH`` it deploys the monitor files there (a file or a folder of
``*.yaml``) once the engine runs. Monitors deployed before (``moirae deploy``, an
earlier ``--monitors``) come back at every start (:mod:`moirae.deploy.lifecycle`). The
built-in scenario runs when ``--scenario`` names it, or when there are no monitors
(neither ``--monitors`` nor any deployed before).

It starts the engine on the configured scenario (by default ``cluster``: the Moirae
paper's server cluster, its history loaded into the archive once and its overload
history materialized; ``host``: this machine), deploys the paper's example queries
(M fig. 1-4), serves the HTTP API and console, shows one block per incident with the
current top-k similar past incidents and the norm's latest estimate, refreshed as
revisions arrive (:mod:`moirae.cli.board`), and ends with the final blocks and a
summary.
"""

from __future__ import annotations

import json
import signal
import statistics

from moirae.cli.board import BoardPrinter
from moirae.cli.commands.registry import command
from moirae.read.status_view import render_status


def summary(engine, alerts: int) -> dict:
    tasks = engine.tasks()
    states: dict[str, int] = {}
    for t in tasks:
        if not t.operator.startswith("replica_"):
            states[t.state.value] = states.get(t.state.value, 0) + 1
    lat = engine.alert_latencies()
    status = engine.status()
    return {
        "alerts": alerts,
        "recall_tasks": states,
        "median_alert_to_first_history_s": round(statistics.median(lat), 3) if lat else None,
        "archive": {name: s["chunks"] for name, s in status["streams"].items()},
        "archive_totals": status["totals"],
        "archive_waits": status["live"]["archive_waits"],
    }


def install_sigterm() -> None:
    """Treat SIGTERM like Ctrl-C so `run` stops cleanly and prints its summary."""
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))


def deploy_monitors(engine, path: str | None) -> None:
    """Deploy the monitor files ``path`` names on the started engine (each added, or
    updating the restored one of its name), then list the deployed set."""
    from moirae.cli.commands.monitors import monitor_files

    for f in monitor_files(path) if path else []:
        out = engine.deploy_text(f.read_text(encoding="utf-8"), origin=str(f))
        print(f"moirae: {f}: monitor {out['name']} {out['result']}, version {out['version']}", flush=True)
    for m in engine.monitors():
        print(f"moirae: monitor {m['name']} version {m['version']}: {m['state']}"
              + (f" ({m['error']})" if m.get("error") else ""), flush=True)


@command("run")
def run(args) -> int:
    from moirae import Engine
    from moirae.api import ApiError
    from moirae.api.server import serve
    from moirae.deploy.lifecycle import stored_monitors
    from moirae.scenarios import deploy

    install_sigterm()
    overrides = {"scenario": args.scenario} if args.scenario else {}
    tls = {k: v for k, v in (("tls_cert", args.tls_cert), ("tls_key", args.tls_key)) if v}
    if tls:
        overrides["api"] = tls
    engine = Engine.from_config(args.config, **overrides)
    server = printer = None
    try:
        print(f"moirae: scenario {engine.settings.scenario}; archive schema {engine.settings.postgres.schema}; "
              f"data dir {engine.data_dir}", flush=True)
        if args.scenario or (args.monitors is None and not stored_monitors(engine.db)):
            info = deploy(engine.settings.scenario, engine)
            print(f"moirae: deployed {json.dumps(info, default=str)}", flush=True)
        printer = BoardPrinter(engine).start()
        engine.start()  # brings back the monitors deployed before (moirae_monitors)
        deploy_monitors(engine, args.monitors)
        try:
            server = serve(engine)
            where = f"API and console on {server.url}"
        except ApiError as exc:  # e.g. the port is taken: monitoring goes on without the API
            where = f"no API ({exc})"
        print(f"moirae: {where}; " + ("Ctrl-C to stop" if args.duration is None else
                                      f"streaming for {args.duration:g}s"), flush=True)
        try:
            engine.run_for(args.duration)
        except KeyboardInterrupt:
            print("moirae: stopping", flush=True)
        engine.stop()
        printer.stop()  # the final list of similar incidents, per incident
        result = summary(engine, printer.alerts)
        if args.json:
            print(json.dumps(result, default=str))
        else:
            print(render_status(engine.status()))
            print(f"alerts: {result['alerts']}; recall tasks: {result['recall_tasks']}; median alert to first "
                  f"history: {result['median_alert_to_first_history_s']} s")
    finally:
        if printer is not None and not printer.stopped:
            printer.stop()
        if server is not None:
            server.stop()
        engine.close()
    return 0
