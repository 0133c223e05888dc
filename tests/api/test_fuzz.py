"""Fuzzing the whole HTTP API from its published OpenAPI schema with schemathesis:
for every operation in the schema (new routes are covered the moment
they appear in it), generated requests, valid and invalid, never get a 500, and every
response matches the status codes, content type and schema the OpenAPI document
declares. The API runs over a real engine (real PostgreSQL, the real Recall Manager)
holding events, so generated eids sometimes hit real ones. Auth is on: a token is
configured and every generated request carries it (without it mutations are 401s
and nothing past the access check would be fuzzed)."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance

from moirae.api import create_app
from moirae.api.limits import RateLimiter
from tests.api.api_helpers import add_event

pytestmark = pytest.mark.postgres

#: The live stream never ends, so it cannot be fuzzed by a client waiting for a whole
#: response; its one parameter is checked by the guard (tests/api/test_hygiene.py).
STREAMING = "/api/stream"


#: ``since`` after ``until`` is a 422 (documented in the parameters' description): each
#: is schema-valid alone, and OpenAPI cannot state a rule between two parameters.
CROSS_PARAMETER = "is after until"

#: A posted monitor file is any text to OpenAPI; whether it declares a monitor (its YAML,
#: keys, SQL, streams) is the monitor files' own validation, a 422 naming the line.
MONITOR_FILE = ("POST", "/api/monitors")

#: A retraction names its rows by one of three forms (ids; stream, key and range; a SQL
#: condition) over streams and columns the archive holds, which OpenAPI cannot state:
#: a request naming none, an unknown stream or an unsafe condition is a 422 saying why.
RETRACTION = ("POST", "/api/retractions")
#: A forward lookup needs ids or a stream (each parameter optional alone): naming neither,
#: or a stream the archive lacks, is a 422 saying so.
LOOKUP = ("GET", "/api/lookup")

#: Prometheus remote write: its body is snappy-compressed protobuf, which a schema-driven
#: fuzzer cannot generate (every case fails its filters); malformed bodies are tested by
#: hand (tests/sources/test_prometheus.py: test_bad_bodies_and_labels_say_what_is_wrong).
REMOTE_WRITE = "/api/receive/prometheus/{name}"

#: NEGATIVE_NOTE: invalid requests must get no 500 and a documented, schema-conforming
#: answer; whether each is *rejected* is not checked, because in a query string every
#: value is text: schemathesis' type mutations (``{}``, ``["false"]``) serialize to
#: ``since=`` or ``type=false``, which are valid requests.

#: Generated requests per operation and generation mode (valid, then invalid data).
EXAMPLES = 40
TOKEN = "fuzz-token"
# the in-process client's default host, "testserver", is no host the API serves (DNS rebinding)
AUTH = {"Authorization": f"Bearer {TOKEN}", "Host": "127.0.0.1"}


def _fuzz(operation, mode: GenerationMode) -> None:
    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def run(case):
        response = case.call(headers=AUTH)
        excluded = [negative_data_rejection]  # see NEGATIVE_NOTE
        if response.status_code == 422 and (CROSS_PARAMETER in response.text
                                            or (case.method.upper(), case.path) in (MONITOR_FILE, RETRACTION, LOOKUP)):
            excluded.append(positive_data_acceptance)  # a documented rule OpenAPI cannot express
        case.validate_response(response, excluded_checks=excluded)

    run()


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=str)
def test_api_conforms_to_its_schema(engine, mode, pg_dsn):
    """(schemathesis' pytest plugin cannot load a schema from a fixture under this
    pytest, so each operation's strategy is driven by hypothesis here.) Its subject is
    the HTTP layer: it runs on the embedded backend, the default."""
    if pg_dsn.startswith("host=127.0.0.1"):
        pytest.skip("one backend is enough for the API fuzzer (slow)")
    for i, eid in enumerate(("e1", "e2", "0", "a b")):
        add_event(engine, eid, 170 - i, submit=i == 0)
    app = create_app(engine, token=TOKEN)
    app.state.access.limiter = RateLimiter(per_second=1e9, burst=10**9)  # a fuzzer is not a flood
    schema = schemathesis.openapi.from_asgi("/openapi.json", app, headers=AUTH).exclude(path=STREAMING).exclude(path=REMOTE_WRITE)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 7
    for operation in operations:
        inputs = [*operation.path_parameters, *operation.query, *operation.body]
        if mode is GenerationMode.NEGATIVE and not inputs:
            continue  # nothing to get wrong
        try:
            _fuzz(operation, mode)
        except Unsatisfiable:
            # a string path parameter whose only rule is "no NUL": a fuzzer cannot put a
            # schema-violating value in a URL path (the NUL cases are tested by hand)
            if mode is GenerationMode.POSITIVE or list(operation.query) or list(operation.body):
                raise


def test_every_operation_documents_its_errors(engine):
    """The schema promises one error shape for every 4xx and for 500, on every route
    (so a fuzzer's 404 or 422 is a documented answer, and a 500 is a documented failure)."""
    doc = create_app(engine).openapi()
    ops = [(path, method, op) for path, item in doc["paths"].items() for method, op in item.items()]
    assert {p for p, _, _ in ops} >= {"/api/events", "/api/events/{eid}", "/api/events/{eid}/cancel",
                                      "/api/events/{eid}/accelerate", "/api/archive/chunks",
                                      "/api/scheduler/tasks", "/api/status", STREAMING}
    for path, method, op in ops:
        assert {"4XX", "500"} <= set(op["responses"]), (path, method)
        if path == REMOTE_WRITE:  # 204: Prometheus wants an empty 2xx
            assert set(op["responses"]) >= {"204"}, (path, method)
            continue
        ok = op["responses"]["200"]["content"]
        if path == "/metrics":  # the Prometheus text format, for Prometheus to scrape
            assert "text/plain" in ok, (path, method)
            continue
        if path != STREAMING:
            assert "$ref" in ok["application/json"]["schema"], (path, method, "no response model")
