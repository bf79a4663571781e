"""The rows of citation records: at most six statements for any number of papers and observations."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import datetime
from typing import Any, Awaitable, Callable, Final, Sequence, TypeVar

from app.record import _unavailable, canonical
from loaders.base import Db, at_pairs, at_param, by_instant
from loaders.citations import (
    CITATION_COUNTS_TEMPLATE,
    INBOUND_PAGES_TEMPLATE,
    OUTBOUND_PAGES_TEMPLATE,
    VISIBLE,
    PageKey,
    inbound_page_rows,
    inbound_total_sql,
    inbound_walk,
    linked_sql,
    linked_work_ids,
    observation_from,
    outbound_page_rows,
    outbound_walk,
    pages_from_rows,
    row_pages,
    totals_from_rows,
)
from loaders.measurements import MEASUREMENTS_BY_ARXIV_ID, MEASUREMENTS_TEMPLATE, measurements_from_rows
from loaders.papers import PAPER_SNAPSHOTS_BY_ARXIV_ID, PAPER_SNAPSHOTS_TEMPLATE, papers_from_rows
from loaders.rows import (UNRESOLVED, Caps, Counts, ItemPiece, Measurement, Observation, RecordItems, RecordRows,
                          event_order_sql, stands_sql)
from loaders.standing import STANDING_TEMPLATE, standing_by_work, standing_from_rows

T = TypeVar("T")
U = TypeVar("U")

# Each paper's snapshot at the instant with its record's head facts, in one statement: its visible
# inbound and outbound totals (as citation_counts counts them) and its latest measurement per source
# (the measurements statement itself, as a CTE), by source.
RECORD_HEAD_COLUMNS: Final = f"""
SELECT p.*,
       {inbound_total_sql("p.arxiv_id", "$2")} AS inbound_total,
       (SELECT count(*) FROM citation_observations AS o
         WHERE o.citing_arxiv_id = p.arxiv_id AND {VISIBLE.replace("$AS", "$2")}) AS outbound_total,
       ARRAY(SELECT m.source FROM m WHERE m.arxiv_id = p.arxiv_id ORDER BY m.source) AS m_source,
       ARRAY(SELECT m.observed_at FROM m WHERE m.arxiv_id = p.arxiv_id ORDER BY m.source) AS m_observed_at,
       ARRAY(SELECT m.count FROM m WHERE m.arxiv_id = p.arxiv_id ORDER BY m.source) AS m_count
FROM ({PAPER_SNAPSHOTS_BY_ARXIV_ID}) AS p
"""
RECORD_HEADS: Final = f"WITH m AS ({MEASUREMENTS_BY_ARXIV_ID})\n{RECORD_HEAD_COLUMNS}"

SERVED_CAPS = Caps()


# --- a record's items written by the database --------------------------------------------------------
# The item of each observation as app.record._item, standing_notice and _finished make it, in canonical
# JSON (sorted keys, no spaces; PostgreSQL's JSON string escapes are the canonical ones, and instants are
# written as datetime.isoformat writes them), its digest included: a straight projection of the page's
# row, its work's receipts and standing events (the standing rule of loaders.rows, as STANDING_TEMPLATE
# reads it), so the database writes it instead of the rows becoming objects and dictionaries first.
# tests/test_record_items.py and tests/test_record_path.py compare the bytes with the builder's.

def _text(expr: str) -> str:
    """A JSON value (string, number or null) of an SQL expression."""
    return f"coalesce(to_json({expr})::text, 'null')"


def _int(expr: str) -> str:
    """_text of an integer expression: its text is its JSON (no escaping to look for)."""
    return f"coalesce(({expr})::text, 'null')"


def _uuid(expr: str) -> str:
    """_text of a uuid expression: its text quoted (hex digits and hyphens need no escape)."""
    return f"""coalesce('"' || ({expr})::text || '"', 'null')"""


def _instant(expr: str, zone: str) -> str:
    """An instant as app.record writes it (seconds, microseconds only when there are some), then `zone`: one
    to_char (the costly part) with microseconds, which are dropped when they are all zero (the only "." in it)."""
    return (f"""replace(to_char({expr} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US'), '.000000', '') """
            f"""|| '{zone}'""")


def _z(expr: str) -> str:
    """app.record.z_time as a JSON value."""
    return f"""coalesce('"' || {_instant(expr, "Z")} || '"', 'null')"""


def _offset(expr: str) -> str:
    """app.record.offset_time as a JSON value."""
    return f"""coalesce('"' || {_instant(expr, "+00:00")} || '"', 'null')"""


def _paper_short(alias: str) -> str:
    """app.record.paper_short of the snapshot `alias` (null when the paper has none at the instant)."""
    a = alias
    return (f"""CASE WHEN {a}.observed_at IS NULL THEN 'null' ELSE '{{"arxiv_id":' || {_text(a + ".arxiv_id")} """
            f"""|| ',"last_updated":' || {_z(a + ".last_updated")} """
            f"""|| ',"snapshot_observed_at":' || {_z(a + ".observed_at")} """
            f"""|| ',"submitted_at":' || {_z(a + ".submitted_at")} || ',"title":' || {_text(a + ".title")} """
            f"""|| ',"version":' || {_int(a + ".latest_version")} || '}}' END""")


# The work a reference is linked to at the instant, as app.record.cited_work writes it: from its snapshot `w`
# (RECORD_TEMPLATE's CTE works), or, with none, from what the bibliography printed (the row o).
_LINKED_WORK: Final = (
    f"""'{{"arxiv_id":' || {_text("w.arxiv_id")} || ',"doi":' || {_text("w.doi")} """
    f"""|| ',"metadata_source":' || {_text("w.metadata_source")} """
    f"""|| ',"pith_arxiv_id":' || {_text("w.pith_arxiv_id")} """
    f"""|| ',"snapshot_observed_at":' || {_z("w.observed_at")} || ',"title":' || {_text("w.title")} """
    f"""|| ',"venue":' || {_text("w.venue")} || ',"work_id":' || {_uuid("w.work_id")} || ',"year":' """
    f"""|| {_int("w.year")} || '}}'""")
_PRINTED_WORK: Final = (
    f"""'{{"arxiv_id":null,"doi":null,"metadata_source":null,"pith_arxiv_id":' """
    f"""|| {_text("o.cited_arxiv_id")} || ',"snapshot_observed_at":' || {_z("o.source_observed_at")} """
    f"""|| ',"title":' || {_text("o.printed_title")} || ',"venue":null,"work_id":null,"year":' """
    f"""|| {_int("o.printed_year")} || '}}'""")

# app.record.work_standing_notice of a work with a snapshot at the instant: its receipts (latest per source,
# by source) and its events standing then (rules.NOTICE_ORDER), as STANDING_TEMPLATE reads them.
_NOTICE: Final = f"""
LEFT JOIN LATERAL (
    SELECT count(*) AS n, max(x.observed_at) AS latest,
           array_agg(x.source ORDER BY x.source COLLATE "C") AS sources,
           array_agg(x.observed_at ORDER BY x.source COLLATE "C") AS observed,
           string_agg('{{"observed_at":' || {_offset("x.observed_at")} || ',"source":' || {_text("x.source")} || '}}',
                      ',' ORDER BY x.source COLLATE "C") AS list
    FROM (SELECT DISTINCT ON (s.source) s.source, s.observed_at
          FROM standing_receipts AS s
          WHERE s.work_id = w.work_id AND s.observed_at <= $AS
          ORDER BY s.source, s.observed_at DESC) AS x
) AS rc ON true
LEFT JOIN LATERAL (
    SELECT count(*) AS n,
           string_agg('{{"event_type":' || {_text("e.event_type")} || ',"notice_doi":' || {_text("e.notice_doi")}
                      || ',"observed_at":' || {_offset("e.observed_at")}
                      || ',"reported_at":' || {_offset("e.reported_at")}
                      || ',"source":' || {_text("e.source")} || '}}',
                      ',' ORDER BY {event_order_sql("e")}) AS list
    FROM work_events AS e
    WHERE e.work_id = w.work_id AND {stands_sql("e")}
) AS ev ON true"""
_NOTICE_TEXT: Final = (
    f"""CASE WHEN rc.n = 0 THEN '{canonical(_unavailable("standing_sources_not_queried"))}'
         ELSE '{{"events":[' || coalesce(ev.list, '') || '],"observation":' || to_json(
                  CASE WHEN ev.n = 0 THEN 'No event' ELSE ev.n || ' event' || CASE WHEN ev.n = 1 THEN ''
                       ELSE 's' END END
                  || ' found in the named queried sources as of '
                  || {_instant("rc.latest", "+00:00")} || '.')::text
              || ',"reason":null,"source_receipts":[' || rc.list || '],"state":"measured"}}' END""")

# The record of each paper $1 at the instant $AS, in one statement: a head row (direction 0: RECORD_HEAD_COLUMNS)
# for each paper with a snapshot by then, and its items: its first $3 inbound (direction 1) and $4 outbound
# (direction 2) observations (the pages' walks, order and visibility: loaders.citations; NULL caps: all), each
# written as its canonical JSON (app.record._item, standing_notice and _finished make the same bytes:
# tests/test_record_items.py), its observation_digest the sha256 of its other keys' bytes (those before the
# digest's key, `head`, and after it, `rest`), with its status and parse; the head row carries the
# latest receipts of the works they are linked to. Whatever repeats across the rows is made once: each paper's
# short form (every inbound row names the paper itself, every outbound row its citing paper) and each linked
# work's part and standing notice (a paper's inbound rows are mostly linked to its one work).
RECORD_TEMPLATE: Final = f"""
WITH m AS ({MEASUREMENTS_BY_ARXIV_ID}),
heads AS MATERIALIZED ({RECORD_HEAD_COLUMNS}),
k AS (SELECT h.arxiv_id, h.ord FROM heads AS h),
page AS MATERIALIZED (
    SELECT 1 AS direction, k.ord, p.observation_id, p.citing_arxiv_id AS key_citing, p.reference_index
    FROM k CROSS JOIN LATERAL ({inbound_walk(False, after=("NULL::text", "NULL::int", "NULL::uuid"), limit="$3",
                                             statuses="NULL::text[]")}) AS p
    UNION ALL
    SELECT 2, k.ord, p.observation_id, NULL, p.reference_index
    FROM k CROSS JOIN LATERAL ({outbound_walk(False, after=("NULL::int", "NULL::uuid"), limit="$4",
                                              statuses="NULL::text[]", retracted="NULL::boolean")}) AS p
),
obs AS MATERIALIZED (
    SELECT page.direction, page.ord, page.key_citing, o.*, {linked_sql("o")} AS linked
    FROM page JOIN citation_observations AS o ON o.observation_id = page.observation_id
),
papers AS MATERIALIZED (
    SELECT s.arxiv_id, {_paper_short("s")} AS short, {_text("'/paper/' || s.arxiv_id")} AS link
    FROM (SELECT o.citing_arxiv_id FROM obs AS o
          UNION SELECT o.cited_arxiv_id FROM obs AS o WHERE o.cited_arxiv_id IS NOT NULL) AS ids(arxiv_id)
    CROSS JOIN LATERAL (
        SELECT * FROM paper_snapshots AS s
        WHERE s.arxiv_id = ids.arxiv_id AND s.observed_at <= $AS
        ORDER BY s.observed_at DESC LIMIT 1
    ) AS s
),
works AS MATERIALIZED (
    SELECT w.work_id, {_LINKED_WORK} AS cited, {_NOTICE_TEXT} AS notice, rc.sources, rc.observed
    FROM (SELECT DISTINCT o.work_id FROM obs AS o WHERE o.linked AND o.work_id IS NOT NULL) AS ids
    CROSS JOIN LATERAL (
        SELECT * FROM work_snapshots AS s
        WHERE s.work_id = ids.work_id AND s.observed_at <= $AS
        ORDER BY s.observed_at DESC LIMIT 1
    ) AS w {_NOTICE}
),
receipts AS (
    -- Each paper's latest receipt per source among the works its items are linked to: what the document's
    -- standing sources and its notices' lane read (latest instants only), on its head row.
    SELECT x.ord, array_agg(x.source ORDER BY x.source) AS sources,
           array_agg(x.observed_at ORDER BY x.source) AS observed
    FROM (SELECT o.ord, r.source, max(r.observed_at) AS observed_at
          FROM (SELECT DISTINCT o.ord, o.work_id FROM obs AS o WHERE o.linked) AS o
          JOIN works AS w ON w.work_id = o.work_id
          CROSS JOIN LATERAL unnest(w.sources, w.observed) AS r(source, observed_at)
          GROUP BY o.ord, r.source) AS x
    GROUP BY x.ord
),
items AS (
SELECT o.direction, o.ord, o.key_citing, o.reference_index AS key_index, o.observation_id AS key_id,
       convert_to('{{"citation":{{"cited_paper":' || coalesce(d.short, 'null')
                  || ',"cited_work":' || coalesce(w.cited, {_PRINTED_WORK})
                  || ',"citing_paper":' || c.short || ',"reference_index":' || {_int("o.reference_index")}
                  || ',"source":' || {_text("o.source")} || ',"source_observed_at":' || {_z("o.source_observed_at")}
                  || '}},"links":{{"cited_paper":' || coalesce(d.link, 'null') || ',"citing_paper":' || c.link
                  || '}},', 'UTF8') AS head,
       convert_to('"observation_id":' || {_uuid("o.observation_id")} || ',"resolution":'
                  || CASE WHEN r.observed_at IS NULL
                          -- Parsed, not yet resolved: unresolved as of the parse (citations.observation_from).
                          THEN '{{"observed_at":' || {_z("o.source_observed_at")}
                               || ',"resolver_source":null,"status":"{UNRESOLVED}"}}'
                          ELSE '{{"observed_at":' || {_z("r.observed_at")} || ',"resolver_source":'
                               || {_text("r.resolver_source")} || ',"status":' || {_text("r.status")} || '}}' END
                  || ',"standing_notice":'
                  || coalesce(w.notice, '{canonical(_unavailable("canonical_work_link_unavailable"))}') || '}}',
                  'UTF8') AS rest,
       coalesce(r.status, '{UNRESOLVED}') AS status, o.source_observed_at
FROM obs AS o
JOIN papers AS c ON c.arxiv_id = o.citing_arxiv_id  -- a visible observation's citing paper has a snapshot
LEFT JOIN papers AS d ON d.arxiv_id = o.cited_arxiv_id
LEFT JOIN works AS w ON o.linked AND w.work_id = o.work_id
LEFT JOIN LATERAL (
    SELECT * FROM resolutions AS s
    WHERE s.observation_id = o.observation_id AND s.observed_at <= $AS
    ORDER BY s.observed_at DESC LIMIT 1
) AS r ON true
)
SELECT 0 AS direction, h.ord, NULL::text AS key_citing, NULL::int AS key_index, NULL::uuid AS key_id,
       NULL::bytea AS item, NULL::text AS status, NULL::timestamptz AS source_observed_at,
       rc.sources, rc.observed,
       h.arxiv_id, h.observed_at, h.title, h.latest_version, h.primary_category, h.submitted_at, h.last_updated,
       h.inbound_total, h.outbound_total, h.m_source, h.m_observed_at, h.m_count
FROM heads AS h LEFT JOIN receipts AS rc ON rc.ord = h.ord
UNION ALL
SELECT i.direction, i.ord, i.key_citing, i.key_index, i.key_id,
       i.head || convert_to('"observation_digest":"sha256:' || encode(sha256(i.head || i.rest), 'hex') || '",', 'UTF8')
       || i.rest,
       i.status, i.source_observed_at,
       NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
FROM items AS i
ORDER BY 1, 2, 3, 4, 5
"""
RECORD: Final = at_param(RECORD_TEMPLATE, 2)


async def record_rows(db: Db, arxiv_ids: Sequence[str], as_of: datetime,
                      caps: Caps | None = SERVED_CAPS,
                      prepare: Callable[[list[Observation]], None] | None = None) -> list[RecordRows | None]:
    """Rows for each paper's record, None where the paper has no snapshot by as_of.

    caps=None itemizes every observation (an uncapped export); its disclosed caps are then the
    larger of the served caps and the paper's totals. `prepare`, when given, is called with each page
    of observations while the next statement runs (the record builder's head start).
    """
    papers, counts, measurements, per_paper = await _heads(db, arxiv_ids, as_of, caps)
    present = [p for p in papers if p is not None]
    if not present:
        return [None] * len(arxiv_ids)
    ids = [p.arxiv_id for p in present]
    keys = [PageKey(a) for a in ids]
    n = len(ids)
    inbound_rows = row_pages(await inbound_page_rows(db, keys, as_of, max(c.inbound for c in per_paper)), n)
    inbound_rows = [page[: c.inbound] for page, c in zip(inbound_rows, per_paper)]
    # From here each statement runs in the database while the rows of the one before become objects.
    snapshots: dict[tuple, Any] = {}  # a snapshot met on many rows (the paper itself on every one) made once

    def convert(pages: list[list[Any]]) -> list[list[Observation]]:
        converted = [[observation_from(r, snapshots) for r in page] for page in pages]
        if prepare is not None:
            for page in converted:
                prepare(page)
        return converted

    found, inbound = await _meanwhile(outbound_page_rows(db, keys, as_of, max(c.outbound for c in per_paper)),
                                      lambda: convert(inbound_rows))
    outbound_rows = [page[: c.outbound] for page, c in zip(row_pages(found, n), per_paper)]
    work_ids = linked_work_ids([r for page in inbound_rows + outbound_rows for r in page])

    if work_ids:
        found_standing, outbound = await _meanwhile(standing_by_work(db, work_ids, as_of),
                                                    lambda: convert(outbound_rows))
        standing = dict(zip(work_ids, found_standing))
    else:
        outbound, standing = convert(outbound_rows), {}

    built = {
        p.arxiv_id: RecordRows(as_of=as_of, paper=p, counts=counts[i], inbound=inbound[i], outbound=outbound[i],
                               measurements=measurements[i], standing=standing, caps=per_paper[i])
        for i, p in enumerate(present)
    }
    return [built.get(a) if p is not None else None for a, p in zip(arxiv_ids, papers)]


async def _heads(db: Db, arxiv_ids: Sequence[str], as_of: datetime, caps: Caps | None
                 ) -> tuple[list[Any], list[Counts], list[list[Measurement]], list[Caps]]:
    """The head statement: each paper's snapshot (None: none by as_of) and, for those present in order,
    their totals, measurements and caps (caps=None: uncapped, see record_rows)."""
    heads = await db.fetch(RECORD_HEADS, list(arxiv_ids), as_of)
    papers = papers_from_rows(heads, len(arxiv_ids))
    ids = [p.arxiv_id for p in papers if p is not None]
    by_id = {row["arxiv_id"]: _head_facts(row) for row in heads}
    counts = [by_id[a][0] for a in ids]
    return papers, counts, [by_id[a][1] for a in ids], [_caps(caps, c) for c in counts]


def _head_facts(row: Any) -> tuple[Counts, list[Measurement]]:
    """A head row's totals and latest measurements (RECORD_HEAD_COLUMNS)."""
    return (Counts(inbound=row["inbound_total"], outbound=row["outbound_total"]),
            [Measurement(row["arxiv_id"], *m)
             for m in zip(row["m_source"], row["m_observed_at"], row["m_count"], strict=True)])


def _caps(caps: Caps | None, counts: Counts) -> Caps:
    """The caps a record discloses: the served ones, or with caps=None (uncapped) the larger of them and its totals."""
    if caps is not None:
        return caps
    return replace(SERVED_CAPS, inbound=max(SERVED_CAPS.inbound, counts.inbound),
                   outbound=max(SERVED_CAPS.outbound, counts.outbound))


async def record_items(db: Db, arxiv_ids: Sequence[str], as_of: datetime,
                       caps: Caps | None = SERVED_CAPS) -> list[RecordItems | None]:
    """record_rows with the observations as items the database writes (app.record.record_bytes builds the
    document around them): one statement (RECORD: each paper's head, then both pages' items), none of the
    rows made into objects. caps=None: every observation (LIMIT NULL)."""
    rows = await db.fetch(RECORD, list(arxiv_ids), as_of, None if caps is None else caps.inbound,
                          None if caps is None else caps.outbound)
    n = len(arxiv_ids)
    heads = [row for row in rows if row[0] == 0]
    papers = papers_from_rows(heads, n)
    pieces: list[tuple[list[ItemPiece], list[ItemPiece]]] = [([], []) for _ in range(n)]
    for row in rows:
        if row[0]:
            pieces[row[1] - 1][row[0] - 1].append(ItemPiece(*row[5:8]))
    found: list[RecordItems | None] = [None] * n
    for head in heads:
        i = head["ord"] - 1
        counts, measurements = _head_facts(head)
        sources, observed = head["sources"], head["observed"]
        found[i] = RecordItems(as_of=as_of, paper=papers[i], counts=counts, inbound=pieces[i][0],
                               outbound=pieces[i][1], measurements=measurements, caps=_caps(caps, counts),
                               receipts=list(zip(sources, observed, strict=True)) if sources is not None else [])
    return found


async def record_history(db: Db, arxiv_id: str, instants: Sequence[datetime],
                         caps: Caps = SERVED_CAPS) -> list[RecordRows | None]:
    """Rows for one paper's record at each instant (None where it has no snapshot by then)."""
    return await record_histories(db, [(arxiv_id, t) for t in instants], caps)


async def record_histories(db: Db, pairs: Sequence[tuple[str, datetime]],
                           caps: Caps = SERVED_CAPS) -> list[RecordRows | None]:
    """Rows for each (paper, instant)'s record (None where the paper has no snapshot by then): the same six
    statements as one record, each run once per pair at once (loaders.base.at_pairs), whatever the
    number of papers and instants."""
    n = len(pairs)
    if n == 0:
        return []
    papers = [found[0] for found in _each(
        await db.fetch(at_pairs(PAPER_SNAPSHOTS_TEMPLATE, 2), [p for p, _ in pairs], [t for _, t in pairs]), n,
        lambda rows: papers_from_rows(rows, 1))]
    kept = [(pair, p) for pair, p in zip(pairs, papers) if p is not None]
    if not kept:
        return [None] * n
    m = len(kept)
    ids, at = [pair[0] for pair, _ in kept], [pair[1] for pair, _ in kept]
    totals = _each(await db.fetch(at_pairs(CITATION_COUNTS_TEMPLATE, 3, repeat=2), ids, ["in", "out"], at, None,
                                  None), m, lambda rows: totals_from_rows(rows, 2))
    measured = by_instant(await db.fetch(at_pairs(MEASUREMENTS_TEMPLATE, 2), ids, at), m)
    measurements = [measurements_from_rows(rows, [a])[0] for rows, a in zip(measured, ids)]
    inbound = _each(await db.fetch(at_pairs(INBOUND_PAGES_TEMPLATE, 5), ids, [None], [None], [None], at,
                                   caps.inbound, None), m, lambda rows: pages_from_rows(rows, 1)[0])
    outbound = _each(await db.fetch(at_pairs(OUTBOUND_PAGES_TEMPLATE, 4), ids, [None], [None], at,
                                    caps.outbound, None, None), m, lambda rows: pages_from_rows(rows, 1)[0])
    # Standing per (work, instant) of each pair's pages: one statement over all of them.
    works_of = [list(dict.fromkeys(o.work.work_id for o in i + o_ if o.work is not None))
                for i, o_ in zip(inbound, outbound)]
    flat = [(w, t) for ws, t in zip(works_of, at) for w in ws]
    standing: list[dict] = [{} for _ in range(m)]
    if flat:
        found = by_instant(await db.fetch(at_pairs(STANDING_TEMPLATE, 2, key_type="uuid"), [w for w, _ in flat],
                                          [t for _, t in flat]), len(flat))
        place = 0
        for i, ws in enumerate(works_of):
            for w in ws:
                standing[i][w] = standing_from_rows(found[place], [w])[0]
                place += 1
    built = iter([
        RecordRows(as_of=t, paper=p, counts=Counts(inbound=c[0], outbound=c[1]), inbound=i, outbound=o,
                   measurements=ms, standing=s, caps=caps)
        for t, p, c, i, o, ms, s in zip(at, [p for _, p in kept], totals, inbound, outbound, measurements, standing)
    ])
    return [next(built) if p is not None else None for p in papers]


def _each(rows: Sequence[Any], n: int, convert: Callable[[list[Any]], T]) -> list[T]:
    return [convert(group) for group in by_instant(rows, n)]


async def _meanwhile(statement: Awaitable[T], work: Callable[[], U]) -> tuple[T, U]:
    """Do `work` (Python) while `statement` runs in the database: the two overlap instead of adding up.

    The statement is started first and given one turn of the event loop, in which it is sent; a request
    cancelled meanwhile cancels it (the session then rolls back and releases, as for any statement).
    """
    running = asyncio.ensure_future(statement)
    await asyncio.sleep(0)
    try:
        done = work()
    except BaseException:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        raise
    return await running, done
