"""Importers of the open sources: Crossref, Retraction Watch, OpenAlex, arXiv metadata, OpenCitations.

`pith-graph import SOURCE [--observed-at INSTANT] FILE...`: each file is read as a stream (gzip when
it starts with gzip's magic bytes; `-` is standard input), its records become facts at one instant
(when the source was looked at), and the facts go through the same staging, set-based inserts,
change log and data version as v1 documents (app/ingest/store.py). One invocation is one
transaction: a file that breaks (bad JSON, CSV or gzip, a truncated download) stores nothing.

Works meet on their DOI (app/ingest/doi.py): a record about a DOI is attached to every work whose
snapshot has that DOI in any letter case; a DOI no work has yet gets a work of its own (its id a
UUID of the DOI, so a second import finds the same one). Every work a source reports on gets that
source's receipt at the instant, events included, so the standing rules see that it was checked.
"""

from __future__ import annotations

import codecs
import csv
import functools
import gzip
import hashlib
import html
import io
import itertools
import json
import os
import re
import sys
import time
import uuid
import zlib
from dataclasses import dataclass, field
from datetime import UTC, datetime, timezone
from email.utils import parsedate_to_datetime
from typing import IO, Any, Iterator

import asyncpg
import orjson
from asyncpg.pgproto.pgproto import UUID as PgUUID

from app.ingest.doi import arxiv_id_of_doi, normalize_doi
from app.ingest.document import Facts
from app.ingest.links import settle_links
from app.ingest.store import KEPT_BITS, TABLES, ImportRejected, Loader, append_ends

SOURCES = ("crossref", "retraction-watch", "openalex", "arxiv", "opencitations")
SOURCE_NAMES = {"crossref": "crossref", "retraction-watch": "retraction_watch", "openalex": "openalex",
                "arxiv": "arxiv", "opencitations": "opencitations"}
WORK_NAMESPACE = uuid.UUID("5b1c3f0e-9d0a-4c1e-8a51-0d3f0b7c2e11")
_NAMESPACE_BYTES = WORK_NAMESPACE.bytes
BATCH = 5_000

# Crossref update types that change a work's standing; the others (new_version, addendum,
# clarification, new_edition ...) are not standing events. A partial retraction leaves the work
# standing in part: it is recorded as a correction.
CROSSREF_EVENTS = {"retraction": "retraction", "withdrawal": "withdrawal", "removal": "withdrawal",
                   "expression_of_concern": "expression_of_concern", "correction": "correction",
                   "erratum": "correction", "corrigendum": "correction", "partial_retraction": "correction"}
# Crossref `relation` types that state the same notices again (the inverse of update-to).
CROSSREF_RELATIONS = {"is-retracted-by": "retraction", "has-retraction": "retraction",
                      "is-corrected-by": "correction", "has-correction": "correction",
                      "has-expression-of-concern": "expression_of_concern", "is-withdrawn-by": "withdrawal"}
# Sources that check a work's standing: their receipt says the work was looked at (OpenCitations and
# the arXiv metadata say nothing of standing).
STANDING_SOURCES = ("crossref", "retraction_watch", "openalex")
# Sources that describe a work only when no snapshot of it is there at their instant, or none with a title, or
# one by a source before them here that gave less: what a Crossref reference printed is no title, and a Retraction
# Watch row's title replaces it (in whichever order the two arrive, at one instant or in date order).
CROSSREF_REFERENCE = "crossref_reference"  # a work known only from a Crossref reference to it
FALLBACK_DESCRIBERS = (CROSSREF_REFERENCE, "opencitations", "retraction_watch")
# Two sources' descriptions of a work at one instant (a month's snapshots all stamped with the 1st): the one with a
# title stays, and of two with (or without) one, that of the source later here, whichever was imported first: the
# DOI's registrar, then OpenAlex, then the fallback describers. A description a v1 document stated always stays.
DESCRIBERS = (*FALLBACK_DESCRIBERS, "openalex", "crossref")


def outranks(source: str, other: str | None) -> bool:
    """A fallback describer's title replaces `other`'s description (one of a describer before it above)."""
    return source in FALLBACK_DESCRIBERS and other in FALLBACK_DESCRIBERS \
        and FALLBACK_DESCRIBERS.index(source) > FALLBACK_DESCRIBERS.index(other)
# Staged facts of one import with the same key: which one stands (app.ingest.store stages every batch).
DEDUPE = (("work_events", "work_id, source, event_type, observed_at", "reported_at DESC NULLS LAST, ctid DESC"),
          ("work_snapshots", "work_id, observed_at", "ctid DESC"),
          ("work_measurements", "work_id, source, observed_at", "ctid DESC"),
          ("paper_snapshots", "arxiv_id, observed_at", "ctid DESC"),
          ("paper_dois", "arxiv_id, observed_at", "ctid DESC"))
CSV_COLUMNS = {"retraction-watch": ("OriginalPaperDOI", "RetractionNature"), "opencitations": ("citing", "cited")}
RW_NATURES = {"retraction": "retraction", "correction": "correction", "expression of concern": "expression_of_concern",
              "reinstatement": "reinstatement"}


@dataclass
class WorkReport:
    """What one source says about one DOI in this import."""

    title: str | None = None
    venue: str | None = None
    year: int | None = None
    snapshot: bool = False  # the source describes the work (Crossref, OpenAlex; RW only for a new work)
    count: int | None = None  # the source's citation count of the work
    events: dict[str, tuple[datetime | None, str | None]] = field(default_factory=dict)  # type -> (reported, notice)

    def event(self, event_type: str, reported: datetime | None, notice: str | None) -> None:
        """The same notice stated twice is one event; of two of a type, the later one stands."""
        old = self.events.get(event_type)
        if old is None or (reported is not None and (old[0] is None or reported > old[0])) or \
                (old[1] is None and notice is not None and reported == old[0]):
            self.events[event_type] = (reported, notice)


@dataclass
class Reference:
    citing_arxiv_id: str
    index: int
    key: str  # what makes the observation's id (stable across imports)
    doi: str | None
    title: str | None
    year: int | None
    citing_doi: str | None = None  # OpenCitations, Crossref: the citing work, until it is known as an arXiv paper
    asserted_by: str | None = None  # Crossref: who asserted the reference's DOI (crossref, publisher)
    # OpenAlex: its work described only by a later snapshot, imported before this one: linked from that instant
    linked_at: datetime | None = None


@dataclass
class Summary:
    source: str
    records: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    first: dict[str, str] = field(default_factory=dict)  # each reason's first place (a record's line or number)
    unsure: int = 0  # works a record could not be read for: their standing left as it was (Importer.unsure)
    facts_added: int = 0
    linked: int = 0  # references kept unlinked by an earlier import, linked by this one
    taken_up: int = 0  # references kept until their arXiv paper was loaded, added by this (arXiv) import
    still_kept: int = 0  # references kept for its papers, of instants before the papers' first snapshot by then
    # An arXiv import: references counted, not kept, of works whose DOI it names as a paper's, by the snapshot
    # that gave them (source, instant): importing that snapshot again adds them.
    waiting: dict[tuple[str, str, str], int] = field(default_factory=dict)  # (source, instant, its files) -> n
    reread: int = 0  # such references added by reading their snapshots' files again (still there as they were)
    seconds: float = 0.0

    def skip(self, why: str, where: int | str | None = None) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + 1
        if where is not None and why not in self.first:
            self.first[why] = where if isinstance(where, str) else f"line {where}"

    def line(self) -> str:
        skipped = sum(self.skipped.values())
        detail = "; ".join(f"{n} {why}" + (f", the first at {self.first[why]}" if why in self.first else "")
                           for why, n in sorted(self.skipped.items()))
        rate = self.records / self.seconds if self.seconds else self.records
        return (f"{self.source}: {self.records} records, {self.facts_added} facts added, {skipped} skipped"
                + (f" ({detail})" if detail else "")
                + (f"; {self.unsure} works whose record could not be read kept their standing as it was (correct the "
                   "record and import the file again)" if self.unsure else "")
                + (f", {self.linked} kept references linked" if self.linked else "")
                + (f", {self.taken_up} references kept for these papers added" if self.taken_up else "")
                + (f"; {self.still_kept} references kept for these papers are of instants before their snapshots: "
                   "kept until an earlier snapshot of them is loaded" if self.still_kept else "")
                + reread_line(self.reread) + waiting_line(self.waiting)
                + f" in {self.seconds:.2f}s ({rate:.0f} records/s)")


def reread_line(n: int) -> str:
    """What an arXiv import (or a load) says of the counted lists it added by reading their files again."""
    return (f"; {n} references counted, not kept, for these papers' DOIs added, their snapshots' files read again"
            if n else "")


def waiting_line(waiting: dict[tuple[str, str, str], int]) -> str:
    """What an arXiv import (or a load) says of the references counted, not kept, for its papers' DOIs."""
    said = sorted(waiting.items(), key=lambda item: (item[0][1], item[0][0]))  # by instant, then source
    return "".join(f"; {n} references {source} gave at {at} for these papers' DOIs were not kept ({files}): import "
                   f"that snapshot again to add them" for (source, at, files), n in said)


def waiting_key(source: str, at: datetime, files: list[str],
                why: str = "changed or gone since") -> tuple[str, str, str]:
    """A snapshot whose counted lists could not be read again: its source, its instant as the command line takes
    it, and its files (as they were imported) with why."""
    named = ", ".join(files)
    return (source, at.astimezone(UTC).isoformat().replace("+00:00", "Z"),
            f"its file{'s' if len(files) > 1 else ''} {named}: {why}" if files else "read from standard input")


class Broken(Exception):
    """The file is not what its format says: where and why."""

    def __init__(self, where: str, message: str) -> None:
        self.where, self.message = where, message


_OPENALEX_ID = re.compile(r"^(?:https://openalex\.org/)?W\d+$", re.IGNORECASE)
_JSON_SOURCES = {"crossref": "a Crossref work (DOI)", "openalex": "an OpenAlex work (id https://openalex.org/W...)",
                 "arxiv": "an arXiv metadata record (id and versions)"}


def json_source_of(record: Any) -> str | None:
    """Which JSON source a record is by the keys only that source writes: Crossref's `DOI`, OpenAlex's work id,
    the arXiv snapshot's `id` with its `versions` (None: none of them, judged field by field as today)."""
    if not isinstance(record, dict):
        return None
    if isinstance(record.get("id"), str) and _OPENALEX_ID.match(record["id"]):
        return "openalex"
    if "DOI" in record:
        return "crossref"
    if isinstance(record.get("id"), str) and "versions" in record:
        return "arxiv"
    return None


def refuse_foreign(source: str, record: Any, where: str) -> None:
    """A record of another JSON source, imported as this one, is refused with its file: read as this source's,
    its fields would be taken for other facts (an arXiv record's DOI and title for an OpenAlex work's, with a
    receipt saying OpenAlex found nothing against it), or every record skipped and the import called done."""
    found = json_source_of(record)
    if found is not None and found != source and source in _JSON_SOURCES:
        raise Broken(where, f"{_JSON_SOURCES[found]}, not {_JSON_SOURCES[source].split(' (')[0]}: this file is "
                            f"imported with `pith-graph import {found}`")


# --- reading files ---------------------------------------------------------------------------------

try:  # ISA-L's inflate: the same gzip streams in well under half the time (a Crossref snapshot is mostly that)
    from isal.igzip import IGzipFile as _GzipFile
    from isal.isal_zlib import error as _IsalError
    _BROKEN_GZIP: tuple[type[BaseException], ...] = (EOFError, OSError, zlib.error, _IsalError)  # type: ignore[assignment]
except ImportError:  # pragma: no cover - a platform without its wheel
    _GzipFile = gzip.GzipFile  # type: ignore[assignment,misc]
    _BROKEN_GZIP = (EOFError, OSError, zlib.error)


def open_stream(path: str) -> IO[bytes]:
    raw: IO[bytes] = sys.stdin.buffer if path == "-" else open(path, "rb")
    head = raw.peek(2)[:2] if hasattr(raw, "peek") else b""
    if head == b"\x1f\x8b":
        return _GzipFile(fileobj=raw)  # type: ignore[return-value]
    return raw


class _Counting(io.RawIOBase):
    """The bytes read so far (of the decompressed stream), to say where a file broke."""

    def __init__(self, inner: IO[bytes]) -> None:
        self.inner, self.offset = inner, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        try:
            data = self.inner.read(len(buffer))
        except _BROKEN_GZIP as exc:
            raise Broken(self._where(), f"the gzip stream breaks off: {exc}") from None
        buffer[:len(data)] = data
        self.offset += len(data)
        return len(data)

    def _where(self) -> str:
        """Where a gzip stream broke: the file's bytes read by then (the compressed ones), and the decompressed."""
        try:
            read = self.inner.fileobj.tell()  # type: ignore[attr-defined]
        except (AttributeError, OSError, ValueError):
            return f"byte {self.offset} (decompressed)"
        return f"byte {read} of the file ({self.offset} bytes decompressed before it)"


def json_records(stream: IO[bytes], keys: tuple[str, ...]) -> Iterator[tuple[int | str, Any]]:
    """Records of a JSON file: JSON lines (one object a line), or one document whose records are under
    one of `keys` (e.g. {"items": [...]}, {"message": {"items": [...]}}, {"results": [...]}) or which is
    itself one record."""
    counting = _Counting(stream)
    buffered = io.BufferedReader(counting, 1 << 16)
    # JSON lines: the first line that is not blank is a whole object by itself, however long (an OpenAlex work
    # with its references passes 64 kB), after a byte order mark if the file begins with one.
    skipped, first = 0, buffered.readline()
    if first.startswith(codecs.BOM_UTF8):
        first = first[len(codecs.BOM_UTF8):]
    while first and not first.strip():
        skipped, first = skipped + 1, buffered.readline()
    head = _whole(first) if first.endswith(b"\n") else None
    if head is not None:
        for number, raw in enumerate(itertools.chain((first,), buffered), start=skipped + 1):
            try:  # (orjson: several times json's speed, and a refresh reads every line again)
                value = orjson.loads(raw) if head is None else head
                head = None
            except orjson.JSONDecodeError:
                if not raw.strip():
                    continue
                try:  # what orjson refuses (an integer past 64 bits, invalid input): json decides and explains
                    value = json.loads(raw)
                except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                    raise Broken(f"line {number}", f"not valid JSON: {exc}") from None
            if type(value) is dict and "message" not in value and not any(k in value for k in keys) \
                    and value.get("status") != "error":  # (most)
                yield number, value
                continue
            for i, record in enumerate(_records_of(value, keys)):
                yield (number if i == 0 else f"line {number}, record {i + 1}"), record
        return
    data = first + buffered.read()
    try:
        document = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise Broken(f"byte {getattr(exc, 'pos', 0)}", f"not valid JSON: {exc}") from None
    for i, record in enumerate(_records_of(document, keys)):
        yield f"record {i + 1}", record


def _whole(line: bytes) -> dict | None:
    """The line's object when it is one whole JSON object, else None."""
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        try:  # (what orjson refuses and json reads: an integer past 64 bits)
            value = json.loads(line)
        except ValueError:
            return None
    return value if isinstance(value, dict) else None


def _records_of(document: Any, keys: tuple[str, ...]) -> Iterator[Any]:
    """The records of a value: a REST answer's message, a list under one of `keys`, a list, or itself (an error
    answer saved as the file, Crossref's or OpenAlex's, is refused)."""
    if isinstance(document, dict) and (document.get("status") == "error"
                                       or ("error" in document and isinstance(document.get("message"), str))):
        said = document.get("message") if isinstance(document.get("message"), str) else document.get("error")
        raise Broken("record 1", f"an error answer, not records: {json.dumps(said)[:200]}")
    if isinstance(document, dict) and isinstance(document.get("message"), dict):
        document = document["message"]  # a Crossref REST answer: one work, or {"items": [...]}
    if isinstance(document, dict):
        for key in keys:
            if isinstance(document.get(key), list):
                yield from document[key]
                return
    if isinstance(document, list):
        yield from document
        return
    yield document


def csv_records(stream: IO[bytes], required: tuple[str, ...]) -> Iterator[tuple[str, dict[str, str]]]:
    """The rows of a CSV file whose header names the `required` columns (anything else, an empty file or an
    error page saved under the file's name, is refused)."""
    counting = _Counting(stream)
    text = io.TextIOWrapper(io.BufferedReader(counting, 1 << 16), encoding="utf-8-sig", errors="strict", newline="")
    reader = csv.reader(text)
    try:
        header = next(reader, None)
        if header is None:
            raise Broken("line 1", f"the file is empty: expected a CSV header naming {', '.join(required)}")
        names = [h.strip() for h in header]
        missing = [c for c in required if c not in names]
        if missing:
            raise Broken("line 1", f"the header has no {', '.join(missing)} column (it begins "
                                   f"{','.join(names)[:80]!r}): not this source's CSV")
        while names and names[-1] == "":
            names.pop()  # a header that ends with a comma: an empty 21st column
        while True:
            begun = reader.line_num + 1
            row = next(reader, None)
            if row is None:
                break
            if not "".join(row).strip():
                continue  # blank trailing rows
            if len(row) != len(names) and (len(row) < len(names) or "".join(row[len(names):]).strip()):
                # A quote left open runs on over the lines after it (one row of the wrong shape, and the rows
                # it swallowed never read): the file is broken here, not a record of it.
                ran = f" (it runs on to line {reader.line_num})" if reader.line_num > begun else ""
                raise Broken(f"line {begun}", f"a row of {len(row)} cells where the header names {len(names)}{ran}: "
                                              "a quote left open, or a line broken or joined")
            yield f"line {reader.line_num}", dict(zip(names, row))  # cells are stripped where they are read
    except UnicodeDecodeError as exc:
        raise Broken(f"byte {counting.offset}", f"not UTF-8 text: {exc}") from None
    except csv.Error as exc:
        raise Broken(f"line {reader.line_num}", f"not valid CSV: {exc}") from None


# --- field rules -----------------------------------------------------------------------------------


def _text(value: Any) -> str | None:
    if isinstance(value, list):
        value = next((v for v in value if isinstance(v, str) and v.strip()), None)
    if not isinstance(value, str) or not value.strip():
        return None
    return " ".join(html.unescape(value).split())


def _crossref_date(value: Any) -> datetime | None:
    if not isinstance(value, dict):
        return None
    stamp = value.get("date-time")
    if isinstance(stamp, str):
        try:
            return datetime.fromisoformat(stamp.replace("Z", "+00:00")).astimezone(timezone.utc)
        except ValueError:
            pass
    parts = value.get("date-parts")
    if isinstance(parts, list) and parts and isinstance(parts[0], list) and parts[0] and parts[0][0]:
        year, month, day = (list(parts[0]) + [1, 1])[:3]
        try:
            return datetime(int(year), int(month or 1), int(day or 1), tzinfo=timezone.utc)
        except (TypeError, ValueError):
            return None
    return None


def _year(value: Any) -> int | None:
    date = _crossref_date(value)
    return date.year if date is not None else None


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _kept(title: str | None, venue: str | None, year: int | None) -> int:
    """work_snapshots.kept of an import's description: the values its source did not give (kept from the work's
    latest earlier description), and the Pith paper, which only a v1 document states (migration 0024)."""
    return (not title) * KEPT_BITS["title"] | (not venue) * KEPT_BITS["venue"] | (not year) * KEPT_BITS["year"] \
        | KEPT_BITS["pith_arxiv_id"]


@functools.lru_cache(maxsize=4096)
def _rw_date(value: str) -> datetime | None:
    """Retraction Watch's `M/D/YYYY 0:00` (the day, at midnight UTC); `YYYY-MM-DD` (a re-saved file) too."""
    if match := re.match(r"^\s*(\d{1,2})/(\d{1,2})/(\d{4})", value or ""):
        month, day, year = (int(g) for g in match.groups())
    elif match := re.match(r"^\s*(\d{4})-(\d{2})-(\d{2})", value or ""):
        year, month, day = (int(g) for g in match.groups())
    else:
        return None
    try:
        return datetime(year, month, day, tzinfo=timezone.utc)
    except ValueError:
        return None


def collapse(title: str) -> str:
    return " ".join(title.split())


# --- the sources -----------------------------------------------------------------------------------


class Importer:
    """One invocation: every file's records, staged and merged in one transaction at one instant."""

    def __init__(self, conn: asyncpg.Connection, source: str, observed_at: datetime, *, partial: bool = False,
                 progress: IO[str] | None = None, only: set[str] | None = None) -> None:
        # only: the citing DOIs whose records alone are read (a snapshot read again for the lists it counted,
        # take_up_kept): an excerpt, so no index counts are taken from it.
        self.conn, self.source, self.at, self.partial = conn, source, observed_at, partial or only is not None
        self.only = only
        self.name = SOURCE_NAMES[source]
        self.whole_database = source == "retraction-watch" and not partial
        self.progress = progress
        self.summary = Summary(source)
        self.reports: dict[str, WorkReport] = {}
        self.references: list[Reference] = []
        self.papers: dict[str, tuple] = {}
        self.paper_dois: dict[str, str] = {}
        self.cited_counts: dict[str, int] = {}  # OpenCitations: citing rows per cited DOI
        self.paper_counts: dict[str, tuple[int, list[tuple[int, int]]]] = {}  # OpenAlex: an arXiv paper's counts
        self.reference_lists: dict[str, list] = {}  # Crossref: each work's `reference` list, by the work's DOI
        # OpenAlex: every work's id (to link references to works described anywhere in the import) and the
        # arXiv works' references, spilled to temporary tables batch by batch, resolved at the end.
        self.openalex_ids: list[tuple[str, str | None, str | None, int | None]] = []
        self.openalex_refs: list[tuple[str, int, str]] = []
        self.known_work_ids: dict[str, list[tuple[uuid.UUID, Any]]] = {}
        # References of arXiv papers not loaded by this instant (migration 0026): kept, each as (citing, key, JSON);
        # and the Crossref lists of DOIs no arXiv paper has, counted as (DOI, references).
        self.kept: list[tuple[str, str, str]] = []
        self.kept_count = 0  # references kept by this import
        self._keeping = False  # the batches' kept references spill to a temporary table (_spill_kept)
        self.unkept: list[tuple[str, int]] = []
        self.counted_any = False  # lists were counted, not kept: the files are remembered (migration 0027)
        self.locked = False
        self.import_id = uuid.uuid4()
        self.usable_rows = 0  # Retraction Watch: rows with a DOI and a known nature
        # DOIs with a record this import could not read (a Retraction Watch row of an unknown nature, an OpenAlex
        # is_retracted neither true nor false): the import checks neither them nor their events, so what a
        # record could not say never ends what an earlier one did.
        self.unsure: set[str] = set()

    async def run(self, paths: list[str], *, kept_for: list[str] | None = None) -> Summary:
        """Import the files; or, with kept_for (and no files), add the references this source's snapshot of this
        instant gave for those citing ids and DOIs, kept until their arXiv papers were loaded."""
        started = self.started = time.monotonic()
        taking_up: list[Any] = []
        async with self.conn.transaction():
            # Each batch probes a few thousand keys: a plan's JIT compilation or parallel workers cost more than
            # the probe (and the merges are inserts, which run in one process anyway).
            # The merges sort and hash the whole stage (hundreds of thousands of rows on a refresh): in memory,
            # not in spill files (the 4 MB default spills every one of them to disk).
            await self.conn.execute("SET LOCAL jit = off; SET LOCAL max_parallel_workers_per_gather = 0; "
                                    "SET LOCAL work_mem = '64MB'")
            if self.source == "arxiv":  # (from the start: its papers are uncommitted until the end)
                await self._deciding()
            self.loader = Loader(self.conn, f"{self.source} import", staged_unique=True)  # see DEDUPE
            await self.loader.start()
            for path in paths:
                await self._file(path)
            if self.whole_database and not self.usable_rows:
                # (Every work would be found clean: each retraction the database reported would end here.)
                raise ImportRejected(paths[-1], "no row with a usable OriginalPaperDOI and RetractionNature: the whole "
                                                "Retraction Watch database has tens of thousands; an excerpt is "
                                                "imported with --partial")
            if kept_for:
                await self._take_kept(kept_for)
            await self._flush(final=True)
            await self._store_kept()
            if self.counted_any and self.only is None:
                await self._remember_files(paths)
            self.summary.taken_up -= self.kept_count if kept_for else 0  # (kept again: no paper by this instant)
            if self.whole_database:
                # The file is the whole database: every work with a DOI was checked, and found clean
                # unless a row said otherwise.
                await self.conn.execute(
                    "INSERT INTO stage_standing_receipts (work_id, source, observed_at, origin) "
                    "SELECT DISTINCT work_id, $1::text, $2::timestamptz, 'the whole Retraction Watch database' "
                    "FROM work_snapshots WHERE doi IS NOT NULL AND observed_at <= $2::timestamptz", self.name, self.at)
                await self.conn.execute("INSERT INTO whole_source_checks VALUES ($1, $2) ON CONFLICT DO NOTHING",
                                        self.name, self.at)
            await self.loader.flush()
            # A source that describes a work only when nothing else does (Retraction Watch, OpenCitations) did
            # so at a later instant than this import's description: date order would not have, so it goes (unless
            # its title replaces this description's, FALLBACK_DESCRIBERS: that one stays). Another source's
            # description at this very instant goes where this one is better (DESCRIBERS), a v1 document's never
            # (its snapshots keep no values: kept is NULL).
            # A probe of each staged work's later snapshots by key: as a join, the planner took the statistics of
            # work_snapshots from before the last import (no Retraction Watch snapshot among them: "1 row") and
            # compared every staged snapshot with each of 47,500 stored ones in a nested loop (95 s of CPU for
            # 20,000 works; over 9 minutes seen), whether or not the stage was analyzed.
            await self.conn.execute(
                "DELETE FROM work_snapshots AS w WHERE (w.work_id, w.observed_at) IN ("
                "SELECT x.work_id, x.observed_at FROM stage_work_snapshots AS s CROSS JOIN LATERAL ("
                "SELECT l.work_id, l.observed_at FROM work_snapshots AS l WHERE l.work_id = s.work_id "
                "AND (l.observed_at > s.observed_at AND l.metadata_source = any($1::text[]) "
                "AND (s.title IS NOT NULL OR l.title IS NULL) AND NOT (l.title IS NOT NULL "
                "AND coalesce(array_position($1::text[], s.metadata_source), 1000) "
                "< array_position($1::text[], l.metadata_source)) "
                "OR l.observed_at = s.observed_at AND l.metadata_source IS DISTINCT FROM s.metadata_source "
                "AND l.kept IS NOT NULL AND (s.title IS NOT NULL, coalesce(array_position($2::text[], "
                "s.metadata_source), 0)) > (l.title IS NOT NULL, coalesce(array_position($2::text[], "
                "l.metadata_source), 0))) OFFSET 0) AS x)", list(FALLBACK_DESCRIBERS), list(DESCRIBERS))
            # Another source's description at this instant that stayed (two sources' snapshots stamped with one
            # date): this one is counted, not stored (a work has one description an instant); the rest of what
            # this import says of the work (its check, events, counts, references) is stored.
            dropped = await self.conn.fetchval(
                "WITH gone AS (DELETE FROM stage_work_snapshots AS s WHERE EXISTS (SELECT 1 FROM work_snapshots AS w "
                "WHERE w.work_id = s.work_id AND w.observed_at = s.observed_at "
                "AND w.metadata_source IS DISTINCT FROM s.metadata_source) RETURNING 1) SELECT count(*) FROM gone")
            if dropped:
                why = "work descriptions at an instant another source described the work at (that one kept)"
                self.summary.skipped[why] = self.summary.skipped.get(why, 0) + dropped
            # Works described by this import were also checked by every whole-database check since.
            await self.conn.execute(
                "INSERT INTO stage_standing_receipts (work_id, source, observed_at, origin) "
                "SELECT DISTINCT s.work_id, c.source, c.observed_at, 'the whole ' || c.source || ' database' "
                "FROM stage_work_snapshots AS s JOIN whole_source_checks AS c ON c.observed_at >= s.observed_at "
                "WHERE s.doi IS NOT NULL")
            if self.unsure:  # (after every receipt this import stages: the whole database's, the later checks')
                self.summary.unsure = await leave_unsure(self.conn, sorted(self.unsure), self.name)
            # A DOI met again in a later batch (rows of one paper apart in the file, a work listed twice):
            # one fact per key, the latest-reported event and the last description read.
            for table, key, order in DEDUPE:
                await self.conn.execute(
                    f"DELETE FROM stage_{table} WHERE ctid NOT IN (SELECT DISTINCT ON ({key}) ctid FROM stage_{table} "
                    f"ORDER BY {key}, {order})")
            # Temporary tables have no statistics until analyzed: without them the merge's joins against
            # the stage are planned as nested loops (minutes at a few hundred thousand rows).
            await self.conn.execute("; ".join(f"ANALYZE stage_{t.name}" for t in TABLES))
            # The stored events and their ends, as the runs' statements below join them: an import just before this
            # one (a first import, then its refresh) leaves statistics that know none of its rows, and the
            # planner then probes an index per staged event instead of one hash join (seconds per statement).
            if self.name in STANDING_SOURCES:
                await self.conn.execute("ANALYZE work_events; ANALYZE work_event_ends")
            # This check of the source, among its others of the same works (before or after it: snapshots
            # arrive in any order), decides where each event's run of reports begins and ends.
            await observed_again(self.conn, self.name)
            await reconcile_events(self.conn, self.name, self.at)
            self.summary.facts_added = await self.loader.finish()
            self.summary.facts_added += await write_event_ends(self.conn, self.name)
            # A receipt a v1 document implied by an event alone is this import's whole check now (migration 0025).
            await self.conn.execute(
                "DELETE FROM implied_checks AS i USING stage_standing_receipts AS s WHERE i.work_id = s.work_id "
                "AND i.source = s.source AND i.observed_at = s.observed_at "
                "AND EXISTS (SELECT 1 FROM implied_checks LIMIT 1)")
            await settle_links(self.conn)
            if self.source == "arxiv":
                taking_up = await kept_for_staged_papers(self.conn, self.summary.waiting)
        done = await take_up_kept(self.conn, taking_up, self.summary.waiting)
        self.summary.taken_up += done.taken
        self.summary.still_kept, self.summary.reread = done.again, done.reread
        self.summary.facts_added += done.added
        self.summary.seconds = time.monotonic() - started
        if self.progress is not None:
            print("", file=self.progress)  # the progress line ends
        return self.summary

    async def _file(self, path: str) -> None:
        try:
            stream = open_stream(path)
        except OSError as exc:
            raise ImportRejected(path, f"cannot read: {exc.strerror}") from None
        last = time.monotonic()
        try:
            if self.source in ("retraction-watch", "opencitations"):
                reader = csv_records(stream, CSV_COLUMNS[self.source])
            elif self.source == "arxiv" and looks_like_xml(stream):
                reader = arxiv_oai_records(_Counting(stream))
            else:
                reader = json_records(stream, ("items", "results"))  # type: ignore[assignment]
            for where, record in reader:
                if self.only is not None and self._citing_doi(record) not in self.only:
                    continue
                self.summary.records += 1
                refuse_foreign(self.source, record, where if isinstance(where, str) else f"line {where}")
                self.read(record, where)  # (the readers count what they skip; none names a record)
                if len(self.reports) + len(self.references) + len(self.papers) + len(self.openalex_refs) \
                        + len(self.reference_lists) >= BATCH:
                    await self._flush()
                if self.progress is not None and time.monotonic() - last >= 0.5:
                    last = time.monotonic()
                    self._progress(path, stream)
        except Broken as exc:
            raise ImportRejected(path, exc.message, path=exc.where) from None
        finally:
            if path != "-":
                stream.close()

    def _citing_doi(self, record: Any) -> str | None:
        """The DOI whose references a Crossref work or an OpenCitations row gives (the `only` filter)."""
        if not isinstance(record, dict):
            return None
        return normalize_doi(record.get("DOI")) if self.source == "crossref" else _oc_doi(record.get("citing"))

    async def _remember_files(self, paths: list[str]) -> None:
        """The files whose lists were counted, as they are now, to be read again when a paper needs them."""
        rows = [(self.source, self.at, self.import_id, position, *found) for position, path in enumerate(paths)
                if path != "-" and (found := file_identity(path)) is not None]
        await self.conn.executemany("INSERT INTO counted_reference_files VALUES ($1, $2, $3, $4, $5, $6, $7)", rows)

    def _progress(self, path: str, stream: Any) -> None:
        """One line on the terminal, redrawn: a bar of the file read (when its size is known), records, rate."""
        rate = self.summary.records / max(time.monotonic() - self.started, 1e-6)
        bar = ""
        try:
            raw = getattr(stream, "fileobj", stream)
            done, size = raw.tell(), os.fstat(raw.fileno()).st_size
            filled = int(30 * done / size) if size else 0
            bar = "[" + "#" * filled + "-" * (30 - filled) + "] "
        except (OSError, ValueError, AttributeError):
            pass
        print(f"\r{bar}{path}: {self.summary.records:,} records ({rate:,.0f}/s)", end="", file=self.progress,
              flush=True)

    def read(self, record: Any, where: str) -> None:
        {"crossref": self._crossref, "retraction-watch": self._retraction_watch, "openalex": self._openalex,
         "arxiv": self._arxiv, "opencitations": self._opencitations}[self.source](record, where)

    def report(self, doi: str) -> WorkReport:
        found = self.reports.get(doi)
        if found is None:
            found = self.reports[doi] = WorkReport()
        return found

    # Crossref: the public data file, the 2025 JSON-lines layout, REST answers.
    def _crossref(self, work: Any, where: str) -> None:
        if not isinstance(work, dict):
            return self.summary.skip("records that are not JSON objects", where)
        doi = normalize_doi(work.get("DOI"))
        if doi is None:
            return self.summary.skip("works without a usable DOI", where)
        report = self.report(doi)
        report.snapshot = True
        report.title = _text(work.get("title"))
        report.venue = _text(work.get("container-title"))
        report.year = _year(work.get("issued")) or _year(work.get("published"))
        report.count = _count(work.get("is-referenced-by-count"))
        for update in work.get("updated-by") or ():  # on the original: the notices about it
            if isinstance(update, dict) and update.get("type") in CROSSREF_EVENTS:
                report.event(CROSSREF_EVENTS[update["type"]], _crossref_date(update.get("updated")),
                             normalize_doi(update.get("DOI")))
        for update in work.get("update-to") or ():  # on a notice: the event is the target's
            target = normalize_doi(update.get("DOI")) if isinstance(update, dict) else None
            if target is not None and update.get("type") in CROSSREF_EVENTS:
                self.report(target).event(CROSSREF_EVENTS[update["type"]], _crossref_date(update.get("updated")), doi)
        # The work's reference list, in order: outbound observations of the arXiv paper whose DOI the work's
        # is (kept until the batch's papers are looked up), each with the DOI Crossref gives and who asserted it.
        # (Read once the batch's papers are known: most works are no arXiv paper's, and their lists are only counted.)
        if isinstance(work.get("reference"), list) and work["reference"]:
            self.reference_lists[doi] = work["reference"]
        relation = work.get("relation")
        if isinstance(relation, dict):
            for kind, event_type in CROSSREF_RELATIONS.items():
                for item in relation.get(kind) or ():
                    notice = normalize_doi(item.get("id")) if isinstance(item, dict) else None
                    if notice is not None and not any(n == notice for _, n in report.events.values()):
                        report.event(event_type, None, notice)
        return None

    # Retraction Watch: the CSV, one row per notice, keyed by the original paper's DOI.
    def _retraction_watch(self, row: dict[str, str], where: str) -> None:
        doi = normalize_doi(row.get("OriginalPaperDOI"))
        if doi is None:
            return self.summary.skip("rows without a usable OriginalPaperDOI", where)
        nature = RW_NATURES.get((row.get("RetractionNature") or "").strip().lower())
        if nature is None:
            self.unsure.add(doi)
            return self.summary.skip("rows with an unknown RetractionNature (Retraction, Correction, Expression of "
                                     "concern or Reinstatement)", where)
        self.usable_rows += 1
        report = self.report(doi)
        reported = _rw_date(row.get("RetractionDate", ""))
        if reported is None and (row.get("RetractionDate") or "").strip():
            # (The event is kept, without its date: it is then ordered at its observation, docs/standing.md.)
            self.summary.skip("RetractionDate values that are no date (M/D/YYYY or YYYY-MM-DD; the event kept undated)",
                              where)
        report.event(nature, reported, normalize_doi(row.get("RetractionDOI")))
        # Described only if no work has the DOI yet (decided when the batch is written).
        report.title = report.title or _text(row.get("Title"))
        report.venue = report.venue or _text(row.get("Journal"))
        date = _rw_date(row.get("OriginalPaperDate", ""))
        report.year = report.year or (date.year if date else None)
        return None

    # OpenAlex: works as JSON lines (the snapshot) or API JSON (one work, or `results`).
    def _openalex(self, work: Any, where: str) -> None:
        if not isinstance(work, dict):
            return self.summary.skip("records that are not JSON objects", where)
        doi = normalize_doi(work.get("doi"))
        arxiv = _openalex_arxiv_id(work, doi)
        if doi is None and arxiv is not None:
            doi = f"10.48550/arxiv.{arxiv.lower()}"  # the arXiv DOI DataCite registers for every paper
        wid = work.get("id") if isinstance(work.get("id"), str) else None
        year = work.get("publication_year") if isinstance(work.get("publication_year"), int) else None
        title = _text(work.get("title") or work.get("display_name"))
        if wid:
            self.openalex_ids.append((wid, doi, title, year))
        if doi is None and arxiv is None:
            return self.summary.skip("works without a DOI or arXiv id", where)
        if doi is not None:
            report = self.report(doi)
            report.snapshot = True
            report.title, report.year = title, year
            location = work.get("primary_location") if isinstance(work.get("primary_location"), dict) else {}
            source = location.get("source") if isinstance(location.get("source"), dict) else {}
            host = work.get("host_venue") if isinstance(work.get("host_venue"), dict) else {}
            report.venue = _text(source.get("display_name")) or _text(host.get("display_name"))
            report.count = _count(work.get("cited_by_count"))
            if report.count is None and work.get("cited_by_count") is not None:
                self.summary.skip("cited_by_count values that are no count (not written)", where)
            if work.get("is_retracted") is True:
                report.event("retraction", None, None)
            elif work.get("is_retracted") not in (False, None):
                self.unsure.add(doi)
                self.summary.skip("works whose is_retracted is neither true nor false", where)
        if arxiv is not None:
            # The counts are the arXiv paper's too: its externalCitationMeasurements, with counts_by_year.
            count = _count(work.get("cited_by_count"))
            if count is not None:
                by_year = work.get("counts_by_year")
                listed: list[Any] = by_year if isinstance(by_year, list) else []
                years = [(y["year"], y["cited_by_count"]) for y in listed
                         if isinstance(y, dict) and isinstance(y.get("year"), int)
                         and _count(y.get("cited_by_count")) is not None]
                for _ in range(len(listed) - len(years)):
                    self.summary.skip("counts_by_year entries without an integer year and count", where)
                self.paper_counts[arxiv] = (count, years)
            for i, ref in enumerate(work.get("referenced_works") or (), start=1):
                if isinstance(ref, str):
                    self.openalex_refs.append((arxiv, i, ref))
                else:  # (the others keep their places in the list: a reference's index is its place)
                    self.summary.skip("referenced_works entries that are no OpenAlex id", where)
        return None

    # arXiv metadata: the snapshot (JSON lines) here; OAI-PMH arXivRaw XML through arxiv_oai_records.
    def _arxiv(self, record: Any, where: str) -> None:
        paper = arxiv_paper(record)
        if isinstance(paper, str):  # why it holds none
            return self.summary.skip(paper, where)
        arxiv_id, title, versions, category, doi = paper
        self.papers[arxiv_id] = (title, len(versions), category, versions[0], versions[-1])
        if doi is not None:
            self.paper_dois[arxiv_id] = doi
        return None

    # OpenCitations: COCI / Index CSV, one citation a row.
    def _opencitations(self, row: dict[str, str], where: str) -> None:
        citing, cited = _oc_doi(row.get("citing")), _oc_doi(row.get("cited"))
        if cited is None:
            return self.summary.skip("rows without a usable cited DOI", where)
        self.cited_counts[cited] = self.cited_counts.get(cited, 0) + 1
        if citing is None:
            return self.summary.skip("citations without a usable citing DOI" + self._counted_for_the_cited(), where)
        self.references.append(Reference("", 0, f"opencitations:{citing}:{cited}", cited, None, None,
                                         citing_doi=citing))
        return None

    def _counted_for_the_cited(self) -> str:
        """How an OpenCitations citation that is no observation still counts: in the cited work's count (the
        whole index), or not at all (an excerpt, --partial)."""
        return " (an excerpt: not counted)" if self.partial else " (counted for the cited work)"

    # --- writing ------------------------------------------------------------------------------------

    async def _flush(self, final: bool = False) -> None:
        if final:
            # An excerpt of the index (--partial) holds citations, not the index's counts of them.
            for doi, count in self.cited_counts.items() if not self.partial else ():
                self.report(doi).count = count
            self.cited_counts = {}
        facts = Facts()
        at = self.at
        if self.paper_counts:
            for arxiv_id, (count, _) in self.paper_counts.items():
                facts.measurements[(arxiv_id, self.name, at)] = (count,)
            await self.conn.executemany(
                "INSERT INTO external_measurement_years VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
                [(a, self.name, at, year, n) for a, (_, years) in self.paper_counts.items() for year, n in years])
            self.paper_counts = {}
        if self.papers:
            for arxiv_id, (title, versions, category, submitted, updated) in self.papers.items():
                facts.papers[(arxiv_id, at)] = (title, versions, category, submitted, updated)
            for arxiv_id, doi in self.paper_dois.items():
                facts.paper_dois[(arxiv_id, at)] = (doi,)
            self.papers, self.paper_dois = {}, {}
        if self.reports:
            known = await self._works([d for d in self.reports if d not in self.known_work_ids])
            for doi, report in self.reports.items():
                for work_id, latest in known.get(doi) or self.known_work_ids.get(doi) or ():
                    self._work_facts(facts, work_id, doi, report, latest)
            self.reports = {}
            if self.source != "opencitations":
                self.known_work_ids = {}  # nothing later needs them: memory stays bounded by the batch
        if self.source == "openalex":  # (an index on the spilled ids keeps the references' lookups cheap)
            await self._spill_openalex()
            if final:
                await self._remember_openalex_ids()
                await self._openalex_references()
                await self._link_kept_references()
        if self.reference_lists:
            await self._crossref_references()
        if self.references:
            await self._references(facts)
        await self._stage(facts)
        if self.kept or self.unkept:
            await self._spill_kept()

    async def _crossref_references(self) -> None:
        """The reference lists of the batch's works that are arXiv papers (their journal DOI, or an arXiv
        DOI), as references of those papers in the lists' order; the others' are counted as skipped."""
        lists, self.reference_lists = self.reference_lists, {}
        await self._deciding()
        papers = await self._papers_of_dois(list(lists))
        for doi, refs in lists.items():
            citing = papers.get(doi) or arxiv_id_of_doi(doi)
            if citing is None:
                why = "references of works that are no loaded arXiv paper's"
                self.summary.skipped[why] = self.summary.skipped.get(why, 0) + len(refs)
                self.unkept.append((doi, len(refs)))
                continue
            for i, ref in enumerate(refs, start=1):
                if not isinstance(ref, dict):
                    self.summary.skip("reference entries that are not JSON objects")
                    continue
                year = ref.get("year")
                printed = (_text(ref.get("unstructured")) or _text(ref.get("article-title"))
                           or _text(ref.get("volume-title")) or _text(ref.get("journal-title")))
                asserted = ref.get("doi-asserted-by")
                self.references.append(Reference(
                    citing, i, f"crossref:{doi}:{ref.get('key') or i}", normalize_doi(ref.get("DOI")), printed,
                    int(year[:4]) if isinstance(year, str) and year[:4].isdigit() else None,
                    asserted_by=asserted if isinstance(asserted, str) else None))

    async def _deciding(self) -> None:
        """Before deciding which citing papers are loaded: where no arXiv import or load is committing one."""
        if not self.locked:
            await lock_kept_references(self.conn)
            self.locked = True

    async def _papers_of_dois(self, dois: list[str]) -> dict[str, str]:
        """The arXiv paper each DOI was the journal DOI of, as of this import's instant (date order's answer)."""
        return {r["doi"]: r["arxiv_id"] for r in await self.conn.fetch(
            "SELECT DISTINCT ON (doi) doi, arxiv_id FROM paper_dois WHERE doi = any($1::text[]) AND observed_at <= $2 "
            "ORDER BY doi, observed_at DESC", dois, self.at)}

    async def _take_kept(self, citing: list[str]) -> None:
        """The references this source's snapshot of this instant gave for these citing ids and DOIs, kept until
        their papers were loaded (_keep): read back as the snapshot's import read them, and added by the same path
        (what still has no paper by this instant is kept again). An OpenAlex reference's work is looked up again:
        another snapshot may have described it since."""
        rows = await self.conn.fetch(
            "DELETE FROM kept_references WHERE citing = any($1::text[]) AND source = $2 AND observed_at = $3 "
            "RETURNING reference", citing, self.source, self.at)
        refs = [Reference(*[*r[:8], datetime.fromisoformat(r[8]) if r[8] else None])
                for r in (json.loads(row["reference"]) for row in rows)]
        if self.source == "openalex":
            described = {r["wid"]: r for r in await self.conn.fetch(
                "SELECT wid, doi, observed_at FROM openalex_work_ids WHERE wid = any($1::text[])",
                list({r.title for r in refs if r.title and (r.doi is None or r.linked_at is not None)}))}
            for r in refs:
                k = described.get(r.title or "")
                if k is not None and (r.doi is None or r.linked_at is not None):
                    r.doi, r.linked_at = k["doi"], k["observed_at"] if k["observed_at"] > self.at else None
        refs.sort(key=lambda r: (r.citing_arxiv_id, r.index, r.key))
        self.references = refs
        self.summary.taken_up = len(refs)

    def _keep(self, r: Reference, citing: str) -> None:
        self.kept_count += 1
        self.kept.append((citing, r.key, orjson.dumps(
            (r.citing_arxiv_id, r.index, r.key, r.doi, r.title, r.year, r.citing_doi, r.asserted_by,
             r.linked_at.isoformat() if r.linked_at else None)).decode()))

    async def _spill_kept(self) -> None:
        """The batch's kept references and counted lists, to temporary tables (memory stays bounded by the batch)."""
        if not self._keeping:
            await self.conn.execute("CREATE TEMP TABLE stage_kept (citing text, key text, reference jsonb) "
                                    "ON COMMIT DROP")
            self._keeping = True
        if self.kept:
            await self.conn.copy_records_to_table("stage_kept", records=self.kept)
        if self.unkept:
            self.counted_any = True
            counted: dict[str, int] = {}
            for doi, n in self.unkept:
                counted[doi] = counted.get(doi, 0) + n
            await self.conn.execute("INSERT INTO skipped_reference_lists VALUES ($1, $2, $3, $4, $5)", self.source,
                                    self.at, self.import_id, list(counted), list(counted.values()))
        self.kept, self.unkept = [], []

    async def _store_kept(self) -> None:
        """The references kept (and lists counted) by this import, at its instant: the same snapshot imported
        again replaces its own."""
        if self.kept_count:
            await self.conn.execute(
                "INSERT INTO kept_references SELECT DISTINCT ON (citing, key) citing, $1, $2, key, reference "
                "FROM stage_kept ORDER BY citing, key, ctid DESC "
                "ON CONFLICT (citing, source, observed_at, key) DO UPDATE SET reference = EXCLUDED.reference",
                self.source, self.at)

    async def _stage(self, facts: Facts) -> None:
        """Straight into the staging tables (the facts are one per key already): the merge and the
        per-fact origins a v1 document needs would cost more than the rest of the import."""
        await self.loader.stage_rows({t.fact: [k + v for k, v in getattr(facts, t.fact).items()] for t in TABLES},
                                     f"{self.source} import")

    async def _works(self, dois: list[str]) -> dict[str, list[tuple[uuid.UUID, Any]]]:
        """Every work with each DOI (any case), with its latest snapshot; a new one where there is none."""
        # What a work is at this import's instant: its latest snapshot by then (None before its first), so a
        # snapshot imported after a later one describes the work as date order would have; of this very instant,
        # only this source's own (another source's there is settled by DESCRIBERS, whichever came first).
        # One index probe per DOI (the lateral join): the planner has no statistics of lower(doi) and scans
        # every snapshot for `lower(doi) = any($1)` (a batch of 5,000 DOIs: 0.8 s against 0.2 s).
        rows = await self.conn.fetch(
            "SELECT DISTINCT ON (w.work_id) d.doi, w.work_id, "
            "w.observed_at < $2 OR w.observed_at = $2 AND w.metadata_source = any($3::text[]) AS then_known, "
            "w.arxiv_id, w.pith_arxiv_id, w.title, w.venue, w.year, w.metadata_source "
            "FROM unnest($1::text[]) AS d(doi) CROSS JOIN LATERAL (SELECT * FROM work_snapshots AS x "
            "WHERE lower(x.doi) = d.doi AND x.doi IS NOT NULL OFFSET 0) AS w "
            "ORDER BY w.work_id, 3 DESC, w.observed_at DESC", dois, self.at,
            [self.name, CROSSREF_REFERENCE] if self.source == "crossref" else [self.name])  # (its own descriptions)
        found: dict[str, list[tuple[uuid.UUID, Any]]] = {}
        for row in rows:
            found.setdefault(row["doi"], []).append((row["work_id"], row if row["then_known"] else None))
        for doi in dois:
            if doi not in found:
                found[doi] = [(work_id_of_doi(doi), None)]
        self.known_work_ids.update(found)
        return found

    def _work_facts(self, facts: Facts, work_id: uuid.UUID, doi: str, report: WorkReport, latest: Any) -> None:
        at, source = self.at, self.name
        # A work is described by a source that describes works, or by any source that names it when it has no
        # snapshot yet, or no title (Retraction Watch's row title fills a work OpenCitations made).
        describe = report.snapshot or latest is None or report.title is not None and (
            latest["title"] is None or outranks(source, latest["metadata_source"]))
        if describe:
            arxiv_id = arxiv_id_of_doi(doi)
            keep = latest if latest is not None else {}
            facts.works[(work_id, at)] = (
                keep.get("arxiv_id") or arxiv_id, doi, source, keep.get("pith_arxiv_id"),
                report.title or keep.get("title"), report.venue or keep.get("venue"), report.year or keep.get("year"),
                _kept(report.title, report.venue, report.year))
        # (The whole Retraction Watch database's check gives every work described by then its receipt: those
        # need none of their own, and a refresh stages each once, not twice.)
        if source in STANDING_SOURCES and not (self.whole_database and latest is not None):
            facts.receipts[(work_id, source, at)] = ()
        for event_type, (reported, notice) in report.events.items():
            facts.events[(work_id, source, event_type, at)] = (reported, notice)
        if report.count is not None:
            facts.work_measurements[(work_id, source, at)] = (report.count,)

    async def _spill_openalex(self) -> None:
        if not hasattr(self, "_spilled"):
            await self.conn.execute(
                "CREATE TEMP TABLE openalex_works (wid text, doi text, title text, year int) ON COMMIT DROP; "
                "CREATE INDEX ON openalex_works (wid); "
                "CREATE TEMP TABLE openalex_refs (citing text, idx int, ref text) ON COMMIT DROP; "
                "CREATE INDEX ON openalex_refs (citing, idx)")
            self._spilled = True
        if self.openalex_ids:
            await self.conn.copy_records_to_table("openalex_works", records=self.openalex_ids)
        if self.openalex_refs:
            await self.conn.copy_records_to_table("openalex_refs", records=self.openalex_refs)
        self.openalex_ids, self.openalex_refs = [], []

    async def _openalex_references(self) -> None:
        """The arXiv works' references, each linked to the work it names when the import described it,
        read back a batch at a time and staged like any other facts."""
        await self.conn.execute("ANALYZE openalex_works; ANALYZE openalex_refs")
        after: tuple[str, int] = ("", 0)
        while True:  # keyset pages: each is staged before the next is read
            # A work this import does not describe, another snapshot of OpenAlex did: one of an earlier instant links
            # the reference now, one of a later instant (imported before this one) from its instant on.
            rows = await self.conn.fetch(
                "SELECT r.citing, r.idx, r.ref, coalesce(w.doi, k.doi) AS doi, w.title, w.year, "
                "CASE WHEN w.doi IS NULL AND k.observed_at > $4 THEN k.observed_at END AS linked_at "
                "FROM openalex_refs AS r "
                "LEFT JOIN LATERAL (SELECT doi, title, year FROM openalex_works AS x WHERE x.wid = r.ref LIMIT 1) AS w "
                "ON true LEFT JOIN openalex_work_ids AS k ON w.doi IS NULL AND k.wid = r.ref "
                "WHERE (r.citing, r.idx) > ($1, $2) ORDER BY r.citing, r.idx LIMIT $3", *after, BATCH, self.at)
            if not rows:
                return
            after = (rows[-1]["citing"], rows[-1]["idx"])
            # What OpenAlex printed is the referenced work's id (shown while the reference is unlinked): the
            # same whichever snapshot observed the reference first.
            self.references = [Reference(r["citing"], r["idx"], f"openalex:{r['citing']}:{r['ref']}", r["doi"],
                                         r["ref"], None, linked_at=r["linked_at"]) for r in rows]
            facts = Facts()
            await self._references(facts)
            await self._stage(facts)

    async def _remember_openalex_ids(self) -> None:
        """Each OpenAlex id this import describes with a DOI, at the earliest instant any import described it: a
        snapshot imported later, of an earlier or later instant, links its references to them as date order would."""
        await self.conn.execute(
            "INSERT INTO openalex_work_ids (wid, doi, observed_at) "
            "SELECT DISTINCT ON (wid) wid, doi, $1::timestamptz FROM openalex_works WHERE doi IS NOT NULL ORDER BY wid "
            "ON CONFLICT (wid) DO UPDATE SET doi = EXCLUDED.doi, observed_at = EXCLUDED.observed_at "
            "WHERE EXCLUDED.observed_at < openalex_work_ids.observed_at", self.at)

    async def _link_kept_references(self) -> None:
        """References an earlier import kept unlinked (their OpenAlex id as the printed title), whose work this
        import describes: linked now, with a resolution at this instant (their earlier ones stay)."""
        after = PgUUID(bytes(16))
        while True:
            rows = await self.conn.fetch(
                "SELECT o.observation_id, w.doi FROM openalex_works AS w JOIN citation_observations AS o "
                "ON o.printed_title = w.wid AND o.work_id IS NULL AND o.source = 'openalex' "
                "WHERE w.doi IS NOT NULL AND o.observation_id > $1 AND NOT EXISTS (SELECT 1 FROM "
                "stage_citation_observations AS s WHERE s.observation_id = o.observation_id) "
                "ORDER BY o.observation_id LIMIT $2", after, BATCH)
            if not rows:
                return
            after = rows[-1]["observation_id"]
            dois = list({r["doi"] for r in rows if r["doi"] not in self.known_work_ids})
            if dois:
                await self._works(dois)
            links = [(r["observation_id"], self.known_work_ids[r["doi"]][0][0], arxiv_id_of_doi(r["doi"]))
                     for r in rows]
            await self.conn.execute(
                "UPDATE citation_observations AS o SET work_id = x.work_id, "
                "cited_arxiv_id = coalesce(o.cited_arxiv_id, x.cited) "
                "FROM unnest($1::uuid[], $2::uuid[], $3::text[]) AS x(observation_id, work_id, cited) "
                "WHERE o.observation_id = x.observation_id",
                [r[0] for r in links], [r[1] for r in links], [r[2] for r in links])
            facts = Facts()
            for oid, _, _ in links:  # (linked from this instant on: app/ingest/links.py)
                facts.resolutions[(oid, self.at)] = ("verified_exact", self.name, True)
            await self._stage(facts)
            self.summary.linked += len(links)

    async def _references(self, facts: Facts) -> None:
        """Citation observations of arXiv papers: OpenAlex's referenced works, OpenCitations' rows whose
        citing DOI is a known arXiv paper's. A referenced work not described in the same import is
        kept as an unlinked observation (its OpenAlex id as the printed title), resolvable later."""
        refs, self.references = self.references, []
        await self._deciding()
        if self.source == "opencitations":
            by_doi = await self._papers_of_dois(list({r.citing_doi for r in refs if r.citing_doi}))
            kept = []
            for r in refs:
                citing = by_doi.get(r.citing_doi or "") or arxiv_id_of_doi(r.citing_doi or "")
                if citing is not None:
                    kept.append(Reference(citing, 0, r.key, r.doi, None, None, citing_doi=r.citing_doi))
                else:
                    self.summary.skip("citations whose citing DOI is no loaded arXiv paper's"
                                      + self._counted_for_the_cited())
                    self.unkept.append((r.citing_doi or "", 1))
            refs = kept
        citing_known = {r["arxiv_id"] for r in await self.conn.fetch(
            "SELECT DISTINCT arxiv_id FROM paper_snapshots WHERE arxiv_id = any($1::text[]) AND observed_at <= $2",
            list({r.citing_arxiv_id for r in refs}), self.at)} | {k[0] for k in facts.papers}
        dois = [d for d in {r.doi for r in refs if r.doi} if d not in self.known_work_ids]
        if dois:
            await self._works(dois)
        for r in refs:
            if r.citing_arxiv_id not in citing_known:
                self.summary.skip("references of arXiv papers not loaded (kept for them)")
                self._keep(r, r.citing_arxiv_id)
                continue
            works = self.known_work_ids.get(r.doi or "") or []
            work_id = works[0][0] if works else None
            # A cited work new to the database is described by its own record (OpenAlex), or here: by
            # OpenCitations, or by the Crossref reference (what it printed, and no receipt: a reference says
            # nothing of the cited work's standing).
            if self.source != "openalex" and work_id is not None and works[0][1] is None \
                    and (work_id, self.at) not in facts.works:
                if self.source == "crossref":
                    facts.works[(work_id, self.at)] = (arxiv_id_of_doi(r.doi or ""), r.doi, CROSSREF_REFERENCE, None,
                                                       r.title, None, r.year, _kept(r.title, None, r.year))
                else:
                    report = WorkReport(title=r.title, year=r.year, snapshot=True)
                    self._work_facts(facts, work_id, r.doi or "", report, None)
            cited = arxiv_id_of_doi(r.doi) if r.doi else None
            oid = work_id_of_doi(r.key)  # the same rule: a UUID of the name
            facts.observations[(oid,)] = (r.citing_arxiv_id, r.index, self.name, self.at, cited, work_id,
                                          r.title, r.year)
            resolver = ((r.asserted_by if self.source == "crossref" and r.asserted_by else self.name)
                        if work_id else None)
            if work_id is not None and r.linked_at is not None:
                # Unlinked as of this snapshot, linked from the later one's instant (as date order would store it).
                facts.resolutions[(oid, self.at)] = ("unresolved", None, False)
                facts.resolutions[(oid, r.linked_at)] = ("verified_exact", resolver, True)
                continue
            facts.resolutions[(oid, self.at)] = ("verified_exact" if work_id else "unresolved", resolver,
                                                 work_id is not None)


# --- references that arrive before their arXiv paper (migration 0026) ------------------------------------------

KEPT_LOCK = 7_411_026  # (an advisory lock: where a paper is being loaded, no import decides it is not)


async def lock_kept_references(conn: asyncpg.Connection) -> None:
    """Held to the end of the transaction by an import deciding whether the papers its references cite are loaded,
    and by an arXiv import or a load from its start: the two never miss each other's uncommitted rows."""
    await conn.execute("SELECT pg_advisory_xact_lock($1)", KEPT_LOCK)


async def kept_for_staged_papers(conn: asyncpg.Connection,
                                 waiting: dict[tuple[str, str, str], int]) -> list[dict[str, Any]]:
    """Inside an arXiv import or a load, after its merge: what to add once it commits (take_up_kept), for the papers
    (or DOIs) it stages: each source snapshot's references kept for them, and each snapshot whose lists of their
    DOIs were counted, not kept, to be read again from its files for those DOIs (when the files are still there as
    they were: migration 0027); those counted whose files are gone or changed are said in `waiting`."""
    if not await conn.fetchval("SELECT EXISTS (SELECT 1 FROM kept_references) "
                               "OR EXISTS (SELECT 1 FROM skipped_reference_lists)"):
        return []
    groups: list[dict[str, Any]] = []
    # (Counted once per DOI and snapshot however often it was imported; not asked once the snapshot's import again
    # added them: the paper's references of that source are then resolved at its instant.)
    counted: dict[tuple[str, datetime], list[Any]] = {}
    for row in await conn.fetch(
            "SELECT source, observed_at, doi, max(n) AS n, array_agg(DISTINCT import_id) AS imports FROM ("
            "SELECT s.source, s.observed_at, s.import_id, u.doi, d.arxiv_id, sum(u.n) AS n "
            "FROM skipped_reference_lists AS s CROSS JOIN LATERAL unnest(s.dois, s.counts) AS u(doi, n) "
            "JOIN (SELECT DISTINCT doi, arxiv_id FROM stage_paper_dois) AS d ON d.doi = u.doi "
            "GROUP BY 1, 2, 3, 4, 5) AS p WHERE EXISTS (SELECT 1 FROM paper_dois AS x WHERE x.arxiv_id = p.arxiv_id "
            "AND x.doi = p.doi AND x.observed_at <= p.observed_at) AND EXISTS (SELECT 1 FROM paper_snapshots AS x "
            "WHERE x.arxiv_id = p.arxiv_id AND x.observed_at <= p.observed_at) "
            "AND NOT EXISTS (SELECT 1 FROM citation_observations AS o "
            "JOIN resolutions AS r USING (observation_id) WHERE o.citing_arxiv_id = p.arxiv_id "
            "AND o.source = p.source AND r.observed_at = p.observed_at) "
            "GROUP BY 1, 2, 3 ORDER BY 2, 1, 3"):
        counted.setdefault((row["source"], row["observed_at"]), []).append(row)
    for (source, at), rows in counted.items():
        n = sum(r["n"] for r in rows)
        paths, remembered = await _unchanged_files(conn, [r["imports"] for r in rows])
        if paths:
            groups.append({"source": source, "observed_at": at, "citing": [], "paths": paths,
                           "dois": {r["doi"] for r in rows}, "n": n})
        else:
            waiting[waiting_key(source, at, remembered)] = n
    groups.extend({"source": r["source"], "observed_at": r["observed_at"], "citing": r["citing"], "paths": None}
                  for r in await conn.fetch(
        "SELECT source, observed_at, array_agg(DISTINCT citing) AS citing FROM kept_references "
        "WHERE citing IN (SELECT arxiv_id FROM stage_paper_snapshots UNION SELECT doi FROM stage_paper_dois) "
        "GROUP BY 1, 2 ORDER BY 2, 1"))
    return groups


def file_identity(path: str) -> tuple[str, int, int] | None:
    """A file as make and rsync tell it unchanged: its absolute path, size and modification time (None: no such
    file)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return os.path.abspath(path), st.st_size, st.st_mtime_ns


async def _unchanged_files(conn: asyncpg.Connection, imports: list[list[Any]]) -> tuple[list[str] | None, list[str]]:
    """The files to read again for counted lists (each given as the imports that counted it): for each list, those
    of an import of it whose files are all still there as they were then (None when a list has no such import);
    and every file those imports read."""
    files: dict[Any, list[Any]] = {}
    for r in await conn.fetch("SELECT import_id, path, size, mtime_ns FROM counted_reference_files "
                              "WHERE import_id = any($1::uuid[]) ORDER BY import_id, position",
                              list({i for ids in imports for i in ids})):
        files.setdefault(r["import_id"], []).append(r)

    def unchanged(f: Any) -> bool:
        return file_identity(f["path"]) == (f["path"], f["size"], f["mtime_ns"])

    usable = {i for i, fs in files.items() if all(unchanged(f) for f in fs)}
    remembered = sorted({f["path"] for fs in files.values() for f in fs})
    paths: list[str] = []
    for ids in imports:
        chosen = sorted(i for i in ids if i in usable)
        if not chosen:
            return None, remembered
        paths.extend(f["path"] for f in files[chosen[0]] if f["path"] not in paths)
    return paths, remembered


@dataclass
class TakenUp:
    """What an arXiv import or a load added after it committed (take_up_kept)."""
    taken: int = 0  # kept references added
    added: int = 0  # facts added
    again: int = 0  # references kept again: their instants are before the papers' first snapshots
    reread: int = 0  # references of counted lists, read again from their snapshots' files


async def take_up_kept(conn: asyncpg.Connection, groups: list[dict[str, Any]],
                       waiting: dict[tuple[str, str, str], int]) -> TakenUp:
    """After the arXiv import (or load) committed: each source's snapshot whose references waited for its papers, in
    its own transaction and at its own instant, through the import's own path: the references kept, and the lists
    counted, read again from the snapshot's files for the papers' DOIs alone (a failure there leaves them kept, or
    counted and said in `waiting`, for the next import of the papers)."""
    done = TakenUp()
    for group in groups:
        later = Importer(conn, group["source"], group["observed_at"],
                         only=group["dois"] if group["paths"] else None)
        if group["paths"]:
            try:
                summary = await later.run(group["paths"])
            except (ImportRejected, OSError) as exc:
                waiting[waiting_key(group["source"], group["observed_at"], group["paths"],
                                    f"could not be read again ({exc})")] = group["n"]
                continue
            done.reread += group["n"]
        else:
            summary = await later.run([], kept_for=group["citing"])
            done.taken += summary.taken_up
            done.again += later.kept_count
        done.added += summary.facts_added
    return done


# --- the standing rule's runs ---------------------------------------------------------------------
#
# A standing source's checks of a work are its receipts; each check reports a set of events (an event's
# identity: its type, reported_at and notice). What one check reports is what is stored as standing at
# that instant (loaders.rows.stands_sql), so the stored facts are runs: an event row at the first check of
# each run of consecutive checks that report it, and an end (work_event_ends) at the first check after the
# run that does not. An import adds one check per work it reports on; the runs of those works are
# recomputed from every check of the source, set-based, so a snapshot imported after a later one gives the
# facts the two give in date order. Imported in date order, nothing stored changes: runs only grow, end,
# or begin at the new check. (A v1 document's notices are checks too: app/ingest/checks.py.)

_RUN_STATEMENTS = (
    # The works whose runs may change: checked by this import, with events of the source stored or staged.
    """CREATE TEMP TABLE run_works (work_id uuid PRIMARY KEY) ON COMMIT DROP;
    CREATE TEMP TABLE run_checks (work_id uuid, at timestamptz, n bigint, PRIMARY KEY (work_id, n)) ON COMMIT DROP;
    CREATE TEMP TABLE run_reports (work_id uuid, at timestamptz, n bigint, event_type text, reported_at timestamptz,
                                   notice_doi text) ON COMMIT DROP;
    CREATE TEMP TABLE run_runs (work_id uuid, event_type text, started timestamptz, reported_at timestamptz,
                                notice_doi text, ended_at timestamptz) ON COMMIT DROP;
    CREATE INDEX ON stage_work_events (work_id, event_type);
    ANALYZE stage_work_events""",
    # The new check is the latest of the source for most works (a monthly refresh in date order): their runs
    # continue, end, or begin at it, decided against the events standing just before. Those this check no
    # longer reports end at it.
    """INSERT INTO run_runs (work_id, event_type, started, reported_at, notice_doi, ended_at)
    SELECT e.work_id, e.event_type, e.observed_at, e.reported_at, e.notice_doi, $2::timestamptz
    FROM (SELECT DISTINCT work_id FROM stage_standing_receipts WHERE source = $1) AS r
    JOIN work_events AS e ON e.work_id = r.work_id AND e.source = $1 AND e.observed_at < $2::timestamptz
    WHERE NOT EXISTS (SELECT 1 FROM standing_receipts AS l WHERE l.work_id = r.work_id AND l.source = $1
                      AND l.observed_at > $2::timestamptz)
      AND NOT EXISTS (SELECT 1 FROM work_event_ends AS x WHERE x.work_id = e.work_id AND x.source = e.source
                      AND x.event_type = e.event_type AND x.observed_at = e.observed_at
                      AND x.ended_at <= $2::timestamptz)
      AND NOT EXISTS (SELECT 1 FROM stage_work_events AS s WHERE s.work_id = e.work_id AND s.source = $1
                      AND s.event_type = e.event_type
                      AND coalesce(s.reported_at, '-infinity') = coalesce(e.reported_at, '-infinity')
                      AND coalesce(s.notice_doi, '') = coalesce(e.notice_doi, ''))
      AND NOT EXISTS (SELECT 1 FROM work_events AS c WHERE c.work_id = e.work_id AND c.source = $1
                      AND c.observed_at = $2::timestamptz AND c.event_type = e.event_type
                      AND c.reported_at IS NOT DISTINCT FROM e.reported_at
                      AND c.notice_doi IS NOT DISTINCT FROM e.notice_doi)""",
    # Events still reported (the same event) are not news: the stage loses them (after the ends are known).
    """DELETE FROM stage_work_events AS s
    WHERE s.source = $1
      AND NOT EXISTS (SELECT 1 FROM standing_receipts AS l WHERE l.work_id = s.work_id AND l.source = $1
                      AND l.observed_at > $2::timestamptz)
      AND EXISTS (SELECT 1 FROM work_events AS e WHERE e.work_id = s.work_id AND e.source = $1
                  AND e.event_type = s.event_type AND e.observed_at < s.observed_at
                  AND e.reported_at IS NOT DISTINCT FROM s.reported_at
                  AND e.notice_doi IS NOT DISTINCT FROM s.notice_doi
                  AND NOT EXISTS (SELECT 1 FROM work_event_ends AS x WHERE x.work_id = e.work_id
                                  AND x.source = e.source AND x.event_type = e.event_type
                                  AND x.observed_at = e.observed_at AND x.ended_at <= $2::timestamptz))""",
    # The works with a later check of the source already stored (a snapshot imported after a later one):
    # their runs are recomputed from every check, below.
    # (Or staged: a work new to the store, described by this import, was also checked by each later
    # whole-database check of the source, which did not report it: the receipts staged for those checks.)
    """INSERT INTO run_works SELECT DISTINCT r.work_id FROM stage_standing_receipts AS r
    WHERE r.source = $1
      AND (EXISTS (SELECT 1 FROM standing_receipts AS l WHERE l.work_id = r.work_id AND l.source = $1
                   AND l.observed_at > $2::timestamptz)
           OR EXISTS (SELECT 1 FROM stage_standing_receipts AS l WHERE l.work_id = r.work_id AND l.source = $1
                      AND l.observed_at > $2::timestamptz))
      AND (EXISTS (SELECT 1 FROM stage_work_events AS s WHERE s.work_id = r.work_id AND s.source = $1)
           OR EXISTS (SELECT 1 FROM work_events AS e WHERE e.work_id = r.work_id AND e.source = $1))""",
    # Every check of those works by the source, numbered in time order.
    """INSERT INTO run_checks SELECT work_id, at, row_number() OVER (PARTITION BY work_id ORDER BY at) AS n FROM (
        SELECT r.work_id, r.observed_at AS at FROM standing_receipts AS r JOIN run_works USING (work_id)
        WHERE r.source = $1
        UNION SELECT r.work_id, r.observed_at FROM stage_standing_receipts AS r JOIN run_works USING (work_id)
        WHERE r.source = $1
        UNION SELECT work_id, $2::timestamptz FROM run_works) AS c""",
    # What each check reported: the events stored as standing then, and at this import's instant what it stages.
    """INSERT INTO run_reports SELECT DISTINCT work_id, at, n, event_type, reported_at, notice_doi FROM (
        SELECT c.work_id, c.at, c.n, e.event_type, e.reported_at, e.notice_doi
        FROM run_checks AS c JOIN work_events AS e ON e.work_id = c.work_id AND e.source = $1 AND e.observed_at <= c.at
        WHERE NOT EXISTS (SELECT 1 FROM work_event_ends AS x WHERE x.work_id = e.work_id AND x.source = e.source
                          AND x.event_type = e.event_type AND x.observed_at = e.observed_at AND x.ended_at <= c.at)
          -- (at this import's instant, only a check already stored then: the same snapshot imported again)
          AND (c.at <> $2::timestamptz OR EXISTS (SELECT 1 FROM standing_receipts AS r WHERE r.work_id = c.work_id
                                                  AND r.source = $1 AND r.observed_at = c.at))
        UNION ALL
        SELECT s.work_id, c.at, c.n, s.event_type, s.reported_at, s.notice_doi
        FROM stage_work_events AS s JOIN run_checks AS c ON c.work_id = s.work_id AND c.at = $2::timestamptz
        WHERE s.source = $1) AS r""",
    # Runs of consecutive checks reporting the same event (gaps and islands), and the check that ends each.
    """INSERT INTO run_runs SELECT DISTINCT ON (u.work_id, u.event_type, u.started)
           u.work_id, u.event_type, u.started, u.reported_at, u.notice_doi, nx.at AS ended_at
    FROM (SELECT work_id, event_type, reported_at, notice_doi, min(at) AS started, max(n) AS last_n
          FROM (SELECT r.*, r.n - row_number() OVER (PARTITION BY r.work_id, r.event_type, r.reported_at, r.notice_doi
                                                      ORDER BY r.at) AS grp
                FROM run_reports AS r) AS g
          GROUP BY work_id, event_type, reported_at, notice_doi, grp) AS u
    LEFT JOIN run_checks AS nx ON nx.work_id = u.work_id AND nx.n = u.last_n + 1
    ORDER BY u.work_id, u.event_type, u.started, u.reported_at DESC NULLS LAST""",
    "ANALYZE run_works; ANALYZE run_checks; ANALYZE run_reports; ANALYZE run_runs",
    # Stored events that no run begins with any more (only when a check arrived between two stored ones),
    # their ends with them; stored ends that are not a run's.
    """DELETE FROM work_events AS e USING run_works AS w
    WHERE e.work_id = w.work_id AND e.source = $1
      AND NOT EXISTS (SELECT 1 FROM run_runs AS u WHERE u.work_id = e.work_id AND u.event_type = e.event_type
                      AND u.started = e.observed_at AND u.reported_at IS NOT DISTINCT FROM e.reported_at
                      AND u.notice_doi IS NOT DISTINCT FROM e.notice_doi)""",
    """DELETE FROM work_event_ends AS x USING run_works AS w
    WHERE x.work_id = w.work_id AND x.source = $1
      AND NOT EXISTS (SELECT 1 FROM run_runs AS u WHERE u.work_id = x.work_id AND u.event_type = x.event_type
                      AND u.started = x.observed_at AND u.ended_at = x.ended_at)""",
    # The stage holds the runs' events not yet stored.
    """DELETE FROM stage_work_events AS s USING run_works AS w WHERE s.work_id = w.work_id AND s.source = $1""",
    """INSERT INTO stage_work_events (work_id, source, event_type, observed_at, reported_at, notice_doi, origin)
    SELECT u.work_id, $1, u.event_type, u.started, u.reported_at, u.notice_doi, 'this import''s check'
    FROM run_runs AS u
    WHERE NOT EXISTS (SELECT 1 FROM work_events AS e WHERE e.work_id = u.work_id AND e.source = $1
                      AND e.event_type = u.event_type AND e.observed_at = u.started)""",
)


async def leave_unsure(conn: asyncpg.Connection, dois: list[str], source: str) -> int:
    """Unstage this source's checks and events of the works with these DOIs (a record of theirs could not be
    read): their standing stays as the imports before this one left it. The number of works."""
    return await conn.fetchval(
        "WITH w AS (SELECT work_id FROM work_snapshots WHERE doi = any($1::text[]) "
        "           UNION SELECT work_id FROM stage_work_snapshots WHERE doi = any($1::text[])), "
        "e AS (DELETE FROM stage_work_events WHERE source = $2 AND work_id IN (SELECT work_id FROM w)), "
        "r AS (DELETE FROM stage_standing_receipts WHERE source = $2 AND work_id IN (SELECT work_id FROM w)) "
        "SELECT count(*) FROM w", dois, source)


async def reconcile_events(conn: asyncpg.Connection, source: str, at: datetime) -> None:
    """Recompute the runs of the works this import checks (before the stage is merged)."""
    for statement in _RUN_STATEMENTS:
        if statement.startswith("INSERT INTO run_checks") and not await conn.fetchval(
                "SELECT EXISTS (SELECT 1 FROM run_works)"):
            return  # every check is its works' latest: nothing to recompute
        args = (source, at) if "$2" in statement else (source,) if "$1" in statement else ()
        await conn.execute(statement, *args)


async def write_event_ends(conn: asyncpg.Connection, source: str) -> int:
    """The runs' ends (after the merge: an end names its event, which may be one this import added), each
    announced to the papers citing its work as a new event is (app.ingest.store.append_changes)."""
    await conn.execute("CREATE TEMP TABLE IF NOT EXISTS new_work_event_ends (LIKE work_event_ends) ON COMMIT DROP")
    status = await conn.execute(
        "WITH added AS (INSERT INTO work_event_ends (work_id, source, event_type, observed_at, ended_at) "
        "SELECT work_id, $1, event_type, started, ended_at FROM run_runs WHERE ended_at IS NOT NULL "
        "ORDER BY work_id, event_type, started ON CONFLICT DO NOTHING RETURNING *) "
        "INSERT INTO new_work_event_ends SELECT * FROM added", source)
    ended = int(status.split()[-1])
    if ended:
        await append_ends(conn)
    return ended


# A reference observed again (a refresh, or a snapshot imported after a later one) is the same observation:
# it keeps its id and is first observed at the earliest instant any import saw it (its parse, as date order
# would have stored it); a link it did not have is added; its resolution is recorded at each instant, with
# whether it held the link then (app/ingest/links.py: the link holds from then on).
_OBSERVED_AGAIN = (
    """UPDATE citation_observations AS o
    SET source_observed_at = s.source_observed_at, reference_index = s.reference_index,
        cited_arxiv_id = coalesce(o.cited_arxiv_id, s.cited_arxiv_id), work_id = coalesce(o.work_id, s.work_id),
        printed_title = s.printed_title, printed_year = s.printed_year,
        visible_from = CASE WHEN pith_first_snapshot(o.citing_arxiv_id) IS NOT NULL
                            THEN greatest(s.source_observed_at, pith_first_snapshot(o.citing_arxiv_id)) END
    FROM stage_citation_observations AS s
    WHERE s.observation_id = o.observation_id AND s.source_observed_at < o.source_observed_at""",
    """UPDATE citation_observations AS o
    SET work_id = s.work_id, cited_arxiv_id = coalesce(o.cited_arxiv_id, s.cited_arxiv_id)
    FROM stage_citation_observations AS s
    WHERE s.observation_id = o.observation_id AND o.work_id IS NULL AND s.work_id IS NOT NULL""",
    # A reference linked by an earlier check stays linked when this one did not meet its work.
    """UPDATE stage_resolutions AS r SET status = 'verified_exact', resolver_source = p.resolver_source, linked = true
    FROM citation_observations AS o, resolutions AS p
    WHERE o.observation_id = r.observation_id AND o.work_id IS NOT NULL AND r.status = 'unresolved'
      AND p.observation_id = r.observation_id AND p.status = 'verified_exact'
      AND p.observed_at = (SELECT max(q.observed_at) FROM resolutions AS q WHERE q.observation_id = r.observation_id
                           AND q.observed_at < r.observed_at AND q.status = 'verified_exact')""",
    """DELETE FROM stage_citation_observations AS s USING citation_observations AS o
    WHERE o.observation_id = s.observation_id""",
)


async def observed_again(conn: asyncpg.Connection, source: str) -> None:
    if not await conn.fetchval("SELECT EXISTS (SELECT 1 FROM stage_citation_observations)"):
        return
    for statement in _OBSERVED_AGAIN:
        await conn.execute(statement)


def work_id_of_doi(name: str) -> Any:
    """uuid.uuid5(WORK_NAMESPACE, name), built as asyncpg's own UUID type (a fifth of the time: an import
    makes one per new DOI)."""
    digest = bytearray(hashlib.sha1(_NAMESPACE_BYTES + name.encode()).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50
    digest[8] = (digest[8] & 0x3F) | 0x80
    return PgUUID(bytes(digest))


def _openalex_arxiv_id(work: dict, doi: str | None) -> str | None:
    if doi is not None and arxiv_id_of_doi(doi):
        return arxiv_id_of_doi(doi)
    for location in work.get("locations") or ():
        url = location.get("landing_page_url") if isinstance(location, dict) else None
        match = re.match(r"^https?://arxiv\.org/abs/([^v?#]+?)(?:v\d+)?$", url or "")
        if match:
            return match.group(1)
    return None


def _oc_doi(value: str | None) -> str | None:
    """A COCI DOI, or the `doi:` entry of an Index cell (`omid:br/... doi:10....`)."""
    for part in (value or "").split():
        if part.startswith("doi:") or part.startswith("10."):
            return normalize_doi(part)
    return normalize_doi(value)


_NO_VERSIONS = "records whose versions are not a list of {version, created} with RFC 2822 dates"


def arxiv_paper(record: Any) -> tuple[str, str, list[datetime], str | None, str | None] | str:
    """(id, title, version dates, primary category, journal DOI) of a metadata-snapshot record; else why it
    holds no paper (the import summary's words for its skip)."""
    from app.timeparse import BadInput, parse_arxiv_id

    if not isinstance(record, dict):
        return "records that are not JSON objects"
    given = record.get("id")
    try:
        arxiv_id = parse_arxiv_id(str(given if given is not None else ""))
    except BadInput:
        if isinstance(given, str) and re.fullmatch(r".+v\d+", given):
            return "records whose id names a version (the snapshot's id is without it: 0704.0097, not 0704.0097v2)"
        return "records without a valid arXiv id"
    title = collapse(record["title"]) if isinstance(record.get("title"), str) else ""
    if not title:
        return "records without a title"
    dates = []
    for version in record.get("versions") or ():
        created = version.get("created") if isinstance(version, dict) else None
        try:
            dates.append(parsedate_to_datetime(created).astimezone(timezone.utc))
        except (TypeError, ValueError):
            return _NO_VERSIONS
    if not dates:
        return _NO_VERSIONS
    categories = (record.get("categories") or "").split()
    dois = (record.get("doi") or "").split()
    return arxiv_id, title, dates, categories[0] if categories else None, normalize_doi(dois[0]) if dois else None


def arxiv_oai_records(stream: IO[bytes]) -> Iterator[tuple[str, dict]]:
    """OAI-PMH `arXivRaw` records as metadata-snapshot records (id, title, categories, doi, versions)."""
    import xml.etree.ElementTree as ET

    def local(tag: str) -> str:
        return tag.rsplit("}", 1)[-1]

    n, tag = 0, None
    try:
        for _, element in ET.iterparse(stream, events=("end",)):
            tag = local(element.tag)
            if tag == "error" and element.get("code") != "noRecordsMatch":  # (no records: an empty answer)
                raise Broken(f"record {n + 1}", f"an OAI-PMH error answer, not records: {element.get('code')}: "
                                                f"{(element.text or '').strip()[:200]}")
            if tag != "arXivRaw":
                continue
            n += 1
            record: dict[str, Any] = {"versions": []}
            for child in element:
                name = local(child.tag)
                if name in ("id", "title", "categories", "doi"):
                    record[name] = child.text or ""
                elif name == "version":
                    date = next((c.text for c in child if local(c.tag) == "date"), None)
                    record["versions"].append({"version": child.get("version"), "created": date})
            element.clear()
            yield f"record {n}", record
    except ET.ParseError as exc:
        raise Broken(f"line {exc.position[0]}", f"not valid XML: {exc}") from None
    if tag != "OAI-PMH":  # (the last element to end is the root)
        raise Broken("line 1", f"not an OAI-PMH answer (its root element is <{tag}>): expected arXivRaw records")


def looks_like_xml(stream: IO[bytes]) -> bool:
    head = stream.peek(64)[:64].lstrip() if hasattr(stream, "peek") else b""
    return head.startswith(b"<")


def instant(value: str | None) -> datetime:
    """When a source was looked at: the instant given (never later than now: a fact dated ahead of the clock
    would surface on its own, unasked, when the clock reaches it), or now."""
    from app.timeparse import BadInput, now_as_of, parse_as_of

    now = now_as_of()
    if not value:
        return now
    at = parse_as_of(value)
    if at > now:
        raise BadInput(f"{value} is later than now ({now:%Y-%m-%dT%H:%M:%SZ}): give when the source was looked at, "
                       "at or before now")
    return at


