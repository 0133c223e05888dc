"""``moirae deploy FILE``, ``moirae undeploy NAME [--drop-archive]`` and ``moirae
monitors``: monitors on a running engine, through its HTTP API
(:mod:`moirae.api.monitors_api`).

``deploy`` posts each monitor file (a folder: each ``*.yaml`` in it, sorted) and prints
whether it was deployed, unchanged (the same version runs) or updated; ``undeploy``
retires one, its archive kept unless ``--drop-archive``; ``monitors`` lists the deployed
ones with their state, rates, alerts, open tasks and materialized span. When no engine
answers, ``monitors`` reads the deployed set from the database instead.
"""

from __future__ import annotations

import json
from pathlib import Path

from moirae.cli.commands.registry import command
from moirae.cli.errors import NoMonitorFile


def _client(args):
    from moirae import config
    from moirae.api.client import ApiClient

    return ApiClient.from_settings(config.load(args.config))


def monitor_files(path: str | Path) -> list[Path]:
    """The monitor files ``path`` names: the file itself, or a folder's ``*.yaml`` and
    ``*.yml`` files, sorted."""
    p = Path(path)
    if p.is_dir():
        files = sorted([*p.glob("*.yaml"), *p.glob("*.yml")])
        if not files:
            raise NoMonitorFile(f"{p}: no monitor files (*.yaml) in this folder")
        return files
    if not p.is_file():
        raise NoMonitorFile(f"{p}: no such monitor file or folder")
    return [p]


@command("deploy")
def deploy(args) -> int:
    client = _client(args)
    results = []
    for f in monitor_files(args.file):
        out = client.request("POST", "/api/monitors", {"text": f.read_text(encoding="utf-8")})
        results.append({**out, "file": str(f)})
        if not args.json:
            extra = f" (was {out['previous']})" if out.get("previous") else ""
            print(f"moirae: {f}: monitor {out['name']} {out['result']}, version {out['version']}{extra}, "
                  f"{out['seconds']:.2f} s")
    if args.json:
        print(json.dumps(results))
    return 0


@command("undeploy")
def undeploy(args) -> int:
    from urllib.parse import quote

    path = f"/api/monitors/{quote(args.name, safe='')}" + ("?drop_archive=true" if args.drop_archive else "")
    out = _client(args).request("DELETE", path)
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"moirae: monitor {out['name']} (version {out['version']}) undeployed in {out['seconds']:.2f} s")
    if out.get("cancelled"):
        print(f"  recall tasks cancelled: {sum(out['cancelled'].values())}")
    if out.get("sources_stopped"):
        print(f"  sources stopped: {', '.join(out['sources_stopped'])}")
    if out.get("sources_kept"):
        print(f"  sources kept (read by other monitors): {', '.join(out['sources_kept'])}")
    print(f"  archive dropped: {', '.join(out['dropped'])}" if out.get("dropped") else "  archive kept")
    return 0


@command("monitors")
def monitors(args) -> int:
    from moirae.api.client import NoEngine

    try:
        rows = _client(args).request("GET", "/api/monitors")["monitors"]
        live = True
    except NoEngine:  # no engine: the deployed set as the database records it
        from moirae import config
        from moirae.deploy.lifecycle import stored_monitors
        from moirae.runtime.store import open_archiver

        arch = open_archiver(config.load(args.config))
        try:
            rows = stored_monitors(arch.db)
        finally:
            arch.close()
        live = False
    if args.json:
        print(json.dumps({"running": live, "monitors": rows}, default=str))
        return 0
    print(render(rows, live))
    return 0


def render(rows: list[dict], live: bool = True) -> str:
    """The monitors as a table: one line each."""
    if not rows:
        return "no monitors deployed" + ("" if live else " (no engine running)")
    head = ("name", "version", "state", "rows/s", "alerts", "open tasks", "materialized")
    lines = []
    for r in rows:
        mat = r.get("materialized") or {}
        span = f"{mat.get('from') or '-'} .. {mat.get('until') or '-'}" if mat.get("units") else "-"
        lines.append((r["name"], r["version"], r["state"] + (f" ({r['error']})" if r.get("error") else ""),
                      "-" if r.get("rows_per_s") is None else f"{r['rows_per_s']:.1f}",
                      "-" if r.get("alerts") is None else str(r["alerts"]),
                      "-" if r.get("open_tasks") is None else str(r["open_tasks"]), span))
    widths = [max(len(h), *(len(x[i]) for x in lines)) for i, h in enumerate(head)]
    out = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True))]
    out += ["  ".join(c.ljust(w) for c, w in zip(x, widths, strict=True)) for x in lines]
    if not live:
        out.append("(no engine running: the deployed set as last recorded; states are not live)")
    return "\n".join(out)
