"""v1 documents of one paper at several instants, loaded in any order (and in one file), are each served back byte
for byte at their own `as_of`: a document's notice is its sources' check of each cited work at their latest receipt,
and an event it no longer lists, which an earlier document of the same source listed, has ended by then
(docs/standing.md). The documents are exported from a store built by importing constructed Retraction Watch rows
(the published layout) over the bundled sample snapshots."""

from __future__ import annotations

import itertools
import json

import asyncpg
import pytest
import pytest_asyncio

from app.ingest.store import ImportRejected
from app.ingest.load import load_file
from tests.conftest import create_database, drop_database, sample_database
from tests.test_sources import CITING, imported, pith, rw_csv

pytestmark = pytest.mark.asyncio(loop_scope="session")

DOI = "10.48550/arxiv.2402.15627"  # a work CITING cites
OTHER = "10.9999/unrelated.1"
T1, T2, T3, T4, T5 = ("2026-08-15T00:00:00Z", "2026-09-01T00:00:00Z", "2026-09-15T00:00:00Z",
                      "2026-10-01T00:00:00Z", "2026-10-15T00:00:00Z")
RETRACTION = {"Title": "MegaScale", "Journal": "arXiv", "RetractionDate": "9/3/2018 0:00",
              "RetractionDOI": "10.9999/rw.retract", "OriginalPaperDOI": DOI, "RetractionNature": "Retraction",
              "OriginalPaperDate": "2/23/2018 0:00"}
UNRELATED = {**RETRACTION, "Title": "Unrelated", "OriginalPaperDOI": OTHER, "RetractionDOI": "10.9999/rw.other"}


def exported(url: str, at: str) -> bytes:
    done = pith("export", CITING, "--as-of", at, "--uncapped", url=url)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    return done.stdout


def standing_of(document: bytes) -> list[tuple]:
    record = json.loads(document)
    return sorted((e["source"], e["event_type"], e["observed_at"]) for c in record["inbound"] + record["outbound"]
                  for e in ((c.get("standing_notice") or {}).get("events") or []))


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def documents(admin_url, tmp_path_factory) -> dict[str, bytes]:
    """CITING's record as of each check: the retraction reported (T1), no longer reported (T2, the row withdrawn),
    not reported (T3), reported again (T4: a new run), still (T5: the record shows the run of T4)."""
    url = await sample_database(admin_url, "pith_test_docruns")
    folder = tmp_path_factory.mktemp("rw")
    try:
        out = {}
        for at, rows in ((T1, [RETRACTION, UNRELATED]), (T2, [UNRELATED]), (T3, [UNRELATED]),
                         (T4, [RETRACTION, UNRELATED]), (T5, [RETRACTION, UNRELATED])):
            path = folder / f"rw-{at[:10]}.csv"
            path.write_text(rw_csv(rows))
            imported(url, "retraction-watch", str(path), at=at)
            out[at] = exported(url, at)
        return out
    finally:
        await drop_database(admin_url, url)


async def test_the_documents_differ_in_what_they_list(documents):
    assert [e[0] for e in standing_of(documents[T1])] == ["retraction_watch"]
    assert standing_of(documents[T2]) == standing_of(documents[T3]) == []
    assert standing_of(documents[T4]) and standing_of(documents[T4]) != standing_of(documents[T1])


async def _load_and_compare(admin_url: str, files: list[list[str]], documents: dict[str, bytes], tmp_path) -> None:
    url = await create_database(admin_url, "pith_test_docruns_load")
    try:
        conn = await asyncpg.connect(url)
        try:
            for i, group in enumerate(files):
                path = tmp_path / f"load-{i}.ndjson"
                path.write_bytes(b"".join(documents[at] + b"\n" for at in group))
                await load_file(conn, str(path))
        finally:
            await conn.close()
        for at, document in documents.items():
            served = exported(url, at)
            assert served == document, (files, at, standing_of(served), standing_of(document))
    finally:
        await drop_database(admin_url, url)


@pytest.mark.parametrize("order", sorted(set(itertools.permutations([T1, T2, T3, T4, T5])))[::17]
                         + [(T5, T4, T3, T2, T1), (T2, T4, T1, T3, T5), (T1, T5, T2, T3, T4), (T1, T5, T3, T2, T4)])
async def test_documents_loaded_one_by_one_in_any_order_round_trip(admin_url, documents, order, tmp_path):
    await _load_and_compare(admin_url, [[at] for at in order], documents, tmp_path)


async def test_documents_loaded_in_one_file_round_trip(admin_url, documents, tmp_path):
    await _load_and_compare(admin_url, [[T3, T1, T5, T4, T2]], documents, tmp_path)


async def retracted_at(admin_url: str, tmp_path, instants: tuple[str, ...]) -> str:
    """Another store: the sample, with Retraction Watch files reporting the retraction at each instant."""
    url = await sample_database(admin_url, "pith_test_docruns_other")
    try:
        for at in instants:
            path = tmp_path / f"rw-{at[:10]}.csv"
            path.write_text(rw_csv([RETRACTION, UNRELATED]))
            imported(url, "retraction-watch", str(path), at=at)
    except BaseException:
        await drop_database(admin_url, url)
        raise
    return url


async def test_a_document_that_lists_an_event_another_document_ended_before_it_is_refused(admin_url, documents,
                                                                                           tmp_path):
    """T2's document says the retraction (observed at T1) no longer stood at T2. Another store, whose Retraction
    Watch files of T1 and T3 both report it, gives a record at T3 that lists the same event as standing since T1:
    loaded after the first two, it contradicts them, and it is refused, naming the event; nothing is stored."""
    other = await retracted_at(admin_url, tmp_path, (T1, T3))
    try:
        contradicting = exported(other, T3)
    finally:
        await drop_database(admin_url, other)
    assert standing_of(contradicting) == standing_of(documents[T1])
    url = await create_database(admin_url, "pith_test_docruns_bad")
    try:
        conn = await asyncpg.connect(url)
        try:
            for at in (T1, T2):
                path = tmp_path / f"{at[:10]}.ndjson"
                path.write_bytes(documents[at] + b"\n")
                await load_file(conn, str(path))
            before = await conn.fetchval("SELECT count(*) FROM standing_receipts")
            bad = tmp_path / "contradicting.json"
            bad.write_bytes(contradicting)
            with pytest.raises(ImportRejected) as refused:
                await load_file(conn, str(bad))
            message = str(refused.value)
            assert "standing_notice.events" in message and "retraction" in message and "ended at" in message, message
            assert await conn.fetchval("SELECT count(*) FROM standing_receipts") == before
            assert exported(url, T2) == documents[T2]
        finally:
            await conn.close()
    finally:
        await drop_database(admin_url, url)


async def test_one_check_listed_two_ways_in_one_file_is_refused(admin_url, documents, tmp_path):
    """The same check (work, source, receipt) in two documents of one file with other events: refused."""
    url = await create_database(admin_url, "pith_test_docruns_two")
    try:
        other = await sample_database(admin_url, "pith_test_docruns_other2")
        try:
            path = tmp_path / "rw.csv"
            path.write_text(rw_csv([UNRELATED]))
            imported(other, "retraction-watch", str(path), at=T1)
            clean = exported(other, T1)  # the check of T1 without the retraction
        finally:
            await drop_database(admin_url, other)
        both = tmp_path / "both.ndjson"
        both.write_bytes(documents[T1] + b"\n" + clean + b"\n")
        conn = await asyncpg.connect(url)
        try:
            with pytest.raises(ImportRejected) as refused:
                await load_file(conn, str(both))
            assert "line 2" in str(refused.value) and "one check reports one set of events" in str(refused.value)
            assert await conn.fetchval("SELECT count(*) FROM paper_snapshots") == 0
        finally:
            await conn.close()
    finally:
        await drop_database(admin_url, url)


async def test_a_document_that_drops_an_event_an_import_of_the_same_check_reported_is_refused(admin_url, documents,
                                                                                             tmp_path):
    """A store whose Retraction Watch files of T1 and T2 both report the retraction: the record of T2 from the
    first store (whose T2 file no longer did) says that very check did not report it. Refused, nothing written."""
    url = await retracted_at(admin_url, tmp_path, (T1, T2))
    try:
        conn = await asyncpg.connect(url)
        try:
            ends = await conn.fetchval("SELECT count(*) FROM work_event_ends")
            path = tmp_path / "t2.json"
            path.write_bytes(documents[T2])
            with pytest.raises(ImportRejected) as refused:
                await load_file(conn, str(path))
            assert "leaves out the event retraction" in str(refused.value), refused.value
            assert await conn.fetchval("SELECT count(*) FROM work_event_ends") == ends
        finally:
            await conn.close()
    finally:
        await drop_database(admin_url, url)


REINSTATEMENT = {**RETRACTION, "RetractionDate": "4/4/2022 0:00", "RetractionDOI": "10.9999/rw.back",
                 "RetractionNature": "Reinstatement"}


@pytest.mark.parametrize("order", [(T1, T5), (T5, T1)])
async def test_a_later_document_loaded_first_leaves_its_earlier_checks_open(admin_url, tmp_path, order):
    """Records of one store: at T1 Retraction Watch reports the retraction and its reinstatement, one check; at T4
    the reinstatement row is withdrawn. T5's record lists the retraction observed at T1, which implies a check at T1
    reporting it, but not all that check reported: T1's record, loaded after it, adds the reinstatement observed at
    that check, ended at T4 (the first check after it that T5's record shows). Both orders round-trip."""
    url = await sample_database(admin_url, "pith_test_docruns_implied")
    try:
        for at, rows in ((T1, [RETRACTION, REINSTATEMENT, UNRELATED]), (T4, [RETRACTION, UNRELATED])):
            path = tmp_path / f"rw-{at[:10]}.csv"
            path.write_text(rw_csv(rows))
            imported(url, "retraction-watch", str(path), at=at)
        documents = {T1: exported(url, T1), T5: exported(url, T5)}
    finally:
        await drop_database(admin_url, url)
    assert [e[1] for e in standing_of(documents[T1])] == ["reinstatement", "retraction"]
    assert [e[1] for e in standing_of(documents[T5])] == ["retraction"]
    await _load_and_compare(admin_url, [[at] for at in order], documents, tmp_path)
