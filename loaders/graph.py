"""The graph as of an instant, uncapped, for export: streamed rows of nodes and edges.

Every visible observation is an edge from its citing paper to the cited Pith paper when that paper
has a snapshot by the instant, else to the linked work when the work has one, else to a node of its
own for the unlinked reference (what the bibliography printed). Statements run on one connection,
inside one read-only REPEATABLE READ transaction the caller opens, so nodes and edges agree, and rows
come through a server-side cursor, so memory stays flat whatever the graph's size.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, AsyncIterator, Final, Sequence

import asyncpg

from app.export import Edge, Node, paper_node_id, reference_node_id, work_node_id, z_text
from loaders.citations import linked_work_sql
from loaders.rows import (RETRACTING, STANDING_DECIDING, deciding_order_sql, event_order_sql, shown_reference_index,
                          sql_list, stands_sql)

PREFETCH: Final = 5000

# Per instant ($1), built once per statement by hash joins rather than probed row by row.
_FACTS: Final = """
papers_known AS (SELECT DISTINCT arxiv_id FROM paper_snapshots WHERE observed_at <= $1),
works_known AS (SELECT DISTINCT work_id FROM work_snapshots WHERE observed_at <= $1),
checked AS (SELECT DISTINCT work_id FROM standing_receipts WHERE observed_at <= $1),
standing_events AS (  -- the standing rule (loaders.rows): the deciding event of each work
    SELECT DISTINCT ON (work_id) work_id, event_type IN """ + sql_list(RETRACTING) + """ AS retracted
    FROM work_events AS e
    WHERE """ + stands_sql("e", "$1") + """ AND event_type IN """ + sql_list(STANDING_DECIDING) + """
    ORDER BY work_id, """ + deciding_order_sql("e", descending=True) + """
),
latest_events AS (  -- the last of each work's notice events
    SELECT DISTINCT ON (work_id) work_id, event_type, source, reported_at, observed_at
    FROM work_events AS e
    WHERE """ + stands_sql("e", "$1") + """
    ORDER BY work_id, """ + event_order_sql(descending=True) + """
),
latest_status AS (
    SELECT DISTINCT ON (observation_id) observation_id, status
    FROM resolutions WHERE observed_at <= $1
    ORDER BY observation_id, observed_at DESC
),
edges AS (
    SELECT o.observation_id, o.citing_arxiv_id, o.reference_index, o.source, o.cited_arxiv_id, o.work_id,
           o.printed_title, o.printed_year,
           CASE WHEN pk.arxiv_id IS NOT NULL THEN 'paper' WHEN wk.work_id IS NOT NULL THEN 'work'
                ELSE 'reference' END AS target_kind,
           coalesce(ls.status, 'unresolved') AS status,
           (wk.work_id IS NOT NULL AND ch.work_id IS NOT NULL) AS measured,
           coalesce(wk.work_id IS NOT NULL AND ch.work_id IS NOT NULL AND se.retracted, false) AS retracted,
           le.event_type, le.source AS event_source, le.reported_at AS event_reported_at,
           le.observed_at AS event_observed_at
    FROM (  -- each reference with its canonical work link at the instant (loaders.citations.linked_work_sql)
        SELECT observation_id, citing_arxiv_id, reference_index, source, cited_arxiv_id, printed_title, printed_year,
               visible_from, """ + linked_work_sql("c", "$1") + """ AS work_id
        FROM citation_observations AS c) AS o
    LEFT JOIN papers_known AS pk ON pk.arxiv_id = o.cited_arxiv_id
    LEFT JOIN works_known AS wk ON wk.work_id = o.work_id
    LEFT JOIN checked AS ch ON ch.work_id = o.work_id
    LEFT JOIN standing_events AS se ON se.work_id = o.work_id
    LEFT JOIN latest_events AS le  -- shown when the notice is measured
           ON le.work_id = o.work_id AND wk.work_id IS NOT NULL AND ch.work_id IS NOT NULL
    LEFT JOIN latest_status AS ls ON ls.observation_id = o.observation_id
    WHERE o.visible_from <= $1 AND {where}
)"""


def _with(where: str, body: str) -> str:
    return "WITH " + _FACTS.format(where=where) + "\n" + body


WHOLE: Final = "true"
# A rooted walk's edges: inbound edges of the papers $2, outbound edges of the papers $3 that end at a paper.
ROOTED: Final = "(o.cited_arxiv_id = ANY($2::text[]) OR o.citing_arxiv_id = ANY($3::text[]))"

PAPERS: Final = """
SELECT DISTINCT ON (arxiv_id) arxiv_id, title, primary_category, submitted_at, latest_version
FROM paper_snapshots
WHERE observed_at <= $1 AND ($2::text[] IS NULL OR arxiv_id = ANY($2::text[]))
ORDER BY arxiv_id, observed_at DESC
"""
WORKS: Final = """
SELECT DISTINCT ON (w.work_id) w.work_id, w.arxiv_id, w.doi, w.title, w.year
FROM work_snapshots AS w
JOIN (SELECT DISTINCT work_id FROM edges WHERE target_kind = 'work') AS t USING (work_id)
WHERE w.observed_at <= $1
ORDER BY w.work_id, w.observed_at DESC
"""
REFERENCES: Final = """
SELECT observation_id, printed_title, printed_year FROM edges WHERE target_kind = 'reference'
ORDER BY observation_id
"""
EDGES: Final = """
SELECT * FROM edges {only_papers} ORDER BY citing_arxiv_id, reference_index, observation_id
"""
# One hop of a rooted walk: the papers at the other end of the visible edges of the papers $2.
NEIGHBOURS_IN: Final = """
SELECT DISTINCT o.citing_arxiv_id FROM citation_observations AS o
WHERE o.cited_arxiv_id = ANY($2::text[]) AND o.visible_from <= $1
"""
NEIGHBOURS_OUT: Final = """
SELECT DISTINCT o.cited_arxiv_id FROM citation_observations AS o
WHERE o.citing_arxiv_id = ANY($2::text[]) AND o.visible_from <= $1 AND o.cited_arxiv_id IS NOT NULL
  AND EXISTS (SELECT 1 FROM paper_snapshots AS s WHERE s.arxiv_id = o.cited_arxiv_id AND s.observed_at <= $1)
"""


class Graph:
    """What to export: the whole graph, or the uncapped neighbourhood of a root (papers only)."""

    def __init__(self, conn: asyncpg.Connection, as_of: datetime) -> None:
        self.conn, self.as_of = conn, as_of
        self.papers: list[str] | None = None  # None: every paper
        self.inbound_of: list[str] = []
        self.outbound_of: list[str] = []

    async def walk(self, root: str, directions: Sequence[str], depth: int) -> bool:
        """Restrict to the papers within `depth` hops of `root`; False when the root is unknown."""
        known = await self.conn.fetchval(
            "SELECT true FROM paper_snapshots WHERE arxiv_id = $1 AND observed_at <= $2 LIMIT 1", root, self.as_of)
        if not known:
            return False
        reached = {root: 0}
        frontier = [root]
        for hop in range(depth):
            inner = [a for a, d in reached.items() if d == hop]
            if "in" in directions:
                self.inbound_of += inner
            if "out" in directions:
                self.outbound_of += inner
            found: list[str] = []
            for d in directions:
                for row in await self.conn.fetch(NEIGHBOURS_IN if d == "in" else NEIGHBOURS_OUT, self.as_of,
                                                 frontier):
                    if row[0] not in reached:
                        reached[row[0]] = hop + 1
                        found.append(row[0])
            frontier = found
            if not frontier:
                break
        self.papers = list(reached)
        return True

    def _rows(self, sql: str, *args: Any) -> AsyncIterator[Any]:
        return self.conn.cursor(sql, self.as_of, *args, prefetch=PREFETCH)

    def _edge_statement(self, body: str) -> tuple[str, tuple]:
        if self.papers is None:
            return _with(WHOLE, body.replace("{only_papers}", "")), ()
        return (_with(ROOTED, body.replace("{only_papers}", "WHERE target_kind = 'paper'")),
                (self.inbound_of, self.outbound_of))

    async def count(self) -> tuple[int, int]:
        """(nodes, edges), for a progress bar."""
        papers = len(self.papers) if self.papers is not None else await self.conn.fetchval(
            "SELECT count(DISTINCT arxiv_id) FROM paper_snapshots WHERE observed_at <= $1", self.as_of)
        where, args = (WHOLE, ()) if self.papers is None else (ROOTED, (self.inbound_of, self.outbound_of))
        row = await self.conn.fetchrow(_with(where, """
            SELECT count(*) FILTER (WHERE target_kind = 'reference')
                   + count(DISTINCT work_id) FILTER (WHERE target_kind = 'work') AS others,
                   count(*) AS edges, count(*) FILTER (WHERE target_kind = 'paper') AS paper_edges
            FROM edges"""), self.as_of, *args)
        if self.papers is None:
            return papers + row["others"], row["edges"]
        return papers, row["paper_edges"]

    async def nodes(self) -> AsyncIterator[Node]:
        async for r in self._rows(PAPERS, self.papers):
            yield Node(id=paper_node_id(r["arxiv_id"]), kind="paper", arxiv_id=r["arxiv_id"], title=r["title"],
                       primary_category=r["primary_category"], submitted=z_text(r["submitted_at"]),
                       latest_version=r["latest_version"])
        if self.papers is not None:
            return  # a walk's nodes are papers
        async for r in self._rows(_with(WHOLE, WORKS)):
            yield Node(id=work_node_id(r["work_id"]), kind="work", arxiv_id=r["arxiv_id"], title=r["title"],
                       doi=r["doi"], year=r["year"])
        async for r in self._rows(_with(WHOLE, REFERENCES)):
            yield Node(id=reference_node_id(r["observation_id"]), kind="reference", title=r["printed_title"],
                       year=r["printed_year"])

    async def edges(self) -> AsyncIterator[Edge]:
        sql, args = self._edge_statement(EDGES)
        async for r in self._rows(sql, *args):
            kind = r["target_kind"]
            target = (paper_node_id(r["cited_arxiv_id"]) if kind == "paper" else work_node_id(r["work_id"])
                      if kind == "work" else reference_node_id(r["observation_id"]))
            yield Edge(source=paper_node_id(r["citing_arxiv_id"]), target=target, observation_id=str(r["observation_id"]),
                       reference_index=shown_reference_index(r["source"], r["reference_index"]),
                       citation_source=r["source"],
                       resolution_status=r["status"], standing_state="measured" if r["measured"] else "unavailable",
                       cited_work_retracted=r["retracted"], cited_work_event_type=r["event_type"],
                       cited_work_event_source=r["event_source"],
                       cited_work_event_reported_at=z_text(r["event_reported_at"]),
                       cited_work_event_observed_at=z_text(r["event_observed_at"]))
