"""What research scripts rely on: citations counted by the citing papers' publication year, and
inputs refused that the API could not look up (a document whose paper id is not an arXiv id, a
synthetic graph written over data)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import asyncpg
import pytest

from tests.conftest import HUB, SEED
from tests.graphs import time_travel

pytestmark = pytest.mark.asyncio(loop_scope="session")

PAGE = """query($id: String!, $at: DateTime, $after: String) { paper(arxivId: $id, asOf: $at) {
  citationsByYear { year count }
  inbound(first: 100, after: $after) { edges { node { citingPaper { arxivId submittedAt } } }
                                      pageInfo { hasNextPage endCursor } } } }"""


async def by_paging(served, arxiv_id: str, at: str | None) -> tuple[list[dict], Counter]:
    years: dict[str, int] = {}
    after, found = None, None
    while True:
        body = await served.graphql(PAGE, {"id": arxiv_id, "at": at, "after": after})
        assert "errors" not in body, body
        paper = body["data"]["paper"]
        found = found or paper["citationsByYear"]
        for edge in paper["inbound"]["edges"]:
            citing = edge["node"]["citingPaper"]
            years[citing["arxivId"]] = int(citing["submittedAt"][:4])
        if not paper["inbound"]["pageInfo"]["hasNextPage"]:
            return found, Counter(years.values())
        after = paper["inbound"]["pageInfo"]["endCursor"]


async def test_citations_by_year_equal_counting_the_citing_papers_by_paging(graph, served):
    for server, arxiv_id, at in ((graph, HUB, None), (served, "2402.15627", "2026-08-05T04:52:00Z"),
                                 (served, "2402.15627", None)):
        found, counted = await by_paging(server, arxiv_id, at)
        assert found == [{"year": y, "count": n} for y, n in sorted(counted.items())], (arxiv_id, at)
        assert sum(c["count"] for c in found) > 0


async def test_citations_by_year_of_many_papers_is_one_statement(graph):
    ids = [f"8801.{i:05d}" for i in range(20)] + [HUB]
    graph.statements.clear()
    body = await graph.graphql("query($ids: [String!]!) { papers(arxivIds: $ids) { citationsByYear { year count } } }",
                               {"ids": ids})
    # The papers' sizes (their price), the papers, the years.
    assert "errors" not in body and len(graph.statements.counted) == 3, graph.statements.counted


async def test_citations_by_year_follow_the_instant(empty_database):
    from tests.conftest import StatementLog, serve

    conn = await asyncpg.connect(empty_database)
    try:
        graph = time_travel("5500.99999")
        await graph.write(conn)
    finally:
        await conn.close()
    async for served in serve(empty_database, StatementLog()):
        counts = {}
        for at in ("2026-02-01T00:00:00Z", "2026-05-01T00:00:00Z"):
            body = await served.graphql('{ paper(arxivId: "5500.99999", asOf: "%s") { citationsByYear { year count } '
                                        "inbound { totalCount } } }" % at)
            paper = body["data"]["paper"]
            counts[at] = paper["citationsByYear"]
            assert sum(c["count"] for c in paper["citationsByYear"]) == paper["inbound"]["totalCount"]
        assert counts["2026-02-01T00:00:00Z"] != counts["2026-05-01T00:00:00Z"]


def pith(*args: str, url: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.cli", *args], env={**os.environ, "DATABASE_URL": url},
                          capture_output=True, timeout=300)


@pytest.mark.parametrize("bad", ["10.1016/j.x", "2402.15627v2", "arXiv:2402.15627", " 2402.15627"])
async def test_load_refuses_a_paper_id_the_api_cannot_look_up(empty_database, tmp_path, bad):
    document = json.loads(SEED.read_text())
    document["paper"]["arxiv_id"] = bad
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(document))
    done = pith("load", str(path), url=empty_database)
    assert done.returncode == 1, done.stderr.decode()
    assert "$.paper.arxiv_id" in done.stderr.decode() and "not an arXiv id" in done.stderr.decode()
    conn = await asyncpg.connect(empty_database)
    try:
        assert await conn.fetchval("SELECT count(*) FROM paper_snapshots") == 0
    finally:
        await conn.close()


async def test_synth_refuses_a_database_that_holds_data_unless_appending(empty_database):
    first = pith("synth", "--papers", "30", url=empty_database)
    assert first.returncode == 0, first.stderr.decode()
    conn = await asyncpg.connect(empty_database)
    try:
        before = await conn.fetchval("SELECT count(*) FROM citation_observations")
        again = pith("synth", "--papers", "30", "--seed", "2", url=empty_database)
        assert again.returncode == 2 and "--append" in again.stderr.decode(), again.stderr.decode()
        assert await conn.fetchval("SELECT count(*) FROM citation_observations") == before
    finally:
        await conn.close()


@pytest.mark.parametrize("where, path", [
    (lambda d: d["inbound"][0]["citation"]["citing_paper"], "$.inbound[0].citation.citing_paper.arxiv_id"),
    (lambda d: next(o["citation"]["cited_work"] for o in d["inbound"] if o["citation"]["cited_work"]["work_id"]),
     ".citation.cited_work.arxiv_id"),
])
async def test_load_refuses_any_arxiv_id_of_a_document_the_api_cannot_look_up(empty_database, tmp_path, where, path):
    document = json.loads(SEED.read_text())
    where(document)["arxiv_id"] = "10.1016/j.x"  # a DOI where an arXiv id goes
    target = tmp_path / "bad.json"
    target.write_text(json.dumps(document))
    done = pith("load", str(target), url=empty_database)
    assert done.returncode == 1 and path in done.stderr.decode() and "not an arXiv id" in done.stderr.decode(), \
        done.stderr.decode()
    conn = await asyncpg.connect(empty_database)
    try:
        assert await conn.fetchval("SELECT count(*) FROM citation_observations") == 0
    finally:
        await conn.close()


async def test_synthetic_data_says_it_is_synthetic(empty_database):
    from tests.conftest import StatementLog, serve

    done = pith("synth", "--papers", "60", url=empty_database)
    assert done.returncode == 0, done.stderr.decode()
    async for served in serve(empty_database, StatementLog()):
        evidence = (await served.client.get("/evidence", headers={"Accept": "application/json"})).json()
        assert evidence["synthetic"] is True and evidence["sources"]
        assert all(s["synthetic"] and s["kind"] == "synthetic" and s["source"].startswith("synthetic_")
                   for s in evidence["sources"]), evidence
        page = await served.client.get("/evidence", headers={"Accept": "text/html"})
        assert "Synthetic data." in page.text
        body = await served.graphql('{ browsePapers(first: 20) { nodes { outbound(first: 100) { edges { node { '
                                    'standingNotice { sourceReceipts { source live synthetic } } } } } } } }')
        receipts = [r for p in body["data"]["browsePapers"]["nodes"] for e in p["outbound"]["edges"]
                    for r in e["node"]["standingNotice"]["sourceReceipts"]]
        assert receipts and all(r["synthetic"] for r in receipts)
        assert {r["live"] for r in receipts} == {True, False}  # *_status_cache sources stay caches
