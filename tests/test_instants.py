"""Ids name the instant an object was read at: two instants of a paper are two objects to a cache, and
node(id:) answers each as of its own instant."""

from __future__ import annotations

from datetime import datetime

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


async def test_a_get_of_nodes_that_name_instants_is_cacheable_and_one_that_names_none_is_not(travel):
    import json

    feb = (await travel.graphql(PAPER, {"id": ROOT, "asOf": FEB}))["data"]["paper"]["id"]
    now = (await travel.graphql(PAPER, {"id": ROOT}))["data"]["paper"]["id"]
    query = "query($ids: [ID!]!) { nodes(ids: $ids) { id } }"
    for ids, public in (([feb], True), ([feb, now], False)):
        response = await travel.client.get("/graphql", params={"query": query, "variables": json.dumps({"ids": ids})})
        assert response.status_code == 200 and response.json()["data"]["nodes"][0]["id"] == feb
        assert response.headers["cache-control"].startswith("public") is public, response.headers
    literal = await travel.client.get("/graphql", params={"query": '{ node(id: "%s") { id } }' % feb})
    assert literal.headers["cache-control"].startswith("public")
