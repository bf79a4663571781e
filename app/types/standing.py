"""StandingNotice, WorkEvent, SourceReceipt: a one-hop check of the cited work's standing."""

from __future__ import annotations

from datetime import datetime

import strawberry

from app import record
from app.types.enums import StandingState, WorkEventType
from loaders.rows import Observation, Standing


@strawberry.type(description="An event a source reported on a work (retraction, correction, ...).")
class WorkEvent:
    event_type: WorkEventType = strawberry.field(description="What happened.")
    source: str = strawberry.field(description="Which source reported it.")
    observed_at: datetime = strawberry.field(description="When we observed the report.")
    reported_at: datetime | None = strawberry.field(description="When the source says it happened.")
    notice_doi: str | None = strawberry.field(description="DOI of the notice, if any.")


@strawberry.type(description="The latest check of a work by one standing source at the instant.")
class SourceReceipt:
    source: str = strawberry.field(description="The source (those ending _status_cache are caches).")
    observed_at: datetime = strawberry.field(description="When the source last checked the work.")
    live: bool = strawberry.field(description="False for *_status_cache sources.")
    synthetic: bool = strawberry.field(description=(
        "True for generated data (`pith-graph synth`; its sources are named synthetic_*), never a real check."))


@strawberry.type(description=(
    "Whether the cited work was checked for retractions and other events, and what was found, as of the instant."))
class StandingNotice:
    state: StandingState = strawberry.field(description="MEASURED when a source checked the linked work.")
    reason: str | None = strawberry.field(
        description="Why it is unavailable: canonical_work_link_unavailable or standing_sources_not_queried.")
    observation: str | None = strawberry.field(description="The notice's sentence, as in the v1 record.")
    events: list[WorkEvent] = strawberry.field(description="Events observed by the instant, by time then source.")
    source_receipts: list[SourceReceipt] = strawberry.field(description="Latest check per source, by source.")

    @classmethod
    def of(cls, obs: Observation, standing: Standing | None) -> "StandingNotice":
        return cls.of_work(obs.work.work_id if obs.work is not None else None, standing)

    @classmethod
    def of_work(cls, work_id: object, standing: Standing | None) -> "StandingNotice":
        """The notice of a work (None: an unlinked reference), as an observation of it shows it."""
        by_work = {work_id: standing} if work_id is not None and standing is not None else {}
        state, reason, known = record.work_notice_state(work_id, by_work)
        if known is None:
            return cls(state=StandingState(state), reason=reason, observation=None, events=[], source_receipts=[])
        return cls(
            state=StandingState.MEASURED,
            reason=None,
            observation=record.notice_sentence(known),
            events=[WorkEvent(event_type=WorkEventType(e.event_type), source=e.source, observed_at=e.observed_at,
                              reported_at=e.reported_at, notice_doi=e.notice_doi) for e in known.events],
            source_receipts=[SourceReceipt(source=r.source, observed_at=r.observed_at, live=r.is_live,
                                          synthetic=r.is_synthetic)
                             for r in known.receipts],
        )
