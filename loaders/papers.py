"""Paper snapshots as of an instant: lookup by arXiv id and full-text search over titles."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final, Sequence

from loaders.base import Db, at_param, fetch_at_pairs
from loaders.rows import PaperSnapshot

PAPER_COLUMNS: Final = "arxiv_id, observed_at, title, latest_version, primary_category, submitted_at, last_updated"

PAPER_SNAPSHOTS_TEMPLATE: Final = f"""
SELECT k.ord, s.{PAPER_COLUMNS.replace(', ', ', s.')}
FROM unnest($1::text[]) WITH ORDINALITY AS k(arxiv_id, ord)
JOIN LATERAL (
    SELECT {PAPER_COLUMNS}
    FROM paper_snapshots
    WHERE arxiv_id = k.arxiv_id
      AND observed_at <= $AS
    ORDER BY observed_at DESC
    LIMIT 1
) AS s ON true
"""
PAPER_SNAPSHOTS_BY_ARXIV_ID: Final = at_param(PAPER_SNAPSHOTS_TEMPLATE, 2)

# Ranked title search over each paper's latest snapshot at the instant (older titles do not match), as
# keyset pages: after the (rank, arxiv id) of the previous page's last row.
SEARCH_PAPERS_PAGE: Final = f"""
SELECT * FROM (
    SELECT s.{PAPER_COLUMNS.replace(', ', ', s.')},
           ts_rank(to_tsvector('english', s.title), q.query) AS rank
    FROM websearch_to_tsquery('english', $1) AS q(query)
    JOIN paper_snapshots AS s
      ON to_tsvector('english', s.title) @@ q.query
    WHERE s.observed_at <= $2
      AND NOT EXISTS (
          SELECT 1
          FROM paper_snapshots AS newer
          WHERE newer.arxiv_id = s.arxiv_id
            AND newer.observed_at > s.observed_at
            AND newer.observed_at <= $2
      )
) AS found
WHERE $4::real IS NULL OR found.rank < $4::real OR (found.rank = $4::real AND found.arxiv_id > $5::text)
ORDER BY found.rank DESC, found.arxiv_id
LIMIT $3
"""


def paper_from(row: Any, prefix: str = "") -> PaperSnapshot | None:
    if row[prefix + "observed_at"] is None:
        return None
    return PaperSnapshot(
        arxiv_id=row[prefix + "arxiv_id"],
        observed_at=row[prefix + "observed_at"],
        title=row[prefix + "title"],
        latest_version=row[prefix + "latest_version"],
        primary_category=row[prefix + "primary_category"],
        submitted_at=row[prefix + "submitted_at"],
        last_updated=row[prefix + "last_updated"],
    )


async def paper_snapshots(db: Db, arxiv_ids: Sequence[str], as_of: datetime) -> list[PaperSnapshot | None]:
    return papers_from_rows(await db.fetch(PAPER_SNAPSHOTS_BY_ARXIV_ID, list(arxiv_ids), as_of), len(arxiv_ids))


async def paper_snapshots_at(db: Db, pairs: Sequence[tuple[str, datetime]]) -> list[PaperSnapshot | None]:
    """Each (arXiv id, instant)'s snapshot, in one statement whatever the number of instants."""
    return [papers_from_rows(rows, 1)[0] for rows in await fetch_at_pairs(db, PAPER_SNAPSHOTS_TEMPLATE, pairs)]


def papers_from_rows(rows: Sequence[Any], n: int) -> list[PaperSnapshot | None]:
    found: list[PaperSnapshot | None] = [None] * n
    for row in rows:
        found[row["ord"] - 1] = paper_from(row)
    return found


async def search_papers(db: Db, query: str, as_of: datetime, limit: int) -> list[PaperSnapshot]:
    """The best `limit` matches (the first page)."""
    return [p for p, _ in await search_page(db, query, as_of, limit, None)]


async def search_page(db: Db, query: str, as_of: datetime, limit: int,
                      after: tuple[float, str] | None) -> list[tuple[PaperSnapshot, float]]:
    """One page of ranked matches (best first), after the (rank, arxiv id) of the previous page's last."""
    rank, arxiv_id = after if after is not None else (None, None)
    rows = await db.fetch(SEARCH_PAPERS_PAGE, query, as_of, limit, rank, arxiv_id)
    return [(p, r["rank"]) for r in rows if (p := paper_from(r)) is not None]
