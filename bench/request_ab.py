"""Versions of the request path side by side: one pith-graph process per checkout, Q2 (or Q1) under wrk, rounds
interleaved with the order rotated, each round's throughput and the server's CPU time per request.

Each version is a checkout (`git worktree add /tmp/before <rev>`), served from its own folder. The CPU a request
costs (the server process's user + system time over the round, divided by the requests it answered) is read beside
requests a second: on this shared 2-core machine a round's throughput moves 20% with the neighbours, and a change
worth 5% needs many rounds to tell apart (bench/results/request_ab/ keeps the runs BENCHMARKS.md cites).

    python bench/request_ab.py --database-url postgresql://.../pith_bench_10000 /tmp/before . [--rounds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
from datetime import date
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import peer  # noqa: E402


def serve(url: str, code: str, probe: dict) -> peer.Running:
    """`pith-graph serve` from the checkout `code` (one worker, the pool bench/peer.py gives pith-graph)."""
    port = peer.free_port()
    env = {**os.environ, "DATABASE_URL": url, "PITH_POOL_MAX": "16", "PITH_POOL_MIN": "4", "PITH_ACCESS_LOG": "0",
           "PYTHONPATH": code}
    return peer.Running(Path(code).name, [sys.executable, "-m", "app.cli", "serve", "--port", str(port), "--workers",
                                          "1"], env, port, probe, cwd=code)


def run(url: str, codes: list[str], question: str, rounds: int, seconds: int, seed: int = 1) -> dict[str, Any]:
    ids, _ = asyncio.run(peer._papers(url, 1000, seed))
    servers = {code: serve(url, code, peer.payload("pith", "Q2", ids[0])) for code in codes}
    rps: dict[str, list[float]] = {code: [] for code in codes}
    cpu: dict[str, list[float]] = {code: [] for code in codes}
    try:
        for server in servers.values():  # warm: plans learned, pool grown
            peer.wrk(server.base, "pith", question, ids, 2, 0)
        for r in range(rounds):
            order = codes[r % len(codes):] + codes[:r % len(codes)]
            for code in (order if r % 2 == 0 else order[::-1]):
                watched = psutil.Process(servers[code].process.pid)
                before = sum(watched.cpu_times()[:2])
                out = peer.wrk(servers[code].base, "pith", question, ids, seconds, seed + r)
                if out["errors"]:
                    raise SystemExit(f"{code}: errors under load")
                rps[code].append(out["rps"])
                cpu[code].append((sum(watched.cpu_times()[:2]) - before) / (out["rps"] * seconds) * 1e6)
                peer.log(f"{code}: {out['rps']:.0f} rps, {cpu[code][-1]:.0f} us of CPU a request")
    finally:
        for server in servers.values():
            server.stop()
    first = statistics.median(rps[codes[0]])
    return {"date": date.today().isoformat(), "question": question, "wrk": "wrk -t2 -c32", "seconds": seconds,
            "rounds": rounds, "cpus": os.cpu_count(), "load": os.getloadavg(),
            "versions": {code: {"commit": _commit(code), "rps": statistics.median(rps[code]), "rps_runs": rps[code],
                                "cpu_us_per_request": statistics.median(cpu[code]), "cpu_runs": cpu[code],
                                "rps_of_first": statistics.median(rps[code]) / first} for code in codes}}


def _commit(code: str) -> str | None:
    done = subprocess.run(["git", "-C", code, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", required=True, help="a database with a graph (pith-graph synth)")
    parser.add_argument("checkouts", nargs="+", help="folders of the versions; the first is the one compared with")
    parser.add_argument("--question", choices=("Q2", "Q1"), default="Q2")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--save", help="write the result here as JSON too")
    args = parser.parse_args()
    codes = [str(Path(c).resolve()) for c in args.checkouts]
    result = run(args.database_url, codes, args.question, args.rounds, args.seconds)
    text = json.dumps(result, indent=2)
    if args.save:
        Path(args.save).parent.mkdir(parents=True, exist_ok=True)
        Path(args.save).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
