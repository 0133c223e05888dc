"""History-queries under a role that may only read the streams and reference tables
(archive.reader_role), functions that run SQL from a string denied, and sqlglot rules
that fail closed when a class they name is missing."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta

import psycopg2
import pytest

from archive import UnsafeQuery
from archive.history import prepare
from archive.reader_role import role_name
from tests.archive.arch_helpers import T0, rows


@pytest.mark.parametrize("call", [
    "query_to_xml('select * from moirae_batches', true, true, '')",
    "pg_catalog.query_to_xml('x', true, true, '')",
    "query_to_xml_and_xmlschema('x', true, true, '')",
    "query_to_xmlschema('x', true, true, '')",
    "cursor_to_xml('c', 1, true, true, '')",
    "table_to_xml('moirae_batches', true, true, '')",
    "database_to_xml(true, true, '')",
    "schema_to_xml('public', true, true, '')",
    "ts_stat('select 1')",
    "ts_rewrite('a'::tsquery, 'select 1')",
    "dblink('dbname=x', 'select 1')",
    "lo_import('/etc/passwd')",
    "pg_read_file('/etc/passwd')",
    "\"QUERY_TO_XML\"('x', true, true, '')",
])
def test_functions_that_run_sql_from_a_string_are_denied(call):
    with pytest.raises(UnsafeQuery, match="may not call"):
        prepare(f"SELECT {call} FROM metrics", {"metrics"})


def test_a_missing_sqlglot_class_refuses_every_query():
    """A sqlglot release that renamed a class a rule names: the rules fail closed."""
    code = ("import sqlglot.expressions as e\n"
            "del e.Merge\n"
            "from archive.history import prepare\n"
            "from archive.errors import UnsafeQuery\n"
            "try:\n    prepare('SELECT avg(v) FROM metrics', {'metrics'})\n"
            "except UnsafeQuery as exc:\n    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "history-queries are refused" in out.stdout and "exp.Merge" in out.stdout


@pytest.mark.postgres
def test_history_queries_run_as_the_reader_which_may_only_read_streams(archiver):
    archiver.append("metrics", 0, rows(60, step=timedelta(minutes=7), hosts=2))
    cid = archiver.grid.chunk_of(T0)
    q = archiver.prepare("SELECT current_user AS who, count(*) AS n FROM metrics")
    got = archiver.run_history_query(q, {}, cid)
    assert got["who"].item() == role_name() and got["n"].item() > 0
    # the role itself: streams yes; the engine's own tables, writes and privileged settings no
    with archiver.db.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT rolsuper, rolcanlogin FROM pg_roles WHERE rolname = %s", (role_name(),))
        assert cur.fetchone() == (False, False)
        cur.execute(f"SET ROLE {role_name()}")
        try:
            cur.execute("SELECT count(*) FROM metrics")
            for sql in ("SELECT count(*) FROM moirae_batches", "SELECT count(*) FROM moirae_chunks",
                        "INSERT INTO metrics SELECT * FROM metrics LIMIT 1",
                        "SELECT query_to_xml('select * from moirae_batches', true, true, '')"):
                with pytest.raises(psycopg2.errors.InsufficientPrivilege):
                    cur.execute(sql)
                cur.execute("RESET ROLE")  # autocommit: the failed statement ended; switch back in
                cur.execute(f"SET ROLE {role_name()}")
        finally:
            cur.execute("RESET ROLE")


@pytest.mark.postgres
def test_a_stream_registered_later_is_granted_on_first_use(archiver):
    from archive.streams import StreamSpec

    archiver.append("metrics", 0, rows(20, step=timedelta(minutes=7), hosts=2))
    cid = archiver.grid.chunk_of(T0)
    archiver.run_history_query(archiver.prepare("SELECT count(*) AS n FROM metrics"), {}, cid)
    archiver.register_stream(StreamSpec.build("later", "ts", {"host": "text", "v": "double"}))
    q = archiver.prepare("SELECT count(*) AS n FROM later")
    assert archiver.run_history_query(q, {}, cid)["n"].item() == 0
