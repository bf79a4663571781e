"""Enumeration as of an instant: every paper (browsePapers) and every work (works), filtered, as keyset pages.

Each page is one statement that walks an index in the page's order and stops after the page (plus one
row, to tell whether more follow): a paper's latest snapshot at the instant is the row of its primary key
(arxiv_id, observed_at) with no later one by then, so no page reads the papers before it. A first page and
a later one are separate statements (a generic plan cannot turn "no cursor, or after it" into an index
range). The citesRetracted and retracted filters are the rule of loaders.citations.retracted_sql, checked
only on works with a retracting event. INBOUND_COUNT_DESC at an instant before the kept totals are exact
takes a second statement (every paper counted).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Sequence
from uuid import UUID

from loaders.base import Db, at_param
from loaders.citations import MAY_BE_RETRACTED, VISIBLE, retracted_sql
from loaders.papers import PAPER_COLUMNS, paper_from
from loaders.rows import PaperSnapshot, WorkSnapshot, stands_sql
from loaders.works import snapshot_from

_LATEST_PAPER: Final = """NOT EXISTS (SELECT 1 FROM paper_snapshots AS n WHERE n.arxiv_id = s.arxiv_id
                     AND n.observed_at > s.observed_at AND n.observed_at <= $AS)"""
# Papers with a visible reference whose cited work is retracted at the instant.
_CITING_RETRACTED: Final = f"""(SELECT o.citing_arxiv_id FROM citation_observations AS o
     WHERE o.work_id IN {MAY_BE_RETRACTED} AND {VISIBLE} AND {retracted_sql("o.work_id")})"""
# Every paper's inbound total at the instant (its inbound connection's totalCount), in one pass.
_INBOUND_AT: Final = f"""(SELECT o.cited_arxiv_id AS arxiv_id, count(*) AS total FROM citation_observations AS o
     WHERE o.cited_arxiv_id IS NOT NULL AND {VISIBLE} GROUP BY o.cited_arxiv_id)"""

# $1 instant, $2 rows, $3 category, $4 submitted from, $5 submitted to; the cursor's key from $6.
_KEYS: Final = {
    "ARXIV_ID": ("s.arxiv_id", "s.arxiv_id > $6::text"),
    "SUBMITTED_AT": ("s.submitted_at, s.arxiv_id", "(s.submitted_at, s.arxiv_id) > ($6::timestamptz, $7::text)"),
    "INBOUND_COUNT_DESC": ("inbound DESC, s.arxiv_id",
                           "(inbound < $6::bigint OR (inbound = $6::bigint AND s.arxiv_id > $7::text))"),
}


def sort_key(order: str, paper: PaperSnapshot, inbound: int | None) -> list:
    """A listed paper's place in `order`: the values _KEYS compares after it, in that order (its cursor
    carries them; app.cursors.decode_browse reads them back)."""
    if order == "ARXIV_ID":
        return [paper.arxiv_id]
    if order == "SUBMITTED_AT":
        return [paper.submitted_at.isoformat(), paper.arxiv_id]
    return [inbound, paper.arxiv_id]


# The instant from which the kept totals (migration 0011) are every paper's inbound total.
_TOTALS_EXACT: Final = ("$AS >= coalesce((SELECT max(counted_until) FROM paper_inbound_totals), "
                        "'-infinity'::timestamptz)")
_SNAPSHOT_COLUMNS: Final = "s." + PAPER_COLUMNS.replace(", ", ", s.")


def _conditions(cites_retracted: bool | None) -> list[str]:
    """What makes the row `s` a listed paper: its latest snapshot at the instant (the first two), passing
    the filter."""
    conditions = ["s.observed_at <= $AS", _LATEST_PAPER,
                  "($3::text IS NULL OR s.primary_category = $3::text)",
                  "($4::timestamptz IS NULL OR s.submitted_at >= $4::timestamptz)",
                  "($5::timestamptz IS NULL OR s.submitted_at <= $5::timestamptz)"]
    if cites_retracted is not None:
        conditions.append(f"s.arxiv_id {'IN' if cites_retracted else 'NOT IN'} {_CITING_RETRACTED}")
    return conditions


def browse_sql(order: str, cites_retracted: bool | None, after: bool) -> str:
    sort, past = _KEYS[order]
    conditions = _conditions(cites_retracted)
    if order != "INBOUND_COUNT_DESC":
        return at_param(f"SELECT {_SNAPSHOT_COLUMNS}, NULL::bigint AS inbound\nFROM paper_snapshots AS s\nWHERE "
                        + "\n  AND ".join(conditions + ([past] if after else [])) + f"\nORDER BY {sort}\nLIMIT $2", 1)
    # Most cited first, from the kept totals (an index walk in this order) at any instant they are exact
    # for. Before that instant the statement returns one row of NULLs instead, and the page is counted
    # (counted_sql). Two statements, not one with both branches: planned together, the counted branch's
    # cost made every page of the kept one look like a scan of the graph (and JIT-compile where JIT is on).
    # Each paper's latest snapshot by a probe of its own (LATERAL ... LIMIT 1): the pool plans statements
    # once, generically, and a join the planner is free to choose became a scan of every snapshot per row.
    kept_past = "(-t.total, t.arxiv_id) > (-$6::bigint, $7::text)"
    latest = (f"SELECT {PAPER_COLUMNS} FROM paper_snapshots AS p WHERE p.arxiv_id = t.arxiv_id "
              "AND p.observed_at <= $AS ORDER BY p.observed_at DESC LIMIT 1")
    kept = (f"SELECT {_SNAPSHOT_COLUMNS}, t.total AS inbound\nFROM paper_inbound_totals AS t\n"
            f"CROSS JOIN LATERAL ({latest}) AS s\nWHERE " + _TOTALS_EXACT + "\n  AND "
            + "\n  AND ".join(conditions[2:] + ([kept_past] if after else []))
            + "\nORDER BY -t.total, t.arxiv_id\nLIMIT $2")
    not_exact = f"SELECT {', '.join(['NULL'] * (PAPER_COLUMNS.count(',') + 2))} WHERE NOT {_TOTALS_EXACT}"
    return at_param(f"({kept})\nUNION ALL\n{not_exact}", 1)


def counted_sql(cites_retracted: bool | None, after: bool) -> str:
    """INBOUND_COUNT_DESC at an instant the kept totals are not exact for: every paper's total counted."""
    sort, past = _KEYS["INBOUND_COUNT_DESC"]
    return at_param(f"SELECT * FROM (SELECT {_SNAPSHOT_COLUMNS}, coalesce(c.total, 0) AS inbound\n"
                    f"FROM paper_snapshots AS s\nLEFT JOIN {_INBOUND_AT} AS c ON c.arxiv_id = s.arxiv_id\n"
                    "WHERE " + "\n  AND ".join(_conditions(cites_retracted)) + ") AS s"
                    + (f"\nWHERE {past}" if after else "") + f"\nORDER BY {sort}\nLIMIT $2", 1)


@dataclass(frozen=True)
class PaperPage:
    papers: list[tuple[PaperSnapshot, int | None]]  # with the inbound total when ordered by it
    more: bool


async def browse_papers(db: Db, as_of: datetime, first: int, order: str, category: str | None,
                        submitted_from: datetime | None, submitted_to: datetime | None,
                        cites_retracted: bool | None, after: Sequence[Any] | None) -> PaperPage:
    args = (as_of, first + 1, category, submitted_from, submitted_to, *(after or ()))
    rows = await db.fetch(browse_sql(order, cites_retracted, after is not None), *args)
    if order == "INBOUND_COUNT_DESC" and rows and rows[0]["observed_at"] is None:  # the totals are not exact then
        rows = await db.fetch(counted_sql(cites_retracted, after is not None), *args)
    found = [(p, r["inbound"]) for r in rows if (p := paper_from(r)) is not None]
    return PaperPage(found[:first], len(found) > first)


# Works: each work's latest snapshot at the instant, by work id. $1 instant, $2 rows, $3 event type,
# $4 event source (works with such an event by the instant); $5 the cursor's work id.
_LATEST_WORK: Final = """NOT EXISTS (SELECT 1 FROM work_snapshots AS n WHERE n.work_id = w.work_id
                     AND n.observed_at > w.observed_at AND n.observed_at <= $AS)"""
_HAS_EVENT: Final = f"""($3::text IS NULL AND $4::text IS NULL OR w.work_id IN (
        SELECT e.work_id FROM work_events AS e WHERE {stands_sql("e")}
           AND ($3::text IS NULL OR e.event_type = $3::text) AND ($4::text IS NULL OR e.source = $4::text)))"""


def works_sql(retracted: bool | None, after: bool) -> str:
    conditions = ["w.observed_at <= $AS", _LATEST_WORK, _HAS_EVENT]
    if retracted is True:
        conditions.append(f"w.work_id IN {MAY_BE_RETRACTED} AND {retracted_sql('w.work_id')}")
    elif retracted is False:
        conditions.append(f"NOT {retracted_sql('w.work_id')}")
    if after:
        conditions.append("w.work_id > $5::uuid")
    return at_param("SELECT w.* FROM work_snapshots AS w\nWHERE " + "\n  AND ".join(conditions)
                    + "\nORDER BY w.work_id\nLIMIT $2", 1)


@dataclass(frozen=True)
class WorkPage:
    works: list[WorkSnapshot]
    more: bool


async def browse_works(db: Db, as_of: datetime, first: int, retracted: bool | None, event_type: str | None,
                       source: str | None, after: UUID | None) -> WorkPage:
    sql = works_sql(retracted, after is not None)
    rows = await db.fetch(sql, as_of, first + 1, event_type, source, *((after,) if after else ()))
    found = [snapshot_from(r) for r in rows]
    return WorkPage(found[:first], len(found) > first)
