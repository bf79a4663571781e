"""Enumerations of the API."""

from __future__ import annotations

from enum import Enum

import strawberry


@strawberry.enum(description="How well a reference was resolved to a work.")
class ResolutionStatus(Enum):
    VERIFIED_EXACT = "verified_exact"
    VERIFIED_FUZZY = "verified_fuzzy"
    UNRESOLVED = "unresolved"
    PARSE_UNCERTAIN = "parse_uncertain"
    MALFORMED_IDENTIFIER = "malformed_identifier"
    METADATA_MISMATCH = "metadata_mismatch"


@strawberry.enum(description="Whether the cited work's standing was checked.")
class StandingState(Enum):
    MEASURED = "measured"
    UNAVAILABLE = "unavailable"


@strawberry.enum(description="A source-reported event on a work.")
class WorkEventType(Enum):
    RETRACTION = "retraction"
    CORRECTION = "correction"
    EXPRESSION_OF_CONCERN = "expression_of_concern"
    WITHDRAWAL = "withdrawal"
    REINSTATEMENT = "reinstatement"


@strawberry.enum(description="Which edges a traversal follows: citing papers (INBOUND), cited papers (OUTBOUND), or both.")
class Direction(Enum):
    INBOUND = "inbound"
    OUTBOUND = "outbound"
    BOTH = "both"


@strawberry.enum(description="What kind of fact a change is.")
class ChangeKind(Enum):
    PAPER_UPDATED = "PAPER_UPDATED"
    CITATION_ADDED = "CITATION_ADDED"
    REFERENCE_ADDED = "REFERENCE_ADDED"
    RESOLUTION_CHANGED = "RESOLUTION_CHANGED"
    WORK_UPDATED = "WORK_UPDATED"
    STANDING_EVENT = "STANDING_EVENT"
    STANDING_CHECKED = "STANDING_CHECKED"
    MEASUREMENT_CHANGED = "MEASUREMENT_CHANGED"
    CITING_PAPER_UPDATED = "CITING_PAPER_UPDATED"
    CITED_PAPER_UPDATED = "CITED_PAPER_UPDATED"
