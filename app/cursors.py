"""Opaque keyset cursors: the last edge's sort key, base64url-encoded JSON."""

from __future__ import annotations

import base64
import binascii
import json
from uuid import UUID

from app.errors import UserInputError
from app.limits import MAX_CURSOR_LENGTH
from app.timeparse import has_surrogate
from loaders.rows import Observation


def encode_token(text: str) -> str:
    """An opaque token (cursors, global ids): base64url without padding."""
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode_token(token: str) -> str:
    """The text of a token; ValueError (or a subclass) when it is not one."""
    return base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode("utf-8")


def encode(direction: str, obs: Observation, owner: str) -> str:
    """The cursor of an edge of `owner`'s connection (the paper, or the work id of Work.inbound)."""
    if direction == "in":
        return encode_key(["in", obs.citing_arxiv_id, obs.reference_index, str(obs.observation_id), owner])
    return encode_key(["out", obs.reference_index, str(obs.observation_id), owner])


def encode_key(key: list) -> str:
    """The cursor of a sort key and the connection's owner: ["in", citing id, reference index, id, owner] or
    ["out", reference index, id, owner]."""
    return encode_token(json.dumps(key, separators=(",", ":")))


INT32 = (-(2**31), 2**31 - 1)


def _index(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and INT32[0] <= value <= INT32[1]


def _arxiv_text(value: object) -> bool:
    # What a stored arXiv id can be: short, printable, valid UTF-8 (no NUL, no lone surrogate).
    return (isinstance(value, str) and 0 < len(value) <= 64 and value.isprintable()
            and not has_surrogate(value))


def decode(direction: str, cursor: str | None, argument: str = "after", owner: str | None = None) -> tuple | None:
    """The sort key a page of `owner`'s connection starts after (or ends before); a cursor of anything else
    is refused, another paper's (or work's) included: its sort key would start this list at a place of that
    one's, a silently wrong page. (A cursor made before cursors named their owner is taken as it is.)

    Anything a client can send is checked before it reaches SQL: its size, its encoding, its
    structure, the connection it belongs to, and the range of every value in it.
    """
    if cursor is None:
        return None
    kind = "inbound" if direction == "in" else "outbound"
    shown = cursor if len(cursor) <= 60 else cursor[:60] + "..."
    found: tuple | None = None
    of = None
    try:
        if len(cursor) <= MAX_CURSOR_LENGTH:
            key = json.loads(decode_token(cursor))
            if isinstance(key, list):
                width = 4 if direction == "in" else 3
                if len(key) == width + 1 and isinstance(key[-1], str):
                    key, of = key[:-1], key[-1]
                if direction == "in" and len(key) == 4 and key[0] == "in":
                    citing, index, oid = key[1:]
                    if _arxiv_text(citing) and _index(index) and isinstance(oid, str):
                        found = (citing, index, UUID(oid))
                if direction == "out" and len(key) == 3 and key[0] == "out":
                    index, oid = key[1:]
                    if _index(index) and isinstance(oid, str):
                        found = (index, UUID(oid))
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError, AttributeError, RecursionError):
        found = None
    if found is not None:
        if of is None or owner is None or of == owner:
            return found
        whose = of if len(of) <= 64 else of[:64] + "..."
        raise UserInputError(f"{argument}: {shown!r} is a cursor of the {kind} connection of {whose}, not of {owner}; "
                             "pass a cursor (startCursor, endCursor or an edge's cursor) this connection returned",
                             argument=argument)
    raise UserInputError(f"{argument}: {shown!r} is not a cursor of an {kind} connection; pass a cursor "
                         f"(startCursor, endCursor or an edge's cursor) returned by this field", argument=argument)


def encode_search(rank: float, arxiv_id: str) -> str:
    return encode_token(json.dumps(["search", rank, arxiv_id]))


def decode_search(cursor: str | None) -> tuple[float, str] | None:
    """The (rank, arxiv id) a search page continues after; anything else is refused."""
    if cursor is None:
        return None
    try:
        if len(cursor) <= MAX_CURSOR_LENGTH:
            key = json.loads(decode_token(cursor))
            if isinstance(key, list) and len(key) == 3 and key[0] == "search":
                rank, arxiv_id = key[1:]
                if isinstance(rank, (int, float)) and not isinstance(rank, bool) and 0 <= rank < 1e30 \
                        and _arxiv_text(arxiv_id):
                    return float(rank), arxiv_id
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError, AttributeError, RecursionError):
        pass
    shown = cursor if len(cursor) <= 60 else cursor[:60] + "..."
    raise UserInputError(f"after: {shown!r} is not a cursor of searchPapers; pass an endCursor it returned",
                         argument="after")


def encode_timeline(second: int) -> str:
    return encode_token(json.dumps(["timeline", second]))


def decode_timeline(cursor: str | None) -> int | None:
    """The instant (Unix seconds) a timeline page continues after; anything else is refused."""
    if cursor is None:
        return None
    try:
        if len(cursor) <= MAX_CURSOR_LENGTH:
            key = json.loads(decode_token(cursor))
            if (isinstance(key, list) and len(key) == 2 and key[0] == "timeline" and isinstance(key[1], int)
                    and not isinstance(key[1], bool) and -62135596800 <= key[1] <= 253402300799):
                return key[1]
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError, AttributeError, RecursionError):
        pass
    shown = cursor if len(cursor) <= 60 else cursor[:60] + "..."
    raise UserInputError(f"after: {shown!r} is not a cursor of a timeline; pass an endCursor it returned",
                         argument="after")


def encode_browse(order: str, key: list) -> str:
    """browsePapers / works: the order (or "works") and the last row's sort key."""
    return encode_token(json.dumps(["browse", order, *key], separators=(",", ":")))


def decode_browse(order: str, cursor: str | None, field: str) -> tuple | None:
    """The sort key a browsePapers (order ARXIV_ID, SUBMITTED_AT, INBOUND_COUNT_DESC) or works ("works")
    page continues after; a cursor of another order or field is refused."""
    from datetime import UTC, datetime

    if cursor is None:
        return None
    try:
        if len(cursor) <= MAX_CURSOR_LENGTH:
            key = json.loads(decode_token(cursor))
            if isinstance(key, list) and len(key) >= 3 and key[0] == "browse" and key[1] == order:
                rest = key[2:]
                if order == "ARXIV_ID" and len(rest) == 1 and _arxiv_text(rest[0]):
                    return (rest[0],)
                if order == "SUBMITTED_AT" and len(rest) == 2 and isinstance(rest[0], str) and _arxiv_text(rest[1]):
                    at = datetime.fromisoformat(rest[0])
                    # In UTC (what the database is sent), within the years the API writes: a time of year 1 east of
                    # UTC has no UTC value here (OverflowError), and year 1's first instant is sent as -infinity.
                    if at.tzinfo is not None and 1 < at.astimezone(UTC).year < 9999:
                        return (at, rest[1])
                if (order == "INBOUND_COUNT_DESC" and len(rest) == 2 and isinstance(rest[0], int)
                        and not isinstance(rest[0], bool) and 0 <= rest[0] < 2**62 and _arxiv_text(rest[1])):
                    return (rest[0], rest[1])
                if order == "works" and len(rest) == 1 and isinstance(rest[0], str):
                    return (UUID(rest[0]),)
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError, AttributeError, RecursionError, OverflowError):
        pass
    shown = cursor if len(cursor) <= 60 else cursor[:60] + "..."
    which = f"{field} ordered by {order}" if order != "works" else field
    raise UserInputError(f"after: {shown!r} is not a cursor of {which}; pass an endCursor it returned with the "
                         "same order", argument="after")
