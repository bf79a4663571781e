"""Opaque keyset cursors: the last edge's sort key, base64url-encoded JSON."""

from __future__ import annotations

import base64
import binascii
import json
from uuid import UUID

from app.errors import UserInputError
from loaders.rows import Observation


def encode(direction: str, obs: Observation) -> str:
    if direction == "in":
        key = ["in", obs.citing_arxiv_id, obs.reference_index, str(obs.observation_id)]
    else:
        key = ["out", obs.reference_index, str(obs.observation_id)]
    return base64.urlsafe_b64encode(json.dumps(key, separators=(",", ":")).encode()).decode().rstrip("=")


def decode(direction: str, cursor: str | None) -> tuple | None:
    """The sort key after which a page starts; a cursor from another connection is refused."""
    if cursor is None:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        key = json.loads(raw)
        if direction == "in" and len(key) == 4 and key[0] == "in":
            citing, index, oid = key[1:]
            if isinstance(citing, str) and isinstance(index, int):
                return (citing, index, UUID(oid))
        if direction == "out" and len(key) == 3 and key[0] == "out":
            index, oid = key[1:]
            if isinstance(index, int):
                return (index, UUID(oid))
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError, AttributeError):
        pass
    kind = "inbound" if direction == "in" else "outbound"
    raise UserInputError(f"after: {cursor!r} is not a cursor of an {kind} connection; pass an endCursor or "
                         f"cursor returned by this field")
