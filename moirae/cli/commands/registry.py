"""The table of CLI commands, filled by ``@command("name")`` in each command module."""

from __future__ import annotations

import json
from collections.abc import Callable

COMMANDS: dict[str, Callable] = {}


def command(name: str):
    def register(fn):
        COMMANDS[name] = fn
        return fn
    return register


def print_json(obj) -> None:
    print(json.dumps(obj, indent=2, default=str))
