"""Ids name the instant an object was read at: two instants of a paper are two objects to a cache, and
node(id:) answers each as of its own instant."""

from __future__ import annotations

from datetime import datetime, timezone

import asyncpg
import pytest
import pytest_asyncio

from app.cursors import decode_token, encode_token
from tests.conftest import create_database, drop_database, serve
from tests.graphs import citers_at, time_travel

pytestmark = pytest.mark.asyncio(loop_scope="session")

ROOT = "5500.99999"
FEB = "2026-02-01T00:00:00Z"
MAY = "2026-05-01T00:00:00Z"


def instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def travel(admin_url, statements):
    url = await create_database(admin_url, "pith_test_instants")
    conn = await asyncpg.connect(url)
    try:
        await time_travel(ROOT).write(conn)
    finally:
        await conn.close()
    async for served in serve(url, statements):
        yield served
    await drop_database(admin_url, url)


PAPER = """query($id: String!, $asOf: DateTime) { paper(arxivId: $id, asOf: $asOf) { id
  inbound(first: 3) { totalCount nodes { id resolution { status } citingPaper { id } citedWork { id } } } } }"""


async def test_a_pinned_read_names_its_instant_and_an_unpinned_one_names_none(travel):
    feb = (await travel.graphql(PAPER, {"id": ROOT, "asOf": FEB}))["data"]["paper"]
    may = (await travel.graphql(PAPER, {"id": ROOT, "asOf": MAY}))["data"]["paper"]
    now = (await travel.graphql(PAPER, {"id": ROOT}))["data"]["paper"]
    assert decode_token(feb["id"]) == f"Paper:{ROOT}@{FEB}"
    assert decode_token(may["id"]) == f"Paper:{ROOT}@{MAY}"
    assert decode_token(now["id"]) == f"Paper:{ROOT}"
    assert feb["inbound"]["totalCount"] == citers_at(instant(FEB)) != may["inbound"]["totalCount"]
    # Everything read below the pinned field is pinned too; the same observation is two objects.
    for node in feb["inbound"]["nodes"]:
        for gid in (node["id"], node["citingPaper"]["id"], node["citedWork"]["id"]):
            assert decode_token(gid).endswith("@" + FEB)
    assert feb["inbound"]["nodes"][0]["id"] != may["inbound"]["nodes"][0]["id"]
    assert feb["inbound"]["nodes"][0]["resolution"]["status"] == "UNRESOLVED"
    assert may["inbound"]["nodes"][0]["resolution"]["status"] == "VERIFIED_EXACT"
    assert all("@" not in decode_token(n["id"]) for n in now["inbound"]["nodes"])


NODE = """query($id: ID!) { node(id: $id) { id ... on Paper { inbound(first: 3) { totalCount nodes { id
  resolution { status } } } } ... on CitationObservation { resolution { status } citingPaper { id } } } }"""


async def test_node_answers_an_id_as_of_the_instant_it_names(travel):
    for at in (FEB, MAY):
        read = (await travel.graphql(PAPER, {"id": ROOT, "asOf": at}))["data"]["paper"]
        again = (await travel.graphql(NODE, {"id": read["id"]}))["data"]["node"]
        assert again["id"] == read["id"]
        assert again["inbound"]["totalCount"] == read["inbound"]["totalCount"] == citers_at(instant(at))
        assert [n["id"] for n in again["inbound"]["nodes"]] == [n["id"] for n in read["inbound"]["nodes"]]
        edge = read["inbound"]["nodes"][0]
        node = (await travel.graphql(NODE, {"id": edge["id"]}))["data"]["node"]
        assert node["resolution"] == edge["resolution"] and node["citingPaper"]["id"] == edge["citingPaper"]["id"]
        # observation(id:) takes the instant of a global id too
        got = (await travel.graphql("query($id: ID!) { observation(id: $id) { id resolution { status } } }",
                                    {"id": edge["id"]}))["data"]["observation"]
        assert got == {"id": edge["id"], "resolution": edge["resolution"]}


async def test_nodes_answer_each_id_at_its_own_instant(travel):
    feb = (await travel.graphql(PAPER, {"id": ROOT, "asOf": FEB}))["data"]["paper"]["id"]
    may = (await travel.graphql(PAPER, {"id": ROOT, "asOf": MAY}))["data"]["paper"]["id"]
    body = await travel.graphql("query($ids: [ID!]!) { nodes(ids: $ids) { id ... on Paper { inbound { totalCount } } } }",
                                {"ids": [may, feb]})
    assert [(n["id"], n["inbound"]["totalCount"]) for n in body["data"]["nodes"]] == [
        (may, citers_at(instant(MAY))), (feb, citers_at(instant(FEB)))]


async def test_nodes_at_a_hundred_instants_cost_one_statement_a_kind(admin_url, statements):
    from datetime import timedelta

    from tests.graphs import BASE, Graph

    # A paper cited by ten papers over ten weeks, each reference to a work of its own (described, checked
    # and, for every other one, retracted a week after it was cited).
    g, keys = Graph(), ["Paper:5700.00000"]
    g.paper("5700.00000", "Cited at many instants")
    for i in range(10):
        at = BASE + timedelta(days=7 * i)
        work = g.work("5700.00000", f"Instants work {i}", at=at)
        g.receipts.append((work, "retraction_watch", at + timedelta(days=7)))
        if i % 2 == 0:
            g.events.append((work, "retraction_watch", "retraction", at + timedelta(days=7), at, None))
        oid = g.cite(g.paper(f"5700.{i + 1:05d}", at=at), "5700.00000", 1, work=work, at=at)
        keys += [f"CitationObservation:{oid}", f"Work:{work}", f"Paper:5700.{i + 1:05d}"]
    url = await create_database(admin_url, "pith_test_instants")
    conn = await asyncpg.connect(url)
    try:
        await g.write(conn)
    finally:
        await conn.close()
    # 100 ids of every kind, each naming an instant of its own (a day apart, over the ten weeks and after).
    ids = [encode_token(f"{keys[i % len(keys)]}@{(BASE + timedelta(days=i)).strftime('%Y-%m-%dT%H:%M:%SZ')}")
           for i in range(100)]
    query = """query($ids: [ID!]!) { nodes(ids: $ids) { id ... on Paper { title }
      ... on CitationObservation { referenceIndex resolution { status } standingNotice { state } }
      ... on Work { workTitle: title doi standing { events { eventType } } } } }"""
    one = query.replace("query($ids: [ID!]!) { nodes(ids: $ids)", "query($id: ID!) { node(id: $id)")
    try:
        async for served in serve(url, statements):
            statements.clear()
            body = await served.graphql(query, {"ids": ids})
            assert "errors" not in body, body
            # Papers, observations, works and the works' standing: one statement each, for 100 instants.
            assert len(statements.counted) <= 4, statements.counted
            nodes = body["data"]["nodes"]
            assert sum(n is not None for n in nodes) > 60 and any(n and n.get("standing") for n in nodes)
            # Each answered as of its own instant, as node(id:) answers it alone.
            for i in range(0, 100, 3):
                alone = await served.graphql(one, {"id": ids[i]})
                assert alone["data"]["node"] == nodes[i], ids[i]
    finally:
        await drop_database(admin_url, url)


async def test_an_id_without_an_instant_still_means_now(travel):
    # The form every id had before instants were encoded: accepted, and answered as of now.
    old = encode_token(f"Paper:{ROOT}")
    body = await travel.graphql(NODE, {"id": old})
    assert body["data"]["node"]["id"] == old
    assert body["data"]["node"]["inbound"]["totalCount"] == 60


@pytest.mark.parametrize("text", [f"Paper:{ROOT}@yesterday", f"Paper:{ROOT}@2026-02-01T00:00:00+00:00",
                                  f"Paper:{ROOT}@2026-02-01", f"Paper:{ROOT}@"])
async def test_an_instant_spelled_any_other_way_is_not_an_id(travel, text):
    body = await travel.graphql("query($id: ID!) { node(id: $id) { id } }", {"id": encode_token(text)})
    assert body["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT", body
    assert "global id" in body["errors"][0]["message"]


async def test_node_takes_only_ids(travel):
    body = await travel.graphql('{ node(id: "x", asOf: "2026-02-01T00:00:00Z") { id } }')
    assert body["errors"][0]["extensions"]["code"] == "GRAPHQL_VALIDATION_FAILED", body


async def test_the_compiled_statement_writes_the_same_ids(travel):
    compiled = """query($id: String!, $asOf: DateTime) { paper(arxivId: $id, asOf: $asOf) { id
      inbound(first: 4) { edges { node { id citingPaper { id } citedPaper { id } } } } } }"""
    ordinary = compiled.replace("{ id\n", "{ id @include(if: true)\n", 1)  # a directive: not compiled
    for at in (FEB, None):
        travel.statements.clear()
        one = await travel.graphql(compiled, {"id": ROOT, "asOf": at})
        assert len(travel.statements.counted) == 1
        two = await travel.graphql(ordinary, {"id": ROOT, "asOf": at})
        assert len(travel.statements.counted) > 1
        assert one["data"] == two["data"] and "errors" not in one
        assert ("@" in decode_token(one["data"]["paper"]["id"])) is (at is not None)


async def test_a_get_of_nodes_that_name_instants_is_kept_as_pinned_and_one_that_names_none_as_now(travel):
    import json

    feb = (await travel.graphql(PAPER, {"id": ROOT, "asOf": FEB}))["data"]["paper"]["id"]
    now = (await travel.graphql(PAPER, {"id": ROOT}))["data"]["paper"]["id"]
    query = "query($ids: [ID!]!) { nodes(ids: $ids) { id } }"
    for ids, rule in (([feb], "public, max-age=300"), ([feb, now], "public, max-age=60")):
        response = await travel.client.get("/graphql", params={"query": query, "variables": json.dumps({"ids": ids})})
        assert response.status_code == 200 and response.json()["data"]["nodes"][0]["id"] == feb
        assert response.headers["cache-control"] == rule, response.headers
    literal = await travel.client.get("/graphql", params={"query": '{ node(id: "%s") { id } }' % feb})
    assert literal.headers["cache-control"] == "public, max-age=300"


FUTURE = "2099-01-01T00:00:00Z"


async def test_an_instant_after_the_servers_clock_is_answered_as_of_now_and_never_cached_as_fixed(travel):
    import json

    now = await travel.graphql(PAPER, {"id": ROOT})
    future = await travel.graphql(PAPER, {"id": ROOT, "asOf": FUTURE})
    assert future == now and decode_token(future["data"]["paper"]["id"]) == f"Paper:{ROOT}", future
    # The compiled statement (one statement, no directive) answers the same.
    compiled = """query($id: String!, $asOf: DateTime) { paper(arxivId: $id, asOf: $asOf) { id
      inbound(first: 4) { edges { node { id citingPaper { id } } } } } }"""
    travel.statements.clear()
    fast = await travel.graphql(compiled, {"id": ROOT, "asOf": FUTURE})
    assert len(travel.statements.counted) == 1
    assert all("@" not in decode_token(e["node"]["id"]) for e in fast["data"]["paper"]["inbound"]["edges"])
    assert "@" not in decode_token(fast["data"]["paper"]["id"])
    for params in ({"query": compiled, "variables": json.dumps({"id": ROOT, "asOf": FUTURE})},
                   {"query": '{ paper(arxivId: "%s", asOf: "%s") { id } }' % (ROOT, FUTURE)},
                   {"query": '{ citationRecord(arxivId: "%s", asOf: "%s") { asOf } }' % (ROOT, FUTURE)}):
        response = await travel.client.get("/graphql", params=params)
        assert response.status_code == 200 and "errors" not in response.json(), response.text
        assert response.headers["cache-control"] == "public, max-age=60", (params, response.headers)
    past = await travel.client.get("/graphql", params={"query": '{ paper(arxivId: "%s", asOf: "%s") { id } }'
                                                                 % (ROOT, FEB)})
    assert past.headers["cache-control"] == "public, max-age=300"
    # Pinned by a variable's default, and a diff by its later instant: the same rule.
    for query, variables, rule in (
            ('query($at: DateTime = "%s") { paper(arxivId: "%s", asOf: $at) { id } }' % (FEB, ROOT), {}, 300),
            ('query($at: DateTime = "%s") { paper(arxivId: "%s", asOf: $at) { id } }' % (FEB, ROOT),
             {"at": FUTURE}, 60),
            ('{ recordDiff(arxivId: "%s", from: "%s", to: "%s") { toContextDigest } }' % (ROOT, FEB, FEB), {}, 300),
            ('{ recordDiff(arxivId: "%s", from: "%s", to: "%s") { toContextDigest } }' % (ROOT, FEB, FUTURE), {}, 60)):
        response = await travel.client.get("/graphql", params={"query": query, "variables": json.dumps(variables)})
        assert response.status_code == 200 and "errors" not in response.json(), response.text
        assert response.headers["cache-control"] == f"public, max-age={rule}", (query, variables, response.headers)
    # An id naming the future (made by hand: the server writes none) is read as of now, and says so.
    crafted = encode_token(f"Paper:{ROOT}@{FUTURE}")
    node = await travel.client.get("/graphql", params={"query": '{ node(id: "%s") { id } }' % crafted})
    assert node.json()["data"]["node"]["id"] == encode_token(f"Paper:{ROOT}")
    assert node.headers["cache-control"] == "public, max-age=60"
    # The record over REST: the same rule (app.http.cache_control), pinned and as of now.
    # Read as of the server's now: between two readings of the clock (whole seconds, so it may straddle one).
    before = datetime.now(timezone.utc).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")
    record = await travel.client.get(f"/paper/{ROOT}/citation-record.json", params={"as_of": FUTURE})
    after = datetime.now(timezone.utc).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert record.status_code == 200 and record.headers["cache-control"] == "public, max-age=60"
    assert before <= record.json()["as_of"] <= after, (before, record.json()["as_of"], after)
    pinned = await travel.client.get(f"/paper/{ROOT}/citation-record.json", params={"as_of": FEB})
    assert pinned.headers["cache-control"] == "public, max-age=300"
    # Revalidated: the 304 varies as its 200 does (a cache keys them alike), for a client that reads gzip and
    # for one that does not (Starlette's GZip adds Accept-Encoding to the Vary of any big answer, for both).
    def tokens(response):
        listed = [token.strip().lower() for token in response.headers["vary"].split(",")]
        assert len(listed) == len(set(listed)), response.headers  # each once (the app's Vary and GZip's)
        return set(listed)

    for encoding in ("gzip, deflate", "identity"):
        first = await travel.client.get(f"/paper/{ROOT}/citation-record.json", params={"as_of": FEB},
                                        headers={"accept-encoding": encoding})
        again = await travel.client.get(f"/paper/{ROOT}/citation-record.json", params={"as_of": FEB},
                                        headers={"if-none-match": first.headers["etag"], "accept-encoding": encoding})
        assert len(first.content) >= 1000 and again.status_code == 304, (encoding, again.headers)
        assert tokens(again) == tokens(first) == {"accept", "accept-encoding"}, (encoding, again.headers, first.headers)


async def test_a_date_means_its_midnight_utc_everywhere(travel):
    midnight = await travel.graphql(PAPER, {"id": ROOT, "asOf": FEB})
    date = await travel.graphql(PAPER, {"id": ROOT, "asOf": FEB[:10]})
    assert date == midnight and "errors" not in date
    literal = await travel.graphql('{ paper(arxivId: "%s", asOf: "%s") { id } }' % (ROOT, FEB[:10]))
    assert literal["data"]["paper"]["id"] == midnight["data"]["paper"]["id"]
    record = await travel.client.get(f"/paper/{ROOT}/citation-record.json", params={"as_of": FEB[:10]})
    assert record.status_code == 200 and record.json()["as_of"] == FEB
    for bad in ("2026-02-30", "2026-02-01T10:00"):  # no such day; a datetime-local value (no zone)
        body = await travel.graphql(PAPER, {"id": ROOT, "asOf": bad})
        message = body["errors"][0]["message"]
        assert body["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT" and "2026-08-05T04:52:00Z" in message
        rest = await travel.client.get(f"/paper/{ROOT}/citation-record.json", params={"as_of": bad})
        assert rest.status_code == 400 and "2026-08-05T04:52:00Z" in rest.text
    zoneless = (await travel.graphql(PAPER, {"id": ROOT, "asOf": "2026-02-01T10:00:00"}))["errors"][0]["message"]
    assert "toISOString" in zoneless


async def test_the_cli_reads_a_date_and_the_future_as_the_api_does(database_url):
    import json
    import os
    import subprocess
    import sys

    def export(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "app.cli", "export", "2402.15627", *args], capture_output=True,
                              text=True, timeout=120, env={**os.environ, "DATABASE_URL": database_url})

    date = export("--as-of", "2026-08-09")
    assert date.returncode == 0, date.stderr
    assert json.loads(date.stdout)["as_of"] == "2026-08-09T00:00:00Z"
    future, now = export("--as-of", FUTURE), export()
    assert future.returncode == 0 and json.loads(future.stdout)["as_of"] != FUTURE
    assert json.loads(future.stdout)["context_digest"] == json.loads(now.stdout)["context_digest"]
    bad = export("--as-of", "2026-08-09T10:00")
    assert bad.returncode == 2 and "no time zone" in bad.stderr


@pytest.mark.parametrize("shape", [
    "... on Paper { title doi externalCitationMeasurements { source count } }",
    "... on Paper { inbound(first: 10) { totalCount edges { node { citingPaper { title } } } } }",
    "... on Paper { outbound(first: 10) { totalCount nodes { citedWork { title standing { state } } } } }",
    "...P } } fragment P on Paper { inbound(first: 5) { nodes { citingPaper { doi inbound(first: 5) { totalCount } } }"])
async def test_nodes_at_many_instants_are_priced_at_least_the_work_they_do(travel, shape):
    """Below nodes(ids:), a page, a count, a DOI or a count of measurements loads once per instant the ids name
    (only the lookups of the nodes themselves and their standing batch across instants): the price counts them
    so, and is never below the work the answer did."""
    from datetime import datetime, timedelta, timezone

    base = datetime(2026, 1, 1, tzinfo=timezone.utc)
    ids = [encode_token(f"Paper:{ROOT}@{(base + timedelta(days=i)).strftime('%Y-%m-%dT%H:%M:%SZ')}")
           for i in range(99)]
    body = await travel.graphql("query($ids: [ID!]!) { nodes(ids: $ids) { id %s } }" % shape, {"ids": ids})
    assert "errors" not in body, body
    cost = body["extensions"]["cost"]
    assert cost["statements"] > 99 and cost["requested"] >= cost["actual"], cost
