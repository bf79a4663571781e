"""The served record's path (one head statement, pages converted and items built while the next statement
runs, bytes reused) gives the same bytes as a record assembled from the individual loaders, one by one."""

from __future__ import annotations

import asyncio
import random
from datetime import datetime, timedelta, timezone

import asyncpg
import orjson
import pytest
import pytest_asyncio

from app import record
from app.db.pool import Session, create_pool
from app.settings import Settings
from loaders.citations import PageKey, citation_counts, inbound_pages, outbound_pages
from loaders.measurements import measurements_by_paper
from loaders.papers import paper_snapshots
from loaders.record import SERVED_CAPS, record_rows
from loaders.rows import Counts, RecordRows
from loaders.standing import standing_by_work
from tests.conftest import StatementLog, assert_settled, drop_database, papers_of, serve, synthetic_database

pytestmark = pytest.mark.asyncio(loop_scope="session")


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def graph(admin_url):
    url = await synthetic_database(admin_url, "pith_test_record_path", 300, 31)
    try:
        papers, hot = await papers_of(url)
        conn = await asyncpg.connect(url)
        try:
            low, high = await conn.fetchrow(
                "SELECT min(source_observed_at), max(source_observed_at) FROM citation_observations")
            measured = await conn.fetchval("SELECT count(DISTINCT arxiv_id) FROM external_measurements")
        finally:
            await conn.close()
        pool = await create_pool(Settings(), url, min_size=1, max_size=4)
        try:
            yield pool, papers, hot, low, high, url, measured
        finally:
            await pool.close()
    finally:
        await drop_database(admin_url, url)


async def one_by_one(pool, arxiv_id: str, at: datetime) -> RecordRows | None:
    """A record's rows from the loaders GraphQL uses, one statement each, nothing overlapped."""
    db = Session.from_pool(pool)
    try:
        return await _one_by_one(db, arxiv_id, at)
    finally:
        await db.close()


async def _one_by_one(db, arxiv_id: str, at: datetime) -> RecordRows | None:
    (paper,) = await paper_snapshots(db, [arxiv_id], at)
    if paper is None:
        return None
    inbound_total, outbound_total = await citation_counts(db, [(arxiv_id, "in"), (arxiv_id, "out")], at)
    (measurements,) = await measurements_by_paper(db, [arxiv_id], at)
    (inbound,) = await inbound_pages(db, [PageKey(arxiv_id)], at, SERVED_CAPS.inbound)
    (outbound,) = await outbound_pages(db, [PageKey(arxiv_id)], at, SERVED_CAPS.outbound)
    works = list(dict.fromkeys(o.work.work_id for o in inbound + outbound if o.work is not None))
    standing = dict(zip(works, await standing_by_work(db, works, at))) if works else {}
    return RecordRows(as_of=at, paper=paper, counts=Counts(inbound_total, outbound_total), inbound=inbound,
                      outbound=outbound, measurements=measurements, standing=standing, caps=SERVED_CAPS)


def cases(graph, n: int, seed: int) -> list[tuple[str, datetime]]:
    _, papers, hot, low, high, _, _ = graph
    rng = random.Random(seed)
    span = (high - low).total_seconds()
    instants = [high + timedelta(days=1)] + [low + timedelta(seconds=rng.uniform(0, span)) for _ in range(4)]
    chosen = hot + rng.sample(papers, n) + ["9912.99999"]
    return [(a, rng.choice(instants).replace(microsecond=0)) for a in chosen]


async def test_records_equal_the_one_by_one_assembly(graph):
    pool = graph[0]
    found = 0
    for arxiv_id, at in cases(graph, 60, 1):
        expected = await one_by_one(pool, arxiv_id, at)
        prebuilt = record.Prebuilt()
        session = Session.from_pool(pool)
        try:
            (rows,) = await record_rows(session, [arxiv_id], at, prepare=prebuilt.prepare)
            assert session.statements <= 4
        finally:
            await session.close()
        if expected is None:
            assert rows is None
            continue
        want = record.canonical_bytes(record.build_record(expected))
        document = record.build_record(rows, prebuilt)
        assert prebuilt.canonical(document) == want, (arxiv_id, at)
        assert record.canonical_bytes(document) == want
        assert document["context_digest"] == record.context_digest(document)
        found += 1
    assert found >= 30


async def test_many_papers_at_once_match_each_alone(graph):
    """The head statement and pages batch papers (exports ask for many; repeats and unknown ids included)."""
    pool = graph[0]
    chosen = cases(graph, 25, 2)
    at = chosen[0][1]
    ids = [a for a, _ in chosen] + [chosen[0][0], "9912.99999"]
    session = Session.from_pool(pool)
    try:
        together = await record_rows(session, ids, at)
        alone = [(await record_rows(session, [a], at))[0] for a in ids]
    finally:
        await session.close()
    assert [r is None for r in together] == [r is None for r in alone]
    assert any(r is not None for r in together)
    for a, b in zip(together, alone):
        if a is not None:
            assert record.canonical_bytes(record.build_record(a)) == record.canonical_bytes(record.build_record(b))


async def test_measurements_reach_the_records(graph):
    """Some papers have measurements (the head statement's arrays), so the comparison above covers them."""
    assert graph[6] > 0


async def test_served_record_equals_the_assembly_in_one_statement(graph):
    """The head, then both pages' items with their standing, in one statement (loaders.record.RECORD)."""
    pool, url = graph[0], graph[5]
    log = StatementLog()
    async for s in serve(url, log):
        for arxiv_id, at in cases(graph, 15, 3):
            expected = await one_by_one(pool, arxiv_id, at)
            log.clear()
            response = await s.client.get(f"/paper/{arxiv_id}/citation-record.json",
                                          params={"as_of": at.isoformat().replace("+00:00", "Z")})
            if expected is None:
                assert response.status_code == 404
                continue
            assert response.status_code == 200
            assert response.content == record.canonical_bytes(record.build_record(expected))
            assert len(log.counted) == 1


async def test_a_record_request_cancelled_mid_way_gives_its_connection_back(graph):
    """Cancelled while a statement runs beside the conversion of the last one: nothing is left running."""
    pool, hot = graph[0], graph[2]
    at = datetime.now(timezone.utc)
    for delay in [0, 0.0005, 0.001, 0.002, 0.003, 0.005, 0.008] * 3:
        prebuilt = record.Prebuilt()
        session = Session.from_pool(pool)

        async def build() -> None:
            try:
                await record_rows(session, [hot[0]], at, prepare=prebuilt.prepare)
            finally:
                await session.close()

        task = asyncio.ensure_future(build())
        await asyncio.sleep(delay)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    await asyncio.sleep(0.3)
    await assert_settled(pool, graph[5])


def _nodes(plan: dict) -> list[dict]:
    return [plan] + [n for child in plan.get("Plans", []) for n in _nodes(child)]


async def test_what_repeats_across_a_records_items_is_made_once(graph):
    """In the items statement, each distinct paper's short form and each distinct linked work's part and
    standing notice are made once, not once per row: a hot paper's inbound rows all name it and mostly its
    one work. Read from EXPLAIN ANALYZE under the pool's generic plan."""
    from loaders.record import RECORD

    pool, hot, high, url = graph[0], graph[2], graph[4], graph[5]
    at = high + timedelta(days=1)
    conn = await asyncpg.connect(url, server_settings={"plan_cache_mode": "force_generic_plan", "jit": "off"})
    try:
        for arxiv_id in hot:
            rows = [orjson.loads(r["item"]) for r in await conn.fetch(RECORD, [arxiv_id], at, 100, 100)
                    if r["direction"]]
            papers = await conn.fetchval(
                "SELECT count(DISTINCT x) FROM citation_observations AS o, LATERAL (VALUES (o.citing_arxiv_id), "
                "(o.cited_arxiv_id)) AS v(x) WHERE o.observation_id = ANY($1::uuid[]) AND x IS NOT NULL",
                [r["observation_id"] for r in rows])
            works = len({r["citation"]["cited_work"]["work_id"] for r in rows} - {None})  # linked, with a snapshot
            assert len(rows) > 20 and works < len(rows) / 2  # the hot paper's rows share their works
            (plan,) = orjson.loads(await conn.fetchval("EXPLAIN (ANALYZE, FORMAT JSON) " + RECORD,
                                                       [arxiv_id], at, 100, 100))
            made = {n["Subplan Name"]: n for n in _nodes(plan["Plan"]) if n.get("Subplan Name", "").startswith("CTE ")}
            assert made["CTE works"]["Actual Rows"] == works, made["CTE works"]
            # every paper named by a row, once (one without a snapshot then is not made at all)
            assert made["CTE papers"]["Actual Rows"] <= papers < len(rows)
            for node in _nodes(plan["Plan"]):  # no lookup of a snapshot or a receipt runs once per row
                if node.get("Relation Name") in ("paper_snapshots", "work_snapshots", "standing_receipts"):
                    assert node["Actual Loops"] <= max(papers, works), node
    finally:
        await conn.close()
