"""``moirae archive status``: what the archive holds, per stream and tier."""

from __future__ import annotations

from moirae.cli.commands.registry import command, print_json
from moirae.read.status_view import render_status


@command("archive status")
def archive_status(args) -> int:
    from moirae import config
    from moirae.runtime.store import open_archiver

    archiver = open_archiver(config.load(args.config))
    try:
        status = archiver.status()
    finally:
        archiver.close()
    if args.json:
        print_json(status)
    else:
        print(render_status(status))
    return 0
