"""SQL injection: hostile text through event attributes, history-query
templates, API parameters and stream names has 0 effects. The database is fingerprinted
before and after (every table of the schema and its rows, hashed; the tables of every
schema), and no session the engine holds carries a setting an attempt tried to make."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pytest

from archive.streams import StreamSpec
from moirae.api import create_app
from moirae.base.errors import MoiraeError
from moirae.ingest.events import EventRecord
from recall.operator import Recall
from tests.api.api_helpers import client as api_client
from tests.engine_factory import make_engine
from tests.faults.fault_helpers import measuring

pytestmark = [pytest.mark.faults, pytest.mark.postgres]
T0 = datetime(2024, 3, 1, tzinfo=UTC)
CANARY = "moirae.pwned"

PAYLOADS = [
    "s0'; DROP TABLE metrics; --",
    "x' OR '1'='1",
    "s0'); DELETE FROM moirae_events; --",
    f"'; SELECT set_config('{CANARY}', 'yes', false); --",
    "s0\\'; CREATE TABLE evil (x int); --",
    "$$; DROP TABLE moirae_streams; $$",
    "s0\"; DROP TABLE metrics; --",
    "' UNION SELECT usename, 0, 0, '' FROM pg_user --",
]

TEMPLATES = [
    "SELECT 1; DROP TABLE metrics",
    "DELETE FROM metrics",
    "SELECT avg(bw) FROM metrics h WHERE h.sid = :sid; CREATE TABLE evil (x int)",
    f"SELECT set_config('{CANARY}', 'yes', false) FROM metrics",
    "WITH d AS (DELETE FROM metrics RETURNING *) SELECT count(*) FROM d",
    "SELECT * FROM pg_catalog.pg_tables",
    "SELECT * INTO evil FROM metrics",
    "UPDATE metrics SET bw = 0",
    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity",
    "COPY metrics TO '/tmp/moirae-evil.csv'",
    "SELECT * FROM metrics; SET statement_timeout = 0",
    "SELECT lo_import('/etc/passwd') FROM metrics",
    "SELECT nextval('moirae_dead_letters_id_seq') FROM metrics",
]

STREAM_NAMES = ['metrics"; DROP TABLE metrics; --', "m; drop table metrics", "Metrics", "evil'--",
                "pg_catalog.pg_class", "a" * 80, "metrics\x00x"]


def _fingerprint(pg) -> dict:
    with pg.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT schemaname, tablename FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', "
                    "'information_schema') AND (schemaname = %s OR schemaname NOT LIKE 't\\_%%') "
                    "ORDER BY 1, 2", (pg.schema,))
        tables = cur.fetchall()
        rows = {}
        for schema, table in tables:
            if schema != pg.schema:
                continue
            cur.execute(f'SELECT count(*), md5(coalesce(string_agg(t::text, \'|\' ORDER BY t::text), \'\')) '
                        f'FROM "{schema}"."{table}" t')
            rows[table] = cur.fetchone()
    return {"tables": tables, "rows": rows}


def _canaries(engine) -> list:
    seen = []
    for _ in range(10):  # every pooled connection the archiver hands out
        with engine.archiver.catalog.transaction() as conn, conn.cursor() as cur:
            cur.execute("SELECT current_setting(%s, true), current_setting('search_path')", (CANARY,))
            seen.append(cur.fetchone())
    return seen


@pytest.fixture
def engine(pg, tmp_path, monkeypatch):
    e = make_engine(pg, tmp_path / "data", monkeypatch, archive={"chunk_span": "10m", "chunk_target_rows": 0}, recall={"max_concurrent": 2})
    e.archiver.register_stream(StreamSpec.build("metrics", "ts", {"sid": "text", "bw": "double"},
                                                indexes=[("sid",)]))
    n = 720
    e.archiver.append("metrics", -1, pd.DataFrame({
        "ts": pd.date_range(T0, periods=n, freq="10s"), "sid": [f"s{i % 3}" for i in range(n)],
        "bw": np.random.default_rng(7).normal(50, 10, n)}), bulk=True)
    e.deploy.manager.register(Recall("hist", "SELECT h.sid, count(*) AS n FROM metrics h WHERE h.sid = :sid "
                                     "GROUP BY h.sid", store=e.archiver, bound=timedelta(hours=3)))
    e.deploy.events.add([EventRecord("overload", "ok", T0 + timedelta(hours=2), {"sid": "s0"})])
    yield e
    e.close()


def test_injection_attempts_have_no_effect(engine, pg):
    with measuring("sql_injection", enabled=not pg.dsn.startswith("host=127.0.0.1")) as figures:
        _inject(engine, pg, figures)


def _inject(engine, pg, figures: dict) -> None:
    """Every attempt, counting each effect it had (a row matched, a template or stream
    name accepted, a server error, a table, row or session setting changed); ``figures``
    gets the counts, then the test asserts that there were none."""
    base_settings = _canaries(engine)
    before = _fingerprint(pg)
    attempts = {"event_attribute": 0, "template": 0, "api": 0, "stream_name": 0}
    effects: list[str] = []

    # 1. event attributes: bound parameters, matched as plain values (no rows, no effect)
    arch = engine.archiver
    q = arch.prepare("SELECT h.sid, count(*) AS n FROM metrics h WHERE h.sid = :sid GROUP BY h.sid")
    for p in PAYLOADS:
        attempts["event_attribute"] += 1
        frames = [arch.run_history_query(q, {"sid": p}, cid) for cid in arch.chunk_ids(["metrics"])]
        if not all(len(f) == 0 for f in frames):
            effects.append(f"event attribute {p!r} matched rows")
    # ... and through the engine's own path: event log + recall tasks over every chunk
    recs = [EventRecord("overload", f"inj{i}", T0 + timedelta(hours=2), {"sid": p}) for i, p in enumerate(PAYLOADS)]
    logged = engine.deploy.events.add(recs)
    for r in recs:
        engine.deploy.manager.submit(r.as_event(), ["hist"])
    _wait_closed(engine)
    failed_tasks = [v for v in engine.deploy.manager.tasks() if v.error]

    # 2. history-query templates: refused before they reach PostgreSQL
    for t in TEMPLATES:
        attempts["template"] += 1
        try:
            Recall(f"evil{attempts['template']}", t, store=arch)
        except MoiraeError:
            continue
        effects.append(f"template accepted: {t!r}")

    # 3. API parameters: 404/422 or empty answers, never an effect
    effects += _api_attempts(engine, attempts)

    # 4. stream names: refused with a clear error
    for name in STREAM_NAMES:
        attempts["stream_name"] += 1
        try:
            arch.register_stream(StreamSpec.build(name, "ts", {"x": "text"}))
        except (MoiraeError, ValueError):
            continue
        effects.append(f"stream name accepted: {name!r}")

    residue, changed = _residue(engine, pg, before, base_settings)
    effects += residue
    figures.update(attempts=sum(attempts.values()), by_vector=attempts, effects=len(effects),
                   effects_seen=effects[:20], refused_or_inert=sum(attempts.values()) - len(effects),
                   **changed, failed_tasks=len(failed_tasks))
    assert not effects, effects
    assert len(logged) == len(PAYLOADS)
    assert not failed_tasks, failed_tasks


def _residue(engine, pg, before: dict, base_settings: list) -> tuple[list[str], dict]:
    """What the attempts left in the database and the sessions: the effects, and how many
    tables, rows and settings changed."""
    after = _fingerprint(pg)
    # the event log, incidents and recall outputs grew by the hostile events themselves; nothing else changed
    grew = {"moirae_events", "moirae_recall_outputs", "moirae_incidents", "moirae_incident_events"}
    tables_changed = sorted(set(after["tables"]) ^ set(before["tables"]))
    rows_changed = sorted(k for k in set(after["rows"]) | set(before["rows"])
                          if k not in grew and after["rows"].get(k) != before["rows"].get(k))
    with pg.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT attrs->>'sid' FROM moirae_events WHERE eid LIKE 'inj%%' ORDER BY eid")
        stored = sorted(r[0] for r in cur.fetchall())
    settings = _canaries(engine)
    settings_changed = sum(1 for c, _ in settings if c not in (None, "")) + \
        len({s for _, s in settings} ^ {s for _, s in base_settings})
    effects = [f"table created or dropped: {t}" for t in tables_changed]
    effects += [f"rows changed in {t}" for t in rows_changed]
    effects += [f"{settings_changed} session settings changed"] if settings_changed else []
    effects += ["a hostile event was not stored verbatim"] if stored != sorted(PAYLOADS) else []  # stored as data
    return effects, {"tables_changed": len(tables_changed), "rows_changed": len(rows_changed),
                     "settings_changed": settings_changed}


def _api_attempts(engine, attempts: dict) -> list[str]:
    """Every payload in every API parameter; the effects seen (a server error, or a
    filter that matched events)."""
    effects = []
    client = api_client(create_app(engine))
    for p in PAYLOADS:
        for method, url, params in (("get", "/api/events", {"type": p}), ("get", "/api/events", {"since": p}),
                                    ("get", f"/api/events/{p}", None), ("get", "/api/archive/chunks", {"stream": p}),
                                    ("post", f"/api/events/{p}/cancel", None),
                                    ("post", f"/api/events/{p}/accelerate", None)):
            attempts["api"] += 1
            res = getattr(client, method)(url, params=params)
            if res.status_code >= 500:
                effects.append(f"{method} {url} {params}: {res.status_code} {res.text[:200]}")
            elif (res.status_code == 200 and url == "/api/events" and "since" not in params
                  and res.json()["events"] != []):
                effects.append(f"{method} {url} {params}: matched events")
    return effects


def _wait_closed(engine, timeout: float = 60.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while engine.deploy.manager.open_events():
        assert time.monotonic() < deadline, engine.deploy.manager.open_events()
        time.sleep(0.05)
