"""``moirae archive status``: what the archive holds, per stream and tier."""

from __future__ import annotations

from moirae.commands.registry import command, print_json
from moirae.status_view import render_status


@command("archive status")
def archive_status(args) -> int:
    from archive import Archiver, Database
    from archive.pg import ENV_DSN, embedded_dsn
    from moirae import config

    settings = config.load(args.config)
    import os

    dsn = os.environ.get(ENV_DSN) or settings.postgres.dsn or embedded_dsn(settings.data_dir)
    archiver = Archiver(Database(dsn, settings.postgres.schema), settings.archive.settings())
    try:
        status = archiver.status()
    finally:
        archiver.close()
    if args.json:
        print_json(status)
    else:
        print(render_status(status))
    return 0
