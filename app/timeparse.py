"""Validation of what clients send: arXiv identifiers, instants and search words."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime
from typing import Any

NEW_STYLE = re.compile(r"^\d{4}\.\d{4,5}\Z")
OLD_STYLE = re.compile(r"^[a-z]+(-[a-z]+)*(\.[A-Z]{2})?/\d{7}\Z")
ARXIV_ID_RULE = ("an arXiv identifier without version: new style YYMM.NNNN or YYMM.NNNNN (e.g. 2402.15627) "
                 "or old style archive/YYMMNNN (e.g. hep-th/9901001)")
AS_OF_RULE = ("an ISO 8601 instant with a time zone, e.g. 2026-08-05T04:52:00Z or 2026-08-05T06:52:00+02:00 "
              "(truncated to whole seconds), or a date, e.g. 2026-08-05, meaning its midnight UTC; an instant after "
              "the server's clock is answered as of now")
DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


class BadInput(ValueError):
    """A client value that is not accepted; the message says what is."""


def is_arxiv_id(value: str) -> bool:
    return bool(NEW_STYLE.match(value) or OLD_STYLE.match(value))


def parse_arxiv_id(value: str) -> str:
    if not isinstance(value, str) or not (NEW_STYLE.match(value) or OLD_STYLE.match(value)):
        raise BadInput(f"{value!r} is not a valid arXiv id; expected {ARXIV_ID_RULE}")
    return value


# Instants as clients send them, parsed: most requests repeat a few (a page's asOf, a script's instant).
_PARSED: dict[str, datetime] = {}


def parse_as_of(value: str | datetime) -> datetime:
    if type(value) is str:
        found = _PARSED.get(value)
        if found is None:
            found = _parse_as_of(value)
            if len(_PARSED) >= 4096:
                _PARSED.clear()
            _PARSED[value] = found
        return found
    if type(value) is datetime and value.tzinfo is UTC and not value.microsecond:
        return value  # already an instant as parsed here (a DateTime variable, coerced)
    return _parse_as_of(value)


def _parse_as_of(value: str | datetime) -> datetime:
    if isinstance(value, datetime):
        parsed = value
    else:
        text = value.strip() if isinstance(value, str) else ""
        if DATE.match(text):  # a date picker's value: the day's first instant, in UTC
            try:
                return datetime.fromisoformat(text).replace(tzinfo=UTC)
            except ValueError:
                raise BadInput(f"{value!r} is not a valid date; expected {AS_OF_RULE}") from None
        if not re.match(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}", text):
            raise BadInput(f"{value!r} is not a valid instant; expected {AS_OF_RULE}")
        text = text[:10] + "T" + text[11:]  # RFC 3339 allows a lowercase t (and z), as a space is taken
        try:
            parsed = datetime.fromisoformat(text.replace("z", "Z").replace("Z", "+00:00"))
        except ValueError:
            raise BadInput(f"{value!r} is not a valid instant; expected {AS_OF_RULE}") from None
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise BadInput(f"{value!r} has no time zone (a datetime-local value: in a browser, new Date(value)"
                       f".toISOString() gives the instant it means there); expected {AS_OF_RULE}")
    try:
        return parsed.astimezone(UTC).replace(microsecond=0)
    except OverflowError:
        raise BadInput(f"{value!r} is out of range; expected {AS_OF_RULE}") from None


_NOW: list[Any] = [None, None]  # the clock's last whole second, and it as an instant


def now_as_of() -> datetime:
    """The server's clock, truncated to the second (every request in a second reads the same instant)."""
    second = int(time.time())
    if second != _NOW[0]:
        _NOW[:] = [second, datetime.fromtimestamp(second, UTC)]
    return _NOW[1]


def answered_as_of(given: str | datetime | None, now: datetime) -> datetime:
    """The instant a read asking for `given` is answered as of: the instant itself when it is before `now`,
    else now (the future has not happened: reading "as of 2031" reads what is known now)."""
    if given is None:
        return now
    at = parse_as_of(given)
    return at if at < now else now


def is_pinned(at: datetime, now: datetime) -> bool:
    """Whether an answer as of `at` is fixed (its ids name the instant, HTTP caches may keep it): only an
    instant before the server's clock. A read as of now, or of an instant clamped to now, changes with the
    next import."""
    return at < now


def has_surrogate(value: str) -> bool:
    """A lone UTF-16 surrogate: not a character, and nothing PostgreSQL (or UTF-8) can store."""
    return any(0xD800 <= ord(c) <= 0xDFFF for c in value)


SEARCH_RULE = "1 to 500 characters of search words (quotes and - work as in web search)"
# PostgreSQL's websearch_to_tsquery stacks a negation for each - before a word (whatever lies between them:
# "- - -cat", "-!-!cat") and fails past 32 ("tsquery stack too small", an internal error); a hyphen inside
# a word ("state-of-the-art") is none.
MAX_SEARCH_EXCLUSIONS = 32
_EXCLUSION = re.compile(r"(?<![^\W_])-|-(?![^\W_])")


def parse_search_words(value: str) -> str:
    """Words for title search: no NUL and no lone surrogate (neither can be stored or searched)."""
    if not isinstance(value, str) or not value.strip() or len(value) > 500:
        raise BadInput(f"give {SEARCH_RULE}")
    if "\x00" in value:
        raise BadInput(f"the text contains a NUL character; give {SEARCH_RULE}")
    if has_surrogate(value):
        raise BadInput(f"the text contains a lone UTF-16 surrogate (not a character); give {SEARCH_RULE}")
    if len(_EXCLUSION.findall(value)) > MAX_SEARCH_EXCLUSIONS:
        raise BadInput(f"the text has more than {MAX_SEARCH_EXCLUSIONS} - outside words (each excludes the word "
                       f"after it); give {SEARCH_RULE}")
    return value
