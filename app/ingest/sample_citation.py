"""One new citation of a paper, made up and imported as any import is (staged, merged, logged in the
change log, announced): what `pith-graph sample-citation` adds so a live subscription can be seen at
work on the bundled sample, or on any database.

The citing paper is a made-up one (`YYMM.9NNNN` of the current month, the first free number, unless
named), with one snapshot as of now and one reference to the paper, resolved `verified_exact` by the
resolver `synthetic_sample` to the work the paper's other citations link to (none when it has none). Its
source is named as generated data's are (loaders.rows.is_synthetic): /evidence and Provenance.synthetic say
it is made up, never a real observation.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from app.ingest.store import ImportRejected, Loader

SOURCE = "synthetic_sample"


@dataclass(frozen=True)
class SampleCitation:
    cited: str
    citing: str
    observation_id: uuid.UUID
    at: datetime


async def add_sample_citation(conn: asyncpg.Connection, cited: str, at: datetime,
                              citing: str | None = None) -> SampleCitation:
    """Import one citation of `cited` (a paper the database knows) by `citing` (default: a new made-up
    paper), as of `at`; ImportRejected when the paper is unknown or the citing paper already cites it."""
    async with conn.transaction():
        known = await conn.fetchval("SELECT 1 FROM paper_snapshots WHERE arxiv_id = $1 LIMIT 1", cited)
        if known is None:
            raise ImportRejected("sample-citation", f"no paper {cited} is known: name a paper the database holds")
        if citing is None:
            prefix = f"{at:%y%m}."
            taken = await conn.fetchval(
                "SELECT max(substr(arxiv_id, 6)::int) FROM paper_snapshots WHERE arxiv_id LIKE $1 || '9____'", prefix)
            citing = f"{prefix}{max(taken or 90000, 90000) + 1:05d}"
        elif await conn.fetchval("SELECT 1 FROM citation_observations WHERE citing_arxiv_id = $1 "
                                 "AND cited_arxiv_id = $2 AND source = $3", citing, cited, SOURCE):
            raise ImportRejected("sample-citation", f"{citing} already has a sample citation of {cited}")
        work = await conn.fetchval(
            "SELECT work_id FROM citation_observations WHERE cited_arxiv_id = $1 AND work_id IS NOT NULL "
            "GROUP BY work_id ORDER BY count(*) DESC, work_id LIMIT 1", cited)
        index = 1 + (await conn.fetchval(
            "SELECT coalesce(max(reference_index), 0) FROM citation_observations WHERE citing_arxiv_id = $1", citing))
        observation = uuid.uuid4()
        loader = Loader(conn, "sample-citation")
        await loader.start()
        rows: dict[str, list[tuple]] = {
            "observations": [(observation, citing, index, SOURCE, at, cited, work, None, None)],
            "resolutions": [(observation, at, "verified_exact", SOURCE, work is not None)],
        }
        if not await conn.fetchval("SELECT 1 FROM paper_snapshots WHERE arxiv_id = $1 LIMIT 1", citing):
            rows["papers"] = [(citing, at, f"A sample paper citing {cited}", 1, "cs.DL", at, at)]
        await loader.stage_rows(rows, "sample-citation")
        await loader.finish()
    return SampleCitation(cited, citing, observation, at)
