"""Behind PgBouncer in transaction mode (Debian's 1.18, the pooler most deployments put in front):
DATABASE_URL points at PgBouncer, PITH_DB_PREPARED_STATEMENTS=0, LISTEN and migrations on a direct
PITH_LISTEN_DATABASE_URL. Lookups, records and search from 8 clients, a statement timeout per
transaction, a subscription fed by the direct listener."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import httpx
import pytest
import pytest_asyncio
import websockets

from app.ingest.load import load_file
from tests.conftest import AUG9, LONG_TESTS, SEED, LiveServer, create_database, drop_database, free_port

pytestmark = [pytest.mark.asyncio(loop_scope="session"),
              pytest.mark.skipif(shutil.which("pgbouncer") is None,
                                 reason="needs Debian's pgbouncer (.ci/run installs it)")]

PAPER = "2402.15627"


class PgBouncer:
    """pgbouncer in transaction mode on a free port, in front of the database server of `url`."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.port = free_port()
        self.folder = Path(tempfile.mkdtemp(prefix="pith-pgbouncer-"))
        self.folder.chmod(0o755)  # run as postgres when started as root: it must read its files
        user = parts.username or "postgres"
        (self.folder / "users.txt").write_text(f'"{user}" ""\n')
        (self.folder / "pgbouncer.ini").write_text(f"""[databases]
* = host={parts.hostname or '127.0.0.1'} port={parts.port or 5432}
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {self.port}
unix_socket_dir =
auth_type = trust
auth_file = {self.folder / 'users.txt'}
pool_mode = transaction
default_pool_size = 4
max_client_conn = 200
server_reset_query =
logfile = {self.folder / 'pgbouncer.log'}
pidfile = {self.folder / 'pgbouncer.pid'}
""")
        for name in ("users.txt", "pgbouncer.ini"):
            (self.folder / name).chmod(0o644)
        command = ["pgbouncer", str(self.folder / "pgbouncer.ini")]
        if os.geteuid() == 0:  # pgbouncer refuses to run as root
            command[1:1] = ["-u", "postgres"]
            shutil.chown(self.folder, "postgres")
        self.command = command
        self.url = url.replace(f"{parts.hostname}:{parts.port or 5432}", f"127.0.0.1:{self.port}")
        self._start()

    def _start(self) -> None:
        self.process = subprocess.Popen(self.command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                import socket

                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                if self.process.poll() is not None:
                    log = self.folder / "pgbouncer.log"
                    raise RuntimeError("pgbouncer exited: " + (log.read_text() if log.exists() else ""))
                time.sleep(0.05)
        raise RuntimeError("pgbouncer did not start")

    def restart(self) -> None:
        """Stopped (its clients' connections cut) and started again on the same port."""
        self.process.terminate()
        self.process.wait(10)
        self._start()

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)
        shutil.rmtree(self.folder, ignore_errors=True)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def behind_pgbouncer(admin_url):
    url = await create_database(admin_url, "pith_test_pgb")
    conn = await asyncpg.connect(url)
    try:
        await load_file(conn, str(SEED))
    finally:
        await conn.close()
    bouncer = PgBouncer(url)
    server = LiveServer(bouncer.url, env={"PITH_DB_PREPARED_STATEMENTS": "0", "PITH_LISTEN_DATABASE_URL": url,
                                          "PITH_STATEMENT_TIMEOUT_MS": "1000"},
                        expect_5xx=True)  # the statement-timeout test is answered 503, as it must be
    yield server, url, bouncer
    server.stop()
    bouncer.stop()
    await drop_database(admin_url, url)


async def test_eight_clients_mixing_lookups_records_and_search_get_no_error(behind_pgbouncer):
    server, _, _ = behind_pgbouncer
    queries = [
        {"query": f'query Lookup {{ paper(arxivId: "{PAPER}") {{ title inbound(first: 3) {{ totalCount }} }} }}'},
        {"query": f'{{ citationRecord(arxivId: "{PAPER}") {{ contextDigest }} }}'},
        {"query": '{ searchPapers(query: "training", first: 5) { nodes { arxivId } } }'},
        {"query": f'{{ paper(arxivId: "{PAPER}") {{ outbound(first: 5) {{ nodes {{ standingNotice {{ state }} }} }} }} }}'},
    ]
    failures: list[str] = []
    answered = 0

    async def client(n: int) -> None:
        nonlocal answered
        async with httpx.AsyncClient(base_url=server.base, timeout=10) as http:
            stop = time.monotonic() + 10
            i = n
            while time.monotonic() < stop:
                response = await http.post("/graphql", json=queries[i % len(queries)])
                i += 1
                body = response.json()
                if response.status_code != 200 or body.get("errors"):
                    failures.append(f"{response.status_code} {json.dumps(body)[:300]}")
                answered += 1

    await asyncio.gather(*(client(n) for n in range(8)))
    assert not failures, f"{len(failures)} of {answered} failed: {failures[:3]}"
    assert answered > 100


async def test_a_statement_blocked_by_a_lock_ends_at_the_statement_timeout(behind_pgbouncer):
    server, url, _ = behind_pgbouncer
    locker = await asyncpg.connect(url)
    try:
        await locker.execute("BEGIN; LOCK TABLE paper_snapshots IN ACCESS EXCLUSIVE MODE")
        async with httpx.AsyncClient(base_url=server.base, timeout=30) as http:
            for query in (f'{{ citationRecord(arxivId: "{PAPER}") {{ contextDigest }} }}',  # a transaction
                          f'{{ paper(arxivId: "{PAPER}") {{ title }} }}'):  # one statement on its own
                started = time.monotonic()
                response = await http.post("/graphql", json={"query": query})
                took = time.monotonic() - started
                assert response.status_code == 503, response.text
                error = response.json()["errors"][0]
                assert error["extensions"]["code"] == "SERVICE_UNAVAILABLE" and "1000 ms" in error["message"], error
                assert 0.9 < took < 5, took
    finally:
        await locker.execute("ROLLBACK")
        await locker.close()


async def test_a_subscription_receives_the_six_new_citers_within_a_second_of_the_load(behind_pgbouncer):
    server, url, bouncer = behind_pgbouncer
    ws_url = server.base.replace("http://", "ws://") + "/graphql"
    async with websockets.connect(ws_url, subprotocols=["graphql-transport-ws"]) as ws:
        await ws.send(json.dumps({"type": "connection_init"}))
        assert json.loads(await ws.recv())["type"] == "connection_ack"
        await ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": {
            "query": f'subscription {{ citationAdded(arxivId: "{PAPER}") {{ observation {{ citingPaper {{ arxivId }} }} }} }}'}}))
        await asyncio.sleep(0.5)
        # The load goes through PgBouncer as well (one transaction, so transaction mode suits it).
        done = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "app.cli", "load", str(AUG9)],
                                       env={**os.environ, "DATABASE_URL": bouncer.url,
                                            "PITH_DB_PREPARED_STATEMENTS": "0"}, capture_output=True, timeout=120)
        assert done.returncode == 0, done.stderr.decode()[-2000:]
        loaded = time.monotonic()
        citers = set()
        while len(citers) < 6:
            message = json.loads(await asyncio.wait_for(ws.recv(), 5))
            if message["type"] == "next":
                assert not message["payload"].get("errors"), message
                citers.add(message["payload"]["data"]["citationAdded"]["observation"]["citingPaper"]["arxivId"])
        assert time.monotonic() - loaded < 1.0, time.monotonic() - loaded
    assert len(citers) == 6


@pytest_asyncio.fixture(loop_scope="session")
async def busy_pgbouncer(admin_url):
    """A database of its own behind PgBouncer (the load it takes is this test's alone), and a server on it."""
    url = await create_database(admin_url, "pith_test_pgb16")
    conn = await asyncpg.connect(url)
    try:
        await load_file(conn, str(SEED))
    finally:
        await conn.close()
    bouncer = PgBouncer(url)
    # A request past its deadline on a starved machine is answered 504 TIMEOUT: counted, not failed.
    server = LiveServer(bouncer.url, env={"PITH_DB_PREPARED_STATEMENTS": "0", "PITH_LISTEN_DATABASE_URL": url,
                                          "PITH_WEBSOCKETS_PER_CLIENT": "200", "PITH_SUBSCRIPTIONS_PER_CLIENT": "400"},
                        expect_5xx=True)
    yield server, url, bouncer
    server.stop()
    bouncer.stop()
    await drop_database(admin_url, url)


async def test_sixteen_clients_mixing_reads_and_subscriptions_for_a_minute_get_no_503(busy_pgbouncer):
    """12 clients mixing lookups, records and search, 2 holding subscriptions for the whole minute (12 s in
    the short form; PITH_LONG_TESTS=1 for the minute) and 2 opening, replaying (`after`) and closing them
    over and over, while a load lands: no request answered
    503 or with any error but the deadline's (504 TIMEOUT: how long a request takes on a machine shared
    with other work is a timing, not asserted), every held subscription receives every event, every
    replay is whole."""
    from app.live import encode_cursor
    from tests.test_live import CITATIONS, Subscription, new_inbound_ids

    server, url, bouncer = busy_pgbouncer
    seconds = 60 if LONG_TESTS else 12  # the long form (bench/reliability.sh) is the minute
    queries = [
        {"query": f'query Lookup {{ paper(arxivId: "{PAPER}") {{ title inbound(first: 3) {{ totalCount }} }} }}'},
        {"query": f'{{ citationRecord(arxivId: "{PAPER}") {{ contextDigest }} }}'},
        {"query": '{ searchPapers(query: "training", first: 5) { nodes { arxivId } } }'},
        {"query": f'{{ paper(arxivId: "{PAPER}") {{ outbound(first: 5) {{ nodes {{ standingNotice {{ state }} }} }} }} }}'},
    ]
    records = "subscription($id: String!) { recordChanged(arxivId: $id) { cursor contextDigest } }"
    failures: list[str] = []
    answered = 0
    replays = 0
    late = 0  # 504 TIMEOUT
    stop = 0.0  # set once the held subscriptions are up: the clients then run for `seconds`

    async def reader(n: int) -> None:
        nonlocal answered, late
        async with httpx.AsyncClient(base_url=server.base, timeout=30) as http:
            i = n
            while time.monotonic() < stop:
                response = await http.post("/graphql", json=queries[i % len(queries)])
                i += 1
                body = response.json()
                if response.status_code == 504 and body["errors"][0]["extensions"]["code"] == "TIMEOUT":
                    late += 1
                elif response.status_code != 200 or body.get("errors"):
                    failures.append(f"{response.status_code} {json.dumps(body)[:300]}")
                answered += 1

    async def logged(kind: str) -> int:
        conn = await asyncpg.connect(url)
        try:
            return await conn.fetchval("SELECT count(*) FROM change_log WHERE kind = $1 AND arxiv_id = $2", kind, PAPER)
        finally:
            await conn.close()

    async def replayer() -> None:
        nonlocal replays
        while time.monotonic() < stop - 5:
            expected = await logged("citation_added")  # at least these: the replay from the start of the log
            sub = await Subscription(server.base, CITATIONS, {"id": PAPER, "after": encode_cursor(0)}).start()
            try:
                await sub.wait_for(expected, timeout=20)
                if sub.errors or len(sub.events) < expected:
                    failures.append(f"replay: {len(sub.events)} of {expected} events, errors {sub.errors[:1]}")
                replays += 1
            finally:
                await sub.close()

    async def load_midway() -> None:
        await asyncio.sleep(seconds / 4)
        done = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "app.cli", "load", str(AUG9)],
                                       env={**os.environ, "DATABASE_URL": bouncer.url,
                                            "PITH_DB_PREPARED_STATEMENTS": "0"}, capture_output=True, timeout=120)
        assert done.returncode == 0, done.stderr.decode()[-2000:]

    held = [await Subscription(server.base, query, {"id": PAPER}).start()
            for query in (CITATIONS, CITATIONS, records, records)]
    try:
        stop = time.monotonic() + seconds
        await asyncio.gather(*(reader(n) for n in range(12)), replayer(), replayer(), load_midway())
        expected = len(new_inbound_ids())
        for sub in held:
            await sub.wait_for(expected if sub.query == CITATIONS else 1, timeout=30)
        got = [len(s.events) for s in held]
        errors = [s.errors for s in held if s.errors]
    finally:
        for sub in held:
            await sub.close()
    from tests.conftest import ROOT

    (ROOT / "tests" / "artifacts").mkdir(parents=True, exist_ok=True)
    (ROOT / "tests" / "artifacts" / "pgbouncer-16.json").write_text(json.dumps(
        {"seconds": seconds, "requests": answered, "failed": len(failures), "timeouts_504": late, "replays": replays,
         "held_events": got}, indent=2) + "\n")
    assert not failures, f"{len(failures)} of {answered} requests and {replays} replays failed: {failures[:3]}"
    assert got == [expected, expected, 1, 1] and not errors, (got, errors)
    assert answered > 3 * seconds and replays >= 2, (answered, replays)


async def test_a_pgbouncer_restart_ends_no_subscription(busy_pgbouncer):
    """Subscriptions listen on their own connection (PITH_LISTEN_DATABASE_URL, straight to PostgreSQL) and
    read their events through the pool: PgBouncer stopped and started again under them ends none, and each
    then receives the events of the next load (the first load's six new citers, the record's change)."""
    server, url, bouncer = busy_pgbouncer
    ws_url = server.base.replace("http://", "ws://") + "/graphql"
    async with websockets.connect(ws_url, subprotocols=["graphql-transport-ws"]) as ws:
        await ws.send(json.dumps({"type": "connection_init"}))
        assert json.loads(await ws.recv())["type"] == "connection_ack"
        await ws.send(json.dumps({"id": "citers", "type": "subscribe", "payload": {
            "query": f'subscription {{ citationAdded(arxivId: "{PAPER}") {{ observation {{ citingPaper {{ arxivId }} }} }} }}'}}))
        await ws.send(json.dumps({"id": "record", "type": "subscribe", "payload": {
            "query": f'subscription {{ recordChanged(arxivId: "{PAPER}") {{ cursor contextDigest }} }}'}}))
        await asyncio.sleep(0.5)
        await asyncio.to_thread(bouncer.restart)
        # Requests through the pool work again (the pool's connections were cut with PgBouncer's).
        async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
            for _ in range(100):
                r = await client.post("/graphql", json={"query": f'{{ paper(arxivId: "{PAPER}") {{ title }} }}'})
                if r.status_code == 200 and "errors" not in r.json():
                    break
                await asyncio.sleep(0.2)
            assert r.status_code == 200 and "errors" not in r.json(), r.text
        done = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "app.cli", "load", str(AUG9)],
                                       env={**os.environ, "DATABASE_URL": url}, capture_output=True, timeout=120)
        assert done.returncode == 0, done.stderr.decode()[-2000:]
        citers, records = set(), 0
        while len(citers) < 6 or records < 1:
            message = json.loads(await asyncio.wait_for(ws.recv(), 30))
            assert message["type"] == "next", message  # no error, no complete: the subscriptions go on
            assert not message["payload"].get("errors"), message
            if message["id"] == "citers":
                citers.add(message["payload"]["data"]["citationAdded"]["observation"]["citingPaper"]["arxivId"])
            else:
                records += 1
    assert len(citers) == 6
