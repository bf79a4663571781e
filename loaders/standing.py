"""What standing sources say of works as of an instant: latest receipt per source, and the events standing
(the standing rule, loaders.rows)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final, Sequence
from uuid import UUID

from loaders.base import Db, at_param, fetch_at_pairs
from loaders.rows import Event, Receipt, Standing, stands_sql

# Receipts (latest per work and source) and events in one statement: a notice needs both.
STANDING_TEMPLATE: Final = """
SELECT 'receipt' AS kind, r.work_id, r.source, r.observed_at,
       NULL::text AS event_type, NULL::timestamptz AS reported_at, NULL::text AS notice_doi
FROM (
    SELECT DISTINCT ON (work_id, source) work_id, source, observed_at
    FROM standing_receipts
    WHERE work_id = ANY($1::uuid[])
      AND observed_at <= $AS
    ORDER BY work_id, source, observed_at DESC
) AS r
UNION ALL
SELECT 'event', e.work_id, e.source, e.observed_at, e.event_type, e.reported_at, e.notice_doi
FROM work_events AS e
WHERE e.work_id = ANY($1::uuid[])
  AND """ + stands_sql("e") + """
ORDER BY 1 DESC, 2, 4, 3, 6 NULLS FIRST, 5
"""  # receipts, then the standing events (rows.NOTICE_ORDER: observed_at, source, reported_at, event_type), per work
STANDING_BY_WORK_ID: Final = at_param(STANDING_TEMPLATE, 2)


async def standing_by_work(db: Db, work_ids: Sequence[UUID], as_of: datetime) -> list[Standing]:
    """One Standing per work id, in key order; receipts by source, events by time then source."""
    return standing_from_rows(await db.fetch(STANDING_BY_WORK_ID, list(work_ids), as_of), work_ids)


async def standing_at(db: Db, pairs: Sequence[tuple[UUID, datetime]]) -> list[Standing]:
    """Each (work id, instant)'s Standing, in one statement whatever the number of instants."""
    fetched = await fetch_at_pairs(db, STANDING_TEMPLATE, pairs, key_type="uuid")
    return [standing_from_rows(rows, [work_id])[0] for rows, (work_id, _) in zip(fetched, pairs, strict=True)]


def standing_from_rows(rows: Sequence[Any], work_ids: Sequence[UUID]) -> list[Standing]:
    receipts: dict[UUID, list[Receipt]] = {}
    events: dict[UUID, list[Event]] = {}
    for row in rows:
        if row["kind"] == "receipt":
            receipts.setdefault(row["work_id"], []).append(Receipt(row["work_id"], row["source"], row["observed_at"]))
        else:
            events.setdefault(row["work_id"], []).append(
                Event(row["work_id"], row["source"], row["event_type"], row["observed_at"], row["reported_at"],
                      row["notice_doi"])
            )
    return [
        Standing(
            receipts=tuple(sorted(receipts.get(w, ()), key=lambda r: r.source)),
            events=tuple(events.get(w, ())),
        )
        for w in work_ids
    ]
