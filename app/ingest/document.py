"""Read one v1 document: validate it, decompose it into facts, and check it rebuilds to itself.

A document is accepted only when the record builder, given the facts the document shows, gives the
document back byte for byte: that one check covers both digests, the coverage lanes, the thesis,
the counts and standing_sources, so derived fields are verified and never stored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable
from uuid import UUID

from app import record
from loaders.rows import (
    EVENT_TYPES,
    STATUSES,
    Caps,
    Counts,
    Event,
    Measurement,
    Observation,
    PaperSnapshot,
    Receipt,
    RecordRows,
    Resolution,
    Standing,
    WorkSnapshot,
)

_Z = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{6})?Z$")
_OFFSET = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{6})?\+00:00$")
_AS_OF = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")


class DocumentError(ValueError):
    """A document that cannot be imported; path is a JSON path into it."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


# --- field readers -------------------------------------------------------------------------------


def _get(obj: Any, key: str, path: str) -> Any:
    if not isinstance(obj, dict):
        raise DocumentError(path, f"expected an object, found {_kind(obj)}")
    if key not in obj:
        raise DocumentError(f"{path}.{key}", "missing (required)")
    return obj[key]


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "an array",
            dict: "an object"}.get(type(value), type(value).__name__)


def _str(obj: Any, key: str, path: str, *, nullable: bool = False) -> str | None:
    value = _get(obj, key, path)
    if value is None and nullable:
        return None
    if not isinstance(value, str):
        raise DocumentError(f"{path}.{key}", f"expected a string{' or null' if nullable else ''}, found {_kind(value)}")
    return value


INT_MIN, INT_MAX = -2**31, 2**31 - 1


def _int(obj: Any, key: str, path: str, *, nullable: bool = False, minimum: int | None = None) -> int | None:
    value = _get(obj, key, path)
    if value is None and nullable:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise DocumentError(f"{path}.{key}", f"expected an integer{' or null' if nullable else ''}, found {_kind(value)}")
    if minimum is not None and value < minimum:
        raise DocumentError(f"{path}.{key}", f"expected an integer >= {minimum}, found {value}")
    if not INT_MIN <= value <= INT_MAX:  # the column is an integer, and GraphQL's Int is 32-bit
        raise DocumentError(f"{path}.{key}", f"expected an integer from {INT_MIN} to {INT_MAX} (32-bit), found {value}")
    return value


def _time(pattern: re.Pattern[str], example: str, family: str | None = None) -> Callable[..., datetime | None]:
    """A reader of one family of instants. A document repeats its instants (a cited paper's snapshot on
    every inbound row): each text is read once. A text that is the instant's own (the one the record
    builder writes: six digits of fraction exactly when there is one) is remembered as its formatting, so
    the rebuild of the document does not format it again (app.record.known_text)."""
    read_before: dict[str, datetime] = {}
    z = family == "z"

    def read(obj: Any, key: str, path: str, *, nullable: bool = False) -> datetime | None:
        value = _get(obj, key, path)
        if value is None and nullable:
            return None
        found = read_before.get(value) if type(value) is str else None
        if found is not None:
            return found
        if not isinstance(value, str) or not pattern.match(value):
            raise DocumentError(
                f"{path}.{key}",
                f"expected a UTC timestamp like {example}{' or null' if nullable else ''}, found {value!r}",
            )
        try:
            found = datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(timezone.utc)
        except ValueError as exc:
            raise DocumentError(f"{path}.{key}", f"not a valid date and time ({exc}): {value!r}") from None
        if len(read_before) >= 65536:
            read_before.clear()
        read_before[value] = found
        if family is not None:
            whole = len(value) == (20 if z else 25)
            if whole == (found.microsecond == 0) and len(value) in ((20, 27) if z else (25, 32)):
                record.known_text(found, value[:-1] + "+00:00" if z else value)
        return found

    return read


_z = _time(_Z, "2026-07-06T17:34:49.001670Z or 2024-02-23T22:10:59Z", "z")
_off = _time(_OFFSET, "2026-08-04T06:34:03.388597+00:00", "offset")
_as_of = _time(_AS_OF, "2026-08-05T04:52:00Z (whole seconds)")


def _uuid(obj: Any, key: str, path: str, *, nullable: bool = False) -> UUID | None:
    value = _str(obj, key, path, nullable=nullable)
    if value is None:
        return None
    if _CANONICAL_UUID.match(value):  # the form str(UUID) gives: no need to build it to compare
        parsed = UUID(value)
        record.known_uuid(parsed, value)
        return parsed
    try:
        parsed = UUID(value)
    except ValueError:
        raise DocumentError(f"{path}.{key}", f"expected a UUID, found {value!r}") from None
    if str(parsed) != value:
        raise DocumentError(f"{path}.{key}", f"expected a lower-case hyphenated UUID, found {value!r}")
    return parsed


def _enum(obj: Any, key: str, path: str, allowed: tuple[str, ...]) -> str:
    value = _get(obj, key, path)
    if value not in allowed:
        raise DocumentError(f"{path}.{key}", f"unknown value {value!r}; expected one of {', '.join(allowed)}")
    return value


def _list(obj: Any, key: str, path: str) -> list[Any]:
    value = _get(obj, key, path)
    if not isinstance(value, list):
        raise DocumentError(f"{path}.{key}", f"expected an array, found {_kind(value)}")
    return value


# --- facts ---------------------------------------------------------------------------------------


FACT_TABLES = ("papers", "works", "observations", "resolutions", "receipts", "events", "measurements",
               "work_measurements", "paper_dois")


@dataclass
class Facts:
    """Fact rows keyed by their primary key; values are the rest of the row."""

    papers: dict[tuple, tuple] = field(default_factory=dict)
    works: dict[tuple, tuple] = field(default_factory=dict)
    observations: dict[tuple, tuple] = field(default_factory=dict)
    resolutions: dict[tuple, tuple] = field(default_factory=dict)
    receipts: dict[tuple, tuple] = field(default_factory=dict)
    events: dict[tuple, tuple] = field(default_factory=dict)
    measurements: dict[tuple, tuple] = field(default_factory=dict)
    # Only the real sources' importers write these (app/ingest/sources.py): not in the v1 document.
    work_measurements: dict[tuple, tuple] = field(default_factory=dict)
    paper_dois: dict[tuple, tuple] = field(default_factory=dict)

    def count(self) -> int:
        return sum(len(getattr(self, table)) for table in FACT_TABLES)

    def add(self, table: str, key: tuple, value: tuple, path: str) -> None:
        rows: dict[tuple, tuple] = getattr(self, table)
        old = rows.get(key)
        if old is None:
            rows[key] = value
            return
        if old == value:  # the same fact again (the cited paper of every inbound row)
            return
        positions = LENIENT_POSITIONS.get(table)
        if positions:
            merged = merge_lenient(old, value, positions)
            if merged is not None:
                rows[key] = merged
                return
        raise DocumentError(path, f"conflicting facts for {table} {_show(key)}: {_show(old)} and {_show(value)}")

    def merge(self, other: "Facts", where: str) -> None:
        for table in FACT_TABLES:
            for key, value in getattr(other, table).items():
                self.add(table, key, value, where)


# Values that one fact may leave out and another give, without contradicting each other (app.ingest.store.Table's
# lenient columns): a short form of a paper has no category; a reference shown unlinked at one instant gives what the
# bibliography printed, and linked at another its work (a link made later: migration 0023); a resolution loaded
# from a document says whether its reference was linked then, one stored before did not.
LENIENT_POSITIONS: dict[str, tuple[int, ...]] = {"papers": (2,), "observations": (4, 5, 6, 7), "resolutions": (2,)}


def merge_lenient(old: tuple, new: tuple, positions: tuple[int, ...]) -> tuple | None:
    """The two facts as one, when they agree on every value but those at `positions`, and there each gives the
    same value or one of them none; None when they contradict each other."""
    merged = list(old)
    for i, (a, b) in enumerate(zip(old, new, strict=True)):
        if a == b:
            continue
        if i not in positions or (a is not None and b is not None):
            return None
        if a is None:
            merged[i] = b
    return tuple(merged)


def _show(value: tuple) -> str:
    def one(v: Any) -> str:
        if isinstance(v, datetime):
            return v.isoformat()
        return repr(v) if not isinstance(v, UUID) else str(v)

    return "(" + ", ".join(one(v) for v in value) + ")"


# --- reading a document --------------------------------------------------------------------------


@dataclass
class ParsedDocument:
    arxiv_id: str
    as_of: datetime
    facts: Facts
    rows: RecordRows


_VALID_ARXIV_IDS: set[str] = set()  # a document names the same papers again and again


def _arxiv_id(obj: Any, key: str, path: str, *, nullable: bool = False) -> str | None:
    """An arXiv id by the API's own rule (app.timeparse.parse_arxiv_id), as the API will look it up."""
    from app.timeparse import BadInput, parse_arxiv_id

    value = _str(obj, key, path, nullable=nullable)
    if value is None or value in _VALID_ARXIV_IDS:
        return value
    try:
        if parse_arxiv_id(value) == value:
            if len(_VALID_ARXIV_IDS) >= 65536:
                _VALID_ARXIV_IDS.clear()
            _VALID_ARXIV_IDS.add(value)
            return value
    except BadInput:
        pass
    raise DocumentError(f"{path}.{key}", f"{value[:60]!r} is not an arXiv id as the API looks them up: new style "
                                         "YYMM.NNNN or YYMM.NNNNN (e.g. 2402.15627) or old style archive/YYMMNNN, "
                                         "without version")


def _paper(obj: Any, path: str, *, full: bool) -> PaperSnapshot:
    version_key = "latest_version" if full else "version"
    return PaperSnapshot(
        arxiv_id=_arxiv_id(obj, "arxiv_id", path),
        observed_at=_z(obj, "snapshot_observed_at", path),
        title=_str(obj, "title", path),
        latest_version=_int(obj, version_key, path, minimum=1),
        primary_category=_str(obj, "primary_category", path, nullable=True) if full else None,
        submitted_at=_z(obj, "submitted_at", path),
        last_updated=_z(obj, "last_updated", path),
    )


def _add_paper(facts: Facts, p: PaperSnapshot, path: str) -> None:
    facts.add("papers", (p.arxiv_id, p.observed_at),
              (p.title, p.latest_version, p.primary_category, p.submitted_at, p.last_updated), path)


def _observation(obj: Any, path: str, facts: Facts, standing: dict[UUID, dict]) -> Observation:
    citation = _get(obj, "citation", path)
    cpath = f"{path}.citation"
    citing = _paper(_get(citation, "citing_paper", cpath), f"{cpath}.citing_paper", full=False)
    cited_raw = _get(citation, "cited_paper", cpath)
    cited = None if cited_raw is None else _paper(cited_raw, f"{cpath}.cited_paper", full=False)
    wpath = f"{cpath}.cited_work"
    work_raw = _get(citation, "cited_work", cpath)
    work_id = _uuid(work_raw, "work_id", wpath, nullable=True)
    observation_id = _uuid(obj, "observation_id", path)
    source_observed_at = _z(citation, "source_observed_at", cpath)
    work: WorkSnapshot | None = None
    printed_title: str | None = None
    printed_year: int | None = None
    if work_id is None:
        printed_title = _str(work_raw, "title", wpath, nullable=True)
        printed_year = _int(work_raw, "year", wpath, nullable=True)
        pith = _arxiv_id(work_raw, "pith_arxiv_id", wpath, nullable=True)
        cited_arxiv_id = cited.arxiv_id if cited is not None else pith
    else:
        work = WorkSnapshot(
            work_id=work_id,
            observed_at=_z(work_raw, "snapshot_observed_at", wpath),
            arxiv_id=_arxiv_id(work_raw, "arxiv_id", wpath, nullable=True),
            doi=_str(work_raw, "doi", wpath, nullable=True),
            metadata_source=_str(work_raw, "metadata_source", wpath, nullable=True),
            pith_arxiv_id=_arxiv_id(work_raw, "pith_arxiv_id", wpath, nullable=True),
            title=_str(work_raw, "title", wpath, nullable=True),
            venue=_str(work_raw, "venue", wpath, nullable=True),
            year=_int(work_raw, "year", wpath, nullable=True),
        )
        cited_arxiv_id = cited.arxiv_id if cited is not None else None
        facts.add("works", (work.work_id, work.observed_at),
                  (work.arxiv_id, work.doi, work.metadata_source, work.pith_arxiv_id, work.title, work.venue,
                   work.year), wpath)
    rpath = f"{path}.resolution"
    resolution_raw = _get(obj, "resolution", path)
    resolution = Resolution(
        observation_id=observation_id,
        observed_at=_z(resolution_raw, "observed_at", rpath),
        status=_enum(resolution_raw, "status", rpath, STATUSES),
        resolver_source=_str(resolution_raw, "resolver_source", rpath, nullable=True),
    )
    obs = Observation(
        observation_id=observation_id,
        citing_arxiv_id=citing.arxiv_id,
        reference_index=_int(citation, "reference_index", cpath),
        source=_str(citation, "source", cpath),
        source_observed_at=source_observed_at,
        cited_arxiv_id=cited_arxiv_id,
        work_id=work_id,
        printed_title=printed_title,
        printed_year=printed_year,
        citing=citing,
        cited=cited,
        work=work,
        resolution=resolution,
    )
    _add_paper(facts, citing, f"{cpath}.citing_paper")
    if cited is not None:
        _add_paper(facts, cited, f"{cpath}.cited_paper")
    facts.add("observations", (observation_id,),
              (obs.citing_arxiv_id, obs.reference_index, obs.source, obs.source_observed_at, obs.cited_arxiv_id,
               obs.work_id, obs.printed_title, obs.printed_year), path)
    # (whether the reference held its work link at that resolution: a link made later holds from then on)
    facts.add("resolutions", (observation_id, resolution.observed_at),
              (resolution.status, resolution.resolver_source, work_id is not None), rpath)

    npath = f"{path}.standing_notice"
    notice = _get(obj, "standing_notice", path)
    receipts = _list(notice, "source_receipts", npath)
    events = _list(notice, "events", npath)
    if work_id is not None:
        known = standing.setdefault(work_id, {"receipts": {}, "events": {}})
        for i, r in enumerate(receipts):
            p = f"{npath}.source_receipts[{i}]"
            receipt = Receipt(work_id, _str(r, "source", p), _off(r, "observed_at", p))
            facts.add("receipts", (work_id, receipt.source, receipt.observed_at), (), p)
            current = known["receipts"].get(receipt.source)
            if current is None or receipt.observed_at > current.observed_at:
                known["receipts"][receipt.source] = receipt
        for i, e in enumerate(events):
            p = f"{npath}.events[{i}]"
            event = Event(
                work_id=work_id,
                source=_str(e, "source", p),
                event_type=_enum(e, "event_type", p, EVENT_TYPES),
                observed_at=_off(e, "observed_at", p),
                reported_at=_off(e, "reported_at", p, nullable=True),
                notice_doi=_str(e, "notice_doi", p, nullable=True),
            )
            # The store keeps every event with its source's receipt at the event's instant (migration 0009),
            # and a notice shows each source's latest receipt: one earlier than the event, or none, is a
            # record the store could not have made, and would serve back with other receipts.
            shown = next((r for r in receipts if isinstance(r, dict) and r.get("source") == event.source), None)
            shown_at = _off(shown, "observed_at", p) if shown is not None else None
            if shown_at is None or shown_at < event.observed_at:
                raise DocumentError(
                    f"{p}.observed_at",
                    f"an event of {event.source} observed at {record.offset_time(event.observed_at)} needs a receipt "
                    f"of {event.source} at that instant (the standing rule: an event stands with its source's "
                    f"receipt), but the notice's latest receipt of {event.source} is "
                    + (record.offset_time(shown_at) or "absent"))
            key = (work_id, event.source, event.event_type, event.observed_at)
            facts.add("events", key, (event.reported_at, event.notice_doi), p)
            known["events"][key] = event
    elif receipts or events:
        raise DocumentError(npath, "a reference without a canonical work link carries no receipts or events")
    return obs


def parse_document(doc: Any) -> ParsedDocument:
    """Validate a v1 document and decompose it; raise DocumentError naming the first problem."""
    if not isinstance(doc, dict):
        raise DocumentError("$", f"expected a JSON object, found {_kind(doc)}")
    schema = _get(doc, "schema", "$")
    if schema != record.SCHEMA:
        raise DocumentError("$.schema", f"expected {record.SCHEMA!r}, found {schema!r}")
    as_of = _as_of(doc, "as_of", "$")
    caps_raw = _get(doc, "caps", "$")
    caps = Caps(
        inbound=_int(caps_raw, "inbound", "$.caps", minimum=0),
        outbound=_int(caps_raw, "outbound", "$.caps", minimum=0),
        database_statements=_int(caps_raw, "database_statements", "$.caps", minimum=1),
    )
    facts = Facts()
    paper = _paper(_get(doc, "paper", "$"), "$.paper", full=True)
    _add_paper(facts, paper, "$.paper")

    standing: dict[UUID, dict] = {}
    inbound = [_observation(o, f"$.inbound[{i}]", facts, standing) for i, o in enumerate(_list(doc, "inbound", "$"))]
    outbound = [_observation(o, f"$.outbound[{i}]", facts, standing)
                for i, o in enumerate(_list(doc, "outbound", "$"))]

    measurements = []
    for i, m in enumerate(_list(doc, "external_citation_measurements", "$")):
        p = f"$.external_citation_measurements[{i}]"
        measurement = Measurement(paper.arxiv_id, _str(m, "source", p), _z(m, "observed_at", p),
                                  _int(m, "count", p, minimum=0))
        facts.add("measurements", (paper.arxiv_id, measurement.source, measurement.observed_at),
                  (measurement.count,), p)
        measurements.append(measurement)

    counts = Counts(
        inbound=_declared_total(doc, len(inbound), caps.inbound, "inbound"),
        outbound=_declared_total(doc, len(outbound), caps.outbound, "outbound"),
    )
    for fact_time, where in _instants(paper, inbound + outbound, measurements, standing):
        if fact_time > as_of:
            raise DocumentError(where, f"observed after the document's as_of ({record.as_of_text(as_of)})")

    rows = RecordRows(
        as_of=as_of,
        paper=paper,
        counts=counts,
        inbound=inbound,
        outbound=outbound,
        measurements=measurements,
        standing={
            w: Standing(
                receipts=tuple(sorted(s["receipts"].values(), key=lambda r: r.source)),
                events=tuple(sorted(s["events"].values(), key=lambda e: (e.observed_at, e.source))),
            )
            for w, s in standing.items()
        },
        caps=caps,
    )
    builder = record.Prebuilt()
    rebuilt = record.build_record(rows, builder)
    # Equal canonical bytes are equal documents (same keys, values and JSON types): one comparison in
    # C for the common case; only a document that differs is walked, to name where. The rebuilt
    # observations' bytes were made for their digests already: the builder splices them in.
    if builder.canonical(rebuilt) != record.canonical_bytes(doc):
        _expect_same(rebuilt, doc, "$")
    return ParsedDocument(paper.arxiv_id, as_of, facts, rows)


def _declared_total(doc: dict, displayed: int, cap: int, direction: str) -> int:
    if direction == "inbound":
        lanes = _list(doc, "coverage", "$")
        lane = next((x for x in lanes if isinstance(x, dict) and x.get("lane") == "inbound_itemization"), None)
        if lane is None:
            raise DocumentError("$.coverage", "missing the inbound_itemization lane")
        total = _int(lane, "denominator", "$.coverage[inbound_itemization]", minimum=0)
    else:
        total = _int(_get(doc, "reference_resolution", "$"), "total_outbound_references", "$.reference_resolution",
                     minimum=0)
    if displayed != min(total, cap):
        raise DocumentError(
            f"$.{direction}",
            f"itemizes {displayed} observations, but the record declares {total} in all under a cap of {cap} "
            f"(expected {min(total, cap)})",
        )
    return total


def _instants(paper: PaperSnapshot, observations: list[Observation], measurements: list[Measurement],
              standing: dict[UUID, dict]):
    yield paper.observed_at, "$.paper.snapshot_observed_at"
    for o in observations:
        yield o.source_observed_at, f"observation {o.observation_id} source_observed_at"
        yield o.resolution.observed_at, f"observation {o.observation_id} resolution.observed_at"
        yield o.citing.observed_at, f"observation {o.observation_id} citing_paper.snapshot_observed_at"
        if o.work is not None:
            yield o.work.observed_at, f"observation {o.observation_id} cited_work.snapshot_observed_at"
    for m in measurements:
        yield m.observed_at, f"measurement {m.source} observed_at"
    for s in standing.values():
        for r in s["receipts"].values():
            yield r.observed_at, f"receipt {r.source} of work {r.work_id}"
        for e in s["events"].values():
            yield e.observed_at, f"event {e.event_type} of work {e.work_id}"


def _expect_same(expected: Any, found: Any, path: str) -> None:
    """Raise at the first place where the document differs from what its facts rebuild to."""
    if isinstance(expected, dict) and isinstance(found, dict):
        # Digests last: a changed field is named where it is, not as the digest it breaks.
        for key in sorted(set(expected) | set(found), key=lambda k: (k.endswith("_digest"), k)):
            if key not in found:
                raise DocumentError(f"{path}.{key}", f"missing; expected {record.canonical(expected[key])}")
            if key not in expected:
                raise DocumentError(f"{path}.{key}", "not a field of a v1 record")
            _expect_same(expected[key], found[key], f"{path}.{key}")
        return
    if isinstance(expected, list) and isinstance(found, list):
        for i, (e, f) in enumerate(zip(expected, found)):
            _expect_same(e, f, f"{path}[{i}]")
        if len(expected) != len(found):
            raise DocumentError(path, f"expected {len(expected)} items, found {len(found)}")
        return
    if type(expected) is not type(found) or expected != found:
        hint = ""
        if path.endswith("digest"):
            hint = " (the digest does not match the content it covers)"
        raise DocumentError(path, f"expected {record.canonical(expected)}, found {record.canonical(found)}{hint}")
