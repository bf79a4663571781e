"""ExternalCitationMeasurement: a dated count from one named source."""

from __future__ import annotations

from datetime import datetime

import strawberry


@strawberry.type(description="A source's latest citation count at the instant; never summed across sources.")
class ExternalCitationMeasurement:
    source: str = strawberry.field(description="Who counted.")
    count: int = strawberry.field(description="The count the source reported.")
    observed_at: datetime = strawberry.field(description="When the count was observed.")
