"""Every GraphQL example in the README runs against the sample data without an error."""

from __future__ import annotations

import re

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.asyncio(loop_scope="session")


def readme_queries() -> list[str]:
    text = (ROOT / "README.md").read_text()
    queries: list[str] = []
    for block in re.findall(r"```graphql\n(.*?)```", text, flags=re.S):
        current: list[str] = []
        for line in block.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            if line.startswith("{") and current:
                queries.append("\n".join(current))
                current = []
            current.append(line)
        if current:
            queries.append("\n".join(current))
    return queries


QUERIES = readme_queries()


async def test_the_readme_has_examples():
    assert len(QUERIES) >= 12


@pytest.mark.parametrize("query", [q for q in QUERIES if "<" not in q], ids=lambda q: q.split("(")[0][2:30])
async def test_a_readme_example_answers_without_errors(served, query):
    body = await served.graphql(query)
    assert "errors" not in body, body["errors"]
    assert any(value is not None for value in body["data"].values()), body["data"]


async def test_readme_examples_with_a_cursor_or_id_to_fill_in_answer_once_filled(served):
    """The placeholders (<endCursor>, <startCursor>, <id>) filled with what the API returned."""
    first = await served.graphql('{ paper(arxivId: "2402.15627") { id inbound(first: 5, status: [UNRESOLVED]) '
                                 '{ pageInfo { endCursor startCursor } } } }')
    page = first["data"]["paper"]["inbound"]["pageInfo"]
    values = {"<endCursor>": page["endCursor"], "<startCursor>": page["startCursor"],
              "<id>": first["data"]["paper"]["id"]}
    filled = 0
    for query in (q for q in QUERIES if "<" in q):
        for placeholder, value in values.items():
            query = query.replace(placeholder, value)
        assert "<" not in query, query
        body = await served.graphql(query)
        assert "errors" not in body, (query, body["errors"])
        filled += 1
    assert filled >= 3


async def test_the_readmes_live_recipes_are_the_files_the_client_tests_run():
    """tests/clients/recipes/*.mjs, run by tests/clients/splice.test.mjs, appear in the README as they are."""
    text = (ROOT / "README.md").read_text()
    recipes = sorted((ROOT / "tests" / "clients" / "recipes").glob("*.mjs"))
    assert len(recipes) == 3
    for path in recipes:
        assert f"// recipes/{path.name}\n" + path.read_text().rstrip("\n") + "\n```" in text, path.name
