"""A v1 document's standing notices as its sources' checks (docs/standing.md, "Documents").

A notice shows, for each source that checked the cited work, its latest check at the document's `as_of`, and the
events standing then. So each (work, source, receipt) of a document is one check of that source, and the events of
that source it lists are what the check reported: an event of the source observed by then that the check does not
list had ended by it. Loaded alone, a document's own events stand at its checks; loaded beside documents (or
imports) of the same work at other instants, the ends follow from all of them, whatever the order:

- an event a check no longer lists ends at the first such check after it was observed (an earlier end stays);
- a run of an event ends, at the latest, where the same event's next run begins (observed again after a check that
  no longer reported it);
- an event new to the store ends at the first check of its source already stored after the last check that lists
  it (that check, made without it, did not report it);
- a check that lists an event which had ended by then, or an event observed at a check the store already held
  without it, or one that leaves out an event a later stored check still reports, contradicts what is stored: the
  file is refused, naming the document and the event, and nothing of it is written.

Every check of the file is then verified against the store as it will stand: the events standing at the check
are exactly those it lists, so every document loaded is served back with its own notices.
"""

from __future__ import annotations

from datetime import datetime
from collections.abc import Callable
from typing import Any
from uuid import UUID

import asyncpg

from app import record

# (work_id, source, at) -> (the events listed: (event_type, observed_at), ...), sorted
Checks = dict[tuple[UUID, str, datetime], tuple[tuple[str, datetime], ...]]


def document_checks(standing: dict[UUID, Any]) -> Checks:
    """The checks one parsed document's notices make (its RecordRows.standing)."""
    checks: Checks = {}
    for work_id, s in standing.items():
        for receipt in s.receipts:
            checks[(work_id, receipt.source, receipt.observed_at)] = tuple(sorted(
                (e.event_type, e.observed_at) for e in s.events if e.source == receipt.source))
    return checks


class CheckLedger:
    """The checks of one file, each with the first document that made it; two documents making the same check
    must list the same events."""

    def __init__(self, refuse: Callable[[str, str], Exception]) -> None:
        self.refuse = refuse  # (where, message) -> the exception to raise
        self.checks: Checks = {}
        self.origins: dict[tuple, str] = {}

    def add(self, checks: Checks, origin: str) -> None:
        for key, listed in checks.items():
            old = self.checks.get(key)
            if old is None:
                self.checks[key] = listed
                self.origins[key] = origin
            elif old != listed:
                work_id, source, at = key
                raise self.refuse(origin, (
                    f"the check of work {work_id} by {source} at {record.offset_time(at)} lists "
                    f"{_events(listed)} here and {_events(old)} in {self.origins[key]}: one check reports one set of "
                    "events"))


def _events(listed: tuple) -> str:
    return "[" + ", ".join(f"{t} observed {record.offset_time(o)}" for t, o in listed) + "]" if listed else "no event"


# Each statement runs in the load's transaction, after every document's facts were merged. An event or a receipt
# this transaction wrote has its id as xmin: the others were stored before the file.
_TABLES = """CREATE TEMP TABLE doc_checks (work_id uuid, source text, at timestamptz, origin text,
                                     PRIMARY KEY (work_id, source, at)) ON COMMIT DROP;
    CREATE TEMP TABLE doc_listed (work_id uuid, source text, at timestamptz, event_type text,
                                  observed_at timestamptz) ON COMMIT DROP;
    CREATE TEMP TABLE doc_ends (work_id uuid, source text, event_type text, observed_at timestamptz,
                                ended_at timestamptz, old_end timestamptz) ON COMMIT DROP"""

_PAIRS = "(SELECT DISTINCT work_id, source FROM doc_checks)"

# A stored receipt that is a whole check (not one a document implied by an event's observation alone).
_WHOLE_CHECK = ("NOT EXISTS (SELECT 1 FROM implied_checks AS i WHERE i.work_id = r.work_id AND i.source = r.source "
        "AND i.observed_at = r.observed_at)")

# The receipts this file added that none of its notices shows are implied by its events alone; those its notices
# show are whole checks from now on (migration 0025).
_IMPLIED = """
INSERT INTO implied_checks (work_id, source, observed_at)
SELECT r.work_id, r.source, r.observed_at FROM standing_receipts AS r
JOIN (SELECT DISTINCT work_id, source FROM doc_listed) AS p USING (work_id, source)
WHERE r.xmin = pg_current_xact_id()::xid
  AND NOT EXISTS (SELECT 1 FROM doc_checks AS c WHERE c.work_id = r.work_id AND c.source = r.source
                  AND c.at = r.observed_at)
ON CONFLICT DO NOTHING;
DELETE FROM implied_checks AS i USING doc_checks AS c
WHERE i.work_id = c.work_id AND i.source = c.source AND i.observed_at = c.at
"""

# The events of the checked (work, source) pairs, with what the file's checks and the stored checks say of them.
_EVENTS = f"""
CREATE TEMP TABLE doc_events ON COMMIT DROP AS
SELECT e.work_id, e.source, e.event_type, e.observed_at, e.xmin = pg_current_xact_id()::xid AS new, x.ended_at,
       (SELECT max(l.at) FROM doc_listed AS l WHERE l.work_id = e.work_id AND l.source = e.source
        AND l.event_type = e.event_type AND l.observed_at = e.observed_at) AS listed_until,
       (SELECT min(c.at) FROM doc_checks AS c WHERE c.work_id = e.work_id AND c.source = e.source
        AND c.at >= e.observed_at
        AND NOT EXISTS (SELECT 1 FROM doc_listed AS l WHERE l.work_id = c.work_id AND l.source = c.source
                        AND l.at = c.at AND l.event_type = e.event_type AND l.observed_at = e.observed_at)) AS unlisted,
       -- the same event's next run (observed again later, after a check that no longer reported it): this run
       -- ended by then
       (SELECT min(n.observed_at) FROM work_events AS n WHERE n.work_id = e.work_id AND n.source = e.source
        AND n.event_type = e.event_type AND n.observed_at > e.observed_at
        AND n.reported_at IS NOT DISTINCT FROM e.reported_at AND n.notice_doi IS NOT DISTINCT FROM e.notice_doi)
       AS next_run
FROM work_events AS e
JOIN {_PAIRS} AS p ON p.work_id = e.work_id AND p.source = e.source
LEFT JOIN work_event_ends AS x ON x.work_id = e.work_id AND x.source = e.source AND x.event_type = e.event_type
     AND x.observed_at = e.observed_at
"""

# Contradictions, each with the check (and its document) that makes it; the first is named.
_CONTRADICTIONS = f"""
SELECT * FROM (
  -- a check lists an event that had ended by then (stored before this file)
  SELECT 1 AS k, d.work_id, d.source, d.event_type, d.observed_at, d.ended_at AS at,
         (SELECT c.origin FROM doc_checks AS c JOIN doc_listed AS l USING (work_id, source, at)
          WHERE c.work_id = d.work_id AND c.source = d.source AND l.event_type = d.event_type
          AND l.observed_at = d.observed_at AND c.at >= d.ended_at ORDER BY c.at LIMIT 1) AS origin
  FROM doc_events AS d WHERE d.listed_until >= d.ended_at
  UNION ALL
  -- a check leaves out an event at its own observation, or before a check that lists it
  SELECT 2, d.work_id, d.source, d.event_type, d.observed_at, d.unlisted,
         (SELECT c.origin FROM doc_checks AS c WHERE c.work_id = d.work_id AND c.source = d.source
          AND c.at = d.unlisted)
  FROM doc_events AS d WHERE d.unlisted <= coalesce(d.listed_until, d.observed_at)
  UNION ALL
  -- an event new to the store observed at or before a check already stored, which did not report it
  SELECT 3, d.work_id, d.source, d.event_type, d.observed_at, r.observed_at,
         (SELECT c.origin FROM doc_checks AS c JOIN doc_listed AS l USING (work_id, source, at)
          WHERE c.work_id = d.work_id AND c.source = d.source AND l.event_type = d.event_type
          AND l.observed_at = d.observed_at ORDER BY c.at DESC LIMIT 1)
  FROM doc_events AS d
  JOIN standing_receipts AS r ON r.work_id = d.work_id AND r.source = d.source
       AND r.observed_at BETWEEN d.observed_at AND d.listed_until AND r.xmin <> pg_current_xact_id()::xid
       AND {_WHOLE_CHECK}
  WHERE d.new
  UNION ALL
  -- a check leaves out an event that a stored check (the same or a later one), before any end of it, still reports
  SELECT 4, d.work_id, d.source, d.event_type, d.observed_at, r.observed_at,
         (SELECT c.origin FROM doc_checks AS c WHERE c.work_id = d.work_id AND c.source = d.source
          AND c.at = d.unlisted)
  FROM doc_events AS d
  JOIN standing_receipts AS r ON r.work_id = d.work_id AND r.source = d.source AND r.observed_at >= d.unlisted
       AND r.observed_at < coalesce(least(d.ended_at, d.next_run), 'infinity')
       AND r.xmin <> pg_current_xact_id()::xid AND {_WHOLE_CHECK}
  WHERE NOT d.new
) AS c ORDER BY k, origin, work_id, observed_at LIMIT 1
"""

# Each event's end: the earliest of its stored end, the first check of the file that leaves it out, and (new to the
# store) the first check of its source stored before the file after the last check that lists it.
_ENDS = f"""
INSERT INTO doc_ends
SELECT work_id, source, event_type, observed_at, ended, ended_at FROM (
  SELECT d.*, least(d.ended_at, d.unlisted, d.next_run,
                    CASE WHEN d.new THEN (SELECT min(r.observed_at) FROM standing_receipts AS r
                                          WHERE r.work_id = d.work_id AND r.source = d.source
                                          AND r.observed_at > d.listed_until
                                          AND r.xmin <> pg_current_xact_id()::xid AND {_WHOLE_CHECK}) END) AS ended
  FROM doc_events AS d) AS e
WHERE ended IS NOT NULL AND ended IS DISTINCT FROM ended_at
"""

_WRITE = """
CREATE TEMP TABLE IF NOT EXISTS new_work_event_ends (LIKE work_event_ends) ON COMMIT DROP;
UPDATE work_event_ends AS x SET ended_at = n.ended_at FROM doc_ends AS n
WHERE n.old_end IS NOT NULL AND x.work_id = n.work_id AND x.source = n.source AND x.event_type = n.event_type
  AND x.observed_at = n.observed_at;
INSERT INTO work_event_ends (work_id, source, event_type, observed_at, ended_at)
SELECT work_id, source, event_type, observed_at, ended_at FROM doc_ends WHERE old_end IS NULL;
INSERT INTO new_work_event_ends (work_id, source, event_type, observed_at, ended_at)
SELECT work_id, source, event_type, observed_at, ended_at FROM doc_ends
"""

# After the ends: a check whose listing is not what stands at it (the first one, with its document).
_VERIFY = """
SELECT c.origin, c.work_id, c.source, c.at, s.event_type, s.observed_at, s.listed FROM doc_checks AS c
JOIN LATERAL (
  SELECT e.event_type, e.observed_at, false AS listed FROM work_events AS e
  WHERE e.work_id = c.work_id AND e.source = c.source AND e.observed_at <= c.at
    AND NOT EXISTS (SELECT 1 FROM work_event_ends AS x WHERE x.work_id = e.work_id AND x.source = e.source
                    AND x.event_type = e.event_type AND x.observed_at = e.observed_at AND x.ended_at <= c.at)
  EXCEPT
  SELECT l.event_type, l.observed_at, false FROM doc_listed AS l
  WHERE l.work_id = c.work_id AND l.source = c.source AND l.at = c.at
  UNION ALL
  (SELECT l.event_type, l.observed_at, true FROM doc_listed AS l
   WHERE l.work_id = c.work_id AND l.source = c.source AND l.at = c.at
   EXCEPT
   SELECT e.event_type, e.observed_at, true FROM work_events AS e
   WHERE e.work_id = c.work_id AND e.source = c.source AND e.observed_at <= c.at
     AND NOT EXISTS (SELECT 1 FROM work_event_ends AS x WHERE x.work_id = e.work_id AND x.source = e.source
                     AND x.event_type = e.event_type AND x.observed_at = e.observed_at AND x.ended_at <= c.at))
) AS s ON true
-- (a check of a work and source with no event stored lists none: nothing to compare)
WHERE EXISTS (SELECT 1 FROM work_events AS e WHERE e.work_id = c.work_id AND e.source = c.source)
ORDER BY c.origin LIMIT 1
"""

WHY = {
    1: "lists the event {event} as standing, but it ended at {at} (a check of {source} that no longer reported it)",
    2: "leaves out the event {event}, which a check of {source} at {at} or later still reports (or it was observed "
       "at this very check)",
    3: "lists the event {event}, but the check of {source} at {at}, stored before, did not report it",
    4: "leaves out the event {event}, which the stored check of {source} at {at} (this one or a later one) still "
       "reports",
}


async def _named(conn: asyncpg.Connection, work_id: UUID) -> str:
    """A work as a refusal names it: its id, and its DOI where it has one."""
    doi = await conn.fetchval("SELECT doi FROM work_snapshots WHERE work_id = $1 AND doi IS NOT NULL "
                              "ORDER BY observed_at DESC LIMIT 1", work_id)
    return f"{work_id} (DOI {doi})" if doi else str(work_id)


async def settle(conn: asyncpg.Connection, ledger: CheckLedger) -> int:
    """Derive the ends the file's checks imply, refuse a file that contradicts the store, verify every check; the
    number of ends added or moved earlier (each announced to the citing papers as the importers' ends are)."""
    if not ledger.checks:
        return 0
    await conn.execute(_TABLES)
    await conn.copy_records_to_table(
        "doc_checks", columns=["work_id", "source", "at", "origin"],
        records=[(w, s, at, ledger.origins[(w, s, at)]) for (w, s, at) in ledger.checks])
    await conn.copy_records_to_table(
        "doc_listed", columns=["work_id", "source", "at", "event_type", "observed_at"],
        records=[(w, s, at, t, o) for (w, s, at), listed in ledger.checks.items() for t, o in listed])
    await conn.execute("CREATE INDEX ON doc_listed (work_id, source, at); ANALYZE doc_checks; ANALYZE doc_listed")
    await conn.execute(_EVENTS)
    await conn.execute("ANALYZE doc_events")
    bad = await conn.fetchrow(_CONTRADICTIONS)
    if bad is not None:
        event = f"{bad['event_type']} of work {await _named(conn, bad['work_id'])} by {bad['source']} observed " \
                f"{record.offset_time(bad['observed_at'])}"
        raise ledger.refuse(bad["origin"] or "the file", "standing_notice.events: the notice " + WHY[bad["k"]].format(
            event=event, source=bad["source"], at=record.offset_time(bad["at"])))
    await conn.execute(_ENDS)
    await conn.execute(_IMPLIED)
    moved = await conn.fetchval("SELECT count(*) FROM doc_ends")
    if moved:
        await conn.execute(_WRITE)
    wrong = await conn.fetchrow(_VERIFY)
    if wrong is not None:
        what = "lists" if wrong["listed"] else "leaves out"
        raise ledger.refuse(wrong["origin"], (
            f"standing_notice.events: the notice's check of work {await _named(conn, wrong['work_id'])} by "
            f"{wrong['source']} at "
            f"{record.offset_time(wrong['at'])} {what} the event {wrong['event_type']} observed "
            f"{record.offset_time(wrong['observed_at'])}, which the other documents and the store say "
            + ("had ended by then" if wrong["listed"] else "still stood then")))
    return int(moved)
