"""Enumeration as of an instant: every paper (browsePapers) and every work (works), filtered, as keyset pages.

Each page is one statement that walks an index in the page's order and stops after the page (plus one
row, to tell whether more follow): a paper's latest snapshot at the instant is the row of its primary key
(arxiv_id, observed_at) with no later one by then, so no page reads the papers before it. A first page and
a later one are separate statements (a generic plan cannot turn "no cursor, or after it" into an index
range). The citesRetracted and retracted filters read the spans the database keeps of the standing rule
(loaders.citations.retracted_sql) for every instant (migration 0022): citesRetracted: true in arXiv id or
submission order, and works(filter: {retracted: true}), walk those spans in the page's order; the other
orders and filters probe a paper's or work's span as they walk. Under the pool's generic plans
(force_generic_plan) no page reads more than the first (tests/test_browse.py EXPLAINs them).
INBOUND_COUNT_DESC walks the kept totals; papers cited after the instant ("ahead" of it: a past instant, a
citation dated later) are merged in with their totals at the instant while at most AHEAD_MAX are; past that,
a page takes a second statement (every paper counted).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Sequence
from uuid import UUID

from loaders.base import Db, at_param
from loaders.citations import TOTALS_EXACT, VISIBLE, inbound_total_sql
from loaders.papers import PAPER_COLUMNS, paper_from
from loaders.rows import PaperSnapshot, WorkSnapshot, stands_sql
from loaders.works import snapshot_from

# The row is its paper's latest snapshot at the instant: a probe of the primary key for each row walked,
# "no later snapshot by then", as a scalar subquery (as a NOT EXISTS, the pool's generic plan made it a
# merge anti join that read every snapshot before the page: 20,340 index rows for a late page at 20,000
# papers; as "observed_at = the latest", the generic plan took it to pass almost no row and sorted every
# snapshot instead of walking the submission index: 155,262 rows, 746 ms, for a page at 50,000 papers).
_LATEST_PAPER: Final = """coalesce((SELECT false FROM paper_snapshots AS n WHERE n.arxiv_id = s.arxiv_id
                     AND n.observed_at > s.observed_at AND n.observed_at <= $AS LIMIT 1), true)"""
# A paper citing retracted work at the instant: its covering span, kept by the database (migration 0022)
# for every instant, with the paper's latest snapshot then. A probe of the primary key per paper walked, as
# a scalar subquery (the pool's generic plans cannot turn it into a join that reads every span).
_CITING_SPAN: Final = "c.from_at <= $AS AND c.until_at > $AS"


def _cites_retracted(paper: str, cites: bool) -> str:
    return (f"coalesce((SELECT {'true' if cites else 'false'} FROM paper_retracted_citing_spans AS c "
            f"WHERE c.arxiv_id = {paper} AND {_CITING_SPAN} LIMIT 1), {'false' if cites else 'true'})")


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


_SNAPSHOT_COLUMNS: Final = "s." + PAPER_COLUMNS.replace(", ", ", s.")
# A filtered page walks this many rows in its order from the cursor first (a broad set fills its page there),
# then, when they fill no page, the set's own rows (a small category's or an old window's).
WALK_FIRST: Final = 2_000
# ... the gate of the set's own walk: the short walk (the CTE "walked") filled no page.
_SHORT: Final = "(SELECT count(*) FROM walked) < $2"
# Most cited first reads the kept totals (migration 0011), each paper's total from its latest visible_from on. A
# paper cited after the instant (a past instant, a source's clock ahead, an import dated later) is "ahead" of it:
# while at most AHEAD_MAX papers are, the walks skip them and they are merged in with their totals at the
# instant (loaders.citations.inbound_total_sql); past that, every paper is counted (counted_sql).
AHEAD_MAX: Final = 500
# Whether at most AHEAD_MAX are: counted once per statement (the CTE "few", which every most-cited statement
# starts with), read by each part it gates. (In the order of the index of counted_until, from the latest: without
# it, the generic plan took a third of the totals to be ahead and counted them by a scan of all.)
def _few_ahead_cte() -> str:
    return (f"few AS MATERIALIZED (SELECT (SELECT count(*) FROM (SELECT FROM paper_inbound_totals AS ah "
            f"WHERE ah.counted_until > $AS ORDER BY ah.counted_until DESC LIMIT {AHEAD_MAX + 1}) AS ah) "
            f"<= {AHEAD_MAX} AS ok)")


def _few_ahead() -> str:
    return "(SELECT few.ok FROM few)"


def _not_ahead(totals: str) -> str:
    """The paper of the kept totals row `totals` has its kept total at the instant (a CASE: taken to pass half
    the rows, it leaves the generic plans' walks as they were)."""
    return f"CASE WHEN {totals}.counted_until > $AS THEN false ELSE true END"


def _latest_of(alias: str) -> str:
    """The latest snapshot at the instant of the paper of row `alias`, by a probe of its own (LATERAL ... LIMIT 1)."""
    return (f"SELECT {PAPER_COLUMNS} FROM paper_snapshots AS p WHERE p.arxiv_id = {alias}.arxiv_id "
            "AND p.observed_at <= $AS ORDER BY p.observed_at DESC LIMIT 1")


def _short_walk_first(walked: str, order: str, rest: str, *ctes: str) -> str:
    """A filtered page: the short walk's rows when they fill the page, else the set's own walk (`rest`, gated by
    _SHORT), in one statement whose one-time filters run one of them."""
    named = ",\n".join([f"walked AS MATERIALIZED ({walked})", *ctes])
    return f"WITH {named}\n(SELECT * FROM walked WHERE NOT {_SHORT} ORDER BY {order})\nUNION ALL\n({rest})"


_FILTERS: Final = ("primary_category = $3::text", "submitted_at >= $4::timestamptz", "submitted_at <= $5::timestamptz")


def _filters(alias: str, given: tuple[bool, bool, bool] | None) -> list[str]:
    """The category and submission-window conditions on row `alias`: those given (browse_statement), or all
    three as "no value or ..." (given=None: one statement for any of them)."""
    if given is None:
        return [f"(${3 + i}::{('text', 'timestamptz', 'timestamptz')[i]} IS NULL OR {alias}.{f})"
                for i, f in enumerate(_FILTERS)]
    return [f"{alias}.{f}" for f, present in zip(_FILTERS, given, strict=True) if present]


def _conditions(cites_retracted: bool | None, given: tuple[bool, bool, bool] | None = None) -> list[str]:
    """What makes the row `s` a listed paper: its latest snapshot at the instant (the first two), passing
    the filter."""
    conditions = ["s.observed_at <= $AS", _LATEST_PAPER, *_filters("s", given)]
    if cites_retracted is not None:
        conditions.append(_cites_retracted("s.arxiv_id", cites_retracted))
    return conditions


# citesRetracted: true in arXiv id or submission order: a walk of the kept spans in that order (an index
# each), the spans covering the instant, each joined to the snapshot it names.
_SPAN_KEYS: Final = {
    "ARXIV_ID": ("c.arxiv_id", "c.arxiv_id > $6::text"),
    "SUBMITTED_AT": ("c.submitted_at, c.arxiv_id", "(c.submitted_at, c.arxiv_id) > ($6::timestamptz, $7::text)"),
}


def browse_statement(order: str, cites_retracted: bool | None, after: Sequence[Any] | None, as_of: datetime,
                     rows: int, category: str | None = None, submitted_from: datetime | None = None,
                     submitted_to: datetime | None = None, counted: bool = False) -> tuple[str, tuple]:
    """A page's statement and its arguments as browse_papers sends them (counted: counted_sql's), with only
    the filters given, its parameters numbered in order. Planned generically, a filter written as "no value,
    or ..." cannot bound an index walk (a submission window in submission order read every paper before the
    window: 421,169 rows for a page at 1,000,000 papers) and looks selective when it is not (citesRetracted:
    true in arXiv id order was planned as a sort of every span covering the instant, 101,338 rows, instead of
    a walk that stops after the page)."""
    given = (category is not None, submitted_from is not None, submitted_to is not None)
    sql, used = _numbered(order, cites_retracted, after is not None, given, counted)
    numbered = (as_of, rows, category, submitted_from, submitted_to, *(after or ()))
    return sql, tuple(numbered[old - 1] for old in used)


@functools.cache  # a few dozen shapes (order, filter, cursor, filters given), each built once
def _numbered(order: str, cites_retracted: bool | None, after: bool, given: tuple[bool, bool, bool],
              counted: bool) -> tuple[str, tuple[int, ...]]:
    """The statement of one shape with its parameters numbered in order, and the positions ($n of browse_sql's
    numbering) each one takes its value from."""
    return _renumbered(counted_sql(cites_retracted, after, given) if counted
                       else browse_sql(order, cites_retracted, after, given))


def _renumbered(sql: str) -> tuple[str, tuple[int, ...]]:
    """The statement with the parameters it uses numbered in order, and the old number of each."""
    used = tuple(sorted({int(n) for n in re.findall(r"\$(\d+)", sql)}))
    renumber = {old: new for new, old in enumerate(used, start=1)}
    return re.sub(r"\$(\d+)", lambda m: f"${renumber[int(m.group(1))]}", sql), used


def browse_sql(order: str, cites_retracted: bool | None, after: bool,
               given: tuple[bool, bool, bool] | None = None) -> str:
    """A page's statement ($1 instant, $2 rows, $3-$5 category and window, the cursor from $6): with `given`,
    only the filters given are in it (browse_statement numbers its parameters)."""
    sort, past = _KEYS[order]
    conditions = _conditions(cites_retracted, given)
    if cites_retracted is True and order != "INBOUND_COUNT_DESC":
        span_sort, span_past = _SPAN_KEYS[order]
        # The snapshot by a probe of its own (LATERAL ... LIMIT 1): as a join on (arxiv_id, observed_at) the
        # generic plan took the two columns' match to leave one row, worth no walk, and sorted every span
        # covering the instant (101,338 rows read for a first page at 1,000,000 papers, against 117).
        return at_param(f"SELECT {_SNAPSHOT_COLUMNS}, NULL::bigint AS inbound\n"
                        "FROM paper_retracted_citing_spans AS c\n"
                        "CROSS JOIN LATERAL (SELECT * FROM paper_snapshots AS s WHERE s.arxiv_id = c.arxiv_id "
                        "AND s.observed_at = c.snapshot_at LIMIT 1) AS s\n"
                        "WHERE " + "\n  AND ".join([_CITING_SPAN, *_filters("c", given)] + ([span_past] if after else []))
                        + f"\nORDER BY {span_sort}\nLIMIT $2", 1)
    if order == "ARXIV_ID" and given is not None and (given[1] or given[2]):
        return at_param(_window_by_id(conditions, given, after), 1)
    if order != "INBOUND_COUNT_DESC":
        return at_param(f"SELECT {_SNAPSHOT_COLUMNS}, NULL::bigint AS inbound\nFROM paper_snapshots AS s\n"
                        "WHERE " + "\n  AND ".join(conditions + ([past] if after else []))
                        + f"\nORDER BY {sort}\nLIMIT $2", 1)
    # Most cited first, from the kept totals (an index walk in this order) at any instant they are exact
    # for. Before that instant the statement returns one row of NULLs instead, and the page is counted
    # (counted_sql). Two statements, not one with both branches: planned together, the counted branch's
    # cost made every page of the kept one look like a scan of the graph (and JIT-compile where JIT is on).
    # Each paper's latest snapshot by a probe of its own (LATERAL ... LIMIT 1): the pool plans statements
    # once, generically, and a join the planner is free to choose became a scan of every snapshot per row.
    kept_past = "(-t.total, t.arxiv_id) > (-$6::bigint, $7::text)"
    latest = _latest_of("t")
    totals, filters = "paper_inbound_totals AS t", conditions[2:]
    if cites_retracted is True:
        # A paper's covering span first (one probe per total walked), then the snapshot it names.
        totals += (" CROSS JOIN LATERAL (SELECT c.snapshot_at FROM paper_retracted_citing_spans AS c "
                   f"WHERE c.arxiv_id = t.arxiv_id AND {_CITING_SPAN} LIMIT 1) AS c")
        latest = (f"SELECT {PAPER_COLUMNS} FROM paper_snapshots AS p WHERE p.arxiv_id = t.arxiv_id "
                  "AND p.observed_at = c.snapshot_at LIMIT 1")
        filters = filters[:-1]

    def walk(source: str, past: list[str], most: str = "-t.total") -> str:
        """The totals of `source` walked most cited first (`most` the key), each with its latest snapshot,
        filtered."""
        return (f"SELECT {_SNAPSHOT_COLUMNS}, t.total AS inbound\nFROM {source}\n"
                f"CROSS JOIN LATERAL ({latest}) AS s\nWHERE "
                + "\n  AND ".join([_few_ahead(), _not_ahead("t"), *filters, *past])
                + f"\nORDER BY {most}, t.arxiv_id\nLIMIT $2")

    cursor = [kept_past] if after else []
    if given is None or not any(given) or cites_retracted is True:
        kept = walk(totals, cursor)
    else:
        # A category, a window or both: the walk of every total meets a broad set's papers at once but a small
        # category's or an old year's only after every paper cited more (456,277 rows for a year's first page at
        # 1,000,000 papers). So a short walk first (WALK_FIRST totals from the cursor on); when it fills no page,
        # the walk of the set's own totals (migration 0030). One-time filters gate each part: one runs.
        # (The key a column of the subquery, so the walk's order is known to be the index's: ordered by
        # -t.total outside, the plan read all WALK_FIRST totals and sorted them when a page filled early.)
        walked = walk(f"(SELECT t.*, -t.total AS most FROM paper_inbound_totals AS t"
                      f"{' WHERE ' + kept_past if after else ''} ORDER BY -t.total, t.arxiv_id "
                      f"LIMIT {WALK_FIRST}) AS t", [], "t.most")
        kept = _short_walk_first(walked, "inbound DESC, arxiv_id", _placed(filters, given, after))
    # The papers ahead of the instant, with their totals then, where they pass the filters and follow the cursor.
    # (The walk of the CTE few, each paper with its latest snapshot by a probe: as a join, the generic plan took
    # a third of the totals to be ahead and joined them to every snapshot.)
    ahead_filters = _filters("s", given) + ([_cites_retracted("s.arxiv_id", cites_retracted)]
                                            if cites_retracted is not None else [])
    ahead = (f"SELECT * FROM (SELECT {_SNAPSHOT_COLUMNS}, {inbound_total_sql('s.arxiv_id')} AS inbound\n"
             f"FROM (SELECT ah.arxiv_id FROM paper_inbound_totals AS ah WHERE ah.counted_until > $AS "
             f"ORDER BY ah.counted_until DESC LIMIT {AHEAD_MAX}) AS a\n"
             f"CROSS JOIN LATERAL ({_latest_of('a')}) AS s\n"
             "WHERE " + "\n  AND ".join([_few_ahead(), *ahead_filters]) + ") AS s"
             + (f"\nWHERE {past}" if after else "") + f"\nORDER BY {sort}\nLIMIT $2")
    merged = f"SELECT * FROM (({kept})\nUNION ALL\n({ahead})) AS b\nORDER BY b.inbound DESC, b.arxiv_id\nLIMIT $2"
    too_many = f"SELECT {', '.join(['NULL'] * (PAPER_COLUMNS.count(',') + 2))} WHERE NOT {_few_ahead()}"
    return at_param(f"WITH {_few_ahead_cte()}\n({merged})\nUNION ALL\n{too_many}", 1)


def _months(given: tuple[bool, bool, bool]) -> str:
    """The months a window covers (its UTC submission months, as paper_placements files them), within the first
    and last month filed (of the category, given one), as the rows g (m); none when nothing is filed. (A bound is
    never a month further: the driver sends year 1's first instant as -infinity, and a series from there never
    ended.)"""
    category = " WHERE q.primary_category = $3::text" if given[0] else ""
    first, last = (f"(SELECT {f}(q.month) FROM paper_placements AS q{category})" for f in ("min", "max"))
    start = f"greatest(date_trunc('month', $4::timestamptz AT TIME ZONE 'UTC'), {first})" if given[1] else first
    end = f"least(date_trunc('month', $5::timestamptz AT TIME ZONE 'UTC'), {last})" if given[2] else last
    return f"generate_series(CASE WHEN {first} IS NOT NULL THEN {start} END, {end}, interval '1 month') AS g (m)"


def _placed(filters: list[str], given: tuple[bool, bool, bool], after: bool) -> str:
    """Most cited first within a category, a window or both, from the kept totals filed by submission month and
    category (migration 0030): a category alone is one walk of its index; a window is a walk of each month it
    covers (of the category's, given one), each stopping after a page, merged. A row counts where it names the
    paper's latest snapshot at the instant (its month and category), so a paper is listed once, where that
    snapshot puts it; the snapshot then passes the filters as on every other page."""
    latest = _latest_of("k")
    named = ["date_trunc('month', s.submitted_at AT TIME ZONE 'UTC') = k.month",
             "coalesce(s.primary_category, '') = k.primary_category"]
    category = ["k.primary_category = $3::text"] if given[0] else []
    past = ["(-k.total, k.arxiv_id) > (-$6::bigint, $7::text)"] if after else []

    # The snapshot's checks as one CASE: as separate conditions the generic plan multiplied their default
    # estimates to a row per month, read and probed every row of each month and sorted them (7,300 a month at
    # 1,000,000 papers); a CASE is taken to pass half the rows (nearly all do), so each month is walked in order
    # and stops after the page.
    # (A paper's totals probed only when some paper is ahead of the instant: a one-time check first.)
    not_ahead = (f"CASE WHEN {TOTALS_EXACT} THEN true "
                 "ELSE coalesce((SELECT a.counted_until IS NULL OR a.counted_until <= $AS "
                 "FROM paper_inbound_totals AS a WHERE a.arxiv_id = k.arxiv_id), true) END")
    passes = "CASE WHEN " + "\n    AND ".join([*named, not_ahead, *filters]) + " THEN true ELSE false END"

    def rows(where: list[str]) -> str:
        return (f"SELECT {_SNAPSHOT_COLUMNS}, k.total AS inbound\nFROM paper_placements AS k\n"
                f"CROSS JOIN LATERAL ({latest}) AS s\nWHERE "
                + "\n  AND ".join([*where, *category, *past, passes])
                + "\nORDER BY -k.total, k.arxiv_id\nLIMIT $2")

    if not (given[1] or given[2]):
        return rows([_SHORT, _few_ahead()])
    return (f"SELECT b.* FROM {_months(given)}\n"
            f"CROSS JOIN LATERAL ({rows(['k.month = g.m'])}) AS b\n"
            f"WHERE {_SHORT} AND {_few_ahead()}\nORDER BY b.inbound DESC, b.arxiv_id\nLIMIT $2")


def _window_by_id(conditions: list[str], given: tuple[bool, bool, bool], after: bool) -> str:
    """A submission window in arXiv id order. Ids follow submission months, so the walk of the id index meets a
    broad window's papers at once but an old or narrow one's only after every id before it (1,820,838 rows for the
    first page of a year at 1,000,000 papers, 267 ms), and a plan that sorts the window instead reads all of it for
    every page (222 ms). So a short walk first (WALK_FIRST snapshots from the cursor on); when it fills no page, the
    walk starts again at the window's first id after the cursor and stops at its last (bounds of the ids filed under
    the window's months, of its category given one: a paper listed is filed there, so none is skipped; without the
    last, a window's last page walked every id after it). The second part is gated by a one-time filter: one
    runs."""
    past = "s.arxiv_id > $6::text"
    # (A category's walk is of its own index: a category and a window fill their middle pages there.)
    category = _filters("s", (given[0], False, False))
    walked = (f"SELECT {_SNAPSHOT_COLUMNS}, NULL::bigint AS inbound\nFROM (SELECT * FROM paper_snapshots AS s"
              f"{' WHERE ' + ' AND '.join([*([past] if after else []), *category]) if after or category else ''} "
              f"ORDER BY s.arxiv_id LIMIT {WALK_FIRST}) AS s\n"
              "WHERE " + "\n  AND ".join(conditions) + "\nORDER BY s.arxiv_id\nLIMIT $2")
    # The bounds from each month's first and last id among the papers filed under it (migration 0030), two index
    # probes a month: reading the window's snapshots for them took 61 ms for a year at 1,000,000 papers (135,875
    # rows), and grows with the window.
    def probe(last: bool) -> str:
        where = ["k.month = g.m", *(["k.primary_category = $3::text"] if given[0] else []),
                 *(["k.arxiv_id > $6::text"] if after and not last else [])]
        return (f"(SELECT k.arxiv_id FROM paper_placements AS k WHERE {' AND '.join(where)} "
                f"ORDER BY k.arxiv_id{' DESC' if last else ''} LIMIT 1)")

    bounds = (f"SELECT min(b.least) AS least, max(b.most) AS most FROM {_months(given)}\n"
              f"CROSS JOIN LATERAL (SELECT {probe(False)} AS least, {probe(True)} AS most) AS b")
    # The walk from there, in id order, to a page or past the window's last id: a row past it passes (so the walk
    # stops within a page of it) and is dropped outside. The conditions as one CASE: as separate ones, with the
    # last id as a second bound of the walk, the generic plan took the range to hold a few rows and read and
    # sorted all of it for every page.
    passes = ("CASE WHEN s.arxiv_id > (SELECT most FROM bounds) THEN true WHEN " + "\n    AND ".join(conditions)
              + " THEN true ELSE false END")
    walk = [_SHORT, "s.arxiv_id >= (SELECT least FROM bounds)", *([past] if after else []), *category, passes]
    rest = (f"SELECT * FROM (SELECT {_SNAPSHOT_COLUMNS}, NULL::bigint AS inbound\nFROM paper_snapshots AS s\nWHERE "
            + "\n  AND ".join(walk) + "\nORDER BY s.arxiv_id\nLIMIT $2) AS s\n"
            "WHERE s.arxiv_id <= (SELECT most FROM bounds)\nORDER BY s.arxiv_id")
    return _short_walk_first(walked, "arxiv_id", rest, f"bounds AS MATERIALIZED ({bounds})")


def counted_sql(cites_retracted: bool | None, after: bool, given: tuple[bool, bool, bool] | None = None) -> str:
    """INBOUND_COUNT_DESC at an instant the kept totals are not exact for: every paper's total counted."""
    sort, past = _KEYS["INBOUND_COUNT_DESC"]
    return at_param(f"SELECT * FROM (SELECT {_SNAPSHOT_COLUMNS}, coalesce(n.total, 0) AS inbound\n"
                    f"FROM paper_snapshots AS s\nLEFT JOIN {_INBOUND_AT} AS n ON n.arxiv_id = s.arxiv_id\n"
                    "WHERE " + "\n  AND ".join(_conditions(cites_retracted, given)) + ") AS s"
                    + (f"\nWHERE {past}" if after else "") + f"\nORDER BY {sort}\nLIMIT $2", 1)


def _flat(statement: tuple[str, tuple]) -> tuple:
    sql, args = statement
    return (sql, *args)


@dataclass(frozen=True)
class PaperPage:
    papers: list[tuple[PaperSnapshot, int | None]]  # with the inbound total when ordered by it
    more: bool


async def browse_papers(db: Db, as_of: datetime, first: int, order: str, category: str | None,
                        submitted_from: datetime | None, submitted_to: datetime | None,
                        cites_retracted: bool | None, after: Sequence[Any] | None) -> PaperPage:
    page = (order, cites_retracted, after, as_of, first + 1, category, submitted_from, submitted_to)
    rows = await db.fetch(*_flat(browse_statement(*page)))
    if order == "INBOUND_COUNT_DESC" and rows and rows[0]["observed_at"] is None:  # the totals are not exact then
        rows = await db.fetch(*_flat(browse_statement(*page, counted=True)))
    found = [(p, r["inbound"]) for r in rows if (p := paper_from(r)) is not None]
    return PaperPage(found[:first], len(found) > first)


# Works: each work's latest snapshot at the instant, by work id. $1 instant, $2 rows, $3 event type,
# $4 event source (works with such an event by the instant); $5 the cursor's work id.
_LATEST_WORK: Final = """coalesce((SELECT false FROM work_snapshots AS n WHERE n.work_id = w.work_id
                     AND n.observed_at > w.observed_at AND n.observed_at <= $AS LIMIT 1), true)"""
_HAS_EVENT: Final = f"""($3::text IS NULL AND $4::text IS NULL OR w.work_id IN (
        SELECT e.work_id FROM work_events AS e WHERE {stands_sql("e")}
           AND ($3::text IS NULL OR e.event_type = $3::text) AND ($4::text IS NULL OR e.source = $4::text)))"""


def _work_retracted(work: str, retracted: bool) -> str:
    """The work's kept span (migration 0022) covering the instant, probed by its primary key."""
    return (f"coalesce((SELECT {'true' if retracted else 'false'} FROM work_retracted_spans AS r "
            f"WHERE r.work_id = {work} AND r.from_at <= $AS AND r.until_at > $AS LIMIT 1), "
            f"{'false' if retracted else 'true'})")


def works_statement(retracted: bool | None, after: UUID | None, as_of: datetime, rows: int,
                    event_type: str | None = None, source: str | None = None) -> tuple[str, tuple]:
    """A works page's statement and its arguments as browse_works sends them, its parameters numbered in
    order. With an event filter (and not retracted: true, which walks the kept spans) the page walks the
    standing events of that kind in work id order (an index each for type and source, migration 0028),
    each work's latest snapshot by a probe of its own: a kind few works have no longer walks every work."""
    events = (event_type is not None, source is not None) if retracted is not True and (event_type or source) else None
    sql, used = _works_numbered(retracted, after is not None, events)
    numbered = (as_of, rows, event_type, source, after)
    return sql, tuple(numbered[old - 1] for old in used)


@functools.cache
def _works_numbered(retracted: bool | None, after: bool, events: tuple[bool, bool] | None
                    ) -> tuple[str, tuple[int, ...]]:
    return _renumbered(works_sql(retracted, after) if events is None else _works_by_event(retracted, after, events))


def _works_by_event(retracted: bool | None, after: bool, events: tuple[bool, bool]) -> str:
    """Works with a standing event of the kind given ($3 type, $4 source), in work id order from the cursor
    ($5): the events' index walked in that order (the type's when given, else the source's), each work once."""
    kind = [c for c, given in zip(("e.event_type = $3::text", "e.source = $4::text"), events, strict=True) if given]
    walked = ("SELECT DISTINCT e.work_id FROM work_events AS e WHERE "
              + " AND ".join([*kind, stands_sql("e")] + (["e.work_id > $5::uuid"] if after else []))
              + " ORDER BY e.work_id")
    latest = ("SELECT * FROM work_snapshots AS s WHERE s.work_id = ev.work_id AND s.observed_at <= $AS "
              "ORDER BY s.observed_at DESC LIMIT 1")
    conditions = [_work_retracted("w.work_id", False)] if retracted is False else []
    return at_param(f"SELECT w.* FROM ({walked}) AS ev\nCROSS JOIN LATERAL ({latest}) AS w\n"
                    + ("WHERE " + "\n  AND ".join(conditions) + "\n" if conditions else "")
                    + "ORDER BY ev.work_id\nLIMIT $2", 1)


def works_sql(retracted: bool | None, after: bool) -> str:
    conditions = ["w.observed_at <= $AS", _LATEST_WORK, _HAS_EVENT]
    if retracted is True:
        # The works retracted at the instant, a walk of their kept spans in work id order (from the cursor
        # on), each with its latest snapshot by a probe of its own: a page never walks the other works.
        latest = ("SELECT * FROM work_snapshots AS s WHERE s.work_id = r.work_id AND s.observed_at <= $AS "
                  "ORDER BY s.observed_at DESC LIMIT 1")
        return at_param("SELECT w.* FROM work_retracted_spans AS r\n"
                        f"CROSS JOIN LATERAL ({latest}) AS w\nWHERE "
                        + "\n  AND ".join(["r.from_at <= $AS", "r.until_at > $AS", _HAS_EVENT]
                                          + (["r.work_id > $5::uuid"] if after else []))
                        + "\nORDER BY r.work_id\nLIMIT $2", 1)
    if retracted is False:
        conditions.append(_work_retracted("w.work_id", False))
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
    sql, args = works_statement(retracted, after, as_of, first + 1, event_type, source)
    rows = await db.fetch(sql, *args)
    found = [snapshot_from(r) for r in rows]
    return WorkPage(found[:first], len(found) > first)
