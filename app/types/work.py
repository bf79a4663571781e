"""Work: the scholarly work a reference points at."""

from __future__ import annotations

from datetime import datetime

import strawberry

from app.types.node import Node, global_id
from loaders.rows import Observation, WorkSnapshot


@strawberry.type(description=(
    "The work a reference is linked to, from its latest work snapshot at the instant; without a canonical "
    "link, what the bibliography printed (workId, doi, arxivId, metadataSource and venue are then null)."))
class Work(Node):
    work_id: strawberry.ID | None = strawberry.field(description="Canonical work id; null when unlinked.")
    linked: bool = strawberry.field(description="Whether the reference has a canonical work link at the instant.")
    arxiv_id: str | None = strawberry.field(description="The work's arXiv id, if it has one.")
    doi: str | None = strawberry.field(description="The work's DOI, if known.")
    metadata_source: str | None = strawberry.field(description="Where the work's metadata came from.")
    pith_arxiv_id: str | None = strawberry.field(description="The Pith paper this work (or reference) is attributed to.")
    title: str | None = strawberry.field(description="Title (as printed, when unlinked).")
    venue: str | None = strawberry.field(description="Venue, if known.")
    year: int | None = strawberry.field(description="Publication year.")
    snapshot_observed_at: datetime = strawberry.field(
        description="When this work snapshot was observed (for an unlinked reference, when it was parsed).")

    @classmethod
    def of(cls, obs: Observation, pinned: datetime | None) -> "Work":
        w = obs.work
        if w is None:
            # Unlinked: the printed reference itself, identified through its observation.
            return cls(id=global_id("Work", f"ref:{obs.observation_id}", pinned), work_id=None, linked=False, arxiv_id=None,
                       doi=None, metadata_source=None, pith_arxiv_id=obs.cited_arxiv_id, title=obs.printed_title,
                       venue=None, year=obs.printed_year, snapshot_observed_at=obs.source_observed_at)
        return cls.of_snapshot(w, pinned)

    @classmethod
    def of_snapshot(cls, w: WorkSnapshot, pinned: datetime | None) -> "Work":
        """The work as of an instant; `pinned`: the instant its id names (None: now)."""
        return cls(id=global_id("Work", str(w.work_id), pinned), work_id=strawberry.ID(str(w.work_id)), linked=True,
                   arxiv_id=w.arxiv_id, doi=w.doi, metadata_source=w.metadata_source, pith_arxiv_id=w.pith_arxiv_id,
                   title=w.title, venue=w.venue, year=w.year, snapshot_observed_at=w.observed_at)
