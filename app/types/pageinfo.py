"""Relay's PageInfo: the paging state every connection of the API reports."""

from __future__ import annotations

import strawberry


@strawberry.type(description="Paging state of a connection (Relay's PageInfo).")
class PageInfo:
    has_next_page: bool = strawberry.field(description=(
        "Whether edges follow this page (paging backward: whether `before` was given)."))
    has_previous_page: bool = strawberry.field(description=(
        "Whether edges precede this page (paging forward: whether `after` was given)."))
    start_cursor: str | None = strawberry.field(description="Cursor of the first edge of this page.")
    end_cursor: str | None = strawberry.field(description="Cursor of the last edge of this page.")
