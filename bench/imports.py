"""Import rates of the real-source importers: Retraction Watch rows and Crossref works per second.

The real samples (tests/data/sources) scaled up: Crossref works repeated with DOIs of their own (the
2025 JSON-lines layout, gzipped), Retraction Watch rows in the published layout, one in 20 naming a DOI
the graph's works have (so the row attaches to works that arXiv papers cite), the rest new DOIs. Each file is
imported by `pith-graph import` into a synthetic graph, timed from the command's start to its end,
then imported again at the same instant (idempotent: nothing added). Results go to
bench/results/imports/ and the "Real-source imports" section of BENCHMARKS.md.

    python bench/imports.py [--papers 10000] [--rows 200000] [--works 50000]
"""

from __future__ import annotations

import asyncio
import csv
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import asyncpg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.calibrate import graph_arguments, graph_database  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "imports"
DATA = ROOT / "tests" / "data" / "sources"
TARGETS = {"retraction-watch": 20_000, "crossref": 5_000}  # records per second
HEADER = ("Record ID,Title,Subject,Institution,Journal,Publisher,Country,Author,URLS,ArticleType,RetractionDate,"
          "RetractionDOI,RetractionPubMedID,OriginalPaperDate,OriginalPaperDOI,OriginalPaperPubMedID,"
          "RetractionNature,Reason,Paywalled,Notes,")
# One row in KNOWN_EVERY names a DOI the graph's works have (each its own): most retracted papers are
# cited by no arXiv paper of a graph, and every event on a cited work fans out to a change-log row per
# citing paper (the subscribers' standingChanged), which is what dominates an import's time.
KNOWN_EVERY = 20
NATURES = ("Retraction", "Correction", "Expression of concern", "Retraction", "Reinstatement")


async def graph_dois(url: str) -> list[str]:
    conn = await asyncpg.connect(url)
    try:
        return [r["doi"] for r in await conn.fetch("SELECT DISTINCT doi FROM work_snapshots WHERE doi IS NOT NULL")]
    finally:
        await conn.close()


def retraction_watch_file(path: Path, rows: int, known: list[str]) -> None:
    with path.open("w", newline="") as f:
        f.write(HEADER + "\r\n")
        writer = csv.writer(f)
        for i in range(rows):
            doi = known[(i // KNOWN_EVERY) % len(known)].upper() if known and i % KNOWN_EVERY == 0 else f"10.5555/RW.{i}"
            writer.writerow([i + 1, f"Constructed paper {i}", "(BIO) Biology;", "Institute", "Journal", "Publisher",
                             "Country", "A. Author;B. Author", "", "Research Article;", f"{1 + i % 12}/{1 + i % 28}/2021 0:00",
                             f"10.5555/notice.{i}", "0", "3/4/2019 0:00", doi, "0", NATURES[i % len(NATURES)],
                             "+Error in Data;", "No", "", ""])


def crossref_file(path: Path, works: int) -> None:
    samples = []
    for name in ("1item.json.gz", "3items.json.gz", "funded.json.gz", "same-author.json.gz"):
        samples += json.loads(gzip.open(DATA / name).read())["items"]
    with gzip.open(path, "wt") as f:
        for i in range(works):
            item = dict(samples[i % len(samples)])
            item["DOI"] = f"10.5555/CR.{i}"
            if i % 10 == 0:
                item["updated-by"] = [{"type": "retraction", "DOI": f"10.5555/crn.{i}", "source": "publisher",
                                       "updated": {"date-time": "2025-01-01T00:00:00Z"}}]
            f.write(json.dumps(item) + "\n")


def timed_import(url: str, source: str, path: Path, at: str) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "app.cli", "import", source, "--observed-at", at, str(path)],
                          env={**os.environ, "DATABASE_URL": url}, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{source} import failed: {done.stderr[-2000:]}")
    return seconds, done.stderr.strip().splitlines()[-1]


def report_lines() -> list[str]:
    """The "Real-source imports" section of BENCHMARKS.md, from the newest result."""
    found = sorted(RESULTS.glob("imports-*.json"))
    if not found:
        return []
    r = json.loads(found[-1].read_text())
    lines = ["", "## Real-source imports (`python bench/imports.py`)", "",
             f"{r['date'][:10]}, `{r['command']}`, into a {r['papers']:,}-paper synthetic graph; the time of the whole "
             "command (start-up, reading, staging, merging, change log), then the same file again at the same instant.",
             "", "| source | records | seconds | records/s | target | again (adds nothing) |", "|---|---|---|---|---|---|"]
    for source, x in r["sources"].items():
        met = "met" if x["rate"] >= TARGETS[source] else "MISSED"
        lines.append(f"| {source} | {x['records']:,} | {x['seconds']:.1f} | **{x['rate']:,.0f}** | "
                     f">= {TARGETS[source]:,} ({met}) | {x['again_seconds']:.1f} s: {x['again_summary']} |")
    return lines


def main() -> None:
    parser = graph_arguments(__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--works", type=int, default=50_000)
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args()
    result: dict = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "papers": args.papers,
                    "command": "python bench/imports.py " + " ".join(sys.argv[1:]), "sources": {}}
    with graph_database(args, "pith_bench_imports") as url, tempfile.TemporaryDirectory() as folder:
        known = asyncio.run(graph_dois(url))
        files = {"retraction-watch": (Path(folder) / "rw.csv", args.rows),
                 "crossref": (Path(folder) / "crossref.jsonl.gz", args.works)}
        retraction_watch_file(files["retraction-watch"][0], args.rows, known)
        crossref_file(files["crossref"][0], args.works)
        for n, (source, (path, records)) in enumerate(files.items()):
            at = f"2026-12-01T0{n}:00:00Z"
            seconds, summary = timed_import(url, source, path, at)
            again, again_summary = timed_import(url, source, path, at)
            result["sources"][source] = {"records": records, "seconds": seconds, "rate": records / seconds,
                                         "summary": summary, "again_seconds": again,
                                         "again_summary": again_summary.split(": ", 1)[-1].split(" in ")[0]}
            print(f"{source}: {records} in {seconds:.1f} s = {records / seconds:,.0f}/s ({summary}); again {again:.1f} s",
                  flush=True)
    if not args.no_save:
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / f"imports-{result['date'][:10]}.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
