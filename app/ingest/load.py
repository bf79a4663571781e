"""Loading v1 documents (`pith-graph load`): each file in one transaction, through the staging of
app.ingest.store, the standing checks the documents imply, and the references the sources kept for the
papers the documents bring (app.ingest.sources)."""

from __future__ import annotations

import contextlib
import io
import json
import sys
import time
from collections.abc import Iterator
from typing import IO, Any, cast

import asyncpg
import orjson

from app.ingest.checks import CheckLedger, document_checks, settle
from app.ingest.document import DocumentError, parse_document
from app.ingest.links import settle_links
from app.ingest.sources import kept_for_staged_papers, lock_kept_references, reread_line, take_up_kept, waiting_line
from app.ingest.store import ImportRejected, Loader, LoadResult, append_ends

LOAD_BATCH_DOCUMENTS = 100  # a load merges each batch while it reads the next


def _documents(stream: IO[bytes], ndjson: bool) -> Iterator[tuple[int | None, Any]]:
    """Yield (line, decoded JSON) without reading an ndjson stream whole."""
    if not ndjson:
        yield None, _decode(stream.read(), None)
        return
    for number, raw in enumerate(stream, start=1):
        if raw.strip():
            yield number, _decode(raw, number)


class _BadJson(Exception):
    def __init__(self, line: int | None, message: str) -> None:
        self.line, self.message = line, message


def _decode(raw: bytes, line: int | None) -> Any:
    try:
        return orjson.loads(raw)  # an order of magnitude faster than json; the same values
    except orjson.JSONDecodeError:
        pass  # what orjson refuses (an integer past 64 bits, invalid input): json decides and explains
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _BadJson(line, f"not valid JSON: {exc}") from None


def _open(path: str) -> tuple[IO[bytes], bool]:
    """Open a file, or standard input for '-' (ndjson unless its first line is not a whole document)."""
    if path != "-":
        if not (path.endswith(".json") or path.endswith(".ndjson")):
            raise ImportRejected(path, "unsupported file type; expected a .json (one v1 document) or "
                                       ".ndjson (one document per line) file, or - for standard input")
        try:
            return open(path, "rb"), path.endswith(".ndjson")
        except OSError as exc:
            raise ImportRejected(path, f"cannot read: {exc.strerror}") from None
    data = sys.stdin.buffer
    first = data.readline()
    rest = data.read() if first.strip() and not _is_whole_json(first) else None
    if rest is not None:
        return io.BytesIO(first + rest), False
    return cast(IO[bytes], _Chain(first, data)), True  # (a raw stream of bytes: io.RawIOBase)


def _is_whole_json(line: bytes) -> bool:
    try:
        json.loads(line)
        return True
    except ValueError:
        return False


class _Chain(io.RawIOBase):
    def __init__(self, first: bytes, rest: IO[bytes]) -> None:
        self.first, self.rest = first, rest

    def __iter__(self):  # type: ignore[override]
        if self.first:
            yield self.first
        yield from self.rest

    def close(self) -> None:
        pass


RETRIES = 3
CLIENT_CHECK_SECONDS = 2


async def load_file(conn: asyncpg.Connection, path: str, progress: IO[str] | None = None) -> LoadResult:
    """Load one file in one transaction; raise ImportRejected (and write nothing) on any problem.

    A concurrent load of overlapping facts can deadlock with this one; PostgreSQL then aborts one of
    the two, and that one is run again from the start (files only: standard input cannot be re-read).
    """
    for attempt in range(1, RETRIES + 1):
        try:
            return await _load_file_once(conn, path, progress)
        except (asyncpg.DeadlockDetectedError, asyncpg.SerializationError):
            if path == "-" or attempt == RETRIES:
                raise
    raise AssertionError("unreachable")


async def _load_file_once(conn: asyncpg.Connection, path: str, progress: IO[str] | None) -> LoadResult:
    started = time.monotonic()
    stream, ndjson = _open(path)
    documents = 0
    waiting: dict[tuple[str, str, str], int] = {}
    try:
        async with conn.transaction():
            # A killed client ends its backend (and its locks) within seconds, even mid-statement,
            # instead of the backend finishing the load for nobody while a rerun waits on its locks.
            await conn.execute(f"SET LOCAL client_connection_check_interval = '{CLIENT_CHECK_SECONDS}s'")
            await lock_kept_references(conn)  # (papers it brings take up the references kept for them)
            loader = Loader(conn, path, merge_each_batch=True)
            await loader.start()
            # Each notice is its sources' check of the cited work: what one check lists, every document must.
            ledger = CheckLedger(lambda where, message: ImportRejected(path, message, path=where))
            last_report = started
            try:
                for line, doc in _documents(stream, ndjson):
                    try:
                        parsed = parse_document(doc)
                    except DocumentError as exc:
                        raise ImportRejected(path, exc.message, line=line, path=exc.path) from None
                    where = f"line {line}" if line is not None else "the document"
                    origin = f"{where} ({parsed.arxiv_id} as of {parsed.rows.as_of.isoformat()})"
                    loader.add(parsed.facts, origin)
                    ledger.add(document_checks(parsed.rows.standing), origin)
                    documents += 1
                    if documents % LOAD_BATCH_DOCUMENTS == 0:
                        await loader.merge_batch()
                    now = time.monotonic()
                    if progress is not None and now - last_report >= 1.0:
                        rate = documents / (now - started)
                        print(f"{path}: {documents} documents ({rate:.0f}/s)", file=progress, flush=True)
                        last_report = now
            except BaseException as exc:
                # A refused document leaves no statement in flight: the transaction can then roll back.
                with contextlib.suppress(Exception):
                    await loader.settle()
                if isinstance(exc, _BadJson):
                    raise ImportRejected(path, exc.message, line=exc.line, path="$") from None
                raise
            if documents == 0:
                raise ImportRejected(path, "no document found; expected at least one v1 document")
            added = await loader.finish()
            # The ends the checks imply (a notice that no longer lists an event), announced as the importers' are.
            ended = await settle(conn, ledger)
            if ended:
                await append_ends(conn)
            added += ended
            # A reference shown unlinked by one document and linked by another holds its link from then on.
            await settle_links(conn, lambda message: ImportRejected(path, message))
            taking_up = await kept_for_staged_papers(conn, waiting)
    finally:
        stream.close()
    # References the sources gave for these papers before they were loaded: added as the arXiv import adds them.
    done = await take_up_kept(conn, taking_up, waiting)
    taken, taken_facts, still_kept = done.taken, done.added, done.again
    seconds = time.monotonic() - started
    if progress is not None:
        print(f"{path}: loaded {documents} documents, {added} new facts in {seconds:.2f}s "
              f"({documents / seconds if seconds else documents:.0f} documents/s)"
              + (f"; {taken} references kept for these papers added ({taken_facts} facts)" if taken else "")
              + (f"; {still_kept} references kept for these papers are of instants before their snapshots: kept "
                 "until an earlier snapshot of them is loaded" if still_kept else "")
              + reread_line(done.reread) + waiting_line(waiting), file=progress, flush=True)
    return LoadResult(path, documents, added + taken_facts, seconds)
