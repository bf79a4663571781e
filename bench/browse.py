"""Enumeration at scale: a browsePapers / works page over HTTP against the SQL that bounds it, in one run.

For each case, the median of several requests of one page (100 papers or works) through a running
`pith-graph serve`, beside the median of the same page's rows read straight with asyncpg (the floor:
the statement the server sends for the page, planned as the server plans: generically,
without JIT or parallel workers). Pages are taken at the start and in the middle of the order (a
keyset page costs the same wherever it starts). With --peer, PostGraphile (bench/peer.py's pinned
install, serving bench/peer.sql) lists the same papers in the same order (peer.papers_at) at the same
two places, interleaved with ours. For INBOUND_COUNT_DESC the naive way is measured too:
every paper's total counted from the observations, then sorted (what a page would cost without the
totals the database keeps). Results go to bench/results/browse/<date>-<papers>.json.

    python bench/browse.py --database-url postgresql://.../pith_browse_1m [--repeat 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import asyncpg
import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.cursors import encode_browse  # noqa: E402
from loaders.browse import browse_sql  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "browse"
PAGE = """query($order: PaperOrder!, $filter: PaperFilter, $after: String) {
  browsePapers(orderBy: $order, filter: $filter, first: 100, after: $after) {
    edges { cursor inboundCount node { arxivId title submittedAt primaryCategory } } pageInfo { hasNextPage } } }"""
WORKS = """query($filter: WorkFilter, $after: String) { works(filter: $filter, first: 100, after: $after) {
    nodes { workId doi title } pageInfo { hasNextPage } } }"""
FLOORS = {
    "naive INBOUND_COUNT_DESC": ("SELECT cited_arxiv_id, count(*) AS n FROM citation_observations WHERE cited_arxiv_id "
                                 "IS NOT NULL AND visible_from <= now() GROUP BY 1 ORDER BY n DESC, 1 LIMIT 101"),
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def median_ms(run, repeat: int) -> float:
    for _ in range(3):  # warm: plans, caches
        await run()
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        await run()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


PEER_PAGE = """query($at: Datetime!, $offset: Int) { papersAt(asOf: $at, first: 100, offset: $offset) {
    nodes { arxivId title submittedAt primaryCategory } pageInfo { hasNextPage } } }"""


async def peer_pages(url: str, papers: int, repeat: int, ours: dict) -> dict:
    """PostGraphile's first and middle page of papers by arXiv id, beside ours (already measured)."""
    from bench.peer import ensure_postgraphile, install_functions, start_peer

    version = ensure_postgraphile()
    install_functions(url)
    at = datetime.now(timezone.utc).replace(microsecond=0).isoformat()
    peer = start_peer(url, 1, "0000.00000")
    found = {"postgraphile": version}
    try:
        async with httpx.AsyncClient(base_url=peer.base, timeout=300) as client:
            async def page(offset: int) -> None:
                body = (await client.post("/graphql", json={"query": PEER_PAGE,
                                                            "variables": {"at": at, "offset": offset}})).json()
                assert "errors" not in body and len(body["data"]["papersAt"]["nodes"]) == 100, body

            for name, offset in (("ARXIV_ID, first page", 0), ("ARXIV_ID, middle page", papers // 2)):
                ms = await median_ms(lambda: page(offset), repeat)
                found[name] = {"postgraphile_ms": round(ms, 1), "ratio_to_ours": round(ms / ours[name]["graphql_ms"], 1)}
                print(f"PostGraphile {name:28s} {found[name]}", flush=True)
    finally:
        peer.stop()
    return found


async def measure(url: str, repeat: int, with_peer: bool = False) -> dict:
    conn = await asyncpg.connect(url)
    # The floor is planned as the server plans its statements (app.db.pool.BEGIN): once, generically, no JIT.
    await conn.execute("SET plan_cache_mode = force_generic_plan; SET jit = off; SET max_parallel_workers_per_gather = 0")
    papers = await conn.fetchval("SELECT count(*) FROM paper_inbound_totals")
    mid_id = await conn.fetchval("SELECT arxiv_id FROM paper_inbound_totals ORDER BY arxiv_id OFFSET $1 LIMIT 1",
                                 papers // 2)
    mid_submitted = await conn.fetchrow("SELECT submitted_at, arxiv_id FROM paper_snapshots WHERE arxiv_id = $1 "
                                        "ORDER BY observed_at DESC LIMIT 1", mid_id)
    mid_total = await conn.fetchrow("SELECT total, arxiv_id FROM paper_inbound_totals ORDER BY -total, arxiv_id "
                                    "OFFSET $1 LIMIT 1", papers // 2)
    now = datetime.now(timezone.utc).replace(microsecond=0)
    category = await conn.fetchval("SELECT primary_category FROM paper_snapshots WHERE arxiv_id = $1 LIMIT 1", mid_id)
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--port", str(port)],
                              env={**os.environ, "DATABASE_URL": url},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    cases: dict[str, dict] = {}
    try:
        async with httpx.AsyncClient(base_url=base, timeout=120) as client:
            for _ in range(200):
                try:
                    if (await client.get("/readyz")).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.1)

            async def page(query: str, variables: dict) -> None:
                body = (await client.post("/graphql", json={"query": query, "variables": variables})).json()
                assert "errors" not in body, body

            plan = [
                ("ARXIV_ID, first page", PAGE, {"order": "ARXIV_ID"}, "ARXIV_ID", ("",)),  # after "": from the start
                ("ARXIV_ID, middle page", PAGE, {"order": "ARXIV_ID", "after": encode_browse("ARXIV_ID", [mid_id])},
                 "ARXIV_ID", (mid_id,)),
                ("SUBMITTED_AT, middle page", PAGE, {"order": "SUBMITTED_AT", "after": encode_browse(
                    "SUBMITTED_AT", [mid_submitted["submitted_at"].isoformat(), mid_id])},
                 "SUBMITTED_AT", (mid_submitted["submitted_at"], mid_id)),
                ("INBOUND_COUNT_DESC, first page", PAGE, {"order": "INBOUND_COUNT_DESC"}, "INBOUND_COUNT_DESC",
                 (2**62, "")),
                ("INBOUND_COUNT_DESC, middle page", PAGE, {"order": "INBOUND_COUNT_DESC", "after": encode_browse(
                    "INBOUND_COUNT_DESC", [mid_total["total"], mid_total["arxiv_id"]])}, "INBOUND_COUNT_DESC",
                 (mid_total["total"], mid_total["arxiv_id"])),
                ("category filter, middle page", PAGE, {"order": "ARXIV_ID", "filter": {"category": category},
                                                             "after": encode_browse("ARXIV_ID", [mid_id])}, None, ()),
                ("citesRetracted: true, first page", PAGE, {"order": "ARXIV_ID", "filter": {"citesRetracted": True}},
                 None, ()),
                ("works, first page", WORKS, {}, None, ()),
                ("works retracted: true, first page", WORKS, {"filter": {"retracted": True}}, None, ()),
            ]
            for name, query, variables, floor, args in plan:
                served = await median_ms(lambda: page(query, variables), repeat)
                found = {"graphql_ms": round(served, 1)}
                if floor is not None:  # the statement the server sends for this page, straight from asyncpg
                    sql = browse_sql(floor, None, True)
                    bound = (now, 101, None, None, None, *args)
                    found["sql_floor_ms"] = round(await median_ms(lambda: conn.fetch(sql, *bound), repeat), 1)
                    found["ratio"] = round(served / found["sql_floor_ms"], 1)
                cases[name] = found
                print(f"{name:40s} {found}", flush=True)
            naive = await median_ms(lambda: conn.fetch(FLOORS["naive INBOUND_COUNT_DESC"]), max(1, repeat // 2))
            cases["INBOUND_COUNT_DESC, naive: count every paper's citations, then sort"] = {"sql_ms": round(naive, 1)}
            print(f"naive INBOUND_COUNT_DESC page {naive:.0f} ms", flush=True)
    finally:
        server.terminate()
        server.wait(timeout=30)
        observations = await conn.fetchval("SELECT reltuples::bigint FROM pg_class WHERE relname = "
                                           "'citation_observations'")
        await conn.close()
    result = {"date": datetime.now(timezone.utc).isoformat(), "papers": papers, "observations_estimate": observations,
              "repeat": repeat, "cases": cases}
    if with_peer:
        result["peer"] = await peer_pages(url, papers, repeat, cases)
    return result


def report_lines() -> list[str]:
    """The "Enumeration" section of BENCHMARKS.md: the newest result of each graph size."""
    newest: dict[int, dict] = {}
    for path in sorted(RESULTS.glob("*.json")):
        r = json.loads(path.read_text())
        newest[r["papers"]] = r
    if not newest:
        return []
    lines = ["", "## Enumeration (`python bench/browse.py`)", "",
             "One page of 100 (browsePapers, works) over HTTP, median of several requests, beside its SQL floor (the "
             "statement the server sends for it, straight from asyncpg, planned as the server plans) in the same run; "
             "pages at the start and in the middle of the order; the category filter is the middle paper's category. "
             "The naive INBOUND_COUNT_DESC row is what a page would cost without the totals the database keeps: every "
             "paper's citations counted, then sorted.", ""]
    sizes = sorted(newest)
    lines += ["| page | " + " | ".join(f"{n:,} papers ({newest[n]['date'][:10]})" for n in sizes) + " |",
              "|---|" + "---|" * len(sizes)]
    for case in newest[sizes[-1]]["cases"]:
        cells = []
        for n in sizes:
            x = newest[n]["cases"].get(case, {})
            if "graphql_ms" in x:
                cells.append(f"{x['graphql_ms']} ms" + (f" (floor {x['sql_floor_ms']} ms)" if "sql_floor_ms" in x else ""))
            elif "sql_ms" in x:
                cells.append(f"{x['sql_ms']:,} ms (SQL alone)")
            else:
                cells.append("")
        lines.append(f"| {case} | " + " | ".join(cells) + " |")
    for n in sizes:
        peer = newest[n].get("peer")
        if peer:
            lines += ["", f"PostGraphile {peer['postgraphile']} at {n:,} papers, the same papers by arXiv id "
                      "(bench/peer.sql `papers_at`, paged by position as PostGraphile pages a function): "
                      + "; ".join(f"{case}: {x['postgraphile_ms']} ms, {x['ratio_to_ours']}x ours"
                                  for case, x in peer.items() if case != "postgraphile") + "."]
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--peer", action="store_true", help="also PostGraphile's pages of the same papers")
    args = parser.parse_args()
    result = asyncio.run(measure(args.database_url, args.repeat, args.peer))
    RESULTS.mkdir(parents=True, exist_ok=True)
    target = RESULTS / f"{result['date'][:10]}-{result['papers']}.json"
    target.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
