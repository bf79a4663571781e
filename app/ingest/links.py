"""A reference's canonical work link by instant (migration 0023), one rule for every writer.

Each resolution of a reference says whether it held its work link then (`resolutions.linked`: an import met its work,
a v1 document showed it). A reference linked only by a later import (an OpenAlex reference kept unlinked until its
work was described) holds the link from the first linked resolution after the last one that was not: `linked_from`.
As of earlier instants it is answered as it was then, unlinked (its printed title, no notice, not citing retracted
work), whatever order the imports or documents arrive in. Readers take the link through
loaders.citations.linked_sql.
"""

from __future__ import annotations

from collections.abc import Callable

import asyncpg

# The references whose resolutions this import or load staged, that hold a link and have a resolution without it:
# each one's linked_from, with the last unlinked resolution when no linked one follows it.
# The staged references with a resolution that did not hold the link, and the last such.
_UNLINKED = """
WITH unlinked AS (
    SELECT r.observation_id, max(r.observed_at) AS last_unlinked
    FROM resolutions AS r
    WHERE r.linked = false AND r.observation_id IN (SELECT observation_id FROM stage_resolutions)
    GROUP BY r.observation_id
)"""

_LINKED_FROM = _UNLINKED + """
SELECT u.observation_id, u.last_unlinked, o.linked_from AS stored,
       (SELECT min(r.observed_at) FROM resolutions AS r WHERE r.observation_id = u.observation_id
        AND r.linked IS NOT FALSE AND r.observed_at > u.last_unlinked) AS linked_from
FROM unlinked AS u JOIN citation_observations AS o ON o.observation_id = u.observation_id
WHERE o.work_id IS NOT NULL
"""

# An import links a reference at an instant before checks of the source that did not meet its work (snapshots
# imported out of date order: the later one, without the work's description, first): date order would have kept
# the link at those checks ("a reference linked by an earlier check stays linked", app/ingest/sources.py), so they
# are made linked, as that rule makes them.
_STAY_LINKED = _UNLINKED + """, first_linked AS (
    SELECT DISTINCT ON (q.observation_id) q.observation_id, q.observed_at, q.resolver_source
    FROM resolutions AS q JOIN unlinked USING (observation_id)
    WHERE q.linked
    ORDER BY q.observation_id, q.observed_at
)
UPDATE resolutions AS r SET status = 'verified_exact', resolver_source = f.resolver_source, linked = true
FROM first_linked AS f
WHERE r.observation_id = f.observation_id AND r.linked = false AND r.observed_at > f.observed_at
"""

_WRITE = """
UPDATE citation_observations AS o SET linked_from = x.linked_from
FROM unnest($1::uuid[], $2::timestamptz[]) AS x(observation_id, linked_from)
WHERE o.observation_id = x.observation_id
"""


async def settle_links(conn: asyncpg.Connection, refuse: Callable[[str], Exception] | None = None) -> int:
    """Set linked_from of the references whose resolutions are staged (before the stage is dropped); `refuse`:
    a document load's refusal of a reference shown linked and then, at a later resolution, unlinked (an import
    keeps a link it once met, so it never gives one). The number of references whose link moved."""
    if refuse is None:  # an import (a document's resolutions are taken as they are, or refused)
        await conn.execute(_STAY_LINKED)
    rows = await conn.fetch(_LINKED_FROM)
    changed = []
    for row in rows:
        if row["linked_from"] is None:
            if refuse is not None:
                raise refuse(
                    f"the reference {row['observation_id']} is shown with its work link, and without it at its "
                    f"resolution of {row['last_unlinked'].isoformat()}, after every resolution showing the link: "
                    "a link, once made, holds")
            continue
        if row["linked_from"] != row["stored"]:
            changed.append((row["observation_id"], row["linked_from"]))
    if changed:
        await conn.execute(_WRITE, [c[0] for c in changed], [c[1] for c in changed])
    return len(changed)
