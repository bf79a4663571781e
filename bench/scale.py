"""Research at scale: every documented question asked of a synthetic graph with a hub, over HTTP.

    pith-graph synth --papers 20000 [--hub-citations 150000]     # into an empty database
    python bench/scale.py --database-url postgresql://.../graph   # writes bench/results/scale-<date>-<papers>.json
    python bench/scale.py --report                                # rebuilds its section of BENCHMARKS.md

It serves the graph (`pith-graph serve`, one worker) and asks, for ordinary papers (a paper nobody
cites, the median paper, one at the 99th percentile of citations) and for the hub: every README example
query (the sample paper's id replaced by the paper's), the record, timeline(first: 20), recordDiff over the
whole span, citationsByYear, an inbound page, and the bulk route's whole inbound list; then every page of
every enumeration order and filter (browsePapers by ARXIV_ID, SUBMITTED_AT and INBOUND_COUNT_DESC, without
a filter, citesRetracted true and false, a category, a submission window; works without a filter and with
retracted true and false), recording the first, middle and last page and the slowest; then both research
recipes over the whole graph. Each line: HTTP status and error code, the price (extensions.cost.requested),
the work done (actual), and the time. Not part of the test suite (timings are the machine's).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timezone
from pathlib import Path
from typing import Any

import asyncpg
import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from app.cursors import encode_browse  # noqa: E402
from app.db.pool import BEGIN  # noqa: E402
from loaders.browse import browse_papers, browse_statement, browse_works, sort_key, works_sql  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "scale"
SECTION = "## Research at scale (`python bench/scale.py`)"
SAMPLE = "2402.15627"
SPAN = ("2026-01-01T00:00:00Z", "2026-12-01T00:00:00Z")

OPERATIONS = {
    "citationRecord": 'query($id: String!) { citationRecord(arxivId: $id) { contextDigest } }',
    "timeline(first: 20)": 'query($id: String!) { paper(arxivId: $id) { timeline(first: 20) { edges { node { at '
                           'contextDigest kinds } } pageInfo { hasNextPage endCursor } } } }',
    "recordDiff": 'query($id: String!) { recordDiff(arxivId: $id, from: "%s", to: "%s") { patch changesTruncated '
                  'changes { kind observedAt } } }' % SPAN,
    "recordDiff(maxChanges: 1)": 'query($id: String!) { recordDiff(arxivId: $id, from: "%s", to: "%s", maxChanges: 1) '
                                 '{ changesTruncated } }' % SPAN,
    "citationsByYear": 'query($id: String!) { paper(arxivId: $id) { citationsByYear { year count } } }',
    "inbound(first: 100)": 'query($id: String!) { paper(arxivId: $id) { inbound(first: 100) { totalCount edges { '
                           'node { observationId citingPaper { arxivId } resolution { status } standingNotice { '
                           'state } } } } } }',
}
ORDERS = ("ARXIV_ID", "SUBMITTED_AT", "INBOUND_COUNT_DESC")
BROWSE = """query($filter: PaperFilter, $order: PaperOrder!, $after: String) {
  browsePapers(filter: $filter, orderBy: $order, first: 100, after: $after) {
    nodes { arxivId } pageInfo { hasNextPage endCursor } } }"""
WORKS = """query($filter: WorkFilter, $after: String) { works(filter: $filter, first: 100, after: $after) {
  nodes { workId } pageInfo { hasNextPage endCursor } } }"""


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def readme_operations() -> list[tuple[str, str]]:
    """Every operation of the README's graphql blocks (a block may hold several), with no placeholder."""
    text = (ROOT / "README.md").read_text()
    found = []
    for block in re.findall(r"```graphql\n(.*?)```", text, re.S):
        lines = [line for line in block.splitlines() if not line.lstrip().startswith("#")]
        body, depth, start = "\n".join(lines), 0, None
        for i, ch in enumerate(body):
            if ch == "{":
                if depth == 0:
                    start = i
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0 and start is not None:
                    head = body[:start].rsplit("\n", 1)[-1]
                    operation = (head if head.strip().startswith("query") else "") + body[start:i + 1]
                    if "<" not in operation:
                        found.append((f"README {len(found) + 1}", operation.strip()))
                    start = None
    return found


class Client:
    def __init__(self, base: str) -> None:
        self.http = httpx.AsyncClient(base_url=base, timeout=120)

    async def ask(self, query: str, variables: dict | None = None) -> dict:
        started = time.perf_counter()
        response = await self.http.post("/graphql", json={"query": query, "variables": variables or {}})
        ms = (time.perf_counter() - started) * 1000
        body = response.json()
        cost = (body.get("extensions") or {}).get("cost") or {}
        codes = sorted({(e.get("extensions") or {}).get("code", "?") for e in body.get("errors") or ()})
        return {"status": response.status_code, "codes": codes, "requested": cost.get("requested"),
                "actual": cost.get("actual"), "ms": round(ms, 1), "body": body,
                "message": (body.get("errors") or [{}])[0].get("message", "")[:300] if body.get("errors") else ""}


def line(name: str, r: dict) -> dict:
    return {"case": name, "status": r["status"], "codes": r["codes"], "requested": r["requested"],
            "actual": r["actual"], "ms": r["ms"], **({"message": r["message"]} if r["message"] else {})}


async def pick_papers(url: str) -> dict[str, str]:
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch("SELECT c.arxiv_id, c.inbound FROM paper_observation_counts AS c "
                                "JOIN (SELECT DISTINCT arxiv_id FROM paper_snapshots) AS s USING (arxiv_id) "
                                "ORDER BY c.inbound, c.arxiv_id")
        uncited = await conn.fetchval("SELECT min(s.arxiv_id) FROM paper_snapshots AS s WHERE NOT EXISTS "
                                      "(SELECT 1 FROM paper_observation_counts AS c WHERE c.arxiv_id = s.arxiv_id "
                                      "AND c.inbound > 0)")
    finally:
        await conn.close()
    return {"uncited": uncited or rows[0][0], "median": rows[len(rows) // 2][0],
            "p99": rows[int(len(rows) * 0.99)][0], "hub": rows[-1][0]}


async def walk(client: Client, query: str, field: str, variables: dict) -> dict:
    pages, ids, after = [], [], None
    while True:
        r = await client.ask(query, {**variables, "after": after})
        data = (r["body"].get("data") or {}).get(field)
        pages.append({k: r[k] for k in ("status", "codes", "requested", "actual", "ms")})
        if data is None:
            break
        ids += [n.get("arxivId") or n.get("workId") for n in data["nodes"]]
        if not data["pageInfo"]["hasNextPage"]:
            break
        after = data["pageInfo"]["endCursor"]
    times = [p["ms"] for p in pages]
    failed = [p for p in pages if p["status"] != 200 or p["codes"]]
    return {"pages": len(pages), "items": len(ids), "distinct": len(set(ids)), "first_ms": times[0],
            "middle_ms": times[len(times) // 2], "last_ms": times[-1], "max_ms": max(times),
            "median_ms": statistics.median(times), "failed": failed[:3], "price": pages[0]["requested"],
            "actual": pages[0]["actual"], "ids": sorted(ids)}


def _literal(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, (int, float)):
        return str(value)
    text = value.isoformat() if isinstance(value, datetime) else str(value)
    return "'" + text.replace("'", "''") + "'"


def _scanned(plan: dict) -> int:
    own = 0
    if "Scan" in plan["Node Type"]:
        own = (plan.get("Actual Rows", 0) + plan.get("Rows Removed by Filter", 0)) * plan.get("Actual Loops", 1)
    return own + sum(_scanned(p) for p in plan.get("Plans", ()))


async def explained(url: str, field: str, variables: dict, after: list | None) -> dict:
    """EXPLAIN ANALYZE of a page's statement as the pool runs it: PREPAREd, under force_generic_plan."""
    f = variables.get("filter") or {}
    at = datetime.now(UTC)
    if field == "browsePapers":
        window = [datetime.fromisoformat(f[k].replace("Z", "+00:00")) if f.get(k) else None
                  for k in ("submittedFrom", "submittedTo")]
        sql, sent = browse_statement(variables["order"], f.get("citesRetracted"), after, at, 101, f.get("category"),
                                     *window)
        args = list(sent)
    else:
        sql = works_sql(f.get("retracted"), after is not None)
        args = [at, 101, None, None, *(after or ())]
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(BEGIN.format(ms=600_000))
        await conn.execute(f"PREPARE page AS {sql}")
        row = await conn.fetchval("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE page("
                                  + ", ".join(_literal(a) for a in args) + ")")
    finally:
        await conn.close()
    plan = json.loads(row)[0]
    return {"rows_read": _scanned(plan["Plan"]), "ms": round(plan["Execution Time"], 2),
            "generic": "$1" in json.dumps(plan["Plan"])}


async def every_key(url: str, field: str, variables: dict) -> list[tuple[str, str | None, list]]:
    """Every item of a list in its order with the cursor of the page after it (and the loader's key),
    through the loader itself (pages of 5,000 on a connection of its own, read as the pool reads)."""
    conn = await asyncpg.connect(url)
    found: list[tuple[str, str | None, list]] = []
    try:
        await conn.execute(BEGIN.format(ms=600_000))
        at, after = datetime.now(UTC), None
        f = variables.get("filter") or {}
        while True:
            if field == "browsePapers":
                order = variables["order"]
                window = [datetime.fromisoformat(f[k].replace("Z", "+00:00")) if f.get(k) else None
                          for k in ("submittedFrom", "submittedTo")]
                page = await browse_papers(conn, at, 5000, order, f.get("category"), *window,
                                           f.get("citesRetracted"), after)
                for paper, inbound in page.papers:
                    key = sort_key(order, paper, inbound)
                    after = [paper.submitted_at, paper.arxiv_id] if order == "SUBMITTED_AT" else key
                    found.append((paper.arxiv_id, encode_browse(order, key), after))
            else:
                page = await browse_works(conn, at, 5000, f.get("retracted"), None, None, after)
                for work in page.works:
                    found.append((str(work.work_id), encode_browse("works", [str(work.work_id)]), [work.work_id]))
                    after = work.work_id
            if not page.more:
                return found
    finally:
        await conn.close()


async def sampled(client: Client, url: str, query: str, field: str, variables: dict, pages: int) -> dict:
    """The first page, `pages` pages spread evenly through the list, and the last, over HTTP, each from the
    cursor of the item before it; the list itself is read whole through the loader (every item, its order)."""
    keys = await every_key(url, field, variables)
    late = keys[max(0, len(keys) * 9 // 10 - 1)][2] if len(keys) > 100 else None
    plans = {"first": await explained(url, field, variables, None),
             "late": await explained(url, field, variables, late) if late else None}
    starts = sorted({0, *(round(i * len(keys) / (pages + 1)) // 100 * 100 for i in range(1, pages + 1)),
                     max(0, (len(keys) - 1) // 100 * 100)})
    timed = []
    for start in starts:
        r = await client.ask(query, {**variables, "after": keys[start - 1][1] if start else None})
        data = (r["body"].get("data") or {}).get(field) or {"nodes": []}
        got = [n.get("arxivId") or n.get("workId") for n in data["nodes"]]
        timed.append({**{k: r[k] for k in ("status", "codes", "requested", "actual", "ms")},
                      "agrees": got == [k for k, _, _ in keys[start:start + 100]]})
    times = [p["ms"] for p in timed]
    failed = [p for p in timed if p["status"] != 200 or p["codes"] or not p["agrees"]]
    return {"pages": (len(keys) + 99) // 100 or 1, "timed": len(timed), "items": len(keys),
            "distinct": len({k for k, _, _ in keys}), "plans": plans, "first_ms": times[0], "middle_ms": times[len(times) // 2],
            "last_ms": times[-1], "max_ms": max(times), "median_ms": statistics.median(times),
            "failed": failed[:3], "price": timed[0]["requested"], "actual": timed[0]["actual"],
            "ids": sorted(k for k, _, _ in keys)}


async def bulk(client: Client, arxiv_id: str) -> dict:
    started = time.perf_counter()
    rows = 0
    async with client.http.stream("GET", f"/paper/{arxiv_id}/inbound.ndjson") as response:
        async for chunk in response.aiter_lines():
            rows += bool(chunk)
        status, price = response.status_code, response.headers.get("x-cost-requested")
    return {"case": "bulk inbound.ndjson (whole list)", "status": status, "codes": [],
            "requested": int(price) if price else None, "actual": rows, "rows": rows,
            "ms": round((time.perf_counter() - started) * 1000, 1)}


def recipe(args: list[str], base: str) -> dict:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, *args, "--url", base + "/graphql"], cwd=ROOT / "examples",
                          capture_output=True, text=True, timeout=1800)
    return {"case": "recipe " + " ".join(a for a in args if not a.startswith("/")), "status": done.returncode,
            "rows": max(0, len(done.stdout.splitlines()) - 1), "ms": round((time.perf_counter() - started) * 1000, 1),
            "stderr": done.stderr.strip().splitlines()[-1:] if done.stderr.strip() else []}


async def measure(url: str, port: int, sample: int | None, growth: list[str], parts: set[str],
                  lists: str | None) -> dict:
    env = {**os.environ, "DATABASE_URL": url, "PITH_PORT": str(port)}
    # The server's log is kept (its path printed): a list cut or an operation failed is explained there.
    server_log = tempfile.NamedTemporaryFile("w", prefix="pith-scale-server-", suffix=".log", delete=False)
    log(f"server log: {server_log.name}")
    server = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--port", str(port)], cwd=ROOT, env=env,
                              stdout=server_log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        client = Client(base)
        papers = await pick_papers(url)
        conn = await asyncpg.connect(url)
        try:
            count = await conn.fetchval("SELECT count(DISTINCT arxiv_id) FROM paper_snapshots")
            sizes = {k: dict(await conn.fetchrow("SELECT inbound, outbound FROM paper_observation_counts WHERE "
                                                 "arxiv_id = $1", v) or {"inbound": 0, "outbound": 0})
                     for k, v in papers.items()}
        finally:
            await conn.close()
        log(f"{count:,} papers; {papers}; {sizes}")
        if sample is None:
            sample = 0 if count <= 100_000 else 30

        async def listed(query: str, field: str, variables: dict) -> dict:
            if sample:
                return await sampled(client, url, query, field, variables, sample)
            return await walk(client, query, field, variables)
        result: dict[str, Any] = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "papers": count,
                                  "chosen": papers, "sizes": sizes, "operations": {}, "enumeration": {},
                                  "recipes": [], "load": os.getloadavg()}
        readme = readme_operations()
        result["parts"] = sorted(parts) + ([f"lists with {lists!r}"] if lists else [])
        for role, arxiv_id in papers.items() if "operations" in parts else ():
            lines = []
            for name, query in OPERATIONS.items():
                lines.append(line(name, await client.ask(query, {"id": arxiv_id})))
            for name, query in readme:
                lines.append(line(name, await client.ask(query.replace(SAMPLE, arxiv_id))))
            lines.append(await bulk(client, arxiv_id))
            result["operations"][role] = lines
            log(f"{role}: " + "; ".join(f"{x['case']} {x['status']}{x['codes'] or ''} {x['ms']} ms" for x in lines))
        filters = {"none": None, "citesRetracted: true": {"citesRetracted": True},
                   "citesRetracted: false": {"citesRetracted": False}, "category cs.LG": {"category": "cs.LG"},
                   "submitted 2019": {"submittedFrom": "2019-01-01T00:00:00Z", "submittedTo": "2019-12-31T23:59:59Z"},
                   # the README's example: a category and a recent window
                   "category cs.DC submitted 2025": {"category": "cs.DC", "submittedFrom": "2025-01-01T00:00:00Z",
                                                     "submittedTo": "2025-12-31T23:59:59Z"}}
        for label, value in filters.items() if "enumeration" in parts else ():
            if lists and lists.lower() not in label.lower():
                continue
            sets = []
            for order in ORDERS:
                found = await listed(BROWSE, "browsePapers", {"filter": value, "order": order})
                sets.append(found.pop("ids"))
                result["enumeration"][f"browsePapers {order}, {label}"] = found
                log(f"browsePapers {order} {label}: {found['pages']} pages, max {found['max_ms']} ms")
            result["enumeration"][f"browsePapers {label}: same papers in every order"] = {
                "same": all(s == sets[0] for s in sets), "items": len(sets[0])}
        for label, value in {"none": None, "retracted: true": {"retracted": True},
                             "retracted: false": {"retracted": False}}.items() if "enumeration" in parts else ():
            if lists and lists.lower() not in label.lower():
                continue
            found = await listed(WORKS, "works", {"filter": value})
            found.pop("ids")
            result["enumeration"][f"works, {label}"] = found
            log(f"works {label}: {found['pages']} pages, max {found['max_ms']} ms")
        if "recipes" not in parts:
            pass
        elif growth:
            result["recipes"].append(recipe(["retracted_references.py"], base))
            result["recipes"].append(recipe(["citation_growth.py", *growth], base))
        else:
            result["recipes"].append(recipe(["retracted_references.py"], base))
            result["recipes"].append(recipe(["citation_growth.py", "--submitted-from", "1990-01-01T00:00:00Z"], base))
            result["recipes"].append(recipe(["citation_growth.py", "--category", "cs.LG"], base))
        log(f"recipes: {result['recipes']}")
        await client.http.aclose()
        return result
    finally:
        server.terminate()
        server.wait(timeout=30)


def plan_text(plans: dict | None) -> str:
    if not plans:
        return ""
    shown = [f"{p['rows_read']:,} ({p['ms']} ms)" if p else "-" for p in (plans["first"], plans.get("late"))]
    return " / ".join(shown)


def report_lines() -> list[str]:
    newest: dict[tuple[int, int], dict] = {}
    for path in sorted(RESULTS.glob("*.json")):
        r = json.loads(path.read_text())
        if any(str(p).startswith("lists with") for p in r.get("parts", ())):
            continue  # a few lists measured apart: not a scale's result (its file keeps it)
        newest[(r["papers"], r["sizes"]["hub"]["inbound"])] = r
    readme = {name: " ".join(op.split())[:70] for name, op in readme_operations()}
    lines = ["", SECTION, "",
             "Status is the HTTP status and any error code; price is extensions.cost.requested (work units, the "
             "bulk route's X-Cost-Requested), actual the work done (extensions.cost.actual; for the bulk route the "
             "rows sent); times are single requests on a loaded machine. README rows are the README's example "
             "operations with the sample paper's id replaced by the paper's (operations naming no paper answer "
             "the same for every paper).", ""]
    if not any(n >= 1_000_000 for n, _ in newest):
        lines += ["Not yet run at 1,000,000 papers with a 150,000-citation hub (`synth --papers 1000000 "
                  "--hub-citations 150000`; the synth alone took about 49 minutes on an idle machine here).", ""]
    for (n, hub), r in sorted(newest.items()):
        lines += [f"### {n:,} papers, a hub of {hub:,} citations ({r['date'][:10]}; load average {', '.join(f'{x:.1f}' for x in r['load'])} "
                  "at the start, a 2-core machine shared with other work)", "",
                  *([f"Only part of the run: {', '.join(r['parts'])}.", ""]
                    if r.get("parts") and r["parts"] != ["enumeration", "operations", "recipes"] else []),
                  "Papers asked about: " + ", ".join(f"{role} {a} ({r['sizes'][role]['inbound']:,} citing, "
                                                      f"{r['sizes'][role]['outbound']} references)"
                                                      for role, a in r["chosen"].items()) + ".", "",
                  "| paper | operation | status | price | actual | ratio | time |", "|---|---|---|---|---|---|---|"]
        for role, ops in r["operations"].items():
            for x in ops:
                status = f"{x['status']} {' '.join(x['codes'])}".strip()
                ratio = (f"{x['requested'] / x['actual']:.1f}x" if x.get("requested") and x.get("actual") else "")
                case = readme.get(x["case"], x["case"]) if x["case"].startswith("README") else x["case"]
                case = "`" + case.replace("|", "/").replace("`", "") + "`" if x["case"].startswith("README") else case
                lines.append(f"| {role} | {case} | {status} | {x.get('requested') or ''} | "
                             f"{x.get('actual') or ''} | {ratio} | {x['ms']:,} ms |")
        timed = [x.get("timed") for x in r["enumeration"].values() if "timed" in x]
        lines += ["", ("Every page of 100 of every enumeration order and filter, through to the end:" if not timed else
                       f"Pages of 100 of every enumeration order and filter: each list read whole through the loader "
                       f"(its items, in order, the same in every order), and over HTTP its first page, "
                       f"{max(timed) - 2} pages spread evenly through it and its last (each checked against the "
                       f"loader's items):"), "",
                  "| list | pages | timed | items | first | middle | last | slowest | median | failed | rows read, first / "
                  "late page (EXPLAIN, generic plan) |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for case, x in r["enumeration"].items():
            if "same" in x:
                lines.append(f"| {case} | | | {x['items']} | {'yes' if x['same'] else 'NO'} | | | | | | |")
            else:
                lines.append(f"| {case} | {x['pages']} | {x.get('timed', x['pages'])} | {x['items']} | {x['first_ms']} ms | {x['middle_ms']} ms | "
                             f"{x['last_ms']} ms | {x['max_ms']} ms | {x['median_ms']:.1f} ms | {len(x['failed'])} | "
                             f"{plan_text(x.get('plans'))} |")
        lines += ["", "| recipe | exit | rows | time |", "|---|---|---|---|"]
        for x in r["recipes"]:
            lines.append(f"| {x['case']} | {x['status']} | {x['rows']:,} | {x['ms'] / 1000:,.1f} s |")
    return lines


def write_report() -> None:
    path = ROOT / "BENCHMARKS.md"
    text = path.read_text()
    section = "\n".join(report_lines()) + "\n"
    if SECTION in text:
        start = text.index(SECTION)
        end = text.find("\n## ", start + len(SECTION))
        text = text[:start].rstrip("\n") + "\n" + section + (text[end:] if end != -1 else "")
    else:
        text = text.rstrip("\n") + "\n" + section
    path.write_text(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", help="a graph written by pith-graph synth")
    parser.add_argument("--port", type=int, default=8791)
    parser.add_argument("--report", action="store_true", help="rebuild the section of BENCHMARKS.md")
    parser.add_argument("--sample", type=int, help="time this many pages spread through each list besides the first "
                        "and last (each list is still read whole, through the loader); default: every page up to "
                        "100,000 papers, else 30")
    parser.add_argument("--growth", nargs="*", default=[], help="citation_growth.py's arguments instead of the "
                        "whole graph and cs.LG (e.g. --submitted-from 2019-01-01T00:00:00Z --submitted-to ...)")
    parser.add_argument("--parts", default="operations,enumeration,recipes",
                        help="which parts to run (comma-separated; default all three)")
    parser.add_argument("--lists", help="only the enumeration lists whose filter names this (e.g. retracted)")
    args = parser.parse_args()
    if args.database_url:
        result = asyncio.run(measure(args.database_url, args.port, args.sample, args.growth,
                                     set(args.parts.split(",")), args.lists))
        RESULTS.mkdir(parents=True, exist_ok=True)
        part = "-part" if args.lists or set(args.parts.split(",")) != {"operations", "enumeration", "recipes"} else ""
        if args.lists:  # a few lists: a file of their own, never over a whole part's
            part += "-" + re.sub(r"[^a-z0-9]+", "-", args.lists.lower()).strip("-")
        target = RESULTS / f"{result['date'][:10]}-{result['papers']}-hub{result['sizes']['hub']['inbound']}{part}.json"
        if part and target.exists() and not args.lists:
            # Parts run apart the same day on the same graph make one result: the parts this run did replace
            # theirs, the others' stay (each part says when it ran).
            earlier = json.loads(target.read_text())
            done = set(args.parts.split(","))
            for name in ("operations", "enumeration", "recipes"):
                if name not in done and earlier.get(name):
                    result[name] = earlier[name]
                    result.setdefault("part_dates", {})[name] = earlier.get("part_dates", {}).get(name, earlier["date"])
            result["parts"] = sorted(set(result["parts"]) | set(earlier.get("parts", ())))
        target.write_text(json.dumps(result, indent=2) + "\n")
        log(f"wrote {target}")
    if args.report or args.database_url:
        write_report()
    return 0


if __name__ == "__main__":
    sys.exit(main())
