"""Every GraphQL example in the README runs against the sample data without an error."""

from __future__ import annotations

import asyncio
import json
import re

import httpx
import pytest

from tests.conftest import ROOT, LiveServer, StatementLog, drop_database, sample_database, serve
from tests.test_sources import imported, pith, rw_csv

pytestmark = pytest.mark.asyncio(loop_scope="session")


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
# The bundled sample has no retraction and no expression of concern (its works' events are none): the
# examples that filter on them answer empty lists there, as the README says.
SAYS_EMPTY = "answer empty lists on the bundled sample"
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
async def test_a_readme_example_answers_without_errors(served, query):
    body = await served.graphql(await filled(served, query))
    assert "errors" not in body, body["errors"]
    assert any(value is not None for value in body["data"].values()), body["data"]


@pytest.mark.parametrize(("comment", "query"), EXAMPLES,
                         ids=lambda e: e.split("(")[0][2:30] if e.startswith(("{", "query")) else "")
async def test_a_readme_example_answers_something_on_the_bundled_sample(served, comment, query):
    """Not an empty answer (a null paper, an empty list), except where the README says so, and why."""
    body = await served.graphql(await filled(served, query))
    assert "errors" not in body, body["errors"]
    empty = empty_parts(body["data"])
    assert bool(empty) is bool(ABOUT_RETRACTIONS.search(query)), (query, empty, body["data"])


async def test_the_examples_about_retractions_answer_once_retraction_watch_reports_one(admin_url, tmp_path):
    """The examples that answer empty on the bundled sample are not empty by their own fault: once a Retraction
    Watch file reports an expression of concern and a retraction of a work the sample's papers cite, each lists
    it. The rows are constructed in the published layout, in this test's own database only (no such event of the
    work is known, and the bundled sample holds none)."""
    doi = "10.48550/arxiv.2402.15627"  # the work the sample's citing papers cite
    row = {"Title": "MegaScale", "Journal": "arXiv", "OriginalPaperDOI": doi, "OriginalPaperDate": "2/23/2024 0:00"}
    rows = [{**row, "RetractionDate": "3/2/2026 0:00", "RetractionDOI": "10.9999/eoc",
             "RetractionNature": "Expression of concern"},
            {**row, "RetractionDate": "6/1/2026 0:00", "RetractionDOI": "10.9999/ret",
             "RetractionNature": "Retraction"}]
    csv_file = tmp_path / "retraction_watch.csv"
    csv_file.write_text(rw_csv(rows))
    about = [query for query in QUERIES if ABOUT_RETRACTIONS.search(query)]
    assert len(about) >= 5, about
    url = await sample_database(admin_url, "pith_test_readme_retracted")
    try:
        imported(url, "retraction-watch", str(csv_file), at="2026-08-10T00:00:00Z")
        async for served in serve(url, StatementLog()):
            for query in about:
                body = await served.graphql(query)
                assert "errors" not in body, (query, body["errors"])
                assert not empty_parts(body["data"]), (query, body["data"])
    finally:
        await drop_database(admin_url, url)


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


async def test_the_readme_says_which_examples_answer_empty_on_the_sample():
    assert SAYS_EMPTY in (ROOT / "README.md").read_text()


async def test_the_readmes_codegen_config_is_the_tested_one():
    text = (ROOT / "README.md").read_text()
    assert (ROOT / "tests" / "frontend" / "codegen.ts").read_text().rstrip("\n") in text
