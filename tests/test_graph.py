"""Walking the graph: statement bounds, keyset paging, filters, limits, agreement with the record."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from tests.conftest import AUG9_AS_OF, HUB, NARROW_TREE, SEED_AS_OF, WIDE_TREE, aug9_documents, seed_bytes

pytestmark = pytest.mark.asyncio(loop_scope="session")

# The second hop pages 20 edges of each of the first hop's 100 papers: 2,000 edges with their notices is
# within the per-operation price (100 x 100 with notices is not: about 3 s of work).
TWO_HOPS = """query($id: String!) { paper(arxivId: $id) { inbound(first: 100) { edges { node { citingPaper {
  inbound(first: 20) { edges { node { citingPaper { title } resolution { status } standingNotice { state } } } }
} } } } } }"""


@pytest.mark.parametrize(("root", "fanout"), [(WIDE_TREE, 100), (NARROW_TREE, 5)])
async def test_statements_depend_on_the_query_shape_not_the_data(graph, root, fanout):
    graph.statements.clear()
    body = await graph.graphql(TWO_HOPS, {"id": root})
    assert "errors" not in body, body
    first_hop = body["data"]["paper"]["inbound"]["edges"]
    assert len(first_hop) == fanout
    second = [e for edge in first_hop for e in edge["node"]["citingPaper"]["inbound"]["edges"]]
    assert len(second) == fanout * min(fanout, 20)
    assert all(e["node"]["standingNotice"]["state"] == "MEASURED" for e in second)
    sent = graph.statements.counted
    assert len(sent) <= 6, [q.strip()[:60] for q in sent]
    assert body["extensions"]["cost"]["statements"] == len(sent)
    assert body["extensions"]["cost"]["nodes"] == 100 + 100 * 20


async def walk(graph, query: str, variables: dict, path: list[str], first: int = 7) -> tuple[list[dict], set[int]]:
    edges, totals, after = [], set(), None
    statements_per_page = set()
    while True:
        graph.statements.clear()
        body = await graph.graphql(query, {**variables, "first": first, "after": after})
        assert "errors" not in body, body
        connection = body["data"]
        for step in path:
            connection = connection[step]
        statements_per_page.add(len(graph.statements.counted))
        totals.add(connection["totalCount"])
        edges.extend(connection["edges"])
        assert len(connection["edges"]) <= first
        if not connection["pageInfo"]["hasNextPage"]:
            return edges, totals | {-len(statements_per_page)}
        after = connection["pageInfo"]["endCursor"]
        assert after == connection["edges"][-1]["cursor"]


INBOUND_PAGE = """query($id: String!, $first: Int!, $after: String, $status: [ResolutionStatus!]) {
  paper(arxivId: $id) { inbound(first: $first, after: $after, status: $status) {
    totalCount edges { cursor node { id observationId referenceIndex citingPaper { arxivId } resolution { status } } }
    pageInfo { hasNextPage endCursor } } } }"""

OUTBOUND_PAGE = """query($id: String!, $first: Int!, $after: String, $status: [ResolutionStatus!], $retracted: Boolean) {
  paper(arxivId: $id) { outbound(first: $first, after: $after, status: $status, citesRetracted: $retracted) {
    totalCount edges { cursor node { id observationId referenceIndex resolution { status }
      standingNotice { state events { eventType } } } }
    pageInfo { hasNextPage endCursor } } } }"""


def inbound_key(edge: dict) -> tuple:
    node = edge["node"]
    return (node["citingPaper"]["arxivId"], node["referenceIndex"], node["observationId"])


async def test_walk_all_250_inbound_seven_at_a_time(graph):
    edges, totals = await walk(graph, INBOUND_PAGE, {"id": HUB}, ["paper", "inbound"])
    ids = [e["node"]["id"] for e in edges]
    assert len(ids) == 250 and len(set(ids)) == 250
    assert [inbound_key(e) for e in edges] == sorted(inbound_key(e) for e in edges)
    assert {t for t in totals if t >= 0} == {250}
    assert {t for t in totals if t < 0} == {-1}, "every page must cost the same number of statements"


async def test_outbound_pages_by_reference_index(graph):
    edges, totals = await walk(graph, OUTBOUND_PAGE, {"id": HUB}, ["paper", "outbound"], first=11)
    assert [e["node"]["referenceIndex"] for e in edges] == list(range(1, 151))
    assert {t for t in totals if t >= 0} == {150}


@pytest.mark.parametrize("statuses", [["UNRESOLVED"], ["VERIFIED_EXACT", "METADATA_MISMATCH"]])
async def test_status_filter_and_its_total(graph, statuses):
    edges, totals = await walk(graph, INBOUND_PAGE, {"id": HUB, "status": statuses}, ["paper", "inbound"], first=9)
    assert edges and all(e["node"]["resolution"]["status"] in statuses for e in edges)
    assert {t for t in totals if t >= 0} == {len(edges)}
    everything, _ = await walk(graph, INBOUND_PAGE, {"id": HUB}, ["paper", "inbound"], first=100)
    assert len(edges) == sum(e["node"]["resolution"]["status"] in statuses for e in everything)


@pytest.mark.parametrize(("query", "field"), [(INBOUND_PAGE, "inbound"), (OUTBOUND_PAGE, "outbound")])
async def test_an_empty_status_list_is_refused_saying_how_to_ask_for_every_status(graph, query, field):
    """`status: []` selected no edge (totalCount 0, after a walk of the paper's every edge): a form with
    nothing ticked sends it meaning "any". Refused, with both ways to ask, and no statement sent."""
    graph.statements.clear()
    body = await graph.graphql(query, {"id": HUB, "status": [], "first": 10, "after": None})
    (error,) = body["errors"]
    assert error["extensions"]["code"] == "BAD_USER_INPUT" and error["extensions"]["argument"] == "status"
    assert "omit status (or pass null)" in error["message"] and "VERIFIED_EXACT" in error["message"]
    assert body["data"]["paper"][field] is None
    assert not [s for s in graph.statements.counted if "resolutions" in s]
    everything = await graph.graphql(query, {"id": HUB, "status": None, "first": 10, "after": None})
    assert everything["data"]["paper"][field]["totalCount"] > 0


@pytest.mark.parametrize("compiled", [True, False])
async def test_a_cursor_of_one_papers_list_is_refused_on_anothers(graph, compiled):
    """A keyset cursor is a place in one list: given to another paper's list it started that list at a
    place of the first one's (a page from the middle, hasPreviousPage true, nothing said). Refused, naming
    whose cursor it is, in the one-statement path (a bare lookup with its page) and the ordinary one."""
    extra = "" if compiled else " resolution { status }"
    query = ("query($id: String!, $after: String) { paper(arxivId: $id) { %s(first: 3, after: $after) { "
             "edges { cursor node { observationId%s } } pageInfo { endCursor } } } }")
    for field, other in (("inbound", WIDE_TREE), ("outbound", NARROW_TREE)):
        document = query % (field, extra)
        first = await graph.graphql(document, {"id": HUB, "after": None})
        cursor = first["data"]["paper"][field]["pageInfo"]["endCursor"]
        again = await graph.graphql(document, {"id": HUB, "after": cursor})
        assert "errors" not in again and again["data"]["paper"][field]["edges"], again
        refused = await graph.graphql(document, {"id": other, "after": cursor})
        (error,) = refused["errors"]
        assert error["extensions"]["code"] == "BAD_USER_INPUT", error
        assert f"a cursor of the {field} connection of {HUB}, not of {other}" in error["message"], error


async def test_cites_retracted_partitions_outbound(graph):
    retracted, t1 = await walk(graph, OUTBOUND_PAGE, {"id": HUB, "retracted": True}, ["paper", "outbound"], first=50)
    clean, t2 = await walk(graph, OUTBOUND_PAGE, {"id": HUB, "retracted": False}, ["paper", "outbound"], first=50)
    assert retracted and clean
    assert len(retracted) + len(clean) == 150
    assert {t for t in t1 if t >= 0} == {len(retracted)} and {t for t in t2 if t >= 0} == {len(clean)}
    for e in retracted:
        assert "RETRACTION" in [ev["eventType"] for ev in e["node"]["standingNotice"]["events"]]
    for e in clean:
        assert "RETRACTION" not in [ev["eventType"] for ev in e["node"]["standingNotice"]["events"]]


async def test_record_agrees_with_typed_fields(served):
    """For the 9 August instant, every typed value equals the v1 document's."""
    doc = aug9_documents()[0]
    body = await served.graphql("""query($at: DateTime) { paper(arxivId: "2402.15627", asOf: $at) {
      arxivId title latestVersion primaryCategory submittedAt lastUpdated snapshotObservedAt
      externalCitationMeasurements { source count observedAt }
      inbound(first: 100) { totalCount edges { node { observationId digest referenceIndex source sourceObservedAt
        citingPaper { arxivId title latestVersion submittedAt lastUpdated snapshotObservedAt }
        citedPaper { arxivId }
        citedWork { workId arxivId doi metadataSource pithArxivId title venue year snapshotObservedAt }
        resolution { status resolverSource observedAt }
        standingNotice { state reason observation events { eventType } sourceReceipts { source observedAt } } } } }
      citationRecord { canonicalJson }
    } }""", {"at": AUG9_AS_OF})
    paper = body["data"]["paper"]
    p = doc["paper"]
    assert (paper["arxivId"], paper["title"], paper["latestVersion"], paper["primaryCategory"]) == (
        p["arxiv_id"], p["title"], p["latest_version"], p["primary_category"])
    assert (paper["submittedAt"], paper["lastUpdated"], paper["snapshotObservedAt"]) == (
        p["submitted_at"], p["last_updated"], p["snapshot_observed_at"])
    assert [(m["source"], m["count"], m["observedAt"]) for m in paper["externalCitationMeasurements"]] == [
        (m["source"], m["count"], m["observed_at"]) for m in doc["external_citation_measurements"]]
    assert paper["inbound"]["totalCount"] == doc["coverage"][2]["denominator"]
    assert paper["citationRecord"]["canonicalJson"] == json.dumps(doc, sort_keys=True, separators=(",", ":"),
                                                                  ensure_ascii=False)
    nodes = [e["node"] for e in paper["inbound"]["edges"]]
    assert len(nodes) == len(doc["inbound"])
    for node, o in zip(nodes, doc["inbound"]):
        c = o["citation"]
        assert node["observationId"] == o["observation_id"]
        assert node["digest"] == o["observation_digest"]
        assert (node["referenceIndex"], node["source"], node["sourceObservedAt"]) == (
            c["reference_index"], c["source"], c["source_observed_at"])
        cp = c["citing_paper"]
        assert node["citingPaper"] == {"arxivId": cp["arxiv_id"], "title": cp["title"], "latestVersion": cp["version"],
                                       "submittedAt": cp["submitted_at"], "lastUpdated": cp["last_updated"],
                                       "snapshotObservedAt": cp["snapshot_observed_at"]}
        assert node["citedPaper"]["arxivId"] == c["cited_paper"]["arxiv_id"]
        w = c["cited_work"]
        assert node["citedWork"] == {"workId": w["work_id"], "arxivId": w["arxiv_id"], "doi": w["doi"],
                                     "metadataSource": w["metadata_source"], "pithArxivId": w["pith_arxiv_id"],
                                     "title": w["title"], "venue": w["venue"], "year": w["year"],
                                     "snapshotObservedAt": w["snapshot_observed_at"]}
        r = o["resolution"]
        assert node["resolution"] == {"status": r["status"].upper(), "resolverSource": r["resolver_source"],
                                      "observedAt": r["observed_at"]}
        n = o["standing_notice"]
        assert node["standingNotice"]["state"] == n["state"].upper()
        assert node["standingNotice"]["reason"] == n["reason"]
        assert node["standingNotice"]["observation"] == n.get("observation")
        assert [(x["source"], x["observedAt"]) for x in node["standingNotice"]["sourceReceipts"]] == [
            (x["source"], x["observed_at"].replace("+00:00", "Z")) for x in n["source_receipts"]]


async def test_one_instant_per_root_field(served):
    body = await served.graphql("""{
      then: paper(arxivId: "2402.15627", asOf: "2026-08-05T04:52:00Z") { inbound { totalCount } }
      later: paper(arxivId: "2402.15627", asOf: "2026-08-09T12:00:00Z") { inbound { totalCount } } }""")
    assert body["data"]["then"]["inbound"]["totalCount"] == 7
    assert body["data"]["later"]["inbound"]["totalCount"] == 13


async def test_papers_in_request_order_with_nulls(served):
    body = await served.graphql("""{ papers(arxivIds: ["2409.19256", "2401.00001", "2402.15627"],
      asOf: "2026-08-05T04:52:00Z") { arxivId } }""")
    assert body["data"]["papers"] == [{"arxivId": "2409.19256"}, None, {"arxivId": "2402.15627"}]


async def test_observation_by_id(served):
    seed = json.loads(seed_bytes())
    oid = seed["inbound"][6]["observation_id"]
    query = """query($id: ID!, $at: DateTime) { observation(id: $id, asOf: $at) { id digest
      citingPaper { arxivId } citedWork { linked title } } }"""
    body = await served.graphql(query, {"id": oid, "at": SEED_AS_OF})
    node = body["data"]["observation"]
    assert node["digest"] == seed["inbound"][6]["observation_digest"]
    assert node["citedWork"] == {"linked": False, "title": seed["inbound"][6]["citation"]["cited_work"]["title"]}
    body = await served.graphql(query, {"id": oid, "at": "2026-08-01T00:00:00Z"})
    assert body["data"]["observation"] is None
    body = await served.graphql(query, {"id": "not-a-uuid"})
    assert body["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"


async def test_search_titles_as_of(served):
    query = """query($q: String!, $at: DateTime) { searchPapers(query: $q, asOf: $at, first: 5) {
      nodes { arxivId title } } }"""
    body = await served.graphql(query, {"q": "megascale training", "at": SEED_AS_OF})
    found = [p["arxivId"] for p in body["data"]["searchPapers"]["nodes"]]
    assert found[0] == "2402.15627" and "2605.08962" in found
    body = await served.graphql(query, {"q": "BlueLM", "at": SEED_AS_OF})
    assert body["data"]["searchPapers"]["nodes"] == []
    body = await served.graphql(query, {"q": "BlueLM", "at": AUG9_AS_OF})
    assert [p["arxivId"] for p in body["data"]["searchPapers"]["nodes"]] == ["2507.05934"]


async def test_neighbourhood_costs_one_statement_per_hop(graph):
    query = """query($id: String!, $per: Int!, $depth: Int!) { neighbourhood(arxivId: $id, depth: $depth,
      perPaper: $per) { truncated papers { arxivId } edges { id citingPaper { arxivId } } } }"""
    for depth in (1, 2):
        graph.statements.clear()
        body = await graph.graphql(query, {"id": WIDE_TREE, "per": 10, "depth": depth})
        hood = body["data"]["neighbourhood"]
        assert hood["truncated"] is True
        assert len(hood["papers"]) == 1 + sum(10 ** h for h in range(1, depth + 1))
        assert len(hood["edges"]) == len(hood["papers"]) - 1
        # The start paper's size (its price), the start paper, then one per hop.
        assert len(graph.statements.counted) == 1 + 1 + depth
    body = await graph.graphql(query, {"id": NARROW_TREE, "per": 10, "depth": 3})
    hood = body["data"]["neighbourhood"]
    assert hood["truncated"] is False and len(hood["papers"]) == 1 + 5 + 25


async def test_a_walk_keeps_within_its_caps_and_reads_no_more_than_it_has_room_for(graph_url):
    """The caps on papers and edges hold whatever the fan-out, and a hop reads its frontier a slice at a time,
    each no larger than the edges still allowed: at a cap of 50, the wide tree's second hop (100 papers of 100
    citers each, 10,000 rows at once before) reads at most a slice of them."""
    import asyncpg

    from app.db.pool import Session
    from loaders.dataloaders import Loaders
    from loaders.walk import walk

    conn = await asyncpg.connect(graph_url)
    read: list[int] = []
    conn.add_query_logger(lambda q: None)
    session = Session.from_connection(conn)
    try:
        loaders = Loaders(session, datetime.now(timezone.utc))
        original = loaders.inbound.load_many

        async def counting(requests):
            pages = await original(requests)
            read.append(sum(len(p) for p in pages))
            return pages

        loaders.inbound.load_many = counting  # type: ignore[method-assign]
        found = await walk(loaders, WIDE_TREE, ["in"], 2, 100, 50)
    finally:
        await session.close()
        await conn.close()
    assert found is not None and found.truncated
    assert len(found.papers) <= 50 and len(found.edges) <= 50, (len(found.papers), len(found.edges))
    # Every edge reaches a paper of the walk, and every paper but the start is reached by one.
    ends = {o.citing.arxiv_id for o in found.edges.values()}
    assert ends <= set(found.papers) and set(found.papers) - {WIDE_TREE} <= ends
    # The first hop reads the start's 101 rows (100 and one to tell a cut); then the walk is full.
    assert read and max(read) <= 101, read


async def test_neighbourhood_both_directions(graph):
    body = await graph.graphql("""{ neighbourhood(arxivId: "8800.00001", direction: BOTH, depth: 1, perPaper: 100)
      { truncated papers { arxivId } edges { id } } }""")
    hood = body["data"]["neighbourhood"]
    assert hood["truncated"] is True
    # References to no Pith paper reach no node, so they are not edges of the neighbourhood.
    assert len(hood["edges"]) == 100 + sum(1 for j in range(100) if j % 3)


def error_of(body: dict) -> dict:
    assert body.get("errors"), body
    return body["errors"][0]


@pytest.mark.parametrize("first", [0, 101, -1, 100000000])
async def test_first_out_of_range(graph, first):
    """The connection is refused (null, its error on its path) before any of its statements: no page, no count."""
    graph.statements.clear()
    body = await graph.graphql(INBOUND_PAGE, {"id": HUB, "first": first})
    error = error_of(body)
    assert error["extensions"]["code"] == "BAD_USER_INPUT" and error["path"] == ["paper", "inbound"], error
    assert "1 to 100" in error["message"]
    assert body["data"]["paper"] == {"inbound": None}, body
    assert not any("citation_observations" in sql for sql in graph.statements.counted), graph.statements.counted


async def test_too_many_ids(graph):
    ids = [f"2401.{i:05d}" for i in range(101)]
    body = await graph.graphql("query($ids: [String!]!) { papers(arxivIds: $ids) { title } }", {"ids": ids})
    error = error_of(body)
    assert error["extensions"]["code"] == "BAD_USER_INPUT" and "1 to 100" in error["message"]


@pytest.mark.parametrize(("args", "allowed"), [("depth: 4", "1 to 3"), ("depth: 0", "1 to 3"),
                                                ("perPaper: 101", "1 to 100"), ("perPaper: 0", "1 to 100")])
async def test_neighbourhood_limits(graph, args, allowed):
    body = await graph.graphql(f'{{ neighbourhood(arxivId: "{HUB}", {args}) {{ truncated }} }}')
    error = error_of(body)
    assert error["extensions"]["code"] == "BAD_USER_INPUT" and allowed in error["message"]


async def test_node_budget_is_checked_before_execution(graph):
    ids = [f"7000.{i:05d}" for i in range(1, 101)]
    graph.statements.clear()
    body = await graph.graphql("""query($ids: [String!]!) { papers(arxivIds: $ids) { inbound(first: 100) {
      edges { node { citingPaper { inbound(first: 100) { totalCount } } } } } } }""", {"ids": ids})
    error = error_of(body)
    assert error["extensions"]["code"] == "QUERY_TOO_COSTLY"
    assert error["extensions"]["cost"] == 100 + 100 * 100 + 100 * 100 * 100
    assert "500000" in error["message"]
    assert "data" not in body  # refused before execution: a request error
    assert graph.statements.counted == []


async def test_depth_alias_and_token_limits(graph):
    deep = "{ paper(arxivId: \"8800.00001\") { " + "inbound { edges { node { citingPaper { " * 4 + "title" + \
        " } } } }" * 4 + " } }"
    error = error_of(await graph.graphql(deep))
    assert "exceeds maximum operation depth" in error["message"]
    aliases = "{ " + " ".join(f'a{i}: paper(arxivId: "8800.00001") {{ title }}' for i in range(31)) + " }"
    error = error_of(await graph.graphql(aliases))
    assert "aliases" in error["message"].lower()
    tokens = "{ " + " ".join("__typename" for _ in range(6000)) + " }"
    error = error_of(await graph.graphql(tokens))
    assert "token" in error["message"].lower()


async def test_cursor_of_another_connection_is_refused(graph):
    body = await graph.graphql(INBOUND_PAGE, {"id": HUB, "first": 1})
    cursor = body["data"]["paper"]["inbound"]["pageInfo"]["endCursor"]
    for bad in (cursor + "x", "bm9wZQ", "e30"):
        error = error_of(await graph.graphql(OUTBOUND_PAGE, {"id": HUB, "first": 1, "after": bad}))
        assert error["extensions"]["code"] == "BAD_USER_INPUT"
    error = error_of(await graph.graphql(OUTBOUND_PAGE, {"id": HUB, "first": 1, "after": cursor}))
    assert "outbound" in error["message"]


async def test_every_response_reports_its_cost(served):
    body = await served.graphql('{ paper(arxivId: "2402.15627") { title } }')
    assert set(body["extensions"]["cost"]) == {"nodes", "limit", "statements", "requested", "actual", "maxRequested",
                                               "points"}


async def test_a_paper_says_the_instant_it_was_read_at_to_page_on_at_it(served):
    """Pages read as of now move when an import lands between them (a count that grows mid-walk); each paper says
    the instant it was read at, the asOf given or the request's now, and passing it back reads the same graph."""
    pinned = await served.graphql('{ paper(arxivId: "2402.15627", asOf: "2026-08-05T04:52:00Z") { asOf } }')
    assert pinned["data"]["paper"]["asOf"] == "2026-08-05T04:52:00Z", pinned
    now = await served.graphql('{ paper(arxivId: "2402.15627") { asOf inbound(first: 2) { totalCount '
                               'pageInfo { endCursor } } } }')
    paper = now["data"]["paper"]
    read = datetime.fromisoformat(paper["asOf"].replace("Z", "+00:00"))
    assert abs((datetime.now(timezone.utc) - read).total_seconds()) < 600, paper
    following = await served.graphql('query($at: DateTime, $after: String) { paper(arxivId: "2402.15627", asOf: $at) '
                                     '{ asOf inbound(first: 2, after: $after) { totalCount } } }',
                                     {"at": paper["asOf"], "after": paper["inbound"]["pageInfo"]["endCursor"]})
    assert following["data"]["paper"]["asOf"] == paper["asOf"], following
    assert following["data"]["paper"]["inbound"]["totalCount"] == paper["inbound"]["totalCount"], following
