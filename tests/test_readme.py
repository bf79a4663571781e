"""Every GraphQL example in the README runs against the bundled sample without an error, and answers something."""

from __future__ import annotations

import asyncio
import json
import re

import httpx
import pytest
import pytest_asyncio

from tests.conftest import (ROOT, LiveServer, StatementLog, bundled_sample_database, drop_database, sample_database,
                            serve)
from tests.test_sources import pith

pytestmark = pytest.mark.asyncio(loop_scope="session")


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def bundled(admin_url):
    """The bundled sample as the embedded server loads it on first start, served."""
    url = await bundled_sample_database(admin_url, "pith_test_readme")
    try:
        async for served in serve(url, StatementLog()):
            yield served
    finally:
        await drop_database(admin_url, url)


def readme_examples() -> list[tuple[str, str]]:
    """Each example of the README's graphql blocks, with the comment above it."""
    text = (ROOT / "README.md").read_text()
    examples: list[tuple[str, str]] = []
    for block in re.findall(r"```graphql\n(.*?)```", text, flags=re.S):
        current: list[str] = []
        comment = ""
        for line in block.splitlines():
            if line.startswith("#"):
                if current:
                    examples.append((comment, "\n".join(current)))
                    current, comment = [], ""
                comment += line
                continue
            if not line.strip():
                continue
            if line.startswith("{") and current:
                examples.append((comment, "\n".join(current)))
                current = []
            current.append(line)
        if current:
            examples.append((comment, "\n".join(current)))
    return examples


EXAMPLES = readme_examples()
QUERIES = [query for _, query in EXAMPLES]
ABOUT_RETRACTIONS = re.compile(r"citesRetracted: true|retracted: true|EXPRESSION_OF_CONCERN")


def empty_parts(value, path: str = "") -> list[str]:
    """Where an answer is empty: a null root field, an empty edges/nodes list, a totalCount of 0."""
    found: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            here = f"{path}.{key}" if path else key
            if item is None and not path:
                found.append(here)
            elif key in ("edges", "nodes", "papers", "changes") and item == []:
                found.append(here)
            elif key == "totalCount" and item == 0:
                found.append(here)
            else:
                found += empty_parts(item, here)
    elif isinstance(value, list):
        for item in value[:1]:
            found += empty_parts(item, path + "[0]")
    return found


async def test_the_readme_has_examples():
    assert len(QUERIES) >= 12


PLACEHOLDERS = {  # what a reader pastes in: the values the examples before them answer
    "<endCursor>": ('{ paper(arxivId: "2402.15627") { inbound(first: 5) { pageInfo { endCursor } } } }',
                    ("paper", "inbound", "pageInfo", "endCursor")),
    "<startCursor>": ('{ paper(arxivId: "2402.15627") { inbound(last: 5) { pageInfo { startCursor } } } }',
                      ("paper", "inbound", "pageInfo", "startCursor")),
    "<id>": ('{ paper(arxivId: "2402.15627") { id } }', ("paper", "id")),
}


async def filled(served, query: str) -> str:
    """The example with its placeholders replaced as a reader would (every placeholder must be known)."""
    for placeholder, (source, path) in PLACEHOLDERS.items():
        if placeholder in query:
            value = (await served.graphql(source))["data"]
            for key in path:
                value = value[key]
            query = query.replace(placeholder, value)
    assert not re.search(r"<[A-Za-z]+>", query), query
    return query


@pytest.mark.parametrize("query", QUERIES, ids=lambda q: q.split("(")[0][2:30])
async def test_a_readme_example_answers_without_errors(bundled, query):
    body = await bundled.graphql(await filled(bundled, query))
    assert "errors" not in body, body["errors"]
    assert any(value is not None for value in body["data"].values()), body["data"]


@pytest.mark.parametrize("query", QUERIES, ids=lambda q: q.split("(")[0][2:30])
async def test_a_readme_example_answers_something_on_the_bundled_sample(bundled, query):
    """Not an empty answer anywhere (a null paper, an empty list, a total of 0), the retraction examples included:
    the sample holds a real retracted work, a real expression of concern and a real paper citing the former."""
    body = await bundled.graphql(await filled(bundled, query))
    assert "errors" not in body, body["errors"]
    assert not empty_parts(body["data"]), (query, empty_parts(body["data"]), body["data"])


@pytest.mark.parametrize("query", QUERIES, ids=lambda q: q.split("(")[0][2:30])
async def test_a_readme_examples_price_bounds_its_work(bundled, query):
    """The price asked before it runs is at least the work it did (objects, rows and a share per
    statement sent), small lookups included: a statement is work however few rows it returns."""
    body = await bundled.graphql(await filled(bundled, query))
    cost = body["extensions"]["cost"]
    assert cost["requested"] >= cost["actual"], (query, cost)


async def test_the_retraction_examples_list_what_the_sources_say(bundled):
    """What the retraction examples answer on the bundled sample is the sources' word: Wakefield et al. 1998
    retracted by The Lancet's notice of 6 February 2010 (Crossref and Retraction Watch), cited by 2012.11475
    (OpenCitations), and the PLoS ONE paper of Neirinckx et al. under Retraction Watch's expression of concern."""
    about = [query for query in QUERIES if ABOUT_RETRACTIONS.search(query)]
    assert len(about) >= 5, about
    wakefield, notice = "10.1016/s0140-6736(97)11096-0", "10.1016/s0140-6736(10)60175-4"
    body = await bundled.graphql("""{ paper(arxivId: "2012.11475") { doi outbound(citesRetracted: true) {
        edges { node { source citedWork { doi standing { events { eventType source reportedAt noticeDoi } } } } } } }
      concern: works(filter: {eventType: EXPRESSION_OF_CONCERN, source: "retraction_watch"}) { nodes { doi } }
      retracted: works(filter: {retracted: true}) { nodes { doi } } }""")
    paper = body["data"]["paper"]
    assert paper["doi"] == "10.1007/s11192-021-04097-5"
    [edge] = paper["outbound"]["edges"]
    assert edge["node"]["source"] == "opencitations" and edge["node"]["citedWork"]["doi"] == wakefield
    events = edge["node"]["citedWork"]["standing"]["events"]
    retractions = {(e["source"], e["reportedAt"], e["noticeDoi"]) for e in events if e["eventType"] == "RETRACTION"}
    assert retractions == {(source, "2010-02-06T00:00:00Z", notice) for source in ("crossref", "retraction_watch")}
    assert body["data"]["concern"]["nodes"] == [{"doi": "10.1371/journal.pone.0064723"}]
    assert body["data"]["retracted"]["nodes"] == [{"doi": wakefield}]


async def test_the_readmes_curl_subscription_receives_the_citation_sample_citation_makes(admin_url):
    """The Live section's curl (SSE), sent as written, then `pith-graph sample-citation`, as the README says to
    see an event on the bundled sample: the event arrives with its edge and the connection's new total."""
    live_section = (ROOT / "README.md").read_text().split("## Live: subscriptions", 1)[1]
    curl = re.search(r"curl -N localhost:8000/graphql (.*?) \\\n\s*-d '(.*?)'\n", live_section, flags=re.S)
    assert curl and "accept: text/event-stream" in curl.group(1), live_section[:2000]
    assert "citationAdded" in curl.group(2), f"sample-citation makes a citationAdded event, not {curl.group(2)}"
    url = await sample_database(admin_url, "pith_test_readme_live")
    server = LiveServer(url)
    try:
        async with httpx.AsyncClient(base_url=server.base, timeout=60) as client:
            query = '{ paper(arxivId: "2402.15627") { inbound { totalCount } } }'
            read = await client.post("/graphql", json={"query": query})
            total = read.json()["data"]["paper"]["inbound"]["totalCount"]
            headers = {"accept": "text/event-stream", "content-type": "application/json"}
            async with client.stream("POST", "/graphql", content=curl.group(2), headers=headers) as stream:
                assert stream.status_code == 200, await stream.aread()
                # The curl has no `after`: wait until the server holds the subscription, or the event is missed.
                for _ in range(600):
                    if "\npith_subscriptions 1.0" in (await client.get("/metrics")).text:
                        break
                    await asyncio.sleep(0.1)
                made = await asyncio.to_thread(pith, "sample-citation", url=url)
                assert made.returncode == 0, made.stderr

                async def first_event() -> dict:
                    async for line in stream.aiter_lines():
                        if line.startswith("data: {"):
                            return json.loads(line[len("data: "):])
                    raise AssertionError("the stream ended without an event")

                event = await asyncio.wait_for(first_event(), 120)  # a bound, not a timing: a missed one hangs
        assert "errors" not in event, event
        added = event["data"]["citationAdded"]
        assert added["totalCount"] == total + 1 and added["cursor"] and added["edge"]["cursor"], added
        assert added["edge"]["node"]["citingPaper"]["arxivId"] in made.stdout.decode(), (added, made.stdout)
    finally:
        server.stop()
        await drop_database(admin_url, url)


async def test_the_readmes_codegen_config_is_the_tested_one():
    text = (ROOT / "README.md").read_text()
    assert (ROOT / "tests" / "frontend" / "codegen.ts").read_text().rstrip("\n") in text
