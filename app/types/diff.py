"""recordDiff: what changed in a paper's record between two instants, as a JSON Patch and as typed changes."""

from __future__ import annotations

from datetime import datetime
import strawberry

from app.types.enums import ChangeKind, WorkEventType
from app.types.measurement import ExternalCitationMeasurement
from app.types.graph import CitationObservation
from app.types.scalars import JSON
from app.types.standing import WorkEvent
from loaders.changes import Change


@strawberry.type(description="One fact observed in (from, to] that the paper's (uncapped) record reflects.")
class RecordChange:
    kind: ChangeKind = strawberry.field(description="What kind of fact.")
    observed_at: datetime = strawberry.field(description=(
        "When the fact took effect (for a new citation or reference: when it became visible)."))
    observation: CitationObservation | None = strawberry.field(description=(
        "The observation the change is about, as of `to` (for facts about a work or another paper: the first "
        "observation that shows it)."))
    event: WorkEvent | None = strawberry.field(description="The event, for STANDING_EVENT.")
    measurement: ExternalCitationMeasurement | None = strawberry.field(description="For MEASUREMENT_CHANGED.")
    previous: JSON | None = strawberry.field(description="The changed values before; null when added.")
    current: JSON | None = strawberry.field(description="The values after.")

    @classmethod
    def of(cls, change: Change, to: datetime) -> "RecordChange":
        event = None
        if change.event is not None:
            e = change.event
            event = WorkEvent(event_type=WorkEventType(e["eventType"]), source=e["source"],
                              observed_at=_instant(e["observedAt"]),
                              reported_at=_instant(e["reportedAt"]) if e.get("reportedAt") else None,
                              notice_doi=e.get("noticeDoi"))
        measurement = None
        if change.measurement is not None:
            m = change.measurement
            measurement = ExternalCitationMeasurement(source=m["source"], count=m["count"],
                                                      observed_at=_instant(m["observedAt"]))
        return cls(kind=ChangeKind(change.kind), observed_at=change.observed_at,
                   observation=(CitationObservation.of(change.observation, to, pinned=True)
                                if change.observation else None),
                   event=event, measurement=measurement, previous=change.previous, current=change.current)


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@strawberry.type(description="A paper's record at two instants: the JSON Patch between them and the changes behind it.")
class RecordDiff:
    from_: datetime = strawberry.field(name="from", description="The earlier instant.")
    to: datetime = strawberry.field(description="The later instant.")
    from_context_digest: str | None = strawberry.field(description="null when the paper has no snapshot at `from`.")
    to_context_digest: str = strawberry.field(description="context_digest of the record at `to`.")
    patch: JSON = strawberry.field(description=(
        "RFC 6902 JSON Patch turning the v1 record at `from` into the v1 record at `to` (standard caps); a single "
        "`add` of the whole document at path \"\" when the paper has no snapshot at `from`."))
    changes: list[RecordChange] = strawberry.field(description=(
        "The changes behind the patch, typed, in order of observedAt (then observation id). Covers the uncapped "
        "record, so a change beyond the inbound cap appears here even when the patch cannot show it. At most "
        "`maxChanges` of them."))
    changes_truncated: bool = strawberry.field(description=(
        "True when more changes (of the kinds asked) followed the last one shown (raise maxChanges, or ask a "
        "narrower window)."))
