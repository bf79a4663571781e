"""Benchmark harness: set up data, measure R1-R7 against floors measured in the same run, record results.

    python bench/run.py --scales 10000 100000          # writes bench/results/<date>-<scale>.json
    python bench/run.py --scales 1000000 --requests 200
    python bench/run.py --report                       # rebuilds BENCHMARKS.md from bench/results/

Every figure is a ratio to a floor measured in the same run on the same machine. Not part of the test
suite; CI runs `--scales 10000 --quick` as a smoke step so the harness cannot rot.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import asyncpg
import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.db.migrate import migrate  # noqa: E402
from app.ingest.bulk import write_synthetic  # noqa: E402
from app.ingest.store import TABLES  # noqa: E402
from app.ingest.synth import arxiv_ids  # noqa: E402

RESULTS = ROOT / "bench" / "results"
HUB = "2699.00001"
AS_OF = "2026-08-01T00:00:00Z"
TARGETS = {"R1": ("<=", 1.5), "R2": (">=", 0.8), "R3": ("<=", 1.3), "R8": (">=", 0.7), "R8-p50": ("<=", 1.5), "R5": ("<=", 1.25), "R7": (">=", 0.5),
           "P1": (">=", 1.0), "P-hot": (">=", 0.8), "P99": ("<=", 1.5),
           # Against PostGraphile 5: Q2 1.3x, Q1 and the most-cited paper 1.5x, p99 no worse; of the true ceiling.
           "V5-Q2": (">=", 1.3), "V5-Q1": (">=", 1.5), "V5-P99": ("<=", 1.0), "CEIL": (">=", 0.7)}

TRAVERSAL = """query($id: String!, $at: DateTime) { paper(arxivId: $id, asOf: $at) { inbound(first: 100) {
  totalCount edges { cursor node { id digest referenceIndex source sourceObservedAt
    citingPaper { arxivId title latestVersion primaryCategory submittedAt lastUpdated snapshotObservedAt }
    citedPaper { arxivId title }
    citedWork { workId linked arxivId doi metadataSource pithArxivId title venue year snapshotObservedAt }
    resolution { status resolverSource observedAt }
    standingNotice { state reason observation events { eventType source observedAt reportedAt noticeDoi }
                     sourceReceipts { source observedAt live } } } }
  pageInfo { hasNextPage endCursor } } } }"""


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))]


def summary(values: list[float]) -> dict[str, float]:
    return {"p50_ms": percentile(values, 50) * 1000, "p99_ms": percentile(values, 99) * 1000,
            "mean_ms": statistics.fmean(values) * 1000, "n": len(values)}


def bench_database(scale: int) -> str:
    """The benchmark database of a scale: pith_bench_<scale>, or <PITH_BENCH_DATABASE>_<scale> (runs
    side by side on one server each keep their own)."""
    return f"{os.environ.get('PITH_BENCH_DATABASE', 'pith_bench')}_{scale}"


def with_database(url: str, name: str) -> str:
    base, _, query = url.partition("?")
    return base.rsplit("/", 1)[0] + "/" + name + ("?" + query if query else "")


# --- data ----------------------------------------------------------------------------------------


async def drop_bench_database(admin: str, scale: int) -> None:
    """What a run creates, it drops (unless asked to keep it): a 10k graph is about 200 MB."""
    conn = await asyncpg.connect(admin)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{bench_database(scale)}" WITH (FORCE)')
    finally:
        await conn.close()
    log(f"dropped database {bench_database(scale)} (--keep keeps it)")


async def setup(admin: str, scale: int, seed: int, reuse: bool) -> tuple[str, dict[str, Any]]:
    name = bench_database(scale)
    url = with_database(admin, name)
    conn = await asyncpg.connect(admin)
    try:
        exists = await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name)
        if exists and reuse:
            log(f"reusing database {name}")
            return url, {"reused": True}
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    conn = await asyncpg.connect(url, server_settings={"temp_buffers": "512MB"})
    try:
        await migrate(conn)
        log(f"synth --papers {scale} --seed {seed}")
        result = await write_synthetic(conn, scale, seed, progress=sys.stderr)
        await add_hub(conn, scale, seed)
        # As autovacuum would soon: statistics, and the visibility map that index-only scans use.
        await conn.execute("VACUUM ANALYZE")
    finally:
        await conn.close()
    return url, {"bulk": asdict(result)}


async def add_hub(conn: asyncpg.Connection, scale: int, seed: int) -> None:
    """A paper with exactly 100 inbound and 100 outbound observations, linked works and receipts."""
    import random

    rng = random.Random(f"bench-hub:{seed}")  # neither the synth's stream nor its hub's (--hub-citations): ids would repeat
    ids = arxiv_ids(scale)
    at = datetime(2026, 7, 1, tzinfo=timezone.utc)
    work = uuid.uuid5(uuid.NAMESPACE_URL, f"pith-work:{HUB}")
    await conn.execute("INSERT INTO paper_snapshots VALUES ($1, $2, $3, 1, 'cs.DC', $2, $2)", HUB, at,
                       "A hub paper for benchmarks")
    await conn.execute("INSERT INTO work_snapshots VALUES ($1, $2, $3, NULL, 'arxiv_reference', $3, $4, 'arXiv', 2026)",
                       work, at, HUB, "A hub paper for benchmarks")
    await conn.execute("INSERT INTO standing_receipts VALUES ($1, 'crossref', $2), ($1, 'retraction_watch', $2)",
                       work, at)
    await conn.execute("INSERT INTO external_measurements VALUES ($1, 'arxiv_reference', $2, 100), "
                       "($1, 'openalex', $2, 120)", HUB, at)
    citing = rng.sample(ids, min(100, len(ids)))
    cited = rng.sample(ids, min(100, len(ids)))
    rows, resolutions = [], []
    for i, a in enumerate(citing):
        oid = uuid.UUID(int=rng.getrandbits(128))
        rows.append((oid, a, 900 + i, "pdf_text", at, HUB, work, None, None))
        resolutions.append((oid, at, "verified_exact", "arxiv_id"))
    for i, a in enumerate(cited):
        oid = uuid.UUID(int=rng.getrandbits(128))
        target_work = uuid.uuid5(uuid.NAMESPACE_URL, f"pith-work:{a}")
        rows.append((oid, HUB, i + 1, "pdf_text", at, a, target_work, None, None))
        resolutions.append((oid, at, "verified_exact", "arxiv_id"))
    await conn.copy_records_to_table("citation_observations", records=rows, columns=[
        "observation_id", "citing_arxiv_id", "reference_index", "source", "source_observed_at", "cited_arxiv_id",
        "work_id", "printed_title", "printed_year"])
    await conn.copy_records_to_table("resolutions", records=resolutions,
                                     columns=["observation_id", "observed_at", "status", "resolver_source"])


async def r7_floor(url: str, workdir: Path) -> dict[str, Any]:
    """Raw COPY of the same rows from files through psql into same-shaped tables with the same indexes."""
    conn = await asyncpg.connect(url)
    total_rows = 0
    files = []
    try:
        for t in TABLES:
            path = workdir / f"{t.name}.csv"
            await conn.copy_from_query(f"SELECT * FROM {t.name}", output=str(path), format="csv")
            await conn.execute(f"DROP TABLE IF EXISTS floor_{t.name}; "
                               f"CREATE TABLE floor_{t.name} (LIKE {t.name} INCLUDING ALL)")
            total_rows += await conn.fetchval(f"SELECT count(*) FROM {t.name}")
            files.append((t.name, path))
        observations = await conn.fetchval("SELECT count(*) FROM citation_observations")
    finally:
        await conn.close()
    script = "".join(f"\\copy floor_{name} FROM '{path}' CSV\n" for name, path in files)
    started = time.monotonic()
    subprocess.run(["psql", "-q", "-v", "ON_ERROR_STOP=1", "-c", "SET synchronous_commit = off", "-f", "-", url],
                   input=script.encode(), check=True)
    seconds = time.monotonic() - started
    conn = await asyncpg.connect(url)
    try:
        for name, path in files:
            await conn.execute(f"DROP TABLE floor_{name}")
            path.unlink()
    finally:
        await conn.close()
    return {"rows": total_rows, "observations": observations, "seconds": seconds,
            "observations_per_s": observations / seconds}


# --- the server ----------------------------------------------------------------------------------


class Server:
    def __init__(self, url: str, workers: int, command: list[str] | None = None, ready: str = "/readyz") -> None:
        """`pith-graph serve` with `workers` processes (or `command`, given --port), once `ready` answers 200."""
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.base = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "DATABASE_URL": url, "PITH_POOL_MAX": "16", "PITH_POOL_MIN": "4"}
        command = command or [sys.executable, "-m", "app.cli", "serve", "--workers", str(workers)]
        self.process = subprocess.Popen([*command, "--port", str(self.port)], env=env, cwd=ROOT,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.base + ready, timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError("server did not start")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(20)


def timed_requests(client: httpx.Client, n: int, request) -> list[float]:
    for _ in range(max(5, n // 10)):
        request(client)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        request(client)
        times.append(time.perf_counter() - t0)
    return times


# --- measurements --------------------------------------------------------------------------------


def record_path(hub: str) -> str:
    return f"/paper/{hub}/citation-record.json?as_of={AS_OF}"


def r1(url: str, server: Server, floor_sql: str, n: int, hub: str = HUB) -> dict[str, Any]:
    """The record over HTTP against the floor statement, one request of each in turn (the host's load
    then weighs on both alike)."""
    path = record_path(hub)

    async def timed(statement: Any) -> float:
        t0 = time.perf_counter()
        await statement.fetchval()
        return time.perf_counter() - t0

    with httpx.Client(base_url=server.base, timeout=30) as client, asyncio.Runner() as runner:
        body = client.get(path).json()
        assert hub != HUB or (len(body["inbound"]) == 100 and len(body["outbound"]) == 100), "hub must have 100/100"
        conn = runner.run(asyncpg.connect(url))
        try:
            statement = runner.run(conn.prepare(floor_sql))
            ours, floor = [], []
            for i in range(n + max(5, n // 10)):
                t0 = time.perf_counter()
                client.get(path).raise_for_status()
                took, floor_took = time.perf_counter() - t0, runner.run(timed(statement))
                if i >= max(5, n // 10):
                    ours.append(took)
                    floor.append(floor_took)
        finally:
            runner.run(conn.close())
    o, f = summary(ours), summary(floor)
    return {"ours": o, "floor": f, "ratio_p50": o["p50_ms"] / f["p50_ms"], "ratio_p99": o["p99_ms"] / f["p99_ms"],
            "interleaved": True}


WARM_UP_SECONDS = 3  # each side's load first runs this long unmeasured: connections opened, statements planned


def r2(url: str, floor_sql: str, seconds: int, workers: int, hub: str = HUB) -> dict[str, Any]:
    server = Server(url, workers)
    try:
        target = server.base + record_path(hub)
        wrk = shutil.which("wrk")
        if wrk:
            subprocess.run([wrk, "-t2", "-c32", f"-d{WARM_UP_SECONDS}s", target], capture_output=True, check=True)
            out = subprocess.run([wrk, "-t2", "-c32", f"-d{seconds}s", "--latency", target], capture_output=True,
                                 text=True, check=True).stdout
            rps = float(next(line.split()[1] for line in out.splitlines() if line.startswith("Requests/sec")))
            errors = "Non-2xx" in out or "Socket errors" in out
            tool = "wrk -t2 -c32"
        else:
            asyncio.run(async_load(target, WARM_UP_SECONDS, 32))
            rps, errors = asyncio.run(async_load(target, seconds, 32))
            tool = "asyncio client, 32 connections"
    finally:
        server.stop()
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as script:
        script.write(floor_sql.replace("\n", " ") + "\n")
    for run in (WARM_UP_SECONDS, seconds):
        out = subprocess.run(["pgbench", "-n", "-M", "prepared", "-c", "32", "-j", "2", "-T", str(run), "-f",
                              script.name, url], capture_output=True, text=True, check=True).stdout
    os.unlink(script.name)
    floor_tps = float(next(line.split("=")[1].split()[0] for line in out.splitlines() if line.startswith("tps")))
    return {"ours_rps": rps, "floor_tps": floor_tps, "ratio": rps / floor_tps, "load_tool": tool,
            "server_workers": workers, "errors": errors, "seconds": seconds, "warm_up_seconds": WARM_UP_SECONDS}


def process_cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process and its children that ended (uvicorn's workers are children)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    own = (int(fields[11]) + int(fields[12])) / ticks
    children = [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()] \
        if Path(f"/proc/{pid}/task/{pid}/children").exists() else []
    return own + sum(process_cpu_seconds(c) for c in children)


def wrk_round(base: str, path: str, seconds: int, pid: int) -> dict[str, Any]:
    cpu = process_cpu_seconds(pid)
    out = subprocess.run(["wrk", "-t2", "-c32", f"-d{seconds}s", "--latency", base + path], capture_output=True,
                         text=True, check=True).stdout
    cpu = process_cpu_seconds(pid) - cpu
    rps = float(next(line.split()[1] for line in out.splitlines() if line.startswith("Requests/sec")))
    done = int(next(line.split()[0] for line in out.splitlines() if "requests in" in line))
    return {"rps": rps, "server_cpu_ms_per_request": 1000 * cpu / max(done, 1),
            "errors": "Non-2xx" in out or "Socket errors" in out}


def r8(url: str, seconds: int, rounds: int, n: int, hub: str = HUB) -> dict[str, Any]:
    """The record against its own statements replayed through asyncpg under the same uvicorn (bench/replay.py),
    one process each: throughput under wrk -t2 -c32 in interleaved rounds (the order alternating), then
    sequential latency, one request of each in turn."""
    path = record_path(hub)
    ours = Server(url, 1)
    replay = Server(url, 1, [sys.executable, str(ROOT / "bench" / "replay.py")], ready=path)
    try:
        runs: dict[str, list[dict[str, Any]]] = {"ours": [], "replay": []}
        for i in range(rounds):
            order = [("ours", ours), ("replay", replay)]
            for name, server in order if i % 2 == 0 else order[::-1]:
                runs[name].append(wrk_round(server.base, path, seconds, server.process.pid))
        times: dict[str, list[float]] = {"ours": [], "replay": []}
        with httpx.Client(base_url=ours.base, timeout=30) as a, httpx.Client(base_url=replay.base, timeout=30) as b:
            for _ in range(max(5, n // 10)):
                a.get(path).raise_for_status()
                b.get(path).raise_for_status()
            for _ in range(n):
                for name, client in (("ours", a), ("replay", b)):
                    t0 = time.perf_counter()
                    client.get(path).raise_for_status()
                    times[name].append(time.perf_counter() - t0)
    finally:
        ours.stop()
        replay.stop()
    rps = {k: statistics.median(r["rps"] for r in v) for k, v in runs.items()}
    o, f = summary(times["ours"]), summary(times["replay"])
    return {"rounds": runs, "ours_rps": rps["ours"], "replay_rps": rps["replay"], "ratio": rps["ours"] / rps["replay"],
            "ours": o, "replay": f, "ratio_p50": o["p50_ms"] / f["p50_ms"], "seconds": seconds, "hub": hub,
            "load": os.getloadavg()}


async def async_load(target: str, seconds: int, concurrency: int) -> tuple[float, bool]:
    done = 0
    errors = False
    deadline = time.monotonic() + seconds
    async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=concurrency)) as client:
        async def worker() -> None:
            nonlocal done, errors
            while time.monotonic() < deadline:
                response = await client.get(target)
                errors |= response.status_code != 200
                done += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return done / seconds, errors


def r3(url: str, server: Server, n: int, hub: str = HUB) -> dict[str, Any]:
    payload = {"query": TRAVERSAL, "variables": {"id": hub, "at": AS_OF}}
    with httpx.Client(base_url=server.base, timeout=30) as client:
        first = client.post("/graphql", json=payload).json()
        assert "errors" not in first, first
        statements = first["extensions"]["cost"]["statements"]
        ours = timed_requests(client, n, lambda c: c.post("/graphql", json=payload).raise_for_status())
    floor, floor_statements = asyncio.run(graphql_in_memory(url, n, hub))
    o, f = summary(ours), summary(floor)
    return {"ours": o, "floor": f, "ratio_p50": o["p50_ms"] / f["p50_ms"], "statements_per_request": statements,
            "floor_statements": floor_statements}


async def graphql_in_memory(url: str, n: int, hub: str = HUB) -> tuple[list[float], int]:
    """Strawberry executing the same query over objects already in memory (warm loaders, no SQL)."""
    from app.context import Context
    from app.db.pool import Session, create_pool
    from app.schema import schema
    from app.settings import Settings

    pool = await create_pool(Settings(), url, min_size=1, max_size=2)
    session = Session.from_pool(pool)
    try:
        context = Context(session=session)
        variables = {"id": hub, "at": AS_OF}
        warm = await schema.execute(TRAVERSAL, variable_values=variables, context_value=context)
        assert not warm.errors, warm.errors
        before = session.statements
        times = []
        for i in range(n + max(5, n // 10)):
            t0 = time.perf_counter()
            result = await schema.execute(TRAVERSAL, variable_values=variables, context_value=context)
            if i >= max(5, n // 10):
                times.append(time.perf_counter() - t0)
            assert not result.errors
        return times, session.statements - before
    finally:
        await session.close()
        await pool.close()


async def r4(url: str, n: int) -> dict[str, Any]:
    from app.context import Context
    from app.db.pool import Session, create_pool
    from app.schema import schema
    from app.settings import Settings
    from bench import naive

    at = datetime.fromisoformat(AS_OF.replace("Z", "+00:00"))
    query = """query($id: String!, $at: DateTime) { paper(arxivId: $id, asOf: $at) { inbound(first: 100) { edges {
      node { referenceIndex citingPaper { arxivId title } resolution { status } standingNotice { state } } } } } }"""
    pool = await create_pool(Settings(), url, min_size=1, max_size=2)
    ours, statements = [], 0
    try:
        for _ in range(n):
            session = Session.from_pool(pool)
            t0 = time.perf_counter()
            result = await schema.execute(query, variable_values={"id": HUB, "at": AS_OF},
                                          context_value=Context(session=session))
            ours.append(time.perf_counter() - t0)
            assert not result.errors, result.errors
            statements = session.statements
            await session.close()
    finally:
        await pool.close()
    conn = await asyncpg.connect(url)
    naive_times, naive_statements = [], 0
    try:
        for _ in range(max(3, n // 5)):
            serial = naive.SerialConnection(conn)
            t0 = time.perf_counter()
            result = await naive.schema.execute(naive.QUERY, variable_values={"id": HUB, "at": at.isoformat()},
                                                context_value={"conn": serial})
            naive_times.append(time.perf_counter() - t0)
            assert not result.errors, result.errors
            naive_statements = serial.statements
    finally:
        await conn.close()
    o, f = summary(ours), summary(naive_times)
    return {"ours": {**o, "statements": statements}, "naive": {**f, "statements": naive_statements},
            "statement_ratio": naive_statements / statements, "latency_ratio_p50": f["p50_ms"] / o["p50_ms"]}


def r6(server: Server, n: int) -> dict[str, Any]:
    out = {}
    with httpx.Client(base_url=server.base, timeout=60) as client:
        for per in (10, 100):
            payload = {"query": """query($id: String!, $per: Int!, $at: DateTime) { neighbourhood(arxivId: $id,
              direction: INBOUND, depth: 2, perPaper: $per, asOf: $at) { truncated papers { arxivId title }
              edges { id referenceIndex resolution { status } } } }""",
                       "variables": {"id": HUB, "per": per, "at": AS_OF}}
            body = client.post("/graphql", json=payload).json()
            assert "errors" not in body, body
            edges = len(body["data"]["neighbourhood"]["edges"])
            statements = body["extensions"]["cost"]["statements"]
            times = timed_requests(client, max(5, n // 5), lambda c: c.post("/graphql", json=payload).raise_for_status())
            s = summary(times)
            out[f"per_paper_{per}"] = {**s, "edges": edges, "statements": statements,
                                       "statements_per_hop": (statements - 1) / 2,
                                       "us_per_edge_p50": s["p50_ms"] * 1000 / max(edges, 1)}
    return out


def machine(url: str) -> dict[str, Any]:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())

    async def pg() -> dict[str, Any]:
        conn = await asyncpg.connect(url)
        try:
            settings = {r["name"]: r["setting"] + (r["unit"] or "") for r in await conn.fetch(
                "SELECT name, setting, unit FROM pg_settings WHERE name = ANY($1::text[])",
                ["shared_buffers", "work_mem", "effective_cache_size", "max_connections", "jit",
                 "synchronous_commit", "random_page_cost"])}
            return {"version": await conn.fetchval("SELECT version()"), "settings": settings,
                    "database_size": await conn.fetchval("SELECT pg_size_pretty(pg_database_size(current_database()))")}
        finally:
            await conn.close()

    from importlib.metadata import version

    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(), "postgresql": asyncio.run(pg()),
            "packages": {p: version(p) for p in ("strawberry-graphql", "asyncpg", "starlette", "uvicorn",
                                                 "aiodataloader", "graphql-core")}}


def run_scale(admin: str, scale: int, args: argparse.Namespace) -> dict[str, Any]:
    started = time.monotonic()
    if args.database_url:
        # A graph built elsewhere (e.g. `synth --papers 1000000 --hub-citations 150000`), only read.
        url, setup_info = args.database_url, {"database": args.database_url.rsplit("/", 1)[1]}
    else:
        url, setup_info = asyncio.run(setup(admin, scale, args.seed, args.reuse))
    hub = args.hub
    only = set(args.only or ("R1", "R2", "R3", "R4", "R6", "R7", "R8"))
    floor_sql = "\n".join(line for line in (ROOT / "bench" / "floor.sql").read_text().splitlines()
                          if not line.lstrip().startswith("--")).replace(":hub", hub).replace(":as_of", AS_OF)
    result: dict[str, Any] = {"scale": scale, "seed": args.seed, "date": datetime.now(timezone.utc).isoformat(),
                              "command": " ".join([Path(sys.executable).name, *sys.argv]), "hub": hub,
                              "load_before": os.getloadavg(), **setup_info}
    if setup_info.get("reused"):
        # The data was not rebuilt: keep the bulk-load figures of the run that built it.
        earlier = sorted(RESULTS.glob(f"*-{scale}.json"))
        if earlier:
            previous = json.loads(earlier[-1].read_text())
            for key in ("bulk", "R7"):
                if key in previous:
                    result[key] = previous[key]
            result["bulk_measured_in"] = previous.get("command")
    if "bulk" in setup_info and "R7" in only:
        with tempfile.TemporaryDirectory() as tmp:
            floor = asyncio.run(r7_floor(url, Path(tmp)))
        bulk = setup_info["bulk"]
        write_seconds = bulk["copy_seconds"] + bulk["merge_seconds"] + bulk["index_seconds"]
        result["R7"] = {"floor": floor, "ours_end_to_end_obs_per_s": bulk["observations"] / bulk["seconds"],
                        "ours_write_path_obs_per_s": bulk["observations"] / write_seconds,
                        "ratio": (bulk["observations"] / write_seconds) / floor["observations_per_s"],
                        "ratio_end_to_end": (bulk["observations"] / bulk["seconds"]) / floor["observations_per_s"]}
        log(f"R7 {result['R7']['ratio']:.2f}x (write path), {result['R7']['ratio_end_to_end']:.2f}x end to end")
    server = Server(url, 1)
    try:
        if "R1" in only:
            result["R1"] = r1(url, server, floor_sql, args.requests, hub)
            log(f"R1 p50 {result['R1']['ratio_p50']:.2f}x p99 {result['R1']['ratio_p99']:.2f}x")
        if "R3" in only:
            result["R3"] = r3(url, server, args.requests, hub)
            log(f"R3 {result['R3']['ratio_p50']:.2f}x, {result['R3']['statements_per_request']} statements")
        if "R6" in only:
            result["R6"] = r6(server, args.requests)
            log("R6 " + ", ".join(f"{k}: {v['us_per_edge_p50']:.0f} us/edge" for k, v in result["R6"].items()))
    finally:
        server.stop()
    if "R4" in only:
        result["R4"] = asyncio.run(r4(url, max(5, args.requests // 5)))
        log(f"R4 naive sends {result['R4']['statement_ratio']:.0f}x the statements")
    if "R2" in only:
        result["R2"] = r2(url, floor_sql, args.seconds, args.workers, hub)
        log(f"R2 {result['R2']['ratio']:.2f}x ({result['R2']['ours_rps']:.0f} rps vs {result['R2']['floor_tps']:.0f} tps)")
    if "R8" in only and shutil.which("wrk"):
        result["R8"] = r8(url, args.seconds, 1 if args.quick else 3, args.requests, hub)
        log(f"R8 {result['R8']['ratio']:.2f}x ({result['R8']['ours_rps']:.0f} vs {result['R8']['replay_rps']:.0f} rps), "
            f"p50 {result['R8']['ratio_p50']:.2f}x")
    result["load_after"] = os.getloadavg()
    if not args.no_peer:
        from bench import peer

        result["peer"] = peer.compare(url, seconds=args.seconds, rounds=1 if args.quick else 3,
                                      requests=args.requests, seed=args.seed, quick=args.quick)
    result["machine"] = machine(url)
    result["elapsed_s"] = time.monotonic() - started
    carry_over(result, scale)
    return result


def carry_over(result: dict[str, Any], scale: int) -> None:
    """Figures this run did not measure (--only, --no-peer) are those of the newest earlier result of the
    scale, named as carried over with that run's date, so the file still says everything of its scale."""
    earlier = sorted(RESULTS.glob(f"????-??-??-{scale}.json"))
    if not earlier:
        return
    previous = json.loads(earlier[-1].read_text())
    carried = {}
    for key in ("R1", "R2", "R3", "R4", "R6", "R7", "R8", "peer"):
        if key not in result and key in previous:
            result[key] = previous[key]
            carried[key] = previous.get("carried_over", {}).get(key) or previous["date"][:10]
    if carried:
        result["carried_over"] = carried


# --- the report ----------------------------------------------------------------------------------


PEER_ROWS = (("Q2_random", "Q2 title, random paper per request", "P1"),
             ("Q1_random", "Q1 title + 100 inbound edges + total, random paper", "P1"),
             ("Q1_most_cited", "Q1 for the most-cited paper", "P-hot"))


def peer_report(latest: dict[int, dict]) -> list[str]:
    """pith-graph / PostGraphile, one table per scale that ran the comparison."""
    lines: list[str] = []
    for scale, r in sorted(latest.items()):
        p = r.get("peer")
        if not p:
            continue
        lines += ["", f"## pith-graph / PostGraphile {p['postgraphile']} ({scale:,} papers, {r['date'][:10]})", "",
                  f"Same database, same as-of rules (`bench/peer.sql`); answers checked alike first "
                  f"({p['agreement']['checked']} paper/instant pairs). Throughput: `{p['wrk']}`, {p['seconds']} s, "
                  f"median of {p['rounds']} interleaved rounds; latency: a sequential client. Most-cited paper: "
                  f"{p['most_cited']}.", "",
                  "| question | processes | pith rps | PostGraphile rps | throughput pith / peer | target | "
                  "pith p50 / p99 ms | peer p50 / p99 ms | p99 pith / peer (target <= 1.5x) |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for key, label, target in PEER_ROWS:
            for n in (1, 2):
                e = p["runs"].get(f"{key}_{n}p")
                if e is None:
                    continue
                ratio = e["throughput_ratio"]
                latency = (f"{e['pith']['p50_ms']:.2f} / {e['pith']['p99_ms']:.2f}",
                           f"{e['postgraphile']['p50_ms']:.2f} / {e['postgraphile']['p99_ms']:.2f}",
                           f"{e['p99_ratio']:.2f}x {met('P99', e['p99_ratio'])}") if "p99_ratio" in e else ("-", "-", "-")
                lines.append(f"| {label} | {n} | {e['pith']['rps']:.0f} | {e['postgraphile']['rps']:.0f} | "
                             f"{ratio:.2f}x | {met(target, ratio)} | {latency[0]} | {latency[1]} | {latency[2]} |")
        v5 = [(key, label, e) for key, label, _ in PEER_ROWS
              if (e := p["runs"].get(f"{key}_1p")) is not None and "postgraphile5" in e]
        if v5:
            lines += ["", f"PostGraphile {p.get('postgraphile5', '5')} (Node 22, V4 preset: the same schema and "
                      "queries), in the same rounds, one process:", "",
                      "| question | pith rps | PostGraphile 5 rps | pith / v5 | target | v5 p50 / p99 ms | "
                      "p99 pith / v5 | target |", "|---|---|---|---|---|---|---|---|"]
            for key, label, e in v5:
                target = "V5-Q2" if key.startswith("Q2") else "V5-Q1"
                ratio = e["throughput_ratio_v5"]
                lines.append(f"| {label} | {e['pith']['rps']:.0f} | {e['postgraphile5']['rps']:.0f} | {ratio:.2f}x | "
                             f"{met(target, ratio)} | {e['postgraphile5']['p50_ms']:.2f} / "
                             f"{e['postgraphile5']['p99_ms']:.2f} | {e['p99_ratio_v5']:.2f}x | "
                             f"{met('V5-P99', e['p99_ratio_v5'])} |")
        ceilings = [(key, e) for key, e in p["runs"].items() if "ceiling" in e]
        for key, e in ceilings:
            lines += ["", f"The stack's ceiling on {key.split('_')[0]} ({key}): a bare ASGI app under the same uvicorn "
                      "answering with one asyncpg statement and nothing else (`bench/ceiling.py`) does "
                      f"{e['ceiling']['rps']:.0f} rps = **{e['ceiling_ratio']:.2f}x PostGraphile** (p50 / p99 "
                      f"{e['ceiling']['p50_ms']:.2f} / {e['ceiling']['p99_ms']:.2f} ms); pith-graph does "
                      f"{e['pith_of_ceiling']:.2f}x of that ceiling. No service on this stack can beat "
                      f"{e['ceiling_ratio']:.2f}x here." + (
                          f" (The ceiling releases connections without asyncpg's reset round trip; pith-graph at "
                          f"{e['pith_of_ceiling']:.2f}x of it: {met('CEIL', e['pith_of_ceiling'])}.)"
                          if "pith_of_true_ceiling" in e else "")]
    return lines


def met(name: str, value: float) -> str:
    op, target = TARGETS[name]
    ok = value <= target if op == "<=" else value >= target
    return f"{'met' if ok else 'missed'} ({op} {target}x)"


def kept_sections(generated: str) -> list[str]:
    """The sections of today's BENCHMARKS.md that report() does not write (a bench's own section, such
    as bench/scale.py's, or figures written by hand): kept as they are when the file is rebuilt."""
    path = ROOT / "BENCHMARKS.md"
    if not path.exists():
        return []
    ours = {line.split(" (")[0] for line in generated.splitlines() if line.startswith("## ")}
    kept, current = [], None
    for line in path.read_text().splitlines():
        if line.startswith("## "):
            current = [] if line.split(" (")[0] not in ours else None
            if current is not None:
                kept.append(current)
        if current is not None:
            current.append(line)
    return ["\n".join(section).rstrip("\n") for section in kept]


def report() -> str:
    text = _report()
    kept = kept_sections(text)
    if not kept:
        return text
    marker = "\n## Absolute figures"
    at = text.find(marker)
    insert = "\n" + "\n\n".join(kept) + "\n"
    return text[:at] + insert + text[at:] if at != -1 else text.rstrip("\n") + "\n" + insert


def _report() -> str:
    results = [json.loads(p.read_text()) for p in sorted(RESULTS.glob("????-??-??-*.json"))]  # runs of this file
    latest: dict[int, dict] = {}
    for r in results:
        latest[r["scale"]] = r  # sorted by file name: the newest of each scale wins
    lines = ["# Benchmarks", "",
             "Produced by `python bench/run.py` (see each run's command below); every figure is a ratio to a floor",
             "measured in the same run on the same machine. Raw results: `bench/results/`.", ""]
    scales = sorted(latest)
    lines += ["| figure | target | " + " | ".join(f"{s:,} papers" for s in scales) + " |",
              "|---|---|" + "---|" * len(scales)]

    def row(label: str, name: str | None, get) -> None:
        cells = []
        for s in scales:
            try:
                value = get(latest[s])
                cells.append(value if isinstance(value, str) else f"{value:.2f}x" + (f" {met(name, value)}" if name else ""))
            except (KeyError, TypeError):
                cells.append("not run")
        target = f"{TARGETS[name][0]} {TARGETS[name][1]}x" if name else "-"
        lines.append(f"| {label} | {target} | " + " | ".join(cells) + " |")

    row("R1 record latency p50 (ours / SQL floor)", "R1", lambda r: r["R1"]["ratio_p50"])
    row("R1 record latency p99", "R1", lambda r: r["R1"]["ratio_p99"])
    row("R2 record throughput, 32 connections (ours / pgbench floor)", "R2", lambda r: r["R2"]["ratio"])
    row("R3 typed traversal p50 (HTTP / in-memory Strawberry)", "R3", lambda r: r["R3"]["ratio_p50"])
    row("R3 statements per request", None, lambda r: str(r["R3"]["statements_per_request"]))
    row("R8 record throughput, one process (ours / its statements replayed, bench/replay.py)", "R8",
        lambda r: r["R8"]["ratio"])
    row("R8 record latency p50 (ours / its statements replayed)", "R8-p50", lambda r: r["R8"]["ratio_p50"])
    row("R4 statements, naive / ours", None, lambda r: f"{r['R4']['naive']['statements']} / {r['R4']['ours']['statements']}")
    row("R4 latency p50, naive / ours", None, lambda r: r["R4"]["latency_ratio_p50"])
    row("R6 depth 2, perPaper 10: us per edge p50", None,
        lambda r: f"{r['R6']['per_paper_10']['us_per_edge_p50']:.0f} us ({r['R6']['per_paper_10']['edges']} edges, "
                  f"{r['R6']['per_paper_10']['statements_per_hop']:.1f} statements/hop)")
    row("R6 depth 2, perPaper 100: us per edge p50", None,
        lambda r: f"{r['R6']['per_paper_100']['us_per_edge_p50']:.0f} us ({r['R6']['per_paper_100']['edges']} edges, "
                  f"{r['R6']['per_paper_100']['statements_per_hop']:.1f} statements/hop)")
    row("R7 bulk write path (ours / psql COPY)", "R7", lambda r: r["R7"]["ratio"])
    row("R7 end to end, generation included", None, lambda r: r["R7"]["ratio_end_to_end"])
    if len(scales) >= 2 and latest[scales[0]]["date"][:10] == latest[scales[-1]]["date"][:10]:
        # Only runs of the same day (the same code) are compared across scales.
        small, large = scales[0], scales[-1]
        for key, label in (("R1", "R1 p50"), ("R3", "R3 p50")):
            try:
                ratio = latest[large][key]["ours"]["p50_ms"] / latest[small][key]["ours"]["p50_ms"]
                lines.append(f"| R5 {label} at {large:,} / at {small:,} | <= 1.25x | {ratio:.2f}x {met('R5', ratio)} |"
                             + " |" * (len(scales) - 1))
            except KeyError:
                pass
    lines += peer_report(latest)
    from bench.export import report_lines as export_report

    lines += export_report()
    from bench.calibrate import report_lines as calibration_report
    from bench.governance import report_lines as governance_report

    from bench.browse import report_lines as browse_report
    from bench.imports import report_lines as imports_report

    lines += calibration_report()
    lines += governance_report()
    lines += imports_report()
    lines += browse_report()
    dates = {s: latest[s]["date"][:10] for s in scales}
    if len(set(dates.values())) > 1:
        lines += ["", "Columns come from runs of different days, so of different code: " +
                  ", ".join(f"{s:,} papers {d}" for s, d in dates.items()) + ". R5 compares scales only within one "
                  "day's runs."]
    lines += ["", "## Absolute figures", ""]
    for s in scales:
        r = latest[s]
        lines.append(f"### {s:,} papers ({r['date'][:10]})")
        lines.append("")
        lines.append(f"Command: `{r['command']}`")
        lines.append("")
        for key in ("R1", "R3"):
            if key in r:
                lines.append(f"- {key}: ours p50 {r[key]['ours']['p50_ms']:.2f} ms, p99 {r[key]['ours']['p99_ms']:.2f} ms; "
                             f"floor p50 {r[key]['floor']['p50_ms']:.2f} ms, p99 {r[key]['floor']['p99_ms']:.2f} ms")
        if r.get("carried_over"):
            lines.append("- not measured in this run, from earlier runs: " + ", ".join(
                f"{k} ({d})" for k, d in r["carried_over"].items()))
        if r.get("hub", HUB) != HUB or "database" in r:
            lines.append(f"- database {r.get('database', 'built by the run')}; R1-R3 and R8 on arXiv:{r.get('hub', HUB)}")
        if "load_before" in r:
            lines.append(f"- load average (1, 5, 15 min) before {', '.join(f'{x:.1f}' for x in r['load_before'])}, "
                         f"after {', '.join(f'{x:.1f}' for x in r['load_after'])}")
        if "R8" in r:
            e = r["R8"]
            lines.append(f"- R8: ours {e['ours_rps']:.0f} rps, replayed statements {e['replay_rps']:.0f} rps (median of "
                         f"{len(e['rounds']['ours'])} interleaved rounds of {e['seconds']} s, wrk -t2 -c32; server CPU per "
                         f"request {statistics.median(x['server_cpu_ms_per_request'] for x in e['rounds']['ours']):.2f} vs "
                         f"{statistics.median(x['server_cpu_ms_per_request'] for x in e['rounds']['replay']):.2f} ms); "
                         f"p50 {e['ours']['p50_ms']:.2f} vs {e['replay']['p50_ms']:.2f} ms")
        if "R2" in r:
            lines.append(f"- R2: {r['R2']['ours_rps']:.0f} requests/s ({r['R2']['load_tool']}, {r['R2']['server_workers']} "
                         f"workers) vs {r['R2']['floor_tps']:.0f} statements/s (pgbench -c 32)"
                         + (f", each after {r['R2']['warm_up_seconds']} s unmeasured" if "warm_up_seconds" in r["R2"] else ""))
        if "R4" in r:
            lines.append(f"- R4: ours {r['R4']['ours']['p50_ms']:.1f} ms with {r['R4']['ours']['statements']} statements; "
                         f"naive {r['R4']['naive']['p50_ms']:.1f} ms with {r['R4']['naive']['statements']}")
        if "R7" in r:
            b = r.get("bulk", {})

            def sec(key: str) -> str:
                return f"{b[key]:.1f}" if isinstance(b.get(key), (int, float)) else "n/a"

            floor = r["R7"]["floor"]
            lines.append(f"- R7: {b.get('observations', 0):,} observations, {b.get('rows', 0):,} rows; synth {sec('seconds')} s "
                         f"(generate {sec('generate_seconds')}, COPY {sec('copy_seconds')}, merge {sec('merge_seconds')}, "
                         f"indexes {sec('index_seconds')}); psql COPY floor {floor['seconds']:.1f} s for "
                         f"{floor['observations']:,} observations ({floor['observations_per_s']:,.0f}/s)"
                         + (f"; {floor['partial']}" if floor.get("partial") else "")
                         + (f"; {b['note']}" if b.get("note") else ""))
        m = r.get("machine", {})
        if m:
            lines.append(f"- machine: {m['cpu']}, {m['cores']} cores; {m['postgresql']['version'].split(' on ')[0]}; "
                         f"settings {json.dumps(m['postgresql']['settings'])}; database {m['postgresql']['database_size']}")
        lines.append("")
    notes = ROOT / "bench" / "NOTES.md"
    if notes.exists():
        lines += [notes.read_text()]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", type=int, nargs="*", default=[10_000])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--seconds", type=int, default=10, help="R2 load duration")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2, help="server workers for R2")
    parser.add_argument("--quick", action="store_true", help="a smoke run: few requests, 2 s of load")
    parser.add_argument("--reuse", action="store_true", help="reuse an existing benchmark database")
    parser.add_argument("--report", action="store_true", help="only rebuild BENCHMARKS.md")
    parser.add_argument("--admin-url", default=os.environ.get("PITH_BENCH_ADMIN_URL",
                                                              "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--no-save", action="store_true", help="do not write results (smoke runs)")
    parser.add_argument("--no-peer", action="store_true", help="skip the PostGraphile comparison")
    parser.add_argument("--database-url", help="measure an existing database as it is (read only: no set-up, no "
                                               "R7, never dropped); --scales then names its scale")
    parser.add_argument("--hub", default=HUB, help="the paper of R1-R3 and R8 (default: the 100/100 paper the "
                                                   "set-up adds)")
    parser.add_argument("--only", nargs="*", help="only these figures (R1 R2 R3 R4 R6 R7 R8)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the benchmark databases for a later --reuse (default: drop them; --reuse keeps)")
    args = parser.parse_args()
    if args.quick:
        args.requests, args.seconds = 20, 2
    if not args.report:
        RESULTS.mkdir(parents=True, exist_ok=True)
        for scale in args.scales:
            try:
                result = run_scale(args.admin_url, scale, args)
            finally:
                if not (args.keep or args.reuse or args.database_url):
                    asyncio.run(drop_bench_database(args.admin_url, scale))
            if not args.no_save:
                path = RESULTS / f"{datetime.now(timezone.utc):%Y-%m-%d}-{scale}.json"
                path.write_text(json.dumps(result, indent=2, default=str) + "\n")
                log(f"wrote {path}")
    if not args.no_save:
        (ROOT / "BENCHMARKS.md").write_text(report())
        log("wrote BENCHMARKS.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
