"""DOIs as sources write them, and the one form works meet on."""

from __future__ import annotations

import re
from urllib.parse import unquote

_PREFIXES = re.compile(r"^(?:https?://(?:dx\.)?doi\.org/|doi:\s*|info:doi/)", re.IGNORECASE)
# The suffix: printable characters (no space, no control character, no lone UTF-16 surrogate: none can be
# stored, and no DOI holds one).
_SHAPE = re.compile(r"^10\.\d{4,9}/[^\s\x00-\x1f\x7f\ud800-\udfff]+$")
MISSING = {"", "unavailable", "n/a", "na", "none", "null", "0"}


def normalize_doi(value: object) -> str | None:
    """The DOI in the form works meet on: lowercase, without `https://doi.org/`, `doi:` or
    percent-encoding; None when the value is no DOI (blank, `unavailable`, not `10.<registrant>/...`)."""
    if not isinstance(value, str):
        return None
    text = value.strip().lower()
    if text.startswith("10.") and "%" not in text:  # the common case, as most sources write it
        return text if _SHAPE.match(text) else None
    if text in MISSING:
        return None
    for _ in range(2):  # a URL whose DOI is itself encoded once more
        text = _PREFIXES.sub("", unquote(text).strip())
    return text if _SHAPE.match(text) else None


def arxiv_id_of_doi(doi: str) -> str | None:
    """The arXiv id of an arXiv DOI (10.48550/arxiv.2402.15627), registered with DataCite."""
    if doi.startswith("10.48550/arxiv."):
        return doi.removeprefix("10.48550/arxiv.")
    return None
