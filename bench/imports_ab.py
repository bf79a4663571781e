"""Two versions of the code side by side on one Crossref refresh: one synthetic graph, the bench's Crossref file
(bench/imports.py) imported once, then monthly refreshes alternating the versions (so that the database, which grows
with every refresh, weighs on both alike). Each version is a checkout (e.g. `git worktree add /tmp/base <rev>`).

    python bench/imports_ab.py --before /tmp/base --after . [--works 200000] [--rounds 3]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.calibrate import graph_arguments, graph_database  # noqa: E402
from bench.imports import crossref_file  # noqa: E402


def refresh(code: str, url: str, path: Path, at: str) -> float:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "app.cli", "import", "crossref", "--observed-at", at, str(path)],
                          env={**os.environ, "DATABASE_URL": url, "PYTHONPATH": code}, cwd=code, capture_output=True)
    if done.returncode != 0:
        raise SystemExit(done.stderr.decode()[-2000:])
    return time.perf_counter() - started


def main() -> None:
    parser = graph_arguments(__doc__.splitlines()[0])
    parser.add_argument("--before", required=True)
    parser.add_argument("--after", default=str(ROOT))
    parser.add_argument("--works", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with graph_database(args, "pith_bench_ab") as url, tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "crossref.jsonl.gz"
        crossref_file(path, args.works)
        refresh(args.after, url, path, "2026-01-01T00:00:00Z")
        found: dict[str, list[float]] = {"before": [], "after": []}
        for month in range(2, 2 + 2 * args.rounds):
            name = "before" if month % 2 == 0 else "after"
            seconds = refresh(getattr(args, name), url, path, f"2026-{month:02d}-01T00:00:00Z")
            found[name].append(seconds)
            print(f"{name}: {seconds:.1f} s ({args.works / seconds:,.0f} works/s), load {os.getloadavg()[0]:.1f}",
                  flush=True)
    for name, runs in found.items():
        mean = sum(runs) / len(runs)
        print(f"{name}: mean {mean:.1f} s = {args.works / mean:,.0f} works/s")


if __name__ == "__main__":
    main()
