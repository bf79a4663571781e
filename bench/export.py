"""Whole-graph export at scale: peak memory and time of `pith-graph graph-export` in each format.

    python bench/export.py --scale 100000            # writes bench/results/export/<date>-<scale>.json
    python bench/run.py --report                     # BENCHMARKS.md then has a "Graph export" section

The exporter streams, so its peak memory should not grow with the graph; this measures it (the peak
resident set of the exporter process alone) next to the graph's size, and checks that the export holds
exactly as many edges as the database has visible observations.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "export"
FORMATS = ("csv", "graphml", "ndjson", "parquet")

# Fork from a small process: on Linux a child's peak RSS counts what its parent held when it forked,
# so measuring from inside a large process (a test runner) would report the runner.
_LAUNCH = """import json, os, sys
pid = os.fork()
if pid == 0:
    os.execvpe(sys.argv[1], sys.argv[1:], os.environ)
_, status, usage = os.wait4(pid, 0)
sys.stderr.write("\\n" + json.dumps({"exit": os.waitstatus_to_exitcode(status), "peak_kb": usage.ru_maxrss}) + "\\n")
"""


def measured(argv: list[str], env: dict[str, str], timeout: float = 3600) -> dict[str, Any]:
    """Run argv; its exit status, peak resident set (MB), wall seconds and standard error."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", _LAUNCH, *argv], env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, timeout=timeout)
    seconds = time.monotonic() - started
    lines = done.stderr.decode(errors="replace").rstrip().splitlines()
    figures = json.loads(lines[-1])
    return {"exit": figures["exit"], "peak_mb": figures["peak_kb"] / 1024, "seconds": seconds,
            "stderr": "\n".join(lines[:-1])}


def size_of(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*")) if path.is_dir() else path.stat().st_size


def run(admin: str, scale: int, seed: int, reuse: bool, keep: bool) -> dict[str, Any]:
    import asyncpg

    sys.path.insert(0, str(ROOT))
    from bench.run import drop_bench_database, log, setup

    url, data = asyncio.run(setup(admin, scale, seed, reuse))
    try:
        async def facts() -> tuple[str, int, str]:
            conn = await asyncpg.connect(url)
            try:
                now = await conn.fetchval("SELECT date_trunc('second', now())")
                visible = await conn.fetchval("SELECT count(*) FROM citation_observations WHERE visible_from <= $1",
                                              now)
                size = await conn.fetchval("SELECT pg_size_pretty(pg_database_size(current_database()))")
                return now.isoformat().replace("+00:00", "Z"), visible, size
            finally:
                await conn.close()

        as_of, visible, size = asyncio.run(facts())
        result: dict[str, Any] = {"scale": scale, "date": datetime.now(timezone.utc).isoformat(), "as_of": as_of,
                                  "visible_observations": visible, "database": size,
                                  "command": "python " + " ".join(sys.argv), "formats": {}}
        with tempfile.TemporaryDirectory() as folder:
            for format in FORMATS:
                target = Path(folder) / f"graph.{format}"
                log(f"graph-export --format {format} ({scale:,} papers)")
                figures = measured([sys.executable, "-m", "app.cli", "graph-export", "--format", format, "--as-of",
                                    as_of, "--output", str(target)], {**os.environ, "DATABASE_URL": url})
                summary = figures["stderr"].strip().splitlines()[-1] if figures["stderr"].strip() else ""
                edges = int(summary.split(" nodes, ")[1].split(" edges")[0].replace(",", "")) if figures["exit"] == 0 \
                    else None
                result["formats"][format] = {
                    "exit": figures["exit"], "peak_rss_mb": round(figures["peak_mb"], 1),
                    "seconds": round(figures["seconds"], 1), "bytes": size_of(target) if target.exists() else None,
                    "summary": summary, "edges": edges, "edges_equal_visible": edges == visible}
                log(f"  {result['formats'][format]}")
                shutil.rmtree(target) if target.is_dir() else target.unlink(missing_ok=True)
        result["bulk"] = data
        return result
    finally:
        if not (keep or reuse):
            asyncio.run(drop_bench_database(admin, scale))


def report_lines() -> list[str]:
    """The "Graph export" section of BENCHMARKS.md, from the newest result of each scale."""
    latest: dict[int, dict] = {}
    for path in sorted(RESULTS.glob("*.json")):
        r = json.loads(path.read_text())
        latest[r["scale"]] = r
    if not latest:
        return []
    lines = ["", "## Graph export (`pith-graph graph-export`, uncapped, streamed)", "",
             "Peak resident memory of the exporter process alone, and wall time, for the whole graph as of the "
             "run's instant; `python bench/export.py --scale N`.", "",
             "| papers | visible observations | format | edges written (= visible?) | peak RSS | time | output |",
             "|---|---|---|---|---|---|---|"]
    for scale, r in sorted(latest.items()):
        for format, f in r["formats"].items():
            same = "yes" if f["edges_equal_visible"] else "NO"
            written = f"{f['edges']:,} ({same})" if f["edges"] is not None else f"failed (exit {f['exit']})"
            output = f"{f['bytes'] / 1e6:,.0f} MB" if f["bytes"] else "-"
            lines.append(f"| {scale:,} | {r['visible_observations']:,} | {format} | {written} | "
                         f"{f['peak_rss_mb']:.0f} MB | {f['seconds']:.0f} s | {output} |")
    lines += ["", "CSV, GraphML and ndjson write one row at a time; Parquet holds one row group (50,000 rows) and "
              "pyarrow, so its peak is higher but just as flat in the graph's size. Times are wall time on this "
              "shared 2-core host, PostgreSQL included."]
    lines += ["", "Runs: " + "; ".join(f"{s:,} papers {r['date'][:10]} (`{r['command']}`, database {r['database']})"
                                       for s, r in sorted(latest.items()))]
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--reuse", action="store_true", help="reuse the benchmark database of this scale")
    parser.add_argument("--keep", action="store_true", help="keep the benchmark database")
    parser.add_argument("--admin-url", default=os.environ.get("PITH_BENCH_ADMIN_URL",
                                                              "postgresql://postgres@127.0.0.1:5432/postgres"))
    args = parser.parse_args()
    result = run(args.admin_url, args.scale, args.seed, args.reuse, args.keep)
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{datetime.now(timezone.utc):%Y-%m-%d}-{args.scale}.json"
    path.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(f"wrote {path}", file=sys.stderr)
    return 0 if all(f["exit"] == 0 and f["edges_equal_visible"] for f in result["formats"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
