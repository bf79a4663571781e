"""Which sources the stored facts come from, and when each was last observed."""

from __future__ import annotations

from datetime import datetime
from typing import Final

from loaders.base import Db

EVIDENCE: Final = """
SELECT 'standing' AS role, source, max(observed_at) AS latest, count(*) AS facts
FROM standing_receipts WHERE observed_at <= $1 GROUP BY source
UNION ALL
SELECT 'resolution', resolver_source, max(observed_at), count(*)
FROM resolutions WHERE observed_at <= $1 AND resolver_source IS NOT NULL GROUP BY resolver_source
UNION ALL
SELECT 'measurement', source, max(observed_at), count(*)
FROM external_measurements WHERE observed_at <= $1 GROUP BY source
UNION ALL
SELECT 'citation', source, max(source_observed_at), count(*)
FROM citation_observations WHERE source_observed_at <= $1 GROUP BY source
ORDER BY 1, 2
"""


async def evidence(db: Db, as_of: datetime) -> list[dict]:
    return [
        {"role": r["role"], "source": r["source"], "kind": "cache" if r["source"].endswith("_status_cache") else "live",
         "latest_observed_at": r["latest"], "facts": r["facts"]}
        for r in await db.fetch(EVIDENCE, as_of)
    ]
