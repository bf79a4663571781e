"""SIGTERM with a request in flight past the shutdown grace: the request is answered in JSON (503 with
Retry-After, in the GraphQL error shape on /graphql), not uvicorn's plain-text 500, and the access line
has its status."""

from __future__ import annotations

import asyncio
import signal

import asyncpg
import httpx
import pytest

from tests.conftest import LiveServer

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_a_request_still_running_at_the_end_of_the_grace_is_answered_in_json(database_url):
    server = LiveServer(database_url, env={"PITH_REQUEST_TIMEOUT": "60", "PITH_STATEMENT_TIMEOUT_MS": "60000",
                                           "PITH_PREPARED_FAST_PATH": "0"}, expect_5xx=True)
    locker = await asyncpg.connect(database_url)
    try:
        transaction = locker.transaction()
        await transaction.start()
        await locker.execute("LOCK TABLE paper_snapshots IN ACCESS EXCLUSIVE MODE")  # the request waits on it
        async with httpx.AsyncClient(base_url=server.base, timeout=60) as client:
            pending = asyncio.ensure_future(client.post("/graphql", json={
                "query": 'query Stuck { paper(arxivId: "2402.15627") { title } }', "operationName": "Stuck"}))
            for _ in range(200):  # until its statement waits on the lock
                if await locker.fetchval("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pith-graph' "
                                         "AND wait_event_type = 'Lock' AND datname = current_database()"):
                    break
                await asyncio.sleep(0.1)
            server.process.send_signal(signal.SIGTERM)
            response = await pending
        await transaction.rollback()
        assert response.status_code == 503, response.text
        assert response.headers["content-type"].startswith("application/"), response.headers
        assert "retry-after" in response.headers
        body = response.json()
        assert "shutting down" in body["errors"][0]["message"], body
        await asyncio.to_thread(server.process.wait, 30)
    finally:
        await locker.close()
        server.stop()
    logs = server.logs()
    assert "POST /graphql 503" in logs, logs[-2000:]
    # Answered, the request ended there: not logged as an error of the application, traceback and all; and the
    # stop past the grace is a warning that says what became of the request, not an error.
    assert "Exception in ASGI application" not in logs and "Traceback" not in logs, logs[-3000:]
    assert " ERROR " not in logs and "1 request(s) still running past the shutdown grace" in logs, logs[-3000:]


async def test_sigterm_tells_every_subscriber_the_cursor_to_resume_from(database_url):
    """SIGTERM with subscribers: an SSE subscription ends with an error naming its `after` cursor; a
    WebSocket is closed 1012 with the cursor in its reason and no error or `complete` before it (graphql-ws
    clients take those as the end for good, and a 1012 as one to reconnect after, sending the subscription
    again)."""
    import json

    from app.live import encode_cursor
    from tests.test_live import CITATIONS, PAPER, Subscription

    conn = await asyncpg.connect(database_url)
    try:
        position = await conn.fetchval("SELECT coalesce(max(position), 0) FROM change_log")
    finally:
        await conn.close()
    cursor = encode_cursor(position)
    server = LiveServer(database_url)
    sse_errors: list = []
    try:
        one = await Subscription(server.base, CITATIONS, {"id": PAPER}).start()

        async def listen() -> None:
            async with httpx.AsyncClient(timeout=30) as client:
                async with client.stream("POST", server.base + "/graphql", json={"query": CITATIONS,
                                                                                  "variables": {"id": PAPER}},
                                         headers={"accept": "text/event-stream"}) as response:
                    async for line in response.aiter_lines():
                        if line.startswith("data:") and line[5:].strip() not in ("", "{}"):
                            data = json.loads(line[5:])
                            sse_errors.extend(data.get("errors") or [])

        streaming = asyncio.create_task(listen())
        await asyncio.sleep(1.0)
        server.process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(one.closed.wait(), 15)
        await asyncio.wait_for(one.ws.wait_closed(), 15)
        await asyncio.wait_for(streaming, 15)
        await asyncio.to_thread(server.process.wait, 30)
    finally:
        server.stop()
    assert one.ws.close_code == 1012, (one.ws.close_code, one.ws.close_reason, one.errors)
    assert cursor in one.ws.close_reason, (one.ws.close_reason, cursor)
    assert one.errors == [], one.errors
    assert [e["extensions"]["after"] for e in sse_errors] == [cursor], sse_errors
