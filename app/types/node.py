"""Relay global object identification: the Node interface and opaque global ids."""

from __future__ import annotations

import binascii
from uuid import UUID

import strawberry

from app.cursors import decode_token, encode_token
from app.timeparse import BadInput, parse_arxiv_id

KINDS = ("Paper", "CitationObservation", "Work")
ID_RULE = "a global id returned in an `id` field (Paper, CitationObservation or Work)"


@strawberry.interface(description="An object with a global id: node(id:) fetches it again (Relay's Node).")
class Node:
    id: strawberry.ID = strawberry.field(description="Opaque global id; pass it to node(id:).")


def global_id(kind: str, key: str) -> strawberry.ID:
    return strawberry.ID(encode_token(f"{kind}:{key}"))


def global_id_sql(kind: str, key: str) -> str:
    """The same id as global_id, computed by PostgreSQL (base64url of "Kind:key" without padding, as
    app.cursors.encode_token writes it)."""
    return f"rtrim(translate(encode(convert_to('{kind}:' || {key}, 'UTF8'), 'base64'), E'+/\\n', '-_'), '=')"


def parse_global_id(value: object) -> tuple[str, str | UUID]:
    """(kind, key) of a global id: an arXiv id for papers, a UUID (or ("ref", UUID)) otherwise."""
    try:
        if not isinstance(value, str) or not 0 < len(value) <= 200:
            raise ValueError
        text = decode_token(value)
        kind, _, key = text.partition(":")
        if kind == "Paper":
            return kind, parse_arxiv_id(key)
        if kind == "CitationObservation":
            return kind, UUID(key)
        if kind == "Work":
            if key.startswith("ref:"):
                return "WorkReference", UUID(key[4:])
            return kind, UUID(key)
    except (ValueError, BadInput, binascii.Error, UnicodeDecodeError):
        pass
    shown = value if isinstance(value, str) and len(value) <= 60 else str(value)[:60] + "..."
    raise BadInput(f"{shown!r} is not a global id; expected {ID_RULE}")
