"""Resolution: how a reference was resolved, as of the instant."""

from __future__ import annotations

from datetime import datetime

import strawberry

from app.types.enums import ResolutionStatus
from loaders.rows import Resolution as ResolutionRow


@strawberry.type(description="The latest resolution of a reference at the instant (unresolved until one is recorded).")
class Resolution:
    status: ResolutionStatus = strawberry.field(description="The resolution status.")
    resolver_source: str | None = strawberry.field(description="What resolved it (e.g. arxiv_id), if anything.")
    observed_at: datetime = strawberry.field(description="When this resolution was observed.")

    @classmethod
    def of(cls, row: ResolutionRow) -> "Resolution":
        return cls(status=ResolutionStatus(row.status), resolver_source=row.resolver_source, observed_at=row.observed_at)
