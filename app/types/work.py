"""Work: the scholarly work a reference points at, or that a DOI names."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated
from uuid import UUID

import strawberry
from strawberry.types import Info

from app.types.measurement import ExternalCitationMeasurement
from app.types.node import Node, global_id
from app.types.standing import StandingNotice
from loaders.base import STANDING_UNITS, charge
from loaders.rows import Observation, WorkSnapshot, latest_retracts

if TYPE_CHECKING:
    from app.types.graph import CitationConnection


@strawberry.type(description=(
    "The work a reference is linked to, from its latest work snapshot at the instant; without a canonical "
    "link, what the bibliography printed (workId, doi, arxivId, metadataSource and venue are then null)."))
class Work(Node):
    key: strawberry.Private[UUID | None]  # the canonical work (None: an unlinked reference)
    as_of: strawberry.Private[datetime]
    pinned: strawberry.Private[bool]
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
    def of(cls, obs: Observation, as_of: datetime, pinned: bool) -> "Work":
        w = obs.work
        if w is None:
            # Unlinked: the printed reference itself, identified through its observation.
            return cls(id=global_id("Work", f"ref:{obs.observation_id}", as_of if pinned else None), key=None,
                       as_of=as_of, pinned=pinned, work_id=None, linked=False, arxiv_id=None, doi=None,
                       metadata_source=None, pith_arxiv_id=obs.cited_arxiv_id, title=obs.printed_title, venue=None,
                       year=obs.printed_year, snapshot_observed_at=obs.source_observed_at)
        return cls.of_snapshot(w, as_of, pinned)

    @classmethod
    def of_snapshot(cls, w: WorkSnapshot, as_of: datetime, pinned: bool) -> "Work":
        """The work as of an instant; `pinned`: the instant was asked for (its id names it)."""
        return cls(id=global_id("Work", str(w.work_id), as_of if pinned else None), key=w.work_id, as_of=as_of,
                   pinned=pinned, work_id=strawberry.ID(str(w.work_id)), linked=True, arxiv_id=w.arxiv_id, doi=w.doi,
                   metadata_source=w.metadata_source, pith_arxiv_id=w.pith_arxiv_id, title=w.title, venue=w.venue,
                   year=w.year, snapshot_observed_at=w.observed_at)

    @strawberry.field(description=(
        "The work's standing at the instant: the same notice an observation citing it shows (UNAVAILABLE for "
        "an unlinked reference, or a work no standing source has checked)."))
    async def standing(self, info: Info) -> StandingNotice:
        if self.key is None:
            return StandingNotice.of_work(None, None)
        standing = await info.context.loaders(self.as_of).standing.load(self.key)
        charge(info.context.session, STANDING_UNITS)
        return StandingNotice.of_work(self.key, standing)

    @strawberry.field(description=(
        "Whether the latest of the work's retraction, withdrawal and reinstatement events by the instant is a "
        "retraction or withdrawal (the rule behind citesRetracted)."))
    async def retracted(self, info: Info) -> bool:
        if self.key is None:
            return False
        standing = await info.context.loaders(self.as_of).standing.load(self.key)
        return latest_retracts([e.event_type for e in standing.events]) if standing is not None else False

    @strawberry.field(description="Each source's latest citation count of the work at the instant, by source.")
    async def external_citation_measurements(self, info: Info) -> list[ExternalCitationMeasurement]:
        if self.key is None:
            return []
        found = await info.context.loaders(self.as_of).work_measurements.load(self.key)
        return [ExternalCitationMeasurement(source=m.source, count=m.count, observed_at=m.observed_at)
                for m in sorted(found, key=lambda m: m.source)]

    @strawberry.field(description=(
        "The observations that cite this work as of the instant, by citing arXiv id, reference index, then "
        "observation id; empty for an unlinked reference."))
    def inbound(
        self,
        first: Annotated[int | None, strawberry.argument(description="Page forward: this many, 1 to 100.")] = None,
        after: Annotated[str | None, strawberry.argument(description="Page forward from this cursor.")] = None,
        last: Annotated[int | None, strawberry.argument(description="Page backward: the last this many.")] = None,
        before: Annotated[str | None, strawberry.argument(description="Page backward from this cursor.")] = None,
    ) -> Annotated["CitationConnection", strawberry.lazy("app.types.graph")] | None:
        from app.types.graph import CitationConnection
        from app.types.paging import page_request

        # An unlinked reference is cited by no observation but its own: the nil work id selects nothing.
        key = str(self.key or UUID(int=0))
        request = page_request(key, "in", first, after, last, before, None)
        return CitationConnection(request=request, direction="in", as_of=self.as_of, pinned=self.pinned,
                                  of_work=True)
