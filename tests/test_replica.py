"""A real streaming replica of the machine's PostgreSQL serves the API's reads; loads on the primary reach it."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import asyncpg
import pytest
import pytest_asyncio

from app.settings import Settings
from tests.conftest import ROOT, AUG9, SEED, StatementLog, create_database, drop_database, free_port, serve, with_database

PRIMARY = os.environ.get("PITH_TEST_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
BIN = next(iter(sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)), None)


def replication_allowed() -> str | None:
    """Why a replica cannot be built here, or None."""
    if BIN is None or not (BIN / "pg_basebackup").exists():
        return "no PostgreSQL server binaries (pg_basebackup) on this machine"
    if os.geteuid() != 0 or shutil.which("runuser") is None:
        return "building a replica runs PostgreSQL as the postgres user: needs root and runuser"
    if "127.0.0.1:5432" not in PRIMARY:
        return "the replica test builds from the machine's PostgreSQL on 127.0.0.1:5432"
    probe = subprocess.run(["runuser", "-u", "postgres", "--", str(BIN / "pg_receivewal"), "--help"],
                           capture_output=True)
    if probe.returncode != 0:
        return "cannot run PostgreSQL tools as the postgres user"
    check = subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-d", "postgres", "-Atc",
                            "SELECT count(*) FROM pg_hba_file_rules WHERE 'replication' = ANY(database) "
                            "AND (address = '127.0.0.1' OR type = 'local')"], capture_output=True, text=True)
    if check.returncode != 0 or check.stdout.strip() in ("", "0"):
        return ("the machine's pg_hba.conf allows no replication connection from 127.0.0.1 "
                "(.ci/run adds `host replication all 127.0.0.1/32 trust`)")
    return None


pytestmark = [pytest.mark.asyncio(loop_scope="session"),
              pytest.mark.skipif(replication_allowed() is not None, reason=str(replication_allowed()))]


DATA: dict[str, Path] = {}  # a replica's URL -> its data directory


def replica_data(url: str) -> Path:
    return DATA[url]


def as_postgres(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(["runuser", "-u", "postgres", "--", *args], capture_output=True, text=True, **kwargs)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def replica():
    folder = Path(tempfile.mkdtemp(prefix="pith-replica-"))
    shutil.chown(folder, "postgres", "postgres")
    data = folder / "data"
    port = free_port()
    # A slot of its own: the primary keeps the WAL the replica has not received yet (on a busy machine
    # the segments written during the backup are recycled before the replica starts otherwise).
    slot = f"pith_test_{os.getpid()}_{port}"
    backup = as_postgres(str(BIN / "pg_basebackup"), "-h", "127.0.0.1", "-p", "5432", "-U", "postgres", "-D",
                         str(data), "-R", "-X", "stream", "-c", "fast", "-C", "-S", slot, timeout=300)
    assert backup.returncode == 0, backup.stderr
    # Debian keeps the configuration outside the data directory: give the replica its own.
    (data / "postgresql.conf").write_text(
        f"port = {port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{folder}'\nhot_standby = on\n"
        f"hba_file = '{data / 'pg_hba.conf'}'\nident_file = '{data / 'pg_ident.conf'}'\n")
    (data / "pg_hba.conf").write_text("local all all trust\nhost all all 127.0.0.1/32 trust\n")
    (data / "pg_ident.conf").write_text("")
    for f in ("postgresql.conf", "pg_hba.conf", "pg_ident.conf"):
        shutil.chown(data / f, "postgres", "postgres")
    started = as_postgres(str(BIN / "pg_ctl"), "-D", str(data), "-l", str(folder / "log"), "-w", "start", timeout=120)
    assert started.returncode == 0, started.stderr + (folder / "log").read_text()
    url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
    DATA[url] = data
    yield url
    as_postgres(str(BIN / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop", timeout=120)
    shutil.rmtree(folder, ignore_errors=True)
    admin = await asyncpg.connect(PRIMARY)
    try:
        await admin.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1",
                            slot)
    finally:
        await admin.close()


async def wait_for(url: str, sql: str, expected, seconds: float = 30):
    deadline = time.monotonic() + seconds
    while True:
        try:
            conn = await asyncpg.connect(url)
            try:
                value = await conn.fetchval(sql)
            finally:
                await conn.close()
            if value == expected:
                return value
        except (asyncpg.InvalidCatalogNameError, asyncpg.UndefinedTableError, OSError):
            value = None
        if time.monotonic() > deadline:
            raise AssertionError(f"replica never showed {expected!r} for {sql} (last {value!r})")
        await asyncio.sleep(0.2)


async def test_reads_come_from_the_replica_and_loads_reach_it(replica):
    primary_db = await create_database(PRIMARY, "pith_test_repl")
    name = primary_db.split("?")[0].rsplit("/", 1)[1]
    replica_db = with_database(replica, name)
    try:
        # The new database and its migrations stream over.
        migrations = len(list((ROOT / "app" / "db" / "migrations").glob("*.sql")))
        await wait_for(replica_db, "SELECT count(*) FROM schema_migrations", migrations)
        assert await wait_for(replica_db, "SELECT pg_is_in_recovery()", True)
        sent: dict[str, list[str]] = {"primary": [], "replica": []}

        async def tag(conn: asyncpg.Connection) -> None:
            where = "replica" if await conn.fetchval("SELECT pg_is_in_recovery()") else "primary"
            conn.add_query_logger(lambda record: sent[where].append(record.query))

        settings = Settings(database_url=primary_db, replica_urls=(replica_db,))
        async for s in serve(primary_db, StatementLog(), settings, pool_init=tag):
            assert (await s.client.get("/paper/2402.15627/citation-record.json")).status_code == 404
            ready = (await s.client.get("/readyz")).json()
            assert ready["replicas"][0]["reachable"] is True

            conn = await asyncpg.connect(primary_db)
            try:
                loaded = await conn.fetchval("SELECT 1")  # the primary takes writes: load there
                assert loaded == 1
                from app.ingest.load import load_file

                await load_file(conn, str(SEED))
                await load_file(conn, str(AUG9))
            finally:
                await conn.close()
            await wait_for(replica_db, "SELECT count(*) FROM citation_observations", 13)

            # Live changes are read from the primary: the hub listens there, and has read the loads' rows.
            hub = s.app.state.pith.hub
            deadline = time.monotonic() + 10
            while hub.position == 0 and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            assert hub.position > 0
            listening = "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pith-graph live' AND datname = $1"
            for url, expected in ((PRIMARY, 1), (replica, 0)):
                admin = await asyncpg.connect(url)
                try:
                    assert await admin.fetchval(listening, name) == expected, url
                finally:
                    await admin.close()

            sent["primary"].clear()
            sent["replica"].clear()
            body = await s.graphql('{ paper(arxivId: "2402.15627", asOf: "2026-08-09T12:00:00Z") { inbound { '
                                   'totalCount } } r: citationRecord(arxivId: "2402.15627", '
                                   'asOf: "2026-08-05T04:52:00Z") { contextDigest } }')
            assert body["data"]["paper"]["inbound"]["totalCount"] == 13
            response = await s.client.get("/paper/2402.15627/citation-record.json?as_of=2026-08-05T04:52:00Z")
            assert response.content == SEED.read_bytes()

            # Every read of those requests ran on the replica; none on the primary.
            assert any("citation_observations" in q for q in sent["replica"])
            assert sent["primary"] == []
            on_replica = await asyncpg.connect(replica_db)
            try:
                assert await on_replica.fetchval("SELECT pg_is_in_recovery()") is True
                with pytest.raises(asyncpg.ReadOnlySQLTransactionError):
                    await on_replica.execute("CREATE TABLE nope (x int)")
            finally:
                await on_replica.close()
    finally:
        await drop_database(PRIMARY, primary_db)


async def test_a_paused_replicas_subscribers_get_the_primarys_events_and_a_stopped_replica_costs_no_reads(replica):
    """Live events are resolved on the primary (a replica may not have replayed them yet), a replica that
    stops sends its reads to the primary, and /readyz and the lag metric say what is degraded."""
    import httpx

    from app.ingest.load import load_file
    from tests.conftest import LiveServer
    from tests.test_live import CITATIONS, PAPER, Subscription, new_inbound_ids

    primary_db = await create_database(PRIMARY, "pith_test_repl")
    name = primary_db.split("?")[0].rsplit("/", 1)[1]
    replica_db = with_database(replica, name)
    server = None
    subscribers: list = []
    admin = await asyncpg.connect(replica)
    try:
        conn = await asyncpg.connect(primary_db)
        try:
            await load_file(conn, str(SEED))
            version = await conn.fetchval("SELECT version FROM data_version")
        finally:
            await conn.close()
        await wait_for(replica_db, "SELECT version FROM data_version", version, seconds=120)
        server = LiveServer(primary_db, env={"DATABASE_REPLICA_URLS": replica_db})
        await admin.execute("SELECT pg_wal_replay_pause()")
        subscribers = [await Subscription(server.base, CITATIONS, {"id": PAPER}).start() for _ in range(10)]
        changed = [await Subscription(server.base, "subscription($id: String!) { recordChanged(arxivId: $id) { "
                                      "cursor arxivId contextDigest } }", {"id": PAPER}).start() for _ in range(5)]
        subscribers += changed
        conn = await asyncpg.connect(primary_db)
        try:
            await load_file(conn, str(AUG9))
        finally:
            await conn.close()
        expected = len(new_inbound_ids())
        for sub in subscribers[:10]:
            await sub.wait_for(expected, timeout=60)
        for sub in changed:
            await sub.wait_for(1, timeout=60)
        got = [len(s.events) for s in subscribers]
        assert got == [expected] * 10 + [1] * 5 and not any(s.errors for s in subscribers), (got, subscribers[0].errors)
        digests = {s.events[0][1]["recordChanged"]["contextDigest"] for s in changed}
        assert len(digests) == 1, digests  # the record as the primary has it, for every subscriber
        # The replica has not replayed the load: it is behind, and says so.
        lagging = None
        for _ in range(100):
            text = httpx.get(server.base + "/metrics", timeout=10).text
            lagging = re.search(r'^pith_db_replica_lag_seconds\{replica="0"\} (\S+)$', text, re.M)
            if lagging and float(lagging.group(1)) > 0:
                break
            await asyncio.sleep(0.2)
        assert lagging and float(lagging.group(1)) > 0, lagging
        await admin.execute("SELECT pg_wal_replay_resume()")
        # Replay resumed: the replica catches up, and the subscribers, who already had the primary's
        # events, get none of them twice; every one is still subscribed and error-free.
        conn = await asyncpg.connect(primary_db)
        try:
            version = await conn.fetchval("SELECT version FROM data_version")
        finally:
            await conn.close()
        await wait_for(replica_db, "SELECT version FROM data_version", version, seconds=120)
        await asyncio.sleep(1.0)
        got = [len(s.events) for s in subscribers]
        assert got == [expected] * 10 + [1] * 5 and not any(s.errors for s in subscribers), (got, subscribers[0].errors)
        assert not any(s.closed.is_set() for s in subscribers)

        # The only replica stops: reads go to the primary, readiness names the part that is degraded.
        stopped = as_postgres(str(BIN / "pg_ctl"), "-D", str(replica_data(replica)), "-m", "fast", "-w", "stop",
                              timeout=120)
        assert stopped.returncode == 0, stopped.stderr
        statuses = []
        for _ in range(20):
            with httpx.Client(base_url=server.base, timeout=15) as client:
                statuses.append(client.get("/paper/2402.15627").status_code)
                body = client.post("/graphql", json={"query": '{ paper(arxivId: "2402.15627") { inbound { totalCount } } }'})
                statuses.append(body.status_code)
                assert body.status_code != 200 or body.json()["data"]["paper"]["inbound"]["totalCount"] == 13
        assert statuses == [200] * 40, statuses
        ready = httpx.get(server.base + "/readyz", timeout=15)
        assert ready.status_code == 200, ready.text
        assert ready.json()["status"] == "degraded" and "replica 0" in " ".join(ready.json()["degraded"])
        assert ready.json()["replicas"][0]["reachable"] is False
    finally:
        for sub in subscribers:
            await sub.close()
        if server is not None:
            server.stop()
        await admin.close() if not admin.is_closed() else None
        as_postgres(str(BIN / "pg_ctl"), "-D", str(replica_data(replica)), "-l", str(replica_data(replica).parent / "log"),
                    "-w", "start", timeout=120)
        await drop_database(PRIMARY, primary_db)
