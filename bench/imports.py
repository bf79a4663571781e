"""Import rates of the real-source importers: Retraction Watch rows, Crossref and OpenAlex works per second,
first import and the monthly refresh.

The real samples (tests/data/sources) scaled up: Crossref works repeated with DOIs of their own (the
2025 JSON-lines layout, gzipped), Retraction Watch rows in the published layout, one in 20 naming a DOI
the graph's works have (so the row attaches to works that arXiv papers cite), the rest new DOIs; OpenAlex
works (JSON lines, gzipped) with counts by year, one in 50 retracted, one in 100 an arXiv paper of the
graph whose references are other works of the file. Each file is imported by `pith-graph import` into a
synthetic graph, timed from the command's start to its end; then again at the same instant (idempotent:
nothing added); then the refresh: the same file at an instant a month later (every fact observed again),
which is the figure the targets are for. Each command's peak resident memory is taken from the kernel
(wait4). Results go to bench/results/imports/ and the "Real-source imports" section of BENCHMARKS.md.

    python bench/imports.py [--papers 10000] [--rows 200000] [--works 200000]
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
TARGETS = {"retraction-watch": 20_000, "crossref": 5_000, "openalex": 5_000}  # records per second (refresh)
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
    # Each sample serialized once, its DOI a placeholder (the file is written at the speed of the disk).
    plain, retracted = [], []
    for item in samples:
        plain.append(json.dumps(dict(item, DOI="@DOI@")))
        retracted.append(json.dumps(dict(item, DOI="@DOI@", **{"updated-by": [
            {"type": "retraction", "DOI": "@NOTICE@", "source": "publisher",
             "updated": {"date-time": "2025-01-01T00:00:00Z"}}]})))
    with gzip.open(path, "wt", compresslevel=1) as f:
        for i in range(works):
            line = (retracted if i % 10 == 0 else plain)[i % len(samples)]
            f.write(line.replace("@DOI@", f"10.5555/CR.{i}").replace("@NOTICE@", f"10.5555/crn.{i}") + "\n")


def openalex_file(path: Path, works: int, papers: list[str]) -> None:
    real = json.loads((DATA / "openalex-W2755950973.json").read_text())
    with gzip.open(path, "wt") as f:
        for i in range(works):
            work = {"id": f"https://openalex.org/W5{i:09d}", "doi": f"https://doi.org/10.5555/OA.{i}",
                    "title": f"{real['display_name']} {i}", "publication_year": 2000 + i % 25,
                    "cited_by_count": i % 500, "counts_by_year": real["counts_by_year"],
                    "is_retracted": i % 50 == 0, "primary_location": real.get("primary_location")}
            if i % 100 == 0 and papers:
                work["doi"] = None
                work["locations"] = [{"landing_page_url": f"https://arxiv.org/abs/{papers[(i // 100) % len(papers)]}"}]
                work["referenced_works"] = [f"https://openalex.org/W5{(i + k) % works:09d}" for k in range(1, 21)]
            f.write(json.dumps(work) + "\n")


async def graph_papers(url: str) -> list[str]:
    conn = await asyncpg.connect(url)
    try:
        return [r[0] for r in await conn.fetch("SELECT DISTINCT arxiv_id FROM paper_snapshots ORDER BY 1")]
    finally:
        await conn.close()


def timed_import(url: str, source: str, path: Path, at: str) -> tuple[float, str, float, float]:
    """(seconds, the summary line, peak resident memory in MB, the command's CPU seconds) of one `pith-graph
    import`. A command refused a connection (the server's clients are all taken by other work on a shared
    machine) wrote nothing and is run again: only the attempt that ran is timed."""
    for _ in range(60):
        with tempfile.TemporaryFile("w+") as err:
            started = time.perf_counter()
            child = subprocess.Popen([sys.executable, "-m", "app.cli", "import", source, "--observed-at", at,
                                      str(path)], env={**os.environ, "DATABASE_URL": url},
                                     stdout=subprocess.DEVNULL, stderr=err)
            _, status, usage = os.wait4(child.pid, 0)
            seconds = time.perf_counter() - started
            child.returncode = os.waitstatus_to_exitcode(status)
            err.seek(0)
            text = err.read()
        if child.returncode != 0 and "too many clients" in text:
            time.sleep(5)
            continue
        break
    if child.returncode != 0:
        raise SystemExit(f"{source} import failed: {text[-2000:]}")
    return seconds, text.strip().splitlines()[-1], usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


def report_lines() -> list[str]:
    """The "Real-source imports" section of BENCHMARKS.md: the two newest results, newest first (a run may hold
    only some sources: one stopped short says so in its machine line), then the refresh side by side."""
    found = sorted(RESULTS.glob("imports-*.json"))
    if not found:
        return []
    lines = ["", "## Real-source imports (`python bench/imports.py`)", "",
             "The time of the whole command (start-up, reading, staging, merging, change log) into a synthetic graph: "
             "the first import, the same file again at the same instant (adds nothing), and the monthly refresh (the "
             "same file a month later: every fact observed again), which the targets are for. Peak memory is each "
             "command's resident set (the kernel's maxrss). Absolute rates follow the machine's load (2 cores shared "
             "with other work): compare within one run, or the side-by-side table below."]
    for path in reversed(found[-2:]):
        r = json.loads(path.read_text())
        lines += ["", f"{r['date'][:10]}, `{r['command']}`, {r['papers']:,} papers"
                  + (f"; code {r['code']}" if r.get("code") else "")
                  + (f". Machine: {r['machine']}." if r.get("machine") else "."),
                  "", "| source | records | first import | again (same instant) | refresh: records/s | target | peak MB |",
                  "|---|---|---|---|---|---|---|"]
        for source, x in r["sources"].items():
            if "refresh_rate" not in x:
                continue
            met = "met" if x["refresh_rate"] >= TARGETS[source] else "MISSED"
            cpu = (f"; the command's CPU {x['refresh_command_cpu_seconds']:.1f} s, load average "
                   f"{x['refresh_load'][0]:.1f} before, {x['refresh_load'][1]:.1f} after"
                   if "refresh_command_cpu_seconds" in x else "")
            lines.append(f"| {source} | {x['records']:,} | {x['seconds']:.1f} s ({x['rate']:,.0f}/s) | "
                         f"{x['again_seconds']:.1f} s: {x['again_summary']} | **{x['refresh_rate']:,.0f}** "
                         f"({x['refresh_seconds']:.1f} s; {x['refresh_summary']}{cpu}) | >= {TARGETS[source]:,} "
                         f"({met}) | {max(x['peak_mb']):.0f} |")
    lines += side_by_side_lines()
    return lines


def side_by_side_lines() -> list[str]:
    """The refresh before and after a change of the importer, in one run on one database (bench/results/imports/
    refresh-side-by-side-*.json, written by hand from `prof`-style runs: each import in a transaction rolled back)."""
    found = sorted(RESULTS.glob("refresh-side-by-side-*.json"))
    if not found:
        return []
    r = json.loads(found[-1].read_text())
    lines = ["", f"Refresh side by side ({r['date'][:10]}): {r['how']}", ""]
    if any("before_cpu" in x for x in r["runs"]):  # CPU seconds: the command's and its PostgreSQL backend's
        lines += ["| source | records | run | before (s) | after (s) | after / before | before CPU: importer + "
                  "PostgreSQL (s) | after CPU (s) | CPU after / before | load average |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for x in r["runs"]:
            before, after = sum(x["before_cpu"]), sum(x["after_cpu"])
            lines.append(f"| {x['source']} | {x['records']:,} | {x['round']} | {x['before']:.1f} | {x['after']:.1f} | "
                         f"{x['after'] / x['before']:.2f} | {x['before_cpu'][0]:.1f} + {x['before_cpu'][1]:.1f} | "
                         f"{x['after_cpu'][0]:.1f} + {x['after_cpu'][1]:.1f} | {after / before:.2f} | {x['load']} |")
        return lines + (["", r["profile"]] if r.get("profile") else [])
    lines += ["| source | records | run | before (s) | after (s) | after / before | load average |",
              "|---|---|---|---|---|---|---|"]
    for x in r["runs"]:
        lines.append(f"| {x['source']} | {x['records']:,} | {x['round']} | {x['before']:.1f} | {x['after']:.1f} | "
                     f"{x['after'] / x['before']:.2f} | {x['load']} |")
    return lines


def main() -> None:
    parser = graph_arguments(__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--works", type=int, default=200_000)
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args()
    load = os.getloadavg()
    result: dict = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "papers": args.papers,
                    "command": "python bench/imports.py " + " ".join(sys.argv[1:]), "sources": {},
                    "machine": f"{os.cpu_count()} cores, load average {load[0]:.1f} at the start "
                               "(shared with other work)"}
    with graph_database(args, "pith_bench_imports") as url, tempfile.TemporaryDirectory() as folder:
        known = asyncio.run(graph_dois(url))
        papers = asyncio.run(graph_papers(url))
        files = {"retraction-watch": (Path(folder) / "rw.csv", args.rows),
                 "crossref": (Path(folder) / "crossref.jsonl.gz", args.works),
                 "openalex": (Path(folder) / "openalex.jsonl.gz", args.works)}
        retraction_watch_file(files["retraction-watch"][0], args.rows, known)
        crossref_file(files["crossref"][0], args.works)
        openalex_file(files["openalex"][0], args.works, papers)
        for n, (source, (path, records)) in enumerate(files.items()):
            at, month_later = f"2026-12-01T0{n}:00:00Z", f"2027-01-01T0{n}:00:00Z"
            seconds, summary, peak, _ = timed_import(url, source, path, at)
            again, again_summary, peak_again, _ = timed_import(url, source, path, at)
            load_before = os.getloadavg()[0]
            refresh, refresh_summary, peak_refresh, refresh_cpu = timed_import(url, source, path, month_later)
            result["sources"][source] = {
                "records": records, "seconds": seconds, "rate": records / seconds, "summary": summary,
                "again_seconds": again, "again_summary": again_summary.split(": ", 1)[-1].split(" in ")[0],
                "refresh_seconds": refresh, "refresh_rate": records / refresh,
                "refresh_summary": refresh_summary.split(": ", 1)[-1].split(" in ")[0],
                "refresh_command_cpu_seconds": refresh_cpu,
                "refresh_load": [load_before, os.getloadavg()[0]],
                "peak_mb": [peak, peak_again, peak_refresh]}
            print(f"{source}: {records} in {seconds:.1f} s = {records / seconds:,.0f}/s ({summary}); again "
                  f"{again:.1f} s; refresh {refresh:.1f} s = {records / refresh:,.0f}/s ({refresh_summary}; the "
                  f"command's CPU {refresh_cpu:.1f} s; load {load_before:.1f} -> {os.getloadavg()[0]:.1f}); "
                  f"peak {max(peak, peak_again, peak_refresh):.0f} MB", flush=True)
    result["machine"] += f", {os.getloadavg()[0]:.1f} at the end"
    if not args.no_save:
        RESULTS.mkdir(parents=True, exist_ok=True)
        # (Named by the minute: a second run of the day keeps the first; "T" sorts after the day's plain name.)
        stamp = result["date"][:16].replace(":", "")
        (RESULTS / f"imports-{stamp}.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
