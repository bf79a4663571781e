"""Citation graphs of known shape, written straight into the fact tables for tests."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

import asyncpg

BASE = datetime(2026, 1, 1, tzinfo=timezone.utc)
STATUSES = ("verified_exact", "verified_fuzzy", "unresolved", "parse_uncertain", "malformed_identifier",
            "metadata_mismatch")


@dataclass
class Graph:
    papers: list[tuple] = field(default_factory=list)
    observations: list[tuple] = field(default_factory=list)
    resolutions: list[tuple] = field(default_factory=list)
    works: list[tuple] = field(default_factory=list)
    receipts: list[tuple] = field(default_factory=list)
    events: list[tuple] = field(default_factory=list)
    measurements: list[tuple] = field(default_factory=list)
    _n: int = 0

    def paper(self, arxiv_id: str, title: str | None = None, at: datetime = BASE) -> str:
        self.papers.append((arxiv_id, at, title or f"Synthetic paper {arxiv_id}", 1, "cs.DC", at, at))
        return arxiv_id

    def work(self, pith_arxiv_id: str | None, title: str, at: datetime = BASE) -> uuid.UUID:
        work_id = uuid.uuid5(uuid.NAMESPACE_URL, f"work:{title}")
        self.works.append((work_id, at, pith_arxiv_id, None, "synthetic", pith_arxiv_id, title, None, 2025))
        return work_id

    def cite(self, citing: str, cited: str | None, index: int, *, status: str = "verified_exact",
             work: uuid.UUID | None = None, at: datetime = BASE, printed: str | None = None) -> uuid.UUID:
        self._n += 1
        oid = uuid.uuid5(uuid.NAMESPACE_URL, f"obs:{citing}:{index}:{cited}:{self._n}")
        self.observations.append((oid, citing, index, "pdf_text", at, cited, work, printed or f"ref {index}", 2025))
        self.resolutions.append((oid, at + timedelta(seconds=1), status, "arxiv_id" if status != "unresolved" else None))
        return oid

    async def write(self, conn: asyncpg.Connection) -> None:
        tables = {
            "paper_snapshots": (self.papers, ["arxiv_id", "observed_at", "title", "latest_version", "primary_category",
                                              "submitted_at", "last_updated"]),
            "work_snapshots": (self.works, ["work_id", "observed_at", "arxiv_id", "doi", "metadata_source",
                                            "pith_arxiv_id", "title", "venue", "year"]),
            "citation_observations": (self.observations, ["observation_id", "citing_arxiv_id", "reference_index",
                                                          "source", "source_observed_at", "cited_arxiv_id",
                                                          "work_id", "printed_title", "printed_year"]),
            "resolutions": (self.resolutions, ["observation_id", "observed_at", "status", "resolver_source"]),
            "standing_receipts": (self.receipts, ["work_id", "source", "observed_at"]),
            "work_events": (self.events, ["work_id", "source", "event_type", "observed_at", "reported_at",
                                          "notice_doi"]),
            "external_measurements": (self.measurements, ["arxiv_id", "source", "observed_at", "count"]),
        }
        async with conn.transaction():
            for table, (rows, columns) in tables.items():
                if rows:
                    await conn.copy_records_to_table(table, records=list(dict.fromkeys(rows)), columns=columns)


def hub(root: str, inbound: int, outbound: int, prefix: str = "8801") -> Graph:
    """A paper with `inbound` citing papers and `outbound` references, statuses and standing of every kind."""
    g = Graph()
    g.paper(root, "Hub paper")
    own = g.work(root, "Hub paper")
    g.receipts.append((own, "crossref", BASE + timedelta(days=1)))
    g.measurements.append((root, "arxiv_reference", BASE + timedelta(days=1), inbound))
    for i in range(inbound):
        citing = g.paper(f"{prefix}.{i:05d}")
        g.cite(citing, root, i % 50 + 1, status=STATUSES[i % len(STATUSES)], work=own if i % 2 == 0 else None)
    for j in range(outbound):
        cited = g.paper(f"{int(prefix) + 1}.{j:05d}") if j % 3 else None
        work = g.work(cited, f"Referenced work {root} {j}") if j % 4 else None
        if work is not None:
            g.receipts.append((work, "retraction_watch", BASE + timedelta(days=2)))
            if j % 10 == 1:
                g.events.append((work, "retraction_watch", "retraction", BASE + timedelta(days=2),
                                 BASE + timedelta(days=1), f"10.9999/retraction.{j}"))
        g.cite(root, cited, j + 1, status=STATUSES[j % len(STATUSES)], work=work)
    return g


def tree(root: str, fanout: int, levels: int = 2, prefix: int = 7000) -> Graph:
    """root <- fanout citers <- fanout citers each ...: every paper above the leaves has `fanout` citers."""
    g = Graph()
    g.paper(root)
    frontier = [root]
    counter = 0
    for level in range(levels):
        nxt = []
        for cited in frontier:
            for k in range(fanout):
                counter += 1
                citing = g.paper(f"{prefix + level}.{counter:05d}")
                work = g.work(cited, f"Work of {cited}")
                g.receipts.append((work, "crossref", BASE))
                g.cite(citing, cited, k + 1, work=work)
                nxt.append(citing)
        frontier = nxt
    return g


def time_travel(root: str, citers: int = 60, prefix: str = "5500") -> Graph:
    """A paper cited once every three days from 1 January 2026 (citer i at day 3i), each citation
    unresolved when parsed and verified 100 days into the year when i is even; it cites 30 papers."""
    g = Graph()
    g.paper(root, "Time travel hub paper")
    for i in range(citers):
        at = BASE + timedelta(days=3 * i)
        citing = g.paper(f"{prefix}.{i:05d}", f"Time travel citer {i}", at=at)
        oid = g.cite(citing, root, 1, status="unresolved", at=at)
        if i % 2 == 0:
            g.resolutions.append((oid, max(at, BASE + timedelta(days=100)) + timedelta(seconds=2), "verified_exact",
                                  "arxiv_id"))
    for j in range(30):
        cited = g.paper(f"{int(prefix) + 1}.{j:05d}", f"Time travel reference {j}")
        g.cite(root, cited, j + 1, at=BASE + timedelta(days=2 * j))
    return g


def citers_at(at: datetime, citers: int = 60) -> int:
    """How many of time_travel's citations are visible at `at`."""
    return sum(1 for i in range(citers) if BASE + timedelta(days=3 * i) <= at)
