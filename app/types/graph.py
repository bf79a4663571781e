"""The graph's core types, which refer to each other: Paper (with its inbound and outbound connections),
CitationObservation (an edge, with its citing and cited papers), Work (what an edge points at, with the
edges citing it), and the connection between them."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated
from uuid import UUID

import strawberry
from strawberry.types import Info

from app import cursors, record
from app.errors import UserInputError
from app.types.enums import ResolutionStatus
from app.types.measurement import CountInYear, ExternalCitationMeasurement
from app.types.node import Node, global_id
from app.types.pageinfo import PageInfo
from app.types.paging import page_request
from app.types.resolution import Resolution
from app.types.standing import StandingNotice
from loaders.base import STANDING_UNITS, charge
from loaders.dataloaders import CountRequest, PageRequest
from loaders.rows import Observation, PaperSnapshot, WorkSnapshot, retracted_by, shown_reference_index

if TYPE_CHECKING:
    from app.types.record import CitationRecord
    from app.types.timeline import TimelineConnection


FirstArg = Annotated[int | None, strawberry.argument(
    description="Page forward: this many edges, 1 to 100 (100 when neither first nor last is given).")]
AfterArg = Annotated[str | None, strawberry.argument(description="Page forward from this cursor (an endCursor).")]
LastArg = Annotated[int | None, strawberry.argument(description="Page backward: the last this many edges, 1 to 100.")]
BeforeArg = Annotated[str | None, strawberry.argument(description="Page backward from this cursor (a startCursor).")]


StatusArg = Annotated[list[ResolutionStatus] | None,
                      strawberry.argument(description=(
                          "Only edges whose resolution has one of these statuses (at least one; null or "
                          "omitted: every status)."))]


def _statuses(status: list[ResolutionStatus] | None) -> tuple[str, ...] | None:
    """The statuses an edge may have (None: any). An empty list would select no edge at all, which no one
    asks for on purpose (a form with nothing ticked means "any"): refused, saying both ways to ask."""
    if status is not None and not status:
        raise UserInputError("status: [] selects no edge; omit status (or pass null) for edges of every status, "
                             "or list at least one of " + ", ".join(s.name for s in ResolutionStatus),
                             argument="status")
    return None if status is None else tuple(sorted({s.value for s in status}))


@strawberry.type(description="How many distinct papers submitted in a year cite a paper.")
class YearCount:
    year: int = strawberry.field(description="The year the citing papers' version 1 was submitted (UTC).")
    count: int = strawberry.field(description="How many distinct citing papers were submitted that year.")


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
        "Whether, of the work's retraction, withdrawal and reinstatement events standing at the instant, the one "
        "that happened last is a retraction or withdrawal (the standing rule behind citesRetracted, "
        "docs/standing.md)."))
    async def retracted(self, info: Info) -> bool:
        if self.key is None:
            return False
        standing = await info.context.loaders(self.as_of).standing.load(self.key)
        return retracted_by(standing.events) if standing is not None else False

    @strawberry.field(description="Each source's latest citation count of the work at the instant, by source.")
    async def external_citation_measurements(self, info: Info) -> list[ExternalCitationMeasurement]:
        if self.key is None:
            return []
        found = await info.context.loaders(self.as_of).work_measurements.load(self.key)
        return [ExternalCitationMeasurement(source=m.source, count=m.count, observed_at=m.observed_at)
                for m in sorted(found, key=lambda m: m.source)]

    @strawberry.field(description=(
        "The observations that cite this work as of the instant, by citing arXiv id, reference index, then "
        "observation id; empty for an unlinked reference. Those linked to the work: for a work that is an arXiv "
        "paper, Paper.inbound also lists references that name the paper's arXiv id without a link to a work "
        "(an unresolved or unmatched reference), so it may be longer."))
    def inbound(self, first: FirstArg = None, after: AfterArg = None, last: LastArg = None,
                before: BeforeArg = None) -> CitationConnection | None:
        # An unlinked reference is cited by no observation but its own: the nil work id selects nothing.
        key = str(self.key or UUID(int=0))
        request = page_request(key, "in", first, after, last, before, None)
        return CitationConnection(request=request, direction="in", as_of=self.as_of, pinned=self.pinned,
                                  of_work=True)


@strawberry.type(description="An arXiv paper as of the request's instant: its latest metadata snapshot by then.")
class Paper(Node):
    snapshot: strawberry.Private[PaperSnapshot]
    as_of: strawberry.Private[datetime]
    pinned: strawberry.Private[bool]  # read under a pinned instant: the id names it
    arxiv_id: str = strawberry.field(description="arXiv identifier, without version.")
    title: str = strawberry.field(description="Title.")
    latest_version: int = strawberry.field(description="Latest arXiv version known at the instant.")
    primary_category: str | None = strawberry.field(description="Primary arXiv category, when known.")
    submitted_at: datetime = strawberry.field(description="When version 1 was submitted.")
    last_updated: datetime = strawberry.field(description="When the latest version was submitted.")
    snapshot_observed_at: datetime = strawberry.field(description="When this metadata snapshot was observed.")

    @classmethod
    def of(cls, snapshot: PaperSnapshot, as_of: datetime, pinned: bool) -> "Paper":
        return cls(id=global_id("Paper", snapshot.arxiv_id, as_of if pinned else None), snapshot=snapshot,
                   as_of=as_of, pinned=pinned,
                   arxiv_id=snapshot.arxiv_id, title=snapshot.title,
                   latest_version=snapshot.latest_version, primary_category=snapshot.primary_category,
                   submitted_at=snapshot.submitted_at, last_updated=snapshot.last_updated,
                   snapshot_observed_at=snapshot.observed_at)

    @strawberry.field(name="asOf", description=(
        "The instant this paper was read at: the asOf given, else the request's now (whole seconds). Pass it as asOf "
        "to read the next pages (or other papers) at the same instant: read as of now, a list moves as imports "
        "change it. An import's facts are dated when it starts, so an instant read while one runs (or in the "
        "second it started) still gains its facts when it commits; an instant before every running import's "
        "start is fixed."))
    def read_at(self) -> datetime:
        return self.as_of

    @strawberry.field(description=(
        "Observations of papers citing this one, ordered by citing arXiv id, reference index, then observation id "
        "(the record's order). Keyset cursors: any page costs what the first does. Null (with an error) when "
        "the paging arguments are refused: the paper stays."))
    def inbound(
        self,
        first: FirstArg = None,
        after: AfterArg = None,
        last: LastArg = None,
        before: BeforeArg = None,
        status: StatusArg = None,
    ) -> CitationConnection | None:
        request = page_request(self.arxiv_id, "in", first, after, last, before, _statuses(status))
        return CitationConnection(request=request, direction="in", as_of=self.as_of, pinned=self.pinned)

    @strawberry.field(description=(
        "This paper's references, ordered by reference index, then observation id. Null (with an error) when the "
        "paging arguments are refused: the paper stays."))
    def outbound(
        self,
        first: FirstArg = None,
        after: AfterArg = None,
        last: LastArg = None,
        before: BeforeArg = None,
        status: StatusArg = None,
        cites_retracted: Annotated[bool | None, strawberry.argument(description=(
            "true: only references to works whose latest retraction, withdrawal or reinstatement event is a "
            "retraction or withdrawal; false: only the others."))] = None,
    ) -> CitationConnection | None:
        request = page_request(self.arxiv_id, "out", first, after, last, before, _statuses(status), cites_retracted)
        return CitationConnection(request=request, direction="out", as_of=self.as_of, pinned=self.pinned)

    @strawberry.field(description=(
        "The paper's journal DOI at the instant (from the arXiv metadata; the first when it names two), which "
        "links it to its work: work(doi:)."))
    async def doi(self, info: Info) -> str | None:
        return await info.context.loaders(self.as_of).paper_doi.load(self.arxiv_id)

    @strawberry.field(description=(
        "Distinct papers citing this one as of the instant, by the year their version 1 was submitted, oldest "
        "first (years with none left out); uncapped, one statement for every paper asked."))
    async def citations_by_year(self, info: Info) -> list[YearCount]:
        found = await info.context.loaders(self.as_of).citations_by_year.load(self.arxiv_id)
        return [YearCount(year=year, count=count) for year, count in found]

    @strawberry.field(description="Each source's latest citation count at the instant, by source; never summed.")
    async def external_citation_measurements(self, info: Info) -> list[ExternalCitationMeasurement]:
        found = await info.context.loaders(self.as_of).measurements.load(self.arxiv_id)
        return [ExternalCitationMeasurement(source=m.source, count=m.count, observed_at=m.observed_at,
                                            by_year=[CountInYear(year=y, count=n) for y, n in m.by_year]
                                            if m.by_year is not None else None)
                for m in sorted(found, key=lambda m: m.source)]

    @strawberry.field(description="This paper's canonical v1 citation record at the same instant.")
    async def citation_record(self, info: Info) -> Annotated["CitationRecord", strawberry.lazy("app.types.record")]:
        from app.types.record import CitationRecord

        rows = await info.context.loaders(self.as_of).record.load(self.arxiv_id)
        return CitationRecord.of(rows)

    @strawberry.field(description=(
        "Instants in [from, to] at which stored facts change this paper's v1 record (standard caps), oldest "
        "first: a new citation or reference, a resolution, a cited work's metadata or standing, a "
        "measurement, a new snapshot of this paper or of a paper shown in the record. Whole seconds; the "
        "thesis date turning over at midnight is not a change. A page costs the same few statements "
        "whatever its size. Null (with an error) when the arguments are refused."))
    async def timeline(
        self, info: Info,
        from_: Annotated[datetime | None, strawberry.argument(
            name="from", description="The earliest instant (default: the beginning).")] = None,
        to: Annotated[datetime | None, strawberry.argument(
            description="The latest instant, not before `from` (default: this paper's instant).")] = None,
        first: Annotated[int, strawberry.argument(description="How many entries, 1 to 100.")] = 100,
        after: Annotated[str | None, strawberry.argument(description="endCursor of the previous page.")] = None,
    ) -> Annotated["TimelineConnection", strawberry.lazy("app.types.timeline")] | None:
        from app.types.timeline import timeline_page

        return await timeline_page(info.context, self.arxiv_id, self.as_of, from_, to, first, after)


@strawberry.type(description=(
    "One reference of a citing paper as observed by a source: the edge, with its reference number, resolution, "
    "the work it points at and a standing notice on that work."))
class CitationObservation(Node):
    row: strawberry.Private[Observation]
    as_of: strawberry.Private[datetime]
    pinned: strawberry.Private[bool]
    observation_id: strawberry.ID = strawberry.field(description=(
        "Observation id (UUID), as in the v1 record; observation(id:) takes it as well as the global id."))
    reference_index: int | None = strawberry.field(description=(
        "The reference's number in the citing paper's bibliography; null when the source gives none (an "
        "OpenCitations citation is a citing-cited pair: its v1 record and cursors carry 0)."))
    source: str = strawberry.field(description="How the reference was extracted (e.g. pdf_text).")
    source_observed_at: datetime = strawberry.field(description="When the reference was parsed.")

    @classmethod
    def of(cls, row: Observation, as_of: datetime, pinned: bool) -> "CitationObservation":
        return cls(row=row, as_of=as_of, pinned=pinned,
                   id=global_id("CitationObservation", str(row.observation_id), as_of if pinned else None),
                   observation_id=strawberry.ID(str(row.observation_id)),
                   reference_index=shown_reference_index(row.source, row.reference_index),
                   source=row.source, source_observed_at=row.source_observed_at)

    @strawberry.field(description="The citing paper, as of the instant.")
    def citing_paper(self) -> Paper:
        return Paper.of(self.row.citing, self.as_of, self.pinned)

    @strawberry.field(description="The cited Pith paper, as of the instant; null when the reference is to no Pith paper.")
    def cited_paper(self) -> Paper | None:
        return Paper.of(self.row.cited, self.as_of, self.pinned) if self.row.cited is not None else None

    @strawberry.field(description="The work the reference points at (or what was printed, when unlinked).")
    def cited_work(self) -> Work:
        return Work.of(self.row, self.as_of, self.pinned)

    @strawberry.field(description="The latest resolution at the instant.")
    def resolution(self) -> Resolution:
        return Resolution.of(self.row.resolution)

    @strawberry.field(description="One-hop check of the cited work's standing (retractions, corrections, ...).")
    async def standing_notice(self, info: Info) -> StandingNotice:
        work = self.row.work
        standing = await info.context.loaders(self.as_of).standing.load(work.work_id) if work is not None else None
        charge(info.context.session, STANDING_UNITS)
        return StandingNotice.of(self.row, standing)

    @strawberry.field(description="observation_digest of this observation in the v1 record (sha256 of its canonical JSON).")
    async def digest(self, info: Info) -> str:
        work = self.row.work
        standing = {}
        if work is not None:
            standing[work.work_id] = await info.context.loaders(self.as_of).standing.load(work.work_id)
        charge(info.context.session, STANDING_UNITS)
        return record.observation(self.row, standing)["observation_digest"]


@strawberry.type(description="An edge of a citation connection.")
class CitationEdge:
    cursor: str = strawberry.field(description=(
        "Opaque cursor of this edge: pass it as `after` to continue after it, or as `before` to page back from it."))
    node: CitationObservation = strawberry.field(description="The observation.")


@strawberry.type(description="A page of citation observations, with the total the filters select, from one snapshot.")
class CitationConnection:
    request: strawberry.Private[PageRequest]
    direction: strawberry.Private[str]
    as_of: strawberry.Private[datetime]
    pinned: strawberry.Private[bool]
    of_work: strawberry.Private[bool] = False  # the observations citing a work (Work.inbound)

    async def _page(self, info: Info) -> tuple[list[Observation], bool]:
        """This page's rows in the connection's order, and whether more lie beyond it."""
        loaders = info.context.loaders(self.as_of)
        loader = loaders.work_inbound if self.of_work else loaders.inbound if self.direction == "in" else loaders.outbound
        rows = await loader.load(self.request)
        shown = rows[: self.request.limit - 1]
        if self.request.backward:  # fetched nearest-first
            shown = shown[::-1]
        return shown, len(rows) > self.request.limit - 1

    @strawberry.field(description="How many edges the filters select in all (not only this page).")
    async def total_count(self, info: Info) -> int:
        r = self.request
        key = CountRequest(r.arxiv_id, "work" if self.of_work else self.direction, r.statuses, r.cites_retracted)
        return await info.context.loaders(self.as_of).count.load(key)

    @strawberry.field(description="The edges of this page, in the connection's documented order.")
    async def edges(self, info: Info) -> list[CitationEdge]:
        page, _ = await self._page(info)
        return [CitationEdge(cursor=cursors.encode(self.direction, o, self.request.arxiv_id), node=CitationObservation.of(o, self.as_of, self.pinned))
                for o in page]

    @strawberry.field(description="The observations of this page, without cursors (a shortcut for edges { node }).")
    async def nodes(self, info: Info) -> list[CitationObservation]:
        page, _ = await self._page(info)
        return [CitationObservation.of(o, self.as_of, self.pinned) for o in page]

    @strawberry.field(description="Whether there are more edges either way, and where this page starts and ends.")
    async def page_info(self, info: Info) -> PageInfo:
        page, more = await self._page(info)
        backward = self.request.backward
        given = self.request.after is not None
        return PageInfo(has_next_page=given if backward else more, has_previous_page=more if backward else given,
                        start_cursor=cursors.encode(self.direction, page[0], self.request.arxiv_id) if page else None,
                        end_cursor=cursors.encode(self.direction, page[-1], self.request.arxiv_id) if page else None)
