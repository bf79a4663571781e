"""Every operation owns its database session on every transport: opened when it starts, closed (the
connection back in the pool, no transaction left open) when it ends, however it ends. Queries, syntax
errors and refusals over SSE, multipart and both WebSocket protocols (several on one socket), then the
pool is checked from PostgreSQL's side and HTTP must still answer at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json

import asyncpg
import httpx
import pytest
import pytest_asyncio
import websockets

from tests.conftest import UNSPENDABLE, LiveServer

pytestmark = pytest.mark.asyncio(loop_scope="session")

PAPER = "2402.15627"
COMPILED = f'{{ paper(arxivId: "{PAPER}") {{ arxivId title }} }}'  # one compiled statement
ORDINARY = f'{{ paper(arxivId: "{PAPER}") {{ arxivId inbound(first: 3) {{ totalCount }} }} }}'  # several
BROKEN = "{ paper(arxivId: "  # a syntax error
LIVE = f'subscription {{ citationAdded(arxivId: "{PAPER}") {{ cursor }} }}'  # waits for imports: stopped
ROUNDS = 50
POOL = 4  # fewer connections than operations: one left behind shows at once


@pytest.fixture(scope="module")
def server(database_url):
    s = LiveServer(database_url, env={"PITH_POOL_MAX": str(POOL), "PITH_REQUEST_TIMEOUT": "10"})
    yield s
    s.stop()


def queries() -> list[str]:
    return [COMPILED if i % 2 == 0 else ORDINARY for i in range(ROUNDS)]


async def sse(client: httpx.AsyncClient, base: str, query: str) -> list[dict]:
    """The payloads of one operation over SSE (distinct connections mode), until `complete`."""
    payloads: list[dict] = []
    async with client.stream("POST", base + "/graphql", json={"query": query},
                             headers={"accept": "text/event-stream"}) as response:
        assert response.status_code == 200, await response.aread()
        event = None
        async for line in response.aiter_lines():
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:") and event == "next":
                payloads.append(json.loads(line[5:]))
            elif not line and event == "complete":
                break
    return payloads


async def multipart(client: httpx.AsyncClient, base: str, query: str, leave: bool | None = None) -> list[dict]:
    """The payloads of one operation over multipart HTTP (Apollo's subscriptions), heartbeats left out.
    A running subscription is left after its first heartbeat: the client goes away."""
    async with client.stream("POST", base + "/graphql", json={"query": query},
                             headers={"accept": 'multipart/mixed;subscriptionSpec="1.0"'}) as response:
        assert response.status_code == 200, await response.aread()
        body = ""
        async for chunk in response.aiter_text():
            body += chunk
            if (query == LIVE if leave is None else leave) and "{}" in body:
                return []
    return multipart_payloads(body)


def multipart_payloads(body: str) -> list[dict]:
    """The payloads a multipart answer carries (each part's JSON, its `payload` envelope opened), heartbeats
    (empty parts) left out."""
    payloads: list[dict] = []
    for part in body.split("\r\n--graphql"):
        start = part.find("{")
        if start >= 0:
            found = json.loads(part[start:].strip().rstrip("-").strip())
            if found:
                payloads.append(found.get("payload", found))
    return payloads


async def transport_ws(base: str, documents: list[str], running: tuple[str, ...] = (LIVE,)) -> list[list[dict]]:
    """graphql-transport-ws: every document on one socket, one after the other; each one's messages."""
    answers: list[list[dict]] = []
    async with websockets.connect(base.replace("http", "ws") + "/graphql",
                                  subprotocols=["graphql-transport-ws"]) as ws:
        await ws.send(json.dumps({"type": "connection_init"}))
        assert json.loads(await ws.recv())["type"] == "connection_ack"
        for i, document in enumerate(documents):
            await ws.send(json.dumps({"id": str(i), "type": "subscribe", "payload": {"query": document}}))
            if document in running:  # the client ends it (the server sends nothing more for it)
                await asyncio.sleep(0.05)
                await ws.send(json.dumps({"id": str(i), "type": "complete"}))
                answers.append([])
                continue
            got: list[dict] = []
            while True:
                message = json.loads(await asyncio.wait_for(ws.recv(), 15))
                if message["type"] == "ping":
                    await ws.send(json.dumps({"type": "pong"}))
                    continue
                assert message.get("id") == str(i), message
                got.append(message)
                if message["type"] in ("complete", "error"):
                    break
            answers.append(got)
    return answers


async def legacy_ws(base: str, documents: list[str]) -> list[list[dict]]:
    """graphql-ws (subscriptions-transport-ws): the same."""
    answers: list[list[dict]] = []
    async with websockets.connect(base.replace("http", "ws") + "/graphql", subprotocols=["graphql-ws"]) as ws:
        await ws.send(json.dumps({"type": "connection_init"}))
        assert json.loads(await ws.recv())["type"] == "connection_ack"
        for i, document in enumerate(documents):
            await ws.send(json.dumps({"id": str(i), "type": "start", "payload": {"query": document}}))
            if document == LIVE:  # running: the client stops it, the server says complete
                await asyncio.sleep(0.05)
                await ws.send(json.dumps({"id": str(i), "type": "stop"}))
            got: list[dict] = []
            while True:
                message = json.loads(await asyncio.wait_for(ws.recv(), 15))
                if message["type"] == "ka":
                    continue
                assert message.get("id") == str(i), message
                got.append(message)
                if message["type"] in ("complete", "error"):
                    break
            answers.append(got)
    return answers


async def assert_pool_given_back(database_url: str, server: LiveServer) -> None:
    """No connection of the server's is inside a transaction, and an HTTP query answers at once."""
    conn = await asyncpg.connect(database_url)
    try:
        for _ in range(50):  # a released connection's rollback may still be on its way
            stuck = await conn.fetch("SELECT pid, state, left(query, 80) AS query FROM pg_stat_activity "
                                     "WHERE application_name = 'pith-graph' AND datname = current_database() "
                                     "AND state LIKE 'idle in transaction%'")
            if not stuck:
                break
            await asyncio.sleep(0.1)
    finally:
        await conn.close()
    assert stuck == [], [dict(r) for r in stuck]
    async with httpx.AsyncClient(timeout=3) as client:  # the pool's wait is 5 s: a starved pool fails here
        answer = await client.post(server.base + "/graphql", json={"query": COMPILED})
    assert answer.status_code == 200 and answer.json()["data"]["paper"]["arxivId"] == PAPER, answer.text


def data_of(payloads: list[dict]) -> dict:
    assert len(payloads) == 1 and not payloads[0].get("errors"), payloads
    return payloads[0]["data"]


def syntax_error_of(payloads: list[dict]) -> dict:
    assert len(payloads) == 1, payloads
    (error,) = payloads[0]["errors"]
    assert error["extensions"]["code"] == "GRAPHQL_PARSE_FAILED", error
    assert error["message"].startswith("Syntax Error"), error
    return error


async def test_sse_queries_and_syntax_errors_give_every_connection_back(server, database_url):
    async with httpx.AsyncClient(timeout=15) as client:
        for query in queries():
            assert data_of(await sse(client, server.base, query))["paper"]["arxivId"] == PAPER
        for _ in range(ROUNDS):
            syntax_error_of(await sse(client, server.base, BROKEN))
    await assert_pool_given_back(database_url, server)


async def test_multipart_queries_and_syntax_errors_give_every_connection_back(server, database_url):
    # Apollo's multipart protocol carries subscriptions: a query is told so; subscriptions the client
    # leaves end with it.
    async with httpx.AsyncClient(timeout=15) as client:
        for query in queries():
            (answer,) = await multipart(client, server.base, query)
            assert [e["extensions"]["code"] for e in answer["errors"]] == ["OPERATION_NOT_SUPPORTED"], answer
        for _ in range(ROUNDS):
            syntax_error_of(await multipart(client, server.base, BROKEN))
        for _ in range(5):
            assert await multipart(client, server.base, LIVE) == []
    await assert_pool_given_back(database_url, server)


async def test_graphql_transport_ws_runs_many_operations_on_one_socket(server, database_url):
    # Compiled and ordinary queries alternate on one socket: each has a session (and a plan) of its own.
    answers = await transport_ws(server.base, queries() + [BROKEN] * ROUNDS + [LIVE] * 5 + [COMPILED])
    assert answers[-6:-1] == [[]] * 5
    assert data_of([answers[-1][0]["payload"]])["paper"]["arxivId"] == PAPER
    for got in answers[:ROUNDS]:
        assert [m["type"] for m in got] == ["next", "complete"], got
        assert data_of([got[0]["payload"]])["paper"]["arxivId"] == PAPER
    for got in answers[ROUNDS:2 * ROUNDS]:
        assert [m["type"] for m in got] == ["error"], got
        syntax_error_of([{"errors": got[0]["payload"]}])
    await assert_pool_given_back(database_url, server)


async def test_a_socket_closed_as_its_answer_arrives_ends_its_operation_quietly(server, database_url):
    """A client that closes as soon as it has its `next` (before the `complete`): the operation is cancelled
    with its socket, and nothing is logged as an error (Python 3.11's wait_for had lost that cancellation
    as the session closed, and the operation went on to forget an id the socket's shutdown had forgotten:
    a KeyError traceback for most such clients)."""
    before = server.logs().count("Exception in worker task")
    for _ in range(ROUNDS):
        async with websockets.connect(server.base.replace("http", "ws") + "/graphql",
                                      subprotocols=["graphql-transport-ws"]) as ws:
            await ws.send(json.dumps({"type": "connection_init"}))
            assert json.loads(await ws.recv())["type"] == "connection_ack"
            await ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": {"query": "{ __typename }"}}))
            assert json.loads(await ws.recv())["type"] == "next"
    await assert_pool_given_back(database_url, server)
    told = server.logs()
    assert told.count("Exception in worker task") == before and "KeyError" not in told, told[-3000:]


async def test_graphql_ws_runs_many_operations_on_one_socket(server, database_url):
    # The legacy protocol carries subscriptions: a query is told so, a syntax error is a GraphQL error,
    # subscriptions stopped by the client complete; the socket stays open throughout.
    answers = await legacy_ws(server.base, queries() + [BROKEN] * ROUNDS + [LIVE] * 5)
    for got in answers[:ROUNDS]:
        assert [m["type"] for m in got] == ["error"], got
        assert got[0]["payload"]["extensions"]["code"] == "OPERATION_NOT_SUPPORTED", got
    assert all([m["type"] for m in got] == ["complete"] for got in answers[-5:]), answers[-5:]
    for got in answers[ROUNDS:2 * ROUNDS]:
        assert [m["type"] for m in got] == ["error"], got
        syntax_error_of([{"errors": [got[0]["payload"]]}])
    await assert_pool_given_back(database_url, server)


async def test_trusted_documents_mode_refuses_an_untrusted_document_on_every_transport(database_url, tmp_path):
    import hashlib

    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({hashlib.sha256(COMPILED.encode()).hexdigest(): COMPILED}))
    trusted = LiveServer(database_url, env={"PITH_PERSISTED_DOCUMENTS": str(manifest), "PITH_PERSISTED_ONLY": "1",
                                            "PITH_POOL_MAX": str(POOL)})
    try:
        def refused(errors: list[dict]) -> None:
            assert [e["extensions"]["code"] for e in errors] == ["PERSISTED_QUERY_REQUIRED"], errors

        async with httpx.AsyncClient(timeout=15) as client:
            for untrusted in (ORDINARY, BROKEN, LIVE):
                post = await client.post(trusted.base + "/graphql", json={"query": untrusted})
                assert post.status_code == 400, post.text
                refused(post.json()["errors"])
                # Over SSE and multipart it is refused before a stream starts, with POST's answer.
                for accept in ("text/event-stream", 'multipart/mixed;subscriptionSpec="1.0"'):
                    streamed = await client.post(trusted.base + "/graphql", json={"query": untrusted},
                                                 headers={"accept": accept})
                    assert streamed.status_code == 400, streamed.text
                    refused(streamed.json()["errors"])
            assert data_of(await sse(client, trusted.base, COMPILED))["paper"]["arxivId"] == PAPER
        answers = await transport_ws(trusted.base, [ORDINARY, BROKEN, LIVE, COMPILED], running=())
        for got in answers[:3]:
            assert [m["type"] for m in got] == ["error"], got
            refused(got[0]["payload"])
        assert data_of([answers[3][0]["payload"]])["paper"]["arxivId"] == PAPER
        answers = await legacy_ws(trusted.base, [ORDINARY, BROKEN])
        for got in answers:
            assert [m["type"] for m in got] == ["error"], got
            refused([got[0]["payload"]])
        await assert_pool_given_back(database_url, trusted)
    finally:
        trusted.stop()


async def test_an_operation_that_cannot_be_chosen_is_refused_alike_on_every_transport(server):
    """Several operations and no operationName: POST refuses it (OPERATION_RESOLUTION_FAILURE), and so do SSE,
    multipart and both WebSocket protocols (Strawberry alone would run the first one)."""
    two = (f'subscription A {{ citationAdded(arxivId: "{PAPER}") {{ cursor }} }} '
           f'subscription B {{ citationAdded(arxivId: "{PAPER}") {{ cursor }} }}')
    # A mutation, in the words POST answers it with (the schema has none), on every transport too.
    for document, refusal, code in ((two, "the document has 2 operations; say which to run with operationName",
                                     "OPERATION_RESOLUTION_FAILURE"),
                                    ("mutation { x }", "this API answers queries only; it has no mutation operations",
                                     "OPERATION_NOT_SUPPORTED")):
        async with httpx.AsyncClient(timeout=20) as client:
            posted = (await client.post(server.base + "/graphql", json={"query": document})).json()
            assert posted["errors"][0]["message"].startswith(refusal), posted
            # (a subscription that runs instead sends nothing: the wait ends it as a failure)
            for answer in (await asyncio.wait_for(sse(client, server.base, document), 15),
                           await asyncio.wait_for(multipart(client, server.base, document, leave=False), 15)):
                assert answer and answer[0]["errors"][0]["message"].startswith(refusal), answer
                assert answer[0]["errors"][0]["extensions"]["code"] == code
        for got in ((await transport_ws(server.base, [document], running=()))[0],
                    (await legacy_ws(server.base, [document]))[0]):
            payload = got[0]["payload"]  # graphql-transport-ws: a list of errors; graphql-ws: the error itself
            error = payload[0] if isinstance(payload, list) else payload.get("errors", [payload])[0]
            assert error["message"].startswith(refusal) and error["extensions"]["code"] == code, (document, got)


async def test_subscriptions_cancelled_past_the_pace_end_with_their_socket(database_url):
    """Sockets sending subscribe and complete for one id, faster than their pace, then closing: every
    subscription ends (the metric of live subscribers back to 0). A cancellation that came as the change hub's
    readiness wait ended was lost (Python 3.11's wait_for): 2 to 10 subscriptions of ten such sockets went on,
    subscribed, after their sockets had gone, and failed at the next event."""
    import random
    import re

    server = LiveServer(database_url, env={"PITH_ENV": "production", "PITH_TRUSTED_PROXIES": "127.0.0.1",
                                           "PITH_ANONYMOUS_POINTS_PER_HOUR": UNSPENDABLE})
    subscription = {"query": f'subscription {{ citationAdded(arxivId: "{PAPER}") {{ cursor }} }}'}

    async def churn(n: int) -> None:
        async with websockets.connect(server.base.replace("http", "ws") + "/graphql",
                                      subprotocols=["graphql-transport-ws"],
                                      additional_headers={"x-forwarded-for": f"198.51.100.{n + 10}"}) as ws:
            await ws.send(json.dumps({"type": "connection_init"}))
            await ws.recv()

            async def drain() -> None:
                with contextlib.suppress(websockets.ConnectionClosed):
                    while True:
                        await ws.recv()

            draining = asyncio.ensure_future(drain())
            for _ in range(60):  # ~40 messages a second, twice the pace
                await ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": subscription}))
                await asyncio.sleep(random.uniform(0.02, 0.03))
                await ws.send(json.dumps({"id": "1", "type": "complete"}))
                await asyncio.sleep(random.uniform(0.02, 0.03))
            draining.cancel()

    try:
        await asyncio.gather(*(churn(n) for n in range(10)))
        async with httpx.AsyncClient(timeout=10) as client:
            for _ in range(100):
                metrics = (await client.get(server.base + "/metrics")).text
                live = float(re.search(r"^pith_subscriptions (\S+)$", metrics, re.M).group(1))
                if live == 0:
                    break
                await asyncio.sleep(0.1)
        assert live == 0, f"{live} subscriptions outlived their sockets"
    finally:
        server.stop()


async def test_closing_a_session_fails_the_keys_of_the_loaders_it_stopped(database_url):
    """An operation ends (its client gone) while a DataLoader's batch runs a statement, and a batch of another
    loader awaits that one's keys: closing the session stops the statement and fails those keys with
    SessionClosed, so whatever awaits them ends. (Cancelled, the batch left its keys pending: the batch awaiting
    them waited until the collector destroyed it, logged as an error.)"""
    from aiodataloader import DataLoader

    from app.db.pool import Session, SessionClosed

    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=2)
    try:
        session = Session.from_pool(pool)

        async def slow(keys: list[int]) -> list[int]:
            await session.fetch("SELECT pg_sleep(30)")
            return keys

        inner = DataLoader(slow, cache=False)

        async def through(keys: list[int]) -> list[int]:  # as AcrossInstants' loaders under the per-instant ones
            return await inner.load_many(keys)

        waiting = asyncio.ensure_future(DataLoader(through, cache=False).load(1))
        for _ in range(500):  # until the statement runs
            await asyncio.sleep(0.01)
            if session.statements:
                break
        assert session.statements == 1
        await session.close()
        with pytest.raises(SessionClosed):
            await asyncio.wait_for(waiting, 20)
        async with pool.acquire() as conn:  # the statement stopped in PostgreSQL, the connection back
            assert await conn.fetchval("SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(30)' "
                                       "AND state = 'active'") == 0
    finally:
        await pool.close()
