"""``moirae run``: the main job.

It starts the engine on the configured scenario (by default ``cluster``: the Moirae
paper's server cluster, its history loaded into the archive once and its overload
history materialized; ``host``: this machine), deploys the paper's example queries
(M fig. 1-4), serves the HTTP API and console, prints each alert as it fires with its
first similar past events and whether it is within the server's norm, and ends with a
summary.
"""

from __future__ import annotations

import json
import statistics
import threading

from moirae.cli import install_sigterm
from moirae.commands.registry import command
from moirae.status_view import render_status
from recall.api import OutputKind


class AlertPrinter:
    """Prints alerts and their first history from the engine's bus (a console in text)."""

    def __init__(self, engine) -> None:
        self.sub = engine.deploy.manager.bus.subscribe()
        self.shown_similar: set[str] = set()
        self.alerts = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="moirae-alert-printer", daemon=True)

    def start(self) -> AlertPrinter:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sub.close()

    def _loop(self) -> None:
        while not self._stop.is_set():
            item = self.sub.get(timeout=0.5)
            if item is not None:
                self.show(item)

    def show(self, item) -> None:
        if isinstance(item, dict) and item.get("type") == "event":
            self.alerts += 1
            attrs = ", ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in item["attrs"].items())
            ctx = ", ".join(sorted({f"{k}={v}" for t in item["context"] for k, v in t.items()}))
            print(f"ALERT {item['eid']}  {attrs}\n      context: {ctx or '(none)'}", flush=True)
            return
        if isinstance(item, dict):
            return
        if item.operator == "similar" and item.kind is OutputKind.INSERT and item.key != "__status__":
            first = item.eid not in self.shown_similar
            self.shown_similar.add(item.eid)
            res = "; ".join(f"{t.get('resolution', '')}" for rows in item.row.get("surrounding", {}).values()
                            for t in rows if t.get("resolution"))
            print(f"  {'similar' if first else '       '} {item.row['past_eid']} (score {item.row['score']:.2f})"
                  f"{'  resolved: ' + res if res else ''}", flush=True)
        elif item.operator == "norm" and item.kind is OutputKind.INSERT:
            r = item.row
            if r.get("mean_bw") is not None and r.get("sd_bw") is not None:
                print(f"  norm    {item.eid}: mean {r['mean_bw']:.0f} sd {r['sd_bw']:.0f} Mbit/s (first estimate) over "
                      f"{item.covered.start:%Y-%m-%d %H:%M} .. {item.covered.end:%Y-%m-%d %H:%M}", flush=True)


def summary(engine, alerts: int) -> dict:
    tasks = engine.deploy.manager.tasks()
    states: dict[str, int] = {}
    for t in tasks:
        if not t.operator.startswith("replica_"):
            states[t.state.value] = states.get(t.state.value, 0) + 1
    lat = list(engine.deploy.alert_latencies)
    status = engine.status()
    return {
        "alerts": alerts,
        "recall_tasks": states,
        "median_alert_to_first_history_s": round(statistics.median(lat), 3) if lat else None,
        "archive": {name: s["chunks"] for name, s in status["streams"].items()},
        "archive_totals": status["totals"],
    }


@command("run")
def run(args) -> int:
    from moirae import Engine
    from moirae.api import ApiError
    from moirae.api.server import serve
    from moirae.scenarios import deploy

    install_sigterm()
    overrides = {"scenario": args.scenario} if args.scenario else {}
    engine = Engine.from_config(args.config, **overrides)
    server = printer = None
    try:
        print(f"moirae: scenario {engine.settings.scenario}; archive schema {engine.settings.postgres.schema}; "
              f"data dir {engine.data_dir}", flush=True)
        info = deploy(engine.settings.scenario, engine)
        print(f"moirae: deployed {json.dumps(info, default=str)}", flush=True)
        printer = AlertPrinter(engine).start()
        engine.start()
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
        result = summary(engine, printer.alerts)
        if args.json:
            print(json.dumps(result, default=str))
        else:
            print(render_status(engine.status()))
            print(f"alerts: {result['alerts']}; recall tasks: {result['recall_tasks']}; median alert to first "
                  f"history: {result['median_alert_to_first_history_s']} s")
    finally:
        if printer is not None:
            printer.stop()
        if server is not None:
            server.stop()
        engine.close()
    return 0
