"""Clients that go away, and a server told to stop: no connection is kept, nothing wedges.

Every path that reads the database is abandoned at random moments (before the body is sent, while
statements run, after the answer starts); then the server must have no connection idle in a
transaction, a whole pool, and answer at once. SIGTERM under load must end the process promptly.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import asyncpg
import httpx
import psutil
import pytest

from app.ingest.load import load_file
from tests.conftest import AUG9, ROOT, SEED, LiveServer, free_port

pytestmark = pytest.mark.asyncio(loop_scope="session")

PAPER = "2402.15627"
ARTIFACTS = ROOT / "tests" / "artifacts"


def record_figures(name: str, figures: dict) -> None:
    """Figures for RELIABILITY.md, merged into tests/artifacts/disconnect.json."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / "disconnect.json"
    known = json.loads(path.read_text()) if path.exists() else {}
    known[name] = figures
    path.write_text(json.dumps(known, indent=2) + "\n")
GRAPHQL_MANY = ('{ paper(arxivId: "%s") { title inbound(first: 20) { totalCount edges { node { citingPaper { title } '
                'resolution { status } standingNotice { state events { eventType } } } } } '
                'outbound(first: 20) { totalCount edges { node { citedWork { title } } } } } }' % PAPER)
GRAPHQL_WALK = '{ neighbourhood(arxivId: "%s", direction: BOTH, depth: 2, perPaper: 10) { papers { title } } }' % PAPER
GRAPHQL_SEARCH = '{ searchPapers(query: "training scaling", first: 10) { nodes { title inbound(first: 3) { totalCount } } } }'


def post(query: str) -> bytes:
    body = json.dumps({"query": query}).encode()
    return (b"POST /graphql HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


def get(path: str, accept: str = "application/json") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: x\r\nAccept: {accept}\r\n\r\n".encode()


REQUESTS = [
    post(GRAPHQL_MANY),
    post(GRAPHQL_WALK),
    post(GRAPHQL_SEARCH),
    get(f"/paper/{PAPER}/citation-record.json"),
    get(f"/paper/{PAPER}/citation-record", "text/html"),
    get(f"/paper/{PAPER}", "text/html"),
    get("/?q=training", "text/html"),
]


async def abandon(port: int, request: bytes, moment: str, rng: random.Random) -> None:
    """Send a request and hang up: before it is whole, while it runs, or once the answer starts."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        if moment == "before":
            writer.write(request[: max(1, len(request) - rng.randint(1, 20))])
            await writer.drain()
            await asyncio.sleep(rng.uniform(0, 0.01))
        elif moment == "during":
            writer.write(request)
            await writer.drain()
            await asyncio.sleep(rng.uniform(0, 0.02))
        else:
            writer.write(request)
            await writer.drain()
            await asyncio.wait_for(reader.read(1), 10)
    finally:
        writer.transport.abort()  # a reset, as a client killed mid-request sends


async def server_connections(admin: asyncpg.Connection, database: str) -> list[asyncpg.Record]:
    return await admin.fetch("SELECT state FROM pg_stat_activity WHERE application_name = 'pith-graph' "
                             "AND datname = $1", database)


async def assert_whole(server: LiveServer, database_url: str) -> dict:
    """No connection idle in a transaction after 2 s, the pool whole, and 20 prompt answers."""
    await asyncio.sleep(2)
    database = database_url.split("?")[0].rsplit("/", 1)[1]
    admin = await asyncpg.connect(database_url)
    try:
        states = [r["state"] for r in await server_connections(admin, database)]
    finally:
        await admin.close()
    assert "idle in transaction" not in states and "active" not in states, states
    async with httpx.AsyncClient(base_url=server.base, timeout=10) as client:
        ready = (await client.get("/readyz")).json()
        assert ready["pool"]["idle"] == ready["pool"]["size"], ready
        started = time.monotonic()
        answers = await asyncio.gather(*[
            client.post("/graphql", json={"query": GRAPHQL_MANY}) if i % 2 else
            client.get(f"/paper/{PAPER}/citation-record.json") for i in range(20)])
        elapsed = time.monotonic() - started
    assert [a.status_code for a in answers] == [200] * 20, [a.text[:200] for a in answers if a.status_code != 200]
    # A leaked pool makes each request wait out the 5 s acquire timeout; whole, 20 take well under it.
    assert elapsed < 4, f"20 requests took {elapsed:.1f} s"
    return {"connections": states, "pool": ready["pool"], "twenty_requests_seconds": round(elapsed, 2)}


async def test_abandoned_requests_leave_no_connection_behind(database_url):
    server = LiveServer(database_url)
    try:
        rng = random.Random(20261130)
        plan = [(rng.choice(REQUESTS), rng.choice(["before", "during", "during", "after"])) for _ in range(100)]
        for start in range(0, len(plan), 20):  # 20 at a time: more than the pool's 10 connections
            results = await asyncio.gather(*[abandon(server.port, r, m, rng) for r, m in plan[start:start + 20]],
                                           return_exceptions=True)
            assert not [r for r in results if isinstance(r, BaseException) and not isinstance(r, OSError)], results
        figures = await assert_whole(server, database_url)
        record_figures("abandoned_100", figures)
        assert "Traceback" not in server.logs()
    finally:
        server.stop()


WRK_SCRIPT = """
wrk.method = "POST"
wrk.body = %s
wrk.headers["Content-Type"] = "application/json"
"""


@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is not installed (apt-get install wrk; .ci/run does)")
async def test_a_wrk_run_stopped_mid_flight_leaves_no_connection_behind(database_url, tmp_path):
    server = LiveServer(database_url)
    try:
        script = tmp_path / "post.lua"
        script.write_text(WRK_SCRIPT % json.dumps(json.dumps({"query": GRAPHQL_MANY})))
        # wrk closes its 32 connections when the time is up, whatever they are waiting for.
        done = subprocess.run(["wrk", "-t2", "-c32", "-d2s", "-s", str(script), server.base + "/graphql"],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert "requests in" in done.stdout
        figures = await assert_whole(server, database_url)
        record_figures("wrk_cut_off", {**figures, "wrk": done.stdout.strip().splitlines()[-2:]})
    finally:
        server.stop()


async def load_until_stopped(base: str, stop: asyncio.Event) -> list[int]:
    statuses: list[int] = []

    async def client_loop(client: httpx.AsyncClient) -> None:
        while not stop.is_set():
            try:
                response = await client.post("/graphql", json={"query": GRAPHQL_MANY})
                statuses.append(response.status_code)
            except httpx.HTTPError:
                await asyncio.sleep(0.05)

    async with httpx.AsyncClient(base_url=base, timeout=30) as client:
        await asyncio.gather(*[client_loop(client) for _ in range(16)])
    return statuses


async def sigterm_under_load(process: subprocess.Popen, base: str, blocker: asyncpg.Connection | None) -> float:
    """Start a load, hold some requests inside their statements, SIGTERM; seconds until the process is gone."""
    stop = asyncio.Event()
    load = asyncio.ensure_future(load_until_stopped(base, stop))
    await asyncio.sleep(1.0)
    if blocker is not None:
        # Requests now wait on a lock inside their statements: they cannot finish by themselves.
        await blocker.execute("BEGIN; LOCK TABLE citation_observations IN ACCESS EXCLUSIVE MODE")
        await asyncio.sleep(0.5)
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    while process.poll() is None and time.monotonic() - started < 15:
        await asyncio.sleep(0.05)
    elapsed = time.monotonic() - started
    stop.set()
    statuses = await load
    if blocker is not None:
        await blocker.execute("ROLLBACK")
    assert process.poll() is not None, "the server was still running 15 s after SIGTERM"
    assert statuses and statuses.count(200) > 0
    return elapsed


async def test_sigterm_during_load_stops_the_server_promptly(empty_database):
    # A database of its own: no other test server's connections in pg_stat_activity.
    database_url = empty_database
    blocker = await asyncpg.connect(database_url)
    for path in (SEED, AUG9):
        await load_file(blocker, str(path))
    server = LiveServer(database_url, expect_5xx=True)  # requests cut off by the shutdown may be 500s
    try:
        elapsed = await sigterm_under_load(server.process, server.base, blocker)
        assert elapsed < 10, f"stopped {elapsed:.1f} s after SIGTERM"
        database = database_url.split("?")[0].rsplit("/", 1)[1]
        left = await server_connections(blocker, database)
        assert left == [], f"connections of the stopped server: {left}"
        record_figures("sigterm_external_postgresql", {"seconds_to_exit": round(elapsed, 2)})
    finally:
        await blocker.close()
        server.stop()


async def test_sigterm_during_load_stops_the_embedded_postgresql_too():
    data = Path(tempfile.mkdtemp(prefix="pith-sigterm-"))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    log = open(data.parent / f"{data.name}.log", "w")
    process = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--port", str(port),
                                "--data-dir", str(data / "pgdata")], env=env, stdout=subprocess.DEVNULL, stderr=log)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert process.poll() is None, Path(log.name).read_text()
            try:
                if httpx.get(base + "/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        else:
            pytest.fail("the embedded server did not become ready in 120 s")
        elapsed = await sigterm_under_load(process, base, None)
        assert elapsed < 10, f"stopped {elapsed:.1f} s after SIGTERM"
        still = [p for p in psutil.process_iter(["cmdline"])
                 if str(data / "pgdata") in " ".join(p.info["cmdline"] or []) and "postgres" in " ".join(p.info["cmdline"] or [])]
        assert not still, "the embedded PostgreSQL is still running"
        record_figures("sigterm_embedded_postgresql", {"seconds_to_exit": round(elapsed, 2)})
    finally:
        if process.poll() is None:
            process.kill()
        log.close()
        shutil.rmtree(data, ignore_errors=True)


async def test_only_responses_cut_short_are_logged_as_disconnects(live):
    """A client that reads a whole response and then hangs up is not a client that went away."""
    async def download_then_hang_up(path: str) -> int:
        reader, writer = await asyncio.open_connection("127.0.0.1", live.port)
        try:
            writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:")))
            body = await reader.readexactly(length)
            return len(body)
        finally:
            writer.transport.abort()

    before = live.logs().count("client went away")
    sizes = [await download_then_hang_up("/static/vendor/graphiql.min.js") for _ in range(4)]
    sizes += [await download_then_hang_up(f"/paper/{PAPER}/citation-record.json") for _ in range(4)]
    await asyncio.sleep(0.5)
    assert all(sizes)
    assert live.logs().count("client went away") == before, live.logs()[-2000:]
    # A response really cut short is logged: a subscription's stream (it never ends on its own), left at once
    # (before the watch for its client starts, middleware.WATCH_AFTER: found when it does) and once it started.
    # (A request that ends within WATCH_AFTER of its start is answered whether its client is there or not.)
    body = json.dumps({"query": 'subscription { citationAdded(arxivId: "%s") { cursor } }' % PAPER}).encode()
    stream = (b"POST /graphql HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Accept: text/event-stream\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    for moment in ("during", "after"):
        await abandon(live.port, stream, moment, random.Random(1))
    deadline = time.monotonic() + 5
    while live.logs().count("client went away") < before + 2 and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert live.logs().count("client went away") == before + 2, live.logs()[-2000:]


async def test_operations_dropped_mid_execution_leave_no_unawaited_coroutine_said(admin_url):
    """Clients that leave while their operation executes (its fields' resolvers and lists under way) cancel it;
    the execution's coroutines that a cancelled task held unstarted are dropped without a RuntimeWarning each
    ("coroutine ... was never awaited"), which an operator would read as a fault: none of them ran. The
    operation's access line says it was cancelled."""
    from tests.conftest import drop_database, most_cited, synthetic_database

    url = await synthetic_database(admin_url, "pith_test_dropped", 2000, 7)
    server = LiveServer(url)
    try:
        hub = await most_cited(url)
        async with asyncpg.create_pool(url, min_size=1, max_size=1) as pool:  # the most cited: long pages
            cited = [r[0] for r in await pool.fetch(
                "SELECT cited_arxiv_id FROM citation_observations WHERE cited_arxiv_id IS NOT NULL "
                "GROUP BY 1 ORDER BY count(*) DESC LIMIT 40")]
        query = ("query($id: String!) { paper(arxivId: $id) { title inbound(first: 100) { totalCount edges { node {"
                 " referenceIndex citingPaper { arxivId title outbound(first: 20) { edges { node { resolution { status }"
                 " citedPaper { title } citedWork { title } } } } } resolution { status observedAt }"
                 " standingNotice { state } } } } } }")
        body = json.dumps({"query": query, "variables": {"id": hub}}).encode()
        async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
            started = time.perf_counter()
            answered = await client.post("/graphql", content=body, headers={"Content-Type": "application/json"})
            whole = time.perf_counter() - started
        assert answered.status_code == 200 and "errors" not in answered.json(), answered.text[:300]
        rng = random.Random(5)

        async def left(after: float) -> None:
            body = json.dumps({"query": query, "variables": {"id": rng.choice(cited)}}).encode()
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(b"POST /graphql HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
                         + str(len(body)).encode() + b"\r\n\r\n" + body)
            await writer.drain()
            await asyncio.sleep(after)
            writer.transport.abort()

        # Left at moments spread over a whole answer's time (past the watch's start, and past the answer: some are
        # answered), 240 clients, 8 at once.
        for _ in range(30):
            await asyncio.gather(*(left(rng.uniform(0.05, max(0.2, 1.5 * whole))) for _ in range(8)))
        await asyncio.sleep(1)
        logs = server.logs()
        assert logs.count("client went away") >= 20, logs[-2000:]  # (the operations were cancelled mid-way)
        assert "never awaited" not in logs, logs[-3000:]
        # An operation stopped unanswered says so on its access line (and in the operations' counter), not `ok`.
        stopped = [line for line in logs.splitlines() if "pith.access" in line and "POST /graphql 0 " in line]
        assert stopped and not [line for line in stopped if "outcome=ok" in line and "statements=0" in line], \
            "\n".join(stopped[:10])
        assert sum("outcome=cancelled" in line for line in stopped) >= 10, "\n".join(stopped[:10])
    finally:
        server.stop()
        await drop_database(admin_url, url)


async def test_a_planned_lookup_whose_client_leaves_is_told_as_cancelled(database_url):
    """A document answered from its plan (one statement, app.graphql.plan) and stopped unanswered, its client gone
    while its statement waits, is told as the pipeline tells any operation so stopped: an access line and a count
    with the outcome `cancelled`."""
    server = LiveServer(database_url, env={"PITH_REQUEST_TIMEOUT": "30", "PITH_STATEMENT_TIMEOUT_MS": "30000"})
    locker = await asyncpg.connect(database_url)
    try:
        body = json.dumps({"query": "query Planned($id: String!) { paper(arxivId: $id) { title } }",
                           "variables": {"id": PAPER}}).encode()
        async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
            for _ in range(3):  # answered by the pipeline, which plans it; then by its plan
                answered = await client.post("/graphql", content=body, headers={"Content-Type": "application/json"})
                assert answered.status_code == 200 and answered.json()["data"]["paper"]["title"], answered.text
            planned = (await client.get("/metrics")).text
        assert "pith_prepared_path_answers_total 1.0" in planned or "pith_prepared_path_answers_total 2.0" in planned
        transaction = locker.transaction()
        await transaction.start()
        await locker.execute("LOCK TABLE paper_snapshots IN ACCESS EXCLUSIVE MODE")  # its statement waits on it
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"POST /graphql HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
                     + str(len(body)).encode() + b"\r\n\r\n" + body)
        await writer.drain()
        for _ in range(100):  # until its statement waits on the lock
            if await locker.fetchval("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pith-graph' "
                                     "AND wait_event_type = 'Lock' AND datname = current_database()"):
                break
            await asyncio.sleep(0.05)
        writer.transport.abort()
        deadline = time.monotonic() + 10
        while "operation=Planned outcome=cancelled" not in server.logs() and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        await transaction.rollback()
        line = next((line for line in server.logs().splitlines() if "outcome=cancelled" in line), None)
        assert line is not None and "POST /graphql 0 " in line and "statements=1" in line, server.logs()[-2000:]
        async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
            counted = (await client.get("/metrics")).text
        assert 'pith_graphql_operations_total{operation="Planned",outcome="cancelled"} 1.0' in counted, counted[-3000:]
    finally:
        await locker.close()
        server.stop()
