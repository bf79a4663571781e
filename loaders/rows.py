"""Frozen rows that loaders return and that both the record builder and the GraphQL types read."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple
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


def is_live_source(source: str) -> bool:
    """A receipt of a live check, not of a source's cached status (the record's standing_sources)."""
    return not source.endswith(CACHE_SUFFIX)


def is_synthetic(source: str | None) -> bool:
    return source is not None and source.startswith(SYNTHETIC_PREFIX)

# The rules every reader shares (SQL statements, the compiled queries, the exports, the record):
UNRESOLVED = "unresolved"  # the status of a parsed reference with no resolution recorded yet
RETRACTING: tuple[str, ...] = ("retraction", "withdrawal")  # the events that make a work retracted
STANDING_DECIDING: tuple[str, ...] = (*RETRACTING, "reinstatement")  # the latest of these decides


# Sources whose citations carry no place in the citing work's reference list (an OpenCitations row is a
# citing-cited pair): their observations are stored with reference_index 0 (keyset pages need a number, and
# the v1 record's reference_index is an integer), and the API says null: not known, not "the first".
UNNUMBERED_SOURCES: tuple[str, ...] = ("opencitations",)


def shown_reference_index(source: str, reference_index: int) -> int | None:
    return None if source in UNNUMBERED_SOURCES else reference_index


def shown_reference_index_sql(alias: str = "o") -> str:
    return (f"CASE WHEN {alias}.source IN {sql_list(UNNUMBERED_SOURCES)} THEN NULL "
            f"ELSE {alias}.reference_index END")


def sql_list(values: tuple[str, ...]) -> str:
    """('a', 'b'): a tuple of these constants for an SQL IN."""
    return "(" + ", ".join(f"'{v}'" for v in values) + ")"


# The standing rule (docs/standing.md), in one place: every reader of a work's standing (the notice,
# citesRetracted, Work.retracted, works(filter:), recordDiff, the timeline, subscriptions, the exports)
# takes its SQL and its order from here.
#
# 1. An event stands at an instant T when it was observed by T and no later check of its source by T
#    ended it (work_event_ends: the source checked the work again and no longer reported it).
# 2. Of the standing retraction, withdrawal and reinstatement events, the one that happened last decides:
#    ordered by when it happened (reported_at; an event its source gives no date happened by the time it
#    was first observed), then source, then when it was observed, then type.
# 3. The notice lists the standing events in the order the v1 record documents: when observed, then
#    source (then reported_at and type, so the list has one order).

NOTICE_ORDER: tuple[str, ...] = ("observed_at", "source", "reported_at", "event_type")
DECIDING_ORDER: tuple[str, ...] = ("happened", "source", "observed_at", "event_type")
EVENT_ORDER = NOTICE_ORDER  # (the name readers used before the two orders were told apart)


def happened_sql(alias: str = "") -> str:
    """When an event happened, as an SQL expression (rule 2)."""
    prefix = f"{alias}." if alias else ""
    return f"coalesce({prefix}reported_at, {prefix}observed_at)"


def event_order_sql(alias: str = "", descending: bool = False) -> str:
    """NOTICE_ORDER as an ORDER BY list (descending: its exact reverse)."""
    prefix = f"{alias}." if alias else ""
    parts = []
    for column in NOTICE_ORDER:
        nulls = (" NULLS LAST" if descending else " NULLS FIRST") if column == "reported_at" else ""
        parts.append(f"{prefix}{column}{' DESC' if descending else ''}{nulls}")
    return ", ".join(parts)


def deciding_order_sql(alias: str = "", descending: bool = False) -> str:
    """DECIDING_ORDER as an ORDER BY list (descending: the deciding event first)."""
    prefix = f"{alias}." if alias else ""
    direction = " DESC" if descending else ""
    columns = {"happened": happened_sql(alias)}
    return ", ".join(f"{columns.get(c, prefix + c)}{direction}" for c in DECIDING_ORDER)


def stands_sql(alias: str, at: str = "$AS") -> str:
    """Rule 1 as an SQL condition on the work_events row `alias` at the instant `at`."""
    return (f"({alias}.observed_at <= {at} AND NOT EXISTS (SELECT 1 FROM work_event_ends AS x "
            f"WHERE x.work_id = {alias}.work_id AND x.source = {alias}.source AND x.event_type = {alias}.event_type "
            f"AND x.observed_at = {alias}.observed_at AND x.ended_at <= {at}))")


def deciding_key(event: Event) -> tuple:
    """DECIDING_ORDER of one event (rule 2)."""
    happened = event.reported_at if event.reported_at is not None else event.observed_at
    return (happened, event.source, event.observed_at, event.event_type)


def retracted_by(events: Iterable[Event]) -> bool:
    """Rule 2 over the standing events of one work: the deciding event is a retraction or withdrawal."""
    deciding = [e for e in events if e.event_type in STANDING_DECIDING]
    return bool(deciding) and max(deciding, key=deciding_key).event_type in RETRACTING


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
        return is_live_source(self.source)

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
    events: tuple[Event, ...] = ()  # those standing at the instant, in NOTICE_ORDER


@dataclass(frozen=True, slots=True)
class Measurement:
    arxiv_id: str
    source: str
    observed_at: datetime
    count: int
    by_year: tuple[tuple[int, int], ...] | None = None  # (year, count), when the source counts by year


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


class ItemPiece(NamedTuple):
    """One observation's record item as the database writes it (loaders.record.RECORD): its canonical
    bytes, observation_digest included, with the facts of it that the document around it reads."""

    item: bytes
    status: str  # the resolution's status at the instant
    source_observed_at: datetime


@dataclass(frozen=True)
class RecordItems:
    """A citation record's rows with its observations as items the database wrote (RecordRows otherwise)."""

    as_of: datetime
    paper: PaperSnapshot
    counts: Counts
    inbound: list[ItemPiece]
    outbound: list[ItemPiece]
    # (source, instant): the latest receipt per source of the works the items are linked to
    receipts: list[tuple[str, datetime]]
    measurements: list[Measurement]
    caps: Caps = Caps()
