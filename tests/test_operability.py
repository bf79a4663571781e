"""What an operator sees and sets: Prometheus metrics summed over workers, access logs with the request's
facts (JSON or text that no input can forge), production defaults, OpenTelemetry traces."""

from __future__ import annotations

import json
import re

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.logs import ACCESS_FIELDS
from tests.conftest import UNSPENDABLE, LiveServer

PROBE = {"query": 'query Probe { paper(arxivId: "2402.15627") { title } }', "operationName": "Probe"}
FORGED = "/paper/x%0a2026-11-30%2016:00:00,000%2099%20INFO%20pith.access%20[-]%20GET%20/forged%20200%201.0ms"
FAMILIES = ("pith_http_requests", "pith_graphql_operations", "pith_request_duration_seconds", "pith_statements",
            "pith_db_pool_connections", "pith_subscriptions", "pith_change_log_lag_seconds", "pith_cost_units",
            "pith_cost_points", "pith_operations_refused", "pith_imports", "pith_prepared_path_answers")


def families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


@pytest.fixture(scope="module")
def two_workers(database_url):
    server = LiveServer(database_url, env={"PITH_WORKERS": "2", "PITH_LOG_FORMAT": "json"})
    yield server
    server.stop()


def test_metrics_sum_over_two_workers_and_every_request_has_a_complete_json_access_line(two_workers):
    base = two_workers.base
    ids = []
    for _ in range(40):  # a connection each, so both workers take some
        with httpx.Client(base_url=base, timeout=10) as client:
            response = client.post("/graphql", json=PROBE)
            assert response.status_code == 200 and "errors" not in response.json(), response.text
            ids.append(response.headers["x-request-id"])
    with httpx.Client(base_url=base, timeout=10) as client:
        client.post("/graphql", json={"query": "{ nope }"})
        client.get(FORGED)
        assert client.get("/paper/2402.15627").status_code == 200
    found = {}
    for _ in range(2):  # one scrape per worker, whichever answers: the same sums
        scraped = httpx.get(base + "/metrics", timeout=10)
        assert scraped.status_code == 200 and scraped.headers["content-type"].startswith("text/plain")
        found = families(scraped.text)
        assert set(FAMILIES) <= set(found), sorted(set(FAMILIES) - set(found))
        probes = sum(s.value for s in found["pith_graphql_operations"].samples
                     if s.name.endswith("_total") and s.labels["operation"] == "Probe")
        assert probes >= 40, probes
    outcomes = {s.labels["outcome"] for s in found["pith_graphql_operations"].samples if s.name.endswith("_total")}
    assert {"ok", "invalid"} <= outcomes
    routes = {s.labels["route"] for s in found["pith_http_requests"].samples}
    assert "/graphql" in routes and "/paper/{arxiv_id:path}" in routes, routes
    assert {s.labels["state"] for s in found["pith_db_pool_connections"].samples} == {"idle", "busy", "waiting"}

    lines = [line for line in two_workers.logs().splitlines() if line.strip()]
    assert all(line.startswith("{") for line in lines), [line for line in lines if not line.startswith("{")][:3]
    entries = [json.loads(line) for line in lines]
    access = {e["request_id"]: e for e in entries if e["logger"] == "pith.access"}
    assert set(ids) <= set(access), "a request without its access line"
    for rid in ids:
        entry = access[rid]
        assert set(ACCESS_FIELDS) - {"key"} <= set(entry), entry
        assert entry["operation"] == "Probe" and entry["status"] == 200 and entry["client"] == "127.0.0.1"
        assert entry["bytes"] > 0 and entry["statements"] == 1 and entry["cost"] > 0
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", entry["time"]), entry["time"]
    assert len({access[rid]["pid"] for rid in ids}) == 2, "the 40 requests all went to one worker"
    forged = [e for e in entries if e["logger"] == "pith.access" and e["path"].startswith("/paper/x")]
    assert forged and "\n" in forged[0]["path"]  # the path as sent, inside its own line


def test_text_logs_escape_control_characters(database_url):
    server = LiveServer(database_url)
    try:
        httpx.get(server.base + FORGED, timeout=10)
        httpx.get(server.base + "/paper/%1b%5b31mred", timeout=10)
    finally:
        server.stop()
    lines = server.logs().splitlines()
    prefix = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} \d+ [A-Z]+ [\w.]+ \[")
    assert all(prefix.match(line) for line in lines if line), [line for line in lines if not prefix.match(line)]
    assert not any("/forged" in line and line.index("/forged") < 60 for line in lines)
    # The path is written as a URL writes it: the newline and the escape character percent-encoded.
    assert any("%0A2026-11-30" in line for line in lines) and any("%1B%5B31mred" in line for line in lines)


def test_production_turns_introspection_and_graphiql_off(database_url):
    server = LiveServer(database_url, env={"PITH_ENV": "production", "PITH_ANONYMOUS_POINTS_PER_HOUR": UNSPENDABLE})
    try:
        body = httpx.post(server.base + "/graphql", json={"query": "{ __schema { types { name } } }"}).json()
        assert body["errors"] and "introspection" in body["errors"][0]["message"].lower(), body
        # A browser (the pages link here) is told how to call the API, and nothing of the server's settings.
        page = httpx.get(server.base + "/graphql", headers={"accept": "text/html"})
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html"), page.headers
        assert "does not serve GraphiQL" in page.text and "POST" in page.text and "PITH_" not in page.text
        assert "graphiql.min.js" not in page.text
        # Its pages' links say where they lead in every mode: no word of GraphiQL where it is not served.
        for path in ("/", "/graphql"):
            assert "GraphiQL</a>" not in httpx.get(server.base + path, headers={"accept": "text/html"}).text, path
        ok = httpx.post(server.base + "/graphql", json=PROBE)
        assert ok.status_code == 200 and ok.json()["data"]["paper"]["title"]
    finally:
        server.stop()
    on = LiveServer(database_url, env={"PITH_ENV": "production", "PITH_INTROSPECTION": "1", "PITH_GRAPHIQL": "1",
                                       "PITH_ANONYMOUS_POINTS_PER_HOUR": UNSPENDABLE})
    try:
        body = httpx.post(on.base + "/graphql", json={"query": "{ __schema { queryType { name } } }"}).json()
        assert body["data"]["__schema"]["queryType"]["name"] == "Query"
        assert "graphiql" in httpx.get(on.base + "/graphql", headers={"accept": "text/html"}).text.lower()
    finally:
        on.stop()


@pytest.mark.asyncio(loop_scope="session")
async def test_readiness_details_and_metrics_are_for_operators(database_url):
    from app.main import create_app
    from app.settings import Settings

    settings = Settings.from_env({"DATABASE_URL": database_url, "PITH_ENV": "production",
                                  "PITH_METRICS_TOKEN": "s3cret-token", "PITH_ANONYMOUS_POINTS_PER_HOUR": UNSPENDABLE})
    app = create_app(settings, database_url)
    async with app.router.lifespan_context(app):
        outside = httpx.ASGITransport(app=app, client=("203.0.113.9", 40000))
        async with httpx.AsyncClient(transport=outside, base_url="http://api.example") as client:
            ready = (await client.get("/readyz")).json()
            assert ready == {"status": "ready", "database": "reachable"}
            assert (await client.get("/metrics")).status_code == 403
            wrong = await client.get("/metrics", headers={"authorization": "Bearer nope"})
            assert wrong.status_code == 403 and "PITH_METRICS_TOKEN" in wrong.text
            token = {"authorization": "Bearer s3cret-token"}
            assert "pool" in (await client.get("/readyz", headers=token)).json()
            scraped = await client.get("/metrics", headers=token)
            assert scraped.status_code == 200 and "pith_http_requests" in families(scraped.text)


@pytest.mark.asyncio(loop_scope="session")
async def test_a_trace_has_the_request_its_operation_stages_and_each_statement(database_url):
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import SpanKind

    from app.main import create_app
    from app.settings import Settings

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    app = create_app(Settings(database_url=database_url), database_url, tracer_provider=provider)
    trace_id, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    try:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
                exporter.clear()
                response = await client.post("/graphql", headers={"traceparent": f"00-{trace_id}-{parent}-01"},
                                             json={"query": 'query Record { citationRecord(arxivId: "2402.15627") '
                                                            "{ contextDigest } }", "operationName": "Record"})
                assert response.status_code == 200 and "errors" not in response.json()
    finally:
        from opentelemetry.instrumentation.asyncpg import AsyncPGInstrumentor

        AsyncPGInstrumentor().uninstrument()
    spans = [s for s in exporter.get_finished_spans() if format(s.context.trace_id, "032x") == trace_id]
    by_id = {s.context.span_id: s for s in spans}
    server = [s for s in spans if s.kind is SpanKind.SERVER and s.parent is not None
              and format(s.parent.span_id, "016x") == parent]
    assert server, [(s.name, s.kind) for s in spans]
    names = {s.name for s in spans}
    assert {"GraphQL Parsing", "GraphQL Validation", "GraphQL Execution"} <= names, "\n".join(
        f"{s.name} {s.context.trace_id:032x}" for s in exporter.get_finished_spans())
    statements = [s for s in spans if s.attributes.get("db.system") == "postgresql"]
    assert statements, names

    def ancestors(span):
        while span.parent is not None and span.parent.span_id in by_id:
            span = by_id[span.parent.span_id]
            yield span.name

    execution = next(s for s in spans if s.name == "GraphQL Execution")
    assert all("GraphQL Execution" in set(ancestors(s)) for s in statements if s.start_time >= execution.start_time
               and s.end_time <= execution.end_time)
    assert server[0].name in set(ancestors(execution))




def test_console_traces_over_http_link_access_lines_and_spans_by_ids(database_url):
    """`[otel]` with OTEL_TRACES_EXPORTER=console, as an operator turns it on: every request answers, its
    access line names its trace and server span, and every span of the request carries its request id."""
    pytest.importorskip("opentelemetry.sdk")
    server = LiveServer(database_url, stdout=True, env={
        "OTEL_TRACES_EXPORTER": "console", "OTEL_BSP_SCHEDULE_DELAY": "50", "PITH_LOG_FORMAT": "json"})
    rid = "trace-probe-0001"
    try:
        assert httpx.get(server.base + "/healthz", timeout=10).status_code == 200
        response = httpx.post(server.base + "/graphql", json=PROBE, headers={"x-request-id": rid}, timeout=10)
        assert response.status_code == 200 and "errors" not in response.json(), response.text
        page = httpx.get(server.base + "/paper/2402.15627", timeout=10)
        assert page.status_code == 200
    finally:
        server.stop()  # the batch processor exports what is left as the process exits
    logs = server.logs()
    access = [json.loads(line) for line in logs.splitlines() if line.startswith('{"time"')]
    probe = next(e for e in access if e["logger"] == "pith.access" and e["request_id"] == rid)
    assert re.fullmatch(r"[0-9a-f]{32}", probe["trace_id"]) and re.fullmatch(r"[0-9a-f]{16}", probe["span_id"])
    health = next(e for e in access if e["logger"] == "pith.access" and e["path"] == "/healthz")
    assert health["status"] == 200 and "trace_id" not in health  # probes are not traced
    # The console exporter writes each span as an indented JSON object.
    spans = [json.loads(m.group(0)) for m in re.finditer(r'^\{\n    "name".*?^\}$', logs, re.S | re.M)]
    mine = [s for s in spans if s["context"]["trace_id"] == "0x" + probe["trace_id"]]
    assert mine, [s["name"] for s in spans]
    assert all(s["attributes"].get("pith.request_id") == rid for s in mine), [(s["name"], s["attributes"]) for s in mine]
    server_span = next(s for s in mine if s["kind"] == "SpanKind.SERVER" and s["parent_id"] is None)
    assert server_span["context"]["span_id"] == "0x" + probe["span_id"]
    assert any(s["attributes"].get("db.system") == "postgresql" for s in mine)
    assert {"GraphQL Parsing", "GraphQL Execution"} <= {s["name"] for s in mine}
    assert not any("/healthz" in s["name"] for s in spans)
    page_line = next(e for e in access if e["logger"] == "pith.access" and e["path"] == "/paper/2402.15627")
    assert any(s["context"]["trace_id"] == "0x" + page_line["trace_id"] for s in spans)


def test_a_request_refused_as_written_is_counted_invalid_not_an_error():
    """The operations counter's `error` outcome is the one to alert on (field errors, unexpected failures): a
    document past a shape limit, a body too large, an APQ miss (the protocol's first step) are the client's
    request refused as written."""
    from app.metrics import outcome

    for code in ("QUERY_TOO_COMPLEX", "PAYLOAD_TOO_LARGE", "PERSISTED_QUERY_NOT_FOUND", "GRAPHQL_VALIDATION_FAILED",
                 "BAD_USER_INPUT", "UNSUPPORTED_MEDIA_TYPE"):
        assert outcome([code]) == "invalid", code
    assert outcome(["QUERY_TOO_COSTLY"]) == "too_costly" and outcome(["TIMEOUT"]) == "timeout"
    assert outcome(["INTERNAL_SERVER_ERROR"]) == "error" and outcome([]) == "ok"
