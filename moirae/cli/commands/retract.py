"""``moirae retract``: mark source rows bad (or correct them) on a running engine,
through its HTTP API (``POST /api/retractions``, :mod:`moirae.api.retract_api`), and
print which alerts were evaluated again and which were withdrawn. ``--undo ID`` undoes
a retraction, ``--list`` lists them.

Rows are named one way: ``--ids``, or ``--stream`` with ``--key col=value`` and/or
``--start`` / ``--end``, or ``--stream`` with ``--where`` (one SQL condition over the
stream's columns). ``--set col=value`` makes it a correction. A refusal is one line and
exit status 1; nothing changes.
"""

from __future__ import annotations

import json

from moirae.cli.commands.registry import command
from moirae.cli.commands.steer import _client
from moirae.retract.errors import BadSelection as BadRetractArgs


def selection(args) -> dict:
    """The rows the command line names, as the API takes them (``key`` as a mapping)."""
    sel: dict = {}
    if args.ids:
        sel["ids"] = args.ids
    if args.stream:
        sel["stream"] = args.stream
    if args.key:
        col, sep, value = args.key.partition("=")
        if not sep or not col:
            raise BadRetractArgs(f"--key must be column=value, got {args.key!r}")
        sel["key"] = {col: value}
    for name in ("start", "end"):
        if getattr(args, name):
            sel[name] = getattr(args, name).isoformat()
    if args.where:
        sel["predicate"] = args.where
    return sel


def _values(pairs: list[str] | None) -> dict | None:
    if not pairs:
        return None
    out = {}
    for p in pairs:
        col, sep, value = p.partition("=")
        if not sep or not col:
            raise BadRetractArgs(f"--set must be column=value, got {p!r}")
        try:
            out[col] = json.loads(value)  # numbers, true/false, null; anything else as text
        except ValueError:
            out[col] = value
    return out


@command("retract")
def retract(args) -> int:
    client = _client(args)
    if args.list:
        out = client.request("GET", "/api/retractions")
        if args.json:
            print(json.dumps(out))
            return 0
        for r in out["retractions"]:
            state = "active" if r["active"] else f"undone by {r['undone_by']}"
            print(f"{r['id']:>5}  {r['kind']:<10} {r['stream']:<16} {r['rows']:>7} row(s)  {state:<20} "
                  f"{r['author']}: {r['reason']}")
        return 0
    if args.undo is not None:
        out = client.request("POST", f"/api/retractions/{args.undo}/undo", {"by": args.by} if args.by else None)
        if args.json:
            print(json.dumps(out))
            return 0
        if not out["undone"]:
            print(f"moirae: {out['message']}")
            return 0
        print(f"moirae: retraction {args.undo} undone; {len(out['restored'])} alert(s) restored"
              + (f", {len(out['still_retracted'])} still retracted by another" if out["still_retracted"] else ""))
        for eid in out["restored"]:
            print(f"  restored: {eid}")
        return 0
    if not args.reason:
        raise BadRetractArgs("a retraction needs --reason")
    body = {**selection(args), "reason": args.reason, "confirm": args.confirm}
    if args.by:
        body["by"] = args.by
    values = _values(args.set)
    if values:
        body["set"] = values
    out = client.request("POST", "/api/retractions", body)
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"moirae: {out['kind']} {out['id']}: {out['rows']} row(s) of {out['stream']} flagged; "
          f"{out['affected']} alert(s) evaluated again, {len(out['retracted'])} retracted")
    for eid in out["retracted"]:
        print(f"  retracted: {eid}: {out['verdicts'][eid]['why']}")
    for eid in out.get("inexact", []):
        print(f"  kept (not judged exactly): {eid}: {out['verdicts'][eid]['why']}")
    return 0
