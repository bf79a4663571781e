"""Bulk writes: synthetic graphs through COPY and staging, with secondary indexes rebuilt afterwards."""

from __future__ import annotations

import contextlib
import sys
import time
from dataclasses import dataclass
from typing import IO, AsyncIterator

import asyncpg

from app.ingest.store import TABLES, Loader
from app.ingest.synth import generate

# Secondary indexes that are cheaper to build once after a bulk load into empty tables than to
# maintain row by row. Their definitions are read from the catalog, so migrations stay the one source.
DEFERRED_INDEXES = ("citation_observations_inbound", "citation_observations_outbound",
                    "citation_observations_inbound_count", "citation_observations_by_work",
                    "paper_snapshots_title_search", "paper_snapshots_by_submitted", "paper_snapshots_by_category")


@dataclass
class BulkResult:
    papers: int
    rows: int
    observations: int
    seconds: float
    generate_seconds: float
    copy_seconds: float
    merge_seconds: float
    index_seconds: float


@contextlib.asynccontextmanager
async def deferred_indexes(conn: asyncpg.Connection, timings: dict[str, float]) -> AsyncIterator[bool]:
    """Drop the secondary indexes while the body runs, if the tables are empty; build them after."""
    empty = not await conn.fetchval("SELECT EXISTS (SELECT 1 FROM citation_observations)")
    definitions = []
    if empty:
        definitions = [r["indexdef"] for r in await conn.fetch(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() AND indexname = ANY($1::text[])",
            list(DEFERRED_INDEXES))]
        for name in DEFERRED_INDEXES:
            await conn.execute(f"DROP INDEX IF EXISTS {name}")
    yield empty
    started = time.monotonic()
    for definition in definitions:
        await conn.execute(definition)
    timings["index"] = time.monotonic() - started


class Progress:
    def __init__(self, out: IO[str] | None, total: int, unit: str = "papers") -> None:
        self.out, self.total, self.unit = out, total, unit
        self.started = time.monotonic()
        self.last = 0.0

    def update(self, done: int, rows: int, final: bool = False) -> None:
        now = time.monotonic()
        if self.out is None or (not final and now - self.last < 0.5):
            return
        self.last = now
        elapsed = max(now - self.started, 1e-9)
        width = 30
        filled = int(width * done / max(self.total, 1))
        bar = "#" * filled + "-" * (width - filled)
        end = "\n" if final else "\r"
        print(f"[{bar}] {done}/{self.total} {self.unit}, {rows:,} rows ({rows / elapsed:,.0f} rows/s)",
              end=end, file=self.out, flush=True)


async def write_synthetic(conn: asyncpg.Connection, papers: int, seed: int,
                          progress: IO[str] | None = sys.stderr, hub_citations: int = 0) -> BulkResult:
    """Generate and load a synthetic graph in one transaction."""
    started = time.monotonic()
    timings = {"generate": 0.0, "copy": 0.0, "merge": 0.0, "index": 0.0}
    rows = observations = done = 0
    bar = Progress(progress, papers)
    async with conn.transaction():
        await conn.execute("SET LOCAL synchronous_commit = off; SET LOCAL maintenance_work_mem = '512MB';"
                           " SET LOCAL work_mem = '256MB'")
        hub = f" --hub-citations {hub_citations}" if hub_citations else ""
        loader = Loader(conn, f"synth --papers {papers} --seed {seed}{hub}", check_conflicts=False)
        await loader.start()
        batches = generate(papers, seed, hub_citations=hub_citations)
        while True:
            t0 = time.monotonic()
            batch = next(batches, None)
            timings["generate"] += time.monotonic() - t0
            if batch is None:
                break
            t0 = time.monotonic()
            await loader.stage_rows(batch.__dict__, "synth")
            timings["copy"] += time.monotonic() - t0
            rows += batch.size()
            observations += len(batch.observations)
            done = min(papers, done + 2000)
            bar.update(done, rows)
        async with deferred_indexes(conn, timings) as empty:
            loader.all_new = empty and not await conn.fetchval(
                "SELECT " + " OR ".join(f"EXISTS (SELECT 1 FROM {t.name})" for t in TABLES))
            t0 = time.monotonic()
            await loader.finish()
            timings["merge"] = time.monotonic() - t0
    await conn.execute("ANALYZE")
    bar.update(papers, rows, final=True)
    return BulkResult(papers, rows, observations, time.monotonic() - started, timings["generate"], timings["copy"],
                      timings["merge"], timings["index"])
