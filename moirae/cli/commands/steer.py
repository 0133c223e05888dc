"""``moirae cancel EID [EID ...]`` and ``moirae accelerate EID [--tickets N]``: steer a
running engine through its HTTP API (M 4.4) and print what
changed. Several event ids are cancelled in one request (``POST /api/events/cancel``).

The address is the configuration's ``api.host`` / ``api.port``; the token comes from
``MOIRAE_API_TOKEN`` or ``api.token``. When nothing listens there, one line says no
engine is running and the exit code is 1.
"""

from __future__ import annotations

import json

from moirae.cli.commands.registry import command


def _client(args):
    from moirae import config
    from moirae.api.client import ApiClient

    return ApiClient.from_settings(config.load(args.config))


def _report(result: dict, as_json: bool) -> int:
    if as_json:
        print(json.dumps(result))
        return 0
    print(f"moirae: {result['message']}")
    for eid, n in (result.get("events") or {}).items():
        print(f"  {eid}: {n} task(s) cancelled")
    for t in result.get("tasks", []):
        if isinstance(t, dict):
            print(f"  {t['task_id']} ({t['operator']}): tickets {t['tickets_before']} -> {t['tickets_after']}, "
                  f"{t['state']}")
        else:
            print(f"  {t}: cancelled")
    return 0


@command("cancel")
def cancel(args) -> int:
    eids = args.eid if isinstance(args.eid, list) else [args.eid]
    client = _client(args)
    return _report(client.cancel(eids[0]) if len(eids) == 1 else client.cancel_many(eids), args.json)


@command("accelerate")
def accelerate(args) -> int:
    return _report(_client(args).accelerate(args.eid, args.tickets), args.json)
