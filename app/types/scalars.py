"""The DateTime and JSON scalars."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, NewType

import strawberry

from app.errors import UserInputError
from app.timeparse import BadInput, parse_as_of


# The DateTime format, written once in each language that renders it: UTC, whole seconds, microseconds
# only when not zero, Z. Python serializes values; app.compiled builds the same text in SQL (tests
# compare the two paths' bytes).
def _serialize(value: datetime) -> str:
    if value.tzinfo is not timezone.utc:  # asyncpg gives UTC already; anything else is converted
        value = value.astimezone(timezone.utc)
    text = value.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def datetime_sql(expr: str) -> str:
    """The same text as _serialize, computed by PostgreSQL from a timestamptz expression."""
    utc = f"({expr}) AT TIME ZONE 'UTC'"
    return (f"(to_char({utc}, 'YYYY-MM-DD\"T\"HH24:MI:SS') || CASE WHEN date_part('microseconds', {expr})::bigint"
            f" % 1000000 <> 0 THEN to_char({utc}, '.US') ELSE '' END || 'Z')")


def _parse(value: Any) -> datetime:
    if not isinstance(value, str):
        raise UserInputError(f"DateTime must be a string, e.g. 2026-08-05T04:52:00Z; found {value!r}")
    try:
        return parse_as_of(value)
    except BadInput as exc:
        raise UserInputError(str(exc)) from None


JSON = NewType("JSON", object)

DATETIME = strawberry.scalar(
    name="DateTime",
    description=("An instant in ISO 8601 with a time zone, e.g. 2026-08-05T04:52:00Z. Results are in UTC with Z; "
                 "inputs are truncated to whole seconds, and a date alone (2026-08-05) means its midnight UTC."),
    specified_by_url="https://scalars.graphql.org/andimarek/date-time.html",
    serialize=_serialize,
    parse_value=_parse,
)

JSON_SCALAR = strawberry.scalar(
    name="JSON",
    description="A JSON value, as is.",
    specified_by_url="https://www.rfc-editor.org/rfc/rfc8259",
    serialize=lambda v: v,
    parse_value=lambda v: v,
)

SCALARS = {datetime: DATETIME, JSON: JSON_SCALAR}
