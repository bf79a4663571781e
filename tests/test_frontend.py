"""What frontend clients send with their defaults, answered as they expect: Accept lists, SSE framing,
CORS preflights and refusals, WebSocket errors, scalar specifications, errors that stay local."""

from __future__ import annotations

import json

import httpx
import pytest
import websockets

from app.cors import DEFAULT_HEADERS
from tests.conftest import SEED_AS_OF, LiveServer

asyncio = pytest.mark.asyncio(loop_scope="session")

APP = "http://app.example"
URQL_ACCEPT = ("application/graphql-response+json, application/graphql+json, application/json, text/event-stream, "
               "multipart/mixed")
QUERY = '{ paper(arxivId: "2402.15627") { title } }'


@pytest.fixture(scope="module")
def app_server(database_url):
    server = LiveServer(database_url, env={"PITH_CORS_ORIGINS": APP, "PITH_CORS_HEADERS": "x-custom-thing"})
    yield server
    server.stop()


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_a_query_with_urqls_accept_answers_json(live, method):
    headers = {"accept": URQL_ACCEPT}
    if method == "GET":
        response = httpx.get(live.base + "/graphql", params={"query": QUERY}, headers=headers)
        assert response.headers.get("etag")
    else:
        response = httpx.post(live.base + "/graphql", json={"query": QUERY}, headers=headers)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/graphql-response+json")
    assert response.json()["data"]["paper"]["title"]


@pytest.mark.parametrize(("accept", "streams"), [
    ("text/event-stream", True),
    ("text/event-stream, application/json;q=0", True),
    ("application/json;q=0.1, text/event-stream", False),
    ("*/*, text/event-stream", False),
])
def test_q_values_decide_whether_a_query_streams(live, accept, streams):
    response = httpx.post(live.base + "/graphql", json={"query": QUERY}, headers={"accept": accept})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream") is streams, response.headers


SUBSCRIPTION = "subscription($id: String!) { recordChanged(arxivId: $id) { asOf } }"


def test_a_subscription_with_urqls_accept_streams_with_lines_ended_by_lf(live):
    with httpx.stream("POST", live.base + "/graphql", headers={"accept": URQL_ACCEPT}, timeout=10,
                      json={"query": "subscription { citationAdded(arxivId: \"x\") { cursor } }"}) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        body = b"".join(response.iter_bytes())
    assert b"\r" not in body and body.endswith(b"\n\n") and b"event: next\ndata: {" in body, body
    payload = json.loads(body.split(b"event: next\ndata: ", 1)[1].split(b"\n", 1)[0])
    assert payload["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT", payload


@pytest.mark.parametrize("header", [*DEFAULT_HEADERS, "x-custom-thing"])
def test_a_preflight_for_each_header_clients_send_passes(app_server, header):
    response = httpx.options(app_server.base + "/graphql", headers={
        "origin": APP, "access-control-request-method": "POST", "access-control-request-headers": header})
    assert response.status_code == 200, response.text  # Starlette's own answer
    assert response.headers["access-control-allow-origin"] == APP
    assert header in response.headers["access-control-allow-headers"].lower().split(", ")


def test_a_preflight_with_all_of_apollos_headers_at_once_passes(app_server):
    response = httpx.options(app_server.base + "/graphql", headers={
        "origin": APP, "access-control-request-method": "POST",
        "access-control-request-headers": "content-type,apollographql-client-name,apollographql-client-version,"
                                          "x-apollo-operation-name,apollo-require-preflight,authorization,traceparent"})
    assert response.status_code == 200, response.text


def test_a_refused_preflight_says_why_in_graphql_shape(app_server):
    response = httpx.options(app_server.base + "/graphql", headers={
        "origin": "http://elsewhere.example", "access-control-request-method": "PUT",
        "access-control-request-headers": "x-unknown"})
    assert response.status_code == 403
    error = response.json()["errors"][0]
    assert error["extensions"]["code"] == "CORS_REFUSED"
    for part in ("http://elsewhere.example", APP, "PUT", "x-unknown", "PITH_CORS_HEADERS"):
        assert part in error["message"], error["message"]
    # An allowed origin whose preflight names an empty header (Starlette refuses it): the reason, not silence.
    response = httpx.options(app_server.base + "/graphql", headers={
        "origin": APP, "access-control-request-method": "POST", "access-control-request-headers": ""})
    assert response.status_code == 403 and "empty header" in response.json()["errors"][0]["message"], response.text


def test_without_origins_a_preflight_names_the_setting_and_plain_options_are_answered(live):
    response = httpx.options(live.base + "/graphql", headers={"origin": APP, "access-control-request-method": "POST"})
    assert response.status_code == 403
    error = response.json()["errors"][0]
    assert error["extensions"]["code"] == "CORS_REFUSED" and "PITH_CORS_ORIGINS" in error["message"]
    plain = httpx.options(live.base + "/graphql")
    assert plain.status_code == 204 and "POST" in plain.headers["allow"]


def test_simple_cross_origin_answers_expose_what_clients_read(app_server):
    response = httpx.get(app_server.base + "/graphql", params={"query": QUERY}, headers={"origin": APP})
    assert response.headers["access-control-allow-origin"] == APP
    exposed = response.headers["access-control-expose-headers"].lower().split(", ")
    for header in ("etag", "x-request-id", "ratelimit", "retry-after", "x-truncated", "x-cost-points", "x-as-of",
                   "content-disposition"):  # (what the exports say of themselves too)
        assert header in exposed, exposed
    # A page of a named origin may send its credentials (Apollo's and urql's credentials: "include").
    assert response.headers["access-control-allow-credentials"] == "true"
    preflight = httpx.options(app_server.base + "/graphql", headers={
        "origin": APP, "access-control-request-method": "POST",
        "access-control-request-headers": "content-type,cache-control,pragma,baggage,sentry-trace"})
    assert preflight.status_code == 200 and preflight.headers["access-control-allow-credentials"] == "true"


@asyncio
async def test_a_star_allows_every_origin_over_http_and_websocket(database_url):
    server = LiveServer(database_url, env={"PITH_CORS_ORIGINS": "*"})
    try:
        anywhere = "http://anywhere.example:8080"
        async with httpx.AsyncClient(base_url=server.base) as client:
            preflight = await client.options("/graphql", headers={
                "origin": anywhere, "access-control-request-method": "POST",
                "access-control-request-headers": "content-type"})
            answer = await client.post("/graphql", json={"query": QUERY}, headers={"origin": anywhere})
        assert preflight.status_code == 200 and preflight.headers["access-control-allow-origin"] == "*"
        assert answer.status_code == 200 and answer.headers["access-control-allow-origin"] == "*"
        # Any origin, but not with credentials: behind a proxy that signs readers in by cookie, every site would
        # read with its reader's view.
        assert "access-control-allow-credentials" not in answer.headers, answer.headers
        url = server.base.replace("http://", "ws://") + "/graphql"
        async with websockets.connect(url, subprotocols=["graphql-transport-ws"], origin=anywhere) as ws:
            await ws.send(json.dumps({"type": "connection_init"}))
            assert json.loads(await ws.recv()) == {"type": "connection_ack"}
    finally:
        server.stop()
    assert "Traceback" not in server.logs() and " ERROR " not in server.logs(), server.logs()


@asyncio
async def test_a_cross_origin_websocket_is_closed_with_a_reason(live):
    url = live.base.replace("http://", "ws://") + "/graphql"
    async with websockets.connect(url, subprotocols=["graphql-transport-ws"], origin="http://elsewhere.example") as ws:
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await ws.recv()
    assert closed.value.rcvd.code == 4403
    assert "http://elsewhere.example" in closed.value.rcvd.reason and "PITH_CORS_ORIGINS" in closed.value.rcvd.reason


@asyncio
@pytest.mark.parametrize("protocol", ["graphql-transport-ws", "graphql-ws"])
async def test_websocket_errors_carry_a_code(live, protocol):
    url = live.base.replace("http://", "ws://") + "/graphql"
    start = "subscribe" if protocol == "graphql-transport-ws" else "start"
    async with websockets.connect(url, subprotocols=[protocol]) as ws:
        await ws.send(json.dumps({"type": "connection_init"}))
        assert json.loads(await ws.recv())["type"] == "connection_ack"
        queries = ["subscription { nope }", "subscription { citationAdded(arxivId: \"x\") { cursor } }",
                   "{ paper(arxivId: \"2402.15627\") { inbound(after: \"bad\") { totalCount } } }"]
        for n, query in enumerate(queries):
            await ws.send(json.dumps({"id": str(n), "type": start, "payload": {"query": query}}))
        errors: dict[str, list] = {}
        while len(errors) < len(queries):
            message = json.loads(await ws.recv())
            if message["type"] in ("next", "data", "error"):
                payload = message["payload"]
                found = payload if isinstance(payload, list) else payload.get("errors") or [payload]
                errors[message["id"]] = found
        for found in errors.values():
            assert found and all(e.get("extensions", {}).get("code") for e in found), errors
        assert "INTERNAL_SERVER_ERROR" not in json.dumps(errors)


def test_custom_scalars_name_their_specification(live):
    body = httpx.post(live.base + "/graphql", json={"query": """{ d: __type(name: "DateTime") { specifiedByURL }
      j: __type(name: "JSON") { specifiedByURL } }"""}).json()
    assert body["data"]["d"]["specifiedByURL"].startswith("https://scalars.graphql.org/")
    assert body["data"]["j"]["specifiedByURL"] == "https://www.rfc-editor.org/rfc/rfc8259"


def test_a_bad_cursor_nulls_the_connection_not_the_paper(live):
    body = httpx.post(live.base + "/graphql", json={"query": """{ paper(arxivId: "2402.15627", asOf: "%s") {
      title inbound(after: "bad") { totalCount } outbound(first: 1) { totalCount } timeline(after: "bad") { nodes { at } } } }"""
                                                             % SEED_AS_OF}).json()
    paper = body["data"]["paper"]
    assert paper["title"] and paper["inbound"] is None and paper["timeline"] is None
    assert paper["outbound"]["totalCount"] >= 0
    assert {tuple(e["path"]) for e in body["errors"]} == {("paper", "inbound"), ("paper", "timeline")}
    assert all(e["extensions"]["code"] == "BAD_USER_INPUT" for e in body["errors"])
    search = httpx.post(live.base + "/graphql", json={"query": """{ searchPapers(query: "x", after: "bad") { nodes { id } }
      paper(arxivId: "2402.15627") { title } }"""}).json()
    assert search["data"]["searchPapers"] is None and search["data"]["paper"]["title"]


def _exchange(sock, request: bytes) -> tuple[bytes, dict[str, str], bytes]:
    """One HTTP/1.1 exchange on an open socket: status line, headers, and exactly Content-Length bytes."""
    sock.sendall(request)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"the server closed the connection: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status, *lines = head.split(b"\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.decode().partition(":") for line in lines)}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection before the body it announced"
        body += chunk
    assert len(body) == length, (headers, body)
    return status, headers, body


def test_an_allowed_preflight_is_well_formed_and_keeps_the_connection_alive(database_url):
    """Over a real socket: an allowed preflight's body is as long as it says, the connection serves the
    next request, and the server logs no error (the answer once announced 2 bytes and sent none)."""
    import socket

    # Origins as people write them: trailing slash, upper-case scheme and host, the default port.
    server = LiveServer(database_url, env={"PITH_CORS_ORIGINS": "HTTP://App.Example:80/, https://other.example"})
    try:
        host, port = "127.0.0.1", server.port
        with socket.create_connection((host, port), timeout=10) as sock:
            for _ in range(2):
                status, headers, body = _exchange(sock, (
                    f"OPTIONS /graphql HTTP/1.1\r\nHost: {host}:{port}\r\nOrigin: {APP}\r\n"
                    "Access-Control-Request-Method: POST\r\n"
                    "Access-Control-Request-Headers: content-type, apollographql-client-name\r\n\r\n").encode())
                assert status.split()[1] == b"200", (status, headers, body)
                assert headers["access-control-allow-origin"] == APP
                assert "content-type" in headers["access-control-allow-headers"].lower()
                assert headers.get("connection", "").lower() != "close"
            query = json.dumps({"query": QUERY}).encode()
            status, headers, body = _exchange(sock, (
                f"POST /graphql HTTP/1.1\r\nHost: {host}:{port}\r\nOrigin: {APP}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(query)}\r\n\r\n").encode() + query)
            assert status.split()[1] == b"200" and json.loads(body)["data"]["paper"]["title"], body
            assert headers["access-control-allow-origin"] == APP
        refused = httpx.options(server.base + "/graphql", headers={
            "origin": "http://elsewhere.example", "access-control-request-method": "POST"})
        assert refused.status_code == 403 and len(refused.content) == int(refused.headers["content-length"])
        assert "http://app.example, https://other.example" in refused.json()["errors"][0]["message"]
    finally:
        server.stop()
    logs = server.logs()
    for sign in ("Traceback", "RuntimeError", "ASGI callable", "ERROR", "Exception"):
        assert sign not in logs, logs


@pytest.mark.parametrize(("given", "origins"), [
    ("http://localhost:5173/", ("http://localhost:5173",)),
    ("HTTPS://App.Example.org:443, http://App.example.org:8080", ("https://app.example.org",
                                                                  "http://app.example.org:8080")),
    ("http://[::1]:3000, http://[::1]:3000/", ("http://[::1]:3000",)),
    ("*", ("*",)),
])
def test_cors_origins_are_normalized_as_browsers_send_them(given, origins):
    from app.settings import Settings

    assert Settings.from_env({"PITH_CORS_ORIGINS": given}).cors_origins == origins


@pytest.mark.parametrize("given", ["localhost:5173", "http://app.example/path", "ftp://app.example",
                                   "http://app.example:99999", "http://user@app.example", "https://"])
def test_a_cors_origin_that_is_not_one_stops_the_start_with_the_form_to_give(given, database_url):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "app.cli", "serve", "--port", "1"], capture_output=True,
                          text=True, timeout=60, env={**__import__("os").environ, "DATABASE_URL": database_url,
                                                      "PITH_CORS_ORIGINS": f"http://ok.example, {given}"})
    assert done.returncode == 2, done
    assert "PITH_CORS_ORIGINS" in done.stderr and repr(given) in done.stderr and "scheme://host" in done.stderr
    assert "Traceback" not in done.stderr, done.stderr
