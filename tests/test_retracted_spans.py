"""The spans the database keeps of the standing rule (migration 0022) agree with the rule itself
(loaders.citations.retracted_sql) at every instant their facts change, and before and after each, through
every kind of writer: events, ends, reinstatements, a work linked late, a reference added, moved to
another work and removed, a citing paper's later snapshot and one that arrives after its references."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from uuid import uuid4

import asyncpg
import pytest
import pytest_asyncio

from loaders.base import at_param
from loaders.citations import VISIBLE, retracted_sql
from tests.conftest import drop_database, synthetic_database

pytestmark = pytest.mark.asyncio(loop_scope="session")

# The rule, straight: the works retracted at $1, the papers with a visible reference to one then (with
# the paper's latest snapshot then).
WORKS_AT = at_param(f"""SELECT w.work_id FROM (SELECT DISTINCT work_id FROM work_events) AS w
                        WHERE {retracted_sql("w.work_id")}""", 1)
PAPERS_AT = at_param(f"""SELECT p.arxiv_id, (SELECT max(s.observed_at) FROM paper_snapshots AS s
                                            WHERE s.arxiv_id = p.arxiv_id AND s.observed_at <= $AS) AS snapshot_at
                         FROM (SELECT DISTINCT o.citing_arxiv_id AS arxiv_id FROM citation_observations AS o
                               WHERE o.work_id IN (SELECT e.work_id FROM work_events AS e) AND {VISIBLE} AND {retracted_sql("o.work_id")}) AS p""", 1)
KEPT_WORKS = "SELECT work_id FROM work_retracted_spans WHERE from_at <= $1 AND until_at > $1"
KEPT_PAPERS = "SELECT arxiv_id, snapshot_at FROM paper_retracted_citing_spans WHERE from_at <= $1 AND until_at > $1"


@pytest_asyncio.fixture(loop_scope="session")
async def graph(admin_url):
    url = await synthetic_database(admin_url, "pith_test_spans", 300, 7)
    conn = await asyncpg.connect(url)
    try:
        yield conn
    finally:
        await conn.close()
        await drop_database(admin_url, url)


async def instants(conn: asyncpg.Connection) -> list[datetime]:
    """Every instant a work's standing changes at, a second before and after it, 30 of the instants a
    citing paper changes at (its references' visibility, its snapshots), and tomorrow."""
    events = await conn.fetch("""SELECT observed_at AS t FROM work_events UNION SELECT ended_at FROM work_event_ends
                                 UNION SELECT coalesce(reported_at, observed_at) FROM work_events
                                 UNION SELECT observed_at FROM work_snapshots
                                 WHERE work_id IN (SELECT work_id FROM work_events)""")
    papers = [r["t"] for r in await conn.fetch(
        """SELECT visible_from AS t FROM citation_observations WHERE work_id IN (SELECT work_id FROM work_events)
             AND visible_from IS NOT NULL
           UNION SELECT observed_at FROM paper_snapshots WHERE arxiv_id IN
             (SELECT citing_arxiv_id FROM citation_observations WHERE work_id IN (SELECT work_id FROM work_events))
           ORDER BY 1""")]
    second = timedelta(seconds=1)
    return sorted({x for t in [r["t"] for r in events] + papers[::max(1, len(papers) // 30)]
                   for x in (t - second, t, t + second)} | {datetime.now(timezone.utc) + timedelta(days=1)})


async def assert_exact(conn: asyncpg.Connection) -> int:
    """The kept spans equal the rule at every instant; the number of instants where something is retracted."""
    overlapping = await conn.fetchval(
        """SELECT count(*) FROM paper_retracted_citing_spans AS a JOIN paper_retracted_citing_spans AS b
           ON a.arxiv_id = b.arxiv_id AND a.from_at < b.from_at AND a.until_at > b.from_at""")
    assert overlapping == 0
    retracted = 0
    for at in await instants(conn):
        works = {r[0] for r in await conn.fetch(WORKS_AT, at)}
        assert {r[0] for r in await conn.fetch(KEPT_WORKS, at)} == works, at
        papers = {tuple(r) for r in await conn.fetch(PAPERS_AT, at)}
        kept = await conn.fetch(KEPT_PAPERS, at)
        assert len(kept) == len({r[0] for r in kept})  # one covering span per paper
        assert {tuple(r) for r in kept} == papers, at
        retracted += bool(papers)
    # The snapshot a span names carries the span's submission time and category.
    assert await conn.fetchval(
        """SELECT count(*) FROM paper_retracted_citing_spans AS c JOIN paper_snapshots AS s
           ON s.arxiv_id = c.arxiv_id AND s.observed_at = c.snapshot_at
           WHERE s.submitted_at IS DISTINCT FROM c.submitted_at
              OR s.primary_category IS DISTINCT FROM c.primary_category""") == 0
    return retracted


async def test_kept_spans_follow_every_writer_at_every_instant(graph):
    conn = graph
    assert await assert_exact(conn) > 0  # the generator's own retractions, as migrated
    high = await conn.fetchval("SELECT max(observed_at) FROM paper_snapshots")
    works = [r[0] for r in await conn.fetch(
        "SELECT work_id FROM citation_observations WHERE work_id IS NOT NULL AND work_id NOT IN "
        "(SELECT work_id FROM work_events) GROUP BY 1 ORDER BY count(*) DESC, 1 LIMIT 5")]
    at = high - timedelta(days=20)
    day = timedelta(days=1)
    # A retraction, then a reinstatement that happened later: retracted for a while.
    await conn.execute("INSERT INTO work_events (work_id, source, event_type, observed_at) VALUES "
                       "($1, 'retraction_watch', 'retraction', $2)", works[0], at)
    await conn.execute("INSERT INTO work_events (work_id, source, event_type, observed_at) VALUES "
                       "($1, 'crossref', 'reinstatement', $2)", works[0], at + 3 * day)
    # A withdrawal reported as happening before a reinstatement observed earlier: the withdrawal decides
    # only until... the reinstatement happened later, so it decides once observed.
    await conn.execute("INSERT INTO work_events (work_id, source, event_type, observed_at, reported_at) VALUES "
                       "($1, 'crossref', 'withdrawal', $2, $3)", works[1], at + 2 * day, at - 10 * day)
    await conn.execute("INSERT INTO work_events (work_id, source, event_type, observed_at, reported_at) VALUES "
                       "($1, 'openalex', 'reinstatement', $2, $3)", works[1], at + 5 * day, at - 5 * day)
    # A retraction its source later stops reporting (an end), and one on a work linked only later.
    await conn.execute("INSERT INTO work_events (work_id, source, event_type, observed_at) VALUES "
                       "($1, 'openalex', 'retraction', $2)", works[2], at + day)
    await conn.execute("INSERT INTO work_event_ends VALUES ($1, 'openalex', 'retraction', $2, $3)",
                       works[2], at + day, at + 4 * day)
    late = uuid4()
    await conn.execute("INSERT INTO work_events (work_id, source, event_type, observed_at) VALUES "
                       "($1, 'retraction_watch', 'retraction', $2)", late, at)
    assert await assert_exact(conn)
    await conn.execute("INSERT INTO work_snapshots (work_id, observed_at, title) VALUES ($1, $2, 'Linked late')",
                       late, at + 6 * day)
    # References: one added to the late work (by a paper with a later snapshot too), one moved onto a
    # retracted work, one removed.
    citing = await conn.fetchval("SELECT arxiv_id FROM paper_snapshots ORDER BY arxiv_id LIMIT 1")
    oid = uuid4()
    await conn.execute("INSERT INTO citation_observations (observation_id, citing_arxiv_id, reference_index, "
                       "source, source_observed_at, work_id) VALUES ($1, $2, 999, 'pdf_text', $3, $4)",
                       oid, citing, at + 7 * day, late)
    await conn.execute("INSERT INTO paper_snapshots (arxiv_id, observed_at, title, latest_version, primary_category, "
                       "submitted_at, last_updated) SELECT arxiv_id, $2, title || ' (v2)', latest_version + 1, "
                       "'math.CO', submitted_at, $2 FROM paper_snapshots WHERE arxiv_id = $1 "
                       "ORDER BY observed_at DESC LIMIT 1", citing, at + 8 * day)
    moved = await conn.fetchval("SELECT observation_id FROM citation_observations WHERE work_id = $1 LIMIT 1",
                                works[3])
    await conn.execute("UPDATE citation_observations SET work_id = $1 WHERE observation_id = $2", works[0], moved)
    await conn.execute("INSERT INTO work_events (work_id, source, event_type, observed_at) VALUES "
                       "($1, 'retraction_watch', 'retraction', $2)", works[4], at + 9 * day)
    gone = await conn.fetchval("SELECT observation_id FROM citation_observations WHERE work_id = $1 LIMIT 1",
                               works[4])
    await conn.execute("DELETE FROM resolutions WHERE observation_id = $1", gone)
    await conn.execute("DELETE FROM citation_observations WHERE observation_id = $1", gone)
    # A paper whose references are stored before its first snapshot: visible (and citing) from it.
    await conn.execute("INSERT INTO citation_observations (observation_id, citing_arxiv_id, reference_index, "
                       "source, source_observed_at, work_id) VALUES ($1, '9912.00002', 1, 'pdf_text', $2, $3)",
                       uuid4(), at, late)
    assert await conn.fetchval("SELECT count(*) FROM paper_retracted_citing_spans WHERE arxiv_id = '9912.00002'") == 0
    await conn.execute("INSERT INTO paper_snapshots VALUES ('9912.00002', $1, 'Late paper', 1, 'cs.LG', $1, $1)",
                       at + 10 * day)
    assert await conn.fetchval("SELECT from_at FROM paper_retracted_citing_spans WHERE arxiv_id = '9912.00002'") \
        == at + 10 * day
    assert await assert_exact(conn)
    # Events re-dated (the end goes along), and removed: the spans go with them.
    await conn.execute("UPDATE work_events SET observed_at = observed_at - interval '1 day' WHERE work_id = $1",
                       works[2])
    await conn.execute("DELETE FROM work_events WHERE work_id = $1 AND event_type = 'reinstatement'", works[0])
    await conn.execute("DELETE FROM work_events WHERE work_id = $1", late)
    assert await conn.fetchval("SELECT count(*) FROM work_retracted_spans WHERE work_id = $1", late) == 0
    assert await assert_exact(conn)
