"""The deadline is a deadline on every path: with the one pool connection stuck behind a lock, every request
(POST, GET with its cache validator read, SSE) is answered TIMEOUT at its deadline, none 503 after the pool's
own five-second wait, and the service recovers at once when the lock goes. (How late past the deadline the
answers come is measured by bench/governance.py; here only what they are.)
"""

from __future__ import annotations

import asyncio
import json

import asyncpg
import httpx
import pytest

from tests.conftest import LiveServer
from tests.test_sessions import assert_pool_given_back

pytestmark = pytest.mark.asyncio(loop_scope="session")

QUERY = '{ paper(arxivId: "2402.15627") { arxivId title } }'


async def test_every_path_answers_at_its_deadline_when_the_pool_is_stuck(database_url):
    server = LiveServer(database_url, env={"PITH_POOL_MAX": "1", "PITH_POOL_MIN": "1", "PITH_REQUEST_TIMEOUT": "2",
                                           "PITH_PREPARED_FAST_PATH": "0"}, expect_5xx=True)
    locker = await asyncpg.connect(database_url)
    try:
        async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
            assert (await client.post("/graphql", json={"query": QUERY})).status_code == 200
            transaction = locker.transaction()
            await transaction.start()
            await locker.execute("LOCK TABLE paper_snapshots IN ACCESS EXCLUSIVE MODE")

            async def sse() -> str:
                async with client.stream("POST", "/graphql", json={"query": QUERY},
                                         headers={"accept": "text/event-stream"}) as response:
                    return (await response.aread()).decode()

            posts = [client.post("/graphql", json={"query": QUERY.replace("title", f"t{i}: title")})
                     for i in range(4)]
            gets = [client.get("/graphql", params={"query": QUERY.replace("title", f"g{i}: title")})
                    for i in range(2)]
            answers = await asyncio.gather(*posts, *gets, sse())
            await transaction.rollback()
            for answer in answers[:-1]:
                assert answer.status_code == 504, answer.text[:300]
                assert [e["extensions"]["code"] for e in answer.json()["errors"]] == ["TIMEOUT"], answer.text[:300]
            events = [json.loads(line[5:]) for line in answers[-1].splitlines() if line.startswith("data:")
                      and line[5:].strip() not in ("", "{}")]
            assert any(e.get("errors", [{}])[0].get("extensions", {}).get("code") == "TIMEOUT" for e in events), events
            # The lock gone, the service answers at once: nothing was left behind.
            again = await client.post("/graphql", json={"query": QUERY})
            assert again.status_code == 200 and again.json()["data"]["paper"]["arxivId"] == "2402.15627"
        await assert_pool_given_back(database_url, server)
        # Each 504's access line says so (its operation's outcome: timeout, never ok).
        late = [line for line in server.logs().splitlines() if "/graphql 504 " in line]
        assert len(late) >= 6 and all("outcome=timeout" in line for line in late), "\n".join(late)
    finally:
        await locker.close()
        server.stop()
