"""Safe in the open: work priced before it runs, deadlines, budgets per client, connection limits, and one
masking policy on every transport. The hostile operations of the governance table are rerun here on a
synthetic graph (bench/calibrate.py reruns them at 10,000 papers, with their times)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import subprocess
import sys
import time

import asyncpg
import httpx
import pytest
import pytest_asyncio
import websockets

from app.limits import MAX_COST, MAX_WEBSOCKETS_PER_CLIENT
from app.settings import Settings
from tests.conftest import (SEED, LiveServer, StatementLog, assert_settled, drop_database, most_cited, serve,
                            synthetic_database, within_one_budget_hour)

pytestmark = pytest.mark.asyncio(loop_scope="session")

DIFF = ('recordDiff(arxivId: $a, from: "2000-01-01T00:00:00Z", to: "2030-01-01T00:00:00Z") '
        '{ toContextDigest changesTruncated changes { kind observedAt observation { observationId '
        'citingPaper { title } } } }')


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def synth(admin_url):
    url = await synthetic_database(admin_url, "pith_test_gov", 1500, 19)
    yield url
    await drop_database(admin_url, url)


async def ids_of(url: str, n: int = 100) -> list[str]:
    conn = await asyncpg.connect(url)
    try:
        return [r[0] for r in await conn.fetch("SELECT DISTINCT arxiv_id FROM paper_snapshots ORDER BY 1 LIMIT $1", n)]
    finally:
        await conn.close()


def table(top: str, ids: list[str]) -> dict[str, tuple[str, dict]]:
    """The governance issue's hostile operations (the ones one request can carry)."""
    return {
        "recordDiff of the most-cited paper from 2000 to now": ("query($a: String!) { " + DIFF + " }", {"a": top}),
        "ten aliases of it": ("query($a: String!) { " + " ".join(f"d{i}: {DIFF}" for i in range(10)) + " }",
                              {"a": top}),
        "papers(100) x inbound(100) x citingPaper x inbound(40)": (
            "query($ids: [String!]!) { papers(arxivIds: $ids) { inbound(first: 100) { edges { node { citingPaper { "
            "inbound(first: 40) { edges { node { referenceIndex } } } } } } } } }", {"ids": ids}),
        "papers(100) x timeline(100)": (
            "query($ids: [String!]!) { papers(arxivIds: $ids) { timeline(first: 100) { edges { node { at "
            "contextDigest kinds } } } } }", {"ids": ids}),
    }


async def test_the_hostile_table_is_refused_before_it_runs_or_finishes_within_the_deadline(synth):
    top, ids = await most_cited(synth), await ids_of(synth)
    log = StatementLog()
    settings = Settings(database_url=synth, request_timeout=10)
    outcomes = {}
    async for s in serve(synth, log, settings):
        for name, (query, variables) in table(top, ids).items():
            log.clear()
            started = time.monotonic()
            response = await s.client.post("/graphql", json={"query": query, "variables": variables})
            elapsed = time.monotonic() - started
            body = response.json()
            cost = body["extensions"]["cost"]
            if body.get("errors"):
                error = body["errors"][0]
                assert error["extensions"]["code"] == "QUERY_TOO_COSTLY", (name, error)
                assert str(MAX_COST) in error["message"] and "work units" in error["message"]
                assert log.counted == [], f"{name}: a refused operation must not reach the database"
                outcomes[name] = "refused"
            else:
                assert response.status_code == 200 and elapsed < 10, (name, elapsed)
                assert cost["requested"] <= MAX_COST and cost["actual"] > 0
                outcomes[name] = "ran"
        # One recordDiff runs, bounded by maxChanges; ten of them in one operation do not.
        assert outcomes["recordDiff of the most-cited paper from 2000 to now"] == "ran"
        assert outcomes["ten aliases of it"] == "refused"
        assert outcomes["papers(100) x inbound(100) x citingPaper x inbound(40)"] == "refused"
        assert outcomes["papers(100) x timeline(100)"] == "refused"
        # The diff of the most-cited paper has more changes than its default maxChanges: it says so.
        query, variables = table(top, ids)["recordDiff of the most-cited paper from 2000 to now"]
        body = (await s.client.post("/graphql", json={"query": query, "variables": variables})).json()
        diff = body["data"]["recordDiff"]
        assert len(diff["changes"]) <= 1000
        small = (await s.client.post("/graphql", json={"query": query.replace(
            'to: "2030-01-01T00:00:00Z")', 'to: "2030-01-01T00:00:00Z", maxChanges: 5)'), "variables": variables})).json()
        assert len(small["data"]["recordDiff"]["changes"]) == 5 and small["data"]["recordDiff"]["changesTruncated"]
        assert small["extensions"]["cost"]["requested"] < body["extensions"]["cost"]["requested"]
        bad = (await s.client.post("/graphql", json={"query": query.replace(
            'to: "2030-01-01T00:00:00Z")', 'to: "2030-01-01T00:00:00Z", maxChanges: 0)'), "variables": variables})).json()
        assert bad["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT" and "1 to 10000" in bad["errors"][0]["message"]


async def test_a_timeline_per_paper_is_priced_by_its_entries(synth):
    ids = await ids_of(synth, 3)
    log = StatementLog()
    async for s in serve(synth, log):
        await s.app.state.pith.refresh_scale_once()  # the price of data-sized work, from PostgreSQL's statistics
        priced = {}
        for first in (1, 10, 50):
            body = (await s.client.post("/graphql", json={"query": "query($ids: [String!]!) { papers(arxivIds: $ids) "
                                                          f"{{ timeline(first: {first}) {{ nodes {{ at }} }} }} }}",
                                                          "variables": {"ids": ids[:1]}})).json()
            assert "errors" not in body, body
            priced[first] = body["extensions"]["cost"]["requested"]
        assert priced[1] < priced[10] < priced[50]


async def test_timelines_of_many_papers_cost_the_statements_of_one_and_equal_each_alone(synth):
    ids = await ids_of(synth, 30)
    log = StatementLog()
    query = ("query($ids: [String!]!) { papers(arxivIds: $ids) { arxivId timeline(first: 3) { edges { cursor "
             "node { at contextDigest kinds } } pageInfo { hasNextPage endCursor } } } }")
    async for s in serve(synth, log):
        counts, pages = {}, {}
        for n in (1, 2, 4):  # each priced by its own size
            log.clear()
            body = (await s.client.post("/graphql", json={"query": query, "variables": {"ids": ids[:n]}})).json()
            assert "errors" not in body, body
            counts[n] = len(log.counted)
            pages.update({p["arxivId"]: p["timeline"] for p in body["data"]["papers"]})
        assert counts[1] == counts[2] == counts[4] <= 10, counts  # independent of the fan-out (with the sizes' read)
        for arxiv_id in ids[:4]:  # batched pages equal each paper asked alone
            alone = (await s.client.post("/graphql", json={"query": query, "variables": {"ids": [arxiv_id]}})).json()
            assert alone["data"]["papers"][0]["timeline"] == pages[arxiv_id]
        assert any(p["edges"] for p in pages.values())


async def test_a_request_stuck_on_a_lock_ends_at_the_deadline_and_leaves_no_transaction(synth, caplog):
    paper = (await ids_of(synth, 1))[0]
    lookup = {"query": "query($a: String!) { paper(arxivId: $a) { title inbound(first: 2) { totalCount } } }",
              "variables": {"a": paper}}
    ordinary = {"query": "query($a: String!) { citationRecord(arxivId: $a) { contextDigest } }",
                "variables": {"a": paper}}
    settings = Settings(database_url=synth, request_timeout=1.0, statement_timeout_ms=30_000)
    async for s in serve(synth, StatementLog(), settings, expect_5xx=True):  # 504 on purpose
        assert (await s.client.post("/graphql", json=lookup)).status_code == 200  # prepared from now on
        locker = await asyncpg.connect(synth)
        try:
            tx = locker.transaction()
            await tx.start()
            await locker.execute("LOCK TABLE paper_snapshots IN ACCESS EXCLUSIVE MODE")
            for payload in (lookup, ordinary):  # a plan, then the whole pipeline
                started = time.monotonic()
                response = await s.client.post("/graphql", json=payload)
                elapsed = time.monotonic() - started
                assert response.status_code == 504, response.text
                error = response.json()["errors"][0]
                assert error["extensions"]["code"] == "TIMEOUT" and "1 s deadline" in error["message"]
                assert error["extensions"]["requestId"] == response.headers["x-request-id"]
                assert 0.9 < elapsed < 5, elapsed
            await tx.rollback()
        finally:
            await locker.close()
        await asyncio.sleep(0.2)
        conn = await asyncpg.connect(synth)
        try:
            idle_in_tx = await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pith-graph' "
                "AND datname = current_database() AND state LIKE 'idle in transaction%'")
        finally:
            await conn.close()
        assert idle_in_tx == 0
        await assert_settled(s.app.state.pith.pool, synth)
        # The cancelled statements' transactions were the pool's to roll back (asyncpg says so at ERROR): no
        # ERROR line for what the deadline is meant to do.
        assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR], caplog.text[-2000:]
        assert (await s.client.post("/graphql", json=ordinary)).status_code == 200


def keys(url: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.cli", "keys", *args], env={**os.environ, "DATABASE_URL": url},
                          capture_output=True, text=True, timeout=60)


def new_key(url: str, name: str, points: int) -> str:
    made = keys(url, "create", "--name", name, "--points-per-hour", str(points))
    assert made.returncode == 0, made.stderr
    secret = made.stdout.strip().splitlines()[-1]
    assert secret.startswith("pith_") and " " not in secret
    return secret


RATE = "{ rateLimit { limit cost remaining used resetAt } __typename }"


async def test_budgets_per_key_rate_limit_headers_429_and_401(synth):
    await within_one_budget_hour(90)
    small, large = new_key(synth, "small", 5), new_key(synth, "large", 1000)
    conn = await asyncpg.connect(synth)
    try:
        stored = await conn.fetch("SELECT secret_sha256 FROM api_keys")
        assert all(small.encode() not in bytes(r[0]) for r in stored)  # only a hash is kept
    finally:
        await conn.close()
    settings = Settings(database_url=synth, anonymous_points_per_hour=20)
    async for s in serve(synth, StatementLog(), settings):
        def auth(secret: str) -> dict:
            return {"authorization": f"Bearer {secret}"}

        remaining = []
        for _ in range(5):
            response = await s.client.post("/graphql", json={"query": RATE}, headers=auth(small))
            assert response.status_code == 200, response.text
            limit = response.json()["data"]["rateLimit"]
            assert limit["limit"] == 5 and limit["cost"] == 1
            remaining.append(limit["remaining"])
            assert response.headers["ratelimit-policy"] == '"points";q=5;w=3600'
            assert response.headers["ratelimit"].startswith(f'"points";r={limit["remaining"]};t=')
        assert remaining == [4, 3, 2, 1, 0]
        refused = await s.client.post("/graphql", json={"query": RATE}, headers=auth(small))
        assert refused.status_code == 429, refused.text
        assert int(refused.headers["retry-after"]) >= 1
        error = refused.json()["errors"][0]
        assert error["extensions"]["code"] == "RATE_LIMITED" and error["extensions"]["remaining"] == 0
        # What a client can do: not "a smaller first" (a smaller page costs more points a row, and nothing fits an
        # hour spent), but the largest pages, the bulk routes for a whole list, or a key.
        assert "inbound.ndjson" in error["message"] and "smaller" not in error["message"], error["message"]
        # A key holder is told its key's budget is the operator's to set, not that a key has a budget of its own.
        assert "this key's budget" in error["message"] and "has a budget of its own" not in error["message"]
        assert "ratelimit" in refused.headers
        # Other keys and anonymous clients have budgets of their own.
        other = await s.client.post("/graphql", json={"query": RATE}, headers=auth(large))
        assert other.status_code == 200 and other.json()["data"]["rateLimit"]["remaining"] == 999
        anonymous = await s.client.post("/graphql", json={"query": RATE})
        assert anonymous.json()["data"]["rateLimit"]["limit"] == 20 and "ratelimit" in anonymous.headers
        # A heavier operation costs more points (a point per 100 work units), settled to what it did.
        heavy = {"query": "{ searchPapers(query: \"learning\", first: 50) { edges { node { title } } } "
                          "rateLimit { cost remaining } }"}
        before = (await s.client.post("/graphql", json={"query": RATE}, headers=auth(large))).json()
        charged = (await s.client.post("/graphql", json=heavy, headers=auth(large))).json()
        assert charged["data"]["rateLimit"]["cost"] > 1
        after = (await s.client.post("/graphql", json={"query": RATE}, headers=auth(large))).json()
        spent = before["data"]["rateLimit"]["remaining"] - after["data"]["rateLimit"]["remaining"]
        assert 1 <= spent - 1 <= charged["data"]["rateLimit"]["cost"]  # the RATE query itself costs 1
        # Unknown, revoked and malformed keys: 401, nothing runs (each a point of the address's anonymous hour).
        for value in ("Bearer pith_unknown", "Basic abc", "Bearer "):
            response = await s.client.post("/graphql", json={"query": RATE}, headers={"authorization": value})
            assert response.status_code == 401, (value, response.text)
            assert response.json()["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"
        revoked = new_key(synth, "revoked", 100)
        assert keys(synth, "revoke", "--name", "revoked").returncode == 0
        response = await s.client.post("/graphql", json={"query": RATE}, headers=auth(revoked))
        assert response.status_code == 401
        listed = keys(synth, "list")
        assert "small" in listed.stdout and "revoked" in listed.stdout and small not in listed.stdout
        # An anonymous client over its hour is told a key has a budget of its own.
        for _ in range(25):
            spent = await s.client.post("/graphql", json={"query": RATE})
        assert spent.status_code == 429
        told = spent.json()["errors"][0]["message"]
        assert "an API key has a budget of its own" in told and "this key's budget" not in told, told


async def test_budgets_hold_across_two_worker_processes(synth):
    secret = new_key(synth, "two-workers", 12)
    server = LiveServer(synth, env={"PITH_WORKERS": "2"})
    try:
        statuses = []
        for i in range(30):
            # A new connection each time: the kernel spreads them over the two workers.
            async with httpx.AsyncClient(base_url=server.base) as client:
                response = await client.post("/graphql", json={"query": RATE},
                                             headers={"authorization": f"Bearer {secret}", "x-request-id": f"w{i}"})
                statuses.append(response.status_code)
        assert statuses.count(200) == 12 and statuses.count(429) == 18, statuses  # never more than the budget
        assert statuses[:12] == [200] * 12
    finally:
        server.stop()
    # Both workers answered (the access lines name their process).
    pids = {line.split()[2] for line in server.logs().splitlines() if "pith.access [w" in line}
    assert len(pids) == 2, server.logs()[-3000:]


async def test_headers_past_the_bound_get_431_without_being_read(database_url):
    server = LiveServer(database_url)
    try:
        # Just past the bound, then nothing more: the answer is 431, in the GraphQL error shape.
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 30_000 + b"\r\n\r\n")
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(4096), 5)
        writer.close()
        assert answer.startswith(b"HTTP/1.1 431"), answer[:200]
        assert b"REQUEST_HEADER_FIELDS_TOO_LARGE" in answer
        # A 100 MB header: the server stops reading at the bound and closes, long before the end.
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ")
        started, sent = time.monotonic(), 0
        with pytest.raises((ConnectionResetError, BrokenPipeError)):
            while sent < 100_000_000:
                writer.write(b"a" * 65536)
                sent += 65536
                await asyncio.wait_for(writer.drain(), 5)
        assert sent < 20_000_000 and time.monotonic() - started < 10, sent
        writer.close()
        async with httpx.AsyncClient(base_url=server.base) as client:  # the server goes on serving
            assert (await client.get("/healthz")).status_code == 200
            assert (await client.get("/healthz", headers={"x-fine": "b" * 8000})).status_code == 200
    finally:
        server.stop()


async def test_websockets_per_client_are_capped_and_freed_on_close(database_url):
    server = LiveServer(database_url)
    url = server.base.replace("http://", "ws://") + "/graphql"
    held = []
    try:
        # A bad key in connection_init is refused, with a reason.
        bad = await websockets.connect(url, subprotocols=["graphql-transport-ws"])
        await bad.send(json.dumps({"type": "connection_init", "payload": {"authorization": "Bearer pith_nope"}}))
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await bad.recv()
        assert closed.value.rcvd.code == 4403 and "API key is unknown" in closed.value.rcvd.reason, closed.value.rcvd
        # graphql-ws: its connection_error, with the same reason.
        bad = await websockets.connect(url, subprotocols=["graphql-ws"])
        await bad.send(json.dumps({"type": "connection_init", "payload": {"authorization": "Bearer pith_nope"}}))
        answer = json.loads(await asyncio.wait_for(bad.recv(), 10))
        assert answer["type"] == "connection_error" and "API key is unknown" in answer["payload"]["reason"], answer
        await bad.close()
        for _ in range(MAX_WEBSOCKETS_PER_CLIENT):
            ws = await websockets.connect(url, subprotocols=["graphql-transport-ws"])
            await ws.send(json.dumps({"type": "connection_init"}))
            assert json.loads(await ws.recv())["type"] == "connection_ack"
            held.append(ws)
        refused = await websockets.connect(url, subprotocols=["graphql-transport-ws"])
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await refused.recv()
        assert closed.value.rcvd.code == 4429 and "limit" in closed.value.rcvd.reason
        await held.pop().close()
        for _ in range(50):  # the server frees the slot once it has seen the close
            again = await websockets.connect(url, subprotocols=["graphql-transport-ws"])
            try:
                await again.send(json.dumps({"type": "connection_init"}))
                assert json.loads(await again.recv())["type"] == "connection_ack"
                break
            except websockets.ConnectionClosed:
                await asyncio.sleep(0.1)
        else:
            raise AssertionError("a closed connection's slot was not freed")
        held.append(again)
    finally:
        for ws in held:
            await ws.close()
        server.stop()


async def test_a_registration_flood_neither_evicts_documents_in_use_nor_locks_new_ones_out(empty_database,
                                                                                       monkeypatch):
    from app import persisted
    from app.persisted import sha256_hex

    # A table of 1,000 documents flooded with 1,200 new ones (the rule is the same at the real 10,000).
    monkeypatch.setattr(persisted, "MAX_STORED", 1_000)
    secret = new_key(empty_database, "flooder", 1_000_000)
    settings = Settings(database_url=empty_database)
    in_use = "query InUse { __typename }"
    async for s in serve(empty_database, StatementLog(), settings):
        def apq(document: str | None, sha: str) -> dict:
            body: dict = {"extensions": {"persistedQuery": {"version": 1, "sha256Hash": sha}}}
            if document is not None:
                body["query"] = document
            return body

        assert (await s.client.post("/graphql", json=apq(in_use, sha256_hex(in_use)))).status_code == 200
        flood = {"authorization": f"Bearer {secret}"}
        for i in range(1_200):
            document = f"query Flood{i} {{ __typename }}"
            await s.client.post("/graphql", json=apq(document, sha256_hex(document)), headers=flood)
            if i % 300 == 0:  # the document in use keeps being used during the flood
                fresh = s.app.state.pith.persisted
                fresh._seen.clear()  # as a process that has not seen it would: from the table
                used = await s.client.post("/graphql", json=apq(None, sha256_hex(in_use)))
                assert used.json() == {"data": {"__typename": "Query"}, "extensions": used.json()["extensions"]}
        assert s.app.state.pith.persisted.refused >= 1_100
        # A legitimate client registers a new document after the flood; any process serves it by hash.
        late = "query Late { __typename }"
        assert (await s.client.post("/graphql", json=apq(late, sha256_hex(late)))).status_code == 200
        s.app.state.pith.persisted._seen.clear()
        served = (await s.client.post("/graphql", json=apq(None, sha256_hex(late)))).json()
        assert served["data"] == {"__typename": "Query"}, served
        served = (await s.client.post("/graphql", json=apq(None, sha256_hex(in_use)))).json()
        assert served["data"] == {"__typename": "Query"}, served


async def test_a_full_table_evicts_the_least_recently_used(empty_database, monkeypatch):
    from app import persisted

    monkeypatch.setattr(persisted, "MAX_STORED", 3)
    docs = [f"query D{i} {{ __typename }}" for i in range(5)]
    conn = await asyncpg.connect(empty_database)
    try:
        for i, document in enumerate(docs[:3]):
            await conn.execute(persisted.REGISTER, persisted.sha256_hex(document), document, 3)
            await conn.execute("UPDATE persisted_queries SET last_used = now() - make_interval(mins => $2) "
                               "WHERE sha256 = $1", persisted.sha256_hex(document), 10 - i)
        await conn.execute("UPDATE persisted_queries SET last_used = now() WHERE sha256 = $1",
                           persisted.sha256_hex(docs[0]))  # D0 used just now: D1 is the least recent
        await conn.execute(persisted.REGISTER, persisted.sha256_hex(docs[3]), docs[3], 3)
        left = {r[0] for r in await conn.fetch("SELECT document FROM persisted_queries")}
    finally:
        await conn.close()
    assert left == {docs[0], docs[2], docs[3]}


async def test_a_database_failure_reaches_every_transport_masked_with_the_request_id_and_is_logged_once(
        empty_database):
    from app.ingest.load import load_file

    conn = await asyncpg.connect(empty_database)
    try:
        await load_file(conn, str(SEED))
    finally:
        await conn.close()
    server = LiveServer(empty_database, expect_5xx=True)  # a database failure is a 503, never a 200
    url = server.base.replace("http://", "ws://") + "/graphql"
    record = "{ citationRecord(arxivId: \"2402.15627\") { contextDigest } }"
    lookup = "{ paper(arxivId: \"2402.15627\") { title } }"
    subscription = "subscription { recordChanged(arxivId: \"2402.15627\") { contextDigest } }"
    seen: list[tuple[str, dict]] = []
    conn = await asyncpg.connect(empty_database)
    try:
        # The table every read needs goes away under the running server: nothing the code expects.
        await conn.execute("ALTER TABLE paper_snapshots RENAME TO paper_snapshots_gone")
        async with httpx.AsyncClient(base_url=server.base) as client:
            for query in (record, lookup, lookup):  # the pipeline, the compiled statement, a plan
                response = await client.post("/graphql", json={"query": query})
                assert response.status_code == 503, response.text
                seen.append((response.headers["x-request-id"], response.json()["errors"][0]))
            async with client.stream("POST", "/graphql", json={"query": subscription},
                                     headers={"accept": "text/event-stream"}) as stream:
                rid = stream.headers["x-request-id"]
                async for line in stream.aiter_lines():
                    if line.startswith("data:") and "errors" in line:
                        seen.append((rid, json.loads(line[5:])["errors"][0]))
                        break
        for protocol in ("graphql-transport-ws", "graphql-ws"):
            async with websockets.connect(url, subprotocols=[protocol],
                                          additional_headers={"x-request-id": f"ws-{protocol}"}) as ws:
                await ws.send(json.dumps({"type": "connection_init"}))
                assert json.loads(await ws.recv())["type"] == "connection_ack"
                start = "subscribe" if protocol == "graphql-transport-ws" else "start"
                await ws.send(json.dumps({"id": "1", "type": start, "payload": {"query": subscription}}))
                while True:
                    message = json.loads(await asyncio.wait_for(ws.recv(), 10))
                    if message["type"] in ("next", "data") and message["payload"].get("errors"):
                        seen.append((f"ws-{protocol}", message["payload"]["errors"][0]))
                        break
                    if message["type"] == "error":
                        payload = message["payload"]
                        seen.append((f"ws-{protocol}", payload[0] if isinstance(payload, list) else payload))
                        break
    finally:
        await conn.execute("ALTER TABLE paper_snapshots_gone RENAME TO paper_snapshots")
        await conn.close()
        logs = server.logs()
        server.stop()
    assert len(seen) == 6, seen
    for rid, error in seen:
        assert error["message"] == f"the database could not answer (request id {rid}); retry shortly", error
        assert error["extensions"] == {"code": "SERVICE_UNAVAILABLE", "requestId": rid}
        assert "paper_snapshots" not in json.dumps(error)
        assert logs.count(f"[{rid}]") >= 1
        assert sum(1 for line in logs.splitlines() if f"[{rid}]" in line and "unexpected error" in line) == 1, rid


def free_socket_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_heavy_work_takes_its_turns_after_the_light_operations_in_flight(served):
    from app.governor import LightFirst

    first = LightFirst(longest=3600)
    await first.turn()  # nothing light in flight: on at once
    first.begin()
    first.begin()
    waiting = [asyncio.ensure_future(first.turn()) for _ in range(3)]
    for _ in range(20):
        await asyncio.sleep(0)
    assert not any(w.done() for w in waiting)  # heavy turns wait while light work is in flight
    first.end()
    await asyncio.sleep(0)
    assert not any(w.done() for w in waiting)
    first.end()
    await asyncio.wait_for(asyncio.gather(*waiting), 30)  # the last light operation ended: every turn goes on
    bounded = LightFirst(longest=0.01)
    bounded.begin()
    await asyncio.wait_for(bounded.turn(), 30)  # light work that never ends delays a turn, never stops it
    # The process's count is balanced by every operation, answered (by the pipeline or the prepared fast path)
    # or refused.
    for query in ("{ __typename }", "{ nope }", "{ paper(", '{ paper(arxivId: "2402.15627") { title } }'):
        for _ in range(3):
            await served.client.post("/graphql", json={"query": query})
    assert served.app.state.pith.governor.light_first.light == 0


async def test_a_process_runs_few_costly_operations_at_once_and_lookups_never_wait_for_them():
    """However many clients send operations priced over LIGHT_COST, each within its own budget, a process runs
    COSTLY_SLOTS of them at once; the next waits its turn (given up with its deadline, taking no slot), and a
    light operation is admitted at once all the while, as is one that holds a database connection already."""
    from app.governor import Governor
    from app.limits import COSTLY_SLOTS, LIGHT_COST

    governor = Governor(lambda: None, anonymous_points_per_hour=None)
    costly = [await asyncio.wait_for(governor.admit(governor.anonymous(f"198.51.100.{n}"), 5, LIGHT_COST + 1), 5)
              for n in range(COSTLY_SLOTS)]
    waiting = asyncio.ensure_future(governor.admit(governor.anonymous("198.51.100.99"), 5, LIGHT_COST + 1))
    given_up = asyncio.ensure_future(asyncio.wait_for(
        governor.admit(governor.anonymous("198.51.100.98"), 5, LIGHT_COST + 1), 0.05))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not waiting.done()
    lookup = await asyncio.wait_for(governor.admit(governor.anonymous("198.51.100.50"), 1, LIGHT_COST), 5)
    assert lookup.light
    # One whose session holds a connection already (its sizes read for its price) does not wait for a slot:
    # waiting so, behind PgBouncer's few server connections, the slot holders waited for it.
    class Holding:  # a session that has sent a statement: its connection is held
        statements = 1

    holding = await asyncio.wait_for(governor.admit(governor.anonymous("198.51.100.51"), 5, LIGHT_COST + 1,
                                                    Holding()), 5)
    governor.settle(holding, None)
    with pytest.raises(TimeoutError):
        await given_up
    governor.settle(lookup, None)
    governor.settle(costly[0], None)
    late = await asyncio.wait_for(waiting, 5)  # a slot let go: the next in line runs
    for ticket in (*costly[1:], late):
        governor.settle(ticket, None)
    assert governor.costly._value == COSTLY_SLOTS  # every slot back, the given-up wait's included


async def test_the_workers_of_a_server_share_its_heavy_slots(tmp_path):
    """Two processes' slots over one folder (two SharedSlots: flock's locks are per open file, so they exclude each
    other as two processes' do): one slot is held by one at a time, handed over when let go, and a wait given up
    (an operation's deadline) takes no slot with it."""
    from app.governor import SharedSlots

    one, other = SharedSlots(str(tmp_path), 1, 1), SharedSlots(str(tmp_path), 1, 1)
    held = await one.acquire()
    waiting = asyncio.ensure_future(other.acquire())
    await asyncio.sleep(0.2)
    assert not waiting.done()  # the slot is taken
    one.release(held)
    other.release(await asyncio.wait_for(waiting, 30))
    held = await one.acquire()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.1):
            await other.acquire()
    one.release(held)
    # The given-up wait got the slot as it was let go, and gave it on: both can take it again.
    other.release(await asyncio.wait_for(other.acquire(), 30))
    one.release(await asyncio.wait_for(one.acquire(), 30))


def list_scope(port: int) -> dict:
    """An ASGI request for the sample paper's inbound list, for a test's own receive and send."""
    return {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
            "method": "GET", "scheme": "http", "path": "/paper/2402.15627/inbound.ndjson", "raw_path": b"",
            "query_string": b"", "root_path": "", "headers": [(b"host", b"testserver")],
            "client": ("127.0.0.1", port), "server": ("testserver", 80)}


async def test_a_list_whose_reader_goes_away_or_stops_reading_gives_its_slot_and_session_back(database_url, statements,
                                                                                               monkeypatch):
    """A streamed list holds a heavy slot and a transaction: a reader that hangs up before the list starts, one that
    hangs up in the middle, and one that stops reading (cut at the list's bound) each leave every slot and pool
    connection free. Driven through the ASGI app with receive/send of the test's own: a client's exact timing."""
    from app import governor as governor_module

    monkeypatch.setattr(governor_module, "HEAVY_COST", 0)  # every operation heavy: the list takes a slot
    settings = Settings(database_url=database_url, request_timeout=1.0)
    async for served in serve(database_url, statements, settings):
        state = served.app.state.pith
        free = state.governor.heavy._value
        scope = list_scope(5555)

        def client(*, hang_up_after: int | None, reads: bool) -> tuple:
            sent: list[dict] = []
            gone = asyncio.Event()
            asked = [False]

            async def receive() -> dict:
                if not asked[0]:
                    asked[0] = True
                    return {"type": "http.request", "body": b"", "more_body": False}
                await gone.wait()
                return {"type": "http.disconnect"}

            async def send(message: dict) -> None:
                sent.append(message)
                if hang_up_after is not None and len(sent) >= hang_up_after:
                    gone.set()
                    await asyncio.sleep(3600)  # the write never completes: the server must notice the hang-up
                if not reads and message["type"] == "http.response.body":
                    await asyncio.sleep(3600)  # a reader that stopped reading

            return receive, send, sent

        for label, hang_up_after, reads in (("gone before the list", 1, True), ("gone in the middle", 2, True),
                                            ("stopped reading", None, False)):
            receive, send, sent = client(hang_up_after=hang_up_after, reads=reads)
            await asyncio.wait_for(served.app(dict(scope), receive, send), 60)
            assert sent and sent[0].get("status") == 200, (label, sent[:1])
            assert not any(m.get("more_body") is False for m in sent), (label, "the list must not look whole")
            await asyncio.sleep(0.1)
            assert state.governor.heavy._value == free, label
            await assert_settled(state.pool, database_url)
        # And a reader that reads gets the whole list, the slot given back after.
        whole = await served.client.get("/paper/2402.15627/inbound.ndjson")
        assert whole.status_code == 200 and whole.text.count("\n") >= 1, whole.text[:200]
        assert state.governor.heavy._value == free


async def test_a_list_whose_reader_stops_reading_is_cut_at_its_stall_not_its_whole_bound(database_url, statements,
                                                                                        monkeypatch):
    """A reader that takes nothing (its buffers full) for LIST_STALL_SECONDS loses its list then, its slot and
    transaction given back, not at the list's whole bound (the deadline and a second per thousand rows: a stalled
    download held the one heavy slot of a two-core server for 29 s)."""
    from app import governor as governor_module
    from app.web import routes

    monkeypatch.setattr(governor_module, "HEAVY_COST", 0)
    monkeypatch.setattr(routes, "LIST_STALL_SECONDS", 0.5)
    settings = Settings(database_url=database_url, request_timeout=300.0)  # the whole bound: five minutes and more
    async for served in serve(database_url, statements, settings):
        state = served.app.state.pith
        free = state.governor.heavy._value
        scope = list_scope(5556)
        sent: list[dict] = []
        asked = [False]

        async def receive() -> dict:
            if not asked[0]:
                asked[0] = True
                return {"type": "http.request", "body": b"", "more_body": False}
            await asyncio.sleep(3600)
            return {"type": "http.disconnect"}

        async def send(message: dict) -> None:
            sent.append(message)
            if message["type"] == "http.response.body":
                await asyncio.sleep(3600)  # the reader's buffers are full: the write never completes

        await asyncio.wait_for(served.app(dict(scope), receive, send), 60)  # (the bound would take 300 s)
        assert sent[0].get("status") == 200 and not any(m.get("more_body") is False for m in sent)
        await asyncio.sleep(0.1)
        assert state.governor.heavy._value == free
        await assert_settled(state.pool, database_url)


async def test_a_list_or_page_that_waits_past_its_deadline_for_a_slot_is_503_with_retry_after(database_url,
                                                                                             statements, monkeypatch):
    """Ten downloads at once, one heavy slot: those that never got it by their deadline were 504 "ask for less
    (smaller first, maxChanges...)", words for a request too big. Nothing ran; the server was busy: 503 with
    Retry-After, on the bulk list and on a governed page alike."""
    from app import governor as governor_module

    monkeypatch.setattr(governor_module, "HEAVY_COST", 0)  # every operation heavy: each takes a slot
    settings = Settings(database_url=database_url, request_timeout=0.5)
    async for served in serve(database_url, statements, settings, expect_5xx=True):
        governor = served.app.state.pith.governor
        held = governor.heavy._value
        for _ in range(held):
            await governor.heavy.acquire()
        try:
            for path in ("/paper/2402.15627/inbound.ndjson", "/paper/2402.15627/citation-record.json"):
                busy = await served.client.get(path)
                assert busy.status_code == 503 and busy.headers["retry-after"], (path, busy.status_code, busy.text)
                message = busy.json()["error"]["message"]
                assert "busy" in message and "ask for less" not in message, (path, message)
        finally:
            for _ in range(held):
                governor.heavy.release()
        assert (await served.client.get("/paper/2402.15627/inbound.ndjson")).status_code == 200


async def test_an_operation_cancelled_while_it_waits_for_its_turn_gives_its_slots_back(database_url, statements):
    """An operation over LIGHT_COST, admitted (a costly slot held), waits for its turn while light work is in
    flight; its client leaving then (the request cancelled) must give the slot back. It did not: two such
    requests among a hundred abandoned ones left the process's two costly slots taken for good, and every
    later operation over LIGHT_COST waited out its deadline (503)."""
    settings = Settings(database_url=database_url, request_timeout=30.0)
    query = ('{ paper(arxivId: "2402.15627") { title inbound(first: 20) { totalCount edges { node { citingPaper { '
             'title } resolution { status } } } } outbound(first: 20) { totalCount edges { node { citedWork { '
             'title } } } } } }')
    # (In process, the cancel reaches the request as a server's stop would: its unsent answer is a 503 no one reads.)
    async for served in serve(database_url, statements, settings, expect_5xx=True):
        governor = served.app.state.pith.governor
        probe = await served.client.post("/graphql", json={"query": query})
        assert probe.json()["extensions"]["cost"]["requested"] > 500, probe.json()  # over LIGHT_COST: a costly slot
        free = governor.costly._value
        governor.light_first.begin()  # a light operation in flight: the costly one waits for its turn
        try:
            asked = asyncio.create_task(served.client.post("/graphql", json={"query": query}))
            for _ in range(500):
                await asyncio.sleep(0.01)
                if governor.costly._value < free:
                    break
            assert governor.costly._value == free - 1, "the operation never took its slot"
            asked.cancel()  # the client leaves while it waits
            with pytest.raises(asyncio.CancelledError):
                await asked
            await asyncio.sleep(0.05)
            assert governor.costly._value == free, "the cancelled operation kept its costly slot"
        finally:
            governor.light_first.end()
        again = await served.client.post("/graphql", json={"query": query})
        assert "errors" not in again.json(), again.json()
