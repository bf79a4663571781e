"""Data-sized work priced by the paper asked about (app.cost): on a graph with one big hub (synth
--hub-citations), an ordinary paper's timeline, recordDiff and citationsByYear cost what that paper's own
observations make them cost, whatever the hub does; the price bounds the work done; the hub's
citationsByYear is answered, and what the hub's size truly puts over the limit is refused with advice that
names what can succeed."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
import pytest
import pytest_asyncio

from app.limits import MAX_COST
from tests.conftest import StatementLog, drop_database, serve, synthetic_database

pytestmark = pytest.mark.asyncio(loop_scope="session")

HUB = "1501.00001"  # synth's hub is its first paper
HUB_CITATIONS = 30_000

QUERIES = {
    "citationsByYear": 'query($id: String!) { paper(arxivId: $id) { citationsByYear { year count } } }',
    "timeline": 'query($id: String!) { paper(arxivId: $id) { timeline(first: 20) { edges { cursor node { at kinds '
                'contextDigest } } pageInfo { hasNextPage endCursor } } } }',
    "recordDiff": 'query($id: String!) { recordDiff(arxivId: $id, from: "2026-01-01T00:00:00Z", '
                  'to: "2026-12-01T00:00:00Z") { patch changesTruncated changes { kind observedAt '
                  'observation { observationId } } } }',
    "citationRecord": 'query($id: String!) { citationRecord(arxivId: $id) { canonicalJson } }',
    "paper.citationRecord": 'query($id: String!) { paper(arxivId: $id) { citationRecord { document } } }',
}


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def hub_graph(admin_url):
    url = await synthetic_database(admin_url, "pith_test_scale", 300, 7, hub_citations=HUB_CITATIONS)
    conn = await asyncpg.connect(url)
    try:
        ordinary = [r[0] for r in await conn.fetch(
            "SELECT arxiv_id FROM paper_observation_counts WHERE arxiv_id <> $1 AND inbound BETWEEN 1 AND 200 "
            "ORDER BY arxiv_id DESC LIMIT 4", HUB)]
    finally:
        await conn.close()
    async for served in serve(url, StatementLog()):
        yield served, url, ordinary
    await drop_database(admin_url, url)


def cost(body: dict) -> dict:
    return body["extensions"]["cost"]


async def prices(served, arxiv_id: str) -> dict[str, dict]:
    found = {}
    for name, query in QUERIES.items():
        body = await served.graphql(query, {"id": arxiv_id})
        found[name] = body
    return found


async def test_the_counts_prices_read_follow_every_writer(hub_graph):
    _, url, _ = hub_graph
    conn = await asyncpg.connect(url)
    try:
        wrong = await conn.fetch("""
            SELECT p.arxiv_id FROM paper_observation_counts AS p
            FULL JOIN (SELECT arxiv_id, sum(i) AS i, sum(o) AS o FROM (
                SELECT cited_arxiv_id AS arxiv_id, 1 AS i, 0 AS o FROM citation_observations WHERE cited_arxiv_id IS NOT NULL
                UNION ALL SELECT citing_arxiv_id, 0, 1 FROM citation_observations) AS d GROUP BY 1) AS c USING (arxiv_id)
            WHERE coalesce(p.inbound, 0) <> coalesce(c.i, 0) OR coalesce(p.outbound, 0) <> coalesce(c.o, 0)""")
        assert wrong == []
        assert await conn.fetchval("SELECT inbound FROM paper_observation_counts WHERE arxiv_id = $1", HUB) \
            >= HUB_CITATIONS
    finally:
        await conn.close()


async def test_an_ordinary_papers_price_is_its_own_and_bounds_its_work(hub_graph):
    served, _, ordinary = hub_graph
    assert len(ordinary) == 4
    for arxiv_id in ordinary:
        for name, body in (await prices(served, arxiv_id)).items():
            assert "errors" not in body, (arxiv_id, name, body["errors"])
            c = cost(body)
            # The price bounds the work, and stays within a small factor of it.
            assert c["requested"] >= c["actual"], (arxiv_id, name, c)
            assert c["requested"] <= 20 * c["actual"] + 2_000, (arxiv_id, name, c)


async def test_an_ordinary_papers_price_does_not_move_with_the_hub(hub_graph):
    served, url, ordinary = hub_graph
    before = {a: {n: cost(b)["requested"] for n, b in (await prices(served, a)).items()} for a in ordinary}
    hub_before = cost(await served.graphql(QUERIES["citationsByYear"], {"id": HUB}))["requested"]
    conn = await asyncpg.connect(url)
    try:  # 10,000 more citations of the hub, from a paper that none of the ordinary ones is
        citing = await conn.fetchval("SELECT max(arxiv_id) FROM paper_snapshots WHERE NOT arxiv_id = ANY($1)",
                                     ordinary)
        at = await conn.fetchval("SELECT max(observed_at) FROM paper_snapshots")
        await conn.copy_records_to_table(
            "citation_observations",
            columns=["observation_id", "citing_arxiv_id", "reference_index", "source", "source_observed_at",
                     "cited_arxiv_id"],
            records=[(uuid.uuid4(), citing, 10_000 + i, "synthetic_pdf_text", at, HUB) for i in range(10_000)])
    finally:
        await conn.close()
    after = {a: {n: cost(b)["requested"] for n, b in (await prices(served, a)).items()} for a in ordinary}
    assert after == before
    hub_after = cost(await served.graphql(QUERIES["citationsByYear"], {"id": HUB}))["requested"]
    assert hub_after > hub_before  # the hub's own price follows its own size, read as the operation runs


async def test_the_hubs_citations_by_year_is_answered_and_its_timeline_refused_with_advice(hub_graph):
    served, _, _ = hub_graph
    found = await prices(served, HUB)
    body = found["citationsByYear"]
    assert "errors" not in body, body["errors"]
    assert sum(y["count"] for y in body["data"]["paper"]["citationsByYear"]) > 250
    assert cost(body)["requested"] >= cost(body)["actual"]
    for record in ("citationRecord", "paper.citationRecord"):  # its record is answered, priced by its size
        assert "errors" not in found[record], found[record]["errors"]
        assert cost(found[record])["requested"] >= cost(found[record])["actual"], cost(found[record])
    refused = found["timeline"]["errors"][0]
    assert refused["extensions"]["code"] == "QUERY_TOO_COSTLY", refused
    assert refused["extensions"]["cost"] > MAX_COST
    assert HUB in refused["message"] and "citationsByYear" in refused["message"], refused
    assert f"/paper/{HUB}/inbound.ndjson" in refused["message"]
    # What the hub's size puts over the limit names no alternative that is over it too.
    diff = found["recordDiff"]["errors"][0]
    assert diff["extensions"]["code"] == "QUERY_TOO_COSTLY" and "recordDiff" not in diff["message"].split("instead")[1]
    assert "recordDiff" not in refused["message"].split("instead")[1]
    # ... and what it names works: its citations page by page.
    page = await served.graphql('query($id: String!) { paper(arxivId: $id) { inbound(first: 100) { totalCount '
                                'edges { node { citingPaper { arxivId } } } } } }', {"id": HUB})
    assert "errors" not in page and page["data"]["paper"]["inbound"]["totalCount"] >= HUB_CITATIONS


async def test_a_paper_not_named_by_the_query_is_priced_as_the_largest(hub_graph):
    served, _, ordinary = hub_graph
    # Citing papers reached through a list are not known before the query runs: each is priced as the
    # largest paper could be (a bound), so this asks for the hub's size 100 times over.
    body = await served.graphql('query($id: String!) { paper(arxivId: $id) { inbound(first: 100) { nodes { '
                                'citingPaper { citationsByYear { year } } } } } }', {"id": ordinary[0]})
    assert body["errors"][0]["extensions"]["code"] == "QUERY_TOO_COSTLY"
    # The refusal says why, and names what prices each paper by its own size (a generic "lower first" would
    # not: one citing paper's citationsByYear is priced at the hub's size).
    message = body["errors"][0]["message"]
    assert "priced as the largest paper" in message and "papers(arxivIds:" in message, message
    many = await served.graphql('query($ids: [String!]!) { papers(arxivIds: $ids) { citationsByYear { year } } }',
                                {"ids": ordinary})
    assert "errors" not in many
    one = [cost(await served.graphql(QUERIES["citationsByYear"], {"id": a}))["requested"] for a in ordinary]
    assert cost(many)["requested"] <= sum(one)


FILTERED = """query($id: String!, $s: [ResolutionStatus!]) { paper(arxivId: $id) {
  inbound(first: 100, status: $s) { %s edges { node { observationId } } } } }"""


async def test_a_filtered_count_is_priced_and_charged_as_the_walk_of_the_papers_edges_it_is(hub_graph):
    """A status filter makes a paper's totalCount (and a page, when few edges pass) read every edge of the
    paper that way and probe each one's resolution: on the hub tens of thousands. It was priced and charged
    as a fixed count (nine aliases of 100 papers' filtered counts ran 7.3 s, priced at 486 points and charged
    36): now the price is the paper's own size, the charge the edges the count read, and what the hub's size
    puts over the limit is refused before it runs, naming how many of the papers fit."""
    served, _, ordinary = hub_graph
    counted = await served.graphql(FILTERED % "totalCount", {"id": HUB, "s": ["UNRESOLVED"]})
    assert "errors" not in counted, counted["errors"]
    c = cost(counted)
    # The count read each of the hub's 30,000 edges (a unit per 8 rows, each probed: twice that).
    assert c["actual"] >= 2 * HUB_CITATIONS // 8, c
    assert c["actual"] <= c["requested"] <= 3 * c["actual"] + 2_000, c
    # Without a filter the hub's total is its kept total: one probe, priced and charged as such.
    plain = cost(await served.graphql(FILTERED % "totalCount", {"id": HUB, "s": None}))
    assert plain["requested"] < c["requested"] // 10 and plain["actual"] < c["actual"] // 10, (plain, c)
    # An ordinary paper's filtered count is priced by its own few edges.
    small = cost(await served.graphql(FILTERED % "totalCount", {"id": ordinary[0], "s": ["UNRESOLVED"]}))
    assert small["requested"] < c["requested"] // 20, (small, c)
    # What the hub's size makes too costly is refused before it runs, with what fits.
    many = " ".join(f'a{i}: papers(arxivIds: $ids) {{ inbound(first: 1, status: [UNRESOLVED]) {{ totalCount }} }}'
                    for i in range(9))
    refused = await served.graphql("query($ids: [String!]!) { %s }" % many, {"ids": [HUB, *ordinary]})
    (error,) = refused["errors"]
    assert error["extensions"]["code"] == "QUERY_TOO_COSTLY", error
    assert refused["extensions"]["cost"]["statements"] <= 1  # the papers' sizes, read to price them
    # A paper reached through a list is priced as the largest could be, one way: its reference list at most
    # the longest there is (kept per paper), not the hub's citations. Browsing with each paper's retracted
    # references (recipe 1) stays admitted on a graph with a hub.
    listed = await served.graphql("{ browsePapers(first: 100) { nodes { arxivId "
                                  "outbound(citesRetracted: true, first: 1) { totalCount } } } }")
    assert "errors" not in listed, listed["errors"]
    assert cost(listed)["actual"] <= cost(listed)["requested"] <= MAX_COST


async def test_the_slice_a_refusal_names_is_admitted(hub_graph):
    """Priced at no paper's size, 25 papers' filtered pages were already over the limit, so their sizes were not
    read (a refusal reaches no database) and the refusal's "the first N fit" counted them at none: the slice it
    named was refused in turn, naming a smaller one. Such a refusal now says its N is at most; the refusal of
    that slice (whose sizes are read) names the slice that is admitted."""
    import re

    served, url, _ = hub_graph
    conn = await asyncpg.connect(url)
    try:
        ids = [r[0] for r in await conn.fetch(
            "SELECT arxiv_id FROM paper_observation_counts ORDER BY inbound DESC, arxiv_id LIMIT 60")]
    finally:
        await conn.close()
    query = ('query($ids: [String!]!) { papers(arxivIds: $ids) { inbound(first: 100, status: [UNRESOLVED]) { '
             'edges { node { referenceIndex citingPaper { arxivId title } resolution { status observedAt } '
             'standingNotice { state } } } } } }')
    refused = await served.graphql(query, {"ids": ids})
    (error,) = refused["errors"]
    assert error["extensions"]["code"] == "QUERY_TOO_COSTLY", error
    assert "at most the first" in error["message"], error["message"]
    bound = int(re.search(r"arxivIds\[0:(\d+)\]", error["message"]).group(1))
    again = await served.graphql(query, {"ids": ids[:bound]})
    if "errors" in again:  # the bound's refusal, by the papers' own sizes: exact
        (error,) = again["errors"]
        assert "at most" not in error["message"] and "fit the limit together" in error["message"], error
        fits = int(re.search(r"arxivIds\[0:(\d+)\]", error["message"]).group(1))
        assert fits < bound
        admitted = await served.graphql(query, {"ids": ids[:fits]})
        assert "errors" not in admitted, (fits, admitted["errors"])


PAGE = """query($id: String!, $after: String, $at: DateTime) { paper(arxivId: $id, asOf: $at) {
  inbound(first: 100, after: $after) { edges { node { observationId referenceIndex source
    citingPaper { arxivId } citedPaper { arxivId } resolution { status }
    standingNotice { state events { eventType source } } } } pageInfo { hasNextPage endCursor } } } }"""


async def test_browsing_most_cited_first_now_is_priced_as_the_walk_it_is(hub_graph):
    """INBOUND_COUNT_DESC now reads the kept totals, an index walk like the other orders: priced as they are,
    inline or from a variable; at an instant asked for (asOf), which may precede the kept totals and then
    counts every paper, the count is priced as well. Each price bounds the work done."""
    served, _, _ = hub_graph
    page = "{ nodes { arxivId } pageInfo { endCursor } }"
    found = {}
    for label, query, variables in [
            ("ARXIV_ID", "{ browsePapers(orderBy: ARXIV_ID, first: 100) %s }" % page, None),
            ("INBOUND_COUNT_DESC", "{ browsePapers(orderBy: INBOUND_COUNT_DESC, first: 100) %s }" % page, None),
            ("variable", "query($o: PaperOrder!) { browsePapers(orderBy: $o, first: 100) %s }" % page,
             {"o": "INBOUND_COUNT_DESC"}),
            ("asOf", '{ browsePapers(orderBy: INBOUND_COUNT_DESC, first: 100, asOf: "2026-03-01T00:00:00Z") %s }'
             % page, None)]:
        body = await served.graphql(query, variables)
        assert "errors" not in body, body
        found[label] = cost(body)
        assert found[label]["requested"] >= found[label]["actual"], (label, found[label])
    assert found["INBOUND_COUNT_DESC"]["requested"] == found["ARXIV_ID"]["requested"] == found["variable"]["requested"]
    assert found["asOf"]["requested"] > found["ARXIV_ID"]["requested"]


async def paged(served, arxiv_id: str, at: str) -> tuple[list[tuple], int]:
    """The whole inbound list paged through GraphQL, and what GraphQL charged for it (requested units)."""
    rows, after, charged = [], None, 0
    while True:
        body = await served.graphql(PAGE, {"id": arxiv_id, "after": after, "at": at})
        assert "errors" not in body, body["errors"]
        charged += body["extensions"]["cost"]["requested"]
        connection = body["data"]["paper"]["inbound"]
        for edge in connection["edges"]:
            n = edge["node"]
            notice = n["standingNotice"]
            latest = notice["events"][-1] if notice["state"] == "MEASURED" and notice["events"] else None
            rows.append(("arxiv:" + n["citingPaper"]["arxivId"], "arxiv:" + n["citedPaper"]["arxivId"],
                         n["observationId"], n["referenceIndex"], n["source"], n["resolution"]["status"].lower(),
                         notice["state"].lower(), latest["eventType"].lower() if latest else None,
                         latest["source"] if latest else None))
        if not connection["pageInfo"]["hasNextPage"]:
            return rows, charged
        after = connection["pageInfo"]["endCursor"]


async def test_the_bulk_route_streams_the_hubs_whole_list_equal_to_paging_it(hub_graph):
    import csv
    import io
    import json

    from app import bulk
    from app.export import EDGE_FIELDS

    served, url, ordinary = hub_graph
    conn = await asyncpg.connect(url)
    try:
        at = (await conn.fetchval("SELECT max(observed_at) FROM paper_snapshots")).strftime("%Y-%m-%dT%H:%M:%SZ")
    finally:
        await conn.close()
    statements = served.statements
    statements.clear()
    response = await served.client.get(f"/paper/{HUB}/inbound.ndjson", params={"as_of": at})
    assert response.status_code == 200 and response.headers["content-type"] == "application/x-ndjson"
    lines = [json.loads(line) for line in response.text.splitlines()]
    assert len(lines) >= HUB_CITATIONS and all(list(line) == ["type", *EDGE_FIELDS] for line in lines)
    # Keyset batches, never one read of the whole list: the size read, the paper, a page and the works'
    # standing per batch.
    pages = [q for q in statements.counted if "LIMIT $6" in q]
    assert len(pages) == len(lines) // bulk.BATCH + 1, len(pages)
    expected, paging = await paged(served, HUB, at)
    assert [(e["source"], e["target"], e["observation_id"], e["reference_index"], e["citation_source"],
             e["resolution_status"], e["standing_state"], e["cited_work_event_type"], e["cited_work_event_source"])
            for e in lines] == expected
    # The same rows as CSV (the export's header), priced per row at a fraction of paging.
    as_csv = await served.client.get(f"/paper/{HUB}/inbound.csv", params={"as_of": at})
    table = list(csv.reader(io.StringIO(as_csv.text)))
    assert table[0] == list(EDGE_FIELDS) and [r[2] for r in table[1:]] == [e[2] for e in expected]
    requested = int(as_csv.headers["x-cost-requested"])
    assert len(expected) <= requested <= paging / 5, (requested, paging)
    if bulk.parquet_available():
        import pyarrow.parquet as pq

        parquet = await served.client.get(f"/paper/{HUB}/inbound.parquet", params={"as_of": at})
        read = pq.read_table(io.BytesIO(parquet.content))
        assert read.column_names == list(EDGE_FIELDS) and read.column("observation_id").to_pylist() == \
            [e[2] for e in expected]


async def test_the_bulk_route_refuses_what_it_cannot_answer(hub_graph):
    served, _, ordinary = hub_graph
    for path, status, words in ((f"/paper/{HUB}/inbound.xml", 404, "inbound.ndjson"),
                                ("/paper/9912.99999/outbound.ndjson", 404, "no paper"),
                                ("/paper/not-an-id/inbound.ndjson", 400, "arXiv"),
                                (f"/paper/{HUB}/inbound.csv?as_of=yesterday", 400, "")):
        response = await served.client.get(path, headers={"accept": "application/json"})
        assert response.status_code == status, (path, response.text)
        assert words in response.text
    outbound = await served.client.get(f"/paper/{ordinary[0]}/outbound.ndjson")
    assert outbound.status_code == 200
    rows = [line for line in outbound.text.splitlines()]
    body = await served.graphql('query($id: String!) { paper(arxivId: $id) { outbound { totalCount } } }',
                                {"id": ordinary[0]})
    assert len(rows) == body["data"]["paper"]["outbound"]["totalCount"]


async def test_a_timeline_over_the_limit_is_told_the_page_that_fits():
    """A paper whose 100-entry timeline is over the limit but a shorter page is not (a few thousand
    observations): the refusal names the page size that fits, and that page is admitted."""
    from graphql import parse

    from app.cost import DataScale, PaperSize, operation_price, refusal
    from app.schema import schema

    query = ('{ paper(arxivId: "1501.00002") { timeline(first: 100) { edges { cursor node { at kinds contextDigest } }'
             ' pageInfo { hasNextPage endCursor } } } }')
    sizes = {"1501.00002": PaperSize(inbound=4_164, outbound=58)}
    refused = refusal(operation_price(schema._schema, parse(query), None, {}, DataScale(), sizes=sizes))
    assert refused is not None and "timeline(first: " in refused.message, refused
    fits = int(refused.message.split("timeline(first: ")[1].split(")")[0])
    assert 1 <= fits < 100
    shorter = query.replace("first: 100", f"first: {fits}")
    assert refusal(operation_price(schema._schema, parse(shorter), None, {}, DataScale(), sizes=sizes)) is None


async def test_measurements_are_priced_at_least_the_work_they_do(hub_graph):
    """A paper's externalCitationMeasurements is a list with no cap of its own (one a source that counted it):
    priced by the sources the data holds (its statistics), each item a row and an object, so a hundred
    papers' measurements are not admitted at half their work."""
    served, url, _ = hub_graph
    conn = await asyncpg.connect(url)
    try:
        ids = [r[0] for r in await conn.fetch("SELECT DISTINCT arxiv_id FROM external_measurements ORDER BY 1 LIMIT 100")]
    finally:
        await conn.close()
    assert len(ids) == 100
    for selection in ("source count observedAt", "source count observedAt byYear { year count }"):
        body = await served.graphql('query($ids: [String!]!) { papers(arxivIds: $ids) { externalCitationMeasurements '
                                    '{ %s } } }' % selection, {"ids": ids})
        assert "errors" not in body, body
        assert sum(len(p["externalCitationMeasurements"]) for p in body["data"]["papers"]) > 150
        assert cost(body)["requested"] >= cost(body)["actual"], (selection, cost(body))


async def test_a_stalled_download_is_dropped_with_its_unsent_bytes(hub_graph):
    """A reader of the hub's list that never reads (its buffers full): the server gives the list up after
    LIST_STALL_SECONDS and drops the connection at once, unsent bytes and all (a reset), rather than close
    it gracefully and wait, socket and buffers held, for a reader that never comes (as it did: still open
    75 s later); the list is never mistaken for whole."""
    import socket

    from app.limits import LIST_STALL_SECONDS
    from tests.conftest import LiveServer

    _, url, _ = hub_graph
    server = await asyncio.to_thread(LiveServer, url)
    try:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
        sock.connect(("127.0.0.1", server.port))
        sock.sendall(f"GET /paper/{HUB}/inbound.ndjson HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        await asyncio.sleep(LIST_STALL_SECONDS * 3)  # (the list's whole bound is the deadline and 30 s more)
        received, reset = b"", False
        sock.settimeout(30)
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except ConnectionResetError:
            reset = True
        finally:
            sock.close()
        assert reset, f"closed gracefully after {len(received)} bytes: the unsent ones were kept for the reader"
        assert not received.endswith(b"0\r\n\r\n")
    finally:
        server.stop()


async def test_refusals_name_what_fits_instead_for_many_ids_and_a_hubs_history():
    """Two refusals told what does not fit: papers(arxivIds: [...]) { timeline } "up to 100 ids" when a dozen
    fit; a hub's timeline or recordDiff, with no word of the two records a client can compare. Each now says
    what is admitted, and that is."""
    from graphql import parse

    from app.cost import DataScale, PaperSize, operation_price, refusal
    from app.schema import schema

    ids = [f"1501.{n:05d}" for n in range(1, 41)]
    sizes = {i: PaperSize(inbound=300, outbound=40) for i in ids}
    query = 'query($ids: [String!]!) { papers(arxivIds: $ids) { timeline(first: 10) { nodes { at contextDigest } } } }'
    refused = refusal(operation_price(schema._schema, parse(query), None, {"ids": ids}, DataScale(), sizes=sizes))
    assert refused is not None and "arxivIds[0:" in refused.message, refused
    fits = int(refused.message.split("arxivIds[0:")[1].split("]")[0])
    assert 1 <= fits < len(ids), refused.message
    assert refusal(operation_price(schema._schema, parse(query), None, {"ids": ids[:fits]}, DataScale(),
                                   sizes=sizes)) is None
    assert refusal(operation_price(schema._schema, parse(query), None, {"ids": ids[:fits + 1]}, DataScale(),
                                   sizes=sizes)) is not None
    hub = {"1501.00001": PaperSize(inbound=27_886, outbound=23)}
    for asked in ('timeline(first: 1, from: "2026-06-01T00:00:00Z") { nodes { at } }',):
        query = '{ paper(arxivId: "1501.00001") { %s } }' % asked
        refused = refusal(operation_price(schema._schema, parse(query), None, {}, DataScale(), sizes=hub))
        assert refused is not None and "citationRecord(arxivId: \"1501.00001\", asOf:)" in refused.message, refused
    diff = '{ recordDiff(arxivId: "1501.00001", from: "2026-06-01T00:00:00Z", to: "2026-06-02T00:00:00Z") { toContextDigest } }'
    refused = refusal(operation_price(schema._schema, parse(diff), None, {}, DataScale(), sizes=hub))
    assert refused is not None and "citationRecord(arxivId: \"1501.00001\", asOf:)" in refused.message, refused
    two = ('{ a: citationRecord(arxivId: "1501.00001", asOf: "2026-06-01T00:00:00Z") { contextDigest } '
           'b: citationRecord(arxivId: "1501.00001", asOf: "2026-06-02T00:00:00Z") { contextDigest } }')
    assert refusal(operation_price(schema._schema, parse(two), None, {}, DataScale(), sizes=hub)) is None
