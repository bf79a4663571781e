"""Live events a client cache can splice: a citationAdded event carries the edge as `inbound` lists it,
the cursor of the edge before it and the connection's new totalCount; a read says the change-log position
it was read at, and a subscription given it receives exactly what was committed after the read; a paper's
recordChanged fires when its own work's standing changes.

The imports are real `pith-graph load` runs in other processes, through a real server.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import datetime, timezone

import asyncpg
import httpx
import pytest
import pytest_asyncio

from app.ingest.load import load_file
from tests.conftest import AUG9, SEED, create_database, drop_database
from tests.test_live import (CITING, LATER, PAPER, Subscription, fifth_of_august, later_documents,  # noqa: F401
                             load_in_another_process, pith_graph)

pytestmark = pytest.mark.asyncio(loop_scope="session")

READ = """query($id: String!, $first: Int!) { changeCursor paper(arxivId: $id) {
  inbound(first: $first) { totalCount edges { cursor node { observationId } } pageInfo { hasNextPage } } } }"""
SPLICED = """subscription($id: String!, $after: String) { citationAdded(arxivId: $id, after: $after) {
  cursor previousCursor totalCount edge { cursor node { observationId } } observation { observationId } } }"""


def read(server, first: int = 100) -> dict:
    body = httpx.post(server.base + "/graphql", json={"query": READ, "variables": {"id": PAPER, "first": first}}).json()
    assert "errors" not in body, body
    return body["data"]


def splice(connection: dict, event: dict) -> None:
    """What the README's cache recipe (tests/clients/recipes/splice.mjs) does: insert after the loaded edge
    named by previousCursor (first when it is null); when no loaded edge has it, or it is the last loaded
    one and more pages follow, the edge lies past the loaded pages: only the total moves."""
    edges = connection["edges"]
    cursors = [e["cursor"] for e in edges]
    more = connection["pageInfo"]["hasNextPage"]
    if event["previousCursor"] is None:
        edges.insert(0, event["edge"])
    elif event["previousCursor"] in cursors[:-1] or (cursors and event["previousCursor"] == cursors[-1] and not more):
        edges.insert(cursors.index(event["previousCursor"]) + 1, event["edge"])
    connection["totalCount"] = event["totalCount"]


async def test_events_splice_into_loaded_pages_as_a_fresh_read_lists_them(fifth_of_august, later_documents):
    url, server = fifth_of_august
    before = read(server)
    partial = read(server, first=3)["paper"]["inbound"]
    # Imports made while nobody listens: a subscription after the read's position replays them exactly.
    await load_in_another_process(url, AUG9)
    sub = await Subscription(server.base, SPLICED, {"id": PAPER, "after": before["changeCursor"]}).start()
    await sub.wait_for(6)
    await asyncio.sleep(0.5)
    assert not sub.errors and len(sub.events) == 6, (sub.errors, sub.events)
    events = [e["citationAdded"] for _, e in sub.events]
    full = before["paper"]["inbound"]
    for event in events:
        assert event["edge"]["node"] == event["observation"]
        splice(full, event)
        splice(partial, event)
    after = read(server)
    assert [e["totalCount"] for e in events] == list(range(full["totalCount"] - 5, full["totalCount"] + 1))
    assert full == after["paper"]["inbound"], "the spliced pages are not the fresh read's"
    assert partial["pageInfo"]["hasNextPage"]
    # Loaded pages that stop early: they hold what the fresh read holds up to their last edge, no more.
    end = [e["cursor"] for e in after["paper"]["inbound"]["edges"]].index(partial["edges"][-1]["cursor"])
    assert partial["edges"] == after["paper"]["inbound"]["edges"][:end + 1]
    assert partial["totalCount"] == after["paper"]["inbound"]["totalCount"]

    # Nothing was committed after the new read: subscribed after it, only the next import arrives, live.
    live = await Subscription(server.base, SPLICED, {"id": PAPER, "after": after["changeCursor"]}).start()
    citation, _ = later_documents
    await load_in_another_process(url, citation)
    await live.wait_for(1)
    await sub.wait_for(7)
    await asyncio.sleep(0.5)
    assert len(live.events) == 1 and len(sub.events) == 7 and live.events[0][1] == sub.events[-1][1]
    splice(full, live.events[0][1]["citationAdded"])
    assert full == read(server)["paper"]["inbound"]
    await sub.close()
    await live.close()


async def test_the_change_cursor_is_the_reads_position(fifth_of_august):
    url, server = fifth_of_august
    one = read(server)["changeCursor"]
    assert read(server)["changeCursor"] == one  # nothing committed between
    await load_in_another_process(url, AUG9)
    two = read(server)["changeCursor"]
    assert two != one
    conn = await asyncpg.connect(url)
    try:
        newest = await conn.fetchval("SELECT max(position) FROM change_log")
    finally:
        await conn.close()
    from app.live import decode_cursor

    assert decode_cursor(two) == newest


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def own_work_retraction(admin_url, tmp_path_factory):
    """CITING's record as of 20 August with a retraction of the work PAPER is cited as (PAPER's own work),
    exported by the record builder from a scratch database."""
    folder = tmp_path_factory.mktemp("own")
    scratch = await create_database(admin_url, "pith_test_own_work")
    conn = await asyncpg.connect(scratch)
    try:
        await load_file(conn, str(AUG9))
        work = await conn.fetchval("SELECT work_id FROM citation_observations WHERE citing_arxiv_id = $1 AND "
                                   "cited_arxiv_id = $2", CITING, PAPER)
        assert work is not None
        at = datetime(2026, 8, 19, 12, tzinfo=timezone.utc)
        await conn.execute("INSERT INTO work_events VALUES ($1, 'retraction_watch', 'retraction', $2, $2, "
                           "'10.1000/retraction.own')", work, at)
        out = pith_graph("export", CITING, "--as-of", LATER, url=scratch)
        assert out.returncode == 0, out.stderr.decode()
        path = folder / "own-work-retraction.json"
        path.write_bytes(out.stdout)
    finally:
        await conn.close()
        await drop_database(admin_url, scratch)
    return path, work


async def test_record_changed_fires_when_the_papers_own_work_is_retracted(fifth_of_august, own_work_retraction):
    url, server = fifth_of_august
    await load_in_another_process(url, AUG9)
    record = httpx.get(server.base + f"/paper/{PAPER}/citation-record.json").json()
    changed = await Subscription(server.base, """subscription($id: String!) { recordChanged(arxivId: $id) {
      cursor arxivId contextDigest } }""", {"id": PAPER}).start()
    path, work = own_work_retraction
    await load_in_another_process(url, path)
    await changed.wait_for(1)
    await asyncio.sleep(0.5)
    assert not changed.errors and len(changed.events) == 1, (changed.errors, changed.events)
    served = httpx.get(server.base + f"/paper/{PAPER}/citation-record.json").json()
    assert served["context_digest"] != record["context_digest"]
    assert changed.events[0][1]["recordChanged"]["contextDigest"] == served["context_digest"]
    # The notice the record changed for: the inbound item from CITING shows the retraction.
    assert "10.1000/retraction.own" in json.dumps(served["inbound"])
    await changed.close()


async def test_the_cli_adds_a_sample_citation_that_subscribers_receive_spliceable(fifth_of_august):
    url, server = fifth_of_august
    before = read(server)
    sub = await Subscription(server.base, SPLICED, {"id": PAPER, "after": before["changeCursor"]}).start()
    made = [await asyncio.to_thread(pith_graph, "sample-citation", url=url) for _ in range(2)]
    # A citing paper named, sorting before the others: spliced in the middle, not appended.
    first_citer = before["paper"]["inbound"]["edges"][1]["cursor"]
    middle = await asyncio.to_thread(pith_graph, "sample-citation", PAPER, "--citing", "0001.00001", url=url)
    for done in (*made, middle):
        assert done.returncode == 0 and b"now cites 2402.15627" in done.stdout, done.stderr
    await sub.wait_for(3)
    assert not sub.errors and len(sub.events) == 3, (sub.errors, sub.events)
    inbound = before["paper"]["inbound"]
    for _, event in sub.events:
        splice(inbound, event["citationAdded"])
    assert inbound == read(server)["paper"]["inbound"]
    assert sub.events[2][1]["citationAdded"]["previousCursor"] is None != first_citer
    citers = {json.loads(__import__("base64").urlsafe_b64decode(e["cursor"] + "==="))[1] for e in inbound["edges"]}
    assert len({c for c in citers if c.endswith(tuple(f"9000{i}" for i in (1, 2)))}) == 2, citers
    await sub.close()
    # Made up, and said so wherever a source is shown.
    evidence = httpx.get(server.base + "/evidence", headers={"accept": "application/json"}, timeout=30).json()
    made_up = [s for s in evidence["sources"] if s["source"] == "synthetic_sample"]
    assert made_up and all(s["synthetic"] for s in made_up), evidence
    refused = await asyncio.to_thread(pith_graph, "sample-citation", "0704.00001", url=url)
    assert refused.returncode == 1 and b"no paper 0704.00001 is known" in refused.stderr
    bad = await asyncio.to_thread(pith_graph, "sample-citation", "nonsense", url=url)
    assert bad.returncode == 2 and b"not a valid arXiv id" in bad.stderr
