"""Works as of an instant: each work's latest snapshot, many works in one statement."""

from __future__ import annotations

from datetime import datetime
from typing import Final, Sequence
from uuid import UUID

from loaders.base import Db
from loaders.rows import WorkSnapshot

WORK_SNAPSHOTS_BY_ID: Final = """
SELECT k.ord, s.work_id, s.observed_at, s.arxiv_id, s.doi, s.metadata_source, s.pith_arxiv_id, s.title, s.venue,
       s.year
FROM unnest($1::uuid[]) WITH ORDINALITY AS k(work_id, ord)
CROSS JOIN LATERAL (
    SELECT * FROM work_snapshots AS w
    WHERE w.work_id = k.work_id AND w.observed_at <= $2
    ORDER BY w.observed_at DESC
    LIMIT 1
) AS s
"""


async def work_snapshots(db: Db, work_ids: Sequence[UUID], as_of: datetime) -> list[WorkSnapshot | None]:
    found: list[WorkSnapshot | None] = [None] * len(work_ids)
    for row in await db.fetch(WORK_SNAPSHOTS_BY_ID, list(work_ids), as_of):
        found[row["ord"] - 1] = WorkSnapshot(row["work_id"], row["observed_at"], row["arxiv_id"], row["doi"],
                                             row["metadata_source"], row["pith_arxiv_id"], row["title"],
                                             row["venue"], row["year"])
    return found
