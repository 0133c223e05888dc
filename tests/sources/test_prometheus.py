"""Prometheus remote write in (:mod:`moirae.sources.prometheus`).

- The decoder reads what the encoder writes, skips stale markers, and refuses a body
  that is not snappy or not a WriteRequest, saying which.
- End to end with a real Prometheus scraping a real node exporter on this machine and
  remote-writing to a running engine: for a window, the samples Prometheus holds (its
  own query API) equal what the archive holds, series by series and timestamp by
  timestamp.
"""

from __future__ import annotations

import json
import math
import struct
import time
from datetime import UTC, datetime

import pytest

from moirae.sources.prometheus import RemoteWriteError, decode, encode, parse_labels, to_table
from tests.prom_services import get_json, node_exporter, prometheus

STALE = struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000002))[0]


def test_round_trip_and_stale_markers():
    series = [({"__name__": "up", "job": "node", "instance": "a:1", "zone": "z"}, [(1000, 1.0), (2000, STALE)]),
              ({"__name__": "load", "job": "node"}, [(1500, 0.25)])]
    back = decode(encode(series))
    assert [s[0] for s in back] == [s[0] for s in series]
    t = to_table(back, parse_labels("job,instance")).to_pylist()
    assert [(r["metric"], r["value"], r["instance"], json.loads(r["labels"])) for r in t] == [
        ("up", 1.0, "a:1", {"zone": "z"}), ("load", 0.25, None, {})]
    assert t[0]["ts"] == datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)


def test_bad_bodies_and_labels_say_what_is_wrong():
    with pytest.raises(RemoteWriteError, match="snappy"):
        decode(b"not snappy at all")
    import cramjam

    with pytest.raises(RemoteWriteError, match="WriteRequest"):
        decode(bytes(cramjam.snappy.compress_raw(b"\xff\xff\xff")))
    with pytest.raises(RemoteWriteError, match="'value'"):
        parse_labels("job,value")


def labels_key(labels: dict) -> tuple:
    return tuple(sorted(labels.items()))


def scrape(url: str) -> dict[tuple, float]:
    """``GET /metrics`` of a running engine: {(sample name, labels): value}."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as r:  # noqa: S310 - the test's engine
        text = r.read().decode()
    return {(s.name, labels_key(s.labels)): s.value for f in text_string_to_metric_families(text) for s in f.samples}


def _key(metric, labels: dict, ts_ms: int, value: float):
    return (metric, tuple(sorted(labels.items())), ts_ms, "nan" if math.isnan(value) else repr(value))


@pytest.mark.slow
def test_real_prometheus_samples_equal_the_archive(pg, engine_factory, tmp_path):
    if not pg.dsn.startswith("host=127.0.0.1"):
        pytest.skip("one backend is enough for the end-to-end receiver test (slow)")
    from moirae.api.access import local_token
    from moirae.api.server import serve
    from moirae.sources.prometheus import build

    engine = engine_factory(spark={"trigger": "300ms"})
    server = None
    try:
        df = build(engine.spark, {"name": "prom", "data_dir": str(engine.data_dir), "labels": "job,instance"})
        engine.source("prom", df, ts="ts", lateness="10 minutes")
        engine.start()
        server = serve(engine, host="127.0.0.1", port=0)
        local_token(engine.data_dir)
        before = scrape(server.url)
        with node_exporter(tmp_path) as target:
            config = f"""
global: {{scrape_interval: 1s, evaluation_interval: 1s}}
scrape_configs:
  - job_name: node
    static_configs: [{{targets: ["{target}"]}}]
remote_write:
  - url: {server.url}/api/receive/prometheus/prom
    authorization: {{credentials_file: {engine.data_dir / 'api.token'}}}
    queue_config: {{batch_send_deadline: 500ms, min_backoff: 100ms, max_backoff: 1s}}
"""
            with prometheus(tmp_path, config) as prom:
                deadline = time.monotonic() + 90
                while time.monotonic() < deadline:  # a few scrapes stored
                    up = get_json(f"{prom}/api/v1/query?query=count_over_time(up%7Bjob%3D%22node%22%7D%5B1m%5D)")
                    if up["data"]["result"] and float(up["data"]["result"][0]["value"][1]) >= 5:
                        break
                    time.sleep(0.5)
                end = time.time() - 2
                window = 3
                got = get_json(f"{prom}/api/v1/query?query=%7Bjob%3D%22node%22%7D%5B{window}s%5D&time={end:.3f}")
                assert got["status"] == "success"
                want = set()
                for s in got["data"]["result"]:
                    labels = dict(s["metric"])
                    metric = labels.pop("__name__")
                    for t, v in s["values"]:
                        want.add(_key(metric, labels, round(float(t) * 1000), float(v)))
                assert len(want) > 20

                lo = datetime.fromtimestamp(end - window, UTC)
                hi = datetime.fromtimestamp(end, UTC)

                def archived():
                    with engine.db.connection() as conn, conn.cursor() as cur:
                        cur.execute("SELECT metric, job, instance, labels, ts, value FROM prom "
                                    "WHERE ts > %s AND ts <= %s", (lo, hi))
                        return cur.fetchall()

                deadline = time.monotonic() + 60
                rows = []
                while time.monotonic() < deadline:  # the archive catches up with what was sent
                    rows = archived()
                    if len(rows) >= len(want):
                        break
                    time.sleep(0.5)
        after = scrape(server.url)
        # the engine's own metrics moved while it took the samples in (GET /metrics)
        for family, labels in (("moirae_received_rows_total", {"kind": "prometheus", "name": "prom"}),
                               ("moirae_archive_rows_total", {"stream": "prom"}),
                               ("moirae_microbatch_duration_seconds_count", {"query": "archive_prom"})):
            assert after.get((family, labels_key(labels)), 0) > before.get((family, labels_key(labels)), 0), family
        for family in ("moirae_archive_waits_total", "moirae_db_errors_total", "moirae_db_retries_total",
                       "moirae_sse_clients", "moirae_time_to_first_history_seconds_count"):
            assert any(k[0] == family for k in after), family
        have = set()
        for metric, job, instance, rest, ts, value in rows:
            labels = {**json.loads(rest), **({"job": job} if job else {}), **({"instance": instance} if instance else {})}
            have.add(_key(metric, labels, round(ts.timestamp() * 1000), value))
        assert len(rows) == len(have), "a sample archived twice"
        assert have == want, (f"{len(want - have)} samples missing, e.g. {sorted(want - have)[:3]}; "
                              f"{len(have - want)} unexpected, e.g. {sorted(have - want)[:3]}")
    finally:
        if server is not None:
            server.stop()
        engine.close()


def test_receiver_source_options_name_the_bad_one(tmp_path):
    from moirae.sources import alerts_in, prometheus

    with pytest.raises(prometheus.RemoteWriteError, match=r"unknown prometheus source option\(s\): lables"):
        prometheus.build(None, {"name": "node", "data_dir": str(tmp_path), "lables": "job"})
    with pytest.raises(alerts_in.AlertPayloadError, match="the alertmanager source needs the option 'data_dir'"):
        alerts_in.build(None, {"name": "am"})
