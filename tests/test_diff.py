"""recordDiff on a synthetic graph: the patch rebuilds the later record byte for byte; the changes are its facts."""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone

import asyncpg
import jsonpatch
import pytest
import pytest_asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app import record
from tests.conftest import StatementLog, drop_database, most_cited, serve, synthetic_database

pytestmark = pytest.mark.asyncio(loop_scope="session")

EXAMPLES = int(os.environ.get("PITH_DIFF_EXAMPLES", "20"))
# A timeline longer than this has a drawn sample of its entries checked (its first and last always among
# them); bench/reliability.sh checks every entry (PITH_DIFF_ENTRIES=100000).
CHECKED_ENTRIES = int(os.environ.get("PITH_DIFF_ENTRIES", "40"))
DIFF = """query($id: String!, $from: DateTime!, $to: DateTime!) {
  recordDiff(arxivId: $id, from: $from, to: $to) { from to fromContextDigest toContextDigest patch
    changes { kind observedAt observation { observationId } previous current event { eventType }
              measurement { source count } } }
  a: citationRecord(arxivId: $id, asOf: $from) { canonicalJson contextDigest }
  b: citationRecord(arxivId: $id, asOf: $to) { canonicalJson contextDigest } }"""


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def synthetic(admin_url):
    url = await synthetic_database(admin_url, "pith_test_diff", 300, 11)
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


@pytest.fixture
def seen():
    """What the examples drew, checked once they have all run: most pairs compared two real records with
    changes between them."""
    seen = {"no record at to": 0, "diffs": 0, "with changes": 0, "from a record": 0, "patch operations": 0}
    yield seen
    assert seen["diffs"] >= EXAMPLES // 4 and seen["from a record"] >= EXAMPLES // 8, seen
    assert seen["with changes"] >= EXAMPLES // 8 and seen["patch operations"] > 0, seen


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(data=st.data())
async def test_the_patch_rebuilds_the_later_record_and_the_changes_are_its_facts(synthetic, seen, data):
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
        seen["no record at to"] += 1
        return
    diff = data_["recordDiff"]
    seen["diffs"] += 1
    seen["with changes"] += bool(diff["changes"])
    seen["from a record"] += data_["a"] is not None
    seen["patch operations"] += len(diff["patch"])
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


# --- Paper.timeline -------------------------------------------------------------------------------

TIMELINE = """query($id: String!, $first: Int!, $after: String, $from: DateTime, $to: DateTime) {
  paper(arxivId: $id, asOf: "2100-01-01T00:00:00Z") {
    timeline(from: $from, to: $to, first: $first, after: $after) {
      edges { cursor node { at contextDigest kinds } } pageInfo { hasNextPage endCursor } } } }"""
VOLATILE = ("as_of", "thesis", "context_digest")


async def whole_timeline(served, paper: str, first: int = 100, **window) -> list[dict]:
    entries, after = [], None
    while True:
        body = await served.graphql(TIMELINE, {"id": paper, "first": first, "after": after, **window})
        assert "errors" not in body, body["errors"]
        page = body["data"]["paper"]["timeline"]
        entries += [e["node"] for e in page["edges"]]
        if not page["pageInfo"]["hasNextPage"]:
            return entries
        after = page["pageInfo"]["endCursor"]


async def records_at(served, paper: str, instants: list[str]) -> list[dict | None]:
    """The v1 records at the instants, through citationRecord (20 aliases per request)."""
    found: list[dict | None] = []
    for i in range(0, len(instants), 20):
        chunk = instants[i:i + 20]
        fields = " ".join(f'r{n}: citationRecord(arxivId: $id, asOf: "{t}") {{ canonicalJson }}'
                          for n, t in enumerate(chunk))
        body = await served.graphql(f"query($id: String!) {{ {fields} }}", {"id": paper})
        assert "errors" not in body, body["errors"]
        found += [json.loads(r["canonicalJson"]) if r else None for r in
                  (body["data"][f"r{n}"] for n in range(len(chunk)))]
    return found


def steady(document: dict | None) -> dict | None:
    return None if document is None else {k: v for k, v in document.items() if k not in VOLATILE}


def parse_whole(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@pytest.fixture
def timelines_seen():
    """What the timeline examples drew, checked once they have all run: not trivial."""
    seen = {"papers": 0, "entries": 0, "capped papers": 0, "between": 0}
    yield seen
    assert seen["entries"] >= 5 * seen["papers"] > 0, seen
    assert seen["between"] >= seen["papers"], seen
    assert seen["capped papers"] >= 1, seen  # a paper beyond the inbound cap was drawn


@settings(max_examples=max(EXAMPLES // 2, 6), deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(data=st.data())
async def test_each_timeline_entry_is_a_change_and_nothing_changes_between_entries(synthetic, timelines_seen,
                                                                                    data):
    served, url, papers, low, high, _ = synthetic
    paper = data.draw(st.sampled_from([await most_cited(url), *papers]))
    entries = await whole_timeline(served, paper, first=data.draw(st.sampled_from([10, 100])))
    timelines_seen["papers"] += 1
    timelines_seen["entries"] += len(entries)
    ats = [e["at"] for e in entries]
    assert ats == sorted(set(ats)), "entries are distinct instants, oldest first"
    # Every entry of a short line; of a long one (the hub's has over a thousand), a drawn sample.
    checked = list(range(len(ats)))
    if len(checked) > CHECKED_ENTRIES:
        drawn = data.draw(st.lists(st.sampled_from(checked[1:-1]), min_size=CHECKED_ENTRIES - 2,
                                   max_size=CHECKED_ENTRIES - 2, unique=True))
        checked = sorted({0, len(ats) - 1, *drawn})
    before = [whole(parse_whole(ats[k]) - timedelta(seconds=1)) for k in checked]
    records = await records_at(served, paper, [ats[k] for k in checked] + before)
    at_entry, before_entry = records[:len(checked)], records[len(checked):]
    for k, now, then in zip(checked, at_entry, before_entry):
        entry = entries[k]
        assert now is not None and now["context_digest"] == entry["contextDigest"], entry
        assert steady(now) != steady(then), f"the record at {entry['at']} is the one a second earlier"
        assert entry["kinds"], entry
    if any(len(r["inbound"]) < r["coverage"][2]["denominator"] for r in at_entry if r):
        timelines_seen["capped papers"] += 1
    # Random instants between a checked entry and the next (or after the last) show the checked entry's record.
    probes, expected = [], []
    ends = ats[1:] + [whole(high)]
    bounds = [(ats[k], ends[k], at_entry[n]) for n, k in enumerate(checked)]
    for start, end, record_then in data.draw(st.lists(st.sampled_from(bounds), max_size=12)) if bounds else []:
        a, b = parse_whole(start), parse_whole(end)
        if (b - a).total_seconds() < 2:
            continue
        offset = data.draw(st.integers(1, int((b - a).total_seconds()) - 1))
        probes.append(whole(a + timedelta(seconds=offset)))
        expected.append(steady(record_then))
    # Before the first entry there is no record.
    if ats:
        probes.append(whole(parse_whole(ats[0]) - timedelta(days=3)))
        expected.append(None)
    for probe, want, got in zip(probes, expected, await records_at(served, paper, probes)):
        assert steady(got) == want, f"the record changed at {probe}, between timeline entries"
        timelines_seen["between"] += 1


async def test_a_timeline_window_is_the_slice_of_the_whole(synthetic):
    served, _, papers, low, high, _ = synthetic
    whole_line = await whole_timeline(served, papers[0])
    assert len(whole_line) >= 4
    # A window of up to 30 entries inside the line (it has over a thousand), paged two at a time.
    i, j = 1, min(len(whole_line) - 2, 30)
    start, end = whole_line[i]["at"], whole_line[j]["at"]
    window = await whole_timeline(served, papers[0], first=2, **{"from": start, "to": end})
    assert window == whole_line[i:j + 1]
    # `from` a second after an entry starts at the next; `to` a second before one ends at the one before;
    # fractions of a second are truncated, as everywhere in the API.
    nudged = await whole_timeline(served, papers[0], **{
        "from": whole(parse_whole(start) + timedelta(seconds=1)),
        "to": whole(parse_whole(end) - timedelta(seconds=1)).replace("Z", ".999Z")})
    assert nudged == whole_line[i + 1:j]


async def test_a_timeline_page_costs_the_same_statements_at_any_size(synthetic):
    served, url, _, _, _, _ = synthetic
    busiest = await most_cited(url)
    counts, sizes = [], []
    for first in (1, 100):
        body = await served.graphql(TIMELINE, {"id": busiest, "first": first})
        assert "errors" not in body, body["errors"]
        sizes.append(len(body["data"]["paper"]["timeline"]["edges"]))
        counts.append(body["extensions"]["cost"]["statements"])
    assert sizes[0] == 1 and sizes[1] >= 50, sizes
    # The paper's size (its price), the paper, the entries (2), the records at every entry's instant (6, 5
    # when no work is shown).
    assert max(counts) <= 1 + 1 + 2 + 6, counts


@pytest.mark.parametrize("variables, message", [
    ({"from": "2026-03-01T00:00:00Z", "to": "2026-02-01T00:00:00Z"}, "before from"),
    ({"first": 0}, "first: 0 is out of range"),
    ({"first": 101}, "allowed 1 to 100"),
    ({"after": "bm90IGEgY3Vyc29y"}, "not a cursor of a timeline"),
])
async def test_bad_timeline_arguments_are_bad_user_input(synthetic, variables, message):
    served, _, papers, _, _, _ = synthetic
    body = await served.graphql(TIMELINE, {"id": papers[0], "first": 10, **variables})
    error = body["errors"][0]
    assert error["extensions"]["code"] == "BAD_USER_INPUT" and message in error["message"], error


async def test_a_resolution_change_gives_both_sides_in_one_shape(synthetic):
    """Before its first resolution a reference is unresolved: the first change's previous side says so in the shape
    of the current side (status and resolverSource), as every later change's does."""
    served, _, papers, low, high, _ = synthetic
    query = """query($id: String!, $from: DateTime!, $to: DateTime!) { recordDiff(arxivId: $id, from: $from,
      to: $to, kinds: [RESOLUTION_CHANGED]) { changes { kind previous current } } }"""
    seen = 0
    for paper in papers[:20]:
        body = await served.graphql(query, {"id": paper, "from": whole(low), "to": whole(high)})
        assert "errors" not in body, body
        for change in (body["data"]["recordDiff"] or {"changes": []})["changes"]:
            assert set(change["previous"]) == set(change["current"]) == {"status", "resolverSource"}, change
            seen += 1
    assert seen > 0
