"""One standing rule, kept by the database: every event stands with its source's receipt at that instant,
whoever writes it. Per edge of a synthetic graph, citesRetracted, Work.retracted, the notice's events, the
export's columns, recordDiff's STANDING_EVENT changes and the timeline then agree. The graph is first
written as the store used to accept it (events without receipts): there they disagree, and migration
0009 repairs it and says what it changed."""

from __future__ import annotations

import random
from collections import defaultdict
from datetime import datetime, timezone
from uuid import uuid4

import asyncpg
import pytest

from app.db.migrate import migrate
from app.ingest.bulk import write_synthetic
from loaders.graph import Graph
from loaders.rows import Event, retracted_by
from loaders.timeline import second_up
from tests.conftest import StatementLog, drop_database, serve, with_database

pytestmark = pytest.mark.asyncio(loop_scope="session")

EDGES = """query($ids: [String!]!, $at: DateTime) { papers(arxivIds: $ids, asOf: $at) { arxivId
  outbound(first: 100) { totalCount edges { node { observationId
    citedWork { workId retracted }
    standingNotice { state events { eventType source observedAt reportedAt } } } } }
  flagged: outbound(citesRetracted: true, first: 100) { edges { node { observationId } } } } }"""
DIFF = """query($id: String!, $at: DateTime!) { recordDiff(arxivId: $id, from: "2000-01-01T00:00:00Z", to: $at,
  kinds: [STANDING_EVENT], maxChanges: 1000) { changesTruncated changes { observedAt
    event { eventType source } observation { citingPaper { arxivId } citedWork { workId } } } } }"""
TIMELINE = """query($id: String!, $from: DateTime!, $at: DateTime) { paper(arxivId: $id, asOf: $at) {
  timeline(from: $from, to: $from, first: 1) { edges { node { at kinds } } } } }"""


def z(value: datetime) -> str:
    return value.astimezone(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _instant(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


def z_exact(text: str | None) -> str | None:
    """A GraphQL DateTime as the export writes times (UTC, Z, microseconds kept)."""
    if text is None:
        return None
    from app.record import z_time

    return z_time(datetime.fromisoformat(text.replace("Z", "+00:00")))


async def disagreements(url: str, papers: list[str], at: datetime) -> list[str]:
    """Every way the readers of the standing rule disagree on the papers' references at `at`."""
    found: list[str] = []
    conn = await asyncpg.connect(url)
    try:
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            graph = Graph(conn, at)
            exported = {e.observation_id: e async for e in graph.edges()}
            # From when each reference can show a change of its work: it is in the record, and the work linked.
            shows_from = {str(r[0]): max(second_up(r[1]), second_up(r[2])) for r in await conn.fetch(
                "SELECT o.observation_id, o.visible_from, (SELECT min(w.observed_at) FROM work_snapshots AS w "
                "WHERE w.work_id = o.work_id) FROM citation_observations AS o "
                "WHERE o.citing_arxiv_id = ANY($1::text[]) AND o.visible_from <= $2 AND o.work_id IS NOT NULL",
                papers, at)}
    finally:
        await conn.close()
    async for served in serve(url, StatementLog()):
        for start in range(0, len(papers), 10):
            body = await served.graphql(EDGES, {"ids": papers[start:start + 10], "at": z(at)})
            assert "errors" not in body, body
            for paper in body["data"]["papers"]:
                arxiv_id = paper["arxivId"]
                assert paper["outbound"]["totalCount"] <= 100
                flagged = {e["node"]["observationId"] for e in paper["flagged"]["edges"]}
                notices: dict[str, set] = defaultdict(set)  # work id -> its notice's events, as shown
                for edge in paper["outbound"]["edges"]:
                    node = edge["node"]
                    oid, notice, work = node["observationId"], node["standingNotice"], node["citedWork"]
                    events = notice["events"]
                    measured = notice["state"] == "MEASURED"
                    rule = measured and retracted_by(
                        Event(None, e["source"], e["eventType"].lower(), _instant(e["observedAt"]),
                              _instant(e["reportedAt"]), None) for e in events)
                    where = f"{arxiv_id} {oid}"
                    if (oid in flagged) != rule:
                        found.append(f"{where}: citesRetracted {oid in flagged}, the notice's events say {rule}")
                    if work["workId"] is not None and work["retracted"] != rule:
                        found.append(f"{where}: Work.retracted {work['retracted']}, the notice says {rule}")
                    row = exported[oid]
                    if row.cited_work_retracted != rule or row.standing_state.upper() != notice["state"]:
                        found.append(f"{where}: export {row.cited_work_retracted}/{row.standing_state}, notice "
                                     f"{rule}/{notice['state']}")
                    last = events[-1] if events else None
                    columns = (row.cited_work_event_type, row.cited_work_event_source,
                               row.cited_work_event_observed_at, row.cited_work_event_reported_at)
                    shown = ((last["eventType"].lower(), last["source"], z_exact(last["observedAt"]),
                              z_exact(last["reportedAt"])) if last else (None, None, None, None))
                    if columns != shown:
                        found.append(f"{where}: export event columns {columns}, the notice's last event {shown}")
                    if work["workId"] is not None and measured:
                        notices[work["workId"]] |= {(e["eventType"], e["source"], e["observedAt"]) for e in events}
                    # Each of the notice's events observed while the reference is in the record shows in the
                    # timeline at its instant (one observed before is in the record from the reference's start).
                    for e in events:
                        second = second_up(datetime.fromisoformat(e["observedAt"].replace("Z", "+00:00")))
                        if second < shows_from[oid]:
                            continue
                        instant = z(datetime.fromtimestamp(second, timezone.utc))
                        line = await served.graphql(TIMELINE, {"id": arxiv_id, "from": instant, "at": z(at)})
                        entries = line["data"]["paper"]["timeline"]["edges"]
                        if not entries or "STANDING_EVENT" not in entries[0]["node"]["kinds"]:
                            found.append(f"{where}: timeline has no STANDING_EVENT at {instant}")
                # recordDiff's events on the works this paper cites are exactly those of their notices.
                answer = await served.graphql(DIFF, {"id": arxiv_id, "at": z(at)})
                assert "data" in answer, answer
                diff = answer["data"]["recordDiff"]
                assert not diff["changesTruncated"]
                changes: dict[str, set] = defaultdict(set)
                for change in diff["changes"]:
                    obs = change["observation"]
                    if obs is not None and obs["citingPaper"]["arxivId"] == arxiv_id and obs["citedWork"]["workId"]:
                        event = change["event"]
                        changes[obs["citedWork"]["workId"]].add((event["eventType"], event["source"],
                                                                 change["observedAt"]))
                for work_id in set(changes) | set(notices):
                    if changes.get(work_id, set()) != notices.get(work_id, set()):
                        found.append(f"{arxiv_id} work {work_id}: recordDiff {sorted(changes.get(work_id, ()))}, "
                                     f"notices {sorted(notices.get(work_id, ()))}")
    return found


@pytest.fixture
def fresh_name() -> str:
    return f"pith_test_rule_{uuid4().hex[:10]}"


async def test_per_edge_every_reader_agrees_once_the_store_keeps_the_rule(admin_url, fresh_name):
    admin = await asyncpg.connect(admin_url)
    await admin.execute(f'CREATE DATABASE "{fresh_name}"')
    await admin.close()
    url = with_database(admin_url, fresh_name)
    try:
        conn = await asyncpg.connect(url)
        try:
            # The store as it was: no rule, and a graph whose events have no receipt of their own.
            await migrate(conn, until="0008_sources")
            await write_synthetic(conn, 600, 41, progress=None)
            stripped = await conn.execute(
                "DELETE FROM standing_receipts AS r USING work_events AS e WHERE r.work_id = e.work_id "
                "AND r.source = e.source AND r.observed_at = e.observed_at")
            assert int(stripped.split()[-1]) > 0
            at = await conn.fetchval("SELECT date_trunc('second', max(observed_at)) + interval '1 day' "
                                     "FROM paper_snapshots")
            # And, as the generator wrote them, retractions of works no source ever checked.
            never_checked = [r[0] for r in await conn.fetch(
                "SELECT DISTINCT o.work_id FROM citation_observations AS o WHERE o.work_id IS NOT NULL AND NOT EXISTS "
                "(SELECT 1 FROM standing_receipts AS r WHERE r.work_id = o.work_id) ORDER BY 1 LIMIT 6")]
            assert len(never_checked) == 6
            await conn.executemany("INSERT INTO work_events VALUES ($1, 'retraction_watch', 'retraction', "
                                   "$2::timestamptz - interval '5 days', $2::timestamptz - interval '30 days', NULL)",
                                   [(w, at) for w in never_checked])
            # Papers of the graph: every one citing a work with an event (where readers can disagree), and others.
            eventful = [r[0] for r in await conn.fetch(
                "SELECT DISTINCT o.citing_arxiv_id FROM citation_observations AS o JOIN work_events AS e "
                "USING (work_id) WHERE o.visible_from <= $1 ORDER BY 1", at)]
            everyone = [r[0] for r in await conn.fetch(
                "SELECT DISTINCT arxiv_id FROM paper_snapshots WHERE observed_at <= $1 ORDER BY 1", at)]
            unchecked = await conn.fetchval(
                "SELECT count(*) FROM (SELECT DISTINCT work_id, source, observed_at FROM work_events) AS e "
                "WHERE NOT EXISTS (SELECT 1 FROM standing_receipts AS r WHERE r.work_id = e.work_id "
                "AND r.source = e.source AND r.observed_at = e.observed_at)")
        finally:
            await conn.close()
        papers = sorted(set(random.Random(7).sample(eventful, min(25, len(eventful)))
                            + random.Random(8).sample(everyone, 10)))
        assert len(eventful) >= 5 and unchecked > 0
        # Today's readers also read the events' ends (migration 0013): a store of 0008 has none, so an empty
        # table of that shape stands in while they read it, and goes before the migrations run.
        # So do the prices of a paper's timeline and diff (its observation counts, migration 0012).
        conn = await asyncpg.connect(url)
        await conn.execute("CREATE TABLE work_event_ends (work_id uuid, source text, event_type text, "
                           "observed_at timestamptz, ended_at timestamptz)")
        await conn.execute("CREATE TABLE paper_observation_counts (arxiv_id text, inbound bigint, outbound bigint)")
        # And a source's yearly counts of a paper, which a record's history reads (migration 0018).
        await conn.execute("CREATE TABLE external_measurement_years (arxiv_id text, source text, "
                           "observed_at timestamptz, year integer, count integer)")
        # And when a reference's link holds from (migration 0023): NULL, from its first observation.
        await conn.execute("ALTER TABLE citation_observations ADD COLUMN linked_from timestamptz")
        # And the kept inbound totals (migration 0011), exact from no instant: every total is counted.
        await conn.execute("CREATE TABLE paper_inbound_totals (arxiv_id text, total bigint, counted_until timestamptz)")
        await conn.execute("INSERT INTO paper_inbound_totals VALUES ('', 0, 'infinity')")
        await conn.close()
        before = await disagreements(url, papers, at)
        assert before, "the readers disagree on a store without the rule"

        conn = await asyncpg.connect(url)
        try:
            await conn.execute("DROP TABLE work_event_ends; DROP TABLE paper_observation_counts; "
                               "DROP TABLE external_measurement_years; DROP TABLE paper_inbound_totals; "
                               "ALTER TABLE citation_observations DROP COLUMN linked_from")
            notes: list[str] = []
            applied = await migrate(conn, notes)
            assert applied[0] == "0009_standing_rule"
            assert any(f"added {unchecked} standing receipts" in n for n in notes), notes
            repair = await conn.fetchrow("SELECT rows, what FROM data_repairs WHERE version = '0009_standing_rule'")
            assert repair["rows"] == unchecked and "for events recorded without" in repair["what"]
            assert await conn.fetchval("SELECT count(*) FROM change_log WHERE kind = 'record_changed'") > 0
        finally:
            await conn.close()
        after = await disagreements(url, papers, at)
        assert after == [], after[:10]
    finally:
        await drop_database(admin_url, url)


async def test_hand_written_sql_cannot_break_the_rule(empty_database):
    conn = await asyncpg.connect(empty_database)
    try:
        work, at = uuid4(), datetime(2026, 5, 1, 12, 0, 0, 123456, tzinfo=timezone.utc)
        await conn.execute("INSERT INTO work_events (work_id, source, event_type, observed_at) "
                           "VALUES ($1, 'retraction_watch', 'retraction', $2)", work, at)
        assert await conn.fetchval("SELECT count(*) FROM standing_receipts WHERE work_id = $1 AND source = "
                                   "'retraction_watch' AND observed_at = $2", work, at) == 1
        # A second event at that instant (the same receipt), and an event whose receipt was already there.
        await conn.execute("INSERT INTO standing_receipts VALUES ($1, 'crossref', $2)", work, at)
        await conn.execute("INSERT INTO work_events (work_id, source, event_type, observed_at) VALUES "
                           "($1, 'retraction_watch', 'correction', $2), ($1, 'crossref', 'correction', $2)", work, at)
        assert await conn.fetchval("SELECT count(*) FROM standing_receipts WHERE work_id = $1", work) == 2
        with pytest.raises(asyncpg.ForeignKeyViolationError):
            await conn.execute("DELETE FROM standing_receipts WHERE work_id = $1 AND source = 'crossref'", work)
        # Moving an event moves it onto a receipt of its own.
        later = at.replace(hour=13)
        await conn.execute("UPDATE work_events SET observed_at = $2 WHERE work_id = $1 AND source = 'crossref'",
                           work, later)
        assert await conn.fetchval("SELECT count(*) FROM standing_receipts WHERE work_id = $1 AND observed_at = $2",
                                   work, later) == 1
    finally:
        await conn.close()
