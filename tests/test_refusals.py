"""Refusals cost the database nothing: a flood of made-up keys is answered 401 from memory (the keys are
read at most every KEY_MISS_SECONDS however many arrive), and a client past its budget is answered 429
without claiming points (no pith_claim_points, no write) once every point of its hour is claimed.
"""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
import pytest

from app.governor import Governor, RateLimited, Unauthenticated, create_key, new_secret, revoke_key
from app.settings import Settings
from app.db.pool import create_pool
from tests.conftest import within_one_budget_hour

pytestmark = pytest.mark.asyncio(loop_scope="session")


class Statements:
    def __init__(self) -> None:
        self.seen: list[str] = []

    def __call__(self, record) -> None:  # noqa: ANN001 - asyncpg's LoggedQuery
        self.seen.append(record.query)

    def count(self, text: str) -> int:
        return sum(text in q for q in self.seen)


async def test_made_up_keys_cost_one_read_each_refresh_and_a_new_key_is_found_at_once(database_url):
    log = Statements()

    async def init(conn: asyncpg.Connection) -> None:
        conn.add_query_logger(log)

    pool = await create_pool(Settings(), database_url, init=init, min_size=1, max_size=4)
    conn = await asyncpg.connect(database_url)
    try:
        governor = Governor(lambda: pool, anonymous_points_per_hour=None)
        _, secret = await create_key(conn, f"refusals-{uuid.uuid4().hex[:8]}", 1000)
        known = await governor.identify("192.0.2.7", {}, f"Bearer {secret}")
        assert known.key_name and governor.key_reads == 1

        async def attempt() -> bool:
            try:
                await governor.identify("192.0.2.8", {}, f"Bearer {new_secret()}")
            except Unauthenticated:
                return True
            return False

        for _ in range(3):  # three waves of 300 made-up keys at once
            assert all(await asyncio.gather(*[attempt() for _ in range(300)]))
        assert governor.key_reads <= 1 + 3 * 2, governor.key_reads  # a read per wave (two if one was under way)
        assert log.count("FROM api_keys") == governor.key_reads
        # A key created now works on its first request (the miss reads the keys again).
        _, fresh = await create_key(conn, f"refusals-{uuid.uuid4().hex[:8]}", 1000)
        assert (await governor.identify("192.0.2.9", {}, f"Bearer {fresh}")).key_name
        # ... and a known key costs no statement.
        before = governor.key_reads
        for _ in range(100):
            await governor.identify("192.0.2.7", {}, f"Bearer {secret}")
        assert governor.key_reads == before
    finally:
        await conn.close()
        await pool.close()


async def test_a_client_past_its_budget_is_refused_without_a_claim(database_url):
    await within_one_budget_hour(60)
    log = Statements()

    async def init(conn: asyncpg.Connection) -> None:
        conn.add_query_logger(log)

    pool = await create_pool(Settings(), database_url, init=init, min_size=1, max_size=4)
    conn = await asyncpg.connect(database_url)
    name = f"budget-{uuid.uuid4().hex[:8]}"
    try:
        governor = Governor(lambda: pool, anonymous_points_per_hour=None)
        _, secret = await create_key(conn, name, 100)
        client = await governor.identify("192.0.2.7", {}, f"Bearer {secret}")
        admitted = refused = 0
        for _ in range(300):
            try:
                ticket = await governor.admit(client, 1, 1)
            except RateLimited:
                refused += 1
            else:
                governor.settle(ticket, None)
                admitted += 1
        assert admitted == 100 and refused == 200
        claims = log.count("pith_claim_points")
        assert claims <= 20, claims  # claims of chunks up to the budget, none for the 200 refusals
        # Two more refusals: still no claim, and the figures agree with what was spent.
        for _ in range(2):
            with pytest.raises(RateLimited):
                await governor.admit(client, 1, 1)
        assert log.count("pith_claim_points") == claims
        status = governor.status(client)
        assert status.used == 100 and status.remaining == 0
    finally:
        await revoke_key(conn, name)
        await conn.close()
        await pool.close()
