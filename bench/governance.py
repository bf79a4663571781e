"""Governance under load, on a served graph: fairness, memory under the hostile table, the cost of budgets.

    python bench/governance.py --database-url postgresql://.../db     # e.g. a `synth --papers 10000` graph
    python bench/governance.py --papers 10000                          # makes one, measures, drops it

- fairness: 8 clients loop the heaviest admitted operation (the most-cited paper's recordDiff from 2000,
  ~1 s of work) for `--seconds`, while another client looks papers up one after another; the lookups'
  statuses and p50/p99/max latency (target: all 200, p99 <= 300 ms).
- memory: the server's peak RSS (psutil, every 50 ms) while the hostile table runs, each operation alone
  and the heaviest admitted eight at once (bound: 800 MB).
- budgets: Q2 (a title lookup) with every request charged to a budget against Q2 with budgets off, wrk at
  32 connections, alternating rounds on one database (target: at least 0.9x).

Writes bench/results/governance-<date>-<papers>.json. Not a test: timings on a shared machine.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import statistics
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.limits import MEMORY_BOUND_MB  # noqa: E402
from bench.calibrate import DIFF, RESULTS, graph_arguments, graph_database  # noqa: E402
from bench.peer import Running, free_port, payload, wrk  # noqa: E402
from bench.proxy import nginx_in_front  # noqa: E402


def start(url: str, **env: str) -> Running:
    port = free_port()
    return Running("pith", [sys.executable, "-m", "app.cli", "serve", "--port", str(port)],
                   {**os.environ, "DATABASE_URL": url, "PITH_ACCESS_LOG": "0", **env}, port,
                   payload("pith", "Q2", env.get("PROBE", "1501.00001")))


class PeakRss:
    """The peak resident memory of a process, sampled every 50 ms in a thread."""

    def __init__(self, pid: int) -> None:
        self.process = psutil.Process(pid)
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, self.process.memory_info().rss)
            except psutil.Error:
                return
            time.sleep(0.05)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


async def graph_facts(url: str) -> tuple[str, list[str]]:
    conn = await asyncpg.connect(url)
    try:
        top = await conn.fetchval("SELECT cited_arxiv_id FROM citation_observations WHERE cited_arxiv_id IS NOT NULL "
                                  "GROUP BY 1 ORDER BY count(*) DESC LIMIT 1")
        ids = [r[0] for r in await conn.fetch("SELECT DISTINCT arxiv_id FROM paper_snapshots ORDER BY 1 LIMIT 1000")]
    finally:
        await conn.close()
    return top, ids


def heavy_body(top: str) -> dict:
    return {"query": "query($a: String!) { " + DIFF + " }", "variables": {"a": top}}


def heavy_mix(top: str) -> list[dict]:
    """The funded keys' row: heavy operations in turn, those a fresh trial found slowed a light lookup most (a
    depth-3 neighbourhood of 10,000 papers and edges, 1.4 MB; the hub's inbound with each citer's count; the hub's
    record; a diff)."""
    one = "query($a: String!) { %s }"
    return [{"query": one % q, "variables": {"a": top}} for q in (
        "neighbourhood(arxivId: $a, depth: 3, perPaper: 100) { truncated papers { arxivId title } "
        "edges { observationId referenceIndex source } }",
        "paper(arxivId: $a) { inbound(first: 100) { edges { node { observationId citingPaper { title "
        "inbound(first: 5) { totalCount } } } } } }",
        "citationRecord(arxivId: $a) { canonicalJson }",
        DIFF)]


async def fairness(url: str, top: str, ids: list[str], seconds: float) -> dict:
    # Eight clients: told apart by X-Forwarded-For, which counts from a trusted proxy (here, loopback).
    server = start(url, PROBE=ids[0], PITH_TRUSTED_PROXIES="127.0.0.1")
    try:
        stop_at = time.monotonic() + seconds
        heavy_statuses: list[int] = []

        async def heavy(client: httpx.AsyncClient, n: int) -> None:
            while time.monotonic() < stop_at:
                r = await client.post("/graphql", json=heavy_body(top), headers={"x-forwarded-for": f"10.0.0.{n}"})
                heavy_statuses.append(r.status_code)

        latencies: list[float] = []
        statuses: list[int] = []

        async def lookups(client: httpx.AsyncClient) -> None:
            i = 0
            await asyncio.sleep(1.0)  # the heavy clients are running
            while time.monotonic() < stop_at:
                body = payload("pith", "Q2", ids[i % len(ids)])
                started = time.perf_counter()
                r = await client.post("/graphql", json=body)
                latencies.append(time.perf_counter() - started)
                statuses.append(r.status_code)
                i += 1

        limits = httpx.Limits(max_connections=20)
        async with httpx.AsyncClient(base_url=server.base, timeout=60, limits=limits) as heavy_client, \
                httpx.AsyncClient(base_url=server.base, timeout=60) as light_client:
            await asyncio.gather(*(heavy(heavy_client, n) for n in range(8)), lookups(light_client))
        ordered = sorted(latencies)

        def pct(p: float) -> float:
            return round(ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))] * 1000, 1)

        return {"seconds": seconds, "heavy_clients": 8, "heavy_done": len(heavy_statuses),
                "heavy_statuses": {str(s): heavy_statuses.count(s) for s in sorted(set(heavy_statuses))},
                "lookups": len(latencies), "lookup_statuses": {str(s): statuses.count(s) for s in sorted(set(statuses))},
                "lookup_p50_ms": pct(50), "lookup_p99_ms": pct(99), "lookup_max_ms": round(ordered[-1] * 1000, 1)}
    finally:
        server.stop()


async def memory(url: str, top: str, ids: list[str]) -> dict:
    from bench.calibrate import corpus

    server = start(url, PROBE=ids[0], PITH_TRUSTED_PROXIES="127.0.0.1")
    sampler = PeakRss(server.process.pid)
    outcomes = {}
    try:
        async with httpx.AsyncClient(base_url=server.base, timeout=60) as client:
            for name, (query, variables) in corpus(top, ids[50], ids[:100]).items():
                if not name.startswith("table:"):
                    continue
                started = time.perf_counter()
                r = await client.post("/graphql", json={"query": query, "variables": variables})
                body = r.json()
                code = (body.get("errors") or [{}])[0].get("extensions", {}).get("code")
                outcomes[name] = {"status": r.status_code, "code": code,
                                  "ms": round((time.perf_counter() - started) * 1000, 1)}
            started = time.perf_counter()
            eight = await asyncio.gather(*(client.post("/graphql", json=heavy_body(top),
                                                       headers={"x-forwarded-for": f"10.1.0.{n}"})
                                           for n in range(8)))
            outcomes["eight recordDiffs at once"] = {"statuses": [r.status_code for r in eight],
                                                    "ms": round((time.perf_counter() - started) * 1000, 1)}
    finally:
        peak = sampler.stop()
        server.stop()
    return {"operations": outcomes, "peak_rss_mb": round(peak / 2**20, 1), "bound_mb": MEMORY_BOUND_MB}


def budgets(url: str, ids: list[str], seconds: int, rounds: int) -> dict:
    runs: dict[str, list[float]] = {"off": [], "on": []}
    for r in range(rounds):
        for name in ("off", "on") if r % 2 == 0 else ("on", "off"):
            env = {"PROBE": ids[0]}
            if name == "on":
                env["PITH_ANONYMOUS_POINTS_PER_HOUR"] = str(10**12)  # every request charged, none refused
            server = start(url, PITH_POOL_MAX="16", PITH_POOL_MIN="4", **env)
            try:
                wrk(server.base, "pith", "Q2", ids, 2, r)  # warm-up
                runs[name].append(wrk(server.base, "pith", "Q2", ids, seconds, r)["rps"])
            finally:
                server.stop()
    on, off = statistics.median(runs["on"]), statistics.median(runs["off"])
    return {"rps_on": runs["on"], "rps_off": runs["off"], "ratio": round(on / off, 3), "target": 0.9,
            "wrk": "wrk -t2 -c32", "seconds": seconds, "rounds": rounds}


# --- the attack table (issue of record: every door behind the same rules) -------------------------

def attack_documents() -> dict[str, str]:
    return {
        "invalid_10kb": "{ d1 " + " a" * 4989 + " }",
        "overlap_19kb": "{ __typename " + ' paper(arxivId: "x") { title }' * 550 + " }",
    }


def distinct_invalid_document(n: int) -> str:
    """The n-th of the distinct ~12 kB invalid documents: 990 unknown fields, each name of its own, no alias (within
    the shape limits, so each is parsed and validated; no cache of documents holds them). The attack table's row,
    here and in tests/test_attacks.py."""
    return "{ d%d %s }" % (n, " ".join(f"f{n % 2200:04d}x{j:05d}" for j in range(990)))


ATTACK_ROWS = ("two connections of invalid 10 kB documents", "four requests of 19 kB (overlapping fields)",
               "2,200 distinct 12 kB invalid documents", "four funded keys looping heavy operations",
               "random Bearer keys", "four WebSockets flooding subscriptions past their limit", "2,500 idle sockets",
               "distinct 12 kB invalid documents from 100 addresses", "QUERY_TOO_COSTLY operations from 60 addresses",
               "19 kB of variables from 40 addresses", "nested lookups from 40 addresses")


async def flood_websocket(base: str, address: str, arxiv_id: str, until: float, sent: Any = None,
                          proxied: bool = False) -> None:
    """A WebSocket (graphql-transport-ws) that holds its 20 subscriptions, then sends subscriptions past the limit
    as fast as the server reads them, until `until` (time.monotonic()), reading whatever comes back; `sent` is
    called for each message sent. The attack table's row, here and in tests/test_attacks.py. `address`: the
    client's, as X-Forwarded-For from a trusted proxy, or (`proxied`, through a real one) its own source address."""
    import websockets

    subscription = {"query": f'subscription {{ citationAdded(arxivId: "{arxiv_id}") {{ __typename }} }}'}
    try:
        async with asyncio.timeout(max(0.1, until - time.monotonic())):
            who: dict[str, Any] = ({"local_addr": (address, 0)} if proxied
                                   else {"additional_headers": {"x-forwarded-for": address}})
            async with websockets.connect(base.replace("http", "ws") + "/graphql", close_timeout=1,
                                          subprotocols=["graphql-transport-ws"], max_queue=None, **who) as ws:
                await ws.send(json.dumps({"type": "connection_init"}))
                await ws.recv()

                async def drain() -> None:
                    while True:
                        await ws.recv()

                reading = asyncio.ensure_future(drain())
                try:
                    n = 0
                    while True:
                        n += 1
                        await ws.send(json.dumps({"id": str(n), "type": "subscribe", "payload": subscription}))
                        if sent is not None:
                            sent()
                        if n % 50 == 0:
                            await asyncio.sleep(0)
                finally:
                    reading.cancel()
    except (TimeoutError, OSError, websockets.exceptions.WebSocketException):
        return
    except AttributeError:  # websockets' close after the timeout cut a send short: its transport already gone
        return


def as_client(address: str, proxied: bool, **limits: Any) -> dict[str, Any]:
    """An httpx client's arguments for a client of this address: told by X-Forwarded-For from loopback as a
    trusted proxy, or (`proxied`: a real proxy in front, which replaces that header) by its own source address
    (a loopback address of its own, 127.x.y.z)."""
    if proxied:
        return {"transport": httpx.AsyncHTTPTransport(local_address=address, limits=httpx.Limits(**limits))}
    return {"headers": {"x-forwarded-for": address}, "limits": httpx.Limits(**limits)}


def light_client(base: str, address: str, ids: list[str], seconds: float, proxied: bool = False) -> dict:
    """A light client looking papers up every 0.1 s for `seconds` (in a process of its own)."""

    async def run() -> dict:
        latencies, errors, kinds = [], 0, {}
        until = time.monotonic() + seconds
        # An address of its own each run: runs within one clock hour on one database would
        # otherwise share (and spend) one anonymous budget.
        async with httpx.AsyncClient(base_url=base, timeout=60, **as_client(address, proxied)) as client:
            i = 0
            while time.monotonic() < until:
                started = time.perf_counter()
                try:
                    r = await client.post("/graphql", json=payload("pith", "Q2", ids[i % len(ids)]))
                    ok = r.status_code == 200 and "errors" not in r.json()
                    kind = str(r.status_code) if r.status_code != 200 else "200 with errors"
                except httpx.HTTPError as exc:
                    ok, kind = False, type(exc).__name__
                latencies.append(time.perf_counter() - started)
                errors += not ok
                if not ok:
                    kinds[kind] = kinds.get(kind, 0) + 1
                i += 1
                await asyncio.sleep(max(0.0, 0.1 - latencies[-1]))
        latencies.sort()
        return {"n": len(latencies), "errors": errors, **({"error_kinds": kinds} if kinds else {}),
                "p50_ms": round(latencies[len(latencies) // 2] * 1000, 1),
                "p99_ms": round(latencies[int(0.99 * (len(latencies) - 1))] * 1000, 1),
                "max_ms": round(latencies[-1] * 1000, 1)}

    return asyncio.run(run())


async def attacks(url: str, top: str, ids: list[str], seconds: float, rows: list[str] | None = None,
                  proxy: str | None = None, attacker_nice: int = 0) -> dict:
    """The hostile table against a production two-worker server (PITH_ENV=production, PITH_WORKERS=2,
    ulimit -n 1024): a light client looks a paper up every 0.1 s, alone and then during each attack; its
    p50/p99/max and errors, the attackers' statuses, the workers' pids (none replaced) and their peak RSS, and
    the slowest answer. Clients are told apart by X-Forwarded-For from loopback as a trusted proxy, or, with
    `proxy="nginx"`, every client goes through the documented nginx block (bench/proxy.py) from a loopback
    address of its own, as production runs it."""
    import random
    import resource
    import secrets
    import subprocess

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))  # the attackers' own sockets
    port = free_port()
    # BENCH_ACCESS_LOG=1 (with BENCH_KEEP_LOG=1, bench/peer.py) keeps the workers' access lines: each request's
    # duration in the server, to tell its time there from the time on the way.
    env = {**os.environ, "DATABASE_URL": url, "PITH_ACCESS_LOG": os.environ.get("BENCH_ACCESS_LOG", "0"),
           "PITH_ENV": "production", "PITH_WORKERS": "2", "PITH_TRUSTED_PROXIES": "127.0.0.1"}
    command = ["sh", "-c", f"ulimit -n 1024; exec {sys.executable} -m app.cli serve --port {port}"]
    # The probe from an address of its own: each start's workers claim a chunk of the probe's anonymous hour, and
    # loopback's would be spent after a few runs within one clock hour.
    server = Running("pith-production", command, env, port, payload("pith", "Q2", ids[0]),
                     {"x-forwarded-for": f"198.18.{random.randrange(256)}.{random.randrange(1, 255)}"})
    keys = []
    for n in range(4):  # four funded keys
        made = subprocess.run([sys.executable, "-m", "app.cli", "keys", "create", "--name",
                               f"attack-{secrets.token_hex(4)}-{n}", "--points-per-hour", "1000000"],
                              env={**os.environ, "DATABASE_URL": url}, capture_output=True, text=True, check=True)
        keys.append(made.stdout.strip().splitlines()[-1])
    supervisor = psutil.Process(server.process.pid)

    def workers() -> set[int]:
        return {p.pid for p in supervisor.children(recursive=True) if "spawn_main" in " ".join(p.cmdline())}

    before_workers = workers()
    peaks: dict[int, int] = {}
    stop_sampling = threading.Event()

    def sample() -> None:
        while not stop_sampling.is_set():
            for pid in workers():
                try:
                    peaks[pid] = max(peaks.get(pid, 0), psutil.Process(pid).memory_info().rss)
                except psutil.Error:
                    pass
            time.sleep(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    docs = attack_documents()
    proxied = proxy == "nginx"
    front = contextlib.ExitStack()
    # 2,500 idle sockets reach the proxy's port, not the workers'; its connections are set above them.
    base = front.enter_context(nginx_in_front(server.port, free_port(), 8192)) if proxied else server.base
    # The light client's address, a new one for each row: at one lookup every 0.1 s it spends 600 points of its
    # anonymous hour (5,000 in production) a minute, and a table of 60 s rows ran out of it in the last row (429s
    # counted as the light client's errors).
    if proxied:
        light_net = f"127.{random.randrange(1, 255)}.{random.randrange(1, 255)}"
        attackers = f"127.{random.randrange(1, 255)}.{random.randrange(1, 255)}"
    else:
        light_net = f"198.51.{random.randrange(100, 200)}"
        attackers = f"203.{random.randrange(1, 255)}.{random.randrange(1, 255)}"  # theirs too (each an address)
    def another() -> str:  # a network of addresses for one row (each address's budget its own, unspent)
        return f"127.{random.randrange(1, 255)}.{random.randrange(1, 255)}" if proxied else \
            f"203.{random.randrange(1, 255)}.{random.randrange(1, 255)}"

    results: dict = {}
    slowest = 0.0
    pool = concurrent.futures.ProcessPoolExecutor(max_workers=1)
    try:
        async def attacker(name: str, until: float) -> dict:
            nonlocal slowest
            statuses: dict[str, int] = {}
            tasks = []

            def note(status: object, elapsed: float) -> None:
                nonlocal slowest
                statuses[str(status)] = statuses.get(str(status), 0) + 1
                slowest = max(slowest, elapsed)

            async def loop(address: str, make) -> None:  # noqa: ANN001
                async with httpx.AsyncClient(base_url=base, timeout=60,
                                             **as_client(address, proxied, max_connections=2)) as client:
                    await loop_on(client, make)

            async def loop_on(client: httpx.AsyncClient, make) -> None:  # noqa: ANN001
                while time.monotonic() < until:
                    kwargs = make()
                    started = time.perf_counter()
                    try:
                        r = await client.post("/graphql", **kwargs)
                        # An internal error answered 200 (in `errors`) is counted as what it is.
                        internal = r.status_code == 200 and b"INTERNAL_SERVER_ERROR" in r.content
                        note("200 internal error" if internal else r.status_code, time.perf_counter() - started)
                    except httpx.HTTPError as exc:
                        note(type(exc).__name__, time.perf_counter() - started)

            if name == "two connections of invalid 10 kB documents":
                tasks = [loop(f"{attackers}.{n}", lambda: {"json": {"query": docs["invalid_10kb"]}}) for n in range(2)]
            elif name == "four requests of 19 kB (overlapping fields)":
                tasks = [loop(f"{attackers}.{10 + n}", lambda: {"json": {"query": docs["overlap_19kb"]}})
                         for n in range(4)]
            elif name == "2,200 distinct 12 kB invalid documents":
                counter = iter(range(10**9))
                # Each request the next of 2,200 documents (more than any cache of them holds), from five
                # addresses.
                tasks = [loop(f"{attackers}.{20 + n}",
                              lambda: {"json": {"query": distinct_invalid_document(next(counter))}}) for n in range(5)]
            elif name == "distinct 12 kB invalid documents from 100 addresses":
                counter = iter(range(10**9))
                # The row above from a hundred addresses at once (a client with many, or many clients): each
                # address is within its own budget, so what bounds the reading is the server's, not a client's.
                net = another()
                tasks = [loop(f"{net}.{100 + n}",
                              lambda: {"json": {"query": distinct_invalid_document(next(counter))}}) for n in range(100)]
            elif name == "QUERY_TOO_COSTLY operations from 60 addresses":
                # 100 papers' inbound pages with each citer's own: parsed, validated and priced, then refused.
                costly = {"query": "{ papers(arxivIds: [%s]) { inbound(first: 100) { edges { node { citingPaper { "
                          "inbound(first: 100) { totalCount } } } } } } }" % ", ".join(f'"{i}"' for i in ids[:100])}
                net = another()
                tasks = [loop(f"{net}.{1 + n}", lambda: {"json": costly}) for n in range(60)]
            elif name == "19 kB of variables from 40 addresses":
                # 1,500 ids for a list that takes 100: read and coerced, then refused.
                many = {"query": "query($ids: [String!]!) { papers(arxivIds: $ids) { title } }",
                        "variables": {"ids": [ids[n % len(ids)] for n in range(1500)]}}
                net = another()
                tasks = [loop(f"{net}.{1 + n}", lambda: {"json": many}) for n in range(40)]
            elif name == "nested lookups from 40 addresses":
                # Admitted work, each address within its budget: a paper's citers and what each of them cites.
                nested = {"query": "query($a: String!) { paper(arxivId: $a) { inbound(first: 20) { edges { node { "
                          "citingPaper { title outbound(first: 20) { edges { node { citedPaper { title } } } } } } } } "
                          "} }"}
                net = another()
                tasks = [loop(f"{net}.{1 + n}", lambda: {"json": {**nested, "variables": {
                    "a": random.choice(ids)}}}) for n in range(40)]
            elif name == "four funded keys looping heavy operations":
                mix, turn = heavy_mix(top), iter(range(10**9))
                tasks = [loop(f"{attackers}.{60 + n}", lambda k=k: {"json": mix[next(turn) % len(mix)],
                                                                    "headers": {"authorization": f"Bearer {k}"}})
                         for n, k in enumerate(keys)]
            elif name == "random Bearer keys":
                # Two addresses, each request a key of its own.
                tasks = [loop(f"{attackers}.{30 + n}", lambda: {"json": {"query": "{ __typename }"}, "headers": {
                    "authorization": f"Bearer pith_{secrets.token_hex(16)}"}}) for n in range(2)]
            elif name == "four WebSockets flooding subscriptions past their limit":
                tasks = [flood_websocket(base, f"{attackers}.{50 + n}", top, until, lambda: note("sent", 0.0),
                                         proxied) for n in range(4)]
            elif name == "2,500 idle sockets":
                held = []
                # From an address of its own (not the trusted proxy's): a client on the internet reaching the
                # server directly, or the proxy in front of it.
                door = int(base.rsplit(":", 1)[1])
                idle_from = f"{attackers}.70" if proxied else "127.0.0.2"

                async def hold() -> None:
                    while time.monotonic() < until:
                        while len(held) < 2500 and time.monotonic() < until:
                            try:
                                held.append(await asyncio.open_connection("127.0.0.1", door,
                                                                          local_addr=(idle_from, 0)))
                            except OSError:
                                await asyncio.sleep(0.05)
                        await asyncio.sleep(0.2)
                        held[:] = [(r, w) for r, w in held if not w.is_closing() and not r.at_eof()]
                    for _, w in held:
                        w.close()

                tasks = [hold()]
            await asyncio.gather(*tasks)
            return statuses

        # The light client runs in a process of its own, as a real one does (another machine, another
        # program): in the attackers' event loop its latency would include their client's own work.
        running = asyncio.get_running_loop()

        rows_run = iter(range(1, 255))

        def light(until: float) -> asyncio.Future:
            return running.run_in_executor(pool, light_client, base, f"{light_net}.{next(rows_run)}", ids,
                                           until - time.monotonic(), proxied)

        if attacker_nice:
            # The attackers' own client (building and sending hundreds of requests a second) at a lower priority
            # than the server, the proxy and the light client, as if it ran on machines of its own: on a 2-core
            # machine it otherwise takes a core from them. The light client's process is made first, at the
            # server's priority.
            pool.submit(int).result()
            os.nice(attacker_nice)
        until = time.monotonic() + seconds
        results["unloaded"] = await light(until)
        results["unloaded"]["load"] = os.getloadavg()[0]
        for name in ATTACK_ROWS:
            if rows and not any(r in name for r in rows):
                continue
            until = time.monotonic() + seconds
            measured, statuses = await asyncio.gather(light(until), attacker(name, until))
            measured["attack_statuses"] = statuses
            measured["p99_vs_unloaded"] = round(measured["p99_ms"] / max(results["unloaded"]["p99_ms"], 0.1), 2)
            measured["load"] = os.getloadavg()[0]
            results[name] = measured
            print(name, json.dumps(measured), flush=True)
            await asyncio.sleep(2)
    finally:
        pool.shutdown()
        front.close()
        stop_sampling.set()
        sampler.join(2)
        after_workers = workers()
        server.stop()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return {"seconds_per_row": seconds, "proxy": proxy or "none (X-Forwarded-For from loopback as a trusted proxy)",
            "attacker_nice": attacker_nice,
            "rows": results, "workers_replaced": len(before_workers - after_workers),
            "peak_worker_rss_mb": round(max(peaks.values()) / 2**20, 1) if peaks else None,
            "bound_mb": MEMORY_BOUND_MB, "slowest_attack_answer_s": round(slowest, 2),
            "deadline_s": 10.0}


def report_lines() -> list[str]:
    """The "Governance under load" section of BENCHMARKS.md, from the newest result of each part."""
    latest: dict[str, tuple[str, dict]] = {}
    for path in sorted(RESULTS.glob("governance-*.json")):
        r = json.loads(path.read_text())
        for part in ("fairness", "memory", "budgets", "attacks"):
            if part in r:
                latest[part] = (r["date"], r[part], r["command"])  # type: ignore[assignment]
    if not latest:
        return []
    lines = ["", "## Governance under load (`python bench/governance.py`)", ""]
    if "fairness" in latest:
        date, f, command = latest["fairness"]  # type: ignore[misc]
        met = "met" if f["lookup_p99_ms"] <= 300 and set(f["lookup_statuses"]) == {"200"} else "MISSED"
        lines.append(f"- Fairness ({date[:10]}, `{command}`): {f['heavy_clients']} clients looping the most-cited "
                     f"paper's recordDiff for {f['seconds']:.0f} s ({f['heavy_done']} done: {f['heavy_statuses']}); "
                     f"another client's {f['lookups']} lookups: statuses {f['lookup_statuses']}, p50 "
                     f"{f['lookup_p50_ms']} ms, **p99 {f['lookup_p99_ms']} ms**, max {f['lookup_max_ms']} ms "
                     f"(target p99 <= 300 ms, all 200: {met}).")
    if "memory" in latest:
        date, m, command = latest["memory"]  # type: ignore[misc]
        lines.append(f"- Memory ({date[:10]}): the server's peak RSS while the hostile table ran (each alone, then "
                     f"eight recordDiffs at once): **{m['peak_rss_mb']} MB** (bound {m['bound_mb']} MB). "
                     + "; ".join(f"{k}: {v.get('code') or v.get('statuses') or v['status']} in {v['ms']:.0f} ms"
                                 for k, v in m["operations"].items()) + ".")
    if "budgets" in latest:
        date, b, command = latest["budgets"]  # type: ignore[misc]
        met = "met" if b["ratio"] >= b["target"] else "MISSED"
        lines.append(f"- Budgets ({date[:10]}): Q2 with every request charged to a budget / budgets off, "
                     f"{b['wrk']}, {b['rounds']} alternating rounds of {b['seconds']} s: {min(b['rps_on']):.0f}-"
                     f"{max(b['rps_on']):.0f} vs {min(b['rps_off']):.0f}-{max(b['rps_off']):.0f} rps, "
                     f"**{b['ratio']:.2f}x** (target >= {b['target']}x: {met}).")
    if "attacks" in latest:
        date, a, command = latest["attacks"]  # type: ignore[misc]
        base = a["rows"]["unloaded"]
        lines.append(f"- Attack table ({date[:10]}, production, two workers, ulimit -n 1024, {a['seconds_per_row']:.0f} s "
                     f"a row): a light client alone p50 {base['p50_ms']} ms, p99 {base['p99_ms']} ms; workers "
                     f"replaced: {a['workers_replaced']}; peak worker RSS {a['peak_worker_rss_mb']} MB (bound "
                     f"{a['bound_mb']} MB); slowest answer to an attacker {a['slowest_attack_answer_s']} s.")
        for name, row in a["rows"].items():
            if name != "unloaded":
                lines.append(f"  - {name}: light p50 {row['p50_ms']} ms, **p99 {row['p99_ms']} ms "
                             f"({row['p99_vs_unloaded']}x)**, errors {row['errors']}/{row['n']}; attackers "
                             f"{row['attack_statuses']}")
    sides = sorted(RESULTS.glob("governance-*-attacks-side-by-side.json"))
    if sides:
        found = json.loads(sides[-1].read_text())
        lines.append(f"- Attack table side by side ({sides[-1].stem[11:21]}): {found['note']} Light client's p99 during "
                     "each row / its p99 alone in the same run, and the load average (`uptime`, 1 min) as the row "
                     "ended:")
        runs = found["runs"]
        lines.append("")
        lines.append("  | row | " + " | ".join(runs) + " |")
        lines.append("  |---|" + "---|" * len(runs))
        for row in next(iter(runs.values()))["rows"]:
            cells = []
            for run in runs.values():
                measured = run["rows"].get(row)
                cells.append("-" if measured is None else
                             f"{measured['p99_ms']:.0f} ms ({measured.get('p99_vs_unloaded', 1.0):.2f}x, load "
                             f"{measured['load']:.0f})")
            lines.append(f"  | {row} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def main() -> None:
    parser = graph_arguments(__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--only", choices=("fairness", "memory", "budgets", "attacks"))
    parser.add_argument("--row", action="append", help="attacks: only the rows whose name contains this (repeatable)")
    parser.add_argument("--proxy", choices=("nginx",), help="attacks: through the documented nginx block, each "
                        "client from a loopback address of its own (as production runs it)")
    parser.add_argument("--attacker-nice", type=int, default=0, help="attacks: the attackers' client at this nice "
                        "level (as if on machines of their own; the server, proxy and light client keep theirs)")
    args = parser.parse_args()
    found: dict = {}
    with graph_database(args, "pith_governance") as url:
        top, ids = asyncio.run(graph_facts(url))
        if args.only in (None, "fairness"):
            found["fairness"] = asyncio.run(fairness(url, top, ids, args.seconds))
            print(json.dumps(found["fairness"]), flush=True)
        if args.only in (None, "memory"):
            found["memory"] = asyncio.run(memory(url, top, ids))
            print(json.dumps(found["memory"]), flush=True)
        if args.only in (None, "attacks"):
            found["attacks"] = asyncio.run(attacks(url, top, ids, args.seconds, args.row, args.proxy,
                                                   args.attacker_nice))
            print(json.dumps(found["attacks"]), flush=True)
        if args.only in (None, "budgets"):
            found["budgets"] = budgets(url, ids, int(args.seconds // 2) or 5, args.rounds)
            print(json.dumps(found["budgets"]), flush=True)
    found.update({"date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "papers": args.papers,
                  "command": " ".join(sys.argv), "cpus": os.cpu_count()})
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"governance-{found['date'][:10]}-{args.papers}.json"
    if args.only:
        out = out.with_name(out.stem + f"-{args.only}" + (f"-{args.proxy}" if args.proxy else "") + ".json")
    out.write_text(json.dumps(found, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
