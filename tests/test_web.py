"""The web face: ledger golden text, pages, integrity, evidence, HTTP conventions."""

from __future__ import annotations

import gzip
import json
import re
from html.parser import HTMLParser

import asyncpg
import pytest

from loaders.rows import STATUSES
from tests.conftest import AUG9_AS_OF, SEED_AS_OF, ROOT, StatementLog, serve, seed_bytes
from tests.graphs import BASE, Graph

pytestmark = pytest.mark.asyncio(loop_scope="session")

LEDGER_GOLDEN = ROOT / "tests" / "data" / "ledger-2402.15627-2026-08-09.txt"


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self.hidden = 0

    def handle_starttag(self, tag, attrs):
        if tag in ("head", "script", "style", "template"):
            self.hidden += 1

    def handle_endtag(self, tag):
        if tag in ("head", "script", "style", "template"):
            self.hidden -= 1

    def handle_data(self, data):
        if not self.hidden:
            self.parts.append(data)


def visible_text(html: str) -> str:
    parser = _Text()
    parser.feed(html)
    return "".join(parser.parts)


def squeeze(text: str) -> str:
    return re.sub(r"\s+", "", text)


def ledger_text(doc: dict) -> str:
    """The spec's ledger text of a v1 document, written from the spec, independently of the page code."""
    def sp(name: str) -> str:
        return name.replace("_", " ")

    lines = ["Paper Citation Record · LEDGER", doc["paper"]["title"], doc["thesis"], doc["refusal"], doc["schema"],
             f'{doc["paper"]["arxiv_id"]} v{doc["paper"]["latest_version"]}', "Coverage vector"]
    for lane in doc["coverage"]:
        lines.append(f'{lane["state"]} {lane["records_observed"]} of {lane["denominator"]} {sp(lane["lane"])}')
        lines.append(lane["note"])
        observed = f', observed {lane["source_observed_at"]}' if lane["source_observed_at"] else ""
        lines.append(f'Source: {lane["source"]}{observed}')
    rr = doc["reference_resolution"]
    lines += ["Reference resolution", f'{rr["displayed"]} of {rr["total_outbound_references"]} outbound references displayed']
    lines += [f"{sp(s)} {rr['state_counts'][s]}" for s in STATUSES]
    lines.append("External citation measurements")
    for m in doc["external_citation_measurements"]:
        lines += [str(m["count"]), f'{m["source"]}, observed {m["observed_at"]}']

    def observation(o: dict, direction: str) -> None:
        c = o["citation"]
        lines.append(f'Observation {o["observation_id"]} · {direction}')
        lines.append(f'{c["citing_paper"]["title"]} cites this paper.' if direction == "inbound"
                     else f'This paper cites {c["cited_work"]["title"]}.')
        lines.append(c["citing_paper"]["title"] + " " + (c["cited_paper"]["title"] if c["cited_paper"] else ""))
        lines.append(f'Reference {c["reference_index"]}')
        r = o["resolution"]
        lines.append(f'Resolution: {sp(r["status"])}; {r["resolver_source"] or "no resolver link"}, observed {r["observed_at"]}')
        lines.append("Source-reported events for the cited work")
        n = o["standing_notice"]
        lines.append(n["observation"] if n["state"] == "measured" else f'Unavailable: {sp(n["reason"])}.')
        for e in n["events"]:
            lines.append(f'{e["event_type"]} reported by {e["source"]} on {e["reported_at"] or "an unknown date"}')

    lines.append("Outbound references")
    if not doc["outbound"]:
        lines.append("No outbound reference observations are available for this paper version.")
    for o in doc["outbound"]:
        observation(o, "outbound")
    lines.append("Pith citing papers")
    for o in doc["inbound"]:
        observation(o, "inbound")
    return "\n".join(lines)


async def test_ledger_golden_text_of_9_august(served):
    response = await served.client.get("/paper/2402.15627/citation-record", params={"as_of": AUG9_AS_OF},
                                       headers={"accept": "text/html"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert squeeze(LEDGER_GOLDEN.read_text()) in squeeze(visible_text(response.text))


async def test_ledger_with_outbound_events_and_a_capped_inbound_list(empty_database, statements):
    g = Graph()
    root = g.paper("8900.00001", "A paper that cites a retracted work")
    g.measurements += [(root, "arxiv_reference", BASE, 3), (root, "openalex", BASE, 5)]
    for i in range(104):
        g.cite(g.paper(f"8901.{i:05d}"), root, 7)
    retracted = g.work(None, "A retracted study")
    g.receipts += [(retracted, "crossref", BASE), (retracted, "retraction_watch", BASE)]
    g.events.append((retracted, "retraction_watch", "retraction", BASE, BASE, "10.9999/notice.1"))
    g.events.append((retracted, "crossref", "expression_of_concern", BASE, None, None))
    g.cite(root, None, 1, work=retracted, status="verified_fuzzy")
    g.cite(root, g.paper("8902.00001", "A cited Pith paper"), 2)
    g.cite(root, None, 3, status="malformed_identifier", printed="Some printed title,")
    conn = await asyncpg.connect(empty_database)
    try:
        await g.write(conn)
    finally:
        await conn.close()
    async for s in serve(empty_database, statements):
        doc = json.loads((await s.client.get("/paper/8900.00001/citation-record.json")).content)
        assert doc["coverage"][2]["state"] == "capped" and len(doc["inbound"]) == 100
        assert len(doc["outbound"]) == 3
        page = (await s.client.get("/paper/8900.00001/citation-record", headers={"accept": "text/html"})).text
        assert squeeze(ledger_text(doc)) in squeeze(visible_text(page))
        assert "100 of 104 inbound" in doc["thesis"]
        # Events are shown prominently: an alert before the record, and the observation flagged.
        assert page.index('role="alert"') < page.index("Paper Citation Record")
        assert 'class="observation flagged"' in page
        assert '<time datetime="' in page and "<dl" in page and "<h1>" in page


async def test_paper_page_html_and_json(served):
    html = await served.client.get("/paper/2402.15627", params={"as_of": AUG9_AS_OF}, headers={"accept": "text/html"})
    assert html.status_code == 200
    text = visible_text(html.text)
    assert "MegaScale" in text and "v1" in text and "13" in text
    for link in ("/paper/2402.15627/citation-record?", "/paper/2402.15627/citation-record.json?", "/graphql?query="):
        assert link in html.text
    data = await served.client.get("/paper/2402.15627", params={"as_of": AUG9_AS_OF},
                                   headers={"accept": "application/json"})
    body = data.json()
    assert body["counts"]["inbound"] == 13 and body["paper"]["latest_version"] == 1
    assert body["record"]["thesis"].startswith("As of 9 August 2026")


async def test_home_search(served):
    response = await served.client.get("/", params={"q": "HybridFlow"}, headers={"accept": "text/html"})
    assert response.status_code == 200
    assert '/paper/2409.19256' in response.text
    assert "<form" in response.text and 'type="search"' in response.text


async def test_integrity_recomputes_every_digest(served):
    response = await served.client.get("/paper/2402.15627/integrity", params={"as_of": SEED_AS_OF})
    body = response.json()
    seed = json.loads(seed_bytes())
    assert body["all_match"] is True
    assert body["context_digest"] == {"stated": seed["context_digest"], "recomputed": seed["context_digest"],
                                      "matches": True}
    assert [c["stated"] for c in body["observations"]] == [o["observation_digest"] for o in seed["inbound"]]
    assert "sort_keys=True" in body["rules"]["canonical_json"]
    assert body["record_sha256"] == "sha256:" + __import__("hashlib").sha256(seed_bytes()).hexdigest()
    # A browser gets the same check as a page.
    page = await served.client.get("/paper/2402.15627/integrity", params={"as_of": SEED_AS_OF},
                                   headers={"accept": "text/html,application/xhtml+xml"})
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "Every digest matches" in page.text and seed["context_digest"] in page.text
    assert page.text.count('class="ok"') == len(seed["inbound"]) + len(seed["outbound"]) + 1


async def test_evidence_lists_sources_with_kind_and_time(served):
    body = (await served.client.get("/evidence", params={"as_of": SEED_AS_OF})).json()
    by_source = {(s["role"], s["source"]): s for s in body["sources"]}
    assert by_source[("standing", "crossref")]["kind"] == "live"
    assert by_source[("standing", "crossref")]["latest_observed_at"] == "2026-08-04T06:34:03.388597Z"
    assert by_source[("standing", "openalex_status_cache")]["kind"] == "cache"
    assert by_source[("measurement", "arxiv_reference")]["latest_observed_at"] == "2026-08-05T02:28:24.338817Z"
    assert ("resolution", "arxiv_id") in by_source
    html = await served.client.get("/evidence", headers={"accept": "text/html"})
    assert "<table>" in html.text and "retraction_watch" in html.text


@pytest.mark.parametrize(("path", "status", "says"), [
    ("/paper/2401.99999/citation-record", 404, "no paper 2401.99999"),
    ("/paper/2401.99999", 404, "no paper 2401.99999"),
    ("/paper/not-an-id/citation-record", 400, "hep-th/9901001"),
    ("/paper/2402.15627/citation-record?as_of=soon", 400, "2026-08-05T04:52:00Z"),
    ("/no/such/page", 404, "Not Found"),
])
async def test_error_pages_say_what_is_accepted(served, path, status, says):
    response = await served.client.get(path, headers={"accept": "text/html"})
    assert response.status_code == status
    assert response.headers["content-type"].startswith("text/html")
    assert says in visible_text(response.text)
    assert "Traceback" not in response.text
    json_response = await served.client.get(path, headers={"accept": "application/json"})
    assert json_response.status_code == status and json_response.json()["error"]["status"] == status


async def test_etags_and_304_on_records_and_pages(served):
    for path in ("/paper/2402.15627/citation-record", "/paper/2402.15627/citation-record.json", "/paper/2402.15627"):
        first = await served.client.get(path, params={"as_of": AUG9_AS_OF}, headers={"accept": "text/html"})
        etag = first.headers["etag"]
        assert etag.startswith('W/"') and "max-age" in first.headers["cache-control"]
        again = await served.client.get(path, params={"as_of": AUG9_AS_OF},
                                        headers={"accept": "text/html", "if-none-match": etag})
        assert again.status_code == 304 and again.headers["etag"] == etag
        other = await served.client.get(path, params={"as_of": SEED_AS_OF},
                                        headers={"accept": "text/html", "if-none-match": etag})
        assert other.status_code == 200


async def test_a_page_in_json_and_in_html_is_two_answers_to_caches(served):
    """A page that answers JSON or HTML by Accept says so to caches (Vary: Accept, the same caching rule for both),
    and each representation has its own validator: the HTML's ETag does not revalidate the JSON."""
    html = await served.client.get("/paper/2402.15627", params={"as_of": AUG9_AS_OF}, headers={"accept": "text/html"})
    as_json = await served.client.get("/paper/2402.15627", params={"as_of": AUG9_AS_OF},
                                      headers={"accept": "application/json"})
    assert html.headers["etag"] != as_json.headers["etag"]
    crossed = await served.client.get("/paper/2402.15627", params={"as_of": AUG9_AS_OF},
                                      headers={"accept": "application/json", "if-none-match": html.headers["etag"]})
    assert crossed.status_code == 200 and crossed.json()["paper"]["arxiv_id"] == "2402.15627"
    for accept in ("text/html", "application/json"):
        evidence = await served.client.get("/evidence", headers={"accept": accept})
        assert evidence.status_code == 200, evidence.text[:200]
        assert "accept" in evidence.headers["vary"].lower(), evidence.headers
        assert evidence.headers["cache-control"] == "public, max-age=60", evidence.headers


async def test_gzip_for_large_responses(served):
    response = await served.client.get("/paper/2402.15627/citation-record.json", params={"as_of": AUG9_AS_OF},
                                       headers={"accept-encoding": "gzip"})
    assert response.headers["content-encoding"] == "gzip"
    raw = await served.client.get("/paper/2402.15627/citation-record.json", params={"as_of": AUG9_AS_OF},
                                  headers={"accept-encoding": "identity"})
    assert "content-encoding" not in raw.headers
    assert json.loads(raw.content)["as_of"] == AUG9_AS_OF
    async with served.client.stream("GET", "/paper/2402.15627/citation-record.json", params={"as_of": AUG9_AS_OF},
                                    headers={"accept-encoding": "gzip"}) as streamed:
        compressed = b"".join([chunk async for chunk in streamed.aiter_raw()])
    assert gzip.decompress(compressed) == raw.content
    # ISA-L's deflate (app.compression): smaller than zlib's at the level it replaced, for a sixth of the CPU.
    assert len(compressed) < len(gzip.compress(raw.content, compresslevel=1))


async def test_graphql_over_get_and_graphiql_page(served):
    response = await served.client.get("/graphql", params={"query": '{ paper(arxivId: "2402.15627") { title } }'})
    assert response.status_code == 200
    assert response.json()["data"]["paper"]["title"].startswith("MegaScale")
    page = await served.client.get("/graphql", headers={"accept": "text/html"})
    assert page.status_code == 200
    assert "/static/vendor/graphiql.min.js" in page.text and "unpkg" not in page.text and "https://" not in page.text
    for asset in ("graphiql.min.js", "graphiql.min.css", "react.production.min.js", "react-dom.production.min.js"):
        assert (await served.client.get(f"/static/vendor/{asset}")).status_code == 200
    assert (ROOT / "app" / "web" / "static" / "vendor" / "LICENSE.graphiql").exists()


async def test_request_id_on_every_response(served):
    for path in ("/healthz", "/paper/2402.15627/citation-record.json", "/nope"):
        response = await served.client.get(path)
        assert re.fullmatch(r"[0-9a-f]{32}", response.headers["x-request-id"])
    given = await served.client.get("/healthz", headers={"x-request-id": "abc-123"})
    assert given.headers["x-request-id"] == "abc-123"


async def test_health_and_readiness(served):
    assert (await served.client.get("/healthz")).json() == {"status": "ok"}
    ready = await served.client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["status"] == "ready"


async def test_cors_is_off_by_default_and_configurable(database_url):
    from app.settings import Settings

    async for s in serve(database_url, StatementLog()):
        response = await s.client.get("/healthz", headers={"origin": "https://app.example"})
        assert "access-control-allow-origin" not in response.headers
    settings = Settings(database_url=database_url, cors_origins=("https://app.example",))
    async for s in serve(database_url, StatementLog(), settings):
        preflight = await s.client.options("/graphql", headers={
            "origin": "https://app.example", "access-control-request-method": "POST",
            "access-control-request-headers": "content-type"})
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == "https://app.example"
        response = await s.client.get("/paper/2402.15627/citation-record.json", headers={"origin": "https://app.example"})
        assert response.headers["access-control-allow-origin"] == "https://app.example"
        assert "etag" in response.headers["access-control-expose-headers"].lower()
        other = await s.client.get("/healthz", headers={"origin": "https://evil.example"})
        assert "access-control-allow-origin" not in other.headers



@pytest.mark.parametrize(("path", "says"), [
    # GraphQL's spelling of the instant: answered as of now before, silently; now refused, naming as_of.
    ("/paper/2402.15627/inbound.ndjson?asOf=2026-08-05T04:52:00Z", "asOf (did you mean as_of?): not a parameter of this route; it takes as_of"),
    ("/paper/2402.15627/citation-record.json?asOf=2026-08-05T04:52:00Z", "did you mean as_of?"),
    # A filter the list does not have: before, the whole list, unfiltered, charged.
    ("/paper/2402.15627/outbound.csv?status=UNRESOLVED", "status: not a parameter of this route; it takes as_of"),
    ("/graph/neighbourhood.ndjson?arxiv_id=2402.15627&perPaper=5", "did you mean per_paper?"),
    ("/evidence?asof=2026-08-05", "asof: not a parameter of this route; it takes as_of"),
])
async def test_a_parameter_a_route_does_not_take_is_refused_naming_those_it_takes(served, path, says):
    response = await served.client.get(path, headers={"accept": "application/json"})
    assert response.status_code == 400, response.text
    assert says in response.json()["error"]["message"]
    # What tools add to any URL passes: jQuery's cache buster and campaign tags.
    tools = await served.client.get("/paper/2402.15627/citation-record.json?_=1733550000000&utm_source=feed")
    assert tools.status_code == 200, tools.text
    # Every unknown parameter is named.
    both = await served.client.get("/graph/neighbourhood.ndjson?arxivId=2402.15627&perPaper=5")
    assert both.status_code == 400 and "arxivId (did you mean arxiv_id?); perPaper (did you mean per_paper?): " \
        "not parameters of this route" in both.json()["error"]["message"], both.text
    # A browser's page keeps its links' extra parameters (tracking, cache busting).
    page = await served.client.get("/paper/2402.15627?utm_source=feed&as_of=" + AUG9_AS_OF, headers={"accept": "text/html"})
    assert page.status_code == 200


async def test_an_instant_with_a_lowercase_t_and_z_is_the_same_instant(served):
    """RFC 3339 lets the T and the Z be lowercase; `2026-08-09t12:00:00z` was refused while a space for the T
    was taken."""
    upper, lower = AUG9_AS_OF, AUG9_AS_OF.replace("T", "t").replace("Z", "z")
    assert lower != upper
    query = 'query($at: DateTime) { paper(arxivId: "2402.15627", asOf: $at) { asOf inbound(first: 1) { totalCount } } }'
    answers = [await served.graphql(query, {"at": at}) for at in (upper, lower)]
    assert "errors" not in answers[1], answers[1]
    assert answers[0]["data"] == answers[1]["data"]
    record = await served.client.get("/paper/2402.15627/citation-record.json", params={"as_of": lower})
    assert record.status_code == 200 and record.json()["as_of"] == upper



async def test_a_route_refusing_its_parameters_costs_a_point_not_its_price(empty_database, statements):
    """A parameter typo on /graph/neighbourhood.csv took the route's whole price (300 points) for a 400: an
    anonymous hour gone in seventeen typos. A refusal costs a point, as every refusal does. (A database of its
    own: budgets are kept per address and hour in the database, and other tests' servers share 127.0.0.1.)"""
    from app.settings import Settings

    settings = Settings(database_url=empty_database, anonymous_points_per_hour=5_000)
    async for s in serve(empty_database, statements, settings):
        def left(response) -> int:
            return int(response.headers["ratelimit"].split("r=")[1].split(";")[0])

        first = await s.client.get("/graph/neighbourhood.csv?arxiv_id=2402.15627&foo=1")
        assert first.status_code == 400, first.text
        second = await s.client.get("/graph/neighbourhood.csv?arxiv_id=2402.15627&foo=1")
        assert left(first) - left(second) == 1, (first.headers["ratelimit"], second.headers["ratelimit"])
        looked = await s.client.get("/graph/neighbourhood.csv?arxiv_id=2402.15627")  # a walk begun: its price
        assert looked.status_code == 404 and left(second) - left(looked) > 1, looked.headers["ratelimit"]
