"""Enumeration: browsePapers pages through every paper once in each order and filters as documented;
works(filter:) lists exactly the works whose fields say so; each page is one statement."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from uuid import uuid4

import asyncpg
import pytest
import pytest_asyncio

from tests.conftest import StatementLog, drop_database, serve, synthetic_database

pytestmark = pytest.mark.asyncio(loop_scope="session")

BROWSE = """query($filter: PaperFilter, $order: PaperOrder!, $first: Int, $after: String, $at: DateTime) {
  browsePapers(filter: $filter, orderBy: $order, first: $first, after: $after, asOf: $at) {
    edges { cursor inboundCount node { arxivId primaryCategory submittedAt inbound { totalCount }
                                       retracted: outbound(citesRetracted: true, first: 1) { totalCount } } }
    pageInfo { hasNextPage hasPreviousPage endCursor } } }"""
WORKS = """query($filter: WorkFilter, $first: Int, $after: String, $at: DateTime) {
  works(filter: $filter, first: $first, after: $after, asOf: $at) {
    edges { node { workId retracted standing { events { eventType source } } } }
    pageInfo { hasNextPage endCursor } } }"""


async def graph_at(admin_url: str, prefix: str, papers: int) -> tuple[str, datetime]:
    """A new synth graph (seed 29) and its latest snapshot instant."""
    url = await synthetic_database(admin_url, prefix, papers, 29)
    conn = await asyncpg.connect(url)
    try:
        return url, await conn.fetchval("SELECT max(observed_at) FROM paper_snapshots")
    finally:
        await conn.close()


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def synthetic(admin_url):
    url = await synthetic_database(admin_url, "pith_test_browse", 400, 29)
    conn = await asyncpg.connect(url)
    try:
        high = await conn.fetchval("SELECT max(observed_at) FROM paper_snapshots")
        # Retractions (one reinstated) and a withdrawal on works cited by Pith papers, so both sides of
        # every standing filter have members.
        works = [r[0] for r in await conn.fetch(
            "SELECT work_id FROM citation_observations WHERE work_id IS NOT NULL GROUP BY 1 ORDER BY 1 LIMIT 6")]
        at = high - timedelta(days=3)
        await conn.executemany(
            "INSERT INTO work_events (work_id, source, event_type, observed_at) VALUES ($1, $2, $3, $4)",
            [(w, "retraction_watch", "retraction", at) for w in works[:4]]
            + [(works[0], "retraction_watch", "reinstatement", at + timedelta(hours=1)),
               (works[4], "crossref", "withdrawal", at), (works[5], "crossref", "correction", at)])
    finally:
        await conn.close()
    async for served in serve(url, StatementLog()):
        yield served, url, high
    await drop_database(admin_url, url)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def larger(admin_url):
    """5,000 papers over 100 months (50 a month): large enough that the pool's generic plans walk indexes as at
    1,000,000 papers, where 400 papers fit in a few pages read whole."""
    url, high = await graph_at(admin_url, "pith_test_browse_l", 5000)
    yield None, url, high
    await drop_database(admin_url, url)


@pytest.fixture
def short_walk(monkeypatch):
    """The short walk of a filtered page made 20 rows: small beside the sets a test pages through, at its size."""
    from loaders import browse

    monkeypatch.setattr(browse, "WALK_FIRST", 20)
    browse._numbered.cache_clear()
    yield browse
    browse._numbered.cache_clear()


async def every_page(served, query: str, field: str, variables: dict, first: int) -> list[dict]:
    found, after, pages = [], None, 0
    while True:
        body = await served.graphql(query, {**variables, "first": first, "after": after})
        assert "errors" not in body, body
        page = body["data"][field]
        assert page["pageInfo"]["hasPreviousPage"] is (after is not None) if field == "browsePapers" else True
        found += [e for e in page["edges"]]
        pages += 1
        if not page["pageInfo"]["hasNextPage"]:
            return found
        assert len(page["edges"]) == first
        after = page["pageInfo"]["endCursor"]


async def latest_papers(url: str, at: datetime) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(url)
    try:
        return await conn.fetch(
            """SELECT DISTINCT ON (s.arxiv_id) s.arxiv_id, s.primary_category, s.submitted_at,
                      (SELECT count(*) FROM citation_observations AS o
                        WHERE o.cited_arxiv_id = s.arxiv_id AND o.visible_from <= $1) AS inbound
               FROM paper_snapshots AS s WHERE s.observed_at <= $1 ORDER BY s.arxiv_id, s.observed_at DESC""", at)
    finally:
        await conn.close()


def z(t: datetime) -> str:
    return t.astimezone(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


@pytest.mark.parametrize("order", ["ARXIV_ID", "SUBMITTED_AT", "INBOUND_COUNT_DESC"])
@pytest.mark.parametrize("when", ["early", "early, every paper counted", "now"])
async def test_browse_pages_through_every_paper_once_in_order(synthetic, order, when, monkeypatch):
    served, url, high = synthetic
    # Early: some papers are not known yet, others have a later snapshot, and papers cited later are ahead of
    # the instant (their totals then are merged in; with more than AHEAD_MAX of them, every paper is counted);
    # now: every paper, with the totals the database keeps.
    from loaders import browse

    counted, count = [], browse.counted_sql
    monkeypatch.setattr(browse, "counted_sql", lambda *a: counted.append(a) or count(*a))
    if when == "early, every paper counted":
        monkeypatch.setattr(browse, "AHEAD_MAX", 5)
    browse._numbered.cache_clear()
    at = datetime(2026, 3, 1, tzinfo=timezone.utc) if when != "now" else datetime.now(timezone.utc).replace(
        microsecond=0)
    papers = await latest_papers(url, at)
    assert 50 < len(papers) < 400 if when != "now" else len(papers) == 400
    found = await every_page(served, BROWSE, "browsePapers", {"order": order, "at": z(at)}, 37)
    ids = [e["node"]["arxivId"] for e in found]
    key = {"ARXIV_ID": lambda r: r["arxiv_id"].encode(),
           "SUBMITTED_AT": lambda r: (r["submitted_at"], r["arxiv_id"].encode()),
           "INBOUND_COUNT_DESC": lambda r: (-r["inbound"], r["arxiv_id"].encode())}[order]
    assert ids == [r["arxiv_id"] for r in sorted(papers, key=key)]
    browse._numbered.cache_clear()
    if order == "INBOUND_COUNT_DESC":
        assert all(e["inboundCount"] == e["node"]["inbound"]["totalCount"] for e in found)
        assert found[0]["inboundCount"] > found[-1]["inboundCount"]
        assert bool(counted) is (when == "early, every paper counted"), counted
    else:
        assert all(e["inboundCount"] is None for e in found)


async def test_browse_filters_as_documented(synthetic):
    served, url, high = synthetic
    papers = await latest_papers(url, high)
    category = papers[0]["primary_category"]
    low, top = sorted(r["submitted_at"] for r in papers)[len(papers) // 4], sorted(
        r["submitted_at"] for r in papers)[len(papers) // 2]
    cases = [({"category": category}, lambda r: r["primary_category"] == category),
             ({"submittedFrom": low.isoformat(), "submittedTo": top.isoformat()},
              lambda r: low <= r["submitted_at"] <= top),
             ({"category": category, "submittedFrom": low.isoformat()},
              lambda r: r["primary_category"] == category and r["submitted_at"] >= low)]
    for filter, holds in cases:
        found = await every_page(served, BROWSE, "browsePapers", {"order": "ARXIV_ID", "filter": filter}, 100)
        assert [e["node"]["arxivId"] for e in found] == [r["arxiv_id"] for r in papers if holds(r)], filter
    # citesRetracted: exactly the papers whose outbound(citesRetracted: true) is not empty, and the rest.
    citing = await every_page(served, BROWSE, "browsePapers", {"order": "ARXIV_ID",
                                                               "filter": {"citesRetracted": True}}, 100)
    others = await every_page(served, BROWSE, "browsePapers", {"order": "SUBMITTED_AT",
                                                               "filter": {"citesRetracted": False}}, 100)
    assert citing and all(e["node"]["retracted"]["totalCount"] > 0 for e in citing)
    assert all(e["node"]["retracted"]["totalCount"] == 0 for e in others)
    assert {e["node"]["arxivId"] for e in citing} | {e["node"]["arxivId"] for e in others} == \
        {r["arxiv_id"] for r in papers}


async def test_works_filter_lists_exactly_the_works_whose_fields_say_so(synthetic):
    served, url, high = synthetic
    every = await every_page(served, WORKS, "works", {}, 100)
    conn = await asyncpg.connect(url)
    try:
        known = await conn.fetchval("SELECT count(DISTINCT work_id) FROM work_snapshots WHERE observed_at <= now()")
    finally:
        await conn.close()
    assert len(every) == known and len({e["node"]["workId"] for e in every}) == known
    ids = [e["node"]["workId"] for e in every]
    assert ids == sorted(ids)
    retracted = await every_page(served, WORKS, "works", {"filter": {"retracted": True}}, 100)
    kept = await every_page(served, WORKS, "works", {"filter": {"retracted": False}}, 100)
    assert {e["node"]["workId"] for e in retracted} == {e["node"]["workId"] for e in every if e["node"]["retracted"]}
    assert {e["node"]["workId"] for e in kept} == {e["node"]["workId"] for e in every if not e["node"]["retracted"]}
    assert len(retracted) >= 4  # three retracted ones, the withdrawn one, and the generator's own
    for filter in ({"eventType": "CORRECTION"}, {"source": "crossref"},
                   {"eventType": "RETRACTION", "source": "retraction_watch"},
                   {"source": "retraction_watch", "retracted": False}, {"eventType": "RETRACTION", "retracted": True}):
        found = await every_page(served, WORKS, "works", {"filter": filter}, 100)

        def matches(node: dict) -> bool:
            return filter.get("retracted", node["retracted"]) == node["retracted"] and any(
                filter.get("eventType", e["eventType"]) == e["eventType"]
                and filter.get("source", e["source"]) == e["source"] for e in node["standing"]["events"])

        assert found and {e["node"]["workId"] for e in found} == {e["node"]["workId"] for e in every
                                                                 if matches(e["node"])}, filter


async def test_a_page_is_one_statement_and_cursors_belong_to_their_order(synthetic):
    served, _, _ = synthetic
    for order in ("ARXIV_ID", "SUBMITTED_AT", "INBOUND_COUNT_DESC"):
        body = await served.graphql("query($o: PaperOrder!) { browsePapers(orderBy: $o, first: 5) { "
                                    "edges { node { arxivId title } } pageInfo { endCursor } } }", {"o": order})
        after = body["data"]["browsePapers"]["pageInfo"]["endCursor"]
        served.statements.clear()
        body = await served.graphql("query($o: PaperOrder!, $a: String) { browsePapers(orderBy: $o, first: 5, "
                                    "after: $a) { edges { node { arxivId title } } } }", {"o": order, "a": after})
        assert "errors" not in body and len(served.statements.counted) == 1, served.statements.counted
        other = "ARXIV_ID" if order != "ARXIV_ID" else "SUBMITTED_AT"
        body = await served.graphql("query($o: PaperOrder!, $a: String) { browsePapers(orderBy: $o, after: $a) { "
                                    "edges { cursor } } }", {"o": other, "a": after})
        assert body["errors"][0]["message"].startswith("after:") and f"ordered by {other}" in \
            body["errors"][0]["message"], body
    bad = [({"first": 0}, "first: 0 is out of range; allowed 1 to 100"),
           ({"after": "nonsense"}, "is not a cursor of browsePapers"),
           ({"filter": {"submittedFrom": "2020-01-01T00:00:00Z", "submittedTo": "2019-01-01T00:00:00Z"}},
            "submittedTo: is before submittedFrom"),
           ({"filter": {"category": "cs\u0000LG"}}, "filter.category: 'cs\\\\x00LG' is not a name to filter on"),
           ({"filter": {"category": ""}}, "give 1 to 64 printable characters")]
    for variables, message in bad:
        body = await served.graphql("query($first: Int, $after: String, $filter: PaperFilter) { "
                                    "browsePapers(first: $first, after: $after, filter: $filter) { edges { cursor } } }",
                                    variables)
        assert message in body["errors"][0]["message"], body
    from app.cursors import encode_browse  # submission times with no UTC value the database takes: refused
    for at in ("0001-01-01T00:00:00+05:00", "0001-01-01T00:00:00+00:00", "9999-12-31T23:59:59-05:00"):
        body = await served.graphql("query($a: String) { browsePapers(orderBy: SUBMITTED_AT, first: 3, after: $a) { "
                                    "edges { cursor } } }", {"a": encode_browse("SUBMITTED_AT", [at, "1501.00003"])})
        assert body["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT", (at, body)
        assert "is not a cursor of browsePapers ordered by SUBMITTED_AT" in body["errors"][0]["message"], body
    body = await served.graphql('{ works(after: "bm9uc2Vuc2U") { edges { cursor } } }')
    assert "is not a cursor of works" in body["errors"][0]["message"]
    response = await served.client.post("/graphql", headers={"Content-Type": "application/json"}, content=(
        b'{"query": "query($s: String) { works(filter: {source: $s}) { edges { cursor } } }", '
        b'"variables": {"s": "\\ud800"}}'))  # a lone surrogate, as JSON can write it
    assert response.status_code < 500 and "errors" in response.json(), response.text


@pytest_asyncio.fixture(loop_scope="session")
async def written(admin_url):
    """The module's graph in a database of the test's own, for a test that writes to it."""
    url, high = await graph_at(admin_url, "pith_test_browse_w", 400)
    async for served in serve(url, StatementLog()):
        yield served, url, high
    await drop_database(admin_url, url)


async def misplaced(conn: asyncpg.Connection) -> list:
    """Rows of paper_placements that differ from the papers' snapshots and kept totals, either way."""
    return await conn.fetch(
        """WITH expected AS (
               SELECT DISTINCT s.arxiv_id, date_trunc('month', s.submitted_at AT TIME ZONE 'UTC') AS month,
                      coalesce(s.primary_category, '') AS primary_category, coalesce(t.total, 0) AS total
               FROM paper_snapshots AS s LEFT JOIN paper_inbound_totals AS t ON t.arxiv_id = s.arxiv_id),
           kept AS (SELECT arxiv_id, month, primary_category, total FROM paper_placements)
           (SELECT 'missing', * FROM (SELECT * FROM expected EXCEPT SELECT * FROM kept) AS m)
           UNION ALL (SELECT 'stray', * FROM (SELECT * FROM kept EXCEPT SELECT * FROM expected) AS x)""")


async def test_kept_inbound_totals_follow_every_writer(written, monkeypatch):
    """Hand-written SQL: a reference whose citing paper has no snapshot yet counts once the paper arrives
    (the database moves its visibility); a deleted one stops counting. The totals filed by month and category
    follow them and every snapshot writer, and list a paper where its latest snapshot puts it."""
    from loaders import browse
    from loaders.browse import browse_papers
    served, url, high = written
    conn = await asyncpg.connect(url)
    try:
        cited = await conn.fetchval("SELECT cited_arxiv_id FROM citation_observations WHERE cited_arxiv_id IS NOT "
                                    "NULL GROUP BY 1 ORDER BY count(*), 1 LIMIT 1")
        before = await conn.fetchval("SELECT total FROM paper_inbound_totals WHERE arxiv_id = $1", cited)
        oids = [uuid4(), uuid4()]
        at = high - timedelta(days=1)
        await conn.executemany(
            "INSERT INTO citation_observations (observation_id, citing_arxiv_id, reference_index, source, "
            "source_observed_at, cited_arxiv_id) VALUES ($1, '9912.00001', $2, 'pdf_text', $3, $4)",
            [(oid, i + 1, at, cited) for i, oid in enumerate(oids)])
        assert await conn.fetchval("SELECT total FROM paper_inbound_totals WHERE arxiv_id = $1", cited) == before
        await conn.execute("INSERT INTO paper_snapshots VALUES ('9912.00001', $1, 'A late paper', 1, 'cs.LG', $1, $1)",
                           at)
        assert await conn.fetchval("SELECT total FROM paper_inbound_totals WHERE arxiv_id = $1", cited) == before + 2
        assert await conn.fetchval("SELECT total FROM paper_inbound_totals WHERE arxiv_id = '9912.00001'") == 0
        await conn.execute("DELETE FROM resolutions WHERE observation_id = $1", oids[0])
        await conn.execute("DELETE FROM citation_observations WHERE observation_id = $1", oids[0])
        recount = await conn.fetchval("SELECT count(*) FROM citation_observations WHERE cited_arxiv_id = $1 "
                                      "AND visible_from IS NOT NULL", cited)
        assert await conn.fetchval("SELECT total FROM paper_inbound_totals WHERE arxiv_id = $1", cited) == recount \
            == before + 1
        wrong = await conn.fetchval(
            "SELECT count(*) FROM paper_inbound_totals AS t WHERE t.total <> (SELECT count(*) FROM "
            "citation_observations AS o WHERE o.cited_arxiv_id = t.arxiv_id AND o.visible_from IS NOT NULL)")
        assert wrong == 0
        # Citations taken away by an UPDATE: one re-pointed to another paper, one's visibility withdrawn (the
        # triggers' upserts once proposed a negative total, which the CHECK refused).
        other = await conn.fetchval("SELECT arxiv_id FROM paper_snapshots WHERE arxiv_id <> $1 ORDER BY arxiv_id "
                                    "LIMIT 1", cited)
        moved, hidden = [r[0] for r in await conn.fetch(
            "SELECT observation_id FROM citation_observations WHERE cited_arxiv_id = $1 AND visible_from IS NOT NULL "
            "ORDER BY observation_id LIMIT 2", cited)]
        await conn.execute("UPDATE citation_observations SET cited_arxiv_id = $2 WHERE observation_id = $1",
                           moved, other)
        await conn.execute("UPDATE citation_observations SET visible_from = NULL WHERE observation_id = $1", hidden)
        assert await conn.fetchval("SELECT total FROM paper_inbound_totals WHERE arxiv_id = $1", cited) == before - 1
        assert await conn.fetchval(
            "SELECT count(*) FROM paper_inbound_totals AS t WHERE t.total <> (SELECT count(*) FROM "
            "citation_observations AS o WHERE o.cited_arxiv_id = t.arxiv_id AND o.visible_from IS NOT NULL)") == 0
        assert await conn.fetchval(
            "SELECT count(*) FROM paper_observation_counts AS c WHERE c.inbound <> (SELECT count(*) FROM "
            "citation_observations AS o WHERE o.cited_arxiv_id = c.arxiv_id) OR c.outbound <> (SELECT count(*) "
            "FROM citation_observations AS o WHERE o.citing_arxiv_id = c.arxiv_id)") == 0
        assert await misplaced(conn) == []
        # A citation dated later, then deleted: its paper is ahead of "now" while it stands, and not after.
        latest = await conn.fetchval("SELECT counted_until FROM paper_inbound_totals WHERE arxiv_id = $1", cited)
        later = uuid4()
        await conn.execute("INSERT INTO citation_observations (observation_id, citing_arxiv_id, reference_index, "
                           "source, source_observed_at, cited_arxiv_id, visible_from) VALUES ($1, $2, 77777, "
                           "'pdf_text', $3, $4, $3)", later, other, at + timedelta(days=365), cited)
        assert await conn.fetchval("SELECT counted_until FROM paper_inbound_totals WHERE arxiv_id = $1",
                                   cited) == at + timedelta(days=365)
        await conn.execute("DELETE FROM citation_observations WHERE observation_id = $1", later)
        restored = await conn.fetchval("SELECT counted_until FROM paper_inbound_totals WHERE arxiv_id = $1", cited)
        assert restored == await conn.fetchval("SELECT max(visible_from) FROM citation_observations "
                                               "WHERE cited_arxiv_id = $1", cited)
        assert restored is None or latest is not None and restored <= latest < at + timedelta(days=365)
    finally:
        await conn.close()
    body = await served.graphql('{ browsePapers(orderBy: INBOUND_COUNT_DESC, first: 100, filter: {category: "cs.LG", '
                                'submittedFrom: "%s"}) { edges { inboundCount node { arxivId inbound { totalCount } } } } }'
                                % z(at - timedelta(seconds=1)))
    edges = body["data"]["browsePapers"]["edges"]
    assert [e["node"]["arxivId"] for e in edges] == ["9912.00001"] and edges[0]["inboundCount"] == 0
    conn = await asyncpg.connect(url)
    try:
        # The totals filed by month and category (migration 0030) follow the totals and every snapshot writer.
        assert await misplaced(conn) == []
        await conn.execute("UPDATE paper_snapshots SET primary_category = 'math.CO' WHERE arxiv_id = '9912.00001'")
        assert await misplaced(conn) == []
        await conn.execute("INSERT INTO paper_snapshots VALUES ('9912.00001', $1, 'A late paper', 2, NULL, $2, $1)",
                           at + timedelta(hours=1), at - timedelta(days=90))
        await conn.execute("INSERT INTO citation_observations (observation_id, citing_arxiv_id, reference_index, "
                           "source, source_observed_at, cited_arxiv_id) VALUES ($1, $2, 1, 'pdf_text', $3, "
                           "'9912.00001')", uuid4(), cited, at)
        assert await misplaced(conn) == []
        assert await conn.fetchval("SELECT count(*) FROM paper_placements WHERE arxiv_id = '9912.00001' AND total = 1") \
            == 2
        # Listed where its latest snapshot at the instant puts it, once, by its own category's and months' walks.
        monkeypatch.setattr(browse, "WALK_FIRST", 1)
        browse._numbered.cache_clear()
        now, then = at + timedelta(hours=2), at + timedelta(minutes=30)
        early = (at - timedelta(days=120), at - timedelta(days=60))
        for instant, category, window, listed in ((now, "math.CO", (None, None), False), (then, "math.CO", (None, None), True),
                                                  (now, None, early, True), (then, None, early, False),
                                                  (then, "math.CO", (at - timedelta(days=1), None), True),
                                                  (now, None, (at - timedelta(days=400), None), True)):
            page = await browse_papers(conn, instant, 1000, "INBOUND_COUNT_DESC", category, *window, None, None)
            found = [p.arxiv_id for p, _ in page.papers]
            assert found.count("9912.00001") == int(listed), (instant, category, window, found)
            assert found == sorted(set(found), key=lambda a: (-dict((p.arxiv_id, n) for p, n in page.papers)[a], a))
        browse._numbered.cache_clear()
        await conn.execute("DELETE FROM paper_snapshots WHERE arxiv_id = '9912.00001' AND observed_at = $1",
                           at + timedelta(hours=1))
        assert await misplaced(conn) == []
    finally:
        await conn.close()


def _scanned(plan: dict) -> int:
    """Rows the plan's scans read (returned or filtered out), over all their loops."""
    loops = plan.get("Actual Loops", 1)
    own = 0
    if "Scan" in plan["Node Type"]:
        own = (plan.get("Actual Rows", 0) + plan.get("Rows Removed by Filter", 0)
               + plan.get("Rows Removed by Index Recheck", 0)) * loops
    return own + sum(_scanned(p) for p in plan.get("Plans", ()))


def _loops_on(plan: dict, table: str) -> int:
    """The most times a scan of `table` runs in the plan."""
    own = plan.get("Actual Loops", 1) if plan.get("Relation Name") == table else 0
    return max([own, *(_loops_on(p, table) for p in plan.get("Plans", ()))])


EXPLAINED: dict[str, int] = {}


def _literal(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, list):
        return "ARRAY[" + ", ".join(_literal(v) for v in value) + "]"
    text = value.isoformat() if isinstance(value, datetime) else str(value)
    return "'" + text.replace("'", "''") + "'"


def _sent(statement: tuple[str, tuple]) -> tuple:
    sql, args = statement
    return (sql, *args)


async def _explained(conn: asyncpg.Connection, sql: str, *args) -> int:
    """The rows a statement's scans read as the pool plans it: PREPAREd and EXECUTEd under
    force_generic_plan (an EXPLAIN of a statement with bound parameters plans it for their values)."""
    import json

    await conn.execute(f"PREPARE explained AS {sql}")
    try:
        row = await conn.fetchval("EXPLAIN (ANALYZE, FORMAT JSON, TIMING OFF) EXECUTE explained("
                                  + ", ".join(_literal(a) for a in args) + ")")
    finally:
        await conn.execute("DEALLOCATE explained")
    plan = (row if isinstance(row, list) else json.loads(row))[0]["Plan"]
    assert "$1" in json.dumps(plan) or not args, "a custom plan"  # generic: the parameters stay parameters
    EXPLAINED["citation_observations"] = _loops_on(plan, "citation_observations")
    return _scanned(plan)


@pytest.mark.parametrize("cites_retracted", [None, True])
async def test_a_submission_window_in_submission_order_starts_at_the_window(synthetic, cites_retracted):
    """A page of a submission window in submission order, as the pool plans it, reads from the window's start:
    the window bounds the index walk (a condition written "no value, or ..." cannot), whatever lies before it."""
    from app.db.pool import BEGIN
    from loaders.browse import browse_papers, browse_statement

    _, url, high = synthetic
    at = high.replace(microsecond=0) + timedelta(seconds=1)
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(BEGIN.format(ms=60_000))
        everything = await browse_papers(conn, at, 10_000, "SUBMITTED_AT", None, None, None, cites_retracted, None)
        dates = [p.submitted_at for p, _ in everything.papers]
        assert len(dates) >= 20, len(dates)
        start, end = dates[len(dates) * 3 // 4], dates[-1]  # the last quarter
        page = await browse_papers(conn, at, 5, "SUBMITTED_AT", None, start, end, cites_retracted, None)
        assert [p.submitted_at for p, _ in page.papers] == dates[len(dates) * 3 // 4:][:5]
        sql, args = browse_statement("SUBMITTED_AT", cites_retracted, None, at, 6, None, start, end)
        assert " IS NULL OR " not in sql, sql
        read = await _explained(conn, sql, *args)
        assert read <= 6 * 20 + 50, (read, len(dates))  # not the three quarters before the window
    finally:
        await conn.close()


async def test_a_category_in_submission_order_walks_the_category(synthetic):
    """A category's page in submission order, as the pool plans it, walks that category's papers in that order
    (migration 0029's index), never every snapshot of the category or of the graph: the first page and one from
    the middle read about a page."""
    cites_retracted = None
    from app.db.pool import BEGIN
    from loaders.browse import browse_papers, browse_statement

    _, url, high = synthetic
    at = high.replace(microsecond=0) + timedelta(seconds=1)
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(BEGIN.format(ms=60_000))
        category = await conn.fetchval("SELECT primary_category FROM paper_snapshots GROUP BY 1 ORDER BY count(*) DESC "
                                       "LIMIT 1")
        everything = await browse_papers(conn, at, 10_000, "SUBMITTED_AT", category, None, None, cites_retracted,
                                         None)
        assert len(everything.papers) >= 8, len(everything.papers)
        middle = everything.papers[len(everything.papers) // 2][0]
        for after in (None, [middle.submitted_at, middle.arxiv_id]):
            sql, args = browse_statement("SUBMITTED_AT", cites_retracted, after, at, 4, category)
            read = await _explained(conn, sql, *args)
            assert read <= 4 * 6 + 20, (cites_retracted, after, read, len(everything.papers))
    finally:
        await conn.close()


@pytest.mark.parametrize("cites_retracted", [None, True, False])
async def test_every_page_reads_what_one_page_needs_under_generic_plans(synthetic, cites_retracted):
    """EXPLAIN ANALYZE of each page's statement as the pool runs it (force_generic_plan): a page near
    the end reads no more than the first does, in every order and filter; citesRetracted reads the few
    papers citing retracted work once, not a semi-join per paper walked."""
    from app.db.pool import BEGIN
    from loaders.browse import browse_papers, browse_statement, browse_works, sort_key, works_sql, works_statement

    _, url, high = synthetic
    at = high.replace(microsecond=0) + timedelta(seconds=1)
    conn = await asyncpg.connect(url)
    try:
        retracting = await conn.fetchval("SELECT count(DISTINCT work_id) FROM work_events WHERE event_type IN "
                                         "('retraction', 'withdrawal')")
        await conn.execute(BEGIN.format(ms=60_000))
        for order in ("ARXIV_ID", "SUBMITTED_AT", "INBOUND_COUNT_DESC"):
            cursors, after = [], None
            while True:  # every page's cursor, through the loader itself
                page = await browse_papers(conn, at, 10, order, None, None, None, cites_retracted, after)
                if not page.more:
                    break
                paper, inbound = page.papers[-1]
                after = sort_key(order, paper, inbound)
                if order == "SUBMITTED_AT":
                    after = [paper.submitted_at, paper.arxiv_id]
                cursors.append(after)
            assert len(cursors) >= 2, (order, cites_retracted)
            first = await _explained(conn, *_sent(browse_statement(order, cites_retracted, None, at, 11)))
            late = await _explained(conn, *_sent(browse_statement(order, cites_retracted, cursors[-1], at, 11)))
            assert late <= 2 * first + 50, (order, cites_retracted, first, late)
            if cites_retracted is not None:  # the references are probed per retracting work, never per paper
                assert EXPLAINED["citation_observations"] <= retracting, (order, EXPLAINED)
        # (Unfiltered, a works page's generic plan at this size sorts the whole table, 1,131 snapshots, as
        # cheaper than the index; at 20,000 papers it walks the index: bench/scale.py's EXPLAINs.)
        if cites_retracted is None:
            # Works with an event of one kind walk those events in work id order, not every work: a kind
            # few works have costs a page, not the table (migration 0028).
            known = await conn.fetchval("SELECT count(*) FROM work_snapshots")
            kinds = (("retraction", None), (None, "retraction_watch"), ("retraction", "retraction_watch"))
            for event_type, source in kinds:
                works = [w.work_id for w in (await browse_works(conn, at, 1000, cites_retracted, event_type, source,
                                                                None)).works]
                assert len(works) >= 3, (event_type, source, works)
                first = await _explained(conn, *_sent(works_statement(cites_retracted, None, at, 3, event_type,
                                                                      source)))
                late = await _explained(conn, *_sent(works_statement(cites_retracted, works[-3], at, 3, event_type,
                                                                     source)))
                assert max(first, late) <= 60 < known, (event_type, source, first, late, known)
        if cites_retracted is True:
            works = [w.work_id for w in (await browse_works(conn, at, 1000, cites_retracted, None, None, None)).works]
            first = await _explained(conn, works_sql(cites_retracted, False), at, 3, None, None)
            late = await _explained(conn, works_sql(cites_retracted, True), at, 3, None, None, works[-4])
            assert late <= 2 * first + 50, ("works", cites_retracted, first, late)
    finally:
        await conn.close()


async def test_a_papers_inbound_total_is_its_kept_total_whenever_that_is_exact(synthetic):
    """inbound { totalCount } (the compiled lookup and the dataloaders) and the record's inbound total read the
    paper's kept total at an instant the kept totals are exact for, and count its observations before that:
    both equal the count, at every instant asked; and at "now" the hub's total reads no observation."""
    from app.db.pool import BEGIN
    from loaders.citations import CITATION_COUNTS
    from loaders.record import RECORD_HEADS

    served, url, high = synthetic
    conn = await asyncpg.connect(url)
    try:
        exact_from = await conn.fetchval("SELECT max(counted_until) FROM paper_inbound_totals")
        hub = await conn.fetchval("SELECT arxiv_id FROM paper_inbound_totals ORDER BY total DESC, arxiv_id LIMIT 1")
        papers = [hub, *[r[0] for r in await conn.fetch("SELECT arxiv_id FROM paper_snapshots GROUP BY 1 "
                                                        "ORDER BY md5(arxiv_id) LIMIT 4")]]
        exact_from = exact_from.replace(microsecond=0) + timedelta(seconds=1)  # instants as clients write them
        instants = [exact_from - timedelta(days=30), exact_from - timedelta(seconds=2), exact_from,
                    high + timedelta(days=1)]
        for at in instants:
            text = at.astimezone(timezone.utc).isoformat()
            for arxiv_id in papers:
                counted = await conn.fetchval("SELECT count(*) FROM citation_observations WHERE cited_arxiv_id = $1 "
                                              "AND visible_from <= $2", arxiv_id, at)
                known = await conn.fetchval("SELECT 1 FROM paper_snapshots WHERE arxiv_id = $1 AND observed_at <= $2",
                                            arxiv_id, at)
                compiled = await served.graphql("query($id: String!, $at: DateTime) { paper(arxivId: $id, asOf: $at) "
                                                "{ inbound(first: 1) { totalCount } } }", {"id": arxiv_id, "at": text})
                loaded = await served.graphql("query($ids: [String!]!, $at: DateTime) { papers(arxivIds: $ids, "
                                              "asOf: $at) { inbound(first: 1) { totalCount } } }",
                                              {"ids": [arxiv_id], "at": text})
                head = await conn.fetchrow(RECORD_HEADS, [arxiv_id], at)
                if not known:
                    assert compiled["data"]["paper"] is None and head is None, (arxiv_id, at)
                    continue
                assert compiled["data"]["paper"]["inbound"]["totalCount"] == counted, (arxiv_id, at, compiled)
                assert loaded["data"]["papers"][0]["inbound"]["totalCount"] == counted, (arxiv_id, at, loaded)
                assert head["inbound_total"] == counted, (arxiv_id, at)
                (row,) = await conn.fetch(CITATION_COUNTS, [arxiv_id], ["in"], at, None, None)
                assert row["total"] == counted
        counted_hub = counted if papers[-1] == hub else await conn.fetchval(
            "SELECT count(*) FROM citation_observations WHERE cited_arxiv_id = $1", hub)
        await conn.execute(BEGIN.format(ms=60_000))  # as the pool plans it
        read = await _explained(conn, RECORD_HEADS, [hub], high + timedelta(days=1))
        assert read < counted_hub // 4, (read, counted_hub)  # the hub's total a probe, not a count of its citations
    finally:
        await conn.close()


async def test_a_papers_total_before_its_latest_citation_reads_only_what_came_after(synthetic):
    """A paper's inbound total at an instant before its latest citation is its kept total less the citations
    visible only later, read from the index by paper and visible_from, when they are at most half of it: a
    citation dated after "now" (a source's clock ahead, an import dated later) costs its paper a few index
    entries and every other paper nothing (it used to make every paper's total, and every most-cited page,
    count the graph); a recent instant reads the recent citations, an old one counts the fewer before it."""
    from loaders.citations import CITATION_COUNTS
    from loaders.record import RECORD_HEADS

    _, url, high = synthetic
    now = high + timedelta(days=1)
    conn = await asyncpg.connect(url)
    try:
        hub, total = await conn.fetchrow("SELECT arxiv_id, total FROM paper_inbound_totals ORDER BY total DESC, "
                                         "arxiv_id LIMIT 1")
        other = await conn.fetchval("SELECT arxiv_id FROM paper_inbound_totals WHERE total > 10 AND arxiv_id <> $1 "
                                    "ORDER BY arxiv_id LIMIT 1", hub)
        citing = await conn.fetchval("SELECT citing_arxiv_id FROM citation_observations LIMIT 1")
        times = [r[0] for r in await conn.fetch("SELECT visible_from FROM citation_observations WHERE cited_arxiv_id "
                                                "= $1 AND visible_from IS NOT NULL ORDER BY visible_from", hub)]
        recent, old = times[len(times) * 9 // 10] - timedelta(microseconds=1), times[len(times) // 10]
        await conn.execute("BEGIN; SET LOCAL plan_cache_mode = force_generic_plan; SET LOCAL jit = off")
        try:
            later = now + timedelta(days=365)
            await conn.execute("INSERT INTO citation_observations (observation_id, citing_arxiv_id, reference_index, "
                               "source, source_observed_at, cited_arxiv_id, visible_from) "
                               "VALUES ($1, $2, 99999, 'pdf_text', $3, $4, $3)", uuid4(), citing, later, hub)
            for paper, at in ((hub, now), (other, now), (hub, recent), (hub, old), (hub, later)):
                counted = await conn.fetchval("SELECT count(*) FROM citation_observations WHERE cited_arxiv_id = $1 "
                                              "AND visible_from <= $2", paper, at)
                assert (await conn.fetchrow(RECORD_HEADS, [paper], at))["inbound_total"] == counted, (paper, at)
                (row,) = await conn.fetch(CITATION_COUNTS, [paper], ["in"], at, None, None)
                assert row["total"] == counted, (paper, at)
                read = await _explained(conn, CITATION_COUNTS, [paper], ["in"], at, None, None)
                after = await conn.fetchval("SELECT count(*) FROM citation_observations WHERE cited_arxiv_id = $1 "
                                            "AND visible_from > $2", paper, at)
                # the probe, and the smaller side of the instant (with the walk that found it so; a bitmap scan
                # reports its rows twice, from the index and the heap)
                assert read <= 3 + 2 * min(after, counted) + (total // 2 + 1 if counted < after else 0), \
                    (paper, at, read, after, counted)
                if paper == hub and at == now:
                    assert after == 1 and read <= 4, read  # the key, the probe and the one citation dated later
                if paper == hub and at == recent:
                    assert read < total // 4, (read, total)
        finally:
            await conn.execute("ROLLBACK")
    finally:
        await conn.close()


@pytest.mark.parametrize("which", ["category and window", "category", "window"])
async def test_a_category_or_a_window_most_cited_first_walks_its_own_totals(larger, short_walk, monkeypatch, which):
    """A category, a window or both, most cited first: after a short walk of the totals (here 20; a broad set
    fills its page there) a page walks the set's own totals, filed by month and category (migration 0030), and
    stops after the page: never the totals of the whole graph cited more, nor every paper of the set; the pages,
    read to the end, are the set's papers in order of their inbound totals, ties by arXiv id."""
    from app.db.pool import BEGIN
    from loaders.browse import browse_papers, browse_statement, sort_key

    browse = short_walk
    _, url, high = larger
    at = high.replace(microsecond=0) + timedelta(seconds=1)
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(BEGIN.format(ms=60_000))
        category, start, end = await conn.fetchrow(
            "SELECT primary_category, min(submitted_at), percentile_disc(0.5) WITHIN GROUP (ORDER BY submitted_at) "
            "FROM paper_snapshots GROUP BY 1 ORDER BY count(*) DESC LIMIT 1")
        if which == "window":
            category, start, end = None, *await conn.fetchrow(
                "SELECT percentile_disc(0.4) WITHIN GROUP (ORDER BY submitted_at), percentile_disc(0.6) WITHIN GROUP "
                "(ORDER BY submitted_at) FROM paper_snapshots")
        elif which == "category":
            start = end = None
        expected = [(r[0], r[1]) for r in await conn.fetch(
            "SELECT s.arxiv_id, (SELECT count(*) FROM citation_observations AS o WHERE o.cited_arxiv_id = s.arxiv_id "
            "AND o.visible_from <= $1) AS n FROM paper_snapshots AS s WHERE s.observed_at <= $1 AND NOT EXISTS "
            "(SELECT 1 FROM paper_snapshots AS x WHERE x.arxiv_id = s.arxiv_id AND x.observed_at > s.observed_at "
            "AND x.observed_at <= $1) AND ($2::text IS NULL OR s.primary_category = $2) "
            "AND ($3::timestamptz IS NULL OR s.submitted_at >= $3) AND ($4::timestamptz IS NULL OR s.submitted_at <= $4) "
            "ORDER BY n DESC, s.arxiv_id", at, category, start, end)]
        months = len({(d.year, d.month) for d in [r[0] for r in await conn.fetch(
            "SELECT submitted_at FROM paper_snapshots WHERE ($1::timestamptz IS NULL OR submitted_at >= $1) "
            "AND ($2::timestamptz IS NULL OR submitted_at <= $2)", start, end)]})
        listed, after, reads = [], None, []
        while True:
            page = await browse_papers(conn, at, 4, "INBOUND_COUNT_DESC", category, start, end, None, after)
            listed += [(p.arxiv_id, n) for p, n in page.papers]
            reads.append(await _explained(conn, *_sent(browse_statement("INBOUND_COUNT_DESC", None, after, at, 5,
                                                                        category, start, end))))
            if not page.more:
                break
            after = sort_key("INBOUND_COUNT_DESC", *page.papers[-1])
        assert len(expected) >= 8 and listed == expected
        # Each page: the short walk (its rows, snapshots and filter, here 20), then one walk of the category, or
        # one per month of the window, each of about a page (5 rows, their snapshots and checks): never a whole
        # month, the whole set or the graph's totals, whatever their sizes.
        walks = months if start or end else 1
        total = await conn.fetchval("SELECT count(*) FROM paper_inbound_totals")
        assert max(reads) <= 4 * 20 + walks * 6 * 6 < total, (reads, walks, len(expected), total)
        if which == "category":  # a broad set: the short walk stops once the page is full, not at its end
            monkeypatch.setattr(browse, "WALK_FIRST", 2000)
            browse._numbered.cache_clear()
            read = await _explained(conn, *_sent(browse_statement("INBOUND_COUNT_DESC", None, None, at, 5, category)))
            assert read < 2000 // 2, read
    finally:
        await conn.close()


@pytest.mark.parametrize("with_category", [False, True])
async def test_a_window_in_arxiv_id_order_starts_at_the_windows_first_id(larger, short_walk, with_category):
    """A submission window in arXiv id order (ids follow submission months): after a short walk (here 20
    snapshots; a broad window fills its page there) a page starts at the window's first id after the cursor, so
    no page reads the ids before the window, and the pages, read to the end, are the window's papers in id order,
    whatever the window holds: a late quarter, an early one, a middle one, one day with no paper."""
    from app.db.pool import BEGIN
    from loaders.browse import browse_papers, browse_statement, sort_key

    _, url, high = larger
    at = high.replace(microsecond=0) + timedelta(seconds=1)
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(BEGIN.format(ms=60_000))
        category = await conn.fetchval("SELECT primary_category FROM paper_snapshots GROUP BY 1 ORDER BY count(*) DESC "
                                       "LIMIT 1") if with_category else None
        dates = [r[0] for r in await conn.fetch("SELECT submitted_at FROM paper_snapshots WHERE observed_at <= $1 "
                                                "AND ($2::text IS NULL OR primary_category = $2) ORDER BY 1",
                                                at, category)]
        total = await conn.fetchval("SELECT count(*) FROM paper_snapshots")
        n = len(dates)
        windows = [(dates[n * 3 // 4], dates[-1]), (dates[0], dates[n // 4]), (dates[n // 4], dates[n * 3 // 4]),
                   (dates[-1] + timedelta(days=1), dates[-1] + timedelta(days=2))]
        for start, end in windows:
            expected = [r[0] for r in await conn.fetch(
                "SELECT s.arxiv_id FROM paper_snapshots AS s WHERE s.observed_at <= $1 AND NOT EXISTS "
                "(SELECT 1 FROM paper_snapshots AS x WHERE x.arxiv_id = s.arxiv_id AND x.observed_at > s.observed_at "
                "AND x.observed_at <= $1) AND ($2::text IS NULL OR s.primary_category = $2) "
                "AND s.submitted_at BETWEEN $3 AND $4 ORDER BY s.arxiv_id", at, category, start, end)]
            inside = await conn.fetchval("SELECT count(*) FROM paper_snapshots WHERE submitted_at BETWEEN $1 AND $2 "
                                         "AND ($3::text IS NULL OR primary_category = $3)", start, end, category)
            listed, after, reads = [], None, []
            while True:
                page = await browse_papers(conn, at, 4, "ARXIV_ID", category, start, end, None, after)
                listed += [p.arxiv_id for p, _ in page.papers]
                reads.append(await _explained(conn, *_sent(browse_statement("ARXIV_ID", None, after, at, 5, category,
                                                                            start, end))))
                # at most the short walk, the window's ids (index and rows) and a walk from its first (each walk
                # counted by its scan and its filter): never every id before the window
                assert reads[-1] <= 3 * inside + 6 * 20 + 5 * 12, (reads, inside, total, start, after)
                if not page.more:
                    break
                after = sort_key("ARXIV_ID", *page.papers[-1])
            assert listed == expected, (start, end)
            if len(reads) >= 8:  # a page inside the window reads about a page (the short walk), not the window
                assert sorted(reads)[len(reads) // 2] <= 3 * 20 + 5 * 8 < inside, (reads, inside)
        assert n >= 40
    finally:
        await conn.close()


@pytest.mark.parametrize("order", ["ARXIV_ID", "INBOUND_COUNT_DESC"])
async def test_a_window_from_year_one_ends(larger, short_walk, order):
    """A window from 0001-01-01T00:00:00Z (the driver sends it as -infinity), with an end, without one, of a
    category with no paper: the pages past the short walk list the window's papers, and a set with none is empty,
    at once (a series of months from -infinity never ended: every such page answered TIMEOUT)."""
    from app.db.pool import BEGIN
    from loaders.browse import browse_papers, sort_key

    _, url, high = larger
    at = high.replace(microsecond=0) + timedelta(seconds=1)
    year_one = datetime(1, 1, 1, tzinfo=timezone.utc)
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(BEGIN.format(ms=5_000))
        category, end = await conn.fetchrow("SELECT primary_category, percentile_disc(0.02) WITHIN GROUP (ORDER BY "
                                            "submitted_at) FROM paper_snapshots GROUP BY 1 ORDER BY 1 LIMIT 1")
        for window, which in (((year_one, end), category), ((year_one, None), category), ((year_one, end), None),
                              ((year_one, end), "no.such")):
            expected = await conn.fetchval(
                "SELECT count(DISTINCT arxiv_id) FROM paper_snapshots AS s WHERE ($1::text IS NULL OR "
                "s.primary_category = $1) AND ($2::timestamptz IS NULL OR s.submitted_at <= $2) AND NOT EXISTS "
                "(SELECT 1 FROM paper_snapshots AS x WHERE x.arxiv_id = s.arxiv_id AND x.observed_at > s.observed_at)",
                which, window[1])
            listed, after = [], None
            while True:
                page = await browse_papers(conn, at, 50, order, which, *window, None, after)
                listed += [p.arxiv_id for p, _ in page.papers]
                if not page.more:
                    break
                after = sort_key(order, *page.papers[-1])
            assert len(listed) == len(set(listed)) == expected, (window, which, len(listed), expected)
    finally:
        await conn.close()


@pytest.mark.parametrize("which", ["all", "category", "window", "category and window", "cites retracted"])
async def test_most_cited_first_with_citations_dated_after_now(larger, short_walk, which, monkeypatch):
    """Citations dated after "now" (a source's clock ahead, an import dated later) put their papers ahead of the
    kept totals: most cited first, those papers are merged in with their totals now, and every other paper is
    walked as before. The pages equal brute force, and each reads about a page: the papers ahead cost their own
    totals, never a count of every paper's citations (what every page of most cited did, at a million papers a
    TIMEOUT, while a single citation was dated later)."""
    from loaders.browse import browse_papers, browse_statement, sort_key

    browse = short_walk
    counted, count = [], browse.counted_sql
    monkeypatch.setattr(browse, "counted_sql", lambda *a: counted.append(a) or count(*a))
    _, url, high = larger
    at = high.replace(microsecond=0) + timedelta(seconds=1)
    later = at + timedelta(days=30)
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("BEGIN; SET LOCAL plan_cache_mode = force_generic_plan; SET LOCAL jit = off; "
                           "SET LOCAL max_parallel_workers_per_gather = 0")
        try:
            category, start, end = await conn.fetchrow(
                "SELECT primary_category, percentile_disc(0.3) WITHIN GROUP (ORDER BY submitted_at), "
                "percentile_disc(0.7) WITHIN GROUP (ORDER BY submitted_at) FROM paper_snapshots GROUP BY 1 "
                "ORDER BY count(*) DESC LIMIT 1")
            if which in ("all", "cites retracted"):
                category = start = end = None
            elif which == "category":
                start = end = None
            elif which == "window":
                category = None
            retracted = True if which == "cites retracted" else None
            if retracted:  # a retraction standing now on works cited by some papers
                works = [r[0] for r in await conn.fetch("SELECT work_id FROM citation_observations WHERE work_id IS "
                                                        "NOT NULL GROUP BY 1 ORDER BY count(*) DESC LIMIT 20")]
                await conn.executemany("INSERT INTO work_events (work_id, source, event_type, observed_at) "
                                       "VALUES ($1, 'retraction_watch', 'retraction', $2)",
                                       [(w, at - timedelta(days=1)) for w in works])
            async def pages() -> tuple[list, list[int]]:
                listed, after, reads = [], None, []
                while len(reads) < 200:
                    page = await browse_papers(conn, at, 50, "INBOUND_COUNT_DESC", category, start, end, retracted,
                                               after)
                    listed += [(p.arxiv_id, n) for p, n in page.papers]
                    reads.append(await _explained(conn, *_sent(browse_statement(
                        "INBOUND_COUNT_DESC", retracted, after, at, 51, category, start, end))))
                    if not page.more:
                        break
                    after = sort_key("INBOUND_COUNT_DESC", *page.papers[-1])
                return listed, reads

            _, before = await pages()
            # The most cited paper, one in the middle, one never cited: each cited again, later than now, by papers
            # that cite them now; the middle one many times, more than half its citations.
            ranked = [r[0] for r in await conn.fetch("SELECT arxiv_id FROM paper_inbound_totals ORDER BY total DESC, "
                                                     "arxiv_id")]
            ahead = [ranked[0], ranked[len(ranked) // 3], ranked[-1]]
            citing = [r[0] for r in await conn.fetch("SELECT arxiv_id FROM paper_snapshots GROUP BY 1 ORDER BY 1 "
                                                     "LIMIT 40")]
            rows = [(uuid4(), c, 90000 + i, "pdf_text", later, a, later)
                    for a, n in zip(ahead, (1, 40, 3)) for i, c in enumerate(citing[:n])]
            await conn.copy_records_to_table("citation_observations", records=rows, columns=[
                "observation_id", "citing_arxiv_id", "reference_index", "source", "source_observed_at",
                "cited_arxiv_id", "visible_from"])
            assert await conn.fetchval("SELECT count(*) FROM paper_inbound_totals WHERE counted_until > $1", at) == 3
            expected = [(r[0], r[1]) for r in await conn.fetch(
                "SELECT s.arxiv_id, (SELECT count(*) FROM citation_observations AS o WHERE o.cited_arxiv_id = "
                "s.arxiv_id AND o.visible_from <= $1) AS n FROM paper_snapshots AS s WHERE s.observed_at <= $1 AND "
                "NOT EXISTS (SELECT 1 FROM paper_snapshots AS x WHERE x.arxiv_id = s.arxiv_id AND x.observed_at > "
                "s.observed_at AND x.observed_at <= $1) AND ($2::text IS NULL OR s.primary_category = $2) "
                "AND ($3::timestamptz IS NULL OR s.submitted_at >= $3) AND ($4::timestamptz IS NULL OR "
                "s.submitted_at <= $4) AND (NOT $5::boolean OR EXISTS (SELECT 1 FROM citation_observations AS o "
                "JOIN work_events AS e ON e.work_id = o.work_id WHERE o.citing_arxiv_id = s.arxiv_id AND "
                "o.visible_from <= $1 AND e.observed_at <= $1)) ORDER BY n DESC, s.arxiv_id",
                at, category, start, end, bool(retracted))]
            listed, reads = await pages()
            assert listed == expected
            assert any(a in [x for x, _ in listed] for a in ahead) or which != "all"
            # A page reads what it read before, and the papers ahead: their totals (a probe, the citations after
            # now, at most 40) and snapshots; a walk of a window's months also probes the totals of each row it
            # walks while some paper is ahead (its placements keep no counted_until); never every paper's
            # citations counted (over 100,000 rows here).
            assert len(reads) in (len(before), len(before) + 1) and not counted
            walked_twice = 2 if start or end else 1
            assert max(reads) <= walked_twice * max(before) + 3 * 60, (reads, before)
        finally:
            await conn.execute("ROLLBACK")
    finally:
        await conn.close()
