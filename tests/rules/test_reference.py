"""Reference tables (M 4.3) on a real PostgreSQL: loaded from CSV and SQL, versioned, and
read as of an alert's time by history-queries, SQL context-queries and so by Similarity
Recall's terms; a reload never changes a past alert's context."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pytest

from archive.archiver import Archiver
from archive.errors import ReferenceTableError, UnsafeQuery
from archive.settings import ArchiveSettings
from archive.streams import StreamSpec
from moirae.queries import context_sql
from moirae.rules import reference
from similarity.terms import bag_of

T0 = datetime(2026, 3, 1, tzinfo=UTC)
RELOAD = T0 + timedelta(hours=2)


@pytest.fixture
def arch(pg):
    a = Archiver(pg, ArchiveSettings(chunk_span=timedelta(hours=1)))
    a.register_stream(StreamSpec.build("metrics", "ts", {"sid": "text", "bw": "double"}))
    n = 4 * 60
    a.append("metrics", 1, pd.DataFrame({
        "ts": pd.date_range(T0, periods=n, freq="1min"), "sid": [f"s{i % 3}" for i in range(n)],
        "bw": np.arange(n, dtype="float64")}), bulk=True)
    yield a
    a.close()


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_versions_keep_the_rows_valid_at_each_time(arch, tmp_path):
    v1 = write(tmp_path, "v1.csv", "sid,team,rack\ns0,storage,1\ns1,web,2\ns2,web,3\n")
    first = reference.load(arch, "servers", csv=v1, key="sid")
    assert (first["version"], first["rows"], first["inserted"]) == (1, 3, 3)
    # s0 moves to team db, s2 leaves, s3 arrives; s1 unchanged
    v2 = write(tmp_path, "v2.csv", "sid,team,rack\ns0,db,1\ns1,web,2\ns3,ml,4\n")
    second = reference.load(arch, "servers", csv=v2, valid_from=RELOAD)
    assert (second["version"], second["changed"], second["inserted"], second["removed"]) == (2, 1, 1, 1)
    assert reference.load(arch, "servers", csv=v2, valid_from=RELOAD + timedelta(hours=1))["version"] == 2  # no change
    refs = arch.references
    before = refs.rows("servers", as_of=RELOAD - timedelta(seconds=1)).sort_values("sid")
    after = refs.rows("servers", as_of=RELOAD).sort_values("sid")
    assert before[["sid", "team"]].values.tolist() == [["s0", "storage"], ["s1", "web"], ["s2", "web"]]
    assert after[["sid", "team"]].values.tolist() == [["s0", "db"], ["s1", "web"], ["s3", "ml"]]
    assert refs.status() == [{"name": "servers", "key": ["sid"], "columns": {"sid": "text", "team": "text",
                                                                               "rack": "bigint"}, "version": 2}]
    with pytest.raises(ReferenceTableError, match="before its current version"):
        reference.load(arch, "servers", csv=v1, valid_from=T0)


def test_bad_input_names_the_file_line_and_column(arch, tmp_path):
    good = write(tmp_path, "ok.csv", "sid,rack\ns0,1\n")
    reference.load(arch, "racks", csv=good, key="sid")
    bad = write(tmp_path, "bad.csv", "sid,rack\ns0,1\ns1,two\n")
    with pytest.raises(ReferenceTableError, match=r"bad.csv: line 3, column 'rack': 'two' is not a bigint"):
        reference.load(arch, "racks", csv=bad)
    dup = write(tmp_path, "dup.csv", "sid,rack\ns0,1\ns0,2\n")
    with pytest.raises(ReferenceTableError, match=r"line 3 repeats key \{'sid': 's0'\}"):
        reference.load(arch, "racks2", csv=dup, key="sid")
    with pytest.raises(ReferenceTableError, match="columns .* differ"):
        reference.load(arch, "racks", csv=write(tmp_path, "c.csv", "sid,row\ns0,1\n"))
    with pytest.raises(ReferenceTableError, match="an archived stream is already named"):
        reference.load(arch, "metrics", csv=good, key="sid")
    with pytest.raises(ReferenceTableError, match="key column 'host'"):
        reference.load(arch, "hosts", csv=good, key="host")
    with pytest.raises(ReferenceTableError, match="only read; it contains DELETE|single SELECT"):
        reference.load(arch, "x", sql="DELETE FROM metrics", key="sid")


def test_sql_load_and_history_query_read_as_of_the_event(arch):
    reference.load(arch, "owners", sql="SELECT 's0' AS sid, 'ann' AS owner UNION ALL SELECT 's1', 'bob'",
                   key="sid")
    reference.load(arch, "owners", sql="SELECT 's0' AS sid, 'cid' AS owner UNION ALL SELECT 's1', 'bob'",
                   valid_from=RELOAD)
    q = arch.prepare("SELECT o.owner, count(*) AS n FROM metrics h JOIN owners o ON o.sid = h.sid "
                     "WHERE h.sid = :sid GROUP BY o.owner")
    assert q.streams == ("metrics",) and q.references == ("owners",)
    chunk = arch.chunk_ids(["metrics"])[0]
    early = arch.run_history_query(q, {"sid": "s0", "__as_of": T0 + timedelta(hours=1)}, chunk)
    late = arch.run_history_query(q, {"sid": "s0", "__as_of": RELOAD + timedelta(minutes=5)}, chunk)
    assert early["owner"].tolist() == ["ann"] and late["owner"].tolist() == ["cid"]
    # read-only: the history-query rules still hold with a reference table in it
    with pytest.raises(UnsafeQuery):
        arch.prepare("SELECT * FROM owners o JOIN metrics h ON h.sid = o.sid; DELETE FROM owners")
    with pytest.raises(UnsafeQuery, match="unknown stream 'nope'"):
        arch.prepare("SELECT * FROM metrics h JOIN nope n ON n.sid = h.sid")


CONTEXT = ("SELECT e.eid, e.ts, s.team FROM events e JOIN servers s ON s.sid = e.sid")


def test_context_and_similarity_terms_read_the_version_of_each_events_time(arch, tmp_path):
    reference.load(arch, "servers", csv=write(tmp_path, "a.csv", "sid,team\ns0,storage\ns1,web\n"), key="sid")
    arch.register_stream(StreamSpec.build("ev_x", "ts", {"eid": "text", "sid": "text"}, kind="event"))
    ev_spec = arch.stream("ev_x")
    with context_sql.references_visible(arch.references.names()):
        reads = context_sql.prepare("x", "teams", CONTEXT, {"metrics", "ev_x"})
    assert reads == ()  # a reference table is not an input stream
    with pytest.raises(Exception, match="unknown stream 'servers'"):
        context_sql.prepare("x", "teams", CONTEXT, {"metrics"})  # not visible: refused as before
    past = pd.DataFrame({"eid": ["p1"], "sid": ["s0"], "ts": [pd.Timestamp(T0 + timedelta(minutes=30))]})

    def context(events):
        frame, _ = context_sql.run(arch, CONTEXT, (), events, ev_spec, timedelta(minutes=5), timedelta(0), "cx")
        return {r["eid"]: r["team"] for r in frame.to_dict("records")}

    assert context(past) == {"p1": "storage"}
    reference.load(arch, "servers", csv=write(tmp_path, "b.csv", "sid,team\ns0,db\ns1,web\n"), valid_from=RELOAD)
    now = pd.DataFrame({"eid": ["n1"], "sid": ["s0"], "ts": [pd.Timestamp(RELOAD + timedelta(minutes=1))]})
    # the past alert's context is computed again (a re-materialization) after the reload: unchanged
    assert context(past) == {"p1": "storage"}
    assert context(now) == {"n1": "db"}
    # one batch across the reload: each event reads its own version
    assert context(pd.concat([past, now], ignore_index=True)) == {"p1": "storage", "n1": "db"}
    # the reference column is a Similarity Recall term of the context (M 3.5)
    frame, _ = context_sql.run(arch, CONTEXT, (), now, ev_spec, timedelta(minutes=5), timedelta(0), "cx")
    assert "team=db" in bag_of(frame.drop(columns=["eid", "ts"]).to_dict("records")).terms


def test_the_cli_loads_and_lists_reference_tables(pg, tmp_path, capsys, monkeypatch):
    from moirae.cli.main import main

    monkeypatch.delenv("MOIRAE_PG_DSN", raising=False)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"data_dir: {tmp_path / 'data'}\npostgres:\n  dsn: \"{pg.dsn}\"\n  schema: {pg.schema}\n")
    csv = write(tmp_path, "s.csv", "sid,team\ns0,storage\n")
    assert main(["archive", "reference", "servers", "--csv", str(csv), "--key", "sid", "--config", str(cfg)]) == 0
    assert "version 1, 1 rows (1 new" in capsys.readouterr().out
    assert main(["archive", "reference", "servers", "--csv", str(csv), "--config", str(cfg)]) == 0
    assert "unchanged (version 1" in capsys.readouterr().out
    assert main(["archive", "references", "--config", str(cfg)]) == 0
    assert "servers  version 1  key sid  (sid text, team text)" in capsys.readouterr().out
    bad = write(tmp_path, "b.csv", "sid\n\n")
    assert main(["archive", "reference", "x", "--csv", str(bad), "--config", str(cfg)]) == 1
    assert "give its key" in capsys.readouterr().err
