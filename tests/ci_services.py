"""Services the suite needs beside the embedded PostgreSQL, started by ``.ci/run`` when
absent: a PostgreSQL server at 127.0.0.1:5432 (user ``postgres``, trust authentication),
as ``tests/conftest.py``'s external backend expects. It is built from the binaries of the
``pgserver`` package (a dev dependency), in ``.moirae-test/ci-postgres``, and left running.

``python -m tests.ci_services postgres [--port P]`` starts it unless something answers on
the port; ``--stop`` stops the one started there.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PGDATA = Path(os.environ.get("MOIRAE_TEST_DATA_DIR", ROOT / ".moirae-test")) / "ci-postgres"


def answers(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(2)
        return s.connect_ex((host, port)) == 0


def _system_user(pgdata: Path) -> str | None:
    """The account the server runs as: this one, or ``pgserver`` when this is root
    (PostgreSQL refuses to run as root), given the data directory."""
    if os.geteuid() != 0:
        return None
    import pwd
    import stat

    from pgserver._commands import POSTGRES_BIN_PATH
    from pgserver.utils import ensure_folder_permissions, ensure_prefix_permissions, ensure_user_exists

    ensure_user_exists("pgserver")
    ensure_prefix_permissions(pgdata)
    ensure_prefix_permissions(POSTGRES_BIN_PATH)
    read, execute = stat.S_IRGRP | stat.S_IROTH, stat.S_IXGRP | stat.S_IXOTH
    ensure_folder_permissions(POSTGRES_BIN_PATH, read | execute)
    ensure_folder_permissions(POSTGRES_BIN_PATH.parent / "lib", read)
    entry = pwd.getpwnam("pgserver")
    os.chown(pgdata, entry.pw_uid, entry.pw_gid)
    return "pgserver"


def start_postgres(port: int, pgdata: Path = PGDATA) -> str:
    """Start a server listening on 127.0.0.1:``port`` unless the port answers; returns
    what was done, in one line."""
    if answers(port):
        return f"ci: PostgreSQL answers on 127.0.0.1:{port}; database tests run against it too"
    from pgserver._commands import initdb, pg_ctl

    pgdata.mkdir(parents=True, exist_ok=True)
    user = _system_user(pgdata)
    if not (pgdata / "PG_VERSION").exists():
        initdb(["--auth=trust", "--auth-local=trust", "--encoding=utf8", "-U", "postgres"], pgdata=pgdata, user=user)
    pg_ctl(["-w", "-o", f"-h 127.0.0.1 -p {port} -k {pgdata}", "-l", str(pgdata / "log"), "start"],
           pgdata=pgdata, user=user, timeout=120)
    return f"ci: started PostgreSQL on 127.0.0.1:{port} (data in {pgdata})"


def stop_postgres(pgdata: Path = PGDATA) -> str:
    from pgserver._commands import pg_ctl

    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user="pgserver" if os.geteuid() == 0 else None, timeout=60)
    return f"ci: stopped PostgreSQL of {pgdata}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.ci_services")
    ap.add_argument("service", choices=["postgres"])
    ap.add_argument("--port", type=int, default=5432)
    ap.add_argument("--data", type=Path, default=PGDATA)
    ap.add_argument("--stop", action="store_true")
    args = ap.parse_args(argv)
    print(stop_postgres(args.data) if args.stop else start_postgres(args.port, args.data), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
