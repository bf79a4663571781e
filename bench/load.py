"""Loading a dump: `pith-graph load` of uncapped records into an empty database, then again (adds nothing).

    python bench/load.py                                   # synth --papers 20000, every 10th record, 2 rounds
    python bench/load.py --ndjson /tmp/sample.ndjson       # a file of v1 documents made before
    python bench/load.py --papers 20000 --every 10 --keep /tmp/sample.ndjson --rounds 3

The records are what `dump` writes (uncapped, one snapshot), of every `--every`-th paper of a
`synth --papers N --seed 1` graph. Each round creates a fresh migrated database, runs the real CLI
(`python -m app.cli load FILE`) into it, then the same load again, and drops it. For each load: wall
time, the loading process's CPU (user + system, from the child's rusage), the database's backend CPU is
what remains of the wall time while the client waits; documents a second; the load average at the start.

Writes bench/results/load/<date>-<papers>-every<k>.json. Not a test: timings on a shared machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

import asyncpg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.calibrate import _admin  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "load"


def _database(admin_url: str, prefix: str) -> tuple[str, str]:
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    asyncio.run(_admin(admin_url, f'CREATE DATABASE "{name}"'))
    return name, admin_url.rsplit("/", 1)[0] + "/" + name


def _drop(admin_url: str, name: str) -> None:
    asyncio.run(_admin(admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def _cli(url: str, *args: str) -> tuple[float, float, str]:
    """Run the CLI; (wall seconds, the child's CPU seconds, its standard error)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "app.cli", *args], env={**os.environ, "DATABASE_URL": url},
                          capture_output=True, text=True)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({done.returncode}): {done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stderr


async def _write_sample(url: str, every: int, path: Path) -> int:
    from app.cli import _record_bytes, command_session
    from app.timeparse import now_as_of

    conn = await asyncpg.connect(url)
    count = 0
    try:
        session = command_session(conn)
        try:
            ids = [r["arxiv_id"] for r in await session.fetch(
                "SELECT DISTINCT arxiv_id FROM paper_snapshots ORDER BY 1")][::every]
            as_of = now_as_of()
            with path.open("wb") as out:
                for start in range(0, len(ids), 100):
                    for data in await _record_bytes(session, ids[start:start + 100], as_of, uncapped=True):
                        if data is not None:
                            out.write(data + b"\n")
                            count += 1
        finally:
            await session.close()
    finally:
        await conn.close()
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--papers", type=int, default=20_000)
    parser.add_argument("--every", type=int, default=10, help="every k-th paper's record (in id order)")
    parser.add_argument("--ndjson", help="load this file instead of making one")
    parser.add_argument("--keep", help="keep the file made at this path")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--admin-url", default=os.environ.get("PITH_TEST_ADMIN_URL",
                                                              "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args()

    if args.ndjson:
        sample = Path(args.ndjson)
    else:
        sample = Path(args.keep or f"/tmp/pith-load-{uuid.uuid4().hex[:8]}.ndjson")
        name, url = _database(args.admin_url, "pith_bench_loadsrc")
        try:
            _cli(url, "migrate")
            _cli(url, "synth", "--papers", str(args.papers), "--seed", "1")
            made = asyncio.run(_write_sample(url, args.every, sample))
            print(f"wrote {made} records ({sample.stat().st_size / 1e6:.0f} MB) to {sample}", flush=True)
        finally:
            _drop(args.admin_url, name)
    documents = sum(1 for line in sample.open("rb") if line.strip())
    rounds = []
    try:
        for number in range(1, args.rounds + 1):
            name, url = _database(args.admin_url, "pith_bench_load")
            try:
                _cli(url, "migrate")
                found: dict = {"round": number, "load_average": os.getloadavg()[0]}
                for label in ("first", "again"):
                    wall, cpu, _ = _cli(url, "load", str(sample))
                    found[label] = {"wall_s": round(wall, 2), "client_cpu_s": round(cpu, 2),
                                    "documents_per_s": round(documents / wall, 1)}
                rounds.append(found)
                print(json.dumps(found), flush=True)
            finally:
                _drop(args.admin_url, name)
    finally:
        if not args.ndjson and not args.keep:
            sample.unlink(missing_ok=True)
    result = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "papers": args.papers,
              "every": args.every, "documents": documents, "bytes": sample.stat().st_size if sample.exists() else None,
              "command": " ".join(sys.argv), "cpus": os.cpu_count(), "rounds": rounds}
    if not args.no_save:
        RESULTS.mkdir(parents=True, exist_ok=True)
        out = RESULTS / f"{result['date'][:10]}-{args.papers}-every{args.every}.json"
        out.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
