"""The canonical v1 paper citation record: rows in, dict out. The only place the document is made."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from typing import Any
from uuid import UUID

import orjson

from loaders.rows import (
    STATUSES,
    Observation,
    PaperSnapshot,
    Receipt,
    RecordItems,
    RecordRows,
    Standing,
    is_live_source,
)

SCHEMA = "pith.paper-citation-record.v1"
REFUSAL = "A citation records a reference. It does not transfer a finding from one paper to another."
CITATION_SOURCE = "paper_references, paper_reference_links"
STANDING_SOURCE = "scholarly_work_events, retraction_status_cache"
DEFAULT_MEASUREMENT_SOURCE = "arxiv_reference"
LANE_NOTES = {
    "reference_resolution": "Typed states for the displayed outbound observations.",
    "standing_notices": "One-hop event checks from named stored sources.",
    "inbound_itemization": "Pith citing papers itemized under the disclosed page cap.",
    "external_citation_measurements": "A source-named dated measurement, never combined with another source.",
}
MONTHS = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)


def canonical_bytes(value: Any) -> bytes:
    """Serialize as the spec says: sorted keys, no spaces, UTF-8, no trailing newline.

    orjson writes the same bytes as json.dumps(sort_keys=True, separators=(",", ":"),
    ensure_ascii=False) for every value a record holds (a test compares them on random text) and
    is an order of magnitude faster; integers beyond 64 bits fall back to the standard library.
    """
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def canonical(value: Any) -> str:
    return canonical_bytes(value).decode("utf-8")


def sha256_of(value: Any) -> str:
    return "sha256:" + hashlib.sha256(canonical_bytes(value)).hexdigest()


def observation_digest(observation: dict[str, Any]) -> str:
    return sha256_of({k: v for k, v in observation.items() if k != "observation_digest"})


def context_digest(document: dict[str, Any]) -> str:
    return sha256_of({k: v for k, v in document.items() if k not in ("context_digest", "as_of")})


# Records repeat the same instants (a cited paper's snapshot on every inbound row): each is formatted once.
# An instant's text in the +00:00 family; the Z family is the same text with Z for the offset.
_ISO: dict[datetime, str] = {}
_ISO_MAX = 65536


def _iso(value: datetime) -> str:
    found = _ISO.get(value)
    if found is None:
        if len(_ISO) >= _ISO_MAX:
            _ISO.clear()
        found = _ISO[value] = value.astimezone(timezone.utc).isoformat()
    return found


def known_text(value: datetime, text: str) -> None:
    """Remember `text` as the instant's +00:00 text, by one who read it and checked it is that text (the
    importer: a document is rebuilt from what it says, and most of its instants are then formatted
    back from the very text it was read from)."""
    if len(_ISO) >= _ISO_MAX:
        _ISO.clear()
    _ISO[value] = text


# A UUID's text, by the object's identity (the importer reads each id once and builds its record from
# the same objects): str(UUID) is slow Python, and a record names every observation and work.
_UUID_TEXT: dict[int, tuple[UUID, str]] = {}


def known_uuid(value: UUID, text: str) -> None:
    """Remember `text` as str(value), by one who checked it is (the importer)."""
    if len(_UUID_TEXT) >= _ISO_MAX:
        _UUID_TEXT.clear()
    _UUID_TEXT[id(value)] = (value, text)  # the entry holds the object: its id is not reused meanwhile


def uuid_text(value: UUID) -> str:
    found = _UUID_TEXT.get(id(value))
    return found[1] if found is not None and found[0] is value else str(value)


def z_time(value: datetime | None) -> str | None:
    """The Z family: paper, citation, work, resolution and measurement times."""
    if value is None:
        return None
    return _iso(value)[:-6] + "Z"


def offset_time(value: datetime | None) -> str | None:
    """The +00:00 family: everything of standing notices."""
    if value is None:
        return None
    return _iso(value)


def as_of_text(value: datetime) -> str:
    return value.astimezone(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def long_date(value: datetime) -> str:
    day = value.astimezone(timezone.utc)
    return f"{day.day} {MONTHS[day.month - 1]} {day.year}"


def paper_links(arxiv_id: str) -> dict[str, str]:
    return {
        "evidence": "/evidence",
        "html": f"/paper/{arxiv_id}/citation-record",
        "integrity": f"/paper/{arxiv_id}/integrity",
        "json": f"/paper/{arxiv_id}/citation-record.json",
        "paper": f"/paper/{arxiv_id}",
    }


def paper_full(paper: PaperSnapshot) -> dict[str, Any]:
    return {
        "arxiv_id": paper.arxiv_id,
        "last_updated": z_time(paper.last_updated),
        "latest_version": paper.latest_version,
        "primary_category": paper.primary_category,
        "snapshot_observed_at": z_time(paper.observed_at),
        "submitted_at": z_time(paper.submitted_at),
        "title": paper.title,
    }


def paper_short(paper: PaperSnapshot | None) -> dict[str, Any] | None:
    if paper is None:
        return None
    return {
        "arxiv_id": paper.arxiv_id,
        "last_updated": z_time(paper.last_updated),
        "snapshot_observed_at": z_time(paper.observed_at),
        "submitted_at": z_time(paper.submitted_at),
        "title": paper.title,
        "version": paper.latest_version,
    }


def cited_work(obs: Observation) -> dict[str, Any]:
    work = obs.work
    if work is None:
        # No canonical work link: what the bibliography printed, as of its parse.
        return {
            "arxiv_id": None,
            "doi": None,
            "metadata_source": None,
            "pith_arxiv_id": obs.cited_arxiv_id,
            "snapshot_observed_at": z_time(obs.source_observed_at),
            "title": obs.printed_title,
            "venue": None,
            "work_id": None,
            "year": obs.printed_year,
        }
    return {
        "arxiv_id": work.arxiv_id,
        "doi": work.doi,
        "metadata_source": work.metadata_source,
        "pith_arxiv_id": work.pith_arxiv_id,
        "snapshot_observed_at": z_time(work.observed_at),
        "title": work.title,
        "venue": work.venue,
        "work_id": uuid_text(work.work_id),
        "year": work.year,
    }


def latest_receipt(receipts: tuple[Receipt, ...] | list[Receipt]) -> datetime | None:
    return max((r.observed_at for r in receipts), default=None)


def notice_sentence(known: Standing) -> str:
    as_of = offset_time(latest_receipt(known.receipts))
    n = len(known.events)
    if n == 0:
        return f"No event found in the named queried sources as of {as_of}."
    return f"{n} event{'s' if n != 1 else ''} found in the named queried sources as of {as_of}."


def notice_state(obs: Observation, standing: dict[Any, Standing]) -> tuple[str, str | None, Standing | None]:
    """(state, reason, what the sources say): measured only for a linked work some source has checked."""
    return work_notice_state(obs.work.work_id if obs.work is not None else None, standing)


def work_notice_state(work_id: Any, standing: dict[Any, Standing]) -> tuple[str, str | None, Standing | None]:
    """The same, for a work (None: no canonical work)."""
    if work_id is None:
        return "unavailable", "canonical_work_link_unavailable", None
    known = standing.get(work_id)
    if known is None or not known.receipts:
        return "unavailable", "standing_sources_not_queried", None
    return "measured", None, known


def standing_notice(obs: Observation, standing: dict[Any, Standing]) -> dict[str, Any]:
    return work_standing_notice(obs.work.work_id if obs.work is not None else None, standing)


def work_standing_notice(work_id: Any, standing: dict[Any, Standing]) -> dict[str, Any]:
    """The standing notice of an observation linked to the work (None: to no canonical work)."""
    state, reason, known = work_notice_state(work_id, standing)
    if known is None:
        return _unavailable(reason or "")
    return {
        "events": [
            {
                "event_type": e.event_type,
                "notice_doi": e.notice_doi,
                "observed_at": offset_time(e.observed_at),
                "reported_at": offset_time(e.reported_at),
                "source": e.source,
            }
            for e in known.events
        ],
        "observation": notice_sentence(known),
        "reason": None,
        "source_receipts": [
            {"observed_at": offset_time(r.observed_at), "source": r.source} for r in known.receipts
        ],
        "state": state,
    }


def _unavailable(reason: str) -> dict[str, Any]:
    return {"events": [], "reason": reason, "source_receipts": [], "state": "unavailable"}


class _Shared:
    """Parts that repeat across a record's observations (the cited paper of every inbound row, the
    notice of a shared work), built once. The dicts are only serialized, never changed, so sharing
    them is safe."""

    def __init__(self, standing: dict[Any, Standing]) -> None:
        self.standing = standing
        self.papers: dict[tuple, dict[str, Any]] = {}
        self.notices: dict[Any, dict[str, Any]] = {}

    def paper(self, snapshot: PaperSnapshot | None) -> dict[str, Any] | None:
        if snapshot is None:
            return None
        # A snapshot is its paper and instant (the table's key): hashing those two is cheaper than the row.
        key = (snapshot.arxiv_id, snapshot.observed_at)
        found = self.papers.get(key)
        if found is None:
            found = self.papers[key] = paper_short(snapshot)
        return found

    def notice(self, obs: Observation) -> dict[str, Any]:
        key = obs.work.work_id if obs.work is not None else None
        found = self.notices.get(key)
        if found is None:
            found = self.notices[key] = standing_notice(obs, self.standing)
        return found


def observation(obs: Observation, standing: dict[Any, Standing] | _Shared) -> dict[str, Any]:
    shared = standing if isinstance(standing, _Shared) else _Shared(standing)
    return _finished(_item(obs, shared), obs, shared)


def _item(obs: Observation, shared: _Shared) -> dict[str, Any]:
    """An observation's part of the record that does not depend on standing: all but notice and digest."""
    cited_link = f"/paper/{obs.cited.arxiv_id}" if obs.cited is not None else None
    return {
        "citation": {
            "cited_paper": shared.paper(obs.cited),
            "cited_work": cited_work(obs),
            "citing_paper": shared.paper(obs.citing),
            "reference_index": obs.reference_index,
            "source": obs.source,
            "source_observed_at": z_time(obs.source_observed_at),
        },
        "links": {"cited_paper": cited_link, "citing_paper": f"/paper/{obs.citing.arxiv_id}"},
        "observation_id": uuid_text(obs.observation_id),
        "resolution": {
            "observed_at": z_time(obs.resolution.observed_at),
            "resolver_source": obs.resolution.resolver_source,
            "status": obs.resolution.status,
        },
    }


_ID_KEY = b',"observation_id":'


def _finished(item: dict[str, Any], obs: Observation, shared: _Shared,
              serialized: dict[int, bytes] | None = None) -> dict[str, Any]:
    item["standing_notice"] = shared.notice(obs)
    raw = canonical_bytes(item)  # the key is not in it yet: what observation_digest(item) hashes
    digest = "sha256:" + hashlib.sha256(raw).hexdigest()
    item["observation_digest"] = digest
    if serialized is not None:
        # The item's canonical bytes with the digest: it sorts just before observation_id, the first
        # top-level key after "links" (a quote inside a JSON string is escaped, so this cannot be in one).
        at = raw.find(_ID_KEY)
        if at > 0:
            serialized[id(item)] = raw[:at] + b',"observation_digest":"' + digest.encode() + b'"' + raw[at:]
    return item


class Prebuilt:
    """Observations' items built ahead of the record, while the database runs the next statement
    (loaders.record.record_rows calls `prepare` with each page as it arrives); build_record finishes
    them (notice, digest) once standing is known."""

    def __init__(self) -> None:
        self.shared = _Shared({})
        self.items: dict[int, tuple[Observation, dict[str, Any]]] = {}
        self.serialized: dict[int, bytes] = {}  # finished items' canonical bytes, by the item's identity

    def prepare(self, observations: list[Observation]) -> None:
        for o in observations:
            self.items[id(o)] = (o, _item(o, self.shared))

    def item(self, obs: Observation) -> dict[str, Any]:
        found = self.items.pop(id(obs), None)
        return found[1] if found is not None and found[0] is obs else _item(obs, self.shared)

    def canonical(self, value: dict[str, Any]) -> bytes:
        """canonical_bytes(value) for a document built with this builder, its items' bytes not made again."""
        try:
            return orjson.dumps(self._fragments(value), option=orjson.OPT_SORT_KEYS)
        except TypeError:
            return canonical_bytes(value)

    def _fragments(self, value: dict[str, Any]) -> dict[str, Any]:
        shown = dict(value)
        for direction in ("inbound", "outbound"):
            if direction in shown:
                shown[direction] = [orjson.Fragment(self.serialized[id(o)]) if id(o) in self.serialized else o
                                    for o in shown[direction]]
        return shown


def _lane(lane: str, denominator: int, observed: int, source: str, observed_at: str | None) -> dict[str, Any]:
    return {
        "denominator": denominator,
        "lane": lane,
        "note": LANE_NOTES[lane],
        "records_observed": observed,
        "source": source,
        "source_observed_at": observed_at,
        "state": "measured" if observed == denominator else "capped",
    }


def _document(rows: RecordRows | RecordItems, inbound: list[Any], outbound: list[Any], statuses: list[str],
              receipts: list[tuple[str, datetime]], inbound_at: list[datetime],
              outbound_at: list[datetime]) -> dict[str, Any]:
    """The document around its items (dicts or their canonical bytes), from the facts of the displayed
    observations: the outbound ones' statuses, the receipts (source, when) of the works they are linked
    to (only the latest of each source is read, so a receipt may come more than once), when each was parsed."""
    paper = rows.paper
    displayed = len(inbound) + len(outbound)
    state_counts = {status: 0 for status in STATUSES}
    for status in statuses:
        state_counts[status] += 1

    live_latest: dict[str, datetime] = {}
    for source, at in receipts:
        if is_live_source(source) and (source not in live_latest or at > live_latest[source]):
            live_latest[source] = at

    measurements = sorted(rows.measurements, key=lambda m: m.source)
    measurement_sources = ", ".join(m.source for m in measurements) or DEFAULT_MEASUREMENT_SOURCE

    inbound_shown = f"{len(inbound)}" if len(inbound) == rows.counts.inbound else f"{len(inbound)} of {rows.counts.inbound}"
    document: dict[str, Any] = {
        "as_of": as_of_text(rows.as_of),
        "caps": {
            "database_statements": rows.caps.database_statements,
            "inbound": rows.caps.inbound,
            "outbound": rows.caps.outbound,
        },
        "coverage": [
            _lane(
                "reference_resolution",
                rows.counts.outbound,
                len(outbound),
                CITATION_SOURCE,
                z_time(max(outbound_at, default=None)),
            ),
            _lane(
                "standing_notices",
                displayed,
                displayed,
                STANDING_SOURCE,
                offset_time(max((at for _, at in receipts), default=None)),
            ),
            _lane(
                "inbound_itemization",
                rows.counts.inbound,
                len(inbound),
                CITATION_SOURCE,
                z_time(max(inbound_at, default=None)),
            ),
            _lane(
                "external_citation_measurements",
                len(measurements),
                len(measurements),
                measurement_sources,
                z_time(max((m.observed_at for m in measurements), default=None)),
            ),
        ],
        "external_citation_measurements": [
            {"count": m.count, "observed_at": z_time(m.observed_at), "source": m.source} for m in measurements
        ],
        "inbound": inbound,
        "links": paper_links(paper.arxiv_id),
        "outbound": outbound,
        "paper": paper_full(paper),
        "reference_resolution": {
            "displayed": len(outbound),
            "state_counts": state_counts,
            "total_outbound_references": rows.counts.outbound,
        },
        "refusal": REFUSAL,
        "schema": SCHEMA,
        "standing_sources": [
            {"observed_at": offset_time(at), "source": source} for source, at in sorted(live_latest.items())
        ],
        "thesis": (
            f"As of {long_date(rows.as_of)}, this Paper Citation Record lists {len(outbound)} of "
            f"{rows.counts.outbound} outbound references and {inbound_shown} inbound Pith citation "
            f"observations for arXiv:{paper.arxiv_id}."
        ),
    }
    return document


def build_record(rows: RecordRows, prebuilt: Prebuilt | None = None) -> dict[str, Any]:
    """Build the v1 document from the rows visible at rows.as_of (with items built ahead, if given)."""
    prebuilt = prebuilt or Prebuilt()
    shared = prebuilt.shared
    shared.standing, shared.notices = rows.standing, {}
    serialized = prebuilt.serialized
    inbound = [_finished(prebuilt.item(o), o, shared, serialized) for o in rows.inbound]
    outbound = [_finished(prebuilt.item(o), o, shared, serialized) for o in rows.outbound]
    # Receipts of the works behind the displayed observations, each work once.
    works = {o.work.work_id for o in rows.inbound + rows.outbound if o.work is not None}
    receipts = [(r.source, r.observed_at) for w in works if w in rows.standing for r in rows.standing[w].receipts]
    document = _document(rows, inbound, outbound, [o.resolution.status for o in rows.outbound], receipts,
                         [o.source_observed_at for o in rows.inbound], [o.source_observed_at for o in rows.outbound])
    # = context_digest(document), the items' bytes reused
    document["context_digest"] = "sha256:" + hashlib.sha256(prebuilt.canonical(
        {k: v for k, v in document.items() if k not in ("context_digest", "as_of")})).hexdigest()
    return document


def record_bytes(items: RecordItems) -> tuple[bytes, dict[str, Any]]:
    """The document's canonical bytes (canonical_bytes(build_record(rows)) for the same rows), and the
    document with each item as its bytes (an orjson.Fragment), from items the database wrote."""
    inbound = [orjson.Fragment(p.item) for p in items.inbound]
    outbound = [orjson.Fragment(p.item) for p in items.outbound]
    document = _document(items, inbound, outbound, [p.status for p in items.outbound], items.receipts,
                         [p.source_observed_at for p in items.inbound], [p.source_observed_at for p in items.outbound])
    document["context_digest"] = "sha256:" + hashlib.sha256(orjson.dumps(
        {k: v for k, v in document.items() if k not in ("context_digest", "as_of")},
        option=orjson.OPT_SORT_KEYS)).hexdigest()
    return orjson.dumps(document, option=orjson.OPT_SORT_KEYS), document
