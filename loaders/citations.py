"""Citation observations as of an instant: keyset pages in both directions, counts, lookup by id.

An observation is visible at an instant when its reference was parsed by then and its citing paper
has a snapshot by then: from `visible_from`, which the database keeps on the row (migration 0004). Each statement takes many keys at once (unnest ... WITH ORDINALITY) and
walks one index range per key, so a page costs the same at any depth and any fan-out.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Sequence
from uuid import UUID

from loaders.base import Db, at_param, charge, fetch_at_pairs, in_stretches, scanned
from loaders.papers import paper_from
from loaders.rows import (RETRACTING, STANDING_DECIDING, UNRESOLVED, Observation, PaperSnapshot, Resolution,
                          WorkSnapshot, deciding_order_sql, sql_list, stands_sql)

# $AS is the instant's parameter number in each statement below.
_LATEST_STATUS: Final = """coalesce((
        SELECT r.status
        FROM resolutions AS r
        WHERE r.observation_id = o.observation_id
          AND r.observed_at <= $AS
        ORDER BY r.observed_at DESC
        LIMIT 1), '""" + UNRESOLVED + """')"""

# Visible at the instant: parsed, and the citing paper has a snapshot (kept on the row by the database).
# An observation is visible from its visible_from (kept by the database: parsed, and its citing paper
# has a snapshot), at the instant $AS.
VISIBLE: Final = "o.visible_from <= $AS"

# The instant from which the kept totals (migration 0011) are every paper's inbound total: the latest
# visible_from they counted (an index probe, once per statement).
TOTALS_EXACT: Final = ("$AS >= coalesce((SELECT max(counted_until) FROM paper_inbound_totals), "
                       "'-infinity'::timestamptz)")


def inbound_total_sql(paper: str, at: str = "$AS") -> str:
    """The paper's visible inbound total at the instant `at` (inbound { totalCount }), from its kept total
    (migration 0011: every observation with a visible_from, and the latest visible_from counted):
    - at any instant from its own latest visible_from on (every ordinary "now"), the kept total: one probe.
      (A hub's count read 640,659 index entries, 1-2 s at 1,000,000 papers; the probe reads one.)
    - before it, the kept total less its observations visible only after the instant, when those are at most
      half of it (a walk of the index by paper and visible_from, from the instant); otherwise the observations
      visible by then, counted (then fewer than half). Either way at most about half the paper's citations
      are read, and a few citations dated after the instant (a source's clock ahead of ours, an import
      dated later) cost a few index entries, for that paper alone."""
    later = (f"SELECT FROM citation_observations AS o WHERE o.cited_arxiv_id = {paper} AND o.visible_from > {at} "
             "LIMIT kept.total / 2 + 1")
    counted = (f"SELECT count(*) FROM citation_observations AS o WHERE o.cited_arxiv_id = {paper} "
               f"AND {VISIBLE.replace('$AS', at)}")
    return (f"coalesce((SELECT CASE WHEN kept.counted_until IS NULL OR kept.counted_until <= {at} THEN kept.total "
            f"ELSE (SELECT CASE WHEN a.n <= kept.total / 2 THEN kept.total - a.n ELSE ({counted}) END "
            f"FROM (SELECT count(*) AS n FROM ({later}) AS x) AS a) END "
            f"FROM paper_inbound_totals AS kept WHERE kept.arxiv_id = {paper}), 0)")


def linked_sql(alias: str = "o", at: str = "$AS") -> str:
    """The observation `alias` holds its canonical work link at the instant `at`: a link a later import made (a kept
    reference whose work arrived later) holds from its `linked_from` on, not before (migration 0023)."""
    return f"({alias}.linked_from IS NULL OR {alias}.linked_from <= {at})"


def linked_work_sql(alias: str = "o", at: str = "$AS") -> str:
    """The observation's canonical work id at the instant, NULL when it has none then."""
    return f"(CASE WHEN {linked_sql(alias, at)} THEN {alias}.work_id END)"

# A cited work counts as retracted when it is linked (has a snapshot) at the instant and, of its events
# standing at the instant, the retraction, withdrawal or reinstatement that happened last is a retraction
# or withdrawal (the standing rule, loaders.rows). Its notice is then measured: the database records every
# event with its source's receipt (migration 0009).
def retracted_sql(work: str) -> str:
    """The rule, as an SQL condition on the work id expression `work` at the instant $AS (the same for a
    reference's cited work, citesRetracted, and a listed work, works(filter: {retracted: ...}))."""
    return """(""" + work + """ IS NOT NULL
        AND EXISTS (SELECT 1 FROM work_snapshots AS ws
                    WHERE ws.work_id = """ + work + """ AND ws.observed_at <= $AS)
        AND coalesce((
            SELECT e.event_type IN """ + sql_list(RETRACTING) + """
            FROM work_events AS e
            WHERE e.work_id = """ + work + """
              AND """ + stands_sql("e") + """
              AND e.event_type IN """ + sql_list(STANDING_DECIDING) + """
            ORDER BY """ + deciding_order_sql("e", descending=True) + """
            LIMIT 1), false))"""


_RETRACTED: Final = retracted_sql(linked_work_sql("o"))
# Works that may be retracted at $AS (a retracting event by then): what the rule is checked on, when a
# query starts from the few retracted works instead of every reference.
MAY_BE_RETRACTED: Final = ("(SELECT e.work_id FROM work_events AS e WHERE e.observed_at <= $AS AND e.event_type IN "
                           + sql_list(RETRACTING) + ")")

_DETAIL_COLUMNS: Final = """
       o.observation_id, o.citing_arxiv_id, o.reference_index, o.source, o.source_observed_at,
       o.cited_arxiv_id, """ + linked_work_sql("o") + """ AS work_id, o.printed_title, o.printed_year,
       c.arxiv_id AS c_arxiv_id, c.observed_at AS c_observed_at, c.title AS c_title,
       c.latest_version AS c_latest_version, c.primary_category AS c_primary_category,
       c.submitted_at AS c_submitted_at, c.last_updated AS c_last_updated,
       d.arxiv_id AS d_arxiv_id, d.observed_at AS d_observed_at, d.title AS d_title,
       d.latest_version AS d_latest_version, d.primary_category AS d_primary_category,
       d.submitted_at AS d_submitted_at, d.last_updated AS d_last_updated,
       w.observed_at AS w_observed_at, w.arxiv_id AS w_arxiv_id, w.doi AS w_doi,
       w.metadata_source AS w_metadata_source, w.pith_arxiv_id AS w_pith_arxiv_id, w.title AS w_title,
       w.venue AS w_venue, w.year AS w_year,
       r.observed_at AS r_observed_at, r.status AS r_status, r.resolver_source AS r_resolver_source"""

def detail_joins(outer: bool = False) -> str:
    """Latest snapshot of the citing paper, the cited paper, the work and the resolution of each row o.

    A visible observation always has a citing snapshot (an inner join); `outer` keeps rows that are not
    observations at all (o is NULL), for statements that mix them in.
    """
    return ("LEFT " if outer else "") + _DETAIL_JOINS_AFTER_CITING


def _latest(table: str, key: str, on: str, also: str = "") -> str:
    return f"""(
    SELECT * FROM {table} AS s
    WHERE s.{key} = o.{on} AND s.observed_at <= $AS{also}
    ORDER BY s.observed_at DESC LIMIT 1
)"""


# The latest snapshot or resolution at the instant ($AS) of each row o, by alias: c the citing paper,
# d the cited paper, w the work, r the resolution.
LATERALS: Final = {
    "c": "JOIN LATERAL " + _latest("paper_snapshots", "arxiv_id", "citing_arxiv_id") + " AS c ON true",
    "d": "LEFT JOIN LATERAL " + _latest("paper_snapshots", "arxiv_id", "cited_arxiv_id") + " AS d ON true",
    # (the work only while the observation holds its link: linked_sql)
    "w": "LEFT JOIN LATERAL " + _latest("work_snapshots", "work_id", "work_id", " AND " + linked_sql("o"))
    + " AS w ON true",
    "r": "LEFT JOIN LATERAL " + _latest("resolutions", "observation_id", "observation_id") + " AS r ON true",
}
_DETAIL_JOINS_AFTER_CITING: Final = "\n".join(LATERALS.values())
_DETAIL_JOINS: Final = "\n" + detail_joins()


# Keyset bounds: forward pages start after a key (the lowest values when there is none), backward
# pages end before one (values above any real key when there is none: U+10FFFF sorts after every id in
# byte order). Either way the bound is an index condition, so any page costs what the first does.
_LOW = ("''", "-2147483648", "'00000000-0000-0000-0000-000000000000'::uuid")
LOW_KEY = _LOW  # the bound of a first page, for statements built elsewhere (app.compiled)
_HIGH = ("chr(1114111)", "2147483647", "'ffffffff-ffff-ffff-ffff-ffffffffffff'::uuid")


def inbound_walk(backward: bool, on: str = "o.cited_arxiv_id = k.arxiv_id",
                 after: tuple[str, str, str] = ("k.key_citing", "k.key_index", "k.key_id"), limit: str = "$6",
                 statuses: str = "$7::text[]") -> str:
    """The observations citing each key k in inbound page order, from the cursor `after` (NULLs: from the
    start, or from the end), at most `limit` of them: only columns of the inbound index, so it is an
    index-only scan in page order that stops at the limit. `statuses`: NULL for all."""
    bound, op, order = (_HIGH, "<", "DESC") if backward else (_LOW, ">", "ASC")
    return f"""
    SELECT o.observation_id, o.citing_arxiv_id, o.reference_index
    FROM citation_observations AS o
    WHERE {on}
      AND (o.citing_arxiv_id, o.reference_index, o.observation_id)
          {op} (coalesce({after[0]}, {bound[0]}), coalesce({after[1]}, {bound[1]}), coalesce({after[2]}, {bound[2]}))
      AND {VISIBLE}
      AND ({statuses} IS NULL OR {_LATEST_STATUS} = ANY({statuses}))
    ORDER BY o.citing_arxiv_id {order}, o.reference_index {order}, o.observation_id {order}
    LIMIT {limit}
"""


def outbound_walk(backward: bool, after: tuple[str, str] = ("k.key_index", "k.key_id"), limit: str = "$5",
                  statuses: str = "$6::text[]", retracted: str = "$7::boolean") -> str:
    """The observations of each citing key k in outbound page order, as inbound_walk does for inbound."""
    bound, op, order = (_HIGH, "<", "DESC") if backward else (_LOW, ">", "ASC")
    return f"""
    SELECT o.observation_id, o.reference_index
    FROM citation_observations AS o
    WHERE o.citing_arxiv_id = k.arxiv_id
      AND (o.reference_index, o.observation_id)
          {op} (coalesce({after[0]}, {bound[1]}), coalesce({after[1]}, {bound[2]}))
      AND {VISIBLE}
      AND ({statuses} IS NULL OR {_LATEST_STATUS} = ANY({statuses}))
      AND ({retracted} IS NULL OR {retracted} = {_RETRACTED})
    ORDER BY o.reference_index {order}, o.observation_id {order}
    LIMIT {limit}
"""


def _inbound_pages(backward: bool, on: str = "o.cited_arxiv_id = k.arxiv_id", columns: str = _DETAIL_COLUMNS,
                   joins: str = "") -> str:
    """$1 cited ids, $2..$4 the cursor per key (NULL: from the start, or from the end), $5 instant,
    $6 page size, $7 statuses (NULL: all). Rows come in page order (backward pages reversed by the caller).
    `on` says which observations cite the key: a paper (by default), or a work (WORK_INBOUND_PAGES).
    `columns`: what each row gives of o and its details c, d, w, r (by default, all their columns), with
    `joins` after theirs."""
    order = "DESC" if backward else "ASC"
    return f"""
SELECT k.ord, {columns}
FROM unnest($1::text[], $2::text[], $3::int[], $4::uuid[])
     WITH ORDINALITY AS k(arxiv_id, key_citing, key_index, key_id, ord)
CROSS JOIN LATERAL ({inbound_walk(backward, on)}) AS page
JOIN citation_observations AS o ON o.observation_id = page.observation_id {_DETAIL_JOINS} {joins}
ORDER BY k.ord, page.citing_arxiv_id {order}, page.reference_index {order}, page.observation_id {order}
"""


def _outbound_pages(backward: bool, columns: str = _DETAIL_COLUMNS, joins: str = "") -> str:
    """$1 citing ids, $2..$3 the cursor per key, $4 instant, $5 page size, $6 statuses, $7 cites-retracted."""
    order = "DESC" if backward else "ASC"
    return f"""
SELECT k.ord, {columns}
FROM unnest($1::text[], $2::int[], $3::uuid[]) WITH ORDINALITY AS k(arxiv_id, key_index, key_id, ord)
CROSS JOIN LATERAL ({outbound_walk(backward)}) AS page
JOIN citation_observations AS o ON o.observation_id = page.observation_id {_DETAIL_JOINS} {joins}
ORDER BY k.ord, page.reference_index {order}, page.observation_id {order}
"""


# Templates ($AS: the instant, parameter 5 of inbound pages, 4 of outbound pages, 3 of counts).
INBOUND_PAGES_TEMPLATE: Final = _inbound_pages(backward=False)
OUTBOUND_PAGES_TEMPLATE: Final = _outbound_pages(backward=False)
INBOUND_PAGES: Final = at_param(INBOUND_PAGES_TEMPLATE, 5)
INBOUND_PAGES_BACKWARD: Final = at_param(_inbound_pages(backward=True), 5)
# The observations citing a work (its keys are work ids, as text), in the same order as a paper's inbound.
_BY_WORK: Final = "o.work_id = k.arxiv_id::uuid AND " + linked_sql("o")
WORK_INBOUND_PAGES: Final = at_param(_inbound_pages(backward=False, on=_BY_WORK), 5)
WORK_INBOUND_PAGES_BACKWARD: Final = at_param(_inbound_pages(backward=True, on=_BY_WORK), 5)
OUTBOUND_PAGES: Final = at_param(OUTBOUND_PAGES_TEMPLATE, 4)
OUTBOUND_PAGES_BACKWARD: Final = at_param(_outbound_pages(backward=True), 4)

# $1 paper ids (work ids for 'work'), $2 'in', 'out' or 'work' per key, $3 instant, $4 statuses, $5 cites-retracted (outbound only).
# A paper's whole inbound total is inbound_total_sql's (from its kept total); any other count is counted,
# and `examined` says how many observations it read (a filter probes each one's resolution or cited work's
# events: the work charged, loaders.citations.citation_counts).
_FAST_TOTAL: Final = "k.direction = 'in' AND $4::text[] IS NULL AND $5::boolean IS NULL"
CITATION_COUNTS_TEMPLATE: Final = f"""
SELECT k.ord, CASE WHEN {_FAST_TOTAL} THEN {inbound_total_sql("k.arxiv_id")} ELSE counted.total END AS total,
       coalesce(counted.examined, 0) AS examined
FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS k(arxiv_id, direction, ord)
LEFT JOIN LATERAL (
    SELECT count(*) FILTER (WHERE ($4::text[] IS NULL OR {_LATEST_STATUS} = ANY($4::text[]))
                              AND ($5::boolean IS NULL OR $5::boolean = {_RETRACTED})) AS total,
           count(*) AS examined
    FROM (
        SELECT o.observation_id, o.citing_arxiv_id, o.work_id, o.linked_from
        FROM citation_observations AS o
        WHERE k.direction = 'in' AND o.cited_arxiv_id = k.arxiv_id AND {VISIBLE}
        UNION ALL
        SELECT o.observation_id, o.citing_arxiv_id, o.work_id, o.linked_from
        FROM citation_observations AS o
        WHERE k.direction = 'out' AND o.citing_arxiv_id = k.arxiv_id AND {VISIBLE}
        UNION ALL
        SELECT o.observation_id, o.citing_arxiv_id, o.work_id, o.linked_from
        FROM citation_observations AS o
        WHERE k.direction = 'work' AND o.work_id = (CASE WHEN k.direction = 'work' THEN k.arxiv_id::uuid END)
          AND {VISIBLE} AND {linked_sql("o")}
    ) AS o
    WHERE NOT ({_FAST_TOTAL})
) AS counted ON true
"""
CITATION_COUNTS: Final = at_param(CITATION_COUNTS_TEMPLATE, 3)

OBSERVATIONS_BY_ID_TEMPLATE: Final = f"""
SELECT k.ord, {_DETAIL_COLUMNS}
FROM unnest($1::uuid[]) WITH ORDINALITY AS k(observation_id, ord)
JOIN citation_observations AS o
  ON o.observation_id = k.observation_id
 AND {VISIBLE} {_DETAIL_JOINS}
"""
OBSERVATIONS_BY_ID: Final = at_param(OBSERVATIONS_BY_ID_TEMPLATE, 2)


_PAPER_KEYS: Final = {prefix: (prefix + "arxiv_id", prefix + "observed_at") for prefix in ("c_", "d_")}


def _paper_of(row: Any, prefix: str, papers: dict[tuple, PaperSnapshot | None] | None) -> PaperSnapshot | None:
    """The row's citing ("c_") or cited ("d_") paper snapshot; one object per snapshot across `papers`."""
    if papers is None:
        return paper_from(row, prefix)
    id_key, at_key = _PAPER_KEYS[prefix]
    key = (row[id_key], row[at_key])
    if key not in papers:
        papers[key] = paper_from(row, prefix)
    return papers[key]


def observation_from(row: Any, papers: dict[tuple, PaperSnapshot | None] | None = None) -> Observation:
    work = None
    if row["w_observed_at"] is not None:
        work = WorkSnapshot(
            work_id=row["work_id"],
            observed_at=row["w_observed_at"],
            arxiv_id=row["w_arxiv_id"],
            doi=row["w_doi"],
            metadata_source=row["w_metadata_source"],
            pith_arxiv_id=row["w_pith_arxiv_id"],
            title=row["w_title"],
            venue=row["w_venue"],
            year=row["w_year"],
        )
    if row["r_observed_at"] is not None:
        resolution = Resolution(row["observation_id"], row["r_observed_at"], row["r_status"], row["r_resolver_source"])
    else:
        # Parsed but not yet resolved: unresolved as of the parse.
        resolution = Resolution(row["observation_id"], row["source_observed_at"], UNRESOLVED, None)
    return Observation(
        observation_id=row["observation_id"],
        citing_arxiv_id=row["citing_arxiv_id"],
        reference_index=row["reference_index"],
        source=row["source"],
        source_observed_at=row["source_observed_at"],
        cited_arxiv_id=row["cited_arxiv_id"],
        work_id=row["work_id"],
        printed_title=row["printed_title"],
        printed_year=row["printed_year"],
        citing=_paper_of(row, "c_", papers),
        cited=_paper_of(row, "d_", papers),
        work=work,
        resolution=resolution,
    )


@dataclass(frozen=True, slots=True)
class PageKey:
    """One page request: the paper, and the last row of the previous page (None for the first)."""

    arxiv_id: str
    after: tuple | None = None


def pages_from_rows(rows: Sequence[Any], n: int) -> list[list[Observation]]:
    pages: list[list[Observation]] = [[] for _ in range(n)]
    for row in rows:
        pages[row["ord"] - 1].append(observation_from(row))
    return pages


async def pages_in_stretches(rows: Sequence[Any], n: int) -> list[list[Observation]]:
    """pages_from_rows for a batch of any size: the rows converted in stretches (Turns), the event loop free between
    them (a neighbourhood's last hop converts 10,000 rows: 80 ms in one piece)."""
    pages: list[list[Observation]] = [[] for _ in range(n)]
    for row, observation in zip(rows, await in_stretches(rows, observation_from), strict=True):
        pages[row["ord"] - 1].append(observation)
    return pages


def row_pages(rows: Sequence[Any], n: int) -> list[list[Any]]:
    """The rows of each page, not yet converted (their conversion can wait for the next statement)."""
    pages: list[list[Any]] = [[] for _ in range(n)]
    for row in rows:
        pages[row["ord"] - 1].append(row)
    return pages


def linked_work_ids(rows: Sequence[Any]) -> list[UUID]:
    """The works linked at the instant behind page rows (as Observation.work), each once, in order."""
    return list(dict.fromkeys(row["work_id"] for row in rows if row["w_observed_at"] is not None))


async def inbound_pages(db: Db, keys: Sequence[PageKey], as_of: datetime, limit: int,
                        statuses: Sequence[str] | None = None, backward: bool = False,
                        of_works: bool = False) -> list[list[Observation]]:
    """Inbound observations of each paper in record order (citing id, reference index, id).

    Forward: the first `limit` after each key's cursor. Backward: the last `limit` before it, nearest
    first (the caller reverses them into record order).
    """
    return await pages_in_stretches(await inbound_page_rows(db, keys, as_of, limit, statuses, backward, of_works),
                                    len(keys))


async def inbound_page_rows(db: Db, keys: Sequence[PageKey], as_of: datetime, limit: int,
                            statuses: Sequence[str] | None = None, backward: bool = False,
                            of_works: bool = False) -> Sequence[Any]:
    after = [k.after or (None, None, None) for k in keys]
    statements = (WORK_INBOUND_PAGES, WORK_INBOUND_PAGES_BACKWARD) if of_works else (INBOUND_PAGES,
                                                                                    INBOUND_PAGES_BACKWARD)
    return await db.fetch(
        statements[1] if backward else statements[0],
        [k.arxiv_id for k in keys],
        [a[0] for a in after],
        [a[1] for a in after],
        [a[2] for a in after],
        as_of,
        limit,
        list(statuses) if statuses is not None else None,
    )


async def outbound_pages(db: Db, keys: Sequence[PageKey], as_of: datetime, limit: int,
                         statuses: Sequence[str] | None = None,
                         cites_retracted: bool | None = None, backward: bool = False) -> list[list[Observation]]:
    """Outbound observations of each paper by reference index, then id (backward as for inbound)."""
    return await pages_in_stretches(
        await outbound_page_rows(db, keys, as_of, limit, statuses, cites_retracted, backward), len(keys))


async def outbound_page_rows(db: Db, keys: Sequence[PageKey], as_of: datetime, limit: int,
                             statuses: Sequence[str] | None = None, cites_retracted: bool | None = None,
                             backward: bool = False) -> Sequence[Any]:
    after = [k.after or (None, None) for k in keys]
    return await db.fetch(
        OUTBOUND_PAGES_BACKWARD if backward else OUTBOUND_PAGES,
        [k.arxiv_id for k in keys],
        [a[0] for a in after],
        [a[1] for a in after],
        as_of,
        limit,
        list(statuses) if statuses is not None else None,
        cites_retracted,
    )


# A filtered count or page probes each observation it reads (its latest resolution, or its cited work's
# events), about as much as reading another index row: priced (app.cost) and charged as twice the rows read.
FILTER_PROBE_ROWS: Final = 2


async def citation_counts(db: Db, keys: Sequence[tuple[str, str]], as_of: datetime,
                          statuses: Sequence[str] | None = None,
                          cites_retracted: bool | None = None) -> list[int]:
    """Count visible observations per (arxiv_id, 'in' | 'out') key under the filters."""
    rows = await db.fetch(
        CITATION_COUNTS,
        [k[0] for k in keys],
        [k[1] for k in keys],
        as_of,
        list(statuses) if statuses is not None else None,
        cites_retracted,
    )
    if statuses is not None or cites_retracted is not None:  # each row examined was probed (app.cost prices it)
        charge(db, scanned(FILTER_PROBE_ROWS * sum(row["examined"] for row in rows)))
    return totals_from_rows(rows, len(keys))


def totals_from_rows(rows: Sequence[Any], n: int) -> list[int]:
    totals = [0] * n
    for row in rows:
        totals[row["ord"] - 1] = row["total"]
    return totals


async def observations_by_id(db: Db, ids: Sequence[UUID], as_of: datetime) -> list[Observation | None]:
    found: list[Observation | None] = [None] * len(ids)
    for row in await db.fetch(OBSERVATIONS_BY_ID, list(ids), as_of):
        found[row["ord"] - 1] = observation_from(row)
    return found


async def observations_at(db: Db, pairs: Sequence[tuple[UUID, datetime]]) -> list[Observation | None]:
    """Each (observation id, instant)'s observation, in one statement whatever the number of instants."""
    return [observation_from(rows[0]) if rows else None
            for rows in await fetch_at_pairs(db, OBSERVATIONS_BY_ID_TEMPLATE, pairs, key_type="uuid")]


# Distinct citing papers of each paper at the instant, by the year their version 1 was submitted (from
# each citing paper's snapshot at the instant), uncapped, in one statement.
CITATIONS_BY_YEAR: Final = at_param("""
SELECT k.ord, extract(year FROM s.submitted_at AT TIME ZONE 'UTC')::int AS year, count(*)::int AS n
FROM unnest($1::text[]) WITH ORDINALITY AS k(arxiv_id, ord)
CROSS JOIN LATERAL (
    SELECT DISTINCT o.citing_arxiv_id FROM citation_observations AS o
    WHERE o.cited_arxiv_id = k.arxiv_id AND o.visible_from <= $AS
) AS c
CROSS JOIN LATERAL (
    SELECT p.submitted_at FROM paper_snapshots AS p
    WHERE p.arxiv_id = c.citing_arxiv_id AND p.observed_at <= $AS
    ORDER BY p.observed_at DESC LIMIT 1
) AS s
GROUP BY k.ord, year
ORDER BY k.ord, year
""", 2)


async def citations_by_year(db: Db, arxiv_ids: Sequence[str], as_of: datetime) -> list[list[tuple[int, int]]]:
    """(year, citing papers) per paper, oldest year first. The statement visits each citing observation
    and each citer's snapshot (charged as app.cost prices it)."""
    found: list[list[tuple[int, int]]] = [[] for _ in arxiv_ids]
    citers = 0
    for row in await db.fetch(CITATIONS_BY_YEAR, list(arxiv_ids), as_of):
        found[row["ord"] - 1].append((row["year"], row["n"]))
        citers += row["n"]
    charge(db, scanned(2 * citers))
    return found
