"""A client's request rate is limited as well as its cost (app.governor.Pace): past its pace a request is
refused 429 (RATE_LIMITED, Retry-After) before it is read further, on GraphQL over HTTP, the prepared
path, HTTP streams and pages alike, and a WebSocket's messages wait their turn; each request counts once;
each refusal costs a point; other clients are not touched. The in-process tests stop the pace's clock, so
every count is exact.
"""

from __future__ import annotations

import asyncio
import json
import re
import time

import httpx
import pytest
import pytest_asyncio

from app.governor import Pace
from app.settings import Settings
from tests.conftest import LiveServer, serve, within_one_budget_hour

pytestmark = pytest.mark.asyncio(loop_scope="session")

PAPER = "2402.15627"
LOOKUP = {"query": "query($id: String!) { paper(arxivId: $id) { title } }", "variables": {"id": PAPER}}
RATE, BURST = 2, 4


class Stopped:
    """A clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest_asyncio.fixture(loop_scope="session")
async def paced(database_url, statements):
    settings = Settings(database_url=database_url, production=True, introspection=False, graphiql=False,
                        anonymous_points_per_hour=100_000, requests_per_second=RATE, trusted_proxies=("127.0.0.1",))
    async for s in serve(database_url, statements, settings):
        clock = Stopped()
        s.app.state.pith.governor.paces.clock = clock
        s.clock = clock
        yield s


def who(n: int) -> dict[str, str]:
    return {"x-forwarded-for": f"192.0.2.{n}"}


def remaining(response: httpx.Response) -> int:
    return int(re.search(r"r=(\d+)", response.headers["ratelimit"]).group(1))


def too_fast(response: httpx.Response) -> bool:
    if response.status_code != 429:
        return False
    assert int(response.headers["retry-after"]) >= 1, response.headers
    if response.headers["content-type"].startswith("application/json") and "errors" in response.text:
        (error,) = response.json()["errors"]
        assert error["extensions"]["code"] == "RATE_LIMITED", error
        assert error["extensions"]["requestsPerSecond"] == RATE and error["extensions"]["burst"] == BURST, error
        assert "requests a second" in error["message"], error
    return True


async def test_a_pace_gives_its_burst_then_its_rate():
    clock = Stopped()
    pace = Pace(2, clock=clock)
    assert pace.burst == 4
    assert [pace.take("a") for _ in range(4)] == [0.0] * 4
    assert pace.take("a") == pytest.approx(0.5)  # the wait until a token is free
    assert pace.take("b") == 0.0  # another client has its own
    clock.now += 0.5
    assert pace.take("a") == 0.0 and pace.take("a") > 0
    clock.now += 60
    assert [pace.take("a") for _ in range(5)].count(0.0) == 4  # never more than the burst


async def warm(client: httpx.AsyncClient) -> None:
    """The lookup's document read once (by a client of its own): a document's first reading costs its client
    tokens of its own (test_a_documents_reading_is_taken_against_the_pace); the counts below are of requests."""
    assert (await client.post("/graphql", json=LOOKUP, headers=who(99))).status_code == 200


async def test_a_client_past_its_pace_is_refused_before_its_request_is_read_and_others_are_not(paced):
    client = paced.client
    await warm(client)
    answers = await asyncio.gather(*(client.post("/graphql", json=LOOKUP, headers=who(1)) for _ in range(12)))
    ok = [a for a in answers if a.status_code == 200 and "errors" not in a.json()]
    assert len(ok) == BURST and sum(map(too_fast, answers)) == 12 - BURST, [a.status_code for a in answers]
    # Even a document that would fail is refused unread.
    broken = await client.post("/graphql", json={"query": "{ paper("}, headers=who(1))
    assert too_fast(broken) and "Syntax" not in broken.text
    # Another client is not touched; the first gets a token back as its rate gives it.
    assert (await client.post("/graphql", json=LOOKUP, headers=who(2))).status_code == 200
    paced.clock.now += 1 / RATE
    assert (await client.post("/graphql", json=LOOKUP, headers=who(1))).status_code == 200
    assert too_fast(await client.post("/graphql", json=LOOKUP, headers=who(1)))


async def test_each_refusal_costs_a_point(paced):
    await within_one_budget_hour(60)
    client = paced.client
    left = []
    for _ in range(BURST + 6):
        answer = await client.post("/graphql", json=LOOKUP, headers=who(3))
        assert answer.status_code in (200, 429), answer.text[:200]
        left.append(remaining(answer))
    assert all(b < a for a, b in zip(left, left[1:])), left  # every answer, refused or not, cost a point or more


async def test_pages_and_lists_are_paced_too(paced):
    client = paced.client
    for path in (f"/paper/{PAPER}/citation-record.json", f"/paper/{PAPER}/inbound.ndjson"):
        n = 4 + path.count("inbound")  # a client of its own for each
        answers = [await client.get(path, headers=who(10 + n)) for _ in range(BURST + 3)]
        assert [a.status_code for a in answers] == [200] * BURST + [429] * 3, (path, [a.status_code for a in answers])
        assert all(too_fast(a) for a in answers[BURST:])
        assert "requests a second" in answers[-1].json()["error"]["message"], answers[-1].text
        # a refusal carries the client's budget fields too, as every answer to a governed client does
        assert all("ratelimit" in a.headers and "ratelimit-policy" in a.headers for a in answers), path


async def test_a_head_of_a_list_reads_nothing_and_costs_nothing_but_its_pace(paced):
    """HEAD of a bulk list says what a GET would send (its type, its name, its price) without reading the
    list or charging it."""
    client = paced.client
    head = await client.head(f"/paper/{PAPER}/inbound.ndjson", headers=who(40))
    get = await client.get(f"/paper/{PAPER}/inbound.ndjson", headers=who(41))
    assert head.status_code == get.status_code == 200 and head.content == b"", head.headers
    assert "content-length" not in head.headers, head.headers  # (as its GET: streamed, its length unknown)
    for name in ("content-type", "content-disposition", "x-cost-points", "cache-control"):
        assert head.headers[name] == get.headers[name], name
    spent = int(get.headers["x-cost-points"])
    assert remaining(head) > remaining(get) or spent == 0, (head.headers, get.headers)


async def test_a_request_counts_once_on_the_prepared_path_and_over_a_stream(paced):
    client = paced.client
    state = paced.app.state.pith
    await warm(client)
    before = state.plans.answered
    # The full pipeline answers a lookup once; then the prepared path answers it (and falls back to the full
    # stack for a refusal, which must not count the request again).
    answers = [await client.post("/graphql", json=LOOKUP, headers=who(20)) for _ in range(BURST + 1)]
    assert [a.status_code for a in answers] == [200] * BURST + [429], [a.text[:100] for a in answers]
    assert state.plans.answered > before  # the prepared path did answer some
    assert too_fast(answers[-1])
    for _ in range(BURST):
        async with client.stream("POST", "/graphql", json=LOOKUP,
                                 headers={"accept": "text/event-stream", **who(21)}) as stream:
            body = (await stream.aread()).decode()
        assert stream.status_code == 200 and '"title"' in body and "RATE_LIMITED" not in body, body[:300]
    async with client.stream("POST", "/graphql", json=LOOKUP,
                             headers={"accept": "text/event-stream", **who(21)}) as stream:
        body = (await stream.aread()).decode()
    assert stream.status_code == 429 or "RATE_LIMITED" in body, body[:300]


async def test_a_websockets_messages_wait_their_turn_past_the_pace(empty_database):
    """On a WebSocket every message counts (operations, pings, subscriptions past the connection's limit alike):
    past the burst each waits its turn, so however fast a client sends, the server reads at its pace."""
    import websockets

    server = LiveServer(empty_database, env={"PITH_ENV": "production", "PITH_REQUESTS_PER_SECOND": "2"})
    try:
        async with websockets.connect(server.base.replace("http", "ws") + "/graphql",
                                      subprotocols=["graphql-transport-ws"]) as ws:
            started = time.monotonic()
            await ws.send(json.dumps({"type": "connection_init"}))
            assert json.loads(await ws.recv())["type"] == "connection_ack"
            for i in range(8):  # nine messages in all: a burst of four, then two a second
                await ws.send(json.dumps({"id": str(i), "type": "subscribe", "payload": {"query": "{ __typename }"}}))
                message = json.loads(await ws.recv())
                assert message["type"] == "next", message  # waited for, not refused
                assert json.loads(await ws.recv())["type"] == "complete"
            elapsed = time.monotonic() - started
        # The fifth to ninth messages waited half a second each (less what the burst's own time gave back).
        assert elapsed >= (9 - 4 - 1) / 2, elapsed
    finally:
        server.stop()


async def test_a_reservation_is_due_at_the_pace():
    clock = Stopped()
    pace = Pace(2, clock=clock)
    assert [pace.reserve("a") for _ in range(4)] == [0.0] * 4
    assert [pace.reserve("a") for _ in range(3)] == [0.5, 1.0, 1.5]  # each due half a second after the last
    clock.now += 1.5
    assert pace.reserve("a") == 0.5  # three of the debt paid, one more due


async def test_readiness_is_paced_and_shared_for_callers_who_are_not_operators(paced):
    """/readyz from the internet in production: paced like any request, and answered from one check a second
    that every such caller shares, so a flood of it sends no statement a request; an operator (loopback, no
    proxy hop) is answered from a fresh check with every figure."""
    client, log = paced.client, paced.statements
    await client.get("/readyz", headers=who(30))  # a check of its own, now shared for a second
    log.clear()
    answers = await asyncio.gather(*(client.get("/readyz", headers=who(31 + n % 3)) for n in range(3 * BURST)))
    assert [a.status_code for a in answers] == [200] * (3 * BURST), [a.text[:100] for a in answers]
    assert all(a.json() == {"status": "ready", "database": "reachable"} for a in answers), answers[0].text
    checks = len(log.counted)
    assert checks <= 4, log.counted  # at most one check more, should the second have passed meanwhile
    refused = await client.get("/readyz", headers=who(31))
    assert too_fast(refused) and "requests a second" in refused.json()["error"]["message"], refused.text
    assert len(log.counted) == checks  # a refusal sends nothing
    operator = await client.get("/readyz")
    assert operator.status_code == 200 and "pool" in operator.json(), operator.text
    assert len(log.counted) > checks  # checked afresh


async def test_a_documents_reading_is_taken_against_the_pace(paced):
    """A request's token buys a few milliseconds of its document's reading (parse and validation); what a document
    costs beyond that is taken from the client's pace, so distinct costly documents (no cache holds them) are paced
    by the time they take. Here a token buys next to nothing: one document spends the whole burst, and the client
    waits until its rate has paid it back; another client is not touched."""
    governor = paced.app.state.pith.governor
    governor.reading_seconds = 1e-9
    client = paced.client

    def distinct(n: int) -> dict:
        return {"query": "{ d%d %s }" % (n, " ".join(f"f{n}x{i}" for i in range(50)))}

    first = await client.post("/graphql", json=distinct(1), headers=who(40))
    assert first.status_code == 200 and "GRAPHQL_VALIDATION_FAILED" in first.text, first.text[:300]
    assert too_fast(await client.post("/graphql", json=distinct(2), headers=who(40)))
    assert (await client.post("/graphql", json=LOOKUP, headers=who(41))).status_code == 200  # another client
    paced.clock.now += BURST / RATE  # the burst's worth: still owed
    assert too_fast(await client.post("/graphql", json=distinct(3), headers=who(40)))
    paced.clock.now += 2 / RATE  # paid back, and a token more
    assert (await client.post("/graphql", json=LOOKUP, headers=who(40))).status_code == 200
