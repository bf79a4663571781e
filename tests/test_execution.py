"""The direct execution path answers exactly as graphql-core's ordinary one; one-statement queries skip BEGIN."""

from __future__ import annotations

import pytest
import strawberry

from app.context import Context
from app.db.pool import Session, create_pool
from app.execution import DirectExecutionContext
from app.schema import make_schema
from app.settings import Settings
from tests.conftest import AUG9_AS_OF, HUB, TRANSACTION_CONTROL

pytestmark = pytest.mark.asyncio(loop_scope="session")

WIDE = """query($id: String!, $at: DateTime) { paper(arxivId: $id, asOf: $at) {
  arxivId title latestVersion primaryCategory submittedAt lastUpdated snapshotObservedAt __typename
  externalCitationMeasurements { source count observedAt }
  inbound(first: 100) { totalCount pageInfo { hasNextPage endCursor }
    edges { cursor node { id digest referenceIndex source sourceObservedAt __typename
      citingPaper { arxivId title latestVersion primaryCategory submittedAt lastUpdated snapshotObservedAt }
      citedPaper { arxivId title }
      citedWork { workId linked arxivId doi metadataSource pithArxivId title venue year snapshotObservedAt }
      resolution { status resolverSource observedAt }
      standingNotice { state reason observation events { eventType source observedAt reportedAt noticeDoi }
                       sourceReceipts { source observedAt live } } } } }
  outbound(first: 100) { totalCount edges { node { referenceIndex citedPaper { title } citedWork { title }
      alias: resolution { s: status } } } } } }"""


async def execute_both(url: str, query: str, variables: dict) -> tuple:
    pool = await create_pool(Settings(), url, min_size=1, max_size=2)
    try:
        results = []
        for schema in (make_schema(), make_schema(direct=False)):
            session = Session.from_pool(pool)
            try:
                results.append(await schema.execute(query, variable_values=variables,
                                                    context_value=Context(session=session)))
            finally:
                await session.close()
        return tuple(results)
    finally:
        await pool.close()


@pytest.mark.parametrize("paper", [HUB, "7000.00000", "7000.00001"])
async def test_direct_and_ordinary_execution_agree_on_real_data(graph_url, paper):
    direct, ordinary = await execute_both(graph_url, WIDE, {"id": paper, "at": None})
    assert direct.errors == ordinary.errors == None  # noqa: E711
    assert direct.data == ordinary.data
    assert direct.data["paper"] is not None


async def test_direct_and_ordinary_execution_agree_on_the_sample(database_url):
    for at in (AUG9_AS_OF, None):
        direct, ordinary = await execute_both(database_url, WIDE, {"id": "2402.15627", "at": at})
        assert direct.errors is None and direct.data == ordinary.data


# Errors: a tiny schema whose fields fail in each way the direct path must leave to graphql-core.

@strawberry.type
class Leafy:
    name: str

    @strawberry.field
    def broken(self) -> str:
        raise ValueError("broken leaf")

    @strawberry.field
    def missing(self) -> str:
        return None  # type: ignore[return-value]


@strawberry.type
class Root:
    @strawberry.field
    def nullable(self) -> Leafy | None:
        return Leafy(name="a")

    @strawberry.field
    def required(self) -> Leafy:
        return Leafy(name="b")

    @strawberry.field
    def items(self) -> list[Leafy | None]:
        return [Leafy(name="c"), Leafy(name="d")]


@pytest.mark.parametrize("query", [
    "{ nullable { name broken } }",
    "{ nullable { name missing } }",
    "{ required { name broken } }",
    "{ required { name } nullable { name } }",
    "{ items { name broken } }",
    "{ items { name missing } required { name } }",
])
async def test_errors_and_nulls_are_what_graphql_core_makes_of_them(query):
    direct = strawberry.Schema(query=Root, execution_context_class=DirectExecutionContext)
    ordinary = strawberry.Schema(query=Root)
    a, b = await direct.execute(query), await ordinary.execute(query)
    assert a.data == b.data
    assert [(e.message, e.path) for e in a.errors or []] == [(e.message, e.path) for e in b.errors or []]


async def test_a_single_lookup_sends_one_statement_and_no_transaction(graph):
    graph.statements.clear()
    body = await graph.graphql('{ paper(arxivId: "%s") { title arxivId snapshotObservedAt } }' % HUB)
    assert body["data"]["paper"]["arxivId"] == HUB
    assert len(graph.statements.queries) == 1, graph.statements.queries
    assert body["extensions"]["cost"]["statements"] == 1

    graph.statements.clear()
    body = await graph.graphql('{ papers(arxivIds: ["%s", "7000.00000"]) { title } }' % HUB)
    assert len(graph.statements.queries) == 1 and all(p for p in body["data"]["papers"])


async def test_several_statements_still_read_one_snapshot(graph):
    graph.statements.clear()
    # Two roots: not compiled into one statement (app.compiled), so two statements in one snapshot.
    body = await graph.graphql('{ paper(arxivId: "%s") { title inbound(first: 3) { totalCount } } '
                               'again: paper(arxivId: "%s") { title } }' % (HUB, HUB))
    assert body["data"]["paper"]["inbound"]["totalCount"] == 250
    control = [q for q in graph.statements.queries if q.strip().upper().startswith(TRANSACTION_CONTROL)]
    assert control and "REPEATABLE READ" in control[0].upper(), graph.statements.queries
    assert len(graph.statements.counted) == 2  # the paper (both roots, batched) and the count


async def test_a_compiled_query_is_one_statement_without_a_transaction(graph):
    graph.statements.clear()
    body = await graph.graphql('{ paper(arxivId: "%s") { title inbound(first: 3) { totalCount } } }' % HUB)
    assert body["data"]["paper"]["inbound"]["totalCount"] == 250
    assert not [q for q in graph.statements.queries if q.strip().upper().startswith(TRANSACTION_CONTROL)]
    assert len(graph.statements.counted) == 1 and body["extensions"]["cost"]["statements"] == 1


async def test_what_an_operation_loaded_is_freed_when_it_ends_without_the_collector(graph):
    """An operation's loaders are let go when it ends: their rows are freed by reference counting (in stretches,
    loaders.dataloaders.let_go), not left in a reference cycle (a loader's batch function is a method of the
    object holding the loader) for a collection of the older generations to walk: at 10,000 papers such a
    collection walked 400,000 objects for 300-470 ms with the event loop stopped."""
    import asyncio
    import gc

    from loaders.rows import Observation, PaperSnapshot

    def alive() -> int:
        return sum(isinstance(o, (PaperSnapshot, Observation)) for o in gc.get_objects())

    gc.collect()
    gc.disable()
    try:
        before = alive()
        body = await graph.graphql('{ paper(arxivId: "%s") { inbound(first: 100) { edges { node { citingPaper { '
                                   'title outbound(first: 5) { edges { node { observationId } } } } } } } } }' % HUB)
        assert len(body["data"]["paper"]["inbound"]["edges"]) == 100
        for _ in range(50):  # the rows go in stretches, in a task of their own
            await asyncio.sleep(0.01)
        assert alive() <= before, "rows of the operation left for the collector"
    finally:
        gc.enable()
