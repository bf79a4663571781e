"""Live subscriptions through real transports: graphql-transport-ws over WebSocket, and SSE over HTTP.

The imports that make the events are real `pith-graph load` runs in other processes. Documents that
add one citation, or a retraction, are made by the record builder itself: facts are added to a
scratch database and the citing paper's record is exported from it.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

import asyncpg
import httpx
import pytest
import pytest_asyncio
import websockets

from app.ingest.load import load_file
from tests.conftest import (AUG9, LONG_TESTS, SEED, UNSPENDABLE, LiveServer, aug9_documents, create_database,
                            drop_database, most_cited, synthetic_database)

pytestmark = pytest.mark.asyncio(loop_scope="session")

PAPER = "2402.15627"
CITING = "2409.19256"  # a paper that cites PAPER in the 9 August data
LATER = "2026-08-20T00:00:00Z"


def pith_graph(*args: str, url: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.cli", *args], env={**os.environ, "DATABASE_URL": url},
                          capture_output=True, timeout=120)


async def load_in_another_process(url: str, path: Path) -> tuple[float, float]:
    started = time.monotonic()
    done = await asyncio.to_thread(pith_graph, "load", str(path), url=url)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    return started, time.monotonic()


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def later_documents(admin_url, tmp_path_factory):
    """Two documents of CITING as of 20 August, built by exporting from a scratch database:
    one adds a new reference to PAPER, the other also records a retraction of a work CITING cites."""
    folder = tmp_path_factory.mktemp("later")
    scratch = await create_database(admin_url, "pith_test_scratch")
    conn = await asyncpg.connect(scratch)
    try:
        await load_file(conn, str(AUG9))
        at = datetime(2026, 8, 19, 12, tzinfo=timezone.utc)
        work = await conn.fetchval("SELECT work_id FROM citation_observations WHERE citing_arxiv_id = $1 AND "
                                   "cited_arxiv_id = $2", CITING, PAPER)
        await conn.execute("INSERT INTO citation_observations (observation_id, citing_arxiv_id, reference_index, source,"
                           " source_observed_at, cited_arxiv_id, work_id, printed_title, printed_year) VALUES"
                           " ($1, $2, 977, 'pdf_text', $3, $4, $5, NULL, NULL)", uuid.uuid4(), CITING, at, PAPER, work)
        citation = folder / "citation.json"
        out = pith_graph("export", CITING, "--as-of", LATER, url=scratch)
        assert out.returncode == 0, out.stderr.decode()
        citation.write_bytes(out.stdout)
        cited_work = await conn.fetchval(
            "SELECT o.work_id FROM citation_observations o JOIN work_snapshots w USING (work_id) "
            "JOIN standing_receipts r USING (work_id) WHERE o.citing_arxiv_id = $1 ORDER BY o.reference_index LIMIT 1",
            CITING)
        assert cited_work is not None
        await conn.execute("INSERT INTO work_events VALUES ($1, 'retraction_watch', 'retraction', $2, $2, "
                           "'10.1000/retraction.1')", cited_work, at)
        retraction = folder / "retraction.json"
        out = pith_graph("export", CITING, "--as-of", LATER, url=scratch)
        assert out.returncode == 0, out.stderr.decode()
        retraction.write_bytes(out.stdout)
    finally:
        await conn.close()
        await drop_database(admin_url, scratch)
    return citation, retraction


@pytest_asyncio.fixture(loop_scope="session")
async def fifth_of_august(empty_database):
    """A database holding the 5 August record, and a server on it."""
    conn = await asyncpg.connect(empty_database)
    try:
        await load_file(conn, str(SEED))
    finally:
        await conn.close()
    # A thousand subscribers from one loopback address, as many users behind one NAT would be: the
    # per-client shares of the live transports raised for them.
    server = LiveServer(empty_database, env={"PITH_WEBSOCKETS_PER_CLIENT": "2000",
                                             "PITH_SUBSCRIPTIONS_PER_CLIENT": "2000"})
    yield empty_database, server
    server.stop()


class Subscription:
    """One graphql-transport-ws subscription on its own WebSocket, collecting (time, payload)."""

    def __init__(self, base: str, query: str, variables: dict, init: dict | None = None) -> None:
        self.url = base.replace("http://", "ws://") + "/graphql"
        self.query, self.variables = query, variables
        self.init = init  # the connection_init payload
        self.events: list[tuple[float, dict]] = []
        self.errors: list = []
        self.closed = asyncio.Event()

    async def start(self) -> "Subscription":
        self.ws = await websockets.connect(self.url, subprotocols=["graphql-transport-ws"])
        await self.ws.send(json.dumps({"type": "connection_init", **({"payload": self.init} if self.init else {})}))
        assert json.loads(await self.ws.recv())["type"] == "connection_ack"
        await self.ws.send(json.dumps({"id": "1", "type": "subscribe",
                                       "payload": {"query": self.query, "variables": self.variables}}))
        self.task = asyncio.create_task(self._read())
        await asyncio.sleep(0.3)  # the server registers the subscription before anything is loaded
        return self

    async def _read(self) -> None:
        self.close_reason: tuple[int | None, str] | None = None
        try:
            async for raw in self.ws:
                message = json.loads(raw)
                if message["type"] == "next":
                    if message["payload"].get("errors"):
                        self.errors.append(message["payload"]["errors"])
                    else:
                        self.events.append((time.monotonic(), message["payload"]["data"]))
                elif message["type"] == "error":
                    self.errors.append(message["payload"])
                elif message["type"] == "complete":
                    break
        except websockets.ConnectionClosed as exc:
            self.close_reason = (exc.rcvd.code, exc.rcvd.reason) if exc.rcvd is not None else (None, "")
        finally:
            self.closed.set()

    async def wait_for(self, n: int, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        while len(self.events) < n and time.monotonic() < deadline and not self.errors:
            await asyncio.sleep(0.02)

    async def close(self) -> None:
        await self.ws.close()
        await self.closed.wait()


CITATIONS = """subscription($id: String!, $after: String) { citationAdded(arxivId: $id, after: $after) {
  cursor observation { observationId referenceIndex citingPaper { arxivId } } } }"""


def new_inbound_ids() -> set[str]:
    seed = json.loads(SEED.read_text())
    aug9 = aug9_documents()[0]
    return {o["observation_id"] for o in aug9["inbound"]} - {o["observation_id"] for o in seed["inbound"]}


async def test_citations_arrive_live_and_resume_after_a_cursor(fifth_of_august, later_documents):
    url, server = fifth_of_august
    first = await Subscription(server.base, CITATIONS, {"id": PAPER}).start()
    started, committed = await load_in_another_process(url, AUG9)
    await first.wait_for(6)
    await asyncio.sleep(0.5)  # nothing more may come
    assert not first.errors, first.errors
    got = [e["citationAdded"]["observation"]["observationId"] for _, e in first.events]
    assert len(got) == 6 and set(got) == new_inbound_ids()
    assert all(started <= t <= committed + 1.0 for t, _ in first.events), [t - committed for t, _ in first.events]

    cursors = [e["citationAdded"]["cursor"] for _, e in first.events]
    resumed = await Subscription(server.base, CITATIONS, {"id": PAPER, "after": cursors[1]}).start()
    await resumed.wait_for(4)
    assert [e["citationAdded"]["cursor"] for _, e in resumed.events] == cursors[2:]
    # ... and then continues live: one more citation, to both subscribers, once each.
    citation, _ = later_documents
    await load_in_another_process(url, citation)
    await resumed.wait_for(5)
    await first.wait_for(7)
    await asyncio.sleep(0.5)
    assert len(resumed.events) == 5 and len(first.events) == 7
    assert resumed.events[-1][1] == first.events[-1][1]
    assert resumed.events[-1][1]["citationAdded"]["observation"]["referenceIndex"] == 977
    await first.close()
    await resumed.close()
    ready = httpx.get(server.base + "/readyz").json()
    assert ready["live"]["subscribers"] == 0


async def test_the_same_over_server_sent_events(fifth_of_august):
    url, server = fifth_of_august
    events: list[dict] = []

    async def listen() -> None:
        async with httpx.AsyncClient(timeout=30) as client:
            async with client.stream("POST", server.base + "/graphql", json={"query": CITATIONS,
                                                                              "variables": {"id": PAPER}},
                                     headers={"accept": "text/event-stream"}) as response:
                assert response.status_code == 200
                assert response.headers["content-type"].startswith("text/event-stream")
                async for line in response.aiter_lines():
                    if line.startswith("data:") and line[5:].strip() and line[5:].strip() != "{}":
                        data = json.loads(line[5:])
                        if "data" in data:
                            events.append(data["data"])
                            if len(events) == 6:
                                return

    task = asyncio.create_task(listen())
    await asyncio.sleep(0.5)
    await load_in_another_process(url, AUG9)
    await asyncio.wait_for(task, 15)
    assert {e["citationAdded"]["observation"]["observationId"] for e in events} == new_inbound_ids()


async def test_a_retraction_and_the_record_change_reach_their_subscribers(fifth_of_august, later_documents):
    url, server = fifth_of_august
    await load_in_another_process(url, AUG9)
    standing = await Subscription(server.base, """subscription($id: String!) { standingChanged(arxivId: $id) {
      cursor observation { citingPaper { arxivId } citedWork { title } } event { eventType source noticeDoi } } }""",
                                  {"id": CITING}).start()
    changed = await Subscription(server.base, """subscription($id: String!) { recordChanged(arxivId: $id) {
      cursor arxivId contextDigest } }""", {"id": CITING}).start()
    _, retraction = later_documents
    await load_in_another_process(url, retraction)
    await standing.wait_for(1)
    await changed.wait_for(1)
    assert not standing.errors and not changed.errors, (standing.errors, changed.errors)
    event = standing.events[0][1]["standingChanged"]
    assert event["event"] == {"eventType": "RETRACTION", "source": "retraction_watch",
                              "noticeDoi": "10.1000/retraction.1"}
    assert event["observation"]["citingPaper"]["arxivId"] == CITING
    digest = changed.events[0][1]["recordChanged"]["contextDigest"]
    served = httpx.get(server.base + f"/paper/{CITING}/citation-record.json").json()
    assert digest == served["context_digest"]
    await standing.close()
    await changed.close()


async def test_bad_arguments_and_expired_cursors_are_clear_errors(fifth_of_august):
    _, server = fifth_of_august
    for variables, words in [({"id": "nonsense"}, "arXiv id"), ({"id": PAPER, "after": "zzz"}, "cursor")]:
        sub = await Subscription(server.base, CITATIONS, variables).start()
        await asyncio.wait_for(sub.closed.wait(), 5)
        assert sub.errors and words in json.dumps(sub.errors), sub.errors


async def test_no_event_is_lost_when_postgresql_restarts_under_a_subscription():
    from app.db.migrate import migrate
    from tests.pgcontrol import StoppablePostgres

    pg = StoppablePostgres()
    server = None
    try:
        conn = await asyncpg.connect(pg.url)
        try:
            await migrate(conn)
            await load_file(conn, str(SEED))
        finally:
            await conn.close()
        server = LiveServer(pg.url, expect_5xx=True)  # requests while the database is down are 503s
        sub = await Subscription(server.base, CITATIONS, {"id": PAPER}).start()
        await asyncio.to_thread(pg.stop)
        await asyncio.sleep(1.0)
        await asyncio.to_thread(pg.start)
        # An import lands right after the restart, perhaps before the server's listener is back.
        await load_in_another_process(pg.url, AUG9)
        await sub.wait_for(6, timeout=20)
        await asyncio.sleep(0.5)
        assert not sub.errors, sub.errors
        got = [e["citationAdded"]["observation"]["observationId"] for _, e in sub.events]
        assert len(got) == 6 and set(got) == new_inbound_ids(), got  # none lost, none twice
        await sub.close()
    finally:
        if server is not None:
            server.stop()
        pg.close()


LOAD_SUBSCRIBERS = int(os.environ.get("PITH_LIVE_SUBSCRIBERS", "1000"))


async def test_a_thousand_subscribers_all_hear_every_event_and_leave_nothing_behind(fifth_of_august,
                                                                                    later_documents):
    """Two rounds of 1,000 subscribers (bounded in time, loopback only): each hears every event once, and
    nothing stays behind them. How soon they hear is a figure, not a bound (it follows the machine's load):
    tests/artifacts/live.json has it."""
    import psutil

    from tests.conftest import ROOT

    url, server = fifth_of_august
    process = psutil.Process(server.process.pid)
    await asyncio.sleep(0.5)
    figures: dict = {"subscribers": LOAD_SUBSCRIBERS, "rss_start_mb": process.memory_info().rss / 2**20, "rounds": []}
    for number, (document, expected) in enumerate([(AUG9, 6), (later_documents[0], 1)], start=1):
        rss_before = process.memory_info().rss
        subs: list[Subscription] = []
        for start in range(0, LOAD_SUBSCRIBERS, 100):
            subs += await asyncio.gather(*[Subscription(server.base, CITATIONS, {"id": PAPER}).start()
                                           for _ in range(min(100, LOAD_SUBSCRIBERS - start))])
        await asyncio.sleep(1.0)
        rss_idle = process.memory_info().rss
        assert httpx.get(server.base + "/readyz").json()["live"]["subscribers"] == LOAD_SUBSCRIBERS
        started, committed = await load_in_another_process(url, document)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(len(s.events) < expected for s in subs):
            await asyncio.sleep(0.05)
        assert all(len(s.events) == expected for s in subs), sorted(len(s.events) for s in subs)[:10]
        latencies = sorted(max(0.0, t - committed) for s in subs for t, _ in s.events)
        rss_delivered = process.memory_info().rss
        for s in subs:
            await s.ws.close()
        await asyncio.sleep(2.0)
        ready = httpx.get(server.base + "/readyz").json()
        figures["rounds"].append({
            "events_each": expected, "p50_s_after_commit": latencies[len(latencies) // 2],
            "p99_s_after_commit": latencies[int(0.99 * (len(latencies) - 1))],
            "kb_per_idle_subscriber": (rss_idle - rss_before) / LOAD_SUBSCRIBERS / 1024,
            "rss_before_mb": rss_before / 2**20, "rss_delivered_mb": rss_delivered / 2**20,
            "rss_after_disconnect_mb": process.memory_info().rss / 2**20,
            "subscribers_after": ready["live"]["subscribers"]})
    (ROOT / "tests" / "artifacts").mkdir(parents=True, exist_ok=True)
    (ROOT / "tests" / "artifacts" / "live.json").write_text(json.dumps(figures, indent=2) + "\n")
    first, second = figures["rounds"]
    for r in figures["rounds"]:
        assert r["subscribers_after"] == 0, figures
        assert r["rss_after_disconnect_mb"] <= r["rss_delivered_mb"] * 1.05, figures  # nothing grows once they go
    # A second thousand subscribers reuse what the first left: no growth from round to round.
    assert second["rss_after_disconnect_mb"] <= first["rss_after_disconnect_mb"] * 1.10, figures


async def test_multipart_http_subscriptions(fifth_of_august):
    url, server = fifth_of_august
    received: list[dict] = []

    async def listen() -> None:
        async with httpx.AsyncClient(timeout=30) as client:
            async with client.stream("POST", server.base + "/graphql", json={"query": CITATIONS,
                                                                              "variables": {"id": PAPER}},
                                     headers={"accept": 'multipart/mixed;subscriptionSpec="1.0",application/json'}
                                     ) as response:
                assert response.status_code == 200
                # One media type, its parameters quoted as the incremental-delivery spec writes them.
                assert response.headers["content-type"] == 'multipart/mixed; boundary="graphql"; subscriptionSpec="1.0"'
                assert response.headers["cache-control"] == "no-cache, no-transform", response.headers
                buffer = ""
                async for chunk in response.aiter_text():
                    buffer += chunk
                    for part in buffer.split("\r\n\r\n")[1:]:
                        body = part.split("\r\n--")[0].strip()
                        if body.startswith("{") and '"citationAdded"' in body:
                            payload = json.loads(body)
                            received.append(payload)
                    if buffer.count('"citationAdded"') >= 6:
                        return

    task = asyncio.create_task(listen())
    await asyncio.sleep(0.5)
    await load_in_another_process(url, AUG9)
    await asyncio.wait_for(task, 15)
    assert len({json.dumps(p, sort_keys=True) for p in received}) >= 6


async def test_every_worker_process_listens(empty_database):
    conn = await asyncpg.connect(empty_database)
    try:
        await load_file(conn, str(SEED))
        server = LiveServer(empty_database, env={"PITH_WORKERS": "2"})
        try:
            subs = [await Subscription(server.base, CITATIONS, {"id": PAPER}).start() for _ in range(6)]
            name = empty_database.split("?")[0].rsplit("/", 1)[1]
            listening = await conn.fetchval("SELECT count(*) FROM pg_stat_activity WHERE application_name = "
                                            "'pith-graph live' AND datname = $1", name)
            assert listening == 2  # one listening connection per process, not per subscriber
            await load_in_another_process(empty_database, AUG9)
            for sub in subs:
                await sub.wait_for(6)
            assert [len(s.events) for s in subs] == [6] * 6
            for sub in subs:
                await sub.close()
        finally:
            server.stop()
    finally:
        await conn.close()


async def test_the_retraction_watcher_example(fifth_of_august, later_documents):
    from tests.conftest import ROOT

    url, server = fifth_of_august
    await load_in_another_process(url, AUG9)
    watcher = await asyncio.create_subprocess_exec(
        sys.executable, str(ROOT / "examples" / "watch_retractions.py"), CITING, "--url",
        server.base.replace("http://", "ws://") + "/graphql", stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    try:
        await asyncio.sleep(1.5)
        await load_in_another_process(url, later_documents[1])
        line = (await asyncio.wait_for(watcher.stdout.readline(), 15)).decode()
        assert line.startswith("retraction of reference") or line.startswith("RETRACTION of reference"), line
        assert "retraction_watch" in line and "cursor" in line
    finally:
        watcher.kill()
        await watcher.wait()


async def test_the_retraction_watcher_says_when_a_notice_ended():
    """A standingChanged event whose notice ended (standing false: the source no longer reports it) is said
    as an end, not as a new notice; a reference without an index is not printed as "None"."""
    import runpy

    from tests.conftest import ROOT

    describe = runpy.run_path(str(ROOT / "examples" / "watch_retractions.py"), run_name="example")["describe"]
    change = {"cursor": "c", "standing": False, "endedAt": "2026-12-01T00:00:00Z",
              "event": {"eventType": "CORRECTION", "source": "retraction_watch", "reportedAt": None, "noticeDoi": None},
              "observation": {"referenceIndex": None, "citedWork": {"title": "A study", "doi": "10.1/x"}}}
    line = describe(change)
    assert "ended at 2026-12-01T00:00:00Z" in line and "None" not in line and "reported by" not in line, line
    assert "reported by retraction_watch" in describe({**change, "standing": True, "endedAt": None})


async def test_subscriptions_per_connection_are_limited(fifth_of_august):
    from app.limits import MAX_SUBSCRIPTIONS_PER_CONNECTION

    _, server = fifth_of_august
    async with websockets.connect(server.base.replace("http://", "ws://") + "/graphql",
                                  subprotocols=["graphql-transport-ws"]) as ws:
        await ws.send(json.dumps({"type": "connection_init"}))
        await ws.recv()
        for i in range(MAX_SUBSCRIPTIONS_PER_CONNECTION + 1):
            await ws.send(json.dumps({"id": str(i), "type": "subscribe",
                                      "payload": {"query": CITATIONS, "variables": {"id": PAPER}}}))
        try:
            message = await asyncio.wait_for(ws.recv(), 5)
            refusal = json.loads(message)
            assert refusal["type"] == "error" and refusal["id"] == str(MAX_SUBSCRIPTIONS_PER_CONNECTION), refusal
        except websockets.ConnectionClosed as closed:
            assert closed.rcvd is not None and closed.rcvd.code == 4400 and "subscriptions" in closed.rcvd.reason.lower()


async def test_a_cursor_older_than_retention_is_told_to_refetch(fifth_of_august):
    url, server = fifth_of_august
    first = await Subscription(server.base, CITATIONS, {"id": PAPER}).start()
    await load_in_another_process(url, AUG9)
    await first.wait_for(6)
    early = first.events[0][1]["citationAdded"]["cursor"]
    await first.close()
    conn = await asyncpg.connect(url)
    try:  # as the retention pruning of a later import would record it
        await conn.execute("UPDATE change_log_pruned SET up_to = (SELECT max(position) FROM change_log)")
    finally:
        await conn.close()
    late = await Subscription(server.base, CITATIONS, {"id": PAPER, "after": early}).start()
    await asyncio.wait_for(late.closed.wait(), 5)
    assert "CURSOR_EXPIRED" in json.dumps(late.errors) and "refetch" in json.dumps(late.errors), late.errors


# Subscribers of the pool tests: 100 in the long form (PITH_LONG_TESTS=1), 30 in CI's, three times the
# requests' pool (PITH_POOL_MAX, 10): more than it could serve if subscriptions waited on it.
POOL_TEST_SUBSCRIBERS = 100 if LONG_TESTS else 30


async def test_a_hundred_subscribers_under_twelve_http_clients_all_receive_every_event(fifth_of_august):
    """Subscriptions do not wait on the requests' pool: 100 subscribers (30 in the short form; every tenth
    naming its key in connection_init) while 12 HTTP clients keep every request connection busy all
    receive the six events of a load, with no error; the HTTP clients get no error either."""
    url, server = fifth_of_august
    done = await asyncio.to_thread(pith_graph, "keys", "create", "--name", "live-load", "--points-per-hour",
                                   "100000000", url=url)
    assert done.returncode == 0, done.stderr.decode()
    secret = done.stdout.decode().strip().splitlines()[-1]
    queries = [
        {"query": f'{{ paper(arxivId: "{PAPER}") {{ title inbound(first: 3) {{ totalCount }} }} }}'},
        {"query": f'{{ citationRecord(arxivId: "{PAPER}") {{ contextDigest }} }}'},
        {"query": '{ searchPapers(query: "training", first: 5) { nodes { arxivId } } }'},
    ]
    failures: list[str] = []
    answered = 0
    stop = asyncio.Event()

    async def reader(n: int) -> None:
        nonlocal answered
        async with httpx.AsyncClient(base_url=server.base, timeout=30) as http:
            i = n
            while not stop.is_set():
                response = await http.post("/graphql", json=queries[i % len(queries)])
                i += 1
                if response.status_code != 200 or response.json().get("errors"):
                    failures.append(f"{response.status_code} {response.text[:300]}")
                answered += 1

    readers = [asyncio.create_task(reader(n)) for n in range(12)]
    subs: list[Subscription] = []
    try:
        await asyncio.sleep(1.0)  # the requests hold the pool before anyone subscribes
        for start in range(0, POOL_TEST_SUBSCRIBERS, 10):
            subs += await asyncio.gather(*[
                Subscription(server.base, CITATIONS, {"id": PAPER},
                             init={"authorization": f"Bearer {secret}"} if (start + i) % 10 == 0 else None).start()
                for i in range(10)])
        await load_in_another_process(url, AUG9)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(len(s.events) < 6 and not s.errors for s in subs):
            await asyncio.sleep(0.1)
    finally:
        stop.set()
        await asyncio.gather(*readers, return_exceptions=True)
        for s in subs:
            await s.close()
    errors = [s.errors for s in subs if s.errors]
    assert not errors, (len(errors), errors[:2])
    assert sorted(len(s.events) for s in subs) == [6] * POOL_TEST_SUBSCRIBERS
    assert all({e["citationAdded"]["observation"]["observationId"] for _, e in s.events} == new_inbound_ids()
               for s in subs)
    assert not failures, (len(failures), answered, failures[:3])
    assert answered > 12


async def test_subscriptions_and_key_checks_do_not_wait_on_a_request_pool_held_by_requests(empty_database):
    """Every connection of the requests' pool held (PITH_POOL_MAX requests waiting on a lock, far past the
    5 s a pool wait may take): 100 subscribers (20 in the short form) still receive every event of a load, and 10
    WebSockets that name a key created meanwhile (so it must be read) in connection_init are acknowledged.
    Live work has a pool of its own (PITH_LIVE_POOL_MAX)."""
    conn = await asyncpg.connect(empty_database)
    await load_file(conn, str(SEED))
    name = empty_database.split("?")[0].rsplit("/", 1)[1]
    server = LiveServer(empty_database, env={"PITH_WEBSOCKETS_PER_CLIENT": "500", "PITH_SUBSCRIPTIONS_PER_CLIENT": "500",
                                             "PITH_REQUEST_TIMEOUT": "120", "PITH_STATEMENT_TIMEOUT_MS": "120000"})
    subs: list[Subscription] = []
    locker = await asyncpg.connect(empty_database)
    held: list[asyncio.Task] = []
    try:
        subs += await asyncio.gather(*[Subscription(server.base, CITATIONS, {"id": PAPER}).start()
                                       for _ in range(POOL_TEST_SUBSCRIBERS - 10)])
        transaction = locker.transaction()
        await transaction.start()
        await locker.execute("LOCK TABLE persisted_queries IN ACCESS EXCLUSIVE MODE")

        async def unknown_persisted(n: int) -> httpx.Response:
            async with httpx.AsyncClient(base_url=server.base, timeout=120) as http:
                return await http.post("/graphql", json={"extensions": {"persistedQuery": {
                    "version": 1, "sha256Hash": f"{n:064x}"}}})

        held = [asyncio.create_task(unknown_persisted(n)) for n in range(10)]
        waiting = 0
        for _ in range(300):  # until the whole pool (PITH_POOL_MAX, 10) waits on the lock
            waiting = await conn.fetchval("SELECT count(*) FROM pg_stat_activity WHERE application_name = "
                                          "'pith-graph' AND wait_event_type = 'Lock' AND datname = $1", name)
            if waiting >= 10:
                break
            await asyncio.sleep(0.1)
        assert waiting == 10, waiting
        done = await asyncio.to_thread(pith_graph, "keys", "create", "--name", "held-pool", "--points-per-hour",
                                       "1000000", url=empty_database)
        assert done.returncode == 0, done.stderr.decode()
        secret = done.stdout.decode().strip().splitlines()[-1]
        keyed = await asyncio.wait_for(asyncio.gather(*[
            Subscription(server.base, CITATIONS, {"id": PAPER}, init={"authorization": f"Bearer {secret}"}).start()
            for _ in range(10)]), 30)
        subs += keyed
        await load_in_another_process(empty_database, AUG9)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(len(s.events) < 6 and not s.errors for s in subs):
            await asyncio.sleep(0.1)
        assert all(not t.done() for t in held)  # the requests' pool was held all along
        errors = [s.errors for s in subs if s.errors]
        assert not errors, (len(errors), errors[:2])
        assert sorted(len(s.events) for s in subs) == [6] * len(subs) and len(subs) == POOL_TEST_SUBSCRIBERS
        await transaction.rollback()
        statuses = [(await t).status_code for t in held]
        assert statuses == [200] * 10, statuses
    finally:
        for t in held:
            t.cancel()
        for s in subs:
            await s.close()
        await locker.close()
        await conn.close()
        server.stop()


COSTLY = """subscription($id: String!) { citationAdded(arxivId: $id) { cursor observation { citedPaper {
  inbound(first: 100) { nodes { citingPaper { outbound(first: 100) { nodes { citedPaper {
  inbound(first: 100) { nodes { referenceIndex } } } } } } } } } } } }"""
PRICED = """subscription($id: String!) { citationAdded(arxivId: $id) { cursor observation { citedPaper {
  inbound(first: 100) { totalCount nodes { referenceIndex citingPaper { title } } } } } } }"""


async def _first_error_or_events(url: str, protocol: str, query: str, headers: dict, events: list,
                                 until: asyncio.Event | None = None) -> dict | None:
    """Subscribe over a WebSocket protocol; collect events until `until` is set or an error comes (returned)."""
    async with websockets.connect(url, subprotocols=[protocol], additional_headers=headers) as ws:
        await ws.send(json.dumps({"type": "connection_init"}))
        assert json.loads(await ws.recv())["type"] == "connection_ack"
        start = "subscribe" if protocol == "graphql-transport-ws" else "start"
        await ws.send(json.dumps({"id": "1", "type": start, "payload": {"query": query, "variables": {"id": PAPER}}}))
        while until is None or not until.is_set():
            try:
                message = json.loads(await asyncio.wait_for(ws.recv(), 0.2 if until is not None else 10))
            except TimeoutError:
                if until is None:
                    raise AssertionError(f"{protocol}: no message in 10 s") from None
                continue
            if message["type"] in ("next", "data"):
                if message["payload"].get("errors"):
                    return message["payload"]
                events.append(message["payload"])
            elif message["type"] == "error":
                payload = message["payload"]
                return {"errors": payload if isinstance(payload, list) else [payload]}
            elif message["type"] == "complete":
                return None
    return None


async def test_subscriptions_are_priced_refused_over_the_limit_and_charged_per_event(empty_database):
    """A subscription's selection is priced as a query of it: over the limit it is refused as it starts, on
    every transport; each event is admitted at that price, its points charged to the client's hour, and a
    client whose hour is spent sees its subscription end with RATE_LIMITED and where to resume."""
    from tests.test_governance import RATE, new_key, within_one_budget_hour

    await within_one_budget_hour(120)
    conn = await asyncpg.connect(empty_database)
    try:
        await load_file(conn, str(SEED))
    finally:
        await conn.close()
    funded, small = new_key(empty_database, "funded", 10_000), new_key(empty_database, "small", 12)
    server = LiveServer(empty_database)
    ws_url = server.base.replace("http://", "ws://") + "/graphql"
    try:
        refusals = []
        for protocol in ("graphql-transport-ws", "graphql-ws"):
            refusals.append(await _first_error_or_events(ws_url, protocol, COSTLY, {}, []))
        async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
            async with client.stream("POST", "/graphql", json={"query": COSTLY, "variables": {"id": PAPER}},
                                     headers={"accept": "text/event-stream"}) as response:
                async for line in response.aiter_lines():
                    if line.startswith("data:") and "errors" in line:
                        refusals.append(json.loads(line[5:]))
                        break
        assert len(refusals) == 3, refusals
        for refused in refusals:
            assert refused["errors"][0]["extensions"]["code"] == "QUERY_TOO_COSTLY", refused
            assert "limit" in refused["errors"][0]["message"], refused

        async def remaining(key: str) -> int:
            async with httpx.AsyncClient(base_url=server.base) as client:
                answer = await client.post("/graphql", json={"query": RATE}, headers={"authorization": f"Bearer {key}"})
                return answer.json()["data"]["rateLimit"]["remaining"]

        before = await remaining(funded)
        events: list[dict] = []
        done = asyncio.Event()
        listening = asyncio.create_task(_first_error_or_events(
            ws_url, "graphql-transport-ws", PRICED, {"authorization": f"Bearer {funded}"}, events, done))
        limited: list[dict] = []
        spent = asyncio.create_task(_first_error_or_events(
            ws_url, "graphql-transport-ws", PRICED, {"authorization": f"Bearer {small}"}, limited))
        await asyncio.sleep(0.5)
        await load_in_another_process(empty_database, AUG9)
        deadline = time.monotonic() + 15
        while len(events) < 6 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        done.set()
        assert await listening is None and len(events) == 6, events
        points = events[0]["extensions"]["cost"]["points"]
        assert points >= 2 and all(e["extensions"]["cost"]["points"] == points for e in events), events
        # The six events cost their points, and so did the subscription's start; the two RATE queries one each.
        assert before - await remaining(funded) >= 7 * points + 1
        ended = await asyncio.wait_for(spent, 15)
        assert ended is not None, limited
        error = ended["errors"][0]
        assert error["extensions"]["code"] == "RATE_LIMITED" and error["extensions"]["retryAfter"] >= 1, error
        assert "resubscribe with after" in error["message"] and error["extensions"]["after"], error
        assert 1 <= len(limited) < 6, limited
    finally:
        server.stop()


async def test_a_subscription_refused_as_it_starts_costs_what_a_refused_query_costs(database_url):
    """A subscription refused as it starts (an arXiv id that is not one) costs a refusal's point, as a query refused
    for its argument does, over SSE and WebSockets: its start is admitted at an event's price (recordChanged reads the
    record then), and a recordChanged refused so kept all of it (14 points)."""
    from tests.test_governance import RATE, new_key, within_one_budget_hour

    await within_one_budget_hour(60)
    key = new_key(database_url, "refused-start", 10_000)
    server = LiveServer(database_url)
    ws_url = server.base.replace("http://", "ws://") + "/graphql"
    try:
        async with httpx.AsyncClient(base_url=server.base, timeout=30,
                                     headers={"authorization": f"Bearer {key}"}) as client:
            async def remaining() -> int:
                return (await client.post("/graphql", json={"query": RATE})).json()["data"]["rateLimit"]["remaining"]

            async def refused_over_sse(query: str) -> dict:
                async with client.stream("POST", "/graphql", json={"query": query},
                                         headers={"accept": "text/event-stream"}) as response:
                    async for line in response.aiter_lines():
                        if line.startswith("data:") and "errors" in line:
                            return json.loads(line[5:])
                raise AssertionError("no error")

            async def refused_over_websocket(query: str) -> dict:
                found = await _first_error_or_events(ws_url, "graphql-transport-ws", query,
                                                     {"authorization": f"Bearer {key}"}, [])
                assert found is not None
                return found

            for refused in (refused_over_sse, refused_over_websocket):
                for query in ('subscription { recordChanged(arxivId: "nope") { contextDigest } }',
                              'subscription { citationAdded(arxivId: "nope") { cursor } }'):
                    before = await remaining()
                    answer = await refused(query)
                    assert answer["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT", answer
                    assert before - await remaining() <= 1 + 1, (refused, query, answer)  # its point, and RATE's
    finally:
        server.stop()


async def test_a_replay_from_the_start_of_a_hubs_log_is_read_a_batch_at_a_time_and_loses_nothing(admin_url):
    """`after` the log's first position replays a hub's every citation. Read whole in one statement (tens of
    thousands of rows on a real hub, decoded on the event loop), a client that subscribed and left over and over
    stalled every other client's lookups for seconds: it is read REPLAY_BATCH rows at a time (a limit, under
    the pool's generic plan), each batch once the rows before it were sent, and the events
    come once each, in the log's order, across the batches' seams."""
    from app.live import decode_cursor, encode_cursor
    from loaders.system import REPLAY, REPLAY_BATCH

    url = await synthetic_database(admin_url, "pith_test_replay", 60, 5, hub_citations=2 * REPLAY_BATCH + 50)
    server = LiveServer(url, env={"PITH_ANONYMOUS_POINTS_PER_HOUR": UNSPENDABLE})
    try:
        hub = await most_cited(url)
        conn = await asyncpg.connect(url)
        try:
            positions = [r["position"] for r in await conn.fetch(
                "SELECT position FROM change_log WHERE kind = 'citation_added' AND arxiv_id = $1 ORDER BY position",
                hub)]
            await conn.execute("SET plan_cache_mode = force_generic_plan")
            plan = "\n".join(r[0] for r in await conn.fetch("EXPLAIN " + REPLAY, "citation_added", hub, 0))
        finally:
            await conn.close()
        assert len(positions) > 2 * REPLAY_BATCH, len(positions)
        assert plan.lstrip().startswith("Limit"), plan  # (on a log of 241,063 rows: change_log_by_paper's range)
        sub = await Subscription(server.base, CITATIONS, {"id": hub, "after": encode_cursor(0)}).start()
        await sub.wait_for(len(positions), timeout=60)
        await asyncio.sleep(0.5)  # nothing more may come
        assert not sub.errors, sub.errors
        assert [decode_cursor(e["citationAdded"]["cursor"]) for _, e in sub.events] == positions
        await sub.close()
    finally:
        server.stop()
        await drop_database(admin_url, url)


@pytest.mark.parametrize("spec_version", ["2.3", "2.4"])
async def test_a_stream_cancelled_while_it_sends_is_closed_at_once(spec_version):
    """A client that goes away cancels its stream's response (app.middleware's watch), most often while the
    response waits to send a chunk. Starlette's StreamingResponse then left its body suspended: Strawberry's
    stream, whose heartbeat and reading tasks waited on a queue no one read until the collector found them,
    logged as errors ("aclose(): asynchronous generator is already running"). The view's response closes its
    body however it ends, under both of Starlette's ways of streaming."""
    from app.graphql.view import ClosingStream

    closed = asyncio.Event()
    sending = asyncio.Event()

    async def body():
        try:
            while True:
                yield "data: {}\n\n"
        finally:
            closed.set()

    async def receive():
        await asyncio.Event().wait()  # the client says nothing more

    async def send(message):
        if message["type"] == "http.response.body":
            sending.set()
            await asyncio.Event().wait()  # a client that reads no more: the send never completes

    scope = {"type": "http", "asgi": {"spec_version": spec_version}, "method": "POST", "path": "/graphql",
             "headers": []}
    task = asyncio.create_task(ClosingStream(body(), media_type="text/event-stream")(scope, receive, send))
    await asyncio.wait_for(sending.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert closed.is_set()
