"""External citation counts: the latest measurement of each source at an instant, never summed."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final, Sequence

from loaders.base import Db, at_param
from loaders.rows import Measurement

MEASUREMENTS_TEMPLATE: Final = """
SELECT m.arxiv_id, m.source, m.observed_at, m.count,
       (SELECT array_agg(y.year || ':' || y.count ORDER BY y.year) FROM external_measurement_years AS y
        WHERE y.arxiv_id = m.arxiv_id AND y.source = m.source AND y.observed_at = m.observed_at) AS by_year
FROM (
    SELECT DISTINCT ON (arxiv_id, source) arxiv_id, source, observed_at, count
    FROM external_measurements
    WHERE arxiv_id = ANY($1::text[])
      AND observed_at <= $AS
    ORDER BY arxiv_id, source, observed_at DESC
) AS m
"""  # (by_year: the source's counts by year of that measurement, "year:count", or NULL when it gave none)
MEASUREMENTS_BY_ARXIV_ID: Final = at_param(MEASUREMENTS_TEMPLATE, 2)


async def measurements_by_paper(db: Db, arxiv_ids: Sequence[str], as_of: datetime) -> list[list[Measurement]]:
    return measurements_from_rows(await db.fetch(MEASUREMENTS_BY_ARXIV_ID, list(arxiv_ids), as_of), arxiv_ids)


def measurements_from_rows(rows: Sequence[Any], arxiv_ids: Sequence[str]) -> list[list[Measurement]]:
    found: dict[str, list[Measurement]] = {}
    for row in rows:
        found.setdefault(row["arxiv_id"], []).append(
            Measurement(row["arxiv_id"], row["source"], row["observed_at"], row["count"],
                        _years(row["by_year"]))
        )
    return [found.get(a, []) for a in arxiv_ids]


def _years(items: Sequence[str] | None) -> tuple[tuple[int, int], ...] | None:
    """("2023:45", ...) as ((2023, 45), ...)."""
    if items is None:
        return None
    pairs = [item.split(":") for item in items]
    return tuple((int(year), int(count)) for year, count in pairs)
