"""What changed in a paper's record between two instants: every fact observed in (from, to] that the
uncapped record at `to` reflects, typed, in one statement (with each change's observation as of `to`).

A fact about a cited work (its snapshot, a standing check, an event), or about a citing or cited paper,
is one change per work or paper, attached to the first observation that shows it (outbound in record
order, then inbound).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Sequence

from loaders.base import Db, in_stretches
from loaders.citations import _DETAIL_COLUMNS, detail_joins, observation_from
from loaders.rows import UNRESOLVED, Observation

_PAPER_JSON = ("jsonb_build_object('title', {p}.title, 'latestVersion', {p}.latest_version, 'primaryCategory', "
               "{p}.primary_category, 'submittedAt', {p}.submitted_at, 'lastUpdated', {p}.last_updated)")


def _paper_json(alias: str) -> str:
    return _PAPER_JSON.format(p=alias)


def _previous_paper(alias: str) -> str:
    return (f"(SELECT {_paper_json('q')} FROM paper_snapshots AS q WHERE q.arxiv_id = {alias}.arxiv_id "
            f"AND q.observed_at < {alias}.observed_at ORDER BY q.observed_at DESC LIMIT 1)")


# A work's standing shows in a record once the work has a snapshot (the notice of an unlinked work is
# unavailable): a receipt or event observed before that is not a change of its own (the timeline's rule).
_LINKED = ("EXISTS (SELECT 1 FROM work_snapshots AS ws WHERE ws.work_id = {fact}.work_id "
           "AND ws.observed_at <= {fact}.observed_at)")


# $1 paper, $2 from (exclusive), $3 to (inclusive), $4 how many at most (NULL: all), $5 the kinds (NULL: all).
CHANGES: Final = f"""
WITH shown AS (  -- the observations of the uncapped record at `to`, in record order
    SELECT o.observation_id, o.work_id, o.linked_from, o.citing_arxiv_id, o.cited_arxiv_id, 'out' AS side,
           row_number() OVER (ORDER BY o.reference_index, o.observation_id) AS place
    FROM citation_observations AS o WHERE o.citing_arxiv_id = $1 AND o.visible_from <= $3
    UNION ALL
    SELECT o.observation_id, o.work_id, o.linked_from, o.citing_arxiv_id, o.cited_arxiv_id, 'in',
           1000000000 + row_number() OVER (ORDER BY o.citing_arxiv_id, o.reference_index, o.observation_id)
    FROM citation_observations AS o WHERE o.cited_arxiv_id = $1 AND o.visible_from <= $3
),
-- (a work's facts count from its first observation's link: a link a later import made holds from then on)
by_work AS (SELECT DISTINCT ON (work_id) work_id, observation_id, coalesce(linked_from, '-infinity') AS linked_from
            FROM shown WHERE work_id IS NOT NULL ORDER BY work_id, coalesce(linked_from, '-infinity'), place),
by_citing AS (SELECT DISTINCT ON (citing_arxiv_id) citing_arxiv_id AS arxiv_id, observation_id FROM shown
              WHERE side = 'in' ORDER BY citing_arxiv_id, place),
by_cited AS (SELECT DISTINCT ON (cited_arxiv_id) cited_arxiv_id AS arxiv_id, observation_id FROM shown
             WHERE side = 'out' AND cited_arxiv_id IS NOT NULL ORDER BY cited_arxiv_id, place),
ch AS (
    SELECT 'PAPER_UPDATED' AS kind, s.observed_at AS at, NULL::uuid AS obs, NULL::jsonb AS event,
           NULL::jsonb AS measurement, {_previous_paper('s')} AS previous, {_paper_json('s')} AS current
    FROM paper_snapshots AS s WHERE s.arxiv_id = $1 AND s.observed_at > $2 AND s.observed_at <= $3
    UNION ALL
    SELECT CASE WHEN o.cited_arxiv_id = $1 THEN 'CITATION_ADDED' ELSE 'REFERENCE_ADDED' END, o.visible_from,
           o.observation_id, NULL, NULL, NULL,
           jsonb_build_object('citingArxivId', o.citing_arxiv_id, 'citedArxivId', o.cited_arxiv_id,
                              'referenceIndex', o.reference_index)
    FROM citation_observations AS o
    WHERE (o.cited_arxiv_id = $1 OR o.citing_arxiv_id = $1) AND o.visible_from > $2 AND o.visible_from <= $3
    UNION ALL
    SELECT 'RESOLUTION_CHANGED', r.observed_at, r.observation_id, NULL, NULL,
           coalesce((  -- (both sides in one shape: before its first resolution, a reference is unresolved)
               SELECT jsonb_build_object('status', upper(p.status), 'resolverSource', p.resolver_source)
               FROM resolutions AS p WHERE p.observation_id = r.observation_id
                 AND p.observed_at < r.observed_at ORDER BY p.observed_at DESC LIMIT 1),
               jsonb_build_object('status', '{UNRESOLVED.upper()}', 'resolverSource', NULL)),
           jsonb_build_object('status', upper(r.status), 'resolverSource', r.resolver_source)
    FROM shown CROSS JOIN LATERAL (  -- probed per observation shown (OFFSET 0: the generic plan otherwise
        SELECT * FROM resolutions AS q  -- hashed every resolution of the graph to join the few of one paper)
        WHERE q.observation_id = shown.observation_id AND q.observed_at > $2 AND q.observed_at <= $3 OFFSET 0) AS r
    UNION ALL
    SELECT 'WORK_UPDATED', w.observed_at, b.observation_id, NULL, NULL,
           (SELECT jsonb_build_object('title', q.title, 'doi', q.doi, 'year', q.year, 'venue', q.venue)
            FROM work_snapshots AS q WHERE q.work_id = w.work_id AND q.observed_at < w.observed_at
            ORDER BY q.observed_at DESC LIMIT 1),
           jsonb_build_object('title', w.title, 'doi', w.doi, 'year', w.year, 'venue', w.venue)
    FROM work_snapshots AS w JOIN by_work AS b USING (work_id)
    WHERE w.observed_at > $2 AND w.observed_at <= $3 AND w.observed_at >= b.linked_from
    UNION ALL
    SELECT 'STANDING_EVENT', e.observed_at, b.observation_id,
           jsonb_build_object('eventType', e.event_type, 'source', e.source, 'observedAt', e.observed_at,
                              'reportedAt', e.reported_at, 'noticeDoi', e.notice_doi), NULL, NULL,
           jsonb_build_object('eventType', upper(e.event_type), 'source', e.source)
    FROM work_events AS e JOIN by_work AS b USING (work_id)
    WHERE e.observed_at > $2 AND e.observed_at <= $3 AND {_LINKED.format(fact='e')} AND e.observed_at >= b.linked_from
    UNION ALL  -- an event its source no longer reports (the standing rule): it stands no more from the check on
    SELECT 'STANDING_EVENT', x.ended_at, b.observation_id,
           jsonb_build_object('eventType', e.event_type, 'source', e.source, 'observedAt', e.observed_at,
                              'reportedAt', e.reported_at, 'noticeDoi', e.notice_doi),
           NULL, jsonb_build_object('eventType', upper(e.event_type), 'source', e.source, 'standing', true),
           jsonb_build_object('eventType', upper(e.event_type), 'source', e.source, 'standing', false,
                              'endedAt', x.ended_at)
    FROM work_event_ends AS x JOIN work_events AS e USING (work_id, source, event_type, observed_at)
    JOIN by_work AS b USING (work_id)
    WHERE x.ended_at > $2 AND x.ended_at <= $3 AND x.ended_at >= b.linked_from
      AND EXISTS (SELECT 1 FROM work_snapshots AS ws WHERE ws.work_id = x.work_id AND ws.observed_at <= x.ended_at)
    UNION ALL
    SELECT 'STANDING_CHECKED', x.observed_at, b.observation_id, NULL, NULL, NULL,
           jsonb_build_object('source', x.source)
    FROM standing_receipts AS x JOIN by_work AS b USING (work_id)
    WHERE x.observed_at > $2 AND x.observed_at <= $3 AND {_LINKED.format(fact='x')} AND x.observed_at >= b.linked_from
    UNION ALL
    SELECT 'MEASUREMENT_CHANGED', m.observed_at, NULL, NULL,
           jsonb_build_object('source', m.source, 'count', m.count, 'observedAt', m.observed_at),
           (SELECT jsonb_build_object('count', q.count) FROM external_measurements AS q
            WHERE q.arxiv_id = m.arxiv_id AND q.source = m.source AND q.observed_at < m.observed_at
            ORDER BY q.observed_at DESC LIMIT 1),
           jsonb_build_object('count', m.count)
    FROM external_measurements AS m WHERE m.arxiv_id = $1 AND m.observed_at > $2 AND m.observed_at <= $3
    UNION ALL
    SELECT 'CITING_PAPER_UPDATED', s.observed_at, b.observation_id, NULL, NULL, {_previous_paper('s')},
           {_paper_json('s')}
    FROM paper_snapshots AS s JOIN by_citing AS b USING (arxiv_id)
    WHERE s.observed_at > $2 AND s.observed_at <= $3
    UNION ALL
    SELECT 'CITED_PAPER_UPDATED', s.observed_at, b.observation_id, NULL, NULL, {_previous_paper('s')},
           {_paper_json('s')}
    FROM paper_snapshots AS s JOIN by_cited AS b USING (arxiv_id)
    WHERE s.observed_at > $2 AND s.observed_at <= $3
)
SELECT ch.kind, ch.at, ch.event, ch.measurement, ch.previous, ch.current, {_DETAIL_COLUMNS.replace("$AS", "$3")}
FROM (  -- the changes asked for first, then the details of those alone (not of every change in the window)
    SELECT * FROM ch WHERE $5::text[] IS NULL OR ch.kind = ANY($5::text[])
    ORDER BY ch.at, ch.obs NULLS FIRST, ch.kind
    LIMIT $4
) AS ch
LEFT JOIN citation_observations AS o ON o.observation_id = ch.obs
{detail_joins(outer=True).replace("$AS", "$3")}
ORDER BY ch.at, ch.obs NULLS FIRST, ch.kind
"""


@dataclass(frozen=True)
class Change:
    kind: str
    observed_at: datetime
    observation: Observation | None
    event: dict[str, Any] | None
    measurement: dict[str, Any] | None
    previous: Any
    current: Any


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


async def record_changes(db: Db, arxiv_id: str, after: datetime, until: datetime,
                         limit: int | None = None, kinds: Sequence[str] | None = None) -> list[Change]:
    """The first `limit` changes (all when None) of these kinds (all when None), oldest first."""
    rows: Sequence[Any] = await db.fetch(CHANGES, arxiv_id, after, until, limit,
                                         list(kinds) if kinds is not None else None)
    return await in_stretches(rows, lambda r: Change(  # thousands of rows
        r["kind"], r["at"], observation_from(r) if r["observation_id"] is not None else None, _json(r["event"]),
        _json(r["measurement"]), _json(r["previous"]), _json(r["current"])))
