"""The one way the tests build an :class:`~moirae.Engine`: :func:`make_engine`, and the
``engine_factory`` fixture of ``tests/conftest.py`` (the test's ``pg`` schema, its
``tmp_path``). Child processes started by tests use :func:`make_engine` as well."""

from __future__ import annotations

from pathlib import Path

#: environment settings a developer's shell may hold that no test engine may pick up
ENV_UNSET = ("MOIRAE_PG_DSN", "MOIRAE_API_TOKEN")


def make_engine(db, data_dir: str | Path, monkeypatch=None, **sections):
    """An Engine as ``Engine.from_config`` builds it without a configuration file.

    ``db`` is the database: a :class:`~archive.Database` (its ``dsn`` and ``schema``) or a
    ``(dsn, schema)`` pair; ``data_dir`` holds the engine's data (checkpoints, logs);
    ``sections`` are configuration sections such as ``spark={"trigger": "300ms"}``,
    ``archive={...}`` or ``recall={...}``. With ``monkeypatch`` the settings of
    :data:`ENV_UNSET` are removed from the environment for the test first.
    """
    from moirae import Engine

    if monkeypatch is not None:
        for name in ENV_UNSET:
            monkeypatch.delenv(name, raising=False)
    dsn, schema = db if isinstance(db, tuple) else (db.dsn, db.schema)
    return Engine.from_config(None, data_dir=str(data_dir), postgres={"dsn": dsn, "schema": schema}, **sections)
