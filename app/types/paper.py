"""Paper: an arXiv paper as of the instant, with its inbound and outbound citation connections."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated

import strawberry
from strawberry.types import Info

from app import cursors
from app.errors import UserInputError
from app.types.enums import ResolutionStatus
from app.types.measurement import ExternalCitationMeasurement
from app.types.node import Node, global_id
from loaders.dataloaders import PageRequest
from loaders.rows import PaperSnapshot

if TYPE_CHECKING:
    from app.types.observation import CitationConnection
    from app.types.record import CitationRecord
    from app.types.timeline import TimelineConnection

MAX_FIRST = 100


def check_first(first: int, argument: str = "first") -> int:
    if not 1 <= first <= MAX_FIRST:
        raise UserInputError(f"{argument}: {first} is out of range; allowed 1 to {MAX_FIRST}", argument=argument)
    return first


FirstArg = Annotated[int | None, strawberry.argument(
    description="Page forward: this many edges, 1 to 100 (100 when neither first nor last is given).")]
AfterArg = Annotated[str | None, strawberry.argument(description="Page forward from this cursor (an endCursor).")]
LastArg = Annotated[int | None, strawberry.argument(description="Page backward: the last this many edges, 1 to 100.")]
BeforeArg = Annotated[str | None, strawberry.argument(description="Page backward from this cursor (a startCursor).")]


def page_request(arxiv_id: str, direction: str, first: int | None, after: str | None, last: int | None,
                 before: str | None, statuses: tuple[str, ...] | None,
                 cites_retracted: bool | None = None) -> PageRequest:
    """A keyset page forward (first/after) or backward (last/before); mixing the two is refused."""
    if first is not None and last is not None:
        raise UserInputError("first and last: give one of them (first pages forward, last backward)",
                             argument="last")
    if last is not None or before is not None:
        if after is not None or first is not None:
            raise UserInputError("page forward with first/after or backward with last/before, not both",
                                 argument="before")
        size = check_first(last if last is not None else MAX_FIRST, "last")
        return PageRequest(arxiv_id, cursors.decode(direction, before, "before"), size + 1, statuses,
                           cites_retracted, backward=True)
    size = check_first(first if first is not None else MAX_FIRST)
    return PageRequest(arxiv_id, cursors.decode(direction, after), size + 1, statuses, cites_retracted)
StatusArg = Annotated[list[ResolutionStatus] | None,
                      strawberry.argument(description="Only edges whose resolution has one of these statuses.")]


def _statuses(status: list[ResolutionStatus] | None) -> tuple[str, ...] | None:
    return None if status is None else tuple(sorted({s.value for s in status}))


@strawberry.type(description="An arXiv paper as of the request's instant: its latest metadata snapshot by then.")
class Paper(Node):
    snapshot: strawberry.Private[PaperSnapshot]
    as_of: strawberry.Private[datetime]
    arxiv_id: str = strawberry.field(description="arXiv identifier, without version.")
    title: str = strawberry.field(description="Title.")
    latest_version: int = strawberry.field(description="Latest arXiv version known at the instant.")
    primary_category: str | None = strawberry.field(description="Primary arXiv category, when known.")
    submitted_at: datetime = strawberry.field(description="When version 1 was submitted.")
    last_updated: datetime = strawberry.field(description="When the latest version was submitted.")
    snapshot_observed_at: datetime = strawberry.field(description="When this metadata snapshot was observed.")

    @classmethod
    def of(cls, snapshot: PaperSnapshot, as_of: datetime) -> "Paper":
        return cls(id=global_id("Paper", snapshot.arxiv_id), snapshot=snapshot, as_of=as_of,
                   arxiv_id=snapshot.arxiv_id, title=snapshot.title,
                   latest_version=snapshot.latest_version, primary_category=snapshot.primary_category,
                   submitted_at=snapshot.submitted_at, last_updated=snapshot.last_updated,
                   snapshot_observed_at=snapshot.observed_at)

    @strawberry.field(description=(
        "Observations of papers citing this one, ordered by citing arXiv id, reference index, then observation id "
        "(the record's order). Keyset cursors: any page costs what the first does."))
    def inbound(
        self,
        first: FirstArg = None,
        after: AfterArg = None,
        last: LastArg = None,
        before: BeforeArg = None,
        status: StatusArg = None,
    ) -> Annotated["CitationConnection", strawberry.lazy("app.types.observation")]:
        from app.types.observation import CitationConnection

        request = page_request(self.arxiv_id, "in", first, after, last, before, _statuses(status))
        return CitationConnection(request=request, direction="in", as_of=self.as_of)

    @strawberry.field(description="This paper's references, ordered by reference index, then observation id.")
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
    ) -> Annotated["CitationConnection", strawberry.lazy("app.types.observation")]:
        from app.types.observation import CitationConnection

        request = page_request(self.arxiv_id, "out", first, after, last, before, _statuses(status), cites_retracted)
        return CitationConnection(request=request, direction="out", as_of=self.as_of)

    @strawberry.field(description="Each source's latest citation count at the instant, by source; never summed.")
    async def external_citation_measurements(self, info: Info) -> list[ExternalCitationMeasurement]:
        found = await info.context.loaders(self.as_of).measurements.load(self.arxiv_id)
        return [ExternalCitationMeasurement(source=m.source, count=m.count, observed_at=m.observed_at)
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
        "whatever its size."))
    async def timeline(
        self, info: Info,
        from_: Annotated[datetime | None, strawberry.argument(
            name="from", description="The earliest instant (default: the beginning).")] = None,
        to: Annotated[datetime | None, strawberry.argument(
            description="The latest instant, not before `from` (default: this paper's instant).")] = None,
        first: Annotated[int, strawberry.argument(description="How many entries, 1 to 100.")] = 100,
        after: Annotated[str | None, strawberry.argument(description="endCursor of the previous page.")] = None,
    ) -> Annotated["TimelineConnection", strawberry.lazy("app.types.timeline")]:
        from app.types.timeline import timeline_page

        return await timeline_page(info.context, self.arxiv_id, self.as_of, from_, to, first, after)
