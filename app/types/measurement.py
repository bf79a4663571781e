"""ExternalCitationMeasurement: a dated count from one named source."""

from __future__ import annotations

from datetime import datetime

import strawberry


@strawberry.type(description="Citations a source counted in one year.")
class CountInYear:
    year: int = strawberry.field(description="The year the citing works appeared.")
    count: int = strawberry.field(description="How many the source counted that year.")


@strawberry.type(description="A source's latest citation count at the instant; never summed across sources.")
class ExternalCitationMeasurement:
    source: str = strawberry.field(description="Who counted.")
    count: int = strawberry.field(description="The count the source reported.")
    observed_at: datetime = strawberry.field(description="When the count was observed.")
    by_year: list[CountInYear] | None = strawberry.field(default=None, description=(
        "The same count by the year citations were made, oldest first, as the source gave it with this count "
        "(OpenAlex counts_by_year, which covers recent years only); null when the source gives none."))
