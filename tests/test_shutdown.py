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
    assert "POST /graphql 503" in server.logs(), server.logs()[-2000:]
