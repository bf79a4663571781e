"""The paging arguments every connection takes: `first` in range, and a keyset page forward or backward."""

from __future__ import annotations

from app import cursors
from app.errors import UserInputError
from app.limits import MAX_FIRST
from loaders.dataloaders import PageRequest


def check_first(first: int, argument: str = "first") -> int:
    if not 1 <= first <= MAX_FIRST:
        raise UserInputError(f"{argument}: {first} is out of range; allowed 1 to {MAX_FIRST}", argument=argument)
    return first


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
        return PageRequest(arxiv_id, cursors.decode(direction, before, "before", arxiv_id), size + 1, statuses,
                           cites_retracted, backward=True)
    size = check_first(first if first is not None else MAX_FIRST)
    return PageRequest(arxiv_id, cursors.decode(direction, after, owner=arxiv_id), size + 1, statuses, cites_retracted)
