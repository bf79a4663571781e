"""CitationObservation and its connection: one reference of a citing paper, with provenance."""

from __future__ import annotations

from datetime import datetime

import strawberry
from strawberry.types import Info

from app import cursors, record
from app.types.paper import Paper
from app.types.resolution import Resolution
from app.types.standing import StandingNotice
from app.types.work import Work
from loaders.dataloaders import CountRequest, PageRequest
from app.types.node import Node, global_id
from loaders.rows import Observation


@strawberry.type(description=(
    "One reference of a citing paper as observed by a source: the edge, with its reference number, resolution, "
    "the work it points at and a standing notice on that work."))
class CitationObservation(Node):
    row: strawberry.Private[Observation]
    as_of: strawberry.Private[datetime]
    observation_id: strawberry.ID = strawberry.field(description=(
        "Observation id (UUID), as in the v1 record; observation(id:) takes it as well as the global id."))
    reference_index: int = strawberry.field(description="The reference's number in the citing paper's bibliography.")
    source: str = strawberry.field(description="How the reference was extracted (e.g. pdf_text).")
    source_observed_at: datetime = strawberry.field(description="When the reference was parsed.")

    @classmethod
    def of(cls, row: Observation, as_of: datetime) -> "CitationObservation":
        return cls(row=row, as_of=as_of, id=global_id("CitationObservation", str(row.observation_id)),
                   observation_id=strawberry.ID(str(row.observation_id)), reference_index=row.reference_index, source=row.source, source_observed_at=row.source_observed_at)

    @strawberry.field(description="The citing paper, as of the instant.")
    def citing_paper(self) -> Paper:
        return Paper.of(self.row.citing, self.as_of)

    @strawberry.field(description="The cited Pith paper, as of the instant; null when the reference is to no Pith paper.")
    def cited_paper(self) -> Paper | None:
        return Paper.of(self.row.cited, self.as_of) if self.row.cited is not None else None

    @strawberry.field(description="The work the reference points at (or what was printed, when unlinked).")
    def cited_work(self) -> Work:
        return Work.of(self.row)

    @strawberry.field(description="The latest resolution at the instant.")
    def resolution(self) -> Resolution:
        return Resolution.of(self.row.resolution)

    @strawberry.field(description="One-hop check of the cited work's standing (retractions, corrections, ...).")
    async def standing_notice(self, info: Info) -> StandingNotice:
        work = self.row.work
        standing = await info.context.loaders(self.as_of).standing.load(work.work_id) if work is not None else None
        return StandingNotice.of(self.row, standing)

    @strawberry.field(description="observation_digest of this observation in the v1 record (sha256 of its canonical JSON).")
    async def digest(self, info: Info) -> str:
        work = self.row.work
        standing = {}
        if work is not None:
            standing[work.work_id] = await info.context.loaders(self.as_of).standing.load(work.work_id)
        return record.observation(self.row, standing)["observation_digest"]


@strawberry.type(description="An edge of a citation connection.")
class CitationEdge:
    cursor: str = strawberry.field(description=(
        "Opaque cursor of this edge: pass it as `after` to continue after it, or as `before` to page back from it."))
    node: CitationObservation = strawberry.field(description="The observation.")


@strawberry.type(description="Paging state of a connection (Relay's PageInfo).")
class PageInfo:
    has_next_page: bool = strawberry.field(description=(
        "Whether edges follow this page (paging backward: whether `before` was given)."))
    has_previous_page: bool = strawberry.field(description=(
        "Whether edges precede this page (paging forward: whether `after` was given)."))
    start_cursor: str | None = strawberry.field(description="Cursor of the first edge of this page.")
    end_cursor: str | None = strawberry.field(description="Cursor of the last edge of this page.")


@strawberry.type(description="A page of citation observations, with the total the filters select, from one snapshot.")
class CitationConnection:
    request: strawberry.Private[PageRequest]
    direction: strawberry.Private[str]
    as_of: strawberry.Private[datetime]

    async def _page(self, info: Info) -> tuple[list[Observation], bool]:
        """This page's rows in the connection's order, and whether more lie beyond it."""
        loaders = info.context.loaders(self.as_of)
        rows = await (loaders.inbound if self.direction == "in" else loaders.outbound).load(self.request)
        shown = rows[: self.request.limit - 1]
        if self.request.backward:  # fetched nearest-first
            shown = shown[::-1]
        return shown, len(rows) > self.request.limit - 1

    @strawberry.field(description="How many edges the filters select in all (not only this page).")
    async def total_count(self, info: Info) -> int:
        r = self.request
        key = CountRequest(r.arxiv_id, self.direction, r.statuses, r.cites_retracted)
        return await info.context.loaders(self.as_of).count.load(key)

    @strawberry.field(description="The edges of this page, in the connection's documented order.")
    async def edges(self, info: Info) -> list[CitationEdge]:
        page, _ = await self._page(info)
        return [CitationEdge(cursor=cursors.encode(self.direction, o), node=CitationObservation.of(o, self.as_of))
                for o in page]

    @strawberry.field(description="The observations of this page, without cursors (a shortcut for edges { node }).")
    async def nodes(self, info: Info) -> list[CitationObservation]:
        page, _ = await self._page(info)
        return [CitationObservation.of(o, self.as_of) for o in page]

    @strawberry.field(description="Whether there are more edges either way, and where this page starts and ends.")
    async def page_info(self, info: Info) -> PageInfo:
        page, more = await self._page(info)
        backward = self.request.backward
        given = self.request.after is not None
        return PageInfo(has_next_page=given if backward else more, has_previous_page=more if backward else given,
                        start_cursor=cursors.encode(self.direction, page[0]) if page else None,
                        end_cursor=cursors.encode(self.direction, page[-1]) if page else None)
