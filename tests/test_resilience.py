"""Timeouts, cancellation, load, concurrent and killed imports, least privilege, injection, secrets."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from urllib.parse import quote

import asyncpg
import httpx
import psutil
import pytest
import pytest_asyncio

from app.settings import Settings
from tests.conftest import FACT_TABLES as TABLES, AUG9, ROOT, SEED, LiveServer, StatementLog, commit_blocks, commit_order, create_database, database_state, drop_database, serve

pytestmark = pytest.mark.asyncio(loop_scope="session")

LOAD_SECONDS = float(os.environ.get("PITH_LOAD_SECONDS", "5"))
LOAD_CLIENTS = int(os.environ.get("PITH_LOAD_CLIENTS", "64"))
ARTIFACTS = ROOT / "tests" / "artifacts"


def cli(*args: str, url: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "app.cli", *args], env={**os.environ, "DATABASE_URL": url},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)


async def fingerprint(url: str) -> dict[str, str]:
    """A digest of every fact table's sorted contents."""
    conn = await asyncpg.connect(url)
    try:
        out = {}
        for t in TABLES:
            rows = await conn.fetch(f"SELECT * FROM {t} ORDER BY 1, 2, 3")
            out[t] = f"{len(rows)}:" + hashlib.sha256(repr([tuple(r) for r in rows]).encode()).hexdigest()
        return out
    finally:
        await conn.close()


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def synthetic_ndjson(admin_url, tmp_path_factory):
    """A few thousand records of a synthetic graph, as ndjson, split into two overlapping files."""
    url = await create_database(admin_url, "pith_test_syn")
    folder = tmp_path_factory.mktemp("ndjson")
    try:
        done = subprocess.run([sys.executable, "-m", "app.cli", "synth", "--papers", "300", "--seed", "7", "--ndjson",
                               str(folder / "all.ndjson")], env={**os.environ, "DATABASE_URL": url},
                              capture_output=True, timeout=300)
        assert done.returncode == 0, done.stderr.decode()[-2000:]
    finally:
        await drop_database(admin_url, url)
    lines = (folder / "all.ndjson").read_text().splitlines()
    first, second = folder / "a.ndjson", folder / "b.ndjson"
    first.write_text("\n".join(lines[: len(lines) * 2 // 3]) + "\n")
    second.write_text("\n".join(lines[len(lines) // 3:]) + "\n")
    return folder / "all.ndjson", first, second


async def test_statement_timeout_bounds_every_query(database_url):
    settings = Settings(database_url=database_url, statement_timeout_ms=200)
    blocker = await asyncpg.connect(database_url)
    try:
        async for s in serve(database_url, StatementLog(), settings, expect_5xx=True):  # timeouts answer 503
            await blocker.execute("BEGIN; LOCK TABLE citation_observations IN ACCESS EXCLUSIVE MODE")
            started = time.monotonic()
            response = await s.client.get("/paper/2402.15627/citation-record.json")
            body = (await s.client.post("/graphql", json={"query": '{ paper(arxivId: "2402.15627") { inbound '
                                                                    '{ totalCount } } }'})).json()
            await blocker.execute("ROLLBACK")
            assert time.monotonic() - started < 5
            assert response.status_code == 503 and response.headers["retry-after"]
            assert "statement timeout" in body["errors"][0]["message"]
            assert (await s.client.get("/paper/2402.15627/citation-record.json")).status_code == 200
    finally:
        await blocker.close()


async def test_a_client_that_goes_away_cancels_its_query(database_url):
    server = LiveServer(database_url)
    blocker = await asyncpg.connect(database_url)
    try:
        await blocker.execute("BEGIN; LOCK TABLE citation_observations IN ACCESS EXCLUSIVE MODE")
        waiting = ("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pith-graph' AND wait_event_type = 'Lock' "
                   "AND datname = current_database()")
        async with httpx.AsyncClient(timeout=1.0) as client:
            with pytest.raises(httpx.TimeoutException):
                await client.get(server.base + "/paper/2402.15627/citation-record.json")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and await blocker.fetchval(waiting):
            await asyncio.sleep(0.1)
        assert await blocker.fetchval(waiting) == 0, "the abandoned request's query is still waiting"
        await blocker.execute("ROLLBACK")
        assert httpx.get(server.base + "/paper/2402.15627/citation-record.json", timeout=10).status_code == 200
    finally:
        await blocker.close()
        server.stop()


async def test_load_mixed_requests_without_errors_and_flat_memory(database_url):
    """Short in CI; PITH_LOAD_SECONDS=60 runs the long version (see RELIABILITY.md)."""
    server = LiveServer(database_url)
    process = psutil.Process(server.process.pid)
    requests = [
        ("GET", "/paper/2402.15627/citation-record.json", None),
        ("GET", "/paper/2402.15627/citation-record?as_of=2026-08-09T12:00:00Z", None),
        ("POST", "/graphql", {"query": '{ paper(arxivId: "2402.15627") { inbound(first: 20) { totalCount edges { node {'
                                       ' citingPaper { title } resolution { status } standingNotice { state } } } } } }'}),
        ("POST", "/graphql", {"query": '{ searchPapers(query: "scaling training", first: 5) { nodes { arxivId } } }'}),
        ("POST", "/graphql", {"query": '{ neighbourhood(arxivId: "2402.15627", depth: 2, perPaper: 5) { truncated } }'}),
    ]
    latencies: list[float] = []
    errors: list[str] = []
    memory: list[tuple[float, int]] = []
    started = time.monotonic()
    deadline = started + LOAD_SECONDS
    try:
        async with httpx.AsyncClient(base_url=server.base, timeout=120,
                                     limits=httpx.Limits(max_connections=LOAD_CLIENTS)) as client:
            async def one_client(i: int) -> None:
                n = i
                while time.monotonic() < deadline:
                    method, path, body = requests[n % len(requests)]
                    n += 1
                    t0 = time.perf_counter()
                    response = await client.request(method, path, json=body)
                    latencies.append(time.perf_counter() - t0)
                    if response.status_code != 200 or (body and "errors" in response.json()):
                        errors.append(f"{response.status_code} {path} {response.text[:200]}")

            async def sample_memory() -> None:
                while time.monotonic() < deadline:
                    memory.append((time.monotonic() - started, process.memory_info().rss))
                    await asyncio.sleep(0.25)

            await asyncio.gather(sample_memory(), *(one_client(i) for i in range(LOAD_CLIENTS)))
    finally:
        server.stop()
    assert errors == []
    window = max(1.0, LOAD_SECONDS / 6)
    first = [rss for t, rss in memory if t <= window]
    last = [rss for t, rss in memory if t >= LOAD_SECONDS - window]
    growth = max(last) / max(first)
    ordered = sorted(latencies)
    figures = {"seconds": LOAD_SECONDS, "clients": LOAD_CLIENTS, "requests": len(latencies),
               "requests_per_s": len(latencies) / LOAD_SECONDS, "errors": len(errors),
               "p50_ms": ordered[len(ordered) // 2] * 1000, "p99_ms": ordered[int(len(ordered) * 0.99)] * 1000,
               "rss_first_mb": max(first) / 2**20, "rss_last_mb": max(last) / 2**20, "rss_growth": growth}
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "load.json").write_text(json.dumps(figures, indent=2))
    print(json.dumps(figures))
    assert growth < 1.25, figures


async def test_two_loads_at_once_equal_the_same_loads_one_after_another(admin_url, synthetic_ndjson):
    """Both loads held at their first insert until both are in flight, then let go together: the database
    (facts, the change log in order, totals, data version) is that of the two loads run one after another
    in the order they committed."""
    _, first, second = synthetic_ndjson
    together = await create_database(admin_url, "pith_test_two")
    serial = await create_database(admin_url, "pith_test_one")
    try:
        holder, watcher = await asyncpg.connect(together), await asyncpg.connect(together)
        try:
            hold = holder.transaction()
            await hold.start()
            await holder.execute("LOCK TABLE paper_snapshots IN SHARE MODE")  # inserts wait, reads do not
            loads = [cli("load", str(f), url=together) for f in (first, second)]
            deadline = time.monotonic() + 120
            # (not read in the holding transaction: pg_stat_activity is read once per transaction)
            while await watcher.fetchval("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                        "AND application_name = 'pith-graph load' AND wait_event_type = 'Lock'") < 2:
                assert time.monotonic() < deadline and all(p.poll() is None for p in loads), "the loads never met"
                await asyncio.sleep(0.05)
            await hold.rollback()
        finally:
            await holder.close()
            await watcher.close()
        for p in loads:
            _, err = p.communicate(timeout=300)
            assert p.returncode == 0, err.decode()[-2000:]
        order = commit_order(await commit_blocks(together), {"first": first, "second": second})
        assert sorted(order) == ["first", "second"], order
        for name in order:
            done = cli("load", str(first if name == "first" else second), url=serial)
            _, err = done.communicate(timeout=300)
            assert done.returncode == 0, err.decode()[-2000:]
        assert await database_state(together) == await database_state(serial)
    finally:
        await drop_database(admin_url, together)
        await drop_database(admin_url, serial)


async def test_sigkill_in_the_middle_of_a_load_leaves_the_database_as_before(admin_url, synthetic_ndjson):
    whole, _, _ = synthetic_ndjson
    url = await create_database(admin_url, "pith_test_kill")
    try:
        seeded = cli("load", str(SEED), url=url)
        seeded.communicate(timeout=120)
        before = await fingerprint(url)
        victim = cli("load", str(whole), url=url)
        # Wait until the load has written into its transaction, then kill it outright.
        conn = await asyncpg.connect(url)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                busy = await conn.fetchval("SELECT count(*) FROM pg_stat_activity WHERE application_name = "
                                           "'pith-graph load' AND state <> 'idle' AND datname = current_database()")
                if busy and time.monotonic() > deadline - 59.5:
                    break
                await asyncio.sleep(0.05)
            victim.send_signal(signal.SIGKILL)
            victim.communicate(timeout=30)
            assert victim.returncode == -signal.SIGKILL
            for _ in range(100):  # the server notices the dead client and rolls back
                if not await conn.fetchval("SELECT count(*) FROM pg_stat_activity WHERE application_name = "
                                           "'pith-graph load' AND datname = current_database()"):
                    break
                await asyncio.sleep(0.1)
        finally:
            await conn.close()
        assert await fingerprint(url) == before
    finally:
        await drop_database(admin_url, url)


async def test_records_read_during_a_load_are_internally_consistent(admin_url, synthetic_ndjson, statements):
    whole, _, _ = synthetic_ndjson
    url = await create_database(admin_url, "pith_test_read")
    try:
        ids = [json.loads(line)["paper"]["arxiv_id"] for line in whole.read_text().splitlines()[:40]]
        loader = cli("load", str(whole), url=url)
        checked = 0
        async for s in serve(url, statements):
            while loader.poll() is None or checked < 20:
                for arxiv_id in ids[:10]:
                    response = await s.client.get(f"/paper/{arxiv_id}/citation-record.json")
                    if response.status_code != 200:
                        continue
                    doc = response.json()
                    lanes = {lane["lane"]: lane for lane in doc["coverage"]}
                    inbound, outbound = lanes["inbound_itemization"], lanes["reference_resolution"]
                    assert inbound["records_observed"] == len(doc["inbound"])
                    assert len(doc["inbound"]) == min(inbound["denominator"], doc["caps"]["inbound"])
                    assert len(doc["outbound"]) == min(outbound["denominator"], doc["caps"]["outbound"])
                    assert doc["reference_resolution"]["total_outbound_references"] == outbound["denominator"]
                    checked += 1
                if loader.poll() is not None and checked >= 20:
                    break
        _, err = loader.communicate(timeout=300)
        assert loader.returncode == 0, err.decode()[-2000:]
        assert checked >= 20
    finally:
        await drop_database(admin_url, url)


async def test_server_runs_as_a_read_only_role(admin_url, database_url):
    role = f"pith_test_reader_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(database_url)
    try:
        await admin.execute(f'CREATE ROLE "{role}" LOGIN IN ROLE pith_reader')
        base, _, query = database_url.partition("?")
        scheme, rest = base.split("://", 1)
        reader_url = f"{scheme}://{role}@{rest.split('@', 1)[1]}" + ("?" + query if query else "")
        async for s in serve(reader_url, StatementLog(), Settings(database_url=reader_url)):
            response = await s.client.get("/paper/2402.15627/citation-record.json?as_of=2026-08-05T04:52:00Z")
            assert response.status_code == 200
            assert (await s.client.get("/readyz")).status_code == 200
            body = await s.graphql('{ searchPapers(query: "megascale") { nodes { arxivId } } }')
            assert body["data"]["searchPapers"]["nodes"]
        denied = cli("load", str(AUG9), url=reader_url)
        _, err = denied.communicate(timeout=120)
        assert denied.returncode == 1 and b"owner role" in err, err
    finally:
        await admin.execute(f'DROP OWNED BY "{role}"; DROP ROLE IF EXISTS "{role}"')
        await admin.close()


INJECTIONS = ["'; DROP TABLE paper_snapshots; --", "2402.15627' OR '1'='1", "\\x00", "$1", "%s",
              "2402.15627); DELETE FROM resolutions; --", "' UNION SELECT * FROM pg_user --",
              # what PostgreSQL cannot store or parse: a NUL (as it is, and percent-encoded in a DOI), a lone
              # surrogate, and more negations than websearch_to_tsquery can stack
              "\u0000", "10.1234/a%00b", "10.1234/\ud800", "- " * 40 + "cat", "-!" * 40 + "cat"]


@pytest.mark.parametrize("payload", INJECTIONS)
async def test_injection_strings_through_every_argument(served, payload):
    before = await fingerprint_count(served)
    quoted = json.dumps(payload)
    queries = [
        ("query($v: String!) { paper(arxivId: $v) { title } }", {"v": payload}),
        ("query($v: [String!]!) { papers(arxivIds: $v) { title } }", {"v": [payload]}),
        ("query($v: String!) { citationRecord(arxivId: $v) { thesis } }", {"v": payload}),
        ("query($v: String!) { searchPapers(query: $v) { nodes { arxivId } } }", {"v": payload}),
        ("query($v: String!) { work(doi: $v) { title } }", {"v": payload}),
        ("query($v: ID!) { observation(id: $v) { id } }", {"v": payload}),
        ("query($v: DateTime) { paper(arxivId: \"2402.15627\", asOf: $v) { title } }", {"v": payload}),
        ("query($v: String) { paper(arxivId: \"2402.15627\") { inbound(after: $v) { totalCount } } }", {"v": payload}),
        ("query($v: String!) { neighbourhood(arxivId: $v) { truncated } }", {"v": payload}),
        (f"{{ paper(arxivId: {quoted}) {{ title }} }}", None),
    ]
    for query, variables in queries:
        response = await served.client.post("/graphql", content=json.dumps({"query": query, "variables": variables}),
                                            headers={"content-type": "application/json"})  # (\ud800 escaped)
        assert response.status_code in (200, 400), response.text
        for error in response.json().get("errors") or []:
            assert error["extensions"]["code"] in ("BAD_USER_INPUT", "GRAPHQL_VALIDATION_FAILED",
                                                   "GRAPHQL_PARSE_FAILED"), error  # (a lone surrogate literal)
    escaped = quote(payload.encode("utf-8", "surrogatepass"))
    for path in (f"/paper/{escaped}/citation-record.json", f"/paper/{escaped}",
                 f"/paper/2402.15627/citation-record.json?as_of={escaped}", f"/?q={escaped}"):
        response = await served.client.get(path)
        assert response.status_code in (200, 400, 404), (path, response.status_code)
    assert await fingerprint_count(served) == before


async def fingerprint_count(served) -> list[int]:
    body = await served.graphql('{ paper(arxivId: "2402.15627", asOf: "2026-08-09T12:00:00Z") { title '
                                'inbound { totalCount } } }')
    return [body["data"]["paper"]["inbound"]["totalCount"]]


async def test_unexpected_errors_are_masked_for_clients(served):
    from graphql import GraphQLError

    state = served.app.state.pith
    masked = state.format_error(GraphQLError("boom", original_error=RuntimeError("secret internals at /srv/x")))
    assert masked["extensions"]["code"] == "INTERNAL_SERVER_ERROR"
    assert "secret" not in masked["message"] and "request id" in masked["message"]
    user = state.format_error(GraphQLError("first: 0 is out of range", extensions={"code": "BAD_USER_INPUT"}))
    assert user["message"] == "first: 0 is out of range"
