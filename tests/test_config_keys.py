"""Configuration honesty: every key documented in ``config/moirae.yaml`` has
an effect, and a test shows it.

Each documented key has an entry in :data:`EFFECTS`, which is checked two ways:

- a **probe** (most keys): two engines, built from the defaults and from the defaults
  with only this key changed, differ where the key's consumer (the archive, the Recall
  Manager, the scheduler, the API server...) holds it. The probe reads the consumer, never
  the settings object, so a key nobody reads fails here;
- a **test** node id: the behavioural test that shows what the consumer does with the
  value (for keys whose effect needs Spark or a whole run, the test changes the key
  through the configuration itself). It must exist and must name the key.

A key added to the YAML without an entry here fails :func:`test_every_documented_key_has_an_effect`.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from moirae.config import DEFAULTS

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Effect:
    test: str  # "path::function": what the consumer does with the value
    changed: Any = None  # a value other than the default, for the probe
    probe: Any = None  # engine -> what the key's consumer holds (None: the test alone)


def _served(e):
    """Where the API server of engine ``e`` binds (host, port)."""
    from moirae.api.server import serve

    s = serve(e)
    try:
        return s.host, s.port
    finally:
        s.stop()


def _token(e):
    from fastapi.testclient import TestClient

    from moirae.api import create_app

    client = TestClient(create_app(e), base_url="http://127.0.0.1")  # 404 with this token, else 401
    return client.post("/api/events/none/cancel", headers={"Authorization": "Bearer s3cret"}).status_code


EFFECTS: dict[str, Effect] = {
    "data_dir": Effect("tests/test_config_keys.py::test_probe", "elsewhere", lambda e: e.data_dir.name),
    "scenario": Effect("tests/test_config_keys.py::test_probe", "host", lambda e: e.checkpoint_dir("q").parent.name),
    "spark.master": Effect("tests/moirae/test_config_effects.py::test_spark_master_and_ui_reach_the_session"),
    "spark.ui": Effect("tests/moirae/test_config_effects.py::test_spark_master_and_ui_reach_the_session"),
    "spark.shuffle_partitions": Effect("tests/moirae/test_config_effects.py::test_shuffle_partitions_and_trigger"),
    "spark.trigger": Effect("tests/moirae/test_config_effects.py::test_shuffle_partitions_and_trigger"),
    "spark.stop_grace": Effect("tests/moirae/test_graceful_stop.py::test_engine_stop_honours_spark_stop_grace"),
    "postgres.dsn": Effect("tests/test_config_keys.py::test_probe", "DSN", lambda e: e.db.dsn),
    "postgres.schema": Effect("tests/test_config_keys.py::test_probe", "other_schema",
                              lambda e: e.archiver.db.schema),
    "archive.chunk_span": Effect("tests/test_config_keys.py::test_probe", "10m", lambda e: e.archiver.grid.span_us),
    "archive.chunk_target_rows": Effect("tests/archive/test_chunk_intervals.py::test_the_interval_is_chosen_from_"
                                        "the_first_batch_rate_and_fixed", 50_000,
                                        lambda e: e.archiver.settings.chunk_target_rows),
    "archive.recent_chunks": Effect("tests/archive/test_tiers.py::test_demote_builds_indexes_and_age_drops_them", 3,
                                    lambda e: e.archiver.settings.recent_chunks),
    "archive.statement_timeout": Effect(
        "tests/recall/manager/test_safety.py::test_statement_timeout_fails_the_task_with_the_timeout_named",
        "2s", lambda e: (e.archiver.settings.statement_timeout_ms, e.deploy.manager.timeout_ms)),
    "archive.history_parallel_workers": Effect(
        "tests/archive/test_history.py::test_a_history_query_starts_no_parallel_workers_unless_configured", 2,
        lambda e: e.archiver.settings.history_parallel_workers),
    "archive.present_cache_rows": Effect("tests/archive/test_present_bound.py::test_a_growing_chunk_copy_is_dropped_"
                                         "at_the_bound", 10, lambda e: e.archiver.present.max_rows),
    "archive.shared_read": Effect("tests/moirae/test_shared_read.py::test_a_source_archived_by_a_query_read_cannot_"
                                  "silently_switch_reader"),
    "archive.maintenance_interval": Effect("tests/moirae/test_config_effects.py::test_maintenance_interval_paces_the_"
                                           "maintenance_job"),
    "recall.max_concurrent": Effect("tests/recall/manager/test_run.py", 1,
                                    lambda e: e.deploy.manager.max_concurrent),
    "recall.default_tickets": Effect("tests/scheduler/test_scheduler.py::test_shares_follow_tickets_exactly", 7,
                                     lambda e: e.deploy.scheduler.config.default_tickets),
    "recall.min_tickets": Effect("tests/scheduler/test_scheduler.py::test_submit_below_the_floor_is_refused", 5,
                                 lambda e: e.deploy.scheduler.config.min_tickets),
    "recall.tickets_per_result": Effect("tests/scheduler/test_scheduler.py::test_tickets_deducted_in_proportion"
                                        "_to_results_with_carry_and_floor", 2.0,
                                        lambda e: e.deploy.scheduler.config.tickets_per_result),
    "recall.feedback_period": Effect("tests/scheduler/test_scheduler.py::test_unbounded_task_suspends_every_"
                                     "feedback_period", 3, lambda e: e.deploy.scheduler.config.feedback_period),
    "recall.feedback_timeout": Effect("tests/scheduler/test_scheduler.py::test_feedback_deadline_discards_"
                                      "exactly_at_the_boundary_not_one_tick_before", "9s",
                                      lambda e: e.deploy.scheduler.config.feedback_timeout),
    "recall.materialization_load_threshold": Effect(
        "tests/scheduler/test_scheduler.py::test_materialization_uses_a_background_slot_under_light_load", 0.9,
        lambda e: e.deploy.scheduler.config.light_load),
    "similarity.k": Effect("tests/moirae/test_config_effects.py::test_similarity_settings_reach_similarity_recall"),
    "similarity.bandwidth": Effect("tests/moirae/test_config_effects.py::test_similarity_settings_reach_similarity_"
                                   "recall"),
    "similarity.histogram_bins": Effect("tests/moirae/test_config_effects.py::test_similarity_settings_reach_"
                                        "similarity_recall"),
    "similarity.novelty": Effect("tests/moirae/test_config_effects.py::test_similarity_settings_reach_similarity_"
                                 "recall"),
    "similarity.idf": Effect("tests/moirae/test_config_effects.py::test_similarity_settings_reach_similarity_recall"),
    "similarity.index_cache_mb": Effect("tests/moirae/test_config_effects.py::test_similarity_settings_reach_"
                                        "similarity_recall"),
    "similarity.novelty_quantile": Effect("tests/moirae/test_config_effects.py::test_similarity_settings_reach_"
                                          "similarity_recall"),
    "ananke.enabled": Effect("tests/moirae/test_config_effects.py::test_ananke_enabled_and_variant_choose_the_"
                             "provenance"),
    "ananke.variant": Effect("tests/moirae/test_ankn_live.py::test_ankn_variant_writes_the_live_provenance_graph"),
    "ananke.window_provenance": Effect("tests/moirae/test_window_digest_live.py::test_archive_resolved_window_"
                                       "provenance_equals_the_state_list"),
    "ananke.polynomials": Effect("tests/ananke/test_poly_live.py::test_live_event_query_stores_polynomials_per_"
                                 "alert"),
    "retract.max_share": Effect("tests/retract/test_norms_pg.py::test_max_share_is_the_configured_key", 0.5,
                                lambda e: e.retractions.max_share),
    "api.host": Effect("tests/api/test_auth.py::test_mutations_need_the_bearer_token", "localhost",
                       lambda e: _served(e)[0]),
    "api.port": Effect("tests/test_config_keys.py::test_probe", "FREE", lambda e: _served(e)[1]),
    "api.token": Effect("tests/api/test_auth.py::test_mutations_need_the_bearer_token", "s3cret", _token),
    "api.tls_cert": Effect("tests/api/test_access.py::test_tls_serves_https_only"),
    "api.tls_key": Effect("tests/api/test_access.py::test_tls_serves_https_only"),
    "api.allowed_hosts": Effect("tests/api/test_access.py::test_dns_rebinding_is_refused_unless_allowed_hosts_names_it"),
}


def documented_keys(path: Path = DEFAULTS) -> dict[str, int]:
    """Every leaf key of the YAML file (dotted) with its line, checking each has a
    comment line right above it (the documentation the file promises)."""
    lines = path.read_text().splitlines()
    keys: dict[str, int] = {}
    section = None
    for i, line in enumerate(lines):
        m = re.match(r"^( *)([a-z_]+):(.*)$", line)
        if not m:
            continue
        indent, name, rest = m.groups()
        if not indent and not rest.strip():
            section = name
            continue
        dotted = f"{section}.{name}" if indent else name
        if not indent:
            section = None
        above = lines[i - 1].strip() if i else ""
        assert above.startswith("#"), f"config/moirae.yaml line {i + 1}: key {dotted!r} has no comment above it"
        keys[dotted] = i + 1
    return keys


def test_every_documented_key_has_an_effect():
    keys = documented_keys()
    assert len(keys) >= 25
    missing = sorted(set(keys) - set(EFFECTS))
    assert not missing, (f"documented key(s) {missing} have no entry in tests/test_config_keys.py EFFECTS: add a "
                         "probe and/or the test that shows the key's effect")
    stale = sorted(set(EFFECTS) - set(keys))
    assert not stale, f"EFFECTS names key(s) {stale} that config/moirae.yaml no longer documents"


def _function_source(node_id: str) -> str:
    path, _, name = node_id.partition("::")
    tree = ast.parse((ROOT / path).read_text())
    if not name:
        return (ROOT / path).read_text()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
            return ast.get_source_segment((ROOT / path).read_text(), node) or ""
    raise AssertionError(f"{node_id}: no such test")


@pytest.mark.parametrize("key", sorted(EFFECTS))
def test_the_named_test_exists_and_exercises_the_key(key):
    effect = EFFECTS[key]
    source = _function_source(effect.test)
    if effect.test.endswith("::test_probe"):
        assert effect.probe is not None, f"{key}: names the probe but has none"
        return
    leaf = key.rsplit(".", 1)[-1]
    words = {leaf, leaf.replace("_", " "), "".join(p.title() for p in leaf.split("_"))}
    generic = {"k", "ui", "enabled", "variant", "host", "token", "master"}
    if effect.probe is None or leaf in generic:  # the test must set or name the key itself
        assert key in source or any(re.search(rf"\b{re.escape(w)}\b", source) for w in words), \
            f"{key}: {effect.test} does not mention {leaf!r}"


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _changed(key: str, value, tmp_path, pg) -> dict:
    section, _, leaf = key.rpartition(".")
    if key == "data_dir":
        return {"data_dir": str(tmp_path / "elsewhere")}
    if key == "postgres.schema":
        return {"postgres": {"schema": f"{pg.schema}_b"}}
    if key == "api.port":
        return {"api": {"port": _free_port()}}
    if key == "postgres.dsn":  # the same server, named another way
        dsn = pg.dsn
        if "://" in dsn:
            dsn += ("&" if "?" in dsn else "?") + "application_name=moirae_probe"
        else:
            dsn += " application_name=moirae_probe"
        return {"postgres": {"dsn": dsn}}
    return {section: {leaf: value}} if section else {leaf: value}


@pytest.mark.postgres
@pytest.mark.parametrize("key", sorted(k for k, e in EFFECTS.items() if e.probe is not None))
def test_probe(key, pg, tmp_path, monkeypatch):
    """The key's consumer in a real engine holds a different value when only this key
    changes."""
    from moirae import Engine

    monkeypatch.delenv("MOIRAE_PG_DSN", raising=False)
    monkeypatch.delenv("MOIRAE_API_TOKEN", raising=False)
    effect = EFFECTS[key]
    base = {"data_dir": str(tmp_path / "data"), "postgres": {"dsn": pg.dsn, "schema": pg.schema},
            "api": {"port": 0}}
    changed = _changed(key, effect.changed, tmp_path, pg)
    observed = []
    for over in (None, changed):
        merged = {k: (dict(v) if isinstance(v, dict) else v) for k, v in base.items()}
        for k, v in (over or {}).items():
            merged[k] = {**merged.get(k, {}), **v} if isinstance(v, dict) else v
        e = Engine.from_config(None, **merged)
        try:
            observed.append(effect.probe(e))
        finally:
            e.close()
            if key == "postgres.schema" and over is not None:
                e.db.drop_schema()
    assert observed[0] != observed[1], f"{key}: changing it changed nothing its consumer holds ({observed[0]!r})"
