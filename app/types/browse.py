"""Enumeration: browsePapers (every paper, filtered and ordered) and works (every work, filtered by standing)."""

from __future__ import annotations

from datetime import datetime
from enum import Enum

import strawberry

from app.types.enums import WorkEventType
from app.types.graph import Paper, Work
from app.types.pageinfo import PageInfo


@strawberry.enum(description="The order browsePapers lists papers in.")
class PaperOrder(Enum):
    ARXIV_ID = strawberry.enum_value("ARXIV_ID", description="By arXiv id, in byte order (as records sort them).")
    SUBMITTED_AT = strawberry.enum_value("SUBMITTED_AT", description=(
        "By when version 1 was submitted, oldest first, then arXiv id."))
    INBOUND_COUNT_DESC = strawberry.enum_value("INBOUND_COUNT_DESC", description=(
        "By inbound total at the instant, most cited first, then arXiv id (counts every paper's citations: "
        "priced as a scan of the graph)."))




@strawberry.input(description="Which papers browsePapers lists; every condition given must hold.")
class PaperFilter:
    category: str | None = strawberry.field(default=None, description=(
        "The primary category of the paper's snapshot at the instant, exactly (e.g. cs.LG)."))
    submitted_from: datetime | None = strawberry.field(default=None, description=(
        "Version 1 submitted at or after this instant."))
    submitted_to: datetime | None = strawberry.field(default=None, description=(
        "Version 1 submitted at or before this instant."))
    cites_retracted: bool | None = strawberry.field(default=None, description=(
        "true: papers with at least one visible reference to a retracted work (the rule of citesRetracted); "
        "false: papers with none."))


@strawberry.input(description=(
    "Which works `works` lists; every condition given must hold. eventType and source together: an event of "
    "that type from that source."))
class WorkFilter:
    retracted: bool | None = strawberry.field(default=None, description=(
        "true: works whose `retracted` is true at the instant; false: the others."))
    event_type: WorkEventType | None = strawberry.field(default=None, description=(
        "Works with an event of this type observed by the instant."))
    source: str | None = strawberry.field(default=None, description=(
        "Works with an event reported by this source (e.g. retraction_watch) observed by the instant."))


@strawberry.type(description="A paper in a browsePapers page.")
class PaperEdge:
    cursor: str = strawberry.field(description="Opaque cursor of this paper; pass it as `after` to continue after it.")
    node: Paper = strawberry.field(description="The paper, as of the instant.")
    inbound_count: int | None = strawberry.field(description=(
        "Its inbound total at the instant, when the page is ordered by INBOUND_COUNT_DESC (else null)."))


@strawberry.type(description="A page of papers, in the order asked.")
class PaperConnection:
    edges: list[PaperEdge] = strawberry.field(description="The papers of this page.")
    nodes: list[Paper] = strawberry.field(description="The papers of this page (a shortcut for edges { node }).")
    page_info: PageInfo = strawberry.field(description="Whether more papers follow, and where this page ends.")


@strawberry.type(description="A work in a works page.")
class WorkEdge:
    cursor: str = strawberry.field(description="Opaque cursor of this work; pass it as `after` to continue after it.")
    node: Work = strawberry.field(description="The work, as of the instant.")


@strawberry.type(description="A page of works, by work id.")
class WorkConnection:
    edges: list[WorkEdge] = strawberry.field(description="The works of this page.")
    nodes: list[Work] = strawberry.field(description="The works of this page (a shortcut for edges { node }).")
    page_info: PageInfo = strawberry.field(description="Whether more works follow, and where this page ends.")
