"""Relay global object identification: the Node interface and opaque global ids.

An id names an object at an instant. An object read under a pinned instant (an `asOf` argument, a
recordDiff's `to`, or an id that carries one) has an id that encodes it: base64url of
"Kind:key@2026-02-01T00:00:00Z". An object read as of now has the id without an instant, so
normalized caches (Apollo, graphcache, Relay) keep two instants of a paper apart and follow the latest
data where nothing is pinned. node(id:) answers an id as of the instant it names. Ids without an
instant, the only form before instants were encoded, mean "now", as they always did.
"""

from __future__ import annotations

import binascii
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

import strawberry

from app.cursors import decode_token, encode_token
from app.record import as_of_text
from app.timeparse import BadInput, parse_arxiv_id, parse_as_of

KINDS = ("Paper", "CitationObservation", "Work")
ID_RULE = "a global id returned in an `id` field (Paper, CitationObservation or Work)"


@strawberry.interface(description=(
    "An object with a global id: node(id:) fetches it again, as of the instant it was read at (Relay's Node)."))
class Node:
    id: strawberry.ID = strawberry.field(description=(
        "Opaque global id of this object at this instant: read under a pinned asOf, the id names that instant "
        "(node(id:) answers as of it); read as of now, it names none (node(id:) answers as of now)."))


_SUFFIXES: dict[datetime, str] = {}


def pin_suffix(pinned: datetime | None) -> str:
    """What an id appends for its instant: "" as of now, "@2026-02-01T00:00:00Z" when pinned."""
    if pinned is None:
        return ""
    found = _SUFFIXES.get(pinned)
    if found is None:
        if len(_SUFFIXES) >= 4096:
            _SUFFIXES.clear()
        found = _SUFFIXES[pinned] = "@" + as_of_text(pinned)
    return found


def global_id(kind: str, key: str, pinned: datetime | None = None) -> strawberry.ID:
    return strawberry.ID(encode_token(f"{kind}:{key}{pin_suffix(pinned)}"))


def global_id_sql(kind: str, key: str, suffix: str = "''") -> str:
    """The same id as global_id, computed by PostgreSQL (base64url of "Kind:key" and the instant's suffix,
    a text expression as pin_suffix writes it, without padding, as app.cursors.encode_token writes it)."""
    return (f"rtrim(translate(encode(convert_to('{kind}:' || {key} || {suffix}, 'UTF8'), 'base64'), "
            "E'+/\\n', '-_'), '=')")


@dataclass(frozen=True)
class GlobalId:
    kind: str  # Paper, CitationObservation, Work, or WorkReference (an unlinked reference's Work)
    key: str | UUID  # an arXiv id for papers, a UUID otherwise
    pinned: datetime | None  # the instant the id names; None: now


def parse_global_id(value: object) -> GlobalId:
    """The kind, key and instant of a global id (with an instant, or without: the earlier form, as of now)."""
    try:
        if not isinstance(value, str) or not 0 < len(value) <= 200:
            raise ValueError
        text = decode_token(value)
        kind, _, key = text.partition(":")
        pinned = None
        if "@" in key:
            key, _, at = key.rpartition("@")
            pinned = parse_as_of(at)
            if pin_suffix(pinned) != "@" + at:  # one spelling per instant: ids compare as strings
                raise ValueError
        if kind == "Paper":
            return GlobalId(kind, parse_arxiv_id(key), pinned)
        if kind == "CitationObservation":
            return GlobalId(kind, UUID(key), pinned)
        if kind == "Work":
            if key.startswith("ref:"):
                return GlobalId("WorkReference", UUID(key[4:]), pinned)
            return GlobalId(kind, UUID(key), pinned)
    except (ValueError, BadInput, binascii.Error, UnicodeDecodeError):
        pass
    shown = value if isinstance(value, str) and len(value) <= 60 else str(value)[:60] + "..."
    raise BadInput(f"{shown!r} is not a global id; expected {ID_RULE}")
