"""The plan cache (app/graphql/plan.py) answers over HTTP exactly as the pipeline does, byte for byte.

Two servers over one database: one answering learned documents from their plans, one without plans
(PITH_PREPARED_FAST_PATH=0). Every request goes twice to the first (the first time the pipeline answers it
and its plan is kept, the second time the plan answers) and once to the second; status, headers and body
must be the same. Both enter the same view and build their responses with the same function; what differs
is the execution (one compiled statement against Strawberry's resolvers), and what the plan decides before
it (variables, price, arguments).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from datetime import timedelta, timezone

import asyncpg
import pytest
import pytest_asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.settings import Settings
from tests.conftest import StatementLog, assert_settled, drop_database, papers_of, serve, synthetic_database
from tests.test_compiled import EXAMPLES, selections

pytestmark = pytest.mark.asyncio(loop_scope="session")

Q2 = "query($id: String!, $at: DateTime) { paper(arxivId: $id, asOf: $at) { title } }"
Q1 = """query($id: String!, $at: DateTime) { paper(arxivId: $id, asOf: $at) { title snapshotObservedAt
  inbound(first: 100) { totalCount edges { node { referenceIndex citingPaper { arxivId title snapshotObservedAt }
  resolution { status observedAt } } } } } }"""


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def pair(admin_url):
    url = await synthetic_database(admin_url, "pith_test_fastpath", 300, 23)
    try:
        conn = await asyncpg.connect(url)
        try:
            await conn.execute("UPDATE paper_snapshots SET title = 'quote \" slash \\ 漢字 🚀 \u2028' WHERE arxiv_id = "
                               "(SELECT min(arxiv_id) FROM paper_snapshots)")
            low, high = await conn.fetchrow("SELECT min(observed_at), max(observed_at) FROM paper_snapshots")
        finally:
            await conn.close()
        papers, (hub, *_) = await papers_of(url)
        async with servers(url) as (fast, slow):
            yield fast, slow, papers, hub, low, high, url
    finally:
        await drop_database(admin_url, url)


@contextlib.asynccontextmanager
async def servers(url: str, expect_5xx: bool = False, **settings):
    """Two servers over one database: with prepared operations, and without."""
    log = StatementLog()
    running = [serve(url, log, Settings(database_url=url, prepared_fast_path=fast, **settings), expect_5xx=expect_5xx)
               for fast in (True, False)]
    started = []
    try:
        for server in running:
            started.append(await server.__anext__())
        yield tuple(started)
    finally:
        for server in running[:len(started)]:
            await server.aclose()


def comparable(response) -> tuple:
    """Status, headers and body, with what differs per request (its id) taken out."""
    headers = sorted((k, v) for k, v in response.headers.multi_items() if k not in ("x-request-id", "content-length"))
    raw = response.content
    body = re.sub(rb'"requestId":"[0-9a-f]+"', b'"requestId":"-"', raw)
    encoded = response.headers.get("content-encoding")
    return response.status_code, headers, encoded, body


async def both(pair, body, headers=None) -> tuple:
    fast, slow = pair[0], pair[1]
    before = fast.app.state.pith.plans.answered
    first = await fast.client.post("/graphql", content=body, headers=headers)
    second = await fast.client.post("/graphql", content=body, headers=headers)
    reference = await slow.client.post("/graphql", content=body, headers=headers)
    assert comparable(first) == comparable(reference)
    assert comparable(second) == comparable(reference), (body, second.text[:500], reference.text[:500])
    answered = fast.app.state.pith.plans.answered - before
    return reference, answered


HEADERS = st.fixed_dictionaries({
    "content-type": st.sampled_from(["application/json", "application/json; charset=utf-8", "text/plain"]),
}, optional={
    "accept": st.sampled_from(["application/json", "application/graphql-response+json", "*/*", "text/html",
                               "application/graphql-response+json;q=0.5, application/json", "text/event-stream"]),
    "accept-encoding": st.sampled_from(["gzip", "identity", "gzip, deflate, br"]),
})


@pytest.fixture
def seen():
    """What the comparison's examples drew, checked once they have all run: not trivial."""
    seen = {"requests": 0, "answered": 0, "errors": 0, "gzip": 0}
    yield seen
    assert seen["answered"] >= seen["requests"] // 5, seen
    assert seen["errors"] >= seen["requests"] // 5 and seen["gzip"] >= 3, seen


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(data=st.data())
async def test_prepared_answers_equal_the_full_stack(pair, seen, data):
    papers, low, high = pair[2], pair[4], pair[5]
    query = data.draw(st.sampled_from([Q1, Q2]) | selections())
    at = data.draw(st.sampled_from([None, low, high - timedelta(days=1), "yesterday", 12]))
    arxiv_id = data.draw(st.sampled_from(papers) | st.sampled_from(["9912.99999", "not an id", None]))
    variables = {"id": arxiv_id, "at": at.astimezone(timezone.utc).isoformat() if hasattr(at, "isoformat") else at}
    if "$first" in query:
        variables["first"] = data.draw(st.sampled_from([1, 100, 0, 101, "3"]))
    if "$after" in query:
        variables["after"] = data.draw(st.sampled_from([None, "bm90IGEgY3Vyc29y", "WyJpbiJd"]))
    request = {"query": query, "variables": variables}
    if data.draw(st.booleans()):
        request["operationName"] = data.draw(st.sampled_from([None, "", "Other"]))
    response, answered = await both(pair, json.dumps(request).encode(), data.draw(HEADERS))
    seen["requests"] += 1
    seen["answered"] += answered
    seen["errors"] += b'"errors"' in response.content
    seen["gzip"] += response.headers.get("content-encoding") == "gzip"


async def test_q1_and_q2_are_answered_by_the_prepared_path_in_one_statement(pair):
    fast, papers, hub = pair[0], pair[2], pair[3]
    for query, arxiv_id in ((Q2, papers[7]), (Q1, papers[9]), (Q1, hub)):
        body = json.dumps({"query": query, "variables": {"id": arxiv_id}}).encode()
        response, answered = await both(pair, body, {"content-type": "application/json", "accept-encoding": "gzip"})
        assert answered >= 1
        payload = response.json()  # httpx undoes the gzip; the header says it was there
        assert (response.headers.get("content-encoding") == "gzip") == (query == Q1)
        assert "errors" not in payload and payload["data"]["paper"]["title"]
        assert payload["extensions"]["cost"]["statements"] == 1
    ready = (await fast.client.get("/readyz")).json()
    assert ready["prepared"]["documents"] >= 2 and ready["prepared"]["answered"] >= 3


@pytest.mark.parametrize("body", [
    b'{"query": "query($id: String!) { paper(arxivId: $id) { title } }", "variables": {"id": "1501.00001"}, '
    b'"extensions": {"persistedQuery": {"version": 1, "sha256Hash": "00"}}}',
    b'{"query": "query($id: String!) { paper(arxivId: $id) { title } }", "variables": {"id": "1501.00001"}, "x": 1}',
    b'{"query": "query($id: String!) { paper(arxivId: $id) { title } }", "variables": ["1501.00001"]}',
    b'{"query": "query($id: String!) { paper(arxivId: $id) { title } }", "variables": {"id": NaN}}',
    b'{"query": "query($id: String!) { paper(arxivId: $id) { title } }", "variables": {"id": 1e999}}',
    b'{"query": "query($id: String!) { paper(arxivId: $id) { title } }", "variables": {"id": "\\ud800"}}',
    b'\xef\xbb\xbf{"query": "query($id: String!) { paper(arxivId: $id) { title } }", "variables": {"id": "x"}}',
    b'{"query": "query($id: String!) { paper(arxivId: $id) { title } }", "variables": {"id": "1501.00001", '
    b'"pad": "' + b"x" * 20_100 + b'"}}',
    b'{"query": "query($id: String!) { paper(arxivId: $id) { title } }", "variables": {"id": "1501.00001", '
    b'"pad": "' + b"x" * 100_100 + b'"}}',
    b'{"query": "query A($id: String!) { paper(arxivId: $id) { title } } query B { paper(arxivId: \\"x\\") '
    b'{ title } }", "operationName": "A", "variables": {"id": "1501.00001"}}',
])
async def test_odd_requests_get_the_full_stacks_answer(pair, body):
    """Learn the document first (a well-formed request), then send the odd one: same answer as without the path."""
    query = json.loads(body.lstrip(b"\xef\xbb\xbf").replace(b"NaN", b"0").replace(b"1e999", b"0"))["query"]
    for _ in range(2):
        await pair[0].client.post("/graphql", json={"query": query, "variables": {"id": pair[2][0]},
                                                    "operationName": "A" if "query A" in query else None})
    await both(pair, body, {"content-type": "application/json"})


async def test_a_failing_statement_answers_as_the_full_stack_does(pair, admin_url):
    """A statement timeout: the same 503, data and error path either way (no second try of the statement)."""
    url = pair[6]
    async with servers(url, expect_5xx=True, statement_timeout_ms=300) as (fast, slow):
        body = json.dumps({"query": Q2, "variables": {"id": pair[2][3]}}).encode()
        headers = {"content-type": "application/json"}
        await fast.client.post("/graphql", content=body, headers=headers)  # prepared
        locker = await asyncpg.connect(url)
        try:
            transaction = locker.transaction()
            await transaction.start()
            await locker.execute("LOCK TABLE paper_snapshots IN ACCESS EXCLUSIVE MODE")
            before = fast.app.state.pith.plans.answered
            answers = [await s.client.post("/graphql", content=body, headers=headers) for s in (fast, slow)]
            assert fast.app.state.pith.plans.answered == before + 1
            await transaction.rollback()
        finally:
            await locker.close()
    assert comparable(answers[0]) == comparable(answers[1])
    assert answers[0].status_code == 503 and "statement timeout" in answers[0].text


async def test_requests_cancelled_mid_statement_give_their_connections_back(pair):
    """A prepared request cancelled at any moment (a client gone, a shutdown) leaves the pool whole."""
    fast, hub = pair[0], pair[3]
    app = fast.app
    body = json.dumps({"query": Q1, "variables": {"id": hub}}).encode()
    await fast.client.post("/graphql", content=body, headers={"content-type": "application/json"})

    async def one() -> None:
        sent = False

        async def receive():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            await asyncio.sleep(3600)

        async def send(message):
            return None

        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
                 "scheme": "http", "path": "/graphql", "raw_path": b"/graphql", "query_string": b"",
                 "root_path": "", "headers": [(b"content-type", b"application/json"), (b"host", b"testserver")],
                 "client": ("127.0.0.1", 1), "server": ("testserver", 80), "state": {}, "app": app}
        await app(scope, receive, send)

    before = app.state.pith.plans.answered
    for delay in [0, 0.0005, 0.001, 0.002, 0.004] * 8:
        tasks = [asyncio.ensure_future(one()) for _ in range(5)]
        await asyncio.sleep(delay)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.sleep(0.5)
    await assert_settled(app.state.pith.pool, pair[6])
    response = await fast.client.post("/graphql", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 200 and app.state.pith.plans.answered > before


async def test_with_cors_configured_prepared_answers_carry_the_same_headers(pair):
    """CORS wraps the view, plans included: an allowed origin gets the same headers either way."""
    origins = ("https://app.example.org",)
    async with servers(pair[6], cors_origins=origins) as (fast, slow):
        body = json.dumps({"query": Q2, "variables": {"id": pair[2][5]}}).encode()
        for origin in ("https://app.example.org", "https://elsewhere.example"):
            headers = {"content-type": "application/json", "origin": origin}
            await both((fast, slow), body, headers)
            answered = fast.app.state.pith.plans.answered
            response = await fast.client.post("/graphql", content=body, headers=headers)
            assert fast.app.state.pith.plans.answered == answered + 1
            allowed = response.headers.get("access-control-allow-origin")
            assert allowed == (origin if origin in origins else None)


async def test_a_prepared_operation_waits_for_a_costly_slot_only_within_its_deadline(pair):
    """A prepared lookup priced over LIGHT_COST waits for one of the process's costly slots as the pipeline's
    admission does, and no longer than the request's deadline: with every slot held past it, both paths answer
    SERVICE_UNAVAILABLE (503: the server busy), byte for byte alike, and the prepared path answered it (it did not hand it on to wait again)."""
    from app.limits import COSTLY_SLOTS, LIGHT_COST

    async with servers(pair[6], expect_5xx=True, request_timeout=0.5) as (fast, slow):
        body = json.dumps({"query": Q1, "variables": {"id": pair[3]}}).encode()
        headers = {"content-type": "application/json"}
        prepared = await fast.client.post("/graphql", content=body, headers=headers)
        assert prepared.json()["extensions"]["cost"]["requested"] > LIGHT_COST  # it takes a costly slot
        # (read once by the other too: a refusal is charged its reading, which is then none on both)
        assert (await slow.client.post("/graphql", content=body, headers=headers)).status_code == 200
        held = [server.app.state.pith.governor.costly for server in (fast, slow)]
        for semaphore in held:
            for _ in range(COSTLY_SLOTS):
                await semaphore.acquire()
        try:
            answered = fast.app.state.pith.plans.answered
            late = await asyncio.wait_for(fast.client.post("/graphql", content=body, headers=headers), 30)
            assert fast.app.state.pith.plans.answered == answered + 1
            reference = await slow.client.post("/graphql", content=body, headers=headers)
            # Said for what it is: the server busy, the request never started (no "ask for less": the same request
            # fits later), 503 with Retry-After.
            assert late.status_code == 503 and late.headers["retry-after"], late.headers
            error = late.json()["errors"][0]
            assert error["extensions"]["code"] == "SERVICE_UNAVAILABLE", error
            assert "did not start" in error["message"] and error["extensions"]["retryAfter"] > 0, error
            assert comparable(late) == comparable(reference)
        finally:
            for semaphore in held:
                for _ in range(COSTLY_SLOTS):
                    semaphore.release()
        again = await fast.client.post("/graphql", content=body, headers=headers)
        assert "errors" not in again.json() and fast.app.state.pith.plans.answered == answered + 2
