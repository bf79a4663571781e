"""Where a live citation goes in the paper's `inbound` connection, so a client cache can splice it in.

A citationAdded event is resolved as of when it is sent, but it stands at its change-log position: the
connection it describes is the one a client holds after receiving every event up to it. So the edge
before it, and the connection's totalCount, leave out the observations logged after that position
(a client receives those later, each with its own place and total).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final
from uuid import UUID

from loaders.base import Db

# $1 cited paper, $2..$4 the edge's key (citing id, reference index, observation id), $5 instant,
# $6 the event's change-log position. The inbound order and visibility are loaders.citations'.
SPLICE: Final = """
WITH later AS MATERIALIZED (
    SELECT c.observation_id FROM change_log AS c
    WHERE c.kind = 'citation_added' AND c.arxiv_id = $1 AND c.position > $6
)
-- Each later observation by its key (a probe each, however many observations cite the paper).
SELECT (SELECT count(*) FROM later AS l
        WHERE (SELECT o.visible_from FROM citation_observations AS o WHERE o.observation_id = l.observation_id)
              <= $5) AS later_visible,
       p.citing_arxiv_id, p.reference_index, p.observation_id
FROM (SELECT 1) AS one
LEFT JOIN LATERAL (
    SELECT o.citing_arxiv_id, o.reference_index, o.observation_id
    FROM citation_observations AS o
    WHERE o.cited_arxiv_id = $1
      AND (o.citing_arxiv_id, o.reference_index, o.observation_id) < ($2::text, $3::int, $4::uuid)
      AND o.visible_from <= $5
      AND NOT EXISTS (SELECT 1 FROM later AS l WHERE l.observation_id = o.observation_id)
    ORDER BY o.citing_arxiv_id DESC, o.reference_index DESC, o.observation_id DESC
    LIMIT 1
) AS p ON true
"""


async def splice(db: Db, arxiv_id: str, key: tuple[str, int, UUID], as_of: datetime,
                 position: int) -> tuple[tuple[str, int, UUID] | None, int]:
    """The key of the edge before `key` in the paper's inbound order at `position` (None: it comes first),
    and how many observations logged after `position` are visible at `as_of` (to take from the total)."""
    rows: Any = await db.fetch(SPLICE, arxiv_id, key[0], key[1], key[2], as_of, position)
    row = rows[0]
    previous = ((row["citing_arxiv_id"], row["reference_index"], row["observation_id"])
                if row["observation_id"] is not None else None)
    return previous, int(row["later_visible"])


async def change_position(db: Db) -> int:
    """The change log's newest position in the read's snapshot: every change up to it is in the read,
    none after it (imports take positions in commit order, app.ingest.store.append_changes)."""
    from loaders.system import NEWEST_POSITION

    rows: Any = await db.fetch(NEWEST_POSITION)
    return int(rows[0]["position"])
