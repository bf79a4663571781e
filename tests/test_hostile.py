"""Hostile queries are refused before they run: an error naming the limit, no SQL sent."""

from __future__ import annotations

import pytest
from graphql import get_introspection_query

from app.settings import Settings
from tests.conftest import StatementLog, serve

pytestmark = pytest.mark.asyncio(loop_scope="session")

PAPER = 'paper(arxivId: "2402.15627")'


def nested(levels: int) -> str:
    return "{ " + PAPER + " { " + "inbound { edges { node { citingPaper { " * levels + "title" + " } } } }" * levels + " } }"


HOSTILE = {
    "deep nesting": ({"query": nested(4)}, "exceeds maximum operation depth"),
    "alias overloading": ({"query": "{ " + " ".join(f"a{i}: {PAPER} {{ title }}" for i in range(40)) + " }"},
                          "aliases"),
    "field duplication": ({"query": "{ " + PAPER + " { " + " ".join(["title"] * 6000) + " } }"}, "token"),
    "directive overloading": ({"query": "{ " + PAPER + " { title " + " ".join(["@include(if: true)"] * 50) + " } }"},
                              "can only be used once"),
    "undefined fragment": ({"query": "{ ...g }"}, "Unknown fragment 'g'"),
    "undefined fragment below a field": ({"query": "{ " + PAPER + " { title ...g } }"}, "Unknown fragment 'g'"),
    "undefined fragment in a fragment": ({"query": "query { " + PAPER + " { ...A } } fragment A on Paper { title ...B }"},
                                         "Unknown fragment 'B'"),
    "circular fragments": ({"query": "query { " + PAPER + " { ...A } } fragment A on Paper { ...B } "
                                     "fragment B on Paper { ...A }"}, "Cannot spread fragment"),
    "node budget": ({"query": "query($ids: [String!]!) { papers(arxivIds: $ids) { inbound(first: 100) { edges { node {"
                              " citingPaper { inbound(first: 100) { edges { node { id } } } } } } } } }",
                     "variables": {"ids": [f"2401.{i:05d}" for i in range(100)]}}, "500000"),
    "introspection nesting": ({"query": "{ __schema { types { fields { type { fields { type { fields { name } } } } } }"
                                        " } }"}, "introspection"),
    "introspection depth": ({"query": "{ __type(name: \"Paper\") { " + "ofType { " * 25 + "name" + " }" * 25 + " } }"},
                            "deeper than"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
async def test_hostile_query_is_refused_before_execution(served, name):
    payload, says = HOSTILE[name]
    served.statements.clear()
    response = await served.client.post("/graphql", json=payload)
    assert response.status_code in (200, 400), response.text
    body = response.json()
    assert body.get("errors"), body
    assert says in body["errors"][0]["message"], body["errors"][0]["message"]
    assert not body.get("data") or all(v is None for v in body["data"].values())
    assert served.statements.counted == [], "a refused query must not reach the database"


async def test_a_huge_first_is_refused_on_its_connection_before_any_of_its_statements(served):
    """Out of range is a field's error (the README's rule: null with its error, parent and siblings kept),
    refused when the field runs: its connection sends nothing."""
    served.statements.clear()
    response = await served.client.post("/graphql", json={
        "query": "{ " + PAPER + " { arxivId inbound(first: 1000000000) { totalCount } } }"})
    body = response.json()
    assert "1 to 100" in body["errors"][0]["message"] and body["errors"][0]["path"] == ["paper", "inbound"], body
    assert body["data"]["paper"] == {"arxivId": "2402.15627", "inbound": None}, body
    assert not any("citation_observations" in sql for sql in served.statements.counted), served.statements.counted


async def test_batched_operations_are_refused(served):
    response = await served.client.post("/graphql", json=[{"query": "{ __typename }"}, {"query": "{ __typename }"}])
    assert response.status_code == 400 and "batched" in response.json()["errors"][0]["message"]


async def test_very_large_documents_and_variables_are_refused(served):
    big = "{ " + PAPER + " { title } }" + " " * 200_000
    response = await served.client.post("/graphql", json={"query": big})
    assert response.status_code == 413 and "bytes" in response.json()["errors"][0]["message"]
    response = await served.client.post("/graphql", json={"query": "query($x: [String!]!) { papers(arxivIds: $x) "
                                                                   "{ title } }", "variables": {"x": ["a" * 30_000]}})
    assert response.status_code == 413
    response = await served.client.get("/graphql", params={"query": "{ __typename }" + " " * 20_000})
    assert response.status_code == 413


async def test_graphiql_introspection_still_works(served):
    body = await served.graphql(get_introspection_query(descriptions=True))
    assert "errors" not in body and body["data"]["__schema"]["queryType"]["name"] == "Query"


async def test_field_suggestions_off_in_production_and_introspection_switch(database_url):
    query = '{ paper(arxivId: "2402.15627") { titel } }'
    async for s in serve(database_url, StatementLog()):
        assert "Did you mean" in (await s.graphql(query))["errors"][0]["message"]
    async for s in serve(database_url, StatementLog(), Settings(database_url=database_url, production=True,
                                                               introspection=False)):
        assert "Did you mean" not in (await s.graphql(query))["errors"][0]["message"]
        body = await s.graphql("{ __schema { queryType { name } } }")
        assert body["errors"] and "introspection" in body["errors"][0]["message"].lower()
        assert (await s.graphql('{ paper(arxivId: "2402.15627") { title } }'))["data"]["paper"]["title"]


@pytest.mark.parametrize("arxiv_id", ["a\u0000b", "2402.15627\u0000", "2402.15627\n", "\u0000"])
@pytest.mark.parametrize("field", [
    "citationRecord(arxivId: $id) { document }",
    "paper(arxivId: $id) { title }",
    "papers(arxivIds: [$id, \"2402.15627\"]) { title }",
    "recordDiff(arxivId: $id, from: \"2020-01-01T00:00:00Z\", to: \"2030-01-01T00:00:00Z\", maxChanges: 1) "
    "{ toContextDigest }",
    "paper(arxivId: $id) { citationsByYear { year } }",
])
async def test_an_id_no_paper_can_have_is_the_clients_error_never_the_databases(served, field, arxiv_id):
    """A NUL byte (which PostgreSQL text cannot hold) or a trailing newline in an id: BAD_USER_INPUT, before any
    statement is sent with it (the price's size lookup included)."""
    answer = await served.client.post("/graphql", json={"query": f"query($id: String!) {{ {field} }}",
                                                        "variables": {"id": arxiv_id}})
    assert answer.status_code < 500, answer.text[:300]
    codes = [e["extensions"]["code"] for e in answer.json().get("errors", [])]
    assert codes and set(codes) == {"BAD_USER_INPUT"}, (field, answer.text[:300])
