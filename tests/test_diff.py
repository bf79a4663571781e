"""recordDiff on a synthetic graph: the patch rebuilds the later record byte for byte; the changes are its facts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import asyncpg
import jsonpatch
import pytest
import pytest_asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app import record
from tests.conftest import StatementLog, create_database, drop_database, serve

pytestmark = pytest.mark.asyncio(loop_scope="session")

EXAMPLES = int(os.environ.get("PITH_DIFF_EXAMPLES", "20"))
DIFF = """query($id: String!, $from: DateTime!, $to: DateTime!) {
  recordDiff(arxivId: $id, from: $from, to: $to) { from to fromContextDigest toContextDigest patch
    changes { kind observedAt observation { observationId } previous current event { eventType }
              measurement { source count } } }
  a: citationRecord(arxivId: $id, asOf: $from) { canonicalJson contextDigest }
  b: citationRecord(arxivId: $id, asOf: $to) { canonicalJson contextDigest } }"""


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def synthetic(admin_url):
    url = await create_database(admin_url, "pith_test_diff")
    done = subprocess.run([sys.executable, "-m", "app.cli", "synth", "--papers", "300", "--seed", "11"],
                          env={**os.environ, "DATABASE_URL": url}, capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    conn = await asyncpg.connect(url)
    try:
        papers = [r["arxiv_id"] for r in await conn.fetch("SELECT DISTINCT arxiv_id FROM paper_snapshots ORDER BY 1")]
        low, high = await conn.fetchrow("SELECT min(observed_at), max(observed_at) FROM paper_snapshots")
        # Instants where facts take effect: pairs drawn around them compare records that really differ.
        times = [r[0] for r in await conn.fetch(
            "SELECT observed_at FROM paper_snapshots UNION SELECT visible_from FROM citation_observations "
            "WHERE visible_from IS NOT NULL UNION SELECT observed_at FROM resolutions UNION "
            "SELECT observed_at FROM work_events UNION SELECT observed_at FROM external_measurements ORDER BY 1")]
    finally:
        await conn.close()
    statements = StatementLog()
    async for served in serve(url, statements):
        yield served, url, papers, low - timedelta(days=10), high + timedelta(days=10), times
    await drop_database(admin_url, url)


def whole(t: datetime) -> str:
    return t.astimezone(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


async def expected_changes(url: str, paper: str, after: datetime, until: datetime) -> dict[str, set]:
    """The facts behind a diff, found independently of the loader (one plain query per kind)."""
    conn = await asyncpg.connect(url)
    try:
        visible = ("SELECT observation_id, work_id, citing_arxiv_id, cited_arxiv_id FROM citation_observations "
                   "WHERE (citing_arxiv_id = $1 OR cited_arxiv_id = $1) AND visible_from <= $2")
        shown = await conn.fetch(visible, paper, until)
        ids = [r["observation_id"] for r in shown]
        works = list({r["work_id"] for r in shown if r["work_id"] is not None})
        citing = list({r["citing_arxiv_id"] for r in shown if r["cited_arxiv_id"] == paper})
        cited = list({r["cited_arxiv_id"] for r in shown if r["citing_arxiv_id"] == paper and r["cited_arxiv_id"]})
        span = "observed_at > $2 AND observed_at <= $3"

        async def count(sql: str, *args) -> int:
            return await conn.fetchval(sql, *args)

        return {
            "PAPER_UPDATED": await count(f"SELECT count(*) FROM paper_snapshots WHERE arxiv_id = $1 AND {span}", paper,
                                         after, until),
            "CITATION_ADDED": {str(r[0]) for r in await conn.fetch(
                "SELECT observation_id FROM citation_observations WHERE cited_arxiv_id = $1 AND visible_from > $2 "
                "AND visible_from <= $3", paper, after, until)},
            "REFERENCE_ADDED": {str(r[0]) for r in await conn.fetch(
                "SELECT observation_id FROM citation_observations WHERE citing_arxiv_id = $1 AND visible_from > $2 "
                "AND visible_from <= $3", paper, after, until)},
            "RESOLUTION_CHANGED": await count(f"SELECT count(*) FROM resolutions WHERE observation_id = ANY($1) AND {span}",
                                              ids, after, until),
            "WORK_UPDATED": await count(f"SELECT count(*) FROM work_snapshots WHERE work_id = ANY($1) AND {span}",
                                        works, after, until),
            "STANDING_EVENT": await count(f"SELECT count(*) FROM work_events WHERE work_id = ANY($1) AND {span}",
                                          works, after, until),
            "STANDING_CHECKED": await count(f"SELECT count(*) FROM standing_receipts WHERE work_id = ANY($1) AND {span}",
                                            works, after, until),
            "MEASUREMENT_CHANGED": await count(
                f"SELECT count(*) FROM external_measurements WHERE arxiv_id = $1 AND {span}", paper, after, until),
            "CITING_PAPER_UPDATED": await count(
                f"SELECT count(*) FROM paper_snapshots WHERE arxiv_id = ANY($1) AND {span}", citing, after, until),
            "CITED_PAPER_UPDATED": await count(
                f"SELECT count(*) FROM paper_snapshots WHERE arxiv_id = ANY($1) AND {span}", cited, after, until),
        }
    finally:
        await conn.close()


SEEN: dict[str, int] = {"no record at to": 0, "diffs": 0, "with changes": 0, "from a record": 0,
                        "patch operations": 0}


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(data=st.data())
async def test_the_patch_rebuilds_the_later_record_and_the_changes_are_its_facts(synthetic, data):
    served, url, papers, low, high, times = synthetic
    near = st.builds(lambda t, shift: t + timedelta(seconds=shift), st.sampled_from(times),
                     st.integers(-14 * 86400, 14 * 86400))
    first, second = sorted(data.draw(st.lists(near, min_size=2, max_size=2)))
    paper = data.draw(st.sampled_from(papers))
    at_from, at_to = whole(first), whole(second)
    body = await served.graphql(DIFF, {"id": paper, "from": at_from, "to": at_to})
    assert "errors" not in body, body["errors"]
    data_ = body["data"]
    if data_["b"] is None:
        assert data_["recordDiff"] is None
        SEEN["no record at to"] += 1
        return
    diff = data_["recordDiff"]
    SEEN["diffs"] += 1
    SEEN["with changes"] += bool(diff["changes"])
    SEEN["from a record"] += data_["a"] is not None
    SEEN["patch operations"] += len(diff["patch"])
    assert diff["toContextDigest"] == data_["b"]["contextDigest"]
    assert diff["fromContextDigest"] == (data_["a"]["contextDigest"] if data_["a"] else None)
    start = json.loads(data_["a"]["canonicalJson"]) if data_["a"] else {}
    rebuilt = jsonpatch.apply_patch(start, diff["patch"])
    assert record.canonical_bytes(rebuilt).decode() == data_["b"]["canonicalJson"]
    after = datetime.fromisoformat(at_from.replace("Z", "+00:00"))
    until = datetime.fromisoformat(at_to.replace("Z", "+00:00"))
    for change in diff["changes"]:
        observed = datetime.fromisoformat(change["observedAt"].replace("Z", "+00:00"))
        assert after < observed <= until + timedelta(seconds=1), change  # facts keep sub-second precision
    assert [c["observedAt"] for c in diff["changes"]] == sorted(c["observedAt"] for c in diff["changes"])
    expected = await expected_changes(url, paper, after, until)
    kinds: dict[str, list] = {}
    for change in diff["changes"]:
        kinds.setdefault(change["kind"], []).append(change)
    for kind in ("CITATION_ADDED", "REFERENCE_ADDED"):
        assert {c["observation"]["observationId"] for c in kinds.get(kind, [])} == expected[kind], kind
    for kind, number in expected.items():
        if isinstance(number, int):
            assert len(kinds.get(kind, [])) == number, (kind, len(kinds.get(kind, [])), number)


async def test_the_examples_were_not_trivial():
    """Most drawn pairs must have compared two real records with changes between them."""
    assert SEEN["diffs"] >= EXAMPLES // 4 and SEEN["from a record"] >= EXAMPLES // 8, SEEN
    assert SEEN["with changes"] >= EXAMPLES // 8 and SEEN["patch operations"] > 0, SEEN


async def test_a_diff_costs_at_most_two_records_and_one_statement(synthetic):
    served, _, papers, low, high, _ = synthetic
    served.statements.clear()
    only_diff = """query($id: String!, $from: DateTime!, $to: DateTime!) { recordDiff(arxivId: $id, from: $from,
      to: $to) { toContextDigest patch changes { kind observation { observationId citingPaper { title } } } } }"""
    body = await served.graphql(only_diff, {"id": papers[0], "from": whole(low), "to": whole(high)})
    assert "errors" not in body, body
    assert body["extensions"]["cost"]["statements"] <= 2 * 6 + 1


async def test_to_before_from_is_bad_user_input(synthetic):
    served, _, papers, low, high, _ = synthetic
    body = await served.graphql(DIFF, {"id": papers[0], "from": whole(high), "to": whole(low)})
    error = body["errors"][0]
    assert error["extensions"]["code"] == "BAD_USER_INPUT" and "before" in error["message"]
