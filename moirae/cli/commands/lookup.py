"""``moirae lookup``: forward provenance of source rows on a running engine (A 3),
through its HTTP API (``GET /api/lookup``): which alerts the rows fed, which of those
are still open, and whether any future alert can still use the rows (Ananke's expired
label). Rows are named as ``moirae retract`` names them, or by ``--stream`` alone.
"""

from __future__ import annotations

import json
from urllib.parse import urlencode

from moirae.cli.commands.registry import command
from moirae.cli.commands.retract import selection
from moirae.cli.commands.steer import _client
from moirae.retract.errors import BadSelection as BadRetractArgs


def query_string(sel: dict) -> str:
    """The selection as ``GET /api/lookup``'s query string.

    >>> query_string({"stream": "cpu", "key": {"host": "a"}, "ids": [1, 2]})
    'stream=cpu&key=host%3Aa&ids=1%2C2'
    """
    params = {k: v for k, v in sel.items() if k not in ("ids", "key")}
    if "key" in sel:
        (col, value), = sel["key"].items()
        params["key"] = f"{col}:{value}"
    if "ids" in sel:
        params["ids"] = ",".join(str(i) for i in sel["ids"])
    return urlencode(params)


@command("lookup")
def lookup(args) -> int:
    sel = selection(args)
    if not sel:
        raise BadRetractArgs("name the rows: --ids, or --stream (with --key, --start, --end or --where)")
    out = _client(args).request("GET", f"/api/lookup?{query_string(sel)}")
    if args.json:
        print(json.dumps(out))
        return 0
    c = out["counts"]
    print(f"moirae: {c['sources']} row(s): {c['feeding']} fed {c['alerts']} alert(s), {c['open']} still open, "
          f"{c['retracted']} retracted; {c['alive']} row(s) can still feed a future alert"
          + ("" if out["can_feed_future_alerts"] else " (all expired)"))
    for a in out["alerts"]:
        state = f"retracted ({a['reason']})" if a["status"] == "retracted" else ("open" if a["open"] else "closed")
        print(f"  {a['ts']}  {a['event']:<16} {a['eid']:<32} {state}")
    return 0
