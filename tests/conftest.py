"""Fixtures: a fresh PostgreSQL database per test session, migrated, seeded, and dropped at the end.

The server is PITH_TEST_ADMIN_URL if set, else the local one on 127.0.0.1:5432, else an embedded
server in a temporary directory (a machine with no PostgreSQL at all; PITH_TEST_EMBEDDED=1 forces it).
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import uuid
from pathlib import Path
from typing import Any, AsyncIterator

import asyncpg
import httpx
import pytest
import pytest_asyncio

from app.db.migrate import migrate
from app.ingest.store import TABLES as STORE_TABLES
from app.ingest.load import load_file
from app.main import create_app
from app.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
SEED = ROOT / "app" / "sample" / "citation-record-2402.15627-2026-08-05.json"
AUG9 = ROOT / "app" / "sample" / "records-2402.15627-2026-08-09.ndjson"
SEED_AS_OF = "2026-08-05T04:52:00Z"
AUG9_AS_OF = "2026-08-09T12:00:00Z"
FACT_TABLES = tuple(t.name for t in STORE_TABLES)
TRANSACTION_CONTROL = ("BEGIN", "COMMIT", "ROLLBACK", "START TRANSACTION", "SET TRANSACTION", "SAVEPOINT",
                       "RELEASE SAVEPOINT")


def _admin_url() -> str:
    if os.environ.get("PITH_TEST_ADMIN_URL"):
        return os.environ["PITH_TEST_ADMIN_URL"]
    local = "postgresql://postgres@127.0.0.1:5432/postgres"

    async def reachable() -> bool:
        try:
            conn = await asyncpg.connect(local, timeout=3)
        except (OSError, asyncpg.PostgresError, asyncio.TimeoutError):
            return False
        await conn.close()
        return True

    if os.environ.get("PITH_TEST_EMBEDDED") != "1" and asyncio.run(reachable()):
        return local
    from app.db.embedded import package

    server = package().get_server(Path(tempfile.mkdtemp(prefix="pith-test-pg-")), cleanup_mode="delete")
    _keep.append(server)
    return server.get_uri("postgres")


_keep: list[Any] = []


def with_database(url: str, name: str) -> str:
    base, _, query = url.partition("?")
    return base.rsplit("/", 1)[0] + "/" + name + ("?" + query if query else "")


class StatementLog:
    """Every statement the pool's connections send, in order (asyncpg's query logger)."""

    def __init__(self) -> None:
        self.queries: list[str] = []

    def __call__(self, record: Any) -> None:
        self.queries.append(record.query)

    def clear(self) -> None:
        self.queries.clear()

    @property
    def counted(self) -> list[str]:
        return [q for q in self.queries if not q.strip().upper().startswith(TRANSACTION_CONTROL)]


@pytest.fixture(scope="session")
def admin_url() -> str:
    return _admin_url()


# The long forms of the tests that hold load for a while (bench/reliability.sh sets it): CI runs their
# short forms, which prove the same property at a smaller size.
LONG_TESTS = os.environ.get("PITH_LONG_TESTS") == "1"


async def create_database(admin_url: str, prefix: str = "pith_test", until: str | None = None) -> str:
    """A new database of its own, migrated (up to and including `until` when given)."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    conn = await asyncpg.connect(admin_url)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    url = with_database(admin_url, name)
    conn = await asyncpg.connect(url)
    try:
        await migrate(conn, until=until)
    finally:
        await conn.close()
    return url


async def synthetic_database(admin_url: str, prefix: str, papers: int, seed: int, hub_citations: int = 0) -> str:
    """A new database holding `pith-graph synth --papers N --seed S [--hub-citations H]`, written through
    the command line."""
    import subprocess
    import sys

    url = await create_database(admin_url, prefix)
    hub = ["--hub-citations", str(hub_citations)] if hub_citations else []
    done = subprocess.run([sys.executable, "-m", "app.cli", "synth", "--papers", str(papers), "--seed", str(seed),
                           *hub],
                          env={**os.environ, "DATABASE_URL": url}, capture_output=True, timeout=900)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    return url


async def most_cited(url: str) -> str:
    conn = await asyncpg.connect(url)
    try:
        return await conn.fetchval("SELECT cited_arxiv_id FROM citation_observations WHERE cited_arxiv_id IS NOT NULL "
                                   "GROUP BY 1 ORDER BY count(*) DESC, 1 LIMIT 1")
    finally:
        await conn.close()


async def drop_database(admin_url: str, url: str) -> None:
    name = url.split("?")[0].rsplit("/", 1)[1]
    conn = await asyncpg.connect(admin_url)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


# What a user can observe of a database, to compare a database with a replay of the same loads: every fact
# table's sorted rows, the change log in position order (every column but the position and the commit time:
# a killed load leaves a gap in positions, and the order is what resuming subscribers see), the papers'
# inbound totals and the data version. Concurrent loads are serialisable: they must equal the loads run one
# after another in the order they committed.
_CHANGE_LOG_COLUMNS = ("kind, arxiv_id, observation_id::text, work_id::text, event_source, event_type, "
                       "event_observed_at, event_reported_at, event_notice_doi, event_ended_at")


async def database_state(url: str) -> dict[str, str]:
    import hashlib

    def digest(rows: list) -> str:
        return f"{len(rows)}:" + hashlib.sha256(repr(rows).encode()).hexdigest()[:16]

    conn = await asyncpg.connect(url)
    try:
        out: dict[str, str] = {}
        for table in STORE_TABLES:
            out[table.name] = digest([tuple(r) for r in await conn.fetch(f"SELECT * FROM {table.name} ORDER BY 1, 2, 3")])
        out["change_log"] = digest([tuple(r) for r in await conn.fetch(
            f"SELECT {_CHANGE_LOG_COLUMNS} FROM change_log ORDER BY position")])
        out["paper_inbound_totals"] = digest([tuple(r)[:2] for r in await conn.fetch(
            "SELECT * FROM paper_inbound_totals ORDER BY 1")])
        out["data_version"] = str(await conn.fetchval("SELECT version FROM data_version"))
        return out
    finally:
        await conn.close()


async def commit_blocks(url: str) -> list[set[str]]:
    """The observations each load's transaction announced (citation_added rows), in commit order: a load
    appends its change-log rows in one transaction under one lock, so the rows of one transaction id
    are one block of positions."""
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch("SELECT xmin::text AS tx, min(position) AS first, array_agg(observation_id::text) "
                                "FILTER (WHERE kind = 'citation_added') AS added FROM change_log "
                                "GROUP BY xmin::text ORDER BY first")
        return [set(r["added"] or ()) for r in rows]
    finally:
        await conn.close()


def file_observations(path: Path) -> set[str]:
    """The observation ids an ndjson file of v1 documents holds."""
    from app.ingest.document import parse_document

    return {str(key[0]) for line in path.read_text().splitlines() if line.strip()
            for key in parse_document(json.loads(line)).facts.observations}


def commit_order(blocks: list[set[str]], files: dict[str, Path]) -> list[str]:
    """Which file each block of the change log came from (the file with observations no other has)."""
    held = {name: file_observations(path) for name, path in files.items()}
    order = []
    for block in blocks:
        own = [name for name, ids in held.items() if block & (ids - set().union(*(v for k, v in held.items() if k != name)))]
        order.append(own[0] if len(own) == 1 else "?")
    return order


async def sample_database(admin_url: str, prefix: str = "pith_test") -> str:
    """A new database with both sample snapshots loaded (5 and 9 August)."""
    url = await create_database(admin_url, prefix)
    conn = await asyncpg.connect(url)
    try:
        await load_file(conn, str(SEED))
        await load_file(conn, str(AUG9))
    finally:
        await conn.close()
    return url


async def bundled_sample_database(admin_url: str, prefix: str = "pith_test_bundled") -> str:
    """A new database holding the whole bundled sample, as the embedded server loads it on first start: the
    two snapshots, then the open sources' records of app/sample/sources (app.ingest.sample)."""
    from app.ingest.sample import load_sample

    url = await create_database(admin_url, prefix)
    conn = await asyncpg.connect(url)
    try:
        await load_sample(conn)
    finally:
        await conn.close()
    return url


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def database_url(admin_url: str) -> AsyncIterator[str]:
    """The shared database: both sample snapshots loaded."""
    url = await sample_database(admin_url)
    yield url
    await drop_database(admin_url, url)


@pytest_asyncio.fixture(autouse=True, loop_scope="session")
async def fresh_budgets(request: pytest.FixtureRequest) -> None:
    """Each test on a shared database starts with every budget unspent. Budgets are kept per client address and
    hour in the database, and every test's server there is 127.0.0.1: without this, what a test finds left of a
    budget depends on what the tests before it spent that hour (random order, CI's load)."""
    for name in SHARED_DATABASES:
        if name in request.fixturenames:
            conn = await asyncpg.connect(request.getfixturevalue(name))
            try:
                await conn.execute("DELETE FROM rate_limit_windows")
            finally:
                await conn.close()


SHARED_DATABASES = ("database_url", "graph_url")


@pytest_asyncio.fixture(loop_scope="session")
async def empty_database(admin_url: str) -> AsyncIterator[str]:
    """A migrated database of the test's own, for tests that write."""
    url = await create_database(admin_url, "pith_test_w")
    yield url
    await drop_database(admin_url, url)


@pytest.fixture(scope="session")
def statements() -> StatementLog:
    return StatementLog()


class Served:
    def __init__(self, app: Any, client: httpx.AsyncClient, log: StatementLog) -> None:
        self.app, self.client, self.statements = app, client, log

    async def graphql(self, query: str, variables: dict | None = None, **kwargs: Any) -> dict:
        response = await self.client.post("/graphql", json={"query": query, "variables": variables}, **kwargs)
        return response.json()


# Every 5xx answered anywhere in the suite, except by servers a test takes the database from on purpose.
SERVER_ERRORS: list[str] = []


def record_server_errors(app: Any) -> Any:
    async def recording(scope: Any, receive: Any, send: Any) -> None:
        async def watch(message: dict) -> None:
            if message["type"] == "http.response.start" and message["status"] >= 500:
                SERVER_ERRORS.append(f"{scope.get('method')} {scope.get('path')} {message['status']}")
            await send(message)

        await app(scope, receive, watch)

    return recording


@pytest.fixture(scope="session", autouse=True)
def no_server_errors() -> Any:
    yield
    assert SERVER_ERRORS == [], f"requests answered 5xx: {SERVER_ERRORS[:20]}"


async def serve(url: str, log: StatementLog, settings: Settings | None = None,
                pool_init: Any = None, expect_5xx: bool = False) -> AsyncIterator[Served]:
    async def init(conn: asyncpg.Connection) -> None:
        conn.add_query_logger(log)

    app = create_app(settings or Settings(database_url=url), url, pool_init=pool_init or init)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app if expect_5xx else record_server_errors(app))
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            yield Served(app, client, log)


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def served(database_url: str, statements: StatementLog) -> AsyncIterator[Served]:
    async for s in serve(database_url, statements):
        yield s


async def papers_of(url: str) -> tuple[list[str], list[str]]:
    """A graph's papers (by id) and its three most-cited papers, most cited first."""
    conn = await asyncpg.connect(url)
    try:
        papers = [r[0] for r in await conn.fetch("SELECT DISTINCT arxiv_id FROM paper_snapshots ORDER BY 1")]
        hot = [r[0] for r in await conn.fetch(
            "SELECT cited_arxiv_id FROM citation_observations WHERE cited_arxiv_id IS NOT NULL GROUP BY 1 "
            "ORDER BY count(*) DESC, 1 LIMIT 3")]
    finally:
        await conn.close()
    return papers, hot


async def assert_settled(pool: asyncpg.Pool, url: str) -> None:
    """Every connection of the pool back and idle, and no statement of ours still running in the database."""
    assert pool.get_idle_size() == pool.get_size()
    conn = await asyncpg.connect(url)
    try:
        busy = await conn.fetchval("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pith-graph' "
                                   "AND datname = current_database() AND state <> 'idle'")
    finally:
        await conn.close()
    assert busy == 0


def seed_bytes() -> bytes:
    return SEED.read_bytes()


def aug9_documents() -> list[dict]:
    return [json.loads(line) for line in AUG9.read_text().splitlines() if line.strip()]


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def graph_url(admin_url: str) -> AsyncIterator[str]:
    """Graphs of known shape: a 250-in/150-out hub, and citation trees of fan-out 100 and 5."""
    from tests.graphs import hub, tree

    url = await create_database(admin_url, "pith_test_g")
    conn = await asyncpg.connect(url)
    try:
        await hub(HUB, inbound=250, outbound=150).write(conn)
        await tree(WIDE_TREE, fanout=100, levels=2, prefix=7000).write(conn)
        await tree(NARROW_TREE, fanout=5, levels=2, prefix=6000).write(conn)
    finally:
        await conn.close()
    yield url
    await drop_database(admin_url, url)


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def graph(graph_url: str, statements: StatementLog) -> AsyncIterator[Served]:
    async for s in serve(graph_url, statements):
        yield s


HUB = "8800.00001"
WIDE_TREE = "7000.00000"
NARROW_TREE = "6000.00000"


async def within_one_budget_hour(seconds: float) -> None:
    """Budgets are per clock hour (app.governor): a test that compares a client's points over about `seconds`
    starts after the hour's end when fewer than `seconds` are left of it, so it reads one budget throughout
    (a test that read points before and after 09:00 saw the new hour's count, not its own charges)."""
    import time

    left = 3600 - time.time() % 3600
    if left < seconds:
        await asyncio.sleep(left + 1)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# An anonymous budget no test can spend (PITH_ANONYMOUS_POINTS_PER_HOUR) for production servers whose test is
# not about budgets: budgets are kept per address and hour in the database, and every test's server on the
# shared database is 127.0.0.1, so a default budget (5,000) was found spent by other tests in some orders.
UNSPENDABLE = "100000000"


class LiveServer:
    """`pith-graph serve` in a subprocess, on a free port of 127.0.0.1."""

    def __init__(self, database_url: str, env: dict[str, str] | None = None, expect_5xx: bool = False,
                 stdout: bool = False, nofile: int | None = None, start_seconds: float = 120) -> None:
        import resource
        import subprocess
        import sys

        def limits() -> None:  # `ulimit -n` for the server (and its workers): its file descriptors
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        self.expect_5xx = expect_5xx

        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        # Logs go to a file: an undrained pipe fills up and blocks the server's event loop.
        self.log = tempfile.NamedTemporaryFile(prefix="pith-serve-", suffix=".log", delete=False)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve", "--port", str(self.port)],
            env={**os.environ, "DATABASE_URL": database_url, **(env or {})},
            stdout=self.log if stdout else subprocess.DEVNULL, stderr=self.log,
            preexec_fn=limits if nofile is not None else None,
        )
        import time

        deadline = time.monotonic() + start_seconds
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                told = self.logs()
                self.log.close()
                raise RuntimeError("server exited: " + told)
            try:
                if httpx.get(self.base + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"server did not start in {start_seconds:.0f} s")

    def logs(self) -> str:
        if not self.log.closed:
            self.log.flush()
        return Path(self.log.name).read_text(errors="replace")

    def stop(self) -> None:
        import re

        if not self.expect_5xx and Path(self.log.name).exists():
            SERVER_ERRORS.extend(m.group(0) for m in re.finditer(r"(?:GET|POST|HEAD) \S+ 5\d\d ", self.logs()))
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except Exception:  # noqa: BLE001
                self.process.kill()
                self.process.wait(10)
        self.log.close()


@pytest.fixture(scope="session")
def live(database_url: str):
    server = LiveServer(database_url)
    yield server
    server.stop()


def npm_install(folder: Path, installed: Path, what: str) -> None:
    """The npm packages of a test folder (pinned in its package.json), installed once; skip without npm."""
    import shutil
    import subprocess

    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip(f"needs Node.js and npm ({what} are npm packages); .ci/run has them")
    if not installed.exists():
        done = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"], cwd=folder,
                              capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            pytest.skip(f"npm could not install {what}: {done.stderr[-500:]}")
