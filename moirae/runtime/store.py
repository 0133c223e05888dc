"""Opening the archive the configuration names (engine, CLI commands, console)."""

from __future__ import annotations

import os

from archive import Archiver, Database
from archive.pg import ENV_DSN, embedded_dsn


def database_dsn(settings) -> str:
    """``MOIRAE_PG_DSN`` if set, else ``postgres.dsn``, else the embedded server under
    ``data_dir`` (started if needed)."""
    return os.environ.get(ENV_DSN) or settings.postgres.dsn or embedded_dsn(settings.data_dir)


def open_archiver(settings) -> Archiver:
    """An Archiver over the configured database and schema (the caller closes it)."""
    return Archiver(Database(database_dsn(settings), settings.postgres.schema), settings.archive.settings())
