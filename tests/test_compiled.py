"""Compiled queries answer exactly as the ordinary path does, in one statement; anything else falls back."""

from __future__ import annotations

import json
import os
from datetime import timedelta, timezone

import asyncpg
import pytest
import pytest_asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.compiled import compiled_for
from app.context import Context
from app.cost import _parsed, document_parts
from app.db.pool import Session, create_pool
from app.schema import make_schema
from app.settings import Settings
from tests.conftest import drop_database, synthetic_database

pytestmark = pytest.mark.asyncio(loop_scope="session")

EXAMPLES = int(os.environ.get("PITH_FUZZ_EXAMPLES", "60"))
PAPER = ["arxivId", "title", "latestVersion", "primaryCategory", "submittedAt", "lastUpdated", "snapshotObservedAt",
         "id", "__typename"]
OBSERVATION = ["observationId", "referenceIndex", "source", "sourceObservedAt", "id", "__typename"]
RESOLUTION = ["status", "observedAt", "resolverSource", "__typename"]


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def world(admin_url):
    url = await synthetic_database(admin_url, "pith_test_compiled", 300, 17)
    conn = await asyncpg.connect(url)
    try:
        # Microseconds on some instants, so the DateTime format is exercised both ways.
        await conn.execute("UPDATE resolutions SET observed_at = date_trunc('second', observed_at) "
                           "WHERE observation_id IN (SELECT observation_id FROM resolutions ORDER BY 1 LIMIT 500)")
        # Titles JSON must escape, and text beyond the Basic Multilingual Plane.
        odd = ['quote " backslash \\ slash / tab \t newline \n', 'control \x01\x1f del \x7f', 'é ü 漢字 🚀 \u2028 \u2029',
               "<script>&amp;</script> 'single'"]
        await conn.executemany("UPDATE paper_snapshots SET title = $2 WHERE arxiv_id = (SELECT arxiv_id FROM "
                               "paper_snapshots ORDER BY arxiv_id OFFSET $1 LIMIT 1)", list(enumerate(odd)))
        papers = [r[0] for r in await conn.fetch("SELECT DISTINCT arxiv_id FROM paper_snapshots ORDER BY 1")]
        hub = await conn.fetchval("SELECT cited_arxiv_id FROM citation_observations WHERE cited_arxiv_id IS NOT NULL "
                                  "GROUP BY 1 ORDER BY count(*) DESC, 1 LIMIT 1")
        low, high = await conn.fetchrow("SELECT min(observed_at), max(observed_at) FROM paper_snapshots")
    finally:
        await conn.close()
    pool = await create_pool(Settings(), url, min_size=1, max_size=4)
    yield pool, papers, low, high, url, hub
    await pool.close()
    await drop_database(admin_url, url)


COMPILED, ORDINARY = make_schema(), make_schema(compiled=False)


def operation_of(query: str) -> tuple:
    operations, fragments = document_parts(_parsed(query, 5000))
    return operations[0], fragments


async def execute(pool, schema, query: str, variables: dict, statement_timeout_ms: int = 10_000):
    session = Session.from_pool(pool, statement_timeout_ms=statement_timeout_ms)
    try:
        result = await schema.execute(query, variable_values=variables, context_value=Context(session=session))
        return result, session.statements
    finally:
        await session.close()


@st.composite
def selections(draw) -> str:
    fragments: list[str] = []

    def pick(names: list[str], prefix: str = "", on: str | None = None) -> list[str]:
        chosen = draw(st.lists(st.sampled_from(names), min_size=1, max_size=len(names), unique=True))
        parts = [f"{prefix}{n}_{i}: {n}" if draw(st.booleans()) and n != "__typename" else n
                 for i, n in enumerate(chosen)]
        if on is None or len(parts) < 2:
            return parts
        # Some of the fields through a fragment: named, inline, or on the Node interface (for `id`), and
        # sometimes a field asked both inside and outside it (graphql merges them).
        cut = draw(st.integers(1, len(parts) - 1))
        inside, outside = parts[:cut], parts[cut:]
        if draw(st.booleans()):
            outside.append(inside[0])
        how = draw(st.sampled_from(["named", "inline", "plain"]))
        if how == "named":
            name = f"F{len(fragments)}"
            fragments.append(f"fragment {name} on {on} {{ {' '.join(inside)} }}")
            spread = f"...{name}"
        elif how == "inline":
            spread = f"... on {on} {{ {' '.join(inside)} }}"
        else:
            spread = f"... {{ {' '.join(inside)} }}"
        extra = ["... on Node { id }"] if on in ("Paper", "CitationObservation") and draw(st.booleans()) else []
        return [spread, *outside, *extra]

    def node() -> str:
        parts = pick(OBSERVATION, on="CitationObservation")
        if draw(st.booleans()):
            parts.append("citingPaper { " + " ".join(pick(PAPER, on="Paper")) + " }")
        if draw(st.booleans()):
            parts.append("citedPaper { " + " ".join(pick(PAPER, on="Paper")) + " }")
        if draw(st.booleans()):
            parts.append("resolution { " + " ".join(pick(RESOLUTION)) + " }")
        return "{ " + " ".join(parts) + " }"

    parts = pick(PAPER, on="Paper")
    for direction in ("inbound", "outbound"):
        if draw(st.booleans()):
            first = draw(st.sampled_from(["", "(first: 1)", "(first: 100)", "(first: $first)", "(first: 3)"]))
            if direction == "inbound" and draw(st.booleans()):  # continue after a cursor the test provides
                first = "(first: 3, after: $after)" if first != "" else "(after: $after)"
            inner = []
            if draw(st.booleans()):
                inner.append("totalCount")
            if draw(st.booleans()):
                info = pick(["hasNextPage", "hasPreviousPage", "startCursor", "endCursor", "__typename"])
                inner.append("pageInfo { " + " ".join(info) + " }")
            if draw(st.booleans()):
                cursor = draw(st.sampled_from(["", "cursor ", "c: cursor ", "cursor c2: cursor "]))
                inner.append("edges { " + ("__typename " if draw(st.booleans()) else "") + cursor + "node " + node()
                             + " }")
            if draw(st.booleans()) or not inner:
                inner.append("nodes " + node())
            alias = "conn_" + direction + ": " if draw(st.booleans()) else ""
            parts.append(f"{alias}{direction}{first} {{ {' '.join(inner)} }}")
    root = "p: paper" if draw(st.booleans()) else "paper"
    body = " ".join(parts)
    first = ", $first: Int" if "$first" in body else ""  # an unused variable is a validation error
    first += ", $after: String" if "$after" in body else ""
    return (f"query($id: String!, $at: DateTime{first}) {{ {root}(arxivId: $id, asOf: $at) {{ {body} }} }}\n"
            + "\n".join(fragments))


@pytest.fixture
def seen():
    """What the comparison's examples drew, checked once they have all run: not trivial."""
    seen = {"compared": 0, "found": 0, "edges": 0, "after a cursor": 0, "cursors": 0}
    yield seen
    assert seen["found"] >= seen["compared"] // 3 and seen["edges"] > 100, seen
    assert seen["after a cursor"] >= 3 and seen["cursors"] > 50, seen


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(data=st.data())
async def test_compiled_answers_equal_the_ordinary_path(world, seen, data):
    pool, papers, low, high, _, hub = world
    query = data.draw(selections())
    assert compiled_for(*operation_of(query)) is not None, query
    at = data.draw(st.sampled_from([None, low, low + (high - low) / 3, high - timedelta(days=1)]))
    variables = {"id": data.draw(st.sampled_from(papers + ["9912.99999"])),
                 "at": at.astimezone(timezone.utc).isoformat() if at is not None else None}
    if "$first" in query:
        variables["first"] = data.draw(st.sampled_from([1, 5, 100]))
    if "$after" in query:  # a cursor of this paper's inbound connection at the instant (else the most-cited one's)
        for paper in (variables["id"], hub):
            variables["id"] = paper
            (found, _) = await execute(pool, ORDINARY, """query($id: String!, $at: DateTime) { paper(arxivId: $id,
                asOf: $at) { inbound(first: 10) { edges { cursor } } } }""", {"id": paper, "at": variables["at"]})
            edges = (found.data["paper"] or {"inbound": {"edges": []}})["inbound"]["edges"]
            if edges:
                break
        variables["after"] = data.draw(st.sampled_from([e["cursor"] for e in edges])) if edges else None
    (compiled, statements), (ordinary, _) = [await execute(pool, s, query, variables) for s in (COMPILED, ORDINARY)]
    assert compiled.errors is None and ordinary.errors is None, (compiled.errors, ordinary.errors)
    assert json.dumps(compiled.data) == json.dumps(ordinary.data), query  # values and key order
    assert statements == 1
    seen["compared"] += 1
    seen["after a cursor"] += variables.get("after") is not None
    seen["cursors"] += json.dumps(compiled.data).count('"WyJ')  # base64 of '["': every cursor starts so
    paper = next(iter(compiled.data.values()))
    if paper:
        seen["found"] += 1
        seen["edges"] += sum(len(v.get("nodes", v.get("edges", []))) for v in paper.values() if isinstance(v, dict))


@pytest.mark.parametrize("query, variables", [
    ("query($id: String!) { paper(arxivId: $id) { title } }", {"id": "not an id"}),
    ("{ paper(arxivId: \"1501.00001\") { inbound(first: 0) { totalCount } } }", {}),
    ("query($f: Int) { paper(arxivId: \"1501.00001\") { outbound(first: $f) { totalCount } } }", {"f": 101}),
    ("query($at: DateTime) { paper(arxivId: \"1501.00001\", asOf: $at) { title } }", {"at": "yesterday"}),
    ("{ paper(arxivId: \"1501.00001\", asOf: \"1990-01-01T00:00:00Z\") { title inbound { totalCount } } }", {}),
    ("query($c: String) { paper(arxivId: \"1501.00001\") { inbound(after: $c) { totalCount edges { cursor } } } }",
     {"c": "bm90IGEgY3Vyc29y"}),
    ("query($c: String) { paper(arxivId: \"1501.00001\") { inbound(after: $c) { totalCount } } }",
     {"c": "bm90IGEgY3Vyc29y"}),  # no page selected: the cursor is still checked
    ("query($c: String) { paper(arxivId: \"1501.00001\") { outbound(after: $c) { pageInfo { endCursor } } } }",
     {"c": "WyJpbiIsIjE1MDEuMDAwMDEiLDEsIjAwMDAwMDAwLTAwMDAtMDAwMC0wMDAwLTAwMDAwMDAwMDAwMCJd"}),
])
async def test_arguments_the_ordinary_path_refuses_get_its_errors(world, query, variables):
    pool = world[0]
    (compiled, _), (ordinary, _) = [await execute(pool, s, query, variables) for s in (COMPILED, ORDINARY)]
    assert compiled.data == ordinary.data
    assert [e.message for e in compiled.errors or []] == [e.message for e in ordinary.errors or []]


@pytest.mark.parametrize("query", [
    "{ paper(arxivId: \"1501.00001\") { inbound(last: 3) { edges { cursor } } } }",
    "{ paper(arxivId: \"1501.00001\") { inbound(before: \"x\") { pageInfo { hasNextPage } } } }",
    "{ paper(arxivId: \"1501.00001\") { inbound(status: [UNRESOLVED]) { totalCount } } }",
    "{ paper(arxivId: \"1501.00001\") { ...F } } fragment F on Paper { title @skip(if: false) }",
    "{ paper(arxivId: \"1501.00001\") { title ... on Paper { t: title } t: latestVersion } }",
    "{ paper(arxivId: \"1501.00001\") { title @include(if: true) } }",
    "{ paper(arxivId: \"1501.00001\") { title } papers(arxivIds: [\"1501.00001\"]) { title } }",
    "{ paper(arxivId: \"1501.00001\") { inbound { nodes { citingPaper { inbound { totalCount } } } } } }",
    "{ paper(arxivId: \"1501.00001\") { inbound { nodes { digest } } } }",
])
async def test_what_does_not_compile_runs_the_ordinary_way(world, query):
    pool = world[0]
    assert compiled_for(*operation_of(query)) is None
    (compiled, _), (ordinary, _) = [await execute(pool, s, query, {}) for s in (COMPILED, ORDINARY)]
    assert compiled.data == ordinary.data and compiled.errors == ordinary.errors


async def test_over_http_a_compiled_query_is_one_statement(served):
    body = await served.graphql("""query($id: String!) { paper(arxivId: $id) { title inbound(first: 100) {
        totalCount edges { node { referenceIndex citingPaper { arxivId title } resolution { status } } } } } }""",
                                {"id": "2402.15627"})
    assert "errors" not in body, body
    assert body["extensions"]["cost"]["statements"] == 1
    assert body["data"]["paper"]["inbound"]["totalCount"] == len(body["data"]["paper"]["inbound"]["edges"]) > 0


async def test_a_failing_compiled_statement_is_a_located_error_like_the_ordinary_paths(world):
    """A statement timeout (the table held by a lock) gives both paths the same data and error path."""
    url = world[4]
    locker = await asyncpg.connect(url)
    slow = await create_pool(Settings(statement_timeout_ms=300), url, min_size=1, max_size=2)
    try:
        transaction = locker.transaction()
        await transaction.start()
        await locker.execute("LOCK TABLE paper_snapshots IN ACCESS EXCLUSIVE MODE")
        query = '{ paper(arxivId: "1501.00001") { title inbound(first: 2) { totalCount } } }'
        (compiled, _), (ordinary, _) = [await execute(slow, s, query, {}, statement_timeout_ms=300)
                                        for s in (COMPILED, ORDINARY)]
        await transaction.rollback()
    finally:
        await locker.close()
        await slow.close()
    assert compiled.data == ordinary.data == {"paper": None}
    assert [(e.message, e.path) for e in compiled.errors] == [(e.message, e.path) for e in ordinary.errors]
    assert compiled.errors[0].path == ["paper"] and "statement timeout" in compiled.errors[0].message


@pytest.mark.parametrize("query", [
    # Apollo Client: __typename on every object, fragments for the view's pieces.
    """query Paper($id: String!) { paper(arxivId: $id) { __typename id ...PaperHeader inbound(first: 20) {
         __typename totalCount edges { __typename node { __typename id ...Citation } } } }
       }
       fragment PaperHeader on Paper { arxivId title latestVersion }
       fragment Citation on CitationObservation { referenceIndex citingPaper { __typename id ...PaperHeader }
         resolution { __typename status } }""",
    # Relay: fragments on the Node interface, the same leaf through two fragments.
    """query($id: String!) { paper(arxivId: $id) { ...A ...B ... on Node { id } } }
       fragment A on Paper { id title } fragment B on Paper { title snapshotObservedAt }""",
    "query($id: String!) { paper(arxivId: $id) { a: title a: title } }",
])
async def test_client_shaped_queries_compile_and_agree(world, query):
    pool, papers = world[0], world[1]
    assert compiled_for(*operation_of(query)) is not None
    for paper in papers[:5]:
        (compiled, statements), (ordinary, _) = [await execute(pool, s, query, {"id": paper})
                                                 for s in (COMPILED, ORDINARY)]
        assert compiled.errors is None and statements == 1
        assert json.dumps(compiled.data) == json.dumps(ordinary.data)  # values and key order


@pytest.mark.parametrize("variables", [
    {"id": "2402.15627", "at": "2026-03-01T00:00:00Z", "first": 3, "after": None},
    {"id": "2402.15627"},  # asOf, first and after not given: their defaults (null), as graphql-core leaves them
    {"id": "2402.15627", "at": None, "first": None},
    {"id": None},  # a null for a non-null argument: refused, as graphql-core refuses it
    {},  # a required argument without its variable
])
async def test_arguments_bound_from_variables_are_graphql_cores(variables):
    """A field whose arguments are variables is bound once per field (app.compiled._binding), each request
    reading the coerced variables: what it gives is what graphql-core's get_argument_values gives, defaults,
    omissions and refusals included; a literal argument goes to graphql-core itself."""
    from graphql.execution.values import VariableValues, VariableValueSource, get_argument_values

    from app.compiled import _values

    schema = make_schema()._schema
    document = _parsed("query($id: String, $at: DateTime, $first: Int, $after: String) { paper(arxivId: $id, "
                       "asOf: $at) { inbound(first: $first, after: $after) { totalCount } } }", 10_000)
    operation = document_parts(document, None)[0][0]
    paper = operation.selection_set.selections[0]
    inbound = paper.selection_set.selections[0]
    coerced = {k: v for k, v in variables.items()}
    values = VariableValues({k: VariableValueSource(None, v) for k, v in coerced.items()}, coerced)
    for field, definition in ((paper, schema.query_type.fields["paper"]),
                              (inbound, schema.get_type("Paper").fields["inbound"])):
        try:
            expected = get_argument_values(definition, field, values)
        except Exception:  # noqa: BLE001
            expected = None
        assert _values(values, field, definition) == expected
    literal = _parsed('{ paper(arxivId: "2402.15627") { title } }', 10_000)
    field = document_parts(literal, None)[0][0].selection_set.selections[0]
    definition = schema.query_type.fields["paper"]
    assert _values(VariableValues({}, {}), field, definition) == get_argument_values(definition, field) \
        == {"arxivId": "2402.15627", "asOf": None}
