"""HTTP by its own limits, on a real server over raw sockets: a body up to MAX_BODY_BYTES is read whatever
its size relative to the head's bound; a head past MAX_HEADER_BYTES is 431; a header line that never ends
is cut at the bound.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from app.limits import MAX_BODY_BYTES, MAX_HEADER_BYTES
from tests.conftest import UNSPENDABLE, LiveServer

pytestmark = pytest.mark.asyncio(loop_scope="session")

QUERY = '{ paper(arxivId: "2402.15627") { arxivId } }'


APP = "http://app.example"  # an origin the servers here allow


@pytest.fixture(scope="module")
def server(database_url):
    s = LiveServer(database_url, env={"PITH_CORS_ORIGINS": APP})
    yield s
    s.stop()


def post(body: bytes, extra: bytes = b"") -> bytes:
    return (b"POST /graphql HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + extra
            + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


def padded(size: int) -> bytes:
    """A GraphQL request of exactly `size` bytes (JSON allows whitespace between its tokens)."""
    core = json.dumps({"query": QUERY}).encode()
    return core[:-1] + b" " * (size - len(core)) + b"}"


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    status = int(head.split(b" ", 2)[1])
    length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
    return status, await asyncio.wait_for(reader.readexactly(length), 10)


async def test_a_body_up_to_the_documented_limit_is_accepted_in_one_write_or_many(server):
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        for size in (90_000, MAX_BODY_BYTES, 30_000, MAX_HEADER_BYTES + 1):  # on one kept-alive connection
            request = post(padded(size))
            writer.write(request)
            await writer.drain()
            status, body = await read_response(reader)
            assert status == 200, (size, status, body[:300])
            assert json.loads(body)["data"]["paper"]["arxivId"] == "2402.15627"
        # The same in small pieces, as a slow network delivers it.
        request = post(padded(90_000))
        for i in range(0, len(request), 1400):
            writer.write(request[i:i + 1400])
            await writer.drain()
        status, body = await read_response(reader)
        assert status == 200, body[:300]
        # One byte past the body limit: 413, told in the GraphQL shape, never 431.
        writer.write(post(padded(MAX_BODY_BYTES + 1)))
        await writer.drain()
        status, body = await read_response(reader)
        # (Not "431" anywhere in the body: a random request id can hold those digits.)
        assert status == 413 and b"REQUEST_HEADER_FIELDS_TOO_LARGE" not in body, (status, body[:300])
        assert json.loads(body)["errors"][0]["extensions"]["code"] == "PAYLOAD_TOO_LARGE", body[:300]
    finally:
        writer.close()
    # A client that asks first (Expect: 100-continue) for a body declared past the limit: 413 at once, never
    # `100 Continue`, and none of the body is awaited.
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        writer.write(b"POST /graphql HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Expect: 100-continue\r\nContent-Length: 500000\r\n\r\n")
        await writer.drain()
        status, body = await read_response(reader)
        assert status == 413 and json.loads(body)["errors"][0]["extensions"]["code"] == "PAYLOAD_TOO_LARGE", body
        # ... and the connection is closed after it, well before the time a body has (the client never sends the
        # body; a request it sent next on this connection would be read as that body).
        from app.limits import BODY_TIMEOUT_SECONDS

        assert await asyncio.wait_for(reader.read(1000), BODY_TIMEOUT_SECONDS / 3) == b""
    finally:
        writer.close()
    # A body declared past the limit and sent all the same (no Expect): the 413 on a connection that stays
    # open, the body read on and dropped, so that the client reads its answer (a close under a body still
    # arriving resets the connection) and its next request is answered.
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        writer.write(post(padded(MAX_BODY_BYTES + 50_000)) + post(padded(1_000)))
        await writer.drain()
        assert (await read_response(reader))[0] == 413
        status, body = await read_response(reader)
        assert status == 200 and json.loads(body)["data"]["paper"]["arxivId"] == "2402.15627", body[:300]
    finally:
        writer.close()


async def test_a_body_past_the_limit_is_refused_in_words_a_page_of_an_allowed_origin_can_read(server):
    """The body's 413, from a page: its CORS fields and a request id, as every other answer has (the request's
    own layer answers it through the CORS layer); a page of another origin is not allowed to read it."""
    for origin, readable in ((APP, True), ("http://elsewhere.example", False)):
        for declared in (True, False):  # refused from its Content-Length, and as it is read (chunked)
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            try:
                body = padded(MAX_BODY_BYTES + 1)
                head = (b"POST /graphql HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nOrigin: "
                        + origin.encode() + b"\r\n")
                if declared:
                    writer.write(head + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
                else:
                    writer.write(head + b"Transfer-Encoding: chunked\r\n\r\n" + b"".join(
                        b"%x\r\n%s\r\n" % (len(body[i:i + 60_000]), body[i:i + 60_000])
                        for i in range(0, len(body), 60_000)) + b"0\r\n\r\n")
                await writer.drain()
                answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            finally:
                writer.close()
            fields = answer.lower()
            assert answer.startswith(b"HTTP/1.1 413") and b"\r\nx-request-id: " in fields, answer[:400]
            assert (b"access-control-allow-origin: " + origin.encode() in fields) is readable, answer[:600]
            assert b"access-control-expose-headers: " in fields or not readable, answer[:600]


async def test_a_huge_head_gets_431_and_a_never_ending_header_line_is_cut(server):
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(post(padded(200), extra=b"X-Big: " + b"a" * (MAX_HEADER_BYTES + 10) + b"\r\n"))
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(4096), 10)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 431") and b"REQUEST_HEADER_FIELDS_TOO_LARGE" in answer, answer[:200]
    # From a page of an allowed origin (a browser sends Origin before its cookies and most of its own fields): the
    # CORS fields the page needs to read why, and a request id, as every other refusal has.
    for origin, readable in ((APP, True), ("http://elsewhere.example", False)):
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(post(b"{}", extra=b"Origin: " + origin.encode() + b"\r\nCookie: " + b"c" * MAX_HEADER_BYTES
                          + b"\r\n"))
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(4096), 10)
        writer.close()
        head = answer.split(b"\r\n\r\n")[0].lower()
        assert answer.startswith(b"HTTP/1.1 431") and b"\r\nx-request-id: " in head, answer[:400]
        assert (b"access-control-allow-origin: " + origin.encode() in head) is readable, answer[:600]
        assert (b"access-control-expose-headers: " in head) is readable, answer[:600]
    # Many headers, each small, together past the bound.
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(post(b"{}", extra=b"".join(b"X-H%d: %s\r\n" % (i, b"b" * 100) for i in range(400))))
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(4096), 10)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 431"), answer[:200]
    # A header line that never ends: the server stops reading at the bound and closes.
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"POST /graphql HTTP/1.1\r\nHost: x\r\nX-Endless: ")
    sent = 0
    with pytest.raises((ConnectionResetError, BrokenPipeError, asyncio.IncompleteReadError)):
        while sent < 50_000_000:
            writer.write(b"c" * 16384)
            sent += 16384
            await asyncio.wait_for(writer.drain(), 5)
    assert sent < 20_000_000, sent
    writer.close()
    # ... and after a good request on a connection, the next request's head is bounded the same way.
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(post(padded(90_000)))
    await writer.drain()
    status, _ = await read_response(reader)
    assert status == 200
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"d" * (MAX_HEADER_BYTES + 10) + b"\r\n\r\n")
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(4096), 10)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 431"), answer[:200]


async def test_an_answer_to_a_keyed_request_is_for_its_reader_alone(server, database_url):
    import uuid

    import asyncpg
    import httpx

    from app.governor import create_key

    conn = await asyncpg.connect(database_url)
    try:
        _, secret = await create_key(conn, f"cache-{uuid.uuid4().hex[:8]}", 100_000)
    finally:
        await conn.close()
    pinned = '{ paper(arxivId: "2402.15627", asOf: "2026-08-05T04:52:00Z") { arxivId } }'
    async with httpx.AsyncClient(base_url=server.base, timeout=10) as client:
        anonymous = await client.get("/graphql", params={"query": pinned})
        assert anonymous.status_code == 200 and anonymous.headers["cache-control"].startswith("public")
        for path, params in (("/graphql", {"query": pinned}),
                             ("/paper/2402.15627/citation-record.json", {"as_of": "2026-08-05T04:52:00Z"})):
            keyed = await client.get(path, params=params, headers={"authorization": f"Bearer {secret}"})
            assert keyed.status_code == 200, keyed.text
            assert "public" not in keyed.headers["cache-control"] and "private" in keyed.headers["cache-control"]
            assert "authorization" in keyed.headers["vary"].lower(), keyed.headers
        # A refused key is not cached for anyone either.
        refused = await client.get("/graphql", params={"query": pinned}, headers={"authorization": "Bearer pith_x"})
        assert refused.status_code == 401 and "authorization" in refused.headers["vary"].lower()


async def test_a_path_cannot_add_fields_to_a_text_access_line(server):
    import httpx

    async with httpx.AsyncClient(base_url=server.base, timeout=10) as client:
        for raw in ("/nothing%20status=200%20client=192.0.2.1%20key=admin", "/x%0Aforged%20line", '/q%22%20points=0'):
            answer = await client.get(raw)
            assert answer.status_code == 404
    lines = [line for line in server.logs().splitlines() if "pith.access" in line and "/nothing" in line
             or "forged" in line or "points=0" in line]
    assert lines, server.logs()[-2000:]
    for line in lines:
        assert "pith.access" in line, line  # the encoded newline did not start a line of its own
        fields = line.split(" [", 1)[1].split("] ", 1)[1].split(" ")
        assert not {"status=200", "client=192.0.2.1", "key=admin", "points=0"} & set(fields), line
        keys = [f.split("=", 1)[0] for f in fields[4:]]
        assert len(keys) == len(set(keys)), line  # every field once: none was injected


async def test_slow_and_idle_sockets_are_closed_and_websockets_are_not(server):
    """A head that never ends, and a body that never ends, are answered 408 in the GraphQL error shape (with
    `Connection: close`, a request id, and the CORS fields for a page of an allowed origin) and closed after
    HEAD_TIMEOUT_SECONDS / BODY_TIMEOUT_SECONDS; a socket that sends nothing is closed without a word; a
    WebSocket idle as long stays open. (The waits are bounded, never measured.)"""
    import websockets

    from app.limits import BODY_TIMEOUT_SECONDS, HEAD_TIMEOUT_SECONDS

    async def answered(first: bytes) -> bytes:
        """All the server sends before it closes the connection."""
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        try:
            if first:
                writer.write(first)
                await writer.drain()
            return await asyncio.wait_for(reader.read(), max(HEAD_TIMEOUT_SECONDS, BODY_TIMEOUT_SECONDS) * 3)
        finally:
            writer.close()

    async def websocket_outlives_the_timeout() -> bool:
        async with websockets.connect(server.base.replace("http", "ws") + "/graphql",
                                      subprotocols=["graphql-transport-ws"]) as ws:
            await asyncio.sleep(HEAD_TIMEOUT_SECONDS + 2)
            await ws.send(json.dumps({"type": "connection_init"}))
            return json.loads(await asyncio.wait_for(ws.recv(), 10))["type"] == "connection_ack"

    before = server.logs()
    origin = b"Origin: " + APP.encode() + b"\r\n"
    idle, slow, last, body, own, ws = await asyncio.gather(
        answered(b""), answered(b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + origin + b"X-Slow: "),
        # (its Origin and id the last whole lines: the parser has not handed them over when its time is up)
        answered(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Request-ID: slow-head-1\r\n" + origin),
        answered(post(b"{" + b" " * 10, origin)[:-5]),
        answered(post(b"{" + b" " * 10, origin + b"X-Request-ID: slow-body-1\r\n")[:-5]),
        websocket_outlives_the_timeout())
    assert idle == b"" and ws
    assert b"\r\nx-request-id: slow-head-1\r\n" in last.lower(), last[:400]
    ids = []
    for answer in (slow, last, body, own):
        head, _, content = answer.partition(b"\r\n\r\n")
        fields = head.lower()
        assert head.startswith(b"HTTP/1.1 408 "), answer[:400]
        assert b"\r\nconnection: close" in fields and b"\r\nx-request-id: " in fields, answer[:400]
        assert b"\r\naccess-control-allow-origin: " + APP.encode() in fields, answer[:400]
        error = json.loads(content)["errors"][0]
        assert error["extensions"]["code"] == "REQUEST_TIMEOUT" and "s from" in error["message"], error
        ids.append((error["extensions"]["requestId"], len(content)))
    assert ids[3][0] == "slow-body-1"  # the client's own id, as on every other answer
    # A body's request was the application's: its access line says how it ended, under the id its answer has.
    logged = server.logs()[len(before):]
    for rid, size in ids[2:]:
        assert any(f"[{rid}] POST /graphql 408 " in line and f"bytes={size}" in line for line in logged.splitlines()
                   if "pith.access" in line), logged[-2000:]


async def test_past_its_connection_limit_a_worker_answers_503_with_retry_after(database_url):
    """limit_concurrency follows the file-descriptor limit: a server started with few descriptors answers
    the connection past its limit 503 with Retry-After instead of failing to accept it."""
    import resource

    from app.cli import concurrency_limit
    from app.settings import Settings

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))  # the server process inherits it
    try:
        limit = concurrency_limit(Settings())
        small = LiveServer(database_url, env={"PITH_CORS_ORIGINS": APP})
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    held = []
    try:
        for i in range(limit):  # from several addresses, each within its share of the connections, each busy with
            # a request whose body is on its way (one that has not brought a request through is closed for a new one)
            held.append(await asyncio.open_connection("127.0.0.1", small.port, local_addr=(f"127.0.1.{i % 6 + 1}", 0)))
            held[-1][1].write(b"POST /graphql HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                              b"Content-Length: 100\r\n\r\n{")
        await asyncio.sleep(0.3)
        reader, writer = await asyncio.open_connection("127.0.0.1", small.port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nOrigin: " + APP.encode() + b"\r\n\r\n")
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        body = await asyncio.wait_for(reader.read(4096), 10)
        writer.close()
        assert head.startswith(b"HTTP/1.1 503") and b"SERVICE_UNAVAILABLE" in body, (head, body)
        # A page can read it (and its Retry-After), and it carries a request id like every refusal.
        fields = head.lower()
        assert b"access-control-allow-origin: " + APP.encode() in fields and b"retry-after: " in fields, head
        assert b"x-request-id: " in fields and b'"requestId"' in body, (head, body)
    finally:
        for _, w in held:
            w.close()
        small.stop()
    assert 32 <= limit < 256


async def test_a_replaced_worker_is_logged_with_why(database_url):
    import os
    import signal
    import time

    import psutil

    two = LiveServer(database_url, env={"PITH_WORKERS": "2"})
    try:
        workers = [p for p in psutil.Process(two.process.pid).children(recursive=True)
                   if "multiprocessing" not in " ".join(p.cmdline()) or "spawn_main" in " ".join(p.cmdline())]
        victim = max(workers, key=lambda p: p.create_time())
        os.kill(victim.pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and "replaced" not in two.logs():
            await asyncio.sleep(0.2)
        lines = [line for line in two.logs().splitlines() if "replaced" in line]
        assert lines and "WARNING" in lines[0] and f"[{victim.pid}]" in lines[0], two.logs()[-2000:]
        assert "health check" in lines[0]
        assert "Started server process" not in two.logs()  # uvicorn's other INFO lines stay out
    finally:
        two.stop()


async def test_one_address_cannot_hold_every_connection(database_url):
    """Idle sockets from one address that is not a trusted proxy hold at most a quarter of a worker's
    connections: with the descriptors of a small server all but taken from 127.0.0.2, 127.0.0.1 is served."""
    import resource

    from app.cli import concurrency_limit
    from app.settings import Settings

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
    try:
        limit = concurrency_limit(Settings())
        small = LiveServer(database_url)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    held = []
    try:
        for _ in range(limit + 10):
            held.append(await asyncio.open_connection("127.0.0.1", small.port, local_addr=("127.0.0.2", 0)))
        await asyncio.sleep(0.5)  # the server has closed those past the address's share
        open_ones = 0
        for reader, writer in held:
            try:
                gone = await asyncio.wait_for(reader.read(1), 0.05) == b""
            except asyncio.TimeoutError:
                gone = False
            open_ones += not gone
        assert open_ones <= max(8, limit // 4), (open_ones, limit)
        reader, writer = await asyncio.open_connection("127.0.0.1", small.port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        status, _ = await read_response(reader)
        writer.close()
        assert status == 200
    finally:
        for _, w in held:
            w.close()
        small.stop()


async def test_websockets_do_not_use_up_their_address_share_of_connections(database_url):
    """A WebSocket leaves the HTTP protocol's count of its address's connections when it upgrades: many
    WebSockets opened and closed one after another never lock their address out."""
    import resource

    import websockets

    from app.cli import concurrency_limit
    from app.settings import Settings

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
    try:
        share = max(8, concurrency_limit(Settings()) // 4)
        small = LiveServer(database_url)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        for _ in range(share + 10):
            async with websockets.connect(small.base.replace("http", "ws") + "/graphql",
                                          subprotocols=["graphql-transport-ws"]) as ws:
                await ws.send(json.dumps({"type": "connection_init"}))
                assert json.loads(await ws.recv())["type"] == "connection_ack"
        reader, writer = await asyncio.open_connection("127.0.0.1", small.port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        status, _ = await read_response(reader)
        writer.close()
        assert status == 200
    finally:
        small.stop()


async def test_a_websocket_message_is_bounded_as_a_body_is(server):
    """A WebSocket message carries a request as a body does: one of a body's size is answered, one past
    MAX_WS_MESSAGE_BYTES is closed 1009 as it arrives (uvicorn's own default read 16 MiB whole, then the
    document, for seconds of a worker)."""
    import websockets

    from app.limits import MAX_WS_MESSAGE_BYTES

    url = server.base.replace("http", "ws") + "/graphql"

    def subscribe(size: int) -> str:
        core = json.dumps({"id": "1", "type": "subscribe", "payload": {"query": QUERY + " #"}})
        return core[:-3] + "x" * (size - len(core)) + core[-3:]

    async with websockets.connect(url, subprotocols=["graphql-transport-ws"], max_size=None) as ws:
        await ws.send(json.dumps({"type": "connection_init"}))
        assert json.loads(await ws.recv())["type"] == "connection_ack"
        message = subscribe(MAX_BODY_BYTES)
        assert len(message) == MAX_BODY_BYTES
        await ws.send(message)
        answer = json.loads(await asyncio.wait_for(ws.recv(), 30))
        assert answer["type"] == "next" and answer["payload"]["data"]["paper"]["arxivId"] == "2402.15627", answer
    async with websockets.connect(url, subprotocols=["graphql-transport-ws"], max_size=None) as ws:
        await ws.send(json.dumps({"type": "connection_init"}))
        assert json.loads(await ws.recv())["type"] == "connection_ack"
        await ws.send(subscribe(MAX_WS_MESSAGE_BYTES + 1))
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), 30)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009, closed.value


async def test_variables_are_measured_as_sent(server):
    """Variables were measured as Python's json.dumps writes them (a space after every comma and colon):
    19,000 bytes of a 1,500-key object were refused as larger than 20,000. They are measured as compact JSON,
    as clients send them."""
    import httpx

    from app.limits import MAX_VARIABLES_BYTES

    pad = {f"k{i:04d}": i for i in range(1_500)}
    variables = {"id": "2402.15627", "pad": pad}
    sent = len(json.dumps(variables, separators=(",", ":")))
    assert sent < MAX_VARIABLES_BYTES < len(json.dumps(variables))
    body = json.dumps({"query": "query($id: String!) { paper(arxivId: $id) { arxivId } }", "variables": variables},
                      separators=(",", ":"))
    answer = await asyncio.to_thread(httpx.post, server.base + "/graphql", content=body,
                                     headers={"content-type": "application/json"})
    assert answer.status_code != 413, answer.text
    assert answer.json()["data"]["paper"]["arxivId"] == "2402.15627", answer.text


@pytest.mark.parametrize("protocol", ["graphql-transport-ws", "graphql-ws"])
async def test_variables_past_their_limit_are_refused_on_a_websocket_as_over_http(server, protocol):
    """The 20 kB bound on variables held for POST, SSE and multipart (413 PAYLOAD_TOO_LARGE) only: a
    WebSocket ran an operation with 90 kB of them. Now every transport's stream refuses them, in HTTP's words."""
    import websockets

    from app.limits import MAX_VARIABLES_BYTES

    url = server.base.replace("http", "ws") + "/graphql"
    variables = {"id": "2402.15627", "pad": "x" * (MAX_VARIABLES_BYTES + 10)}
    query = "query($id: String!, $pad: String) { paper(arxivId: $id) { arxivId } }"
    over_http = await asyncio.to_thread(
        __import__("httpx").post, server.base + "/graphql", json={"query": query, "variables": variables})
    assert over_http.status_code == 413
    said = over_http.json()["errors"][0]["message"]
    start = "subscribe" if protocol == "graphql-transport-ws" else "start"
    async with websockets.connect(url, subprotocols=[protocol], max_size=None) as ws:
        await ws.send(json.dumps({"type": "connection_init"}))
        assert json.loads(await ws.recv())["type"] == "connection_ack"
        await ws.send(json.dumps({"id": "1", "type": start, "payload": {"query": query, "variables": variables}}))
        while True:
            answer = json.loads(await asyncio.wait_for(ws.recv(), 30))
            if answer["type"] != "ka":
                break
    payload = answer["payload"]  # graphql-transport-ws: a list of errors; graphql-ws: one, or a result
    errors = payload if isinstance(payload, list) else payload.get("errors") or [payload]
    assert errors and errors[0]["extensions"]["code"] == "PAYLOAD_TOO_LARGE", answer
    assert errors[0]["message"] == said


async def test_a_body_past_the_limit_is_charged_and_says_what_its_budget_holds(database_url):
    """The request layer's 413 costs its client a point, as every refusal does, and says so as every governed answer
    does: the RateLimit fields after the charge (a client reading them saw its budget only on other answers)."""
    import httpx

    production = LiveServer(database_url, env={"PITH_ENV": "production", "PITH_ANONYMOUS_POINTS_PER_HOUR": UNSPENDABLE})
    try:
        async with httpx.AsyncClient(base_url=production.base, timeout=30) as client:
            ok = await client.post("/graphql", content=padded(200), headers={"content-type": "application/json"})
            left = [int(ok.headers["ratelimit"].split("r=")[1].split(";")[0])]
            for declared in (True, False):  # refused from its Content-Length, and as it is read (chunked)
                body = padded(MAX_BODY_BYTES + 1)
                async def chunks(body: bytes = body):  # noqa: ANN202 - no Content-Length: read until the limit
                    yield body[:50_000]
                    yield body[50_000:]

                too_big = await client.post("/graphql", content=body if declared else chunks(),
                                            headers={"content-type": "application/json"})
                assert too_big.status_code == 413, too_big.text
                assert "ratelimit-policy" in too_big.headers, too_big.headers
                left.append(int(too_big.headers["ratelimit"].split("r=")[1].split(";")[0]))
        assert left[0] > left[1] > left[2], left
    finally:
        production.stop()


async def test_a_request_the_parser_refuses_is_told_why_in_the_shape_of_every_refusal(server):
    """A method of other characters than letters, a control character in a header, a request line that is not
    HTTP: uvicorn answered these in plain text ("Invalid HTTP request received."); they are 400 in the GraphQL
    error shape, with a request id, as every other refusal is."""
    for request in (b"G@T /graphql HTTP/1.1\r\nHost: x\r\n\r\n",
                    b"GET /graphql HTTP/1.1\r\nHost: x\r\nX-Bad: a\x01b\r\n\r\n",
                    b"GET /graphql HTTP/1.1\r\nHo st: x\r\n\r\n",
                    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"):  # a TLS hello sent to the plain port
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(request)
        await writer.drain()
        try:
            status, body = await read_response(reader)
        finally:
            writer.close()
        assert status == 400, (request, status, body)
        (error,) = json.loads(body)["errors"]
        assert error["extensions"]["code"] == "BAD_REQUEST" and error["extensions"]["requestId"], error
        assert "HTTP/1.1" in error["message"], error
        # The id the client is told is in the server's log, to find what it refused and why.
        assert f"(request id {error['extensions']['requestId']})" in server.logs(), server.logs()[-1500:]
    # A client's own id, and its Origin, when they are the last whole lines before the fault (the parser hands a
    # header over only once the next begins).
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"GET /graphql HTTP/1.1\r\nHost: x\r\nOrigin: " + APP.encode() + b"\r\nX-Request-ID: garbled-1\r\n"
                 b"Bad Header: x\r\n\r\n")
    await writer.drain()
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    finally:
        writer.close()
    assert head.startswith(b"HTTP/1.1 400") and b"\r\nx-request-id: garbled-1\r\n" in head.lower(), head
    assert b"\r\naccess-control-allow-origin: " + APP.encode() in head.lower(), head


async def test_a_request_names_its_host_once(server):
    """RFC 9112, section 3.2: an HTTP/1.1 request without a Host header, and any request with two, are answered 400
    (two could name one host to a proxy and another to this server); HTTP/1.0 may leave it out."""
    async def status_of(request: bytes) -> tuple[int, bytes]:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        try:
            writer.write(request)
            await writer.drain()
            return await read_response(reader)
        finally:
            writer.close()

    for request, expected in ((b"GET /healthz HTTP/1.1\r\n\r\n", 400),
                              (b"GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
                              (b"GET /healthz HTTP/1.0\r\nHost: a\r\nhost: a\r\n\r\n", 400),
                              (b"GET /healthz HTTP/1.0\r\n\r\n", 200),
                              (b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n", 200)):
        status, body = await status_of(request)
        assert status == expected, (request, status, body)
        if expected == 400:
            error = json.loads(body)["errors"][0]
            assert error["extensions"]["code"] == "BAD_REQUEST" and "Host header" in error["message"], error
    # Refused behind requests pipelined before it (one write), it is answered after their answers, in order; and a
    # request the parser refuses, so too.
    for refused in (b"GET /healthz HTTP/1.1\r\n\r\n", b"G@T /healthz HTTP/1.1\r\nHost: a\r\n\r\n"):
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        try:
            writer.write(post(padded(2_000)) + post(padded(1_000)) + refused)
            await writer.drain()
            answers = [await read_response(reader) for _ in range(3)]
        finally:
            writer.close()
        assert [status for status, _ in answers] == [200, 200, 400], (refused, answers)
        assert json.loads(answers[0][1])["data"]["paper"]["arxivId"] == "2402.15627", answers[0]


async def test_idle_sockets_from_many_addresses_yield_to_a_new_client_before_descriptors_run_out(database_url):
    """Three idle sockets from each of a hundred addresses (each well within its share) on a worker with 256
    file descriptors: they were all accepted till the descriptors ran out, and every new connection after was
    reset unanswered. Past `limit_concurrency` a connection that never brought a request through is closed for
    a new one (sent nothing, or a head left unfinished), so a client that comes then is answered; and a client
    on a kept-alive connection, between its requests while such sockets flood in, keeps its connection."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
    try:
        small = LiveServer(database_url)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    held = []

    async def flood(waves: int, head: bytes) -> None:
        for wave in range(waves):
            for n in range(300):
                _, w = await asyncio.open_connection("127.0.0.1", small.port, local_addr=(f"127.0.1.{n % 100 + 1}", 0))
                w.write(head)
                held.append(w)
            await asyncio.sleep(0.05)

    async def light(until: asyncio.Task) -> list[int]:
        statuses = []
        reader, writer = await asyncio.open_connection("127.0.0.1", small.port, local_addr=("127.0.2.1", 0))
        try:
            while not until.done() or not statuses:
                writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                await writer.drain()
                statuses.append((await read_response(reader))[0])
                await asyncio.sleep(0.05)
        finally:
            writer.close()
        return statuses

    try:
        for head in (b"", b"GET /healthz HTTP/1.1\r\nHost: x\r\n"):  # idle sockets, then unfinished heads
            flooding = asyncio.create_task(flood(3, head))
            statuses = await light(flooding)
            await flooding
            assert statuses and set(statuses) == {200}, statuses
            for _ in range(5):
                reader, writer = await asyncio.open_connection("127.0.0.1", small.port, local_addr=("127.0.2.2", 0))
                writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                await writer.drain()
                try:
                    status, _ = await read_response(reader)
                finally:
                    writer.close()
                assert status == 200, status
            for w in held:
                w.close()
            held.clear()
            await asyncio.sleep(0.5)
    finally:
        for w in held:
            w.close()
        small.stop()
