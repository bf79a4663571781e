"""Relay as a real client uses it: backward paging, node(id) round trips, search as a connection."""

from __future__ import annotations

import pytest
import pytest_asyncio
from gql import Client, GraphQLRequest
from gql.transport.httpx import HTTPXAsyncTransport

from tests.conftest import HUB, LiveServer

pytestmark = pytest.mark.asyncio(loop_scope="session")

PAGE = """query($id: String!, $first: Int, $after: String, $last: Int, $before: String) {
  paper(arxivId: $id) { inbound(first: $first, after: $after, last: $last, before: $before) {
    totalCount
    edges { cursor node { id observationId referenceIndex citingPaper { arxivId } } }
    nodes { observationId }
    pageInfo { hasNextPage hasPreviousPage startCursor endCursor } } } }"""


async def run(client, document: str, **variables):
    return await client.execute(GraphQLRequest(document, variable_values=variables))


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def client(graph_url):
    server = LiveServer(graph_url)
    transport = HTTPXAsyncTransport(url=server.base + "/graphql", timeout=30)
    try:
        async with Client(transport=transport, fetch_schema_from_transport=True) as session:
            yield session
    finally:
        server.stop()


async def test_paging_backwards_from_the_end_is_the_forward_walk_reversed(client):
    forward, after = [], None
    while True:
        page = (await run(client, PAGE, id=HUB, first=7, after=after))["paper"]["inbound"]
        forward += [e["node"]["observationId"] for e in page["edges"]]
        assert [n["observationId"] for n in page["nodes"]] == [e["node"]["observationId"] for e in page["edges"]]
        assert page["pageInfo"]["hasPreviousPage"] is (after is not None)
        if not page["pageInfo"]["hasNextPage"]:
            break
        after = page["pageInfo"]["endCursor"]
    backward, before = [], None
    while True:
        page = (await run(client, PAGE, id=HUB, last=7, before=before))["paper"]["inbound"]
        edges = page["edges"]
        assert page["pageInfo"]["startCursor"] == edges[0]["cursor"] and page["pageInfo"]["endCursor"] == edges[-1]["cursor"]
        assert page["pageInfo"]["hasNextPage"] is (before is not None)
        backward += [e["node"]["observationId"] for e in reversed(edges)]
        if not page["pageInfo"]["hasPreviousPage"]:
            break
        before = page["pageInfo"]["startCursor"]
    assert len(forward) == 250 == len(set(forward))
    assert backward == forward[::-1]


NODE = """query($id: ID!) { node(id: $id) { __typename id
  ... on Paper { arxivId title } ... on CitationObservation { observationId referenceIndex }
  ... on Work { linked workTitle: title workId } } }"""


async def test_node_round_trips_for_every_kind(client):
    found = (await run(client, """query($id: String!) { paper(arxivId: $id) { id arxivId title
      outbound(first: 100) { nodes { id observationId referenceIndex citedWork { id linked title workId } } } } }""",
                       id=HUB))["paper"]
    works = [n["citedWork"] for n in found["outbound"]["nodes"]]
    assert any(w["linked"] for w in works)
    samples = [("Paper", found["id"], {"arxivId": found["arxivId"], "title": found["title"]})]
    obs = found["outbound"]["nodes"][0]
    samples.append(("CitationObservation", obs["id"], {"observationId": obs["observationId"],
                                                       "referenceIndex": obs["referenceIndex"]}))
    for w in works[:3]:
        samples.append(("Work", w["id"], {"linked": w["linked"], "workTitle": w["title"], "workId": w["workId"]}))
    for kind, gid, fields in samples:
        node = (await run(client, NODE, id=gid))["node"]
        assert node["__typename"] == kind and node["id"] == gid
        assert {k: node[k] for k in fields} == fields
    # The UUID still works for observation(id:), and so does the global id.
    for key in (obs["observationId"], obs["id"]):
        got = (await run(client, "query($id: ID!) { observation(id: $id) { id } }", id=key))["observation"]
        assert got["id"] == obs["id"]


async def test_nodes_keep_request_order_with_nulls_and_one_statement_per_kind(graph):
    first = await graph.graphql('{ paper(arxivId: "%s") { id outbound(first: 100) { nodes { id citedWork { id linked } } } } }'
                                % HUB)
    paper = first["data"]["paper"]
    linked = next(n["citedWork"]["id"] for n in paper["outbound"]["nodes"] if n["citedWork"]["linked"])
    ids = [linked, paper["id"], paper["outbound"]["nodes"][1]["id"]]
    unknown_paper = "UGFwZXI6MjIwMS4wMDAwMQ"  # Paper:2201.00001, which no graph holds
    graph.statements.clear()
    body = await graph.graphql("query($ids: [ID!]!) { nodes(ids: $ids) { __typename id } }",
                               {"ids": [ids[0], ids[1], unknown_paper, ids[2]]})
    assert [n and n["id"] for n in body["data"]["nodes"]] == [ids[0], ids[1], None, ids[2]]
    assert [n and n["__typename"] for n in body["data"]["nodes"]] == ["Work", "Paper", None, "CitationObservation"]
    assert len(graph.statements.counted) == 3, graph.statements.counted  # papers, works, observations


@pytest.mark.parametrize("value", ["nonsense", "UGFwZXI6bm9wZQ", "", "V29yazpub3QtYS11dWlk"])
async def test_malformed_global_ids_are_bad_user_input(graph, value):
    body = await graph.graphql("query($id: ID!) { node(id: $id) { id } }", {"id": value})
    assert body["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT", body
    assert "global id" in body["errors"][0]["message"]


async def test_paging_backward_costs_the_same_at_any_offset(graph):
    costs, before = set(), None
    for _ in range(5):
        graph.statements.clear()
        body = await graph.graphql("""query($before: String) { paper(arxivId: "%s") { inbound(last: 20, before: $before) {
          edges { cursor } pageInfo { startCursor } } } }""" % HUB, {"before": before})
        costs.add(len(graph.statements.counted))
        before = body["data"]["paper"]["inbound"]["pageInfo"]["startCursor"]
    assert costs == {2}


@pytest.mark.parametrize("arguments", ["first: 3, last: 3", "last: 3, after: $c", "first: 3, before: $c", "last: 0",
                                       "last: 101"])
async def test_mixed_or_out_of_range_paging_is_refused(graph, arguments):
    declared = "($c: String)" if "$c" in arguments else ""  # (an unused variable is a validation error)
    body = await graph.graphql('query%s { paper(arxivId: "%s") { inbound(%s) { totalCount } } }'
                               % (declared, HUB, arguments), {"c": None} if declared else None)
    if "$c" in arguments:  # a null cursor is no cursor: these are ordinary pages
        assert "errors" not in body, body
        return
    assert body["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT", body


async def test_search_is_a_connection(served):
    query = """query($after: String) { searchPapers(query: "training", first: 2, after: $after, asOf: "2026-08-09T12:00:00Z") {
      edges { cursor score node { arxivId } } nodes { arxivId } pageInfo { hasNextPage hasPreviousPage endCursor } } }"""
    seen, after, pages = [], None, 0
    while True:
        page = (await served.graphql(query, {"after": after}))["data"]["searchPapers"]
        pages += 1
        assert [n["arxivId"] for n in page["nodes"]] == [e["node"]["arxivId"] for e in page["edges"]]
        scores = [e["score"] for e in page["edges"]]
        assert scores == sorted(scores, reverse=True)
        assert page["pageInfo"]["hasPreviousPage"] is (after is not None)
        seen += [e["node"]["arxivId"] for e in page["edges"]]
        if not page["pageInfo"]["hasNextPage"]:
            break
        after = page["pageInfo"]["endCursor"]
    everything = (await served.graphql(query.replace("first: 2", "first: 100"), {"after": None}))["data"]["searchPapers"]
    assert seen == [n["arxivId"] for n in everything["nodes"]] and len(seen) == len(set(seen)) and pages >= 2
