"""Reading, parsing and validation are bounded and charged: documents whose validation would be slow are
refused by a linear shape check before validation runs, every refused document costs its client at least
a point, and a client with nothing left of its hour is answered 429 before its document is parsed, on
every transport.
"""

from __future__ import annotations

import asyncio
import json
import re

import httpx
import pytest
import pytest_asyncio

from app.limits import MAX_COMPARISONS, MAX_FIELDS
from app.settings import Settings
from tests.conftest import LiveServer, serve, within_one_budget_hour

pytestmark = pytest.mark.asyncio(loop_scope="session")

ATTACKS = {
    "4,989 x a": "{ d1 " + " a" * 4989 + " }",
    "__typename + 550 x paper{title}": "{ __typename " + ' paper(arxivId: "x") { title }' * 550 + " }",
    "200 fragments of paper{title}": "{ " + " ".join(f"...h{i}" for i in range(200)) + " } "
    + "".join(f'fragment h{i} on Query {{ paper(arxivId: "x") {{ title }} }} ' for i in range(200)),
    "fragments doubling": "{ ...f9 } fragment f0 on Query { __typename } "
    + "".join(f"fragment f{i} on Query {{ ...f{i - 1} ...f{i - 1} a{i}: __typename }} " for i in range(1, 10))
    + "".join(f"fragment g{i} on Query {{ ...f9 ...f9 }} " for i in range(1)),
    "nested repeats": "{ " + " ".join(['paper(arxivId: "x") { ' + " ".join(
        ['inbound(first: 1) { ' + " ".join(["edges { cursor cursor cursor }"] * 3) + " }"] * 3) + " }"] * 3) + " }",
}


@pytest_asyncio.fixture(loop_scope="session")
async def budgeted(empty_database, statements):
    settings = Settings(database_url=empty_database, production=True, introspection=False, graphiql=False,
                        anonymous_points_per_hour=30)
    async for s in serve(empty_database, statements, settings):
        yield s


def remaining(response: httpx.Response) -> int:
    return int(re.search(r"r=(\d+)", response.headers["ratelimit"]).group(1))


async def test_documents_that_would_validate_slowly_are_refused_before_validation(served):
    for label, document in ATTACKS.items():
        answer = await served.client.post("/graphql", json={"query": document})
        assert answer.status_code == 200, (label, answer.text[:300])
        codes = [e["extensions"]["code"] for e in answer.json()["errors"]]
        assert codes == ["QUERY_TOO_COMPLEX"], (label, answer.json()["errors"][:2])
    # What clients write passes: a field from many fragments (Relay's `id`), a hundred leaves, aliases.
    relay = "{ paper(arxivId: \"2402.15627\") { ...a0 " + " ".join(f"...a{i}" for i in range(1, 60)) + " } } " + \
        "".join(f"fragment a{i} on Paper {{ arxivId title }} " for i in range(60))
    leaves = '{ paper(arxivId: "2402.15627") { ' + " title" * 90 + " } }"
    aliased = "{ " + " ".join(f'p{i}: paper(arxivId: "2402.15627") {{ arxivId title }}' for i in range(30)) + " }"
    for document in (relay, leaves, aliased):
        answer = await served.client.post("/graphql", json={"query": document})
        assert answer.status_code == 200 and "errors" not in answer.json(), answer.text[:500]
    assert MAX_FIELDS >= 1000 and MAX_COMPARISONS >= 10_000  # the figures bench/validation.py measured


async def test_validation_stops_at_its_error_limit(served):
    """A document of distinct unknown fields (each an error, none cacheable) is answered with at most
    MAX_VALIDATION_ERRORS errors and the notice that validation stopped: a short answer, quickly made."""
    from app.limits import MAX_VALIDATION_ERRORS

    document = "{ d1 " + " ".join(f"f{i:010d}" for i in range(900)) + " }"
    answer = await served.client.post("/graphql", json={"query": document})
    errors = answer.json()["errors"]
    assert len(errors) == MAX_VALIDATION_ERRORS + 1 and "Validation aborted" in errors[-1]["message"], errors[-1]
    assert len(answer.content) < 5_000 and {e["extensions"]["code"] for e in errors} == {"GRAPHQL_VALIDATION_FAILED"}


async def test_a_long_document_not_seen_before_is_read_in_the_reader_thread(served):
    """A long text (OFF_LOOP_CHARS or more) not in the caches is parsed and validated in the process's reader
    thread, not on the event loop (a 12 kB document of a thousand fields takes ~30 ms of pure Python), with the
    same answer as on the loop; a short one, or one read before, is read on the loop."""
    from app.cost import READ_IN_THREAD
    from app.limits import OFF_LOOP_CHARS

    def unknown(n: int, fields: int) -> str:
        return "{ d%d %s }" % (n, " ".join(f"g{n}x{i:06d}" for i in range(fields)))

    long, short = unknown(1, 400), unknown(2, 5)
    assert len(long) >= OFF_LOOP_CHARS > len(short)
    answers = []
    for document, read_there in ((long, 2), (long, 0), (short, 0)):  # the text's parse and its validation
        before = READ_IN_THREAD[0]
        answer = await served.client.post("/graphql", json={"query": document})
        assert READ_IN_THREAD[0] - before == read_there, document[:40]
        answers.append(answer.json()["errors"])
    assert [e["message"] for e in answers[0]] == [e["message"] for e in answers[1]]
    assert answers[0][0]["message"].startswith("Cannot query field 'd1' on type 'Query'")
    assert answers[2][0]["message"].startswith("Cannot query field 'd2' on type 'Query'")
    # A long text over a limit its text shows (aliases) is refused by the reader thread's reading of it.
    wide = "{ " + " ".join(f"a{i}: __typename" for i in range(200)) + " }"
    before = READ_IN_THREAD[0]
    answer = await served.client.post("/graphql", json={"query": wide})
    assert READ_IN_THREAD[0] - before == 1
    assert [e["extensions"]["code"] for e in answer.json()["errors"]] == ["QUERY_TOO_COMPLEX"]


async def test_the_reader_holds_a_bounded_number_of_long_documents_and_refuses_the_rest_unread(database_url,
                                                                                              statements):
    """Whoever sends them, a process's reader thread holds at most READER_WAITING long documents (reading or
    waiting): the next is refused at once, before it is read, 503 with Retry-After over HTTP and the same
    SERVICE_UNAVAILABLE error from the pipeline (a WebSocket's path); short documents are answered meanwhile, and
    once the reader is free every document waiting is answered and the refused one is read."""
    from app.limits import OFF_LOOP_CHARS, READER_WAITING

    def unknown(n: int) -> str:
        return "{ d%d %s }" % (n, " ".join(f"r{n}x{i:06d}" for i in range(400)))

    documents = [unknown(7_000 + i) for i in range(READER_WAITING + 2)]
    assert all(len(d) >= OFF_LOOP_CHARS for d in documents)
    async for served in serve(database_url, statements, expect_5xx=True):  # (a 503 is this test's answer)
        await reader_full(served, documents)


async def reader_full(served, documents: list[str]) -> None:
    import threading

    from app import cost
    from app.context import Context
    from app.limits import READER_WAITING
    from app.schema import schema

    gate = threading.Event()
    cost._READER.submit(gate.wait, 60)  # the reader thread busy with something else
    try:
        waiting = [asyncio.ensure_future(served.client.post("/graphql", json={"query": d}))
                   for d in documents[:READER_WAITING]]
        for _ in range(3000):
            if cost._in_reader[0] >= READER_WAITING:
                break
            await asyncio.sleep(0.01)
        assert cost._in_reader[0] == READER_WAITING
        refused_before, read_before = cost.READER_REFUSED[0], cost.READ_IN_THREAD[0]
        answer = await served.client.post("/graphql", json={"query": documents[-2]})
        assert answer.status_code == 503 and answer.headers["retry-after"], answer.text[:300]
        error = answer.json()["errors"][0]
        assert error["extensions"]["code"] == "SERVICE_UNAVAILABLE" and "long documents" in error["message"], error
        streamed = await schema.execute(documents[-1], context_value=Context(session=None))
        assert [e.extensions["code"] for e in streamed.errors] == ["SERVICE_UNAVAILABLE"], streamed.errors
        assert cost.READER_REFUSED[0] - refused_before == 2 and cost.READ_IN_THREAD[0] == read_before  # unread
        short = await served.client.post("/graphql", json={"query": "{ __typename }"})
        assert short.status_code == 200 and short.json()["data"] == {"__typename": "Query"}
        assert not any(w.done() for w in waiting)
    finally:
        gate.set()
    for n, answer in enumerate(await asyncio.gather(*waiting)):
        assert answer.status_code == 200, answer.text[:300]
        assert answer.json()["errors"][0]["message"].startswith(f"Cannot query field 'd{7_000 + n}'")
    for document in documents[-2:]:  # the reader free again: read
        answer = await served.client.post("/graphql", json={"query": document})
        assert answer.status_code == 200 and "Cannot query field" in answer.json()["errors"][0]["message"]
    assert cost._in_reader[0] == 0


async def test_the_readers_places_go_to_the_client_that_read_least_and_none_is_lost():
    """Places are taken by rank (a client's standing: the most of its pace left first), then in order of asking;
    a waiter that gives up takes none with it, and one given a place as it left passes it on."""
    from app.cost import Places

    places = Places(1)
    assert await places.take(0.0, 1)  # free: at once
    order: list[str] = []

    async def wait(name: str, rank: float, seconds: float = 30) -> None:
        if await places.take(rank, seconds):
            order.append(name)

    debtor = asyncio.ensure_future(wait("debtor", 0.5))
    await asyncio.sleep(0)
    quitter = asyncio.ensure_future(wait("quitter", -2.0, 0.01))  # the best rank, but it gives up first
    await asyncio.sleep(0)
    fresh = asyncio.ensure_future(wait("fresh", -1.0))
    await asyncio.wait_for(quitter, 5)
    places.give()  # the first holder's place: to the best rank still waiting
    await asyncio.wait_for(fresh, 5)
    places.give()  # fresh's, back
    await asyncio.wait_for(debtor, 5)
    assert order == ["fresh", "debtor"]
    places.give()  # debtor's, back: free again
    assert places.free == 1 and await places.take(0.0, 0.01)
    cancelled = asyncio.ensure_future(wait("cancelled", 0.0))
    await asyncio.sleep(0)
    places.give()  # given to a waiter that is cancelled before it runs: handed on, not lost
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert places.free == 1 and not places._waiting


async def test_a_clients_standing_falls_with_what_it_reads():
    """A client's standing (its pace left, as a share of its burst) is what orders the reader's places: a fresh
    client 1.0, one whose documents took long to read below it, in debt below 0."""
    from app.governor import Governor

    governor = Governor(lambda: None, anonymous_points_per_hour=None, requests_per_second=20)
    reader, fresh = governor.anonymous("198.51.100.20"), governor.anonymous("198.51.100.21")
    assert governor.standing(fresh) == 1.0
    governor.pace_reading(reader, 0.030)  # 30 ms of reading: 29 tokens more than a request's
    assert governor.standing(reader) < 0.5 < governor.standing(fresh)
    for _ in range(5):
        governor.pace_reading(reader, 0.030)
    assert governor.standing(reader) < 0 < governor.standing(fresh)
    from app.governor import Client

    keyed = Client(id="key:00000000-0000-0000-0000-000000000001", address="198.51.100.22", points_per_hour=10_000)
    assert governor.standing(keyed) > governor.standing(fresh)  # a client with a key ahead of any anonymous one


async def test_the_operations_of_an_unread_text_are_the_parsers():
    """A refusal made before reading a text (the reader full) names the text's operations as the parser would
    find them, so each transport refuses the operation it was asked for."""
    from graphql import parse

    from app.shape import operations_of

    texts = ['{ a }', 'query Q($x: In = {a: {b: 1}}) { a { b } } subscription S { c }',
             'fragment F on Query { a { b } } mutation M { d } { e }', '# {\nquery { a(s: "{") }',
             'subscription($v: [Int] = [1, 2]) @x(y: "}") { a(b: {c: "{"}) }']
    for text in texts:
        found = [(d.operation, d.name.value if d.name else None) for d in parse(text).definitions
                 if hasattr(d, "operation")]
        assert operations_of(text) == found, text


async def test_a_document_read_and_let_go_leaves_nothing_to_the_collector():
    """Reading a document (parse, shape, validation) leaves no reference cycle behind: graphql-core's parser links
    each token to the one before it, and its validation's visitors keep their own bound methods, its rules the
    document; once let go, all of it (about 9,000 objects for a 12 kB document of a thousand unknown fields) waited
    for the collector, whose pass, in the reader thread, held the event loop up to 70 ms. The errors found are
    graphql-core's own `validate`'s, whatever the document."""
    import gc

    from graphql import validate

    from graphql import specified_rules

    from app.cost import _read_text, _validate, checked
    from app.limits import MAX_VALIDATION_ERRORS
    from app.schema import LIMIT_RULES, schema

    every = (*specified_rules, *LIMIT_RULES)
    documents = [
        "{ d7 " + " ".join(f"g7x{i:06d}" for i in range(990)) + " }",  # a thousand unknown fields
        'query Q($id: String!, $n: Int) { paper(arxivId: $id) { title inbound(first: $n) { edges { cursor } } } }',
        "query Q($unused: Int) { ...F ...G } fragment F on Query { __typename } fragment G on Query { ...F }",
        "{ " + " ".join(f"x{i}" for i in range(150)) + " }",  # past the error limit: "Validation aborted"
        "{ ...Missing }",
    ]
    for text in documents:
        document, _ = _read_text(text, 100_000)
        # Strawberry's depth rule needs every spread defined: graphql-core's own rules judge one that is not.
        rules = every if "Missing" not in text else tuple(specified_rules)
        expected = validate(schema._schema, document, rules, max_errors=MAX_VALIDATION_ERRORS, hide_suggestions=True)
        assert [e.formatted for e in _validate(schema._schema, document, rules, True)] == [
            e.formatted for e in expected], text[:40]
        gc.collect()
        gc.disable()
        try:
            checked(schema._schema, document, every, True)
            del document
            left = gc.collect()
        finally:
            gc.enable()
        assert left < 200, (text[:40], left)  # a few visitors of variable uses, whatever the size


async def test_a_worker_takes_the_interpreter_back_from_its_reader_thread_within_its_switch_interval(
        empty_database, statements):
    """While a server runs, a thread holding the interpreter (the reader thread's parse of a long document) gives
    it up within `switch_interval_us` of the event loop asking (Python's own 5 ms held each of a light lookup's
    wake-ups behind it: p99 5 -> 20 ms in bench/governance.py's distinct-documents row); Python's is back after."""
    import sys

    before = sys.getswitchinterval()
    for configured, during in ((250, 0.00025), (0, before)):
        settings = Settings(database_url=empty_database, switch_interval_us=configured)
        async for s in serve(empty_database, statements, settings):
            assert sys.getswitchinterval() == pytest.approx(during)
            assert (await s.client.post("/graphql", json={"query": "{ __typename }"})).status_code == 200
        assert sys.getswitchinterval() == before
    assert Settings.from_env({"PITH_SWITCH_INTERVAL_US": "800"}).switch_interval_us == 800


async def test_every_refused_document_is_charged_and_an_exhausted_client_is_refused_before_parsing(budgeted):
    await within_one_budget_hour(60)
    client = budgeted.client
    first = await client.post("/graphql", json={"query": "{ __typename }"})
    assert first.status_code == 200
    left = remaining(first)
    refused = ["{ nope }", "{ paper(", ATTACKS["4,989 x a"], '{ paper(arxivId: "x") { title }']
    for document in refused * 3:
        answer = await client.post("/graphql", json={"query": document})
        assert answer.status_code in (200, 400), answer.text[:200]
        now = remaining(answer)
        assert now <= left - 1, (document[:30], left, now)  # at least a point each
        # and its extensions.cost says what it was charged (not null, not what it would have cost)
        cost = answer.json().get("extensions", {}).get("cost")
        if cost is not None:
            assert cost["points"] is not None and 1 <= cost["points"] <= left - now, (document[:30], cost, left, now)
        left = now
    while left > 0:  # spend the rest with refused documents
        answer = await client.post("/graphql", json={"query": "{ nope }"})
        if answer.status_code == 429:
            break
        left = remaining(answer)
    # Nothing left: 429 before the document is read, whatever it is (a syntax error is not even parsed).
    for document in ("{ __typename }", "{ paper(", ATTACKS["4,989 x a"]):
        answer = await client.post("/graphql", json={"query": document})
        assert answer.status_code == 429, answer.text[:300]
        assert answer.headers["retry-after"]
        assert [e["extensions"]["code"] for e in answer.json()["errors"]] == ["RATE_LIMITED"]
    # And over a stream.
    async with client.stream("POST", "/graphql", json={"query": "{ paper("},
                             headers={"accept": "text/event-stream"}) as stream:
        body = (await stream.aread()).decode()
    assert "RATE_LIMITED" in body and "Syntax Error" not in body, body[:300]


async def test_requests_refused_before_any_operation_are_charged_too(empty_database, statements):
    """A body that is not JSON, one over the limit, a media type or an Accept not served, a query string over its
    limit: each costs its client a point, as a refused document does; over budget, 429 before the body is read."""
    await within_one_budget_hour(60)
    from app.limits import MAX_BODY_BYTES, MAX_QUERY_STRING_BYTES

    settings = Settings(database_url=empty_database, production=True, introspection=False, graphiql=False,
                        anonymous_points_per_hour=100)
    refusals = {
        "not JSON": dict(method="POST", content=b"{ query: nope", headers={"content-type": "application/json"}),
        "over the body limit": dict(method="POST", content=b'{"query": "' + b"x" * (MAX_BODY_BYTES + 10) + b'"}',
                                    headers={"content-type": "application/json"}),
        "a media type not served": dict(method="POST", content=b"{ __typename }",
                                        headers={"content-type": "text/plain"}),
        "an Accept not served": dict(method="POST", json={"query": "{ __typename }"},
                                     headers={"accept": "text/html;q=1, image/png"}),
        "a query string over its limit": dict(method="GET", params={"query": "{ " + "a " * MAX_QUERY_STRING_BYTES}),
    }
    async for served in serve(empty_database, statements, settings):
        client = served.client

        async def left() -> int:
            answer = await client.post("/graphql", json={"query": "{ __typename }"})
            assert answer.status_code == 200, answer.text[:200]
            return remaining(answer)

        first, second = await left(), await left()
        lookup = first - second  # what the lookup that reads the budget costs
        for label, request in refusals.items():
            before = await left()
            for _ in range(5):
                method = request["method"]
                answer = await client.request(method, "/graphql", **{k: v for k, v in request.items() if k != "method"})
                assert 400 <= answer.status_code < 500 and answer.status_code != 429, (label, answer.status_code)
            # At least a point each (less one, should a lookup's own measured cost differ by a point from the first's).
            assert before - await left() - lookup >= 4, label
        for _ in range(100):  # spend the rest with bodies that are not JSON: then 429, before the body is read
            answer = await client.post("/graphql", content=b"nope", headers={"content-type": "application/json"})
            if answer.status_code == 429:
                break
            assert answer.status_code == 400, answer.text[:200]
        assert answer.status_code == 429 and answer.headers["retry-after"], answer.status_code


async def test_a_long_text_that_does_not_parse_gets_the_parsers_error_over_both_websocket_protocols(empty_database):
    """A long text with a syntax error, answered without a parse on the event loop: still the parser's error (its
    place, GRAPHQL_PARSE_FAILED) over graphql-ws (which carries only subscriptions) and graphql-transport-ws, with
    or without an operation name, never a complaint about the operation's type."""
    import websockets

    document = "{ e1(%s) }}" % " ".join(f"a{j}: 7" for j in range(400))
    server = LiveServer(empty_database, env={"PITH_ENV": "production"})
    try:
        for protocol, start in (("graphql-ws", "start"), ("graphql-transport-ws", "subscribe")):
            async with websockets.connect(server.base.replace("http", "ws") + "/graphql",
                                          subprotocols=[protocol]) as ws:
                await ws.send(json.dumps({"type": "connection_init"}))
                assert json.loads(await ws.recv())["type"] == "connection_ack"
                for n, name in enumerate((None, "Named")):
                    payload = {"query": document, **({"operationName": name} if name else {})}
                    await ws.send(json.dumps({"id": str(n), "type": start, "payload": payload}))
                    async with asyncio.timeout(30):  # (graphql-ws sends keep-alives without an id meanwhile)
                        while True:
                            message = json.loads(await ws.recv())
                            if message.get("id") == str(n):
                                break
                    errors = message["payload"] if isinstance(message["payload"], list) \
                        else message["payload"].get("errors", [message["payload"]])
                    assert errors[0]["message"] == "Syntax Error: Unexpected '}'.", (protocol, name, message)
                    assert errors[0]["extensions"]["code"] == "GRAPHQL_PARSE_FAILED", (protocol, name, message)
                    assert errors[0]["locations"][0]["column"] == len(document), (protocol, name, message)
    finally:
        server.stop()


async def test_malformed_websocket_operations_and_clients_that_leave_early_log_no_error(empty_database):
    """An operation message of the wrong shape (a null or list payload, a list for an id, a number for the query,
    a string for the variables) is the protocol's refusal (graphql-transport-ws: close 4400 with the reason;
    graphql-ws: an error message), never an exception in the server; a client that closes its socket while its
    operations are answered leaves no error in the log."""
    import websockets

    bad = [{"id": "1", "payload": None}, {"id": "2", "payload": []}, {"id": ["3"], "payload": {"query": "{ a }"}},
           {"id": "4", "payload": {"query": 5}}, {"id": "5", "payload": {"query": "{ a }", "variables": "x"}},
           {"id": "6", "payload": {}}, {"id": "7", "payload": {"extensions": {"persistedQuery": {"version": 1}}}}]
    # Messages that are not an operation's at all: not an object, no type, a stop without its id.
    # And text that is not JSON at all, or nests past what can be read: said why on both protocols (graphql-ws
    # ignored it, graphql-transport-ws said only that it must be valid JSON).
    envelopes = ["[]", "5", "{}", '{"type": null}', '"text"', '{"type": "foo", "id": "1"}', "{nope", "[" * 100_000]
    server = LiveServer(empty_database, env={"PITH_ENV": "production"})
    url = server.base.replace("http", "ws") + "/graphql"

    async def opened(protocol: str):  # noqa: ANN202
        ws = await websockets.connect(url, subprotocols=[protocol])
        await ws.send(json.dumps({"type": "connection_init"}))
        assert json.loads(await ws.recv())["type"] == "connection_ack"
        return ws

    try:
        for message in bad:
            ws = await opened("graphql-transport-ws")
            await ws.send(json.dumps({"type": "subscribe", **message}))
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await asyncio.wait_for(ws.recv(), 30)
            assert closed.value.rcvd.code == 4400 and closed.value.rcvd.reason, (message, closed.value.rcvd)
            ws = await opened("graphql-ws")
            await ws.send(json.dumps({"type": "start", **message}))
            async with asyncio.timeout(30):
                while (answer := json.loads(await ws.recv()))["type"] == "ka":
                    pass
            assert answer["type"] == "error" and answer["payload"]["message"], (message, answer)
            await ws.close()
        for raw in envelopes:
            ws = await opened("graphql-transport-ws")
            await ws.send(raw)
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await asyncio.wait_for(ws.recv(), 30)
            assert closed.value.rcvd.code == 4400 and closed.value.rcvd.reason, (raw, closed.value.rcvd)
            if raw.startswith(("{n", "[[")):
                assert "not valid JSON (" in closed.value.rcvd.reason, closed.value.rcvd
            ws = await opened("graphql-ws")
            for message in (raw, '{"type": "stop"}', '{"type": "connection_init", "payload": "x"}'):
                await ws.send(message)
                async with asyncio.timeout(30):
                    while (answer := json.loads(await ws.recv()))["type"] == "ka":
                        pass
                assert answer["type"] == "connection_error" and answer["payload"]["message"], (message, answer)
                assert answer["payload"]["extensions"]["code"] == "BAD_REQUEST", answer
            await ws.close()
        # A connection_init refused (its payload not an object) leaves no socket open: its error, then the close.
        ws = await websockets.connect(url, subprotocols=["graphql-ws"])
        await ws.send('{"type": "connection_init", "payload": "x"}')
        assert json.loads(await asyncio.wait_for(ws.recv(), 30))["type"] == "connection_error"
        with pytest.raises(websockets.ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 30)
        # A number past 4,300 digits (int() refuses it) in the variables: the variable's refusal, both protocols.
        huge = '{"id": "h", "type": "%s", "payload": {"query": "subscription($n: String!) { citationAdded(arxivId: $n) { cursor } }", ' \
               '"variables": {"n": ' \
               + "9" * 4301 + "}}}"
        for protocol, start in (("graphql-transport-ws", "subscribe"), ("graphql-ws", "start")):
            ws = await opened(protocol)
            await ws.send(huge % start)
            async with asyncio.timeout(30):
                while (answer := json.loads(await ws.recv()))["type"] == "ka":
                    pass
            payload = answer["payload"]
            error = (payload if isinstance(payload, list) else payload.get("errors") or [payload])[0]
            assert error["extensions"]["code"] == "BAD_USER_INPUT" and "$n" in error["message"], (protocol, answer)
            await ws.close()
        # Clients that leave while their operations are answered (long documents, refused or read).
        for protocol, start in (("graphql-transport-ws", "subscribe"), ("graphql-ws", "start")):
            for n in range(5):
                ws = await opened(protocol)
                for i in range(4):
                    document = "{ d%d %s }" % (n * 10 + i, " ".join(f"w{protocol[8]}{n}x{i}x{j:05d}" for j in range(300)))
                    await ws.send(json.dumps({"id": str(i), "type": start, "payload": {"query": document}}))
                await ws.close()
        await asyncio.sleep(1)
        health = httpx.get(server.base + "/healthz", timeout=30)
        assert health.status_code == 200
    finally:
        logs = server.logs()
        server.stop()
    assert not [line for line in logs.splitlines() if " ERROR " in line or "Traceback" in line], logs[-3000:]


async def test_the_same_refusal_over_websockets(empty_database):
    import websockets

    server = LiveServer(empty_database, env={"PITH_ENV": "production", "PITH_ANONYMOUS_POINTS_PER_HOUR": "5"})
    try:
        async with websockets.connect(server.base.replace("http", "ws") + "/graphql",
                                      subprotocols=["graphql-transport-ws"]) as ws:
            await ws.send(json.dumps({"type": "connection_init"}))
            assert json.loads(await ws.recv())["type"] == "connection_ack"
            codes = []
            for i in range(10):
                await ws.send(json.dumps({"id": str(i), "type": "subscribe", "payload": {"query": "{ nope }"}}))
                message = json.loads(await ws.recv())
                assert message["type"] == "error", message
                codes.append(message["payload"][0]["extensions"]["code"])
        # Each refusal costs at least a point (more when its parse and validation took longer): at most five
        # of the five points' refusals are validation errors, then every operation is refused unparsed.
        first = codes.index("RATE_LIMITED")
        assert 1 <= first <= 5 and codes[:first] == ["GRAPHQL_VALIDATION_FAILED"] * first, codes
        assert codes[first:] == ["RATE_LIMITED"] * (10 - first), codes
    finally:
        server.stop()


async def test_document_caches_are_bounded_in_bytes_and_let_documents_go():
    import gc
    import weakref

    from graphql import specified_rules

    from app import cost
    from app.schema import LIMIT_RULES, make_schema

    schema = make_schema()._schema
    rules = (*specified_rules, *LIMIT_RULES)
    first = None
    for i in range(60):  # distinct 12 kB documents that fail validation (their size in a comment: quick to check)
        text = f"{{ nope{i} }} # " + "x" * 12_000
        document = cost._parsed(text, 5000)
        cost._validated(schema, document, rules, True)
        if first is None:
            first = weakref.ref(document)
        del document
    assert cost.document_cache_bytes() <= cost.DOCUMENT_CACHE_BYTES
    gc.collect()
    assert first() is None  # evicted from the parse cache, and no cache keyed by document kept it


TEXTS = {
    **ATTACKS,
    "1,000 distinct aliases": "{ " + " ".join(f"f7_{j}: nope" for j in range(1000)) + " }",
    "31 aliases": "{ " + " ".join(f"a{j}: __typename" for j in range(31)) + " }",
    "30 aliases": "{ " + " ".join(f"a{j}: __typename" for j in range(30)) + " }",
    "1,001 fields": "{ " + " __typename" * 1001 + " }",
    "1,000 fields": "{ " + " __typename" * 1000 + " }",
    "5,001 tokens": "{ f(" + "a: 1 " * 1665 + ") g }",
    "5,000 tokens": "{ f(" + "a: 1 " * 1665 + ") }",
    "tokens in strings, comments, block strings": '{ paper(arxivId: "a: b { c: d } }") { title } } # x: y { z: w }\n'
    + '{ f(a: """ q: r \\""" s: t { """) }' + " # " + "a: b " * 60,
    "arguments, input objects, defaults": 'query Q($v: In = {a: B, c: D}) @dir(x: {y: Z}) { f(a: {b: C, d: E}) '
    + "".join(f'a{j}: g(x: {{y: Z}}) @skip(if: $v) ' for j in range(31)) + "}",
    "spreads and inline fragments": "{ ...on, ... on Query { on ...F @include(if: true) } } fragment F on Query { "
    + " __typename" * 999 + " }",
    "a fragment of 1,001 fields": "query { __typename } fragment F on Query { " + " __typename" * 1001 + " }",
    "numbers": "{ f(a: 1.5e+10, b: -0, c: [1, -2, 3.25E-3]) " + " ".join(f"a{j}: g" for j in range(31)) + " }",
    "a schema definition": "type Query { " + " ".join(f"f{j}: Int" for j in range(40)) + " }",
    "a syntax error": "{ paper(",
    "named operations": "query A { " + " ".join(f"a{j}: __typename" for j in range(31)) + " } query B { x }",
}


async def test_what_the_text_alone_refuses_is_what_parsing_or_the_shape_check_refuses():
    """The lexical pre-check refuses a document only with the refusal the parser or the shape check gives
    it (never one they would let through), and tells the operations it would have chosen from."""
    from graphql import GraphQLError, parse

    from app.shape import lexical_problem, shape_problem

    refused = set()
    for label, text in TEXTS.items():
        early = lexical_problem(text, 5000)
        try:
            late = shape_problem(parse(text, max_tokens=5000))
        except GraphQLError as exc:
            late = exc
        if early is not None:
            refused.add(label)
            assert late is not None and late.message == early.message, (label, early.message, late)
            assert (early.extensions or {}).get("code") in ("QUERY_TOO_COMPLEX", "GRAPHQL_PARSE_FAILED")
    assert refused == {"4,989 x a", "__typename + 550 x paper{title}", "1,000 distinct aliases", "31 aliases",
                       "1,001 fields", "5,001 tokens", "arguments, input objects, defaults",
                       "a fragment of 1,001 fields", "numbers", "named operations"}, refused
    named = lexical_problem(TEXTS["named operations"], 5000)
    assert [(kind.value, name) for kind, name in named.operations] == [("query", "A"), ("query", "B")]


async def test_a_document_the_text_refuses_is_never_parsed_and_is_charged(budgeted):
    await within_one_budget_hour(60)
    from app import cost
    from app.shape import TextRefused

    client = budgeted.client
    left = remaining(await client.post("/graphql", json={"query": "{ __typename }"}))
    for n in range(3):  # distinct documents, none of them cached: the parser never saw them
        text = "{ " + " ".join(f"f{n}_{j}: nope" for j in range(1000)) + " }"
        answer = await client.post("/graphql", json={"query": text})
        assert [e["extensions"]["code"] for e in answer.json()["errors"]] == ["QUERY_TOO_COMPLEX"], answer.text[:300]
        kept = [entry for key, entry in cost._documents.items() if key[0] == text]
        assert kept and all(isinstance(document, TextRefused) for document, _ in kept)  # its refusal, no tree
        now = remaining(answer)
        assert now <= left - 1, (left, now)
        left = now
    answer = await client.post("/graphql", json={"query": text})  # again: refused from memory, charged all the same
    assert [e["extensions"]["code"] for e in answer.json()["errors"]] == ["QUERY_TOO_COMPLEX"], answer.text[:300]
    assert remaining(answer) <= left - 1
    # An operation name the document does not have is told as such, unparsed too.
    text = "query A { " + " ".join(f"a{j}: __typename" for j in range(31)) + " }"
    answer = await client.post("/graphql", json={"query": text, "operationName": "B"})
    assert [e["extensions"]["code"] for e in answer.json()["errors"]] == ["OPERATION_RESOLUTION_FAILURE"], answer.text


@pytest.mark.parametrize("protocol", ["graphql-transport-ws", "graphql-ws"])
async def test_subscriptions_past_a_connections_limit_are_charged_like_any_refusal(empty_database, protocol):
    """A subscription past the connection's limit is refused before any operation runs, saying the limit, with
    its code: each such refusal still costs its client a point."""
    import websockets

    from app.limits import MAX_SUBSCRIPTIONS_PER_CONNECTION

    server = LiveServer(empty_database, env={"PITH_ENV": "production", "PITH_REQUESTS_PER_SECOND": "0"})
    start = "subscribe" if protocol == "graphql-transport-ws" else "start"
    subscription = 'subscription { citationAdded(arxivId: "2402.15627") { __typename } }'

    def used() -> tuple[int, str]:  # the same client (its address) over HTTP: graphql-ws carries no queries
        answer = httpx.post(server.base + "/graphql", json={"query": "{ rateLimit { used resetAt } }"}, timeout=30)
        status = answer.json()["data"]["rateLimit"]
        return status["used"], status["resetAt"]

    try:
        for _ in range(2):  # budgets are per clock hour: a run that crosses the hour's end is run again
            before, hour = used()
            async with websockets.connect(server.base.replace("http", "ws") + "/graphql",
                                          subprotocols=[protocol]) as ws:
                await ws.send(json.dumps({"type": "connection_init"}))
                assert json.loads(await ws.recv())["type"] == "connection_ack"
                for i in range(MAX_SUBSCRIPTIONS_PER_CONNECTION):
                    await ws.send(json.dumps({"id": f"s{i}", "type": start, "payload": {"query": subscription}}))
                await asyncio.sleep(1)
                refused = []
                for i in range(10):
                    await ws.send(json.dumps({"id": f"x{i}", "type": start, "payload": {"query": subscription}}))
                    while True:
                        message = json.loads(await asyncio.wait_for(ws.recv(), 30))
                        if message.get("id") == f"x{i}":
                            refused.append(message)
                            break
                # Said with its limit and a code, as every error of every transport (not Strawberry's bare
                # "Subscription limit reached").
                for message in refused:
                    assert message["type"] == "error", message
                    (error,) = message["payload"] if isinstance(message["payload"], list) else [message["payload"]]
                    assert f"limit of {MAX_SUBSCRIPTIONS_PER_CONNECTION} operations" in error["message"], error
                    assert error["extensions"]["code"] == "BAD_USER_INPUT" and error["extensions"]["requestId"]
            after, hour_after = used()
            if hour_after == hour:
                break
        # The subscriptions a point or more each, and each of the ten refusals a point.
        assert after - before >= MAX_SUBSCRIPTIONS_PER_CONNECTION + 10, (before, after)
    finally:
        server.stop()


async def test_the_variable_rules_run_wherever_a_variable_is_and_only_there(served):
    """Validation leaves out the rules about variables for a document without a `$` token (they walk the whole
    operation for its variables' uses: most of the validation of a document of unknown fields), and keeps them
    for every document with one: an undefined variable, an unused one, one in the wrong place are still said."""
    from graphql import parse

    from app.cost import _uses_variables

    cases = {
        '{ paper(arxivId: $x) { title } }': "Variable '$x' is not defined.",
        'query($v: String) { __typename }': "Variable '$v' is never used.",
        'query($n: Int) { paper(arxivId: $n) { title } }': "Variable '$n' of type 'Int' used in position expecting type",
        'query Q($v: String) { __typename } query R { paper(arxivId: $v) { title } }':
            "Variable '$v' is not defined by operation 'R'.",
    }
    for document, said in cases.items():
        assert _uses_variables(parse(document))
        answer = await served.client.post("/graphql", json={"query": document, "operationName": "R"}
                                          if " R " in document else {"query": document})
        messages = [e["message"] for e in answer.json()["errors"]]
        assert any(m.startswith(said) for m in messages), (document, messages)
    plain = parse('{ paper(arxivId: "x") { title } search: __typename } # $ in a comment')
    assert not _uses_variables(plain) and _uses_variables(parse('{ paper(arxivId: "$x") { title } } '
                                                                 'query($a: String) { __typename }'))


async def test_a_long_text_that_does_not_parse_is_parsed_once_in_the_reader_thread_and_never_on_the_loop(
        served, monkeypatch):
    """A long text with a syntax error at its end: parsed once in the reader thread, its error kept, so the view's
    and the pipeline's readings of it (and a GET's validator) raise that error again without parsing, and the
    pipeline answers it as a text refused unparsed (Strawberry's own parse, which reported it on the event loop,
    is not asked): the same answer, its place and GRAPHQL_PARSE_FAILED, on every transport. It was four parses on
    the loop (77 ms), then one."""
    import threading

    from graphql.language.parser import Parser

    parses: list[str] = []
    original = Parser.parse_document

    def counted(self):  # noqa: ANN001, ANN202
        parses.append(threading.current_thread().name)
        return original(self)

    monkeypatch.setattr(Parser, "parse_document", counted)
    for n, method in enumerate(("POST", "GET")):
        document = "{ e%d(%s) }}" % (n, " ".join(f"a{j}: 7" for j in range(400)))
        parses.clear()
        if method == "POST":
            answer = await served.client.post("/graphql", json={"query": document})
        else:
            answer = await served.client.get("/graphql", params={"query": document})
        assert answer.json()["errors"][0]["message"].startswith("Syntax Error"), answer.text[:200]
        in_thread = [p for p in parses if p.startswith("pith-reader")]
        assert len(in_thread) == 1 and len(parses) == 1, (method, parses)
        error = answer.json()["errors"][0]
        assert error["extensions"]["code"] == "GRAPHQL_PARSE_FAILED" and error["locations"][0]["column"] > 2_000, error
    document = "{ e9(%s) }}" % " ".join(f"a{j}: 7" for j in range(400))  # over SSE: the same error, then complete
    parses.clear()
    answer = await served.client.post("/graphql", json={"query": document}, headers={"accept": "text/event-stream"})
    events = [line[len("data: "):] for line in answer.text.splitlines() if line.startswith("data: {")]
    error = json.loads(events[0])["errors"][0]
    assert error["extensions"]["code"] == "GRAPHQL_PARSE_FAILED" and error["message"].startswith("Syntax Error")
    assert "event: complete" in answer.text and len(parses) == 1, parses
