"""Works as of an instant: each work's latest snapshot, many works in one statement."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final, Sequence
from uuid import UUID

from loaders.base import Db, at_param, fetch_at_pairs
from loaders.rows import Measurement, WorkSnapshot

WORK_SNAPSHOTS_TEMPLATE: Final = """
SELECT k.ord, s.work_id, s.observed_at, s.arxiv_id, s.doi, s.metadata_source, s.pith_arxiv_id, s.title, s.venue,
       s.year
FROM unnest($1::uuid[]) WITH ORDINALITY AS k(work_id, ord)
CROSS JOIN LATERAL (
    SELECT * FROM work_snapshots AS w
    WHERE w.work_id = k.work_id AND w.observed_at <= $AS
    ORDER BY w.observed_at DESC
    LIMIT 1
) AS s
"""
WORK_SNAPSHOTS_BY_ID: Final = at_param(WORK_SNAPSHOTS_TEMPLATE, 2)


async def work_snapshots(db: Db, work_ids: Sequence[UUID], as_of: datetime) -> list[WorkSnapshot | None]:
    found: list[WorkSnapshot | None] = [None] * len(work_ids)
    for row in await db.fetch(WORK_SNAPSHOTS_BY_ID, list(work_ids), as_of):
        found[row["ord"] - 1] = snapshot_from(row)
    return found


async def work_snapshots_at(db: Db, pairs: Sequence[tuple[UUID, datetime]]) -> list[WorkSnapshot | None]:
    """Each (work id, instant)'s snapshot, in one statement whatever the number of instants."""
    return [snapshot_from(rows[0]) if rows else None
            for rows in await fetch_at_pairs(db, WORK_SNAPSHOTS_TEMPLATE, pairs, key_type="uuid")]


# A DOI's work (any letter case): of the works with that DOI at the instant, the latest described.
WORK_SNAPSHOTS_BY_DOI: Final = """
SELECT k.ord, s.work_id, s.observed_at, s.arxiv_id, s.doi, s.metadata_source, s.pith_arxiv_id, s.title, s.venue,
       s.year
FROM unnest($1::text[]) WITH ORDINALITY AS k(doi, ord)
CROSS JOIN LATERAL (
    SELECT w.* FROM work_snapshots AS w
    WHERE lower(w.doi) = k.doi AND w.observed_at <= $2
    ORDER BY w.observed_at DESC, w.work_id
    LIMIT 1
) AS s
"""

WORK_MEASUREMENTS: Final = """
SELECT DISTINCT ON (work_id, source) work_id, source, observed_at, count
FROM work_measurements
WHERE work_id = ANY($1::uuid[]) AND observed_at <= $2
ORDER BY work_id, source, observed_at DESC
"""

PAPER_DOIS: Final = """
SELECT DISTINCT ON (arxiv_id) arxiv_id, doi
FROM paper_dois
WHERE arxiv_id = ANY($1::text[]) AND observed_at <= $2
ORDER BY arxiv_id, observed_at DESC
"""


def snapshot_from(row: Any) -> WorkSnapshot:
    return WorkSnapshot(row["work_id"], row["observed_at"], row["arxiv_id"], row["doi"], row["metadata_source"],
                        row["pith_arxiv_id"], row["title"], row["venue"], row["year"])


async def works_by_doi(db: Db, dois: Sequence[str], as_of: datetime) -> list[WorkSnapshot | None]:
    """Keys are normalized DOIs (app.ingest.doi.normalize_doi)."""
    found: list[WorkSnapshot | None] = [None] * len(dois)
    for row in await db.fetch(WORK_SNAPSHOTS_BY_DOI, list(dois), as_of):
        found[row["ord"] - 1] = snapshot_from(row)
    return found


async def work_measurements(db: Db, work_ids: Sequence[UUID], as_of: datetime) -> list[list[Measurement]]:
    """Each source's latest count of each work (the Measurement's arxiv_id holds the work id)."""
    found: dict[UUID, list[Measurement]] = {}
    for row in await db.fetch(WORK_MEASUREMENTS, list(work_ids), as_of):
        found.setdefault(row["work_id"], []).append(Measurement(str(row["work_id"]), row["source"],
                                                                row["observed_at"], row["count"]))
    return [found.get(w, []) for w in work_ids]


async def paper_dois(db: Db, arxiv_ids: Sequence[str], as_of: datetime) -> list[str | None]:
    found = {row["arxiv_id"]: row["doi"] for row in await db.fetch(PAPER_DOIS, list(arxiv_ids), as_of)}
    return [found.get(a) for a in arxiv_ids]
