"""Frozen rows that loaders return and that both the record builder and the GraphQL types read."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from uuid import UUID

STATUSES: tuple[str, ...] = (
    "verified_exact",
    "verified_fuzzy",
    "unresolved",
    "parse_uncertain",
    "malformed_identifier",
    "metadata_mismatch",
)
EVENT_TYPES: tuple[str, ...] = (
    "retraction",
    "correction",
    "expression_of_concern",
    "withdrawal",
    "reinstatement",
)
CACHE_SUFFIX = "_status_cache"
# Sources of generated data (`pith-graph synth`) are named with this prefix, so every reader can tell
# them from real ones: receipts, /evidence, the records themselves (the source names are in them).
SYNTHETIC_PREFIX = "synthetic_"


def is_synthetic(source: str | None) -> bool:
    return source is not None and source.startswith(SYNTHETIC_PREFIX)

# The rules every reader shares (SQL statements, the compiled queries, the exports, the record):
UNRESOLVED = "unresolved"  # the status of a parsed reference with no resolution recorded yet
RETRACTING: tuple[str, ...] = ("retraction", "withdrawal")  # the events that make a work retracted
STANDING_DECIDING: tuple[str, ...] = (*RETRACTING, "reinstatement")  # the latest of these decides


def sql_list(values: tuple[str, ...]) -> str:
    """('a', 'b'): a tuple of these constants for an SQL IN."""
    return "(" + ", ".join(f"'{v}'" for v in values) + ")"


# The order of a work's events, wherever it matters (the notice's list, "the latest deciding event"):
# when observed, then source, then when the source says it happened, then type. Events one import
# observes at one instant (a Retraction Watch file: an expression of concern, then the retraction) are
# thus in the order they happened.
EVENT_ORDER: tuple[str, ...] = ("observed_at", "source", "reported_at", "event_type")


def event_order_sql(alias: str = "", descending: bool = False) -> str:
    """EVENT_ORDER as an ORDER BY list (descending: its exact reverse)."""
    prefix = f"{alias}." if alias else ""
    parts = []
    for column in EVENT_ORDER:
        nulls = (" NULLS LAST" if descending else " NULLS FIRST") if column == "reported_at" else ""
        parts.append(f"{prefix}{column}{' DESC' if descending else ''}{nulls}")
    return ", ".join(parts)


def latest_retracts(event_types: list[str] | tuple[str, ...]) -> bool:
    """Whether the latest deciding event of a work (events in observation order) is a retraction or withdrawal."""
    deciding = [e for e in event_types if e in STANDING_DECIDING]
    return bool(deciding) and deciding[-1] in RETRACTING


@dataclass(frozen=True, slots=True)
class PaperSnapshot:
    arxiv_id: str
    observed_at: datetime
    title: str
    latest_version: int
    primary_category: str | None
    submitted_at: datetime
    last_updated: datetime


@dataclass(frozen=True, slots=True)
class WorkSnapshot:
    work_id: UUID
    observed_at: datetime
    arxiv_id: str | None
    doi: str | None
    metadata_source: str | None
    pith_arxiv_id: str | None
    title: str | None
    venue: str | None
    year: int | None


@dataclass(frozen=True, slots=True)
class Resolution:
    observation_id: UUID
    observed_at: datetime
    status: str
    resolver_source: str | None


@dataclass(frozen=True, slots=True)
class Observation:
    """One parsed reference with everything visible of it at the request's instant."""

    observation_id: UUID
    citing_arxiv_id: str
    reference_index: int
    source: str
    source_observed_at: datetime
    cited_arxiv_id: str | None
    work_id: UUID | None
    printed_title: str | None
    printed_year: int | None
    citing: PaperSnapshot
    cited: PaperSnapshot | None
    # The work snapshot at the instant; None when unlinked or not yet observed.
    work: WorkSnapshot | None
    resolution: Resolution

    @property
    def linked_work_id(self) -> UUID | None:
        """The canonical work this reference is linked to at the instant, if any."""
        return self.work.work_id if self.work is not None else None


@dataclass(frozen=True, slots=True)
class Receipt:
    work_id: UUID
    source: str
    observed_at: datetime

    @property
    def is_live(self) -> bool:
        return not self.source.endswith(CACHE_SUFFIX)

    @property
    def is_synthetic(self) -> bool:
        return is_synthetic(self.source)


@dataclass(frozen=True, slots=True)
class Event:
    work_id: UUID
    source: str
    event_type: str
    observed_at: datetime
    reported_at: datetime | None
    notice_doi: str | None


@dataclass(frozen=True, slots=True)
class Standing:
    """What the standing sources say of one work at the instant."""

    receipts: tuple[Receipt, ...] = ()  # latest per source, ordered by source
    events: tuple[Event, ...] = ()  # ordered by observed_at, then source


@dataclass(frozen=True, slots=True)
class Measurement:
    arxiv_id: str
    source: str
    observed_at: datetime
    count: int


@dataclass(frozen=True, slots=True)
class Counts:
    inbound: int
    outbound: int


@dataclass(frozen=True, slots=True)
class Caps:
    inbound: int = 100
    outbound: int = 100
    database_statements: int = 6


@dataclass(frozen=True)
class RecordRows:
    """Everything one citation record is built from."""

    as_of: datetime
    paper: PaperSnapshot
    counts: Counts
    inbound: list[Observation]
    outbound: list[Observation]
    measurements: list[Measurement]
    standing: dict[UUID, Standing] = field(default_factory=dict)
    caps: Caps = Caps()
