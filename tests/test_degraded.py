"""Degraded modes instead of outages: a read-only database keeps serving reads (budgets counted in each
process, and /readyz says so), and a request waiting for a pool connection gives up by its deadline."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
import pytest_asyncio

from app.db import pool as pool_module
from app.settings import Settings
from tests.conftest import SEED, LiveServer, StatementLog, serve
from app.ingest.load import load_file

pytestmark = pytest.mark.asyncio(loop_scope="session")

PROBE = {"query": 'query Probe { paper(arxivId: "2402.15627") { title } }', "operationName": "Probe"}


@pytest_asyncio.fixture(loop_scope="session")
async def seeded(empty_database):
    conn = await asyncpg.connect(empty_database)
    try:
        await load_file(conn, str(SEED))
    finally:
        await conn.close()
    return empty_database


async def test_a_read_only_database_keeps_serving_reads_and_readiness_says_so(seeded):
    import httpx

    name = seeded.split("?")[0].rsplit("/", 1)[1]
    conn = await asyncpg.connect(seeded)
    try:
        await conn.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
    finally:
        await conn.close()
    # Production: anonymous budgets are on, so every request is charged (a claim was a write). The 90
    # requests go as fast as they can: the pace (20 a second) is off, it is not what is tested here.
    server = LiveServer(seeded, env={"PITH_ENV": "production", "PITH_REQUESTS_PER_SECOND": "0"})
    try:
        statuses = []
        for i in range(30):
            with httpx.Client(base_url=server.base, timeout=15) as client:
                statuses.append(client.post("/graphql", json=PROBE).status_code)
                statuses.append(client.get("/paper/2402.15627").status_code)
                apq = client.post("/graphql", json={"query": f"query Q{i} {{ paper(arxivId: \"2402.15627\") {{ title }} }}",
                                                    "extensions": {"persistedQuery": {"version": 1, "sha256Hash":
                                                                   __import__("hashlib").sha256(
                                                                       f"query Q{i} {{ paper(arxivId: \"2402.15627\") {{ title }} }}"
                                                                       .encode()).hexdigest()}}})
                statuses.append(apq.status_code)
        assert statuses == [200] * 90, statuses
        ready = httpx.get(server.base + "/readyz", timeout=15)
        assert ready.status_code == 200, ready.text
        body = ready.json()
        assert body["status"] == "degraded" and body["database"] == "read-only", body
        assert body["budgets"] == "in-process" and any("read-only" in d for d in body["degraded"]), body
    finally:
        server.stop()
        conn = await asyncpg.connect(seeded, server_settings={"default_transaction_read_only": "off"})
        try:
            await conn.execute(f'ALTER DATABASE "{name}" RESET default_transaction_read_only')
        finally:
            await conn.close()
    assert "budgets are counted in this process only" in server.logs()


async def test_a_request_waiting_for_a_connection_gives_up_by_its_deadline(seeded, monkeypatch):
    """The pool's own bound is made an hour: only the request's deadline (1 s) can end the wait."""
    monkeypatch.setattr(pool_module, "ACQUIRE_SECONDS", 3600.0)
    settings = Settings(database_url=seeded, pool_min=1, pool_max=1, request_timeout=1.0, prepared_fast_path=False)
    async for s in serve(seeded, StatementLog(), settings, expect_5xx=True):
        state = s.app.state.pith
        held = await state.pool.acquire()
        try:
            response = await asyncio.wait_for(s.client.post("/graphql", json=PROBE), 120)
            assert response.status_code in (503, 504), response.text
            assert response.json()["errors"], response.text
            assert state.waiting == 0
        finally:
            await state.pool.release(held)
        ok = await s.client.post("/graphql", json=PROBE)
        assert ok.status_code == 200 and ok.json()["data"]["paper"]["title"]


async def test_acquire_timeout_is_the_bound_or_what_is_left_of_the_deadline():
    loop = asyncio.get_running_loop()
    token = pool_module.request_deadline.set(loop.time() + 0.5)
    try:
        assert 0 < pool_module.acquire_timeout() <= 0.5
        assert pool_module.acquire_timeout(0.1) == 0.1
    finally:
        pool_module.request_deadline.reset(token)
    assert pool_module.acquire_timeout() == pool_module.ACQUIRE_SECONDS
    token = pool_module.request_deadline.set(loop.time() - 1)
    try:
        with pytest.raises(pool_module.DeadlinePassed):
            pool_module.acquire_timeout()
    finally:
        pool_module.request_deadline.reset(token)


async def test_a_subscription_resolves_events_long_after_its_first_deadline(seeded):
    """Each event gets a deadline (and pool-wait bound) of its own, not the subscription's first one."""
    import json

    from tests.conftest import AUG9
    from tests.test_live import CITATIONS, PAPER, Subscription, new_inbound_ids

    server = LiveServer(seeded, env={"PITH_REQUEST_TIMEOUT": "1"})
    try:
        sub = await Subscription(server.base, CITATIONS, {"id": PAPER}).start()
        await asyncio.sleep(2.5)  # past the deadline the subscription started with
        conn = await asyncpg.connect(seeded)
        try:
            await load_file(conn, str(AUG9))
        finally:
            await conn.close()
        expected = len(new_inbound_ids())
        await sub.wait_for(expected, timeout=30)
        assert len(sub.events) == expected and not sub.errors, (len(sub.events), json.dumps(sub.errors)[:500])
        await sub.close()
    finally:
        server.stop()


async def test_an_event_that_cannot_be_read_now_is_read_again_and_only_a_lasting_failure_ends_it(monkeypatch):
    """A subscription's event whose read fails as unavailable is read again (with back-off), each try in a
    fresh session, the failed one closed; past EVENT_RETRY_SECONDS it ends, with the cursor that resumes
    it at that event."""
    from types import SimpleNamespace

    from app.live import encode_cursor
    from app.types import live as live_types

    closed: list[object] = []

    class Probe:
        async def close(self) -> None:
            closed.append(self)

    context = SimpleNamespace(hub=None, app=SimpleNamespace(session=Probe), session=None)
    context.renew = lambda session: setattr(context, "session", session)
    tries: list[object] = []

    async def flaky(row, ctx):
        tries.append(ctx.session)
        if len(tries) < 3:
            raise (TimeoutError if len(tries) == 1 else asyncpg.CannotConnectNowError)("not now")
        return "event"

    assert await live_types._resolved(context, {"position": 7}, flaky) == "event"
    assert len(set(map(id, tries))) == 3 and closed == tries[:2]  # the event's own session stays open

    monkeypatch.setattr(live_types, "EVENT_RETRY_SECONDS", 0.5)

    async def down(row, ctx):
        raise ConnectionRefusedError("down")

    with pytest.raises(live_types.SubscriptionError) as ended:
        await live_types._resolved(context, {"position": 7}, down)
    assert ended.value.extensions == {"code": "SUBSCRIPTION_DROPPED", "after": encode_cursor(6)}
