"""A reference kept unlinked by one import and linked by a later one holds the link from the later instant on: as of
earlier instants it is answered as it was then (its printed title, UNRESOLVED, no notice, not citing retracted work),
though the work it is linked to was already known (migration 0023, app/ingest/links.py). The same in either import
order, and v1 records exported on both sides of the link load back byte for byte in either order. The OpenAlex works
and the Retraction Watch row are constructed in the published layouts; the citing paper is the bundled sample's."""

from __future__ import annotations

import json

import asyncpg
import pytest

from app.ingest.load import load_file
from tests.conftest import StatementLog, create_database, drop_database, sample_database, serve
from tests.test_refresh import ARXIV_WORK, OTHER, jsonl
from tests.test_sources import PAPER, imported, pith, rw_csv

pytestmark = pytest.mark.asyncio(loop_scope="session")

T0, T1, T2 = "2026-08-20T00:00:00Z", "2026-09-01T00:00:00Z", "2026-10-01T00:00:00Z"
DOI = "10.1000/other.7"  # OTHER's: W2741809807, which ARXIV_WORK references
RETRACTED = {"Title": "Another work", "Journal": "J", "RetractionDate": "5/5/2020 0:00", "RetractionDOI": "10.9999/rw.o",
             "OriginalPaperDOI": DOI, "RetractionNature": "Retraction", "OriginalPaperDate": "1/1/2017 0:00"}
ANSWERS = """query($at: DateTime) {
  paper(arxivId: "%s", asOf: $at) {
    outbound(first: 10) { nodes { source referenceIndex resolution { status } citedWork { doi title }
                                  standingNotice { state } } }
    flagged: outbound(citesRetracted: true) { totalCount } }
  browsePapers(filter: {citesRetracted: true}, asOf: $at, first: 100) { nodes { arxivId } }
  work(doi: "%s", asOf: $at) { retracted inbound(first: 10) { totalCount } } }""" % (PAPER, DOI)


async def answers(served, at: str) -> dict:
    body = await served.graphql(ANSWERS, {"at": at})
    assert "errors" not in body, body
    data = body["data"]
    ref = [n for n in data["paper"]["outbound"]["nodes"] if n["source"] == "openalex" and n["referenceIndex"] == 1]
    assert len(ref) == 1, data
    return {"reference": ref[0], "flagged": data["paper"]["flagged"]["totalCount"],
            "browsed": PAPER in {n["arxivId"] for n in data["browsePapers"]["nodes"]},
            "work_retracted": data["work"]["retracted"], "work_cited_by": data["work"]["inbound"]["totalCount"]}


def export(url: str, at: str) -> bytes:
    done = pith("export", PAPER, "--as-of", at, "--uncapped", url=url)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    return done.stdout


async def build(admin_url: str, tmp_path, order: list[str]) -> str:
    """The retracted work known from Retraction Watch (T0); OpenAlex's arXiv work with its references kept unlinked
    (T1); the referenced works described (T2): the two OpenAlex snapshots imported in `order`."""
    url = await sample_database(admin_url, "pith_test_links")
    rw = tmp_path / "rw.csv"
    rw.write_text(rw_csv([RETRACTED]))
    imported(url, "retraction-watch", str(rw), at=T0)
    files = {T1: jsonl(tmp_path / "t1.jsonl", ARXIV_WORK), T2: jsonl(tmp_path / "t2.jsonl", OTHER)}
    for at in order:
        imported(url, "openalex", files[at], at=at)
    return url


@pytest.mark.parametrize("order", [[T1, T2], [T2, T1]], ids=["in date order", "the later snapshot first"])
async def test_a_later_link_leaves_earlier_answers_as_they_were(admin_url, tmp_path, order):
    url = await build(admin_url, tmp_path, order)
    try:
        async for served in serve(url, StatementLog()):
            before, after = await answers(served, T1), await answers(served, T2)
    finally:
        await drop_database(admin_url, url)
    # As of T1 the reference was kept unlinked: what OpenAlex printed, no notice, no retracted work cited.
    assert before["reference"]["citedWork"]["doi"] is None, before
    assert before["reference"]["resolution"]["status"] == "UNRESOLVED"
    assert before["reference"]["standingNotice"]["state"] == "UNAVAILABLE"
    assert (before["flagged"], before["browsed"], before["work_cited_by"]) == (0, False, 0), before
    assert before["work_retracted"] is True  # the work itself was retracted then, known from Retraction Watch
    # From T2 it is linked: the work, its notice, and the paper cites retracted work.
    assert after["reference"]["citedWork"]["doi"] == DOI, after
    assert after["reference"]["resolution"]["status"] == "VERIFIED_EXACT"
    assert after["reference"]["standingNotice"]["state"] == "MEASURED"
    assert (after["flagged"], after["browsed"], after["work_cited_by"]) == (1, True, 1), after


async def test_records_on_both_sides_of_a_later_link_round_trip_in_either_order(admin_url, tmp_path):
    url = await build(admin_url, tmp_path, [T1, T2])
    try:
        documents = {at: export(url, at) for at in (T1, T2)}
    finally:
        await drop_database(admin_url, url)
    shown = {at: [o["citation"]["cited_work"]["work_id"] for o in json.loads(d)["outbound"]
                  if o["citation"]["source"] == "openalex"] for at, d in documents.items()}
    assert shown[T1][0] is None and shown[T2][0] is not None, shown  # the first reference: linked at T2
    for order in ([T1, T2], [T2, T1]):
        fresh = await create_database(admin_url, "pith_test_links_load")
        try:
            conn = await asyncpg.connect(fresh)
            try:
                for at in order:
                    path = tmp_path / f"{at[:10]}.json"
                    path.write_bytes(documents[at])
                    await load_file(conn, str(path))
                linked_from = await conn.fetchval(
                    "SELECT linked_from FROM citation_observations WHERE linked_from IS NOT NULL")
                assert linked_from is not None and linked_from.isoformat().startswith(T2[:10]), linked_from
            finally:
                await conn.close()
            for at, document in documents.items():
                assert export(fresh, at) == document, (order, at)
        finally:
            await drop_database(admin_url, fresh)


async def test_a_link_made_before_checks_imported_earlier_holds_at_them(admin_url, tmp_path):
    """The citing work's snapshot of 15 October (its reference's work not described) imported before the
    snapshot of 1 October that links it: from 1 October the reference is linked, at 15 October too, as date order
    (1 September, 1 October, 15 October) gives; before 1 October it is not."""
    later = "2026-10-15T00:00:00Z"
    url = await build(admin_url, tmp_path, [T1])
    try:
        imported(url, "openalex", jsonl(tmp_path / "again.jsonl", ARXIV_WORK), at=later)
        imported(url, "openalex", jsonl(tmp_path / "t2.jsonl", OTHER), at=T2)
        async for served in serve(url, StatementLog()):
            found = {at: await answers(served, at) for at in (T1, "2026-09-15T00:00:00Z", T2, later)}
    finally:
        await drop_database(admin_url, url)
    linked = {at: f["reference"]["citedWork"]["doi"] for at, f in found.items()}
    assert linked == {T1: None, "2026-09-15T00:00:00Z": None, T2: DOI, later: DOI}, linked
    assert [f["reference"]["resolution"]["status"] for f in found.values()] == [
        "UNRESOLVED", "UNRESOLVED", "VERIFIED_EXACT", "VERIFIED_EXACT"]
    assert [f["flagged"] for f in found.values()] == [0, 0, 1, 1]
