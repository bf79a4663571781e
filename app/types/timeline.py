"""Paper.timeline: the instants at which stored facts change a paper's v1 record, page by page."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

import strawberry

from app.types.enums import ChangeKind
from app.types.pageinfo import PageInfo


@strawberry.type(description="An instant at which the paper's v1 record changes, and what changed it.")
class TimelineEntry:
    at: datetime = strawberry.field(description=(
        "The first whole-second instant at which the record shows the change."))
    context_digest: str = strawberry.field(description="context_digest of the v1 record at `at`.")
    kinds: list[ChangeKind] = strawberry.field(description=(
        "The kinds of fact that take effect at `at` and show in the record, in ChangeKind order."))


@strawberry.type(description="One timeline entry with its cursor.")
class TimelineEdge:
    cursor: str = strawberry.field(description="Pass as `after` to continue after this entry.")
    node: TimelineEntry = strawberry.field(description="The entry.")


@strawberry.type(description="A page of a paper's timeline, oldest first.")
class TimelineConnection:
    edges: list[TimelineEdge] = strawberry.field(description="The entries of this page, oldest first.")
    nodes: list[TimelineEntry] = strawberry.field(description="The entries (a shortcut for edges { node }).")
    page_info: PageInfo = strawberry.field(description="Whether more entries follow, and where this page ends.")


EARLIEST_SECOND = -62135596800 + 1  # 0001-01-01T00:00:01Z: one second after the earliest instant


async def timeline_page(context: Any, arxiv_id: str, as_of: datetime, from_: datetime | None,
                        to: datetime | None, first: int, after: str | None) -> TimelineConnection:
    """One page: the entries, then the record at each entry's instant. The pages of every paper asked in the
    operation are loaded together (loaders.dataloaders: two statements, then six for all their records)."""
    from app import cursors, record
    from app.errors import UserInputError
    from app.types.paging import check_first
    from loaders.base import TIMELINE_ENTRY_UNITS, charge
    from loaders.dataloaders import TimelineRequest
    from loaders.timeline import instant

    check_first(first)
    # DateTime arguments arrive as whole seconds (the scalar truncates), as entries are.
    if from_ is not None and to is not None and to < from_:
        raise UserInputError(f"to: {record.as_of_text(to)} is before from ({record.as_of_text(from_)}); "
                             "give to >= from", argument="to")
    high = int((to or as_of).timestamp())
    low = max(int(from_.timestamp()), EARLIEST_SECOND) if from_ is not None else EARLIEST_SECOND
    continued = cursors.decode_timeline(after)
    if continued is not None:
        low = max(low, continued + 1)
    entries, rows = await context.loaders(as_of).timeline.load(TimelineRequest(arxiv_id, low, high, first))
    shown = entries[:first]
    nodes = []
    for e, r in zip(shown, rows):
        if r is not None:
            nodes.append(TimelineEntry(at=instant(e.at), context_digest=record.build_record(r)["context_digest"],
                                       kinds=[ChangeKind(k) for k in e.kinds]))
            charge(context.session, TIMELINE_ENTRY_UNITS)
            await asyncio.sleep(0)  # a record is a few ms of Python: other requests run between them
    edges = [TimelineEdge(cursor=cursors.encode_timeline(int(n.at.timestamp())), node=n) for n in nodes]
    return TimelineConnection(edges=edges, nodes=nodes, page_info=PageInfo(
        has_next_page=len(entries) > first, has_previous_page=continued is not None,
        start_cursor=edges[0].cursor if edges else None, end_cursor=edges[-1].cursor if edges else None))
