"""The stack's own floor beside the ceiling and pith-graph, one process each, in one run.

bench/peer.py holds pith-graph's Q2 against bench/ceiling.py (uvicorn + asyncpg, one statement, nothing
else). This asks what part of the gap the layers pith-graph keeps on every request cost before any
GraphQL or database work: uvicorn answering a fixed document (ceiling.py --constant), the same from one
Starlette route (ceiling.py --starlette: Starlette's own layers), pith-graph's
/healthz (the same uvicorn, Starlette's routing and exception layers, the request id and access line,
CORS, the body limit and disconnect watch, gzip; no database, no GraphQL), the ceiling's Q2, and
pith-graph's Q2 (a plan's statement), under wrk -t2 -c32, rounds interleaved. The ratios are the
reading: a figure alone on a shared machine says little.

    python bench/stack.py --database-url postgresql://.../pith_bench_10000 [--seconds 8 --rounds 3]
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
from datetime import date
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import peer  # noqa: E402


def wrk_get(base: str, path: str, seconds: int) -> float:
    out = subprocess.run(["wrk", "-t2", "-c32", f"-d{seconds}s", base + path], capture_output=True, text=True,
                         check=True).stdout
    if "Non-2xx" in out or "Socket errors" in out:
        raise AssertionError(f"{base}{path}: errors under load\n{out}")
    return float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))


def run(url: str, seconds: int, rounds: int, seed: int = 1) -> dict[str, Any]:
    ids, _ = asyncio.run(peer._papers(url, 1000, seed))
    def fixed(mode: str) -> peer.Running:  # ceiling.py without a database: --constant or --starlette
        port = peer.free_port()
        return peer.Running(mode, [sys.executable, str(peer.ROOT / "bench" / "ceiling.py"), "--port", str(port),
                                   f"--{mode}"], dict(os.environ), port, peer.payload("pith", "Q2", ids[0]))

    constant, starlette = fixed("constant"), fixed("starlette")
    ceiling = peer.start_ceiling(url, ids[0])
    pith = peer.start_pith(url, 1, ids[0])
    measures = {
        "uvicorn, a fixed document": lambda r: wrk_get(constant.base, "/", seconds),
        "Starlette, a fixed document from one route": lambda r: wrk_get(starlette.base, "/", seconds),
        "pith-graph /healthz (its layers, no database)": lambda r: wrk_get(pith.base, "/healthz", seconds),
        "ceiling Q2 (uvicorn + asyncpg)": lambda r: peer.wrk(ceiling.base, "pith", "Q2", ids, seconds, seed + r)["rps"],
        "pith-graph Q2": lambda r: peer.wrk(pith.base, "pith", "Q2", ids, seconds, seed + r)["rps"],
    }
    runs: dict[str, list[float]] = {name: [] for name in measures}
    try:
        for measure in measures.values():  # warm
            measure(0)
        for r in range(rounds):
            for name, measure in (measures.items() if r % 2 == 0 else reversed(measures.items())):
                runs[name].append(measure(r))
                peer.log(f"{name}: {runs[name][-1]:.0f} rps")
    finally:
        for server in (constant, starlette, ceiling, pith):
            server.stop()
    rps = {name: statistics.median(v) for name, v in runs.items()}
    names = list(measures)
    return {"date": date.today().isoformat(), "wrk": "wrk -t2 -c32", "seconds": seconds, "rounds": rounds,
            "cpus": os.cpu_count(), "load": os.getloadavg(),
            "runs": {name: {"rps": rps[name], "rps_runs": runs[name]} for name in names},
            "ratios": {"Starlette / fixed document": rps[names[1]] / rps[names[0]],
                       "healthz / Starlette": rps[names[2]] / rps[names[1]],
                       "healthz / fixed document": rps[names[2]] / rps[names[0]],
                       "healthz / ceiling Q2": rps[names[2]] / rps[names[3]],
                       "pith Q2 / ceiling Q2": rps[names[4]] / rps[names[3]],
                       "pith Q2 / healthz": rps[names[4]] / rps[names[2]]},
            "us_per_request": {name: 1e6 / rps[name] for name in names}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--save", help="write the result to this JSON file")
    args = parser.parse_args()
    result = run(args.database_url, args.seconds, args.rounds)
    print(json.dumps(result, indent=2))
    if args.save:
        Path(args.save).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
