"""The database going away and coming back: 503 with Retry-After, readiness, recovery without a restart."""

from __future__ import annotations

import asyncio
import time

import asyncpg
import pytest

from app.db.migrate import migrate
from app.ingest.load import load_file
from app.settings import Settings
from tests.conftest import SEED, SEED_AS_OF, StatementLog, seed_bytes, serve
from tests.pgcontrol import StoppablePostgres

pytestmark = pytest.mark.asyncio(loop_scope="session")


@pytest.fixture(scope="module")
def stoppable():
    pg = StoppablePostgres()
    yield pg
    pg.close()


async def test_database_stop_gives_503_and_recovery_needs_no_restart(stoppable):
    conn = await asyncpg.connect(stoppable.url)
    try:
        await migrate(conn)
        await load_file(conn, str(SEED))
    finally:
        await conn.close()
    settings = Settings(database_url=stoppable.url, pool_min=2, pool_max=4, statement_timeout_ms=5000)
    record = f"/paper/2402.15627/citation-record.json?as_of={SEED_AS_OF}"
    query = {"query": '{ paper(arxivId: "2402.15627") { title inbound(first: 3) { totalCount } } }'}
    async for s in serve(stoppable.url, StatementLog(), settings, expect_5xx=True):  # the database is stopped on purpose
        assert (await s.client.get(record)).content == seed_bytes()
        assert (await s.client.get("/readyz")).status_code == 200

        stoppable.stop()
        started = time.monotonic()
        down = await s.client.get(record)
        assert down.status_code == 503 and down.headers["retry-after"]
        assert "unavailable" in down.json()["error"]["message"]
        gql = await s.client.post("/graphql", json=query)
        assert gql.status_code == 503 and gql.headers["retry-after"]
        assert gql.json()["errors"][0]["extensions"]["code"] == "SERVICE_UNAVAILABLE"
        ready = await s.client.get("/readyz")
        assert ready.status_code == 503 and ready.json()["database"] == "unreachable"
        assert time.monotonic() - started < 20, "requests while the database is down must not hang"
        for response in (down, gql, ready):
            assert stoppable.url not in response.text and "Traceback" not in response.text

        stoppable.start()
        deadline = time.monotonic() + 15
        statuses = []
        while time.monotonic() < deadline:
            statuses.append((await s.client.get(record)).status_code)
            if statuses[-5:] == [200] * 5:
                break
            await asyncio.sleep(0.2)
        assert statuses[-5:] == [200] * 5, statuses
        assert (await s.client.get(record)).content == seed_bytes()
        assert (await s.client.post("/graphql", json=query)).json()["data"]["paper"]["inbound"]["totalCount"] == 7
        assert (await s.client.get("/readyz")).status_code == 200
