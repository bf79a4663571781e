"""`pith-graph import SOURCE`: the open sources' real records (tests/data/sources, provenance in
tests/data/README.md) and constructed Retraction Watch rows in the published layout, each mapping
asserted through GraphQL, each quirk of the formats with its test."""

from __future__ import annotations

import asyncio
import csv
import gzip
import io
import json
import os
import subprocess
import sys

import asyncpg
import pytest
import pytest_asyncio
import websockets

from app.ingest.doi import normalize_doi
from app.ingest.load import load_file
from tests.conftest import AUG9, ROOT, LiveServer, StatementLog, create_database, drop_database, sample_database, serve

pytestmark = pytest.mark.asyncio(loop_scope="session")

DATA = ROOT / "tests" / "data" / "sources"
PAPER = "2402.15627"  # its work has the DOI 10.48550/arxiv.2402.15627; six papers of 9 August cite it
CITING = "2409.19256"
AT = "2026-08-10T00:00:00Z"
BEFORE = "2026-08-09T23:59:59Z"
RW_HEADER = ("Record ID,Title,Subject,Institution,Journal,Publisher,Country,Author,URLS,ArticleType,RetractionDate,"
             "RetractionDOI,RetractionPubMedID,OriginalPaperDate,OriginalPaperDOI,OriginalPaperPubMedID,"
             "RetractionNature,Reason,Paywalled,Notes")


def rw_csv(rows: list[dict[str, str]], trailing_comma: bool = True, blank_rows: int = 2) -> str:
    """Retraction Watch rows (constructed) in the published layout: a header that may end with a comma,
    blank trailing rows."""
    out = io.StringIO()
    names = RW_HEADER.split(",")
    out.write(RW_HEADER + ("," if trailing_comma else "") + "\r\n")
    writer = csv.writer(out)
    for i, row in enumerate(rows, start=1):
        full = {"Record ID": str(i), "Subject": "(PHY) Physics;", "Institution": "Somewhere", "Publisher": "P",
                "Country": "X", "Author": "A. Author;B. Author", "URLS": "", "ArticleType": "Research Article;",
                "RetractionPubMedID": "0", "OriginalPaperPubMedID": "0", "Reason": "+Error in Data;+Concerns",
                "Paywalled": "No", "Notes": "", **row}
        writer.writerow([full.get(n, "") for n in names] + ([""] if trailing_comma else []))
    out.write(("," * len(names)) + "\r\n" * blank_rows)
    return out.getvalue()


def pith(*args: str, url: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.cli", *args], env={**os.environ, "DATABASE_URL": url},
                          capture_output=True, timeout=120, input=stdin)


def imported(url: str, source: str, *files: str, at: str = AT, extra: tuple[str, ...] = ()) -> str:
    done = pith("import", source, "--observed-at", at, *extra, *files, url=url)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return done.stderr.decode()


async def facts(url: str) -> dict[str, int]:
    from tests.conftest import FACT_TABLES

    conn = await asyncpg.connect(url)
    try:
        counts = {t: await conn.fetchval(f"SELECT count(*) FROM {t}") for t in FACT_TABLES}
        counts["data_version"] = await conn.fetchval("SELECT version FROM data_version")
        counts["change_log"] = await conn.fetchval("SELECT count(*) FROM change_log")
        return counts
    finally:
        await conn.close()


@pytest_asyncio.fixture(loop_scope="session")
async def seeded(admin_url):
    """A database with the 5 and 9 August records (their works carry DOIs), and the API on it in-process."""
    url = await sample_database(admin_url, "pith_test_src")
    async for served in serve(url, StatementLog()):
        yield url, served
    await drop_database(admin_url, url)


async def test_dois_meet_in_one_form_whatever_the_source_writes():
    same = ["10.1002/(SICI)1097-4636", "https://doi.org/10.1002/(sici)1097-4636", "http://dx.doi.org/10.1002/(SICI)1097-4636",
            "doi:10.1002/%28SICI%291097-4636", " DOI: 10.1002/(sici)1097-4636 ", "https://doi.org/10.1002%2F%28SICI%291097-4636"]
    assert {normalize_doi(v) for v in same} == {"10.1002/(sici)1097-4636"}
    for missing in ("", "unavailable", "Unavailable", "0", None, "not a doi", "10.12/x"):
        assert normalize_doi(missing) is None, missing


WORK = """query($doi: String!, $at: DateTime) { work(doi: $doi, asOf: $at) { doi title venue year metadataSource retracted
  standing { state reason events { eventType source reportedAt noticeDoi observedAt } sourceReceipts { source observedAt } }
  externalCitationMeasurements { source count observedAt } inbound(first: 10) { totalCount nodes { citingPaper { arxivId } } } } }"""


async def test_a_retraction_watch_row_lights_up_the_papers_that_cite_the_doi_from_its_instant(seeded, tmp_path):
    url, served = seeded
    rows = [{"Title": "MegaScale", "Journal": "arXiv", "RetractionDate": "8/7/2026 0:00",
             "RetractionDOI": "10.9999/RETRACT.1", "OriginalPaperDate": "2/23/2024 0:00",
             "OriginalPaperDOI": "https://doi.org/10.48550/ARXIV.2402.15627",  # another case, as a URL
             "RetractionNature": "Retraction"}]
    path = tmp_path / "rw.csv"
    path.write_text(rw_csv(rows))
    count = """query($at: DateTime) { paper(arxivId: "%s", asOf: $at) { outbound(citesRetracted: true) { totalCount } } }"""
    before = (await served.graphql(count % CITING, {"at": BEFORE}))["data"]["paper"]["outbound"]["totalCount"]
    summary = imported(url, "retraction-watch", str(path))
    assert "1 records" in summary and "0 skipped" in summary, summary
    after = (await served.graphql(count % CITING, {"at": AT}))["data"]["paper"]["outbound"]["totalCount"]
    still = (await served.graphql(count % CITING, {"at": BEFORE}))["data"]["paper"]["outbound"]["totalCount"]
    assert (before, still, after) == (0, 0, 1)
    work = (await served.graphql(WORK, {"doi": "10.48550/arxiv.2402.15627", "at": AT}))["data"]["work"]
    assert work["retracted"] is True and work["standing"]["state"] == "MEASURED"
    event = work["standing"]["events"][0]
    assert event == {"eventType": "RETRACTION", "source": "retraction_watch", "reportedAt": "2026-08-07T00:00:00Z",
                     "noticeDoi": "10.9999/retract.1", "observedAt": AT}
    assert "retraction_watch" in {r["source"] for r in work["standing"]["sourceReceipts"]}
    assert work["inbound"]["totalCount"] == 6
    diff = (await served.graphql("""query($f: DateTime!, $t: DateTime!) { recordDiff(arxivId: "%s", from: $f, to: $t,
      kinds: [STANDING_EVENT]) { changes { kind observedAt event { eventType source noticeDoi } } } }""" % CITING,
                                 {"f": BEFORE, "t": AT}))["data"]["recordDiff"]["changes"]
    assert [(c["kind"], c["observedAt"], c["event"]["eventType"]) for c in diff] == [("STANDING_EVENT", AT, "RETRACTION")]
    timeline = (await served.graphql("""{ paper(arxivId: "%s", asOf: "%s") { timeline(from: "%s") { nodes { at kinds } } } }"""
                                     % (CITING, AT, BEFORE)))["data"]["paper"]["timeline"]["nodes"]
    assert {"at": AT, "kinds": ["STANDING_EVENT"]} in timeline or any(
        n["at"] == AT and "STANDING_EVENT" in n["kinds"] for n in timeline), timeline


async def test_standing_changed_fires_when_retraction_watch_is_imported(admin_url, tmp_path):
    url = await sample_database(admin_url, "pith_test_src_live")
    server = LiveServer(url)
    path = tmp_path / "rw.csv"
    path.write_text(rw_csv([{"RetractionDate": "8/7/2026 0:00", "RetractionDOI": "10.9999/r.2",
                             "OriginalPaperDOI": "10.48550/arXiv.2402.15627", "RetractionNature": "Retraction"}]))
    try:
        ws_url = server.base.replace("http://", "ws://") + "/graphql"
        async with websockets.connect(ws_url, subprotocols=["graphql-transport-ws"]) as ws:
            await ws.send(json.dumps({"type": "connection_init"}))
            assert json.loads(await ws.recv())["type"] == "connection_ack"
            await ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": {"query": """subscription {
              standingChanged(arxivId: "%s") { event { eventType source noticeDoi } } }""" % CITING}}))
            await asyncio.sleep(0.5)
            await asyncio.to_thread(imported, url, "retraction-watch", str(path), at="2026-08-10T00:00:00Z")
            while True:
                message = json.loads(await asyncio.wait_for(ws.recv(), 10))
                if message["type"] == "next":
                    break
        assert message["payload"]["data"]["standingChanged"]["event"] == {
            "eventType": "RETRACTION", "source": "retraction_watch", "noticeDoi": "10.9999/r.2"}
    finally:
        server.stop()
        await drop_database(admin_url, url)


async def test_standing_changed_announces_an_events_end(admin_url, tmp_path):
    """A Retraction Watch row withdrawn from the next file (constructed rows): its retraction ends at that
    check, and a live standingChanged subscriber hears of the end as it heard of the event."""
    url = await sample_database(admin_url, "pith_test_src_live_end")
    server = LiveServer(url)
    other = {"RetractionDate": "1/2/2021 0:00", "RetractionDOI": "10.9999/r.other", "OriginalPaperDOI": "10.1000/other.1",
             "RetractionNature": "Retraction"}
    first, second = tmp_path / "rw-aug.csv", tmp_path / "rw-sep.csv"
    first.write_text(rw_csv([{"RetractionDate": "8/7/2026 0:00", "RetractionDOI": "10.9999/r.2",
                              "OriginalPaperDOI": "10.48550/arXiv.2402.15627", "RetractionNature": "Retraction"}, other]))
    second.write_text(rw_csv([other]))  # the row of 10.48550/arXiv.2402.15627 withdrawn
    asked = """subscription { standingChanged(arxivId: "%s") {
      cursor standing endedAt event { eventType source observedAt noticeDoi } } }""" % CITING
    try:
        ws_url = server.base.replace("http://", "ws://") + "/graphql"
        async with websockets.connect(ws_url, subprotocols=["graphql-transport-ws"]) as ws:
            await ws.send(json.dumps({"type": "connection_init"}))
            assert json.loads(await ws.recv())["type"] == "connection_ack"
            await ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": {"query": asked}}))
            await asyncio.sleep(0.5)
            heard = []
            for path, at in ((first, "2026-08-10T00:00:00Z"), (second, "2026-09-10T00:00:00Z")):
                await asyncio.to_thread(imported, url, "retraction-watch", str(path), at=at)
                while True:
                    message = json.loads(await asyncio.wait_for(ws.recv(), 10))
                    assert message["type"] == "next", message
                    heard.append(message["payload"]["data"]["standingChanged"])
                    break
        event = {"eventType": "RETRACTION", "source": "retraction_watch", "observedAt": "2026-08-10T00:00:00Z",
                 "noticeDoi": "10.9999/r.2"}
        assert [(h["standing"], h["endedAt"], h["event"]) for h in heard] == [
            (True, None, event), (False, "2026-09-10T00:00:00Z", event)]
        # The end is in the change log after the event: resuming from the event's cursor replays the end alone.
        async with websockets.connect(ws_url, subprotocols=["graphql-transport-ws"]) as ws:
            await ws.send(json.dumps({"type": "connection_init"}))
            assert json.loads(await ws.recv())["type"] == "connection_ack"
            await ws.send(json.dumps({"id": "2", "type": "subscribe", "payload": {"query": asked.replace(
                "standingChanged(arxivId: \"%s\")" % CITING,
                "standingChanged(arxivId: \"%s\", after: \"%s\")" % (CITING, heard[0]["cursor"]))}}))
            message = json.loads(await asyncio.wait_for(ws.recv(), 10))
            assert message["type"] == "next", message
            replayed = message["payload"]["data"]["standingChanged"]
            assert (replayed["standing"], replayed["endedAt"], replayed["cursor"]) == (False, "2026-09-10T00:00:00Z",
                                                                                     heard[1]["cursor"])
    finally:
        server.stop()
        await drop_database(admin_url, url)


async def test_retraction_watch_quirks(seeded, tmp_path):
    url, served = seeded
    rows = [
        # One paper, two rows: an expression of concern, later the retraction.
        {"OriginalPaperDOI": "10.1000/Paper.One", "Title": "Paper one", "Journal": "J One", "OriginalPaperDate":
         "3/4/2020 0:00", "RetractionNature": "Expression of concern", "RetractionDate": "1/2/2021 0:00",
         "RetractionDOI": "unavailable"},
        {"OriginalPaperDOI": "10.1000/paper.one", "RetractionNature": "Retraction", "RetractionDate": "12/31/2021 0:00",
         "RetractionDOI": "https://doi.org/10.1000/RETRACTION.ONE"},
        # Percent-encoded, with a correction; another reinstated after its retraction.
        {"OriginalPaperDOI": "10.1002/%28SICI%291097-0010", "RetractionNature": "Correction",
         "RetractionDate": "7/1/2019 0:00", "RetractionDOI": "10.1002/corr.1"},
        {"OriginalPaperDOI": "10.1000/back", "RetractionNature": "Retraction", "RetractionDate": "1/1/2019 0:00"},
        {"OriginalPaperDOI": "10.1000/back", "RetractionNature": "Reinstatement", "RetractionDate": "1/1/2020 0:00"},
        # A re-saved file's ISO date, ordered by it before a later reinstatement; a date that is none (the event
        # kept undated, counted).
        {"OriginalPaperDOI": "10.1000/iso", "RetractionNature": "Retraction", "RetractionDate": "2018-09-03"},
        {"OriginalPaperDOI": "10.1000/iso", "RetractionNature": "Reinstatement", "RetractionDate": "4/4/2022 0:00"},
        {"OriginalPaperDOI": "10.1000/undated", "RetractionNature": "Retraction", "RetractionDate": "someday"},
        # Unusable: no DOI in three spellings; a nature no one defined.
        {"OriginalPaperDOI": "", "RetractionNature": "Retraction"},
        {"OriginalPaperDOI": "unavailable", "RetractionNature": "Retraction"},
        {"OriginalPaperDOI": "Unavailable", "RetractionNature": "Retraction"},
        {"OriginalPaperDOI": "10.1000/odd", "RetractionNature": "Something else"},
    ]
    path = tmp_path / "rw.csv"
    path.write_text(rw_csv(rows, trailing_comma=True, blank_rows=3))
    imported(url, "crossref", str(DATA / "1item.json.gz"), at=BEFORE)  # a work with a DOI the file does not name
    summary = imported(url, "retraction-watch", str(path))
    assert "12 records" in summary and "5 skipped" in summary and "3 rows without a usable OriginalPaperDOI" in summary
    assert "1 RetractionDate values that are no date" in summary
    iso = (await served.graphql(WORK, {"doi": "10.1000/iso", "at": AT}))["data"]["work"]
    assert [(e["eventType"], e["reportedAt"]) for e in iso["standing"]["events"]] == [
        ("RETRACTION", "2018-09-03T00:00:00Z"), ("REINSTATEMENT", "2022-04-04T00:00:00Z")] and not iso["retracted"]
    one = (await served.graphql(WORK, {"doi": "10.1000/PAPER.ONE", "at": AT}))["data"]["work"]
    assert one["title"] == "Paper one" and one["venue"] == "J One" and one["year"] == 2020
    assert one["metadataSource"] == "retraction_watch" and one["retracted"] is True
    assert [(e["eventType"], e["reportedAt"], e["noticeDoi"]) for e in one["standing"]["events"]] == [
        ("EXPRESSION_OF_CONCERN", "2021-01-02T00:00:00Z", None), ("RETRACTION", "2021-12-31T00:00:00Z",
                                                                  "10.1000/retraction.one")]
    sici = (await served.graphql(WORK, {"doi": "10.1002/(sici)1097-0010", "at": AT}))["data"]["work"]
    assert [e["eventType"] for e in sici["standing"]["events"]] == ["CORRECTION"] and not sici["retracted"]
    back = (await served.graphql(WORK, {"doi": "10.1000/back", "at": AT}))["data"]["work"]
    assert [e["eventType"] for e in back["standing"]["events"]] == ["RETRACTION", "REINSTATEMENT"]
    assert back["retracted"] is False
    # The file is the whole database: a work it does not name was checked and found clean.
    item = json.loads(gzip.open(DATA / "1item.json.gz").read())["items"][0]
    clean = (await served.graphql(WORK, {"doi": item["DOI"], "at": AT}))["data"]["work"]["standing"]
    assert clean["state"] == "MEASURED" and clean["events"] == []
    assert {r["source"]: r["observedAt"] for r in clean["sourceReceipts"]} == {"crossref": BEFORE, "retraction_watch": AT}


async def test_a_partial_retraction_watch_file_checks_only_its_own_works(admin_url, tmp_path):
    url = await create_database(admin_url, "pith_test_src_partial")
    conn = await asyncpg.connect(url)
    try:
        await load_file(conn, str(AUG9))
        path = tmp_path / "rw.csv"
        path.write_text(rw_csv([{"OriginalPaperDOI": "10.1000/else", "RetractionNature": "Retraction"}]))
        count = "SELECT count(*) FROM standing_receipts WHERE source = 'retraction_watch'"
        before = await conn.fetchval(count)
        imported(url, "retraction-watch", str(path), extra=("--partial",))
        assert await conn.fetchval(count) == before + 1  # only the work the row names
    finally:
        await conn.close()
        await drop_database(admin_url, url)


async def test_crossref_works_their_counts_and_a_notice_attached_to_its_target(seeded):
    url, served = seeded
    files = [str(DATA / f) for f in ("1item.json.gz", "3items.json.gz", "updated.json.gz", "crossref-2025.jsonl.gz",
                                     "funded.json.gz")]
    summary = imported(url, "crossref", *files)
    # Their reference lists are no arXiv paper's outbound (none of these DOIs is a loaded paper's): counted.
    listed = 0
    for name in files:
        raw = gzip.open(name).read().decode()
        items = json.loads(raw)["items"] if raw.lstrip().startswith('{"items"') else [
            json.loads(line) for line in raw.splitlines() if line.strip()]
        listed += sum(len(item.get("reference") or ()) for item in items)
    assert listed > 0 and f"{listed} skipped ({listed} references of works that are no loaded arXiv paper's)" \
        in summary, summary
    originals = {}
    for name in ("1item.json.gz", "updated.json.gz"):
        for item in json.loads(gzip.open(DATA / name).read())["items"]:
            originals[item["DOI"]] = item
    item = json.loads(gzip.open(DATA / "1item.json.gz").read())["items"][0]
    work = (await served.graphql(WORK, {"doi": item["DOI"].upper(), "at": AT}))["data"]["work"]
    assert work["doi"] == item["DOI"].lower() and work["metadataSource"] == "crossref"
    assert work["title"] == " ".join(item["title"][0].split())
    assert work["venue"] == "Journal of Plastic, Reconstructive & Aesthetic Surgery"  # &amp; in the data
    assert work["year"] == item["issued"]["date-parts"][0][0]
    assert work["externalCitationMeasurements"] == [{"source": "crossref", "count": item["is-referenced-by-count"],
                                                     "observedAt": AT}]
    assert work["standing"]["state"] == "MEASURED" and work["standing"]["events"] == []
    # The correction notice: an event on the corrected paper, which nothing here cites yet.
    notice = json.loads(gzip.open(DATA / "updated.json.gz").read())["items"][0]
    target = notice["update-to"][0]
    corrected = (await served.graphql(WORK, {"doi": target["DOI"], "at": AT}))["data"]["work"]
    assert [(e["eventType"], e["noticeDoi"], e["reportedAt"]) for e in corrected["standing"]["events"]] == [
        ("CORRECTION", notice["DOI"].lower(), target["updated"]["date-time"])]
    assert corrected["inbound"]["totalCount"] == 0
    # The 2025 layout, one work a line.
    for line in gzip.open(DATA / "crossref-2025.jsonl.gz").read().decode().splitlines():
        doi = json.loads(line)["DOI"]
        assert (await served.graphql(WORK, {"doi": doi, "at": AT}))["data"]["work"]["doi"] == doi.lower()


def crossref_work(doi: str, **more) -> dict:
    return {"DOI": doi, "title": ["A  work\n title"], "container-title": ["Venue"], "issued": {"date-parts": [[2019, 5]]},
            "is-referenced-by-count": 7, "type": "journal-article", **more}


async def test_crossref_updated_by_the_same_notice_twice_is_one_event_and_other_updates_are_not_standing(seeded, tmp_path):
    url, served = seeded
    updated = {"date-parts": [[2025, 3, 1]], "date-time": "2025-03-01T00:00:00Z"}
    works = [
        crossref_work("10.2000/orig", **{
            "updated-by": [{"type": "retraction", "DOI": "10.2000/notice", "source": "publisher", "updated": updated},
                           {"type": "retraction", "DOI": "10.2000/NOTICE", "source": "retraction-watch", "updated": updated},
                           {"type": "new_version", "DOI": "10.2000/v2", "source": "publisher", "updated": updated},
                           {"type": "addendum", "DOI": "10.2000/add", "source": "publisher", "updated": updated}],
            "relation": {"is-retracted-by": [{"id-type": "doi", "id": "10.2000/notice", "asserted-by": "object"}]}}),
        crossref_work("10.2000/partly", **{"updated-by": [{"type": "partial_retraction", "DOI": "10.2000/p-notice",
                                                           "updated": updated}]}),
        crossref_work("10.2000/gone", **{"updated-by": [{"type": "removal", "DOI": "10.2000/r-notice", "updated": updated}]}),
    ]
    # A REST answer ({"message": {"items": [...]}}) and one work alone ({"message": {...}}).
    rest = tmp_path / "works.json"
    rest.write_text(json.dumps({"status": "ok", "message-type": "work-list", "message": {"items": works[:2]}}))
    one = tmp_path / "work.json"
    one.write_text(json.dumps({"status": "ok", "message-type": "work", "message": works[2]}))
    imported(url, "crossref", str(rest), str(one))
    orig = (await served.graphql(WORK, {"doi": "10.2000/orig", "at": AT}))["data"]["work"]
    assert [(e["eventType"], e["noticeDoi"], e["reportedAt"]) for e in orig["standing"]["events"]] == [
        ("RETRACTION", "10.2000/notice", "2025-03-01T00:00:00Z")]
    assert orig["title"] == "A work title" and orig["year"] == 2019 and orig["retracted"]
    partly = (await served.graphql(WORK, {"doi": "10.2000/partly", "at": AT}))["data"]["work"]
    assert [e["eventType"] for e in partly["standing"]["events"]] == ["CORRECTION"] and not partly["retracted"]
    gone = (await served.graphql(WORK, {"doi": "10.2000/gone", "at": AT}))["data"]["work"]
    assert [e["eventType"] for e in gone["standing"]["events"]] == ["WITHDRAWAL"] and gone["retracted"]


PAPER_Q = """query($id: String!) { paper(arxivId: $id, asOf: "%s") { arxivId title latestVersion primaryCategory
  submittedAt lastUpdated doi } }""" % AT


async def test_arxiv_metadata_snapshot_papers_and_their_journal_dois(seeded):
    url, served = seeded
    summary = imported(url, "arxiv", str(DATA / "arxiv-metadata-snapshot-0704.0001-0100.jsonl"))
    assert "100 records" in summary and "0 skipped" in summary, summary
    records = [json.loads(line) for line in (DATA / "arxiv-metadata-snapshot-0704.0001-0100.jsonl").read_text().splitlines()]
    from email.utils import parsedate_to_datetime

    def iso(text: str) -> str:
        return parsedate_to_datetime(text).strftime("%Y-%m-%dT%H:%M:%SZ")

    two_dois = next(r for r in records if len((r.get("doi") or "").split()) == 2)
    wrapped = next(r for r in records if "\n" in r["title"] and len(r["versions"]) > 1)
    for record in (records[0], two_dois, wrapped):
        paper = (await served.graphql(PAPER_Q, {"id": record["id"]}))["data"]["paper"]
        assert paper["title"] == " ".join(record["title"].split()) and "\n" not in paper["title"]
        assert paper["latestVersion"] == len(record["versions"])
        assert paper["primaryCategory"] == record["categories"].split()[0]
        assert paper["submittedAt"] == iso(record["versions"][0]["created"])
        assert paper["lastUpdated"] == iso(record["versions"][-1]["created"])
        assert paper["doi"] == (record["doi"].split()[0].lower() if record.get("doi") else None)
    no_doi = next(r for r in records if not r.get("doi"))
    assert (await served.graphql(PAPER_Q, {"id": no_doi["id"]}))["data"]["paper"]["doi"] is None
    # Not before the import's instant.
    assert (await served.graphql("""{ paper(arxivId: "0704.0001", asOf: "%s") { title } }""" % BEFORE))["data"]["paper"] is None


async def test_arxiv_oai_pmh_arxivraw_records(seeded, tmp_path):
    url, served = seeded
    xml = """<?xml version="1.0" encoding="UTF-8"?>
<OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/"><ListRecords><record><header><identifier>oai:arXiv.org:0704.0002</identifier></header>
<metadata><arXivRaw xmlns="http://arxiv.org/OAI/arXivRaw/"><id>0704.0002</id><submitter>Louis Theran</submitter>
<version version="v1"><date>Sat, 31 Mar 2007 02:26:18 GMT</date><size>20kb</size></version>
<version version="v2"><date>Sat, 13 Dec 2008 17:26:00 GMT</date><size>21kb</size></version>
<title>Sparsity-certifying Graph   Decompositions</title><authors>Ileana Streinu and Louis Theran</authors>
<categories>math.CO cs.CG</categories><doi>10.1016/J.TEST.1 10.1016/j.test.2</doi></arXivRaw></metadata></record></ListRecords></OAI-PMH>"""
    path = tmp_path / "oai.xml"
    path.write_text(xml)
    imported(url, "arxiv", str(path))
    paper = (await served.graphql(PAPER_Q, {"id": "0704.0002"}))["data"]["paper"]
    assert paper == {"arxivId": "0704.0002", "title": "Sparsity-certifying Graph Decompositions", "latestVersion": 2,
                     "primaryCategory": "math.CO", "submittedAt": "2007-03-31T02:26:18Z",
                     "lastUpdated": "2008-12-13T17:26:00Z", "doi": "10.1016/j.test.1"}


async def test_openalex_a_work_its_count_and_an_arxiv_papers_references(seeded, tmp_path):
    url, served = seeded
    real = json.loads((DATA / "openalex-W2755950973.json").read_text())
    arxiv_work = {"id": "https://openalex.org/W9000000001", "doi": None, "title": "MegaScale (OpenAlex)",
                  "publication_year": 2024, "cited_by_count": 3, "is_retracted": True,
                  "locations": [{"landing_page_url": "https://arxiv.org/abs/2402.15627v2"}],
                  "referenced_works": [real["id"], "https://openalex.org/W1"]}
    path = tmp_path / "works.jsonl"
    path.write_text(json.dumps(real) + "\n" + json.dumps(arxiv_work) + "\n")
    imported(url, "openalex", str(path))
    work = (await served.graphql(WORK, {"doi": real["doi"], "at": AT}))["data"]["work"]
    assert work["doi"] == "10.1103/physrevlett.118.091101" and work["year"] == real["publication_year"]
    assert work["title"] == real["display_name"] and work["metadataSource"] == "openalex"
    assert work["externalCitationMeasurements"] == [{"source": "openalex", "count": real["cited_by_count"],
                                                     "observedAt": AT}]
    assert work["standing"]["events"] == [] and work["retracted"] is False  # is_retracted: false
    assert [r["source"] for r in work["standing"]["sourceReceipts"]] == ["openalex"]
    # The arXiv work (no DOI in OpenAlex, an arxiv.org location) is the paper's arXiv DOI's work: retracted.
    megascale = (await served.graphql(WORK, {"doi": "10.48550/arxiv.2402.15627", "at": AT}))["data"]["work"]
    assert megascale["retracted"] is True and [e["eventType"] for e in megascale["standing"]["events"]] == ["RETRACTION"]
    assert megascale["externalCitationMeasurements"] == [{"source": "openalex", "count": 3, "observedAt": AT}]
    # The arXiv work's references: one known (linked to its work), one kept unlinked with its OpenAlex id.
    refs = (await served.graphql("""{ paper(arxivId: "%s", asOf: "%s") { outbound(first: 100) { nodes { source
      referenceIndex citedWork { linked doi title } resolution { status } } } } }""" % (PAPER, AT)))["data"]
    nodes = [n for n in refs["paper"]["outbound"]["nodes"] if n["source"] == "openalex"]
    assert [(n["referenceIndex"], n["citedWork"]["linked"], n["citedWork"]["doi"] or n["citedWork"]["title"],
             n["resolution"]["status"]) for n in nodes] == [
        (1, True, "10.1103/physrevlett.118.091101", "VERIFIED_EXACT"), (2, False, "https://openalex.org/W1", "UNRESOLVED")]


async def test_opencitations_counts_per_cited_doi_and_citations_of_known_arxiv_papers(seeded, tmp_path):
    url, served = seeded
    with (DATA / "opencitations-citations_data.csv").open() as f:
        rows = list(csv.DictReader(f))
    # An arXiv paper whose journal DOI is the citing DOI of a real row.
    citing = rows[1]["citing"]
    meta = tmp_path / "arxiv.jsonl"
    meta.write_text(json.dumps({"id": "0704.0009", "title": "A paper", "categories": "physics.chem-ph", "doi": citing.upper(),
                                "versions": [{"version": "v1", "created": "Mon, 2 Apr 2007 19:18:42 GMT"}]}) + "\n")
    imported(url, "arxiv", str(meta))
    summary = imported(url, "opencitations", str(DATA / "opencitations-citations_data.csv"))
    assert f"{len(rows)} records" in summary, summary
    for cited in {r["cited"] for r in rows}:
        work = (await served.graphql(WORK, {"doi": cited, "at": AT}))["data"]["work"]
        assert work["externalCitationMeasurements"] == [
            {"source": "opencitations", "count": sum(1 for r in rows if r["cited"] == cited), "observedAt": AT}]
        assert work["standing"]["state"] == "UNAVAILABLE"  # a count of citations says nothing of standing
    out = (await served.graphql("""{ paper(arxivId: "0704.0009", asOf: "%s") { outbound { nodes { source citedWork { doi } } } } }"""
                                % AT))["data"]["paper"]["outbound"]["nodes"]
    assert sorted(n["citedWork"]["doi"] for n in out) == sorted(r["cited"] for r in rows if r["citing"] == citing)
    assert {n["source"] for n in out} == {"opencitations"}
    # A row gives no place in the reference list: the graph export says so (null), as the API does.
    exported = subprocess.run([sys.executable, "-m", "app.cli", "graph-export", "--format", "ndjson", "--as-of", AT],
                              env={**os.environ, "DATABASE_URL": url}, capture_output=True, timeout=300)
    assert exported.returncode == 0, exported.stderr.decode()[-2000:]
    lines = [json.loads(line) for line in exported.stdout.splitlines() if line.strip()]
    oc = [e for e in lines if e.get("citation_source") == "opencitations"]
    assert oc and all(e["reference_index"] is None for e in oc), oc[:3]
    assert any(e.get("reference_index") is not None for e in lines if e.get("citation_source") not in (None, "opencitations"))


async def test_an_opencitations_excerpt_gives_its_citations_but_no_count(admin_url, tmp_path):
    """`--partial`: a few rows of the index are citations, not the index's count of the cited works' citations."""
    with (DATA / "opencitations-citations_data.csv").open() as f:
        rows = list(csv.DictReader(f))
    citing = rows[1]["citing"]
    meta = tmp_path / "arxiv.jsonl"
    meta.write_text(json.dumps({"id": "0704.0009", "title": "A paper", "categories": "physics.chem-ph", "doi": citing,
                                "versions": [{"version": "v1", "created": "Mon, 2 Apr 2007 19:18:42 GMT"}]}) + "\n")
    url = await create_database(admin_url, "pith_test_oc_excerpt")
    try:
        imported(url, "arxiv", str(meta))
        imported(url, "opencitations", str(DATA / "opencitations-citations_data.csv"), extra=("--partial",))
        async for served in serve(url, StatementLog()):
            for cited in {r["cited"] for r in rows}:
                work = (await served.graphql(WORK, {"doi": cited, "at": AT}))["data"]["work"]
                if any(r["cited"] == cited and r["citing"] == citing for r in rows):
                    assert work["externalCitationMeasurements"] == [], work  # the cited work, with no count
                else:
                    assert work is None  # a row of no known paper's says nothing an excerpt can keep
            out = (await served.graphql('{ paper(arxivId: "0704.0009", asOf: "%s") { outbound { nodes { source '
                                        'citedWork { doi } } } } }' % AT))["data"]["paper"]["outbound"]["nodes"]
            assert sorted(n["citedWork"]["doi"] for n in out) == sorted(r["cited"] for r in rows if r["citing"] == citing)
        # Elsewhere --partial means nothing, and says so.
        done = pith("import", "crossref", "--partial", str(DATA / "1item.json.gz"), url=url)
        assert done.returncode == 2 and b"--partial is for retraction-watch and opencitations" in done.stderr
    finally:
        await drop_database(admin_url, url)


@pytest.mark.parametrize("partial", [False, True])
async def test_every_opencitations_row_is_an_observation_or_said_skipped_by_reason(admin_url, tmp_path, partial):
    """Constructed rows in the index's layout: a row without a citing DOI, one without a cited DOI, one citing from
    a DOI no paper has, and one citing the sample paper's arXiv DOI. Every row not kept as an observation is said
    in the summary, by reason, with whether it still counts for the cited work (the whole index) or not (an
    excerpt, --partial)."""
    oc = tmp_path / "oc.csv"
    oc.write_text('"oci","citing","cited","creation","timespan","journal_sc","author_sc"\n'
                  '"0-1","","10.1000/c.1","2020","P1Y","no","no"\n'
                  '"0-2","10.1000/a.1","","2020","P1Y","no","no"\n'
                  '"0-3","10.1000/a.1","10.1000/c.1","2020","P1Y","no","no"\n'
                  '"0-4","10.48550/arxiv.2402.15627","10.1000/c.2","2024","P1Y","no","no"\n')
    url = await sample_database(admin_url, "pith_test_oc_rows")
    try:
        summary = imported(url, "opencitations", str(oc), extra=("--partial",) if partial else ())
    finally:
        await drop_database(admin_url, url)
    counted = "(an excerpt: not counted)" if partial else "(counted for the cited work)"
    assert "4 records" in summary and "3 skipped" in summary, summary
    assert f"1 citations without a usable citing DOI {counted}" in summary, summary
    assert f"1 citations whose citing DOI is no loaded arXiv paper's {counted}" in summary, summary
    assert "1 rows without a usable cited DOI" in summary, summary


async def test_importing_the_same_file_at_the_same_instant_adds_nothing_and_keeps_the_etag(seeded, tmp_path):
    url, served = seeded
    path = tmp_path / "rw.csv"
    path.write_text(rw_csv([{"OriginalPaperDOI": "10.48550/arxiv.2402.15627", "RetractionNature": "Correction",
                             "RetractionDate": "8/1/2026 0:00"}]))
    query = {"query": '{ work(doi: "10.48550/arxiv.2402.15627") { standing { events { eventType } } } }'}
    for files in ((str(path),), (str(DATA / "1item.json.gz"),)):
        source = "retraction-watch" if files[0].endswith(".csv") else "crossref"
        imported(url, source, *files)
        first = await served.client.get("/graphql", params=query)
        counts = await facts(url)
        again = imported(url, source, *files)
        assert "0 facts added" in again, again
        assert await facts(url) == counts
        second = await served.client.get("/graphql", params=query)
        assert second.headers["etag"] == first.headers["etag"]


async def test_a_broken_file_stores_nothing_and_says_where(seeded, tmp_path):
    url, _ = seeded
    before = await facts(url)
    data = (DATA / "3items.json.gz").read_bytes()
    truncated = tmp_path / "cut.json.gz"
    truncated.write_bytes(data[: len(data) // 2])
    good = str(DATA / "1item.json.gz")
    done = pith("import", "crossref", good, str(truncated), url=url)  # the good file first: it is not kept either
    assert done.returncode == 1 and "gzip" in done.stderr.decode() and "nothing of this import was written" in done.stderr.decode()
    assert str(truncated) in done.stderr.decode()
    assert f"byte {len(data) // 2} of the file" in done.stderr.decode(), done.stderr.decode()  # where it broke off
    lines = tmp_path / "bad.jsonl"
    lines.write_text(json.dumps({"id": "0704.0001", "title": "x", "versions": []}) + "\n{not json\n")
    done = pith("import", "arxiv", str(lines), url=url)
    assert done.returncode == 1 and "line 2" in done.stderr.decode(), done.stderr.decode()
    bad_csv = tmp_path / "bad.csv"
    bad_csv.write_bytes(RW_HEADER.encode() + b"\n1,\xff\xfe broken\n")
    done = pith("import", "retraction-watch", str(bad_csv), url=url)
    assert done.returncode == 1 and "UTF-8" in done.stderr.decode(), done.stderr.decode()
    # A failed download saved under the file's name: an empty file, a header alone or rows none of which is usable
    # (which as the whole database would find every work clean, ending each retraction), an error page, an error
    # answer of the source's API.
    empty, header_only, page = tmp_path / "empty.csv", tmp_path / "header.csv", tmp_path / "page.csv"
    empty.write_bytes(b"")
    header_only.write_text(RW_HEADER + "\n")
    page.write_text("<!DOCTYPE html><html><body>Rate limited</body></html>\n")
    unusable = tmp_path / "unusable.csv"
    unusable.write_text(rw_csv([{"OriginalPaperDOI": "unavailable", "RetractionNature": "Retraction"},
                                {"OriginalPaperDOI": "", "RetractionNature": "Retraction"}]))
    oai_error = tmp_path / "oai.xml"
    oai_error.write_text('<?xml version="1.0"?><OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/">'
                         '<error code="badArgument">Illegal argument</error></OAI-PMH>')
    crossref_error, openalex_error = tmp_path / "crossref-error.json", tmp_path / "openalex-error.json"
    crossref_error.write_text(json.dumps({"status": "error", "message-type": "validation-failure",
                                          "message": [{"type": "parameter-not-allowed", "value": "x"}]}))
    openalex_error.write_text(json.dumps({"error": "Invalid query parameters error.", "message": "x is not valid"}))
    for source, path, said in (("retraction-watch", empty, "the file is empty"),
                               ("retraction-watch", header_only, "no row with a usable OriginalPaperDOI"),
                               ("retraction-watch", unusable, "no row with a usable OriginalPaperDOI"),
                               ("retraction-watch", page, "no OriginalPaperDOI, RetractionNature column"),
                               ("opencitations", empty, "the file is empty"),
                               ("opencitations", page, "no citing, cited column"),
                               ("arxiv", page, "not an OAI-PMH answer"),
                               ("arxiv", oai_error, "badArgument"),
                               ("crossref", crossref_error, "an error answer"),
                               ("openalex", openalex_error, "x is not valid")):
        done = pith("import", source, str(path), url=url)
        assert done.returncode == 1 and said in done.stderr.decode(), (source, path, done.stderr.decode())
        assert "nothing of this import was written" in done.stderr.decode()
    # A quote left open swallows the rows after it (Python's csv reads on to the next quote, or to the end):
    # refused where the row began, not read as fewer rows (which, as the whole database, ended their retractions).
    open_quote = tmp_path / "quote.csv"
    open_quote.write_text(rw_csv([{"OriginalPaperDOI": "10.1000/q1", "RetractionNature": "Retraction"},
                                  {"OriginalPaperDOI": "10.1000/q2", "RetractionNature": "Retraction"}])
                          .replace(",10.1000/q1,", ',"10.1000/q1,', 1))
    cut_citation = tmp_path / "cut.csv"
    cut_citation.write_text('oci,citing,cited,creation,timespan,journal_sc,author_sc\n'
                            '1-2,10.1/a,"10.1/b,2020,P1Y,no,no\n3-4,10.1/c,10.1/d,2020,P1Y,no,no\n')
    for source, path in (("retraction-watch", open_quote), ("opencitations", cut_citation)):
        done = pith("import", source, str(path), url=url)
        assert done.returncode == 1 and "line 2: a row of" in done.stderr.decode(), done.stderr.decode()
        assert "a quote left open" in done.stderr.decode() and "nothing of this import was written" in done.stderr.decode()
    assert pith("import", "retraction-watch", "--partial", str(header_only), url=url).returncode == 0  # an excerpt
    assert await facts(url) == before
    # A file of another JSON source named as this one: read as this source's, an arXiv record's DOI and title
    # had become an OpenAlex work with a receipt saying OpenAlex found nothing against it; refused whole, saying
    # which source the file is (after good records too: nothing of the import is written).
    arxiv_file = str(DATA / "arxiv-metadata-snapshot-0704.0001-0100.jsonl")
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text((DATA / "openalex-W2755950973.json").read_text().replace("\n", " ") + "\n"
                     + (DATA / "arxiv-metadata-snapshot-0704.0001-0100.jsonl").read_text().splitlines()[0] + "\n")
    for source, path, said in (("openalex", arxiv_file, "line 1: an arXiv metadata record"),
                               ("crossref", arxiv_file, "import arxiv"),
                               ("arxiv", str(DATA / "openalex-W2755950973.json"), "import openalex"),
                               ("arxiv", good, "import crossref"), ("openalex", good, "a Crossref work"),
                               ("crossref", str(DATA / "openalex-W2755950973.json"), "an OpenAlex work"),
                               ("openalex", str(mixed), "line 2: an arXiv metadata record")):
        done = pith("import", source, path, url=url)
        assert done.returncode == 1 and said in done.stderr.decode(), (source, path, done.stderr.decode())
        assert "nothing of this import was written" in done.stderr.decode()
    assert await facts(url) == before
    wrong = pith("import", "crossref", "--observed-at", "yesterday", good, url=url)
    assert wrong.returncode == 2 and "--observed-at" in wrong.stderr.decode()
    ahead = pith("import", "crossref", "--observed-at", "2999-01-01T00:00:00Z", good, url=url)  # a typo'd year
    assert ahead.returncode == 2 and "later than now" in ahead.stderr.decode(), ahead.stderr.decode()
    assert await facts(url) == before


async def test_standard_input_and_work_lookup_refusals(seeded):
    url, served = seeded
    done = pith("import", "crossref", "--observed-at", AT, "-", url=url,
                stdin=gzip.decompress((DATA / "crossref-2025.jsonl.gz").read_bytes()))
    assert done.returncode == 0, done.stderr.decode()
    body = await served.graphql('{ work(doi: "not a doi") { title } }')
    assert body["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT" and "10.1038" in body["errors"][0]["message"]
    assert (await served.graphql('{ work(doi: "10.5555/nobody") { title } }'))["data"]["work"] is None


async def test_openalex_references_link_to_works_read_in_later_batches(seeded, tmp_path):
    from app.ingest.sources import BATCH

    url, served = seeded
    n = BATCH + 200  # the arXiv work's references are described after a batch has been written
    arxiv_work = {"id": "https://openalex.org/W9000000002", "title": "MegaScale", "publication_year": 2024,
                  "locations": [{"landing_page_url": "http://arxiv.org/abs/2402.15627"}],
                  "referenced_works": [f"https://openalex.org/W7{i:07d}" for i in (0, n - 1)]}
    lines = [json.dumps(arxiv_work)] + [json.dumps({"id": f"https://openalex.org/W7{i:07d}", "doi": f"10.7777/w.{i}",
                                                    "title": f"Work {i}", "publication_year": 2020}) for i in range(n)]
    path = tmp_path / "many.jsonl"
    path.write_text("\n".join(lines) + "\n")
    imported(url, "openalex", str(path))
    refs = (await served.graphql("""{ paper(arxivId: "%s", asOf: "%s") { outbound(first: 100) { nodes { source
      referenceIndex citedWork { doi title } } } } }""" % (PAPER, AT)))["data"]["paper"]["outbound"]["nodes"]
    assert [(r["referenceIndex"], r["citedWork"]["doi"], r["citedWork"]["title"]) for r in refs
            if r["source"] == "openalex"] == [(1, "10.7777/w.0", "Work 0"), (2, f"10.7777/w.{n - 1}", f"Work {n - 1}")]


async def test_a_record_that_cannot_be_read_leaves_its_works_standing_as_it_was(admin_url, tmp_path):
    """A Retraction Watch row of a nature no one defined, an OpenAlex is_retracted that is neither true nor false:
    skipped, said where, and their works are not checked by the import (no receipt, no event ended), so a typo in
    a monthly file never reads as "the retraction is gone". The other works are checked as before."""
    url = await create_database(admin_url, "pith_test_src_unsure")
    later = "2026-09-01T00:00:00Z"
    rows = [{"OriginalPaperDOI": "10.1000/kept", "RetractionNature": "Retraction", "RetractionDate": "1/2/2021 0:00"},
            {"OriginalPaperDOI": "10.1000/ends", "RetractionNature": "Retraction", "RetractionDate": "1/2/2021 0:00"}]
    first, second = tmp_path / "rw1.csv", tmp_path / "rw2.csv"
    first.write_text(rw_csv(rows))
    second.write_text(rw_csv([{**rows[0], "RetractionNature": "Retracton"}]
                             + [{"OriginalPaperDOI": "10.1000/other", "RetractionNature": "Correction"}]))
    works = [{"id": f"https://openalex.org/W9{i}", "doi": f"https://doi.org/10.1000/oa{i}", "title": f"OA {i}",
              "publication_year": 2020, "cited_by_count": 1, "is_retracted": True} for i in (1, 2)]
    oa1, oa2 = tmp_path / "oa1.jsonl", tmp_path / "oa2.jsonl"
    oa1.write_text("".join(json.dumps(w) + "\n" for w in works))
    oa2.write_text(json.dumps({**works[0], "is_retracted": "true"}) + "\n"
                   + json.dumps({**works[1], "is_retracted": False, "cited_by_count": "many"}) + "\n")
    try:
        async for served in serve(url, StatementLog()):
            imported(url, "retraction-watch", str(first))
            summary = imported(url, "retraction-watch", str(second), at=later)
            assert "1 rows with an unknown RetractionNature" in summary and "the first at line 2" in summary, summary
            assert "1 works whose record could not be read kept their standing" in summary, summary
            kept = (await served.graphql(WORK, {"doi": "10.1000/kept", "at": later}))["data"]["work"]
            assert kept["retracted"] is True, kept
            assert [r["observedAt"] for r in kept["standing"]["sourceReceipts"]] == [AT], kept
            ends = (await served.graphql(WORK, {"doi": "10.1000/ends", "at": later}))["data"]["work"]
            assert ends["retracted"] is False, ends  # not in the whole database any more: its retraction ended
            imported(url, "openalex", str(oa1))
            summary = imported(url, "openalex", str(oa2), at=later)
            assert "1 works whose is_retracted is neither true nor false, the first at line 1" in summary, summary
            assert "1 cited_by_count values that are no count (not written), the first at line 2" in summary, summary
            one = (await served.graphql(WORK, {"doi": "10.1000/oa1", "at": later}))["data"]["work"]
            two = (await served.graphql(WORK, {"doi": "10.1000/oa2", "at": later}))["data"]["work"]
            assert one["retracted"] is True and two["retracted"] is False, (one, two)
            assert [m["count"] for m in two["externalCitationMeasurements"]] == [1], two  # the earlier count stands
    finally:
        await drop_database(admin_url, url)


async def test_json_lines_whose_first_line_is_long_or_after_a_byte_order_mark(seeded, tmp_path):
    """JSON lines are told from one document by their first line, however long (an OpenAlex work with its
    references, a Crossref work with hundreds, pass 64 kB), after a byte order mark and blank lines too."""
    url, served = seeded
    works = [{"id": f"https://openalex.org/W8{i}", "doi": f"https://doi.org/10.1000/long{i}", "title": f"Long {i}",
              "publication_year": 2020, "cited_by_count": i, "is_retracted": False,
              "referenced_works": [f"https://openalex.org/W{n}" for n in range(4000)]} for i in (1, 2)]
    text = "".join(json.dumps(w) + "\n" for w in works)
    assert len(text.splitlines()[0]) > 1 << 16
    long_first, marked = tmp_path / "long.jsonl", tmp_path / "bom.jsonl"
    long_first.write_text(text)
    marked.write_bytes(b"\xef\xbb\xbf\n" + json.dumps({**works[0], "cited_by_count": 7}).encode() + b"\n"
                       + json.dumps({**works[1], "cited_by_count": 8}).encode() + b"\n")
    assert "2 records" in imported(url, "openalex", str(long_first))
    assert "2 records" in imported(url, "openalex", str(marked), at="2026-08-11T00:00:00Z")
    found = (await served.graphql(WORK, {"doi": "10.1000/long2", "at": "2026-08-11T00:00:00Z"}))["data"]["work"]
    assert [m["count"] for m in found["externalCitationMeasurements"]] == [8], found
