"""CitationRecord: the canonical v1 document, typed at the top and whole as JSON and bytes."""

from __future__ import annotations

from datetime import datetime
from functools import cached_property
from typing import Any

import strawberry

from app import record
from app.types.scalars import JSON
from loaders.rows import RecordRows


@strawberry.type(description="The canonical paper citation record (pith.paper-citation-record.v1) at one instant.")
class CitationRecord:
    rows: strawberry.Private[RecordRows]

    @classmethod
    def of(cls, rows: RecordRows | None) -> "CitationRecord | None":
        return None if rows is None else cls(rows=rows)

    @cached_property
    def _document(self) -> dict[str, Any]:
        return record.build_record(self.rows)

    @strawberry.field(description="The v1 document as a JSON object.")
    def document(self) -> JSON:
        return self._document

    @strawberry.field(description="The v1 document's exact canonical bytes (sorted keys, no spaces, UTF-8).")
    def canonical_json(self) -> str:
        return record.canonical(self._document)

    @strawberry.field(description="Always pith.paper-citation-record.v1.")
    def schema(self) -> str:
        return record.SCHEMA

    @strawberry.field(description="The instant the record is computed at (whole seconds, UTC).")
    def as_of(self) -> datetime:
        return self.rows.as_of

    @strawberry.field(description="sha256 of the document without as_of and context_digest: stable while content "
                                  "is. The thesis names the as-of day, so the digest also changes when the UTC date "
                                  "turns over (recordDiff then lists no changes; compare digests of one day, or read "
                                  "recordChanged).")
    def context_digest(self) -> str:
        return self._document["context_digest"]

    @strawberry.field(description="The record's one-sentence summary.")
    def thesis(self) -> str:
        return self._document["thesis"]
