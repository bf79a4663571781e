"""Faults injected into a running deployment, each followed by a comparison with a clean replay.

    .venv/bin/python -m bench.faults [--papers 300] [--out bench/results/faults.json]

Needs the machine's PostgreSQL (PITH_TEST_ADMIN_URL, default postgres@127.0.0.1:5432, trust) and
Debian's pgbouncer; every database is the script's own and is dropped at the end. A synthetic graph is
written as ndjson and split into two overlapping files, A and B. For each fault a fresh database is
served (a `pith-graph serve` process, through PgBouncer in transaction mode where the fault needs it,
readers looping against it); the fault is injected while imports of A and B run; whatever failed is run
again, as an operator would; then the database is compared with a reference into which A and B were
loaded one after the other, undisturbed: every fact table's sorted rows, the change log in position order
(every column but the position and the commit time), the papers' inbound totals and the data version
(tests.conftest.database_state). Loads are serialisable: where A and B run at once, the reference is the
replay in the order they committed (read from the change log's transactions), and it must be equal in
all of that, the change log's order included. A fault that must cut a load in flight waits until the
load's backend is inside its transaction and asserts that the load failed. The readers' answers are
counted by status.

The faults (the PostgreSQL server itself is shared with other work on this machine, so it is not
restarted here: its connections are terminated instead; tests/test_faults.py and
tests/test_live.py restart a PostgreSQL of their own):
  load-killed        kill -9 of `pith-graph load` mid-way, then the load again
  loads-overlapping  both loads at once
  worker-killed      kill -9 of one of two server workers under the readers, during the loads
  backends-killed    every connection to the database terminated during a load, then the load again
  pgbouncer-restart  PgBouncer stopped and started during a load through it, then the load again
  read-only          default_transaction_read_only on: reads go on, a load is refused; off: the load
  lock-held          a table the load writes locked for 5 s while it runs
  rerun              every load run a second time (adds nothing)
  dump-restore       pg_dump -Fc of the faulted database, pg_restore into a new one: the restored copy
  subscriber-restart the server restarted (SIGTERM) under a subscriber, which resumes with the
                     `after` its close named: it receives every change-log row of the loads once
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

import asyncpg
import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import (LiveServer, commit_blocks, commit_order, create_database,  # noqa: E402
                            database_state, drop_database)
from tests.test_pgbouncer import PgBouncer  # noqa: E402

ADMIN = os.environ.get("PITH_TEST_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
START_SECONDS = 180  # a server starting on a busy machine
# Faults under which A and B load at the same time: compared with the replay in their commit order.
CONCURRENT = ("loads-overlapping", "worker-killed")
PAPER_QUERY = '{ papers(first: 5) { nodes { arxivId inbound(first: 2) { totalCount } } } }'


def cli(*args: str, url: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "app.cli", *args], cwd=ROOT,
                            env={**os.environ, "DATABASE_URL": url, **env},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


async def finished(process: subprocess.Popen, timeout: float = 600) -> int:
    return await asyncio.to_thread(process.wait, timeout)


async def load(url: str, path: Path, **env: str) -> int:
    return await finished(cli("load", str(path), url=url, **env))


async def state_of(url: str) -> dict[str, str]:
    """What a clean replay must equal (tests.conftest.database_state): fact tables, the change log in
    position order, totals, the data version."""
    return await database_state(url)


async def in_flight(url: str, timeout: float = 300) -> int:
    """Wait until a `load` of the database is inside its transaction (staging or writing), and return its
    backend's pid: a fault injected then cannot miss it."""
    name = url.split("?")[0].rsplit("/", 1)[1]
    conn = await asyncpg.connect(ADMIN)
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid = await conn.fetchval("SELECT pid FROM pg_stat_activity WHERE datname = $1 AND xact_start IS NOT NULL "
                                      "AND query LIKE '%stage\\_%' ORDER BY xact_start LIMIT 1", name)
            if pid is not None:
                return pid
            await asyncio.sleep(0.05)
        raise TimeoutError("no load reached its transaction")
    finally:
        await conn.close()


class Readers:
    """Clients looping reads against a server for as long as the fault lasts, counting answers by status."""

    def __init__(self, base: str, clients: int = 4) -> None:
        self.base, self.clients = base, clients
        self.statuses: dict[str, int] = {}
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task] = []

    async def _loop(self) -> None:
        async with httpx.AsyncClient(base_url=self.base, timeout=30) as http:
            while not self._stop.is_set():
                try:
                    response = await http.post("/graphql", json={"query": PAPER_QUERY})
                    key = str(response.status_code)
                except httpx.HTTPError as exc:
                    key = type(exc).__name__
                    await asyncio.sleep(0.2)
                self.statuses[key] = self.statuses.get(key, 0) + 1

    def __enter__(self) -> "Readers":
        self._tasks = [asyncio.ensure_future(self._loop()) for _ in range(self.clients)]
        return self

    async def stop(self) -> dict[str, int]:
        self._stop.set()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        return dict(sorted(self.statuses.items()))

    def __exit__(self, *_: Any) -> None:
        self._stop.set()


async def terminate_backends(url: str) -> int:
    name = url.split("?")[0].rsplit("/", 1)[1]
    conn = await asyncpg.connect(ADMIN)
    try:
        return len(await conn.fetch("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 "
                                    "AND pid <> pg_backend_pid()", name))
    finally:
        await conn.close()


async def set_read_only(url: str, on: bool) -> None:
    name = url.split("?")[0].rsplit("/", 1)[1]
    conn = await asyncpg.connect(ADMIN)
    try:
        await conn.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = {"on" if on else "off"}')
    finally:
        await conn.close()
    await terminate_backends(url)  # sessions take a database setting when they start


async def killed_midway(url: str, path: Path, after: float = 0.5, **env: str) -> int:
    process = cli("load", str(path), url=url, **env)
    await in_flight(url)
    await asyncio.sleep(after)
    assert process.poll() is None, "the load finished before it could be killed"
    process.kill()
    return await finished(process)


Fault = Callable[[str, Path, Path, dict[str, Any]], Awaitable[None]]


async def load_killed(url: str, a: Path, b: Path, notes: dict[str, Any]) -> None:
    notes["killed_exit"] = await killed_midway(url, a)
    notes["rerun_exit"] = [await load(url, a), await load(url, b)]


async def loads_overlapping(url: str, a: Path, b: Path, notes: dict[str, Any]) -> None:
    notes["exits"] = list(await asyncio.gather(load(url, a), load(url, b)))
    failed = [p for p, code in zip((a, b), notes["exits"]) if code != 0]
    notes["rerun_exit"] = [await load(url, p) for p in failed]


async def worker_killed(url: str, a: Path, b: Path, notes: dict[str, Any], server: LiveServer) -> None:
    import psutil

    workers = psutil.Process(server.process.pid).children()
    running = asyncio.gather(load(url, a), load(url, b))
    await in_flight(url)
    if workers:
        os.kill(workers[0].pid, signal.SIGKILL)
    notes["workers_before"] = len(workers)
    notes["exits"] = list(await running)
    await asyncio.sleep(3.0)  # the supervisor replaces it
    notes["workers_after"] = len(psutil.Process(server.process.pid).children())


async def backends_killed(url: str, a: Path, b: Path, notes: dict[str, Any]) -> None:
    process = cli("load", str(a), url=url)
    load_pid = await in_flight(url)
    notes["terminated"] = await terminate_backends(url)
    notes["killed_exit"] = await finished(process)
    # It bit: the load was inside its transaction when its backend went, and failed (nothing written).
    assert notes["killed_exit"] != 0, f"the load (backend {load_pid}) finished before its backend was terminated"
    notes["rerun_exit"] = [await load(url, a), await load(url, b)]


async def pgbouncer_restart(url: str, a: Path, b: Path, notes: dict[str, Any], bouncer: PgBouncer) -> None:
    env = {"PITH_DB_PREPARED_STATEMENTS": "0"}
    process = cli("load", str(a), url=bouncer.url, **env)
    await in_flight(url)  # its server connection, through PgBouncer, is in the load's transaction
    bouncer.restart()
    notes["interrupted_exit"] = await finished(process)
    assert notes["interrupted_exit"] != 0, "the load finished before PgBouncer stopped"
    notes["rerun_exit"] = [await load(bouncer.url, a, **env), await load(bouncer.url, b, **env)]


async def read_only(url: str, a: Path, b: Path, notes: dict[str, Any]) -> None:
    await set_read_only(url, True)
    try:
        notes["refused_exit"] = await load(url, a)
        await asyncio.sleep(3.0)  # the readers read meanwhile
    finally:
        await set_read_only(url, False)
    notes["rerun_exit"] = [await load(url, a), await load(url, b)]


async def lock_held(url: str, a: Path, b: Path, notes: dict[str, Any]) -> None:
    locker = await asyncpg.connect(url)
    try:
        async with locker.transaction():
            await locker.execute("LOCK TABLE citation_observations IN EXCLUSIVE MODE")
            process = cli("load", str(a), url=url)
            await asyncio.sleep(5.0)
        notes["exit"] = await finished(process)
    finally:
        await locker.close()
    notes["rerun_exit"] = [await load(url, a)] if notes["exit"] else []
    notes["b_exit"] = await load(url, b)


async def rerun(url: str, a: Path, b: Path, notes: dict[str, Any]) -> None:
    notes["exits"] = [await load(url, a), await load(url, b)]
    before = await state_of(url)
    notes["again_exits"] = [await load(url, a), await load(url, b)]
    notes["second_run_changed"] = sorted(k for k, v in (await state_of(url)).items()
                                         if v != before[k] and k != "data_version")


async def dump_restore(url: str, a: Path, b: Path, notes: dict[str, Any]) -> str:
    notes["exits"] = [await load(url, a), await load(url, b)]
    dump = Path(tempfile.mkstemp(suffix=".dump")[1])
    try:
        done = await asyncio.to_thread(subprocess.run, ["pg_dump", "-Fc", "-f", str(dump), url.split("?")[0]],
                                       capture_output=True, timeout=600)
        notes["dump_exit"] = done.returncode
        name = f"pith_fault_restored_{os.getpid()}"
        conn = await asyncpg.connect(ADMIN)
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()
        restored = url.split("?")[0].rsplit("/", 1)[0] + "/" + name
        done = await asyncio.to_thread(subprocess.run, ["pg_restore", "-d", restored, str(dump)],
                                       capture_output=True, timeout=600)
        notes["restore_exit"] = done.returncode
        return restored
    finally:
        dump.unlink(missing_ok=True)


async def subscriber_restart(url: str, a: Path, b: Path, notes: dict[str, Any], server: LiveServer) -> None:
    """A citationAdded subscriber of the most-cited paper of the files, from the change log's position
    before the loads; SIGTERM mid-load; it resubscribes to a new server with the `after` it was told and
    must have received each of the paper's citation_added rows once."""
    import websockets

    conn = await asyncpg.connect(url)
    try:
        start = await conn.fetchval("SELECT coalesce(max(position), 0) FROM change_log")
    finally:
        await conn.close()
    documents = [json.loads(line) for line in (a.read_text() + b.read_text()).splitlines() if line.strip()]
    paper = max(documents, key=lambda d: len(d["inbound"]))["paper"]["arxiv_id"]
    query = ("subscription($id: String!, $after: String) { citationAdded(arxivId: $id, after: $after) "
             "{ cursor observation { observationId } } }")
    received: list[str] = []
    closes: list[Any] = []

    async def subscribe(base: str, after: str | None, until: asyncio.Event) -> str | None:
        resume = None
        async with websockets.connect(base.replace("http://", "ws://") + "/graphql",
                                      subprotocols=["graphql-transport-ws"]) as ws:
            await ws.send(json.dumps({"type": "connection_init"}))
            await ws.recv()
            await ws.send(json.dumps({"id": "1", "type": "subscribe",
                                      "payload": {"query": query, "variables": {"id": paper, "after": after}}}))
            try:
                while not until.is_set():
                    try:
                        message = json.loads(await asyncio.wait_for(ws.recv(), 1.0))
                    except TimeoutError:
                        continue
                    if message["type"] == "next":
                        payload = message["payload"]
                        if payload.get("data"):
                            received.append(payload["data"]["citationAdded"]["observation"]["observationId"])
                        for error in payload.get("errors") or []:
                            resume = error.get("extensions", {}).get("after", resume)
                    elif message["type"] == "error":
                        for error in message["payload"]:
                            resume = error.get("extensions", {}).get("after", resume)
            except websockets.ConnectionClosed as exc:
                closes.append([exc.rcvd.code, exc.rcvd.reason] if exc.rcvd else None)
                told = re.search(r"after: (\S+)", exc.rcvd.reason) if exc.rcvd else None
                resume = told.group(1) if told else resume  # a 1012's reason names the cursor
        return resume

    from app.live import encode_cursor

    never = asyncio.Event()
    first = asyncio.ensure_future(subscribe(server.base, encode_cursor(start), never))
    await asyncio.sleep(1.0)
    loading = asyncio.ensure_future(load(url, a))
    await asyncio.sleep(2.0)
    server.process.send_signal(signal.SIGTERM)
    resume = await asyncio.wait_for(first, 30)
    await asyncio.to_thread(server.process.wait, 30)
    notes["close"] = closes[:1]
    notes["resume_after"] = resume
    notes["a_exit"] = await loading
    notes["b_exit"] = await load(url, b)
    again = LiveServer(url, start_seconds=START_SECONDS)
    try:
        done = asyncio.Event()
        second = asyncio.ensure_future(subscribe(again.base, resume or encode_cursor(start), done))
        conn = await asyncpg.connect(url)
        try:
            expected = await conn.fetchval("SELECT count(*) FROM change_log WHERE kind = 'citation_added' AND "
                                           "arxiv_id = $1 AND position > $2", paper, start)
        finally:
            await conn.close()
        deadline = time.monotonic() + 600  # each event is resolved on its own: a replay of 1,000 takes minutes here
        while len(received) < expected and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        await asyncio.sleep(1.0)
        done.set()
        await second
    finally:
        again.stop()
    notes["events_expected"] = expected
    notes["events_received"] = len(received)
    notes["events_distinct"] = len(set(received))


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--papers", type=int, default=300)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "faults.json")
    parser.add_argument("--merge", action="store_true", help="keep the other faults' results of --out")
    parser.add_argument("--only", nargs="*", help="run only these faults")
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="pith-faults-"))
    scratch = await create_database(ADMIN, "pith_fault_synth")
    try:
        done = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "app.cli", "synth", "--papers",
                                                        str(args.papers), "--seed", "11", "--ndjson",
                                                        str(folder / "all.ndjson")], cwd=ROOT,
                                       env={**os.environ, "DATABASE_URL": scratch}, capture_output=True, timeout=900)
        assert done.returncode == 0, done.stderr.decode()[-2000:]
    finally:
        await drop_database(ADMIN, scratch)
    lines = (folder / "all.ndjson").read_text().splitlines()
    a, b = folder / "a.ndjson", folder / "b.ndjson"
    a.write_text("\n".join(lines[: len(lines) * 2 // 3]) + "\n")
    b.write_text("\n".join(lines[len(lines) // 3:]) + "\n")

    # The clean replays: A then B, and B then A (two loads at once must equal the one of their commit order).
    replays: dict[str, dict[str, str]] = {}
    for order in ("AB", "BA"):
        reference = await create_database(ADMIN, "pith_fault_ref")
        for path in (a, b) if order == "AB" else (b, a):
            assert await load(reference, path) == 0
        replays[order] = await state_of(reference)
        await drop_database(ADMIN, reference)
    clean = replays["AB"]

    plain: dict[str, Fault] = {"load-killed": load_killed, "loads-overlapping": loads_overlapping,
                               "backends-killed": backends_killed, "read-only": read_only, "lock-held": lock_held,
                               "rerun": rerun}
    names = ["load-killed", "loads-overlapping", "worker-killed", "backends-killed", "pgbouncer-restart",
             "read-only", "lock-held", "rerun", "dump-restore", "subscriber-restart"]
    results = []
    for name in names:
        if args.only and name not in args.only:
            continue
        url = await create_database(ADMIN, "pith_fault")
        notes: dict[str, Any] = {}
        server = bouncer = None
        compared = url
        started = time.monotonic()
        try:
            if name == "pgbouncer-restart":
                bouncer = PgBouncer(url)
                server = LiveServer(bouncer.url, env={"PITH_DB_PREPARED_STATEMENTS": "0",
                                                      "PITH_LISTEN_DATABASE_URL": url}, expect_5xx=True,
                                    start_seconds=START_SECONDS)
            else:
                server = LiveServer(url, env={"PITH_WORKERS": "2"} if name == "worker-killed" else None,
                                    expect_5xx=True, start_seconds=START_SECONDS)
            with Readers(server.base) as readers:
                if name in plain:
                    await plain[name](url, a, b, notes)
                elif name == "worker-killed":
                    await worker_killed(url, a, b, notes, server)
                elif name == "pgbouncer-restart":
                    await pgbouncer_restart(url, a, b, notes, bouncer)  # type: ignore[arg-type]
                elif name == "dump-restore":
                    compared = await dump_restore(url, a, b, notes)
                elif name == "subscriber-restart":
                    await subscriber_restart(url, a, b, notes, server)
                notes["reads"] = await readers.stop()
            order = "AB"
            if name in CONCURRENT:  # the order in which the two loads committed, from the change log
                order = "".join(commit_order(await commit_blocks(compared), {"A": a, "B": b}))
                notes["commit_order"] = order
            reference = replays.get(order, {})
            got = await state_of(compared)
            differs = sorted(k for k in clean if got.get(k) != reference.get(k))
            results.append({"fault": name, "equal_to_clean_replay": not differs, "differs": differs,
                            "seconds": round(time.monotonic() - started, 1), **notes})
        except Exception as exc:  # noqa: BLE001 - a fault the script could not run is a result too
            results.append({"fault": name, "error": f"{type(exc).__name__}: {exc}"[:500], **notes})
        finally:
            if server is not None:
                server.stop()
            if bouncer is not None:
                bouncer.stop()
            await drop_database(ADMIN, url)
            if compared != url:
                await drop_database(ADMIN, compared)
        print(json.dumps(results[-1]), flush=True)
    import shutil

    shutil.rmtree(folder, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if args.merge and args.out.exists():
        ran = {r["fault"] for r in results}
        kept = [r for r in json.loads(args.out.read_text())["faults"] if r["fault"] not in ran]
        results = sorted(kept + results, key=lambda r: names.index(r["fault"]))
    args.out.write_text(json.dumps({"papers": args.papers, "lines": len(lines), "load_average": os.getloadavg(),
                                    "clean": replays,
                                    "faults": results}, indent=2) + "\n")
    return 0 if all(r.get("equal_to_clean_replay") for r in results) else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
