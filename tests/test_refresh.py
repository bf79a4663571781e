"""Monthly refreshes are ordinary imports: the same records at a later instant are the same facts observed
again, in whatever order the snapshots and sources arrive. The real records of tests/data/sources are used
where they serve; the rest (Retraction Watch rows, monthly variants of works) are constructed in the
published layouts, as tests/data/sources/README.md says."""

from __future__ import annotations

import csv
import io
import json
import os
import random
from datetime import datetime
from pathlib import Path

import asyncpg
import pytest

from tests.conftest import StatementLog, create_database, drop_database, sample_database, serve
from tests.test_sources import DATA, PAPER, facts, imported, pith, rw_csv

pytestmark = pytest.mark.asyncio(loop_scope="session")

REAL = json.loads((DATA / "openalex-W2755950973.json").read_text())
OTHER = {"id": "https://openalex.org/W2741809807", "doi": "https://doi.org/10.1000/other.7", "title": "Another work",
         "publication_year": 2017, "cited_by_count": 4}  # constructed
ARXIV_WORK = {"id": "https://openalex.org/W9000000003", "doi": None, "title": "MegaScale", "publication_year": 2024,
              "cited_by_count": 11, "locations": [{"landing_page_url": "https://arxiv.org/abs/2402.15627v1"}],
              "referenced_works": ["https://openalex.org/W2741809807", REAL["id"]]}  # constructed
OUTBOUND = """query($at: DateTime) { paper(arxivId: "%s", asOf: $at) { outbound(first: 10) { nodes { observationId source
  referenceIndex sourceObservedAt resolution { status observedAt } citedWork { doi title } } } } }""" % PAPER


def jsonl(path: Path, *works: dict) -> str:
    path.write_text("".join(json.dumps(w) + "\n" for w in works))
    return str(path)


async def openalex_outbound(served, at: str) -> list[tuple]:
    body = await served.graphql(OUTBOUND, {"at": at})
    assert "errors" not in body, body
    return [(n["referenceIndex"], n["citedWork"]["doi"], n["resolution"]["status"], n["sourceObservedAt"],
             n["observationId"]) for n in body["data"]["paper"]["outbound"]["nodes"] if n["source"] == "openalex"]


async def test_openalex_refreshes_and_kept_references_link_when_their_works_arrive(admin_url, tmp_path):
    url = await sample_database(admin_url, "pith_test_refresh_oa")
    t1, t2, t3 = "2026-09-01T00:00:00Z", "2026-10-01T00:00:00Z", "2026-11-01T00:00:00Z"
    try:
        async for served in serve(url, StatementLog()):
            imported(url, "openalex", jsonl(tmp_path / "m1.jsonl", ARXIV_WORK), at=t1)
            first = await openalex_outbound(served, t1)
            assert [(i, doi, status) for i, doi, status, _, _ in first] == [
                (1, None, "UNRESOLVED"), (2, None, "UNRESOLVED")]
            # The referenced works arrive by themselves a month later: the kept references link to them.
            summary = imported(url, "openalex", jsonl(tmp_path / "m2.jsonl", REAL, OTHER), at=t2)
            assert "2 kept references linked" in summary, summary
            second = await openalex_outbound(served, t2)
            assert [(i, doi, status, seen) for i, doi, status, seen, _ in second] == [
                (1, "10.1000/other.7", "VERIFIED_EXACT", t1), (2, "10.1103/physrevlett.118.091101", "VERIFIED_EXACT", t1)]
            assert [o[4] for o in second] == [o[4] for o in first]  # the same observations
            assert await openalex_outbound(served, t1) == first  # nothing earlier rewritten
            # The monthly snapshot: the citing work and its references together, again.
            together = jsonl(tmp_path / "m3.jsonl", ARXIV_WORK, REAL, OTHER)
            imported(url, "openalex", together, at=t3)
            third = await openalex_outbound(served, t3)
            assert [(o[0], o[1], o[2], o[3], o[4]) for o in third] == [(o[0], o[1], o[2], o[3], o[4]) for o in second]
            before = await facts(url)
            imported(url, "openalex", together, at=t3)  # the same snapshot at its own instant adds nothing
            assert await facts(url) == before
    finally:
        await drop_database(admin_url, url)


async def test_opencitations_refreshes(admin_url, tmp_path):
    url = await sample_database(admin_url, "pith_test_refresh_oc")
    path = tmp_path / "oc.csv"
    rows = (DATA / "opencitations-citations_data.csv").read_text().splitlines()
    # A constructed row in the same layout: an arXiv paper of the sample citing a real cited DOI of the file.
    rows.append('"0-1","10.48550/arxiv.2402.15627","10.1002/jrs.5302","2024-02","P1Y","no","no"')
    path.write_text("\n".join(rows) + "\n")
    try:
        async for served in serve(url, StatementLog()):
            imported(url, "opencitations", str(path), at="2026-09-01T00:00:00Z")
            imported(url, "opencitations", str(path), at="2026-10-01T00:00:00Z")
            body = await served.graphql("""{ work(doi: "10.1002/jrs.5302", asOf: "2026-10-01T00:00:00Z") {
              externalCitationMeasurements { source count observedAt } inbound(first: 5) { totalCount
              nodes { referenceIndex sourceObservedAt resolution { observedAt } } } } }""")
            work = body["data"]["work"]
            assert work["externalCitationMeasurements"] == [
                {"source": "opencitations", "count": 2, "observedAt": "2026-10-01T00:00:00Z"}]
            assert [(n["sourceObservedAt"], n["resolution"]["observedAt"]) for n in work["inbound"]["nodes"]] == [
                ("2026-09-01T00:00:00Z", "2026-10-01T00:00:00Z")]
            # An OpenCitations row has no place in a reference list: the API says so (null), not 0.
            assert [n["referenceIndex"] for n in work["inbound"]["nodes"]] == [None]
            compiled = await served.graphql("""{ paper(arxivId: "%s", asOf: "2026-10-01T00:00:00Z") {
              outbound(first: 10) { nodes { source referenceIndex } } } }""" % PAPER)
            assert {(n["source"], n["referenceIndex"]) for n in compiled["data"]["paper"]["outbound"]["nodes"]} == {
                ("opencitations", None)}
    finally:
        await drop_database(admin_url, url)


# --- three monthly snapshots of every source, imported in date order and shuffled -------------------------

MONTHS = ("2026-09", "2026-10", "2026-11")
SOURCE_HOURS = {"arxiv": 1, "retraction-watch": 2, "crossref": 3, "openalex": 4, "opencitations": 5}
ARXIV_DOI = "10.48550/arxiv.2402.15627"


def instant(month: int, source: str) -> str:
    return f"{MONTHS[month]}-01T{SOURCE_HOURS[source]:02d}:00:00Z"


def snapshots(tmp_path: Path) -> list[tuple[str, str, str]]:
    """(source, instant, file) of each monthly snapshot: the real records, varied month to month in the ways
    real snapshots vary (rows added and withdrawn, a flag flipped, a reference list grown)."""
    out = []
    arxiv_lines = (DATA / "arxiv-metadata-snapshot-0704.0001-0100.jsonl").read_text().splitlines()
    oc_rows = (DATA / "opencitations-citations_data.csv").read_text().splitlines()
    for m in range(3):
        # arXiv: the first 40 records, ten more each month; one gains a version in the third.
        records = [json.loads(line) for line in arxiv_lines[:40 + 10 * m]]
        if m == 2:
            records[0]["versions"].append({"version": "v9", "created": "Mon, 2 Nov 2026 10:00:00 GMT"})
        out.append(("arxiv", instant(m, "arxiv"), jsonl(tmp_path / f"arxiv-{m}.jsonl", *records)))
        # Retraction Watch (constructed): a retraction, a reinstatement in the second month only, another
        # paper's expression of concern becoming a retraction.
        rows = [{"Title": "MegaScale", "RetractionDate": "9/3/2025 0:00", "RetractionDOI": "10.9999/r.1",
                 "OriginalPaperDOI": ARXIV_DOI, "RetractionNature": "Retraction"},
                {"Title": "Back again", "Journal": "J", "RetractionDate": "1/5/2021 0:00", "RetractionDOI": "10.9999/e.2",
                 "OriginalPaperDOI": "10.1000/back.9", "RetractionNature": "Expression of concern"}]
        if m == 1:
            rows.append({"Title": "MegaScale", "RetractionDate": "4/4/2026 0:00", "RetractionDOI": "10.9999/b.1",
                         "OriginalPaperDOI": ARXIV_DOI, "RetractionNature": "Reinstatement"})
        if m >= 1:
            rows.append({"Title": "Back again", "Journal": "J", "RetractionDate": "2/2/2022 0:00",
                         "RetractionDOI": "10.9999/r.2", "OriginalPaperDOI": "10.1000/back.9",
                         "RetractionNature": "Retraction"})
        path = tmp_path / f"rw-{m}.csv"
        path.write_text(rw_csv(rows))
        out.append(("retraction-watch", instant(m, "retraction-watch"), str(path)))
        # Crossref: the real 2025-layout works every month, and a constructed record of the retracted paper
        # stating its old retraction from the second month on.
        import gzip
        works = [json.loads(line) for line in gzip.open(DATA / "crossref-2025.jsonl.gz").read().decode().splitlines()
                 if line.strip()]
        if m >= 1:
            works.append({"DOI": "10.1000/back.9", "title": ["Back again"], "container-title": ["J"],
                          "issued": {"date-parts": [[2019]]}, "type": "journal-article", "is-referenced-by-count": m,
                          "updated-by": [{"type": "retraction", "DOI": "10.9999/cr.9", "source": "publisher",
                                          "updated": {"date-time": "2019-06-01T00:00:00Z"}}]})
        out.append(("crossref", instant(m, "crossref"), jsonl(tmp_path / f"crossref-{m}.jsonl", *works)))
        # OpenAlex: the real work every month, the other referenced work from the second; the arXiv work's
        # is_retracted true in the first month only.
        arxiv_work = {**ARXIV_WORK, "is_retracted": m == 0, "cited_by_count": 11 + m}
        oa = [arxiv_work, REAL] + ([OTHER] if m >= 1 else [])
        out.append(("openalex", instant(m, "openalex"), jsonl(tmp_path / f"openalex-{m}.jsonl", *oa)))
        # OpenCitations: the real rows, and a constructed row of the arXiv paper citing the retracted paper
        # from the second month.
        rows_oc = oc_rows[:4 + 2 * m] + (['"0-2","10.48550/arxiv.2402.15627","10.1000/back.9","2024","P1Y","no","no"']
                                         if m >= 1 else [])
        path = tmp_path / f"oc-{m}.csv"
        path.write_text("\n".join(rows_oc) + "\n")
        out.append(("opencitations", instant(m, "opencitations"), str(path)))
    return out


ASKED = """query($at: DateTime) {
  works(asOf: $at, first: 100) { nodes { doi title venue year metadataSource retracted
    standing { state events { eventType source observedAt reportedAt noticeDoi } sourceReceipts { source observedAt } }
    externalCitationMeasurements { source count observedAt } inbound(first: 20) { totalCount } } }
  papers(arxivIds: ["0704.0001", "0704.0002", "0704.0045", "2402.15627"], asOf: $at) { arxivId title latestVersion
    lastUpdated doi } }"""


async def every_answer(served, at: str) -> list:
    body = await served.graphql(ASKED, {"at": at})
    assert "errors" not in body, body
    record = await served.client.get(f"/paper/{PAPER}/citation-record.json", params={"as_of": at})
    assert record.status_code == 200
    return [body["data"], record.text]


def first_difference(a, b, path="$") -> str:
    if isinstance(a, str) and isinstance(b, str) and a.startswith("{") and b.startswith("{"):
        a, b = json.loads(a), json.loads(b)
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                return first_difference(a.get(key), b.get(key), f"{path}.{key}")
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return first_difference(x, y, f"{path}[{i}]")
    return f"{path}: date order {json.dumps(a)[:400]}, here {json.dumps(b)[:400]}"


async def test_every_source_in_any_order_gives_what_date_order_gives(admin_url, tmp_path):
    files = snapshots(tmp_path)
    dated = sorted(files, key=lambda f: f[1])
    instants = sorted({f[1] for f in files}) + ["2026-12-01T00:00:00Z"]
    orders = {"date order": dated}
    for seed in (1, 2):
        shuffled = list(files)
        random.Random(seed).shuffle(shuffled)
        orders[f"shuffled {seed}"] = shuffled
    found: dict[str, list] = {}
    for name, order in orders.items():
        url = await sample_database(admin_url, "pith_test_refresh_all")
        try:
            for source, at, path in order:
                imported(url, source, path, at=at)
            async for served in serve(url, StatementLog()):
                found[name] = [await every_answer(served, at) for at in instants]
        finally:
            await drop_database(admin_url, url)
    for name in orders:
        for at, expected, got in zip(instants, found["date order"], found[name]):
            assert got == expected, f"{name} differs at {at}: {first_difference(expected, got)}"
    # The cases the snapshots were built for answer as they should, in date order (and so in any).
    by_month = dict(zip(instants, found["date order"]))
    works = {w["doi"]: w for w in by_month[instant(1, "opencitations")][0]["works"]["nodes"]}
    assert works[ARXIV_DOI]["retracted"] is False  # reinstated in the second month (after the 2025 retraction)
    assert works["10.1000/back.9"]["retracted"] is True
    assert works["10.1000/back.9"]["title"] == "Back again"
    later = {w["doi"]: w for w in by_month["2026-12-01T00:00:00Z"][0]["works"]["nodes"]}
    assert later[ARXIV_DOI]["retracted"] is True  # the reinstatement row withdrawn in the third month


# --- nothing dropped ----------------------------------------------------------------------------------------

PLOS = "10.1371/journal.pone.0033693"


def plos_work() -> dict:
    """A Crossref work in the public-data-file layout (constructed): the DOI of an arXiv paper's journal
    version, with 70 real Crossref references (those of funded.json.gz's work, in their order)."""
    import gzip

    real = json.loads(gzip.open(DATA / "funded.json.gz").read())["items"][0]
    refs = [dict(r, key=f"pone.0033693-{i}") for i, r in enumerate(real["reference"][:70], start=1)]
    refs[1] = {k: v for k, v in refs[1].items() if k not in ("DOI", "doi-asserted-by")}  # one without a DOI
    refs[2] = dict(refs[2], **{"doi-asserted-by": "crossref"})
    return {"DOI": PLOS.upper(), "title": ["A journal version"], "container-title": ["PLoS ONE"],
            "issued": {"date-parts": [[2012, 3, 21]]}, "type": "journal-article", "reference-count": 70,
            "is-referenced-by-count": 5, "reference": refs}


async def test_crossref_references_are_the_arxiv_papers_outbound_in_order(admin_url, tmp_path):
    url = await sample_database(admin_url, "pith_test_crossref_refs")
    # The arXiv paper whose journal version the work is (a metadata-snapshot record, constructed).
    paper = {"id": "1203.00001", "title": "An arXiv paper", "categories": "q-bio.PE", "doi": PLOS,
             "versions": [{"version": "v1", "created": "Mon, 5 Mar 2012 10:00:00 GMT"}]}
    work = plos_work()
    try:
        imported(url, "arxiv", jsonl(tmp_path / "arxiv.jsonl", paper), at="2026-09-01T00:00:00Z")
        summary = imported(url, "crossref", jsonl(tmp_path / "plos.jsonl", work), str(DATA / "funded.json.gz"),
                           at="2026-09-02T00:00:00Z")
        # The other work's 72 references are no arXiv paper's: skipped, and said so.
        assert "72 skipped (72 references of works that are no loaded arXiv paper's)" in summary, summary
        async for served in serve(url, StatementLog()):
            body = await served.graphql("""{ paper(arxivId: "1203.00001") { doi outbound(first: 100) { totalCount
              nodes { source referenceIndex resolution { status resolverSource } citedWork { doi title year } } } } }""")
            outbound = body["data"]["paper"]["outbound"]
            assert body["data"]["paper"]["doi"] == PLOS and outbound["totalCount"] == 70
            refs = work["reference"]
            assert [n["referenceIndex"] for n in outbound["nodes"]] == list(range(1, 71))
            assert [n["citedWork"]["doi"] for n in outbound["nodes"]] == [
                r["DOI"].lower() if "DOI" in r else None for r in refs]
            assert {n["source"] for n in outbound["nodes"]} == {"crossref"}
            statuses = [(n["resolution"]["status"], n["resolution"]["resolverSource"]) for n in outbound["nodes"]]
            assert statuses[:3] == [("VERIFIED_EXACT", "publisher"), ("UNRESOLVED", None),
                                    ("VERIFIED_EXACT", "crossref")]
            assert outbound["nodes"][1]["citedWork"]["title"] == refs[1]["unstructured"]
            assert outbound["nodes"][0]["citedWork"]["year"] == int(refs[0]["year"])
        # The next month's snapshot is the same list observed again.
        before = await facts(url)
        imported(url, "crossref", jsonl(tmp_path / "plos.jsonl", work), at="2026-10-02T00:00:00Z")
        after = await facts(url)
        assert after["citation_observations"] == before["citation_observations"]
        assert after["resolutions"] == before["resolutions"] + 70
    finally:
        await drop_database(admin_url, url)


async def test_openalex_counts_of_an_arxiv_work_are_the_papers(admin_url, tmp_path):
    url = await sample_database(admin_url, "pith_test_oa_counts")
    # (With entries of no use, constructed: a year as text, a reference that is no id. Counted, not stored.)
    work = {**ARXIV_WORK, "counts_by_year": REAL["counts_by_year"][:3] + [{"year": "2020", "cited_by_count": 1}],
            "referenced_works": ARXIV_WORK["referenced_works"] + [7]}
    try:
        summary = imported(url, "openalex", jsonl(tmp_path / "w.jsonl", work), at="2026-09-01T00:00:00Z")
        assert "1 counts_by_year entries without an integer year" in summary, summary
        assert "1 referenced_works entries that are no OpenAlex id" in summary, summary
        async for served in serve(url, StatementLog()):
            body = await served.graphql("""{ paper(arxivId: "%s", asOf: "2026-09-01T00:00:00Z") {
              externalCitationMeasurements { source count observedAt byYear { year count } } } }""" % PAPER)
            found = {m["source"]: m for m in body["data"]["paper"]["externalCitationMeasurements"]}
            assert found["openalex"] == {"source": "openalex", "count": 11, "observedAt": "2026-09-01T00:00:00Z",
                                         "byYear": [{"year": y["year"], "count": y["cited_by_count"]}
                                                    for y in sorted(REAL["counts_by_year"][:3], key=lambda y: y["year"])]}
            record = (await served.client.get(f"/paper/{PAPER}/citation-record.json",
                                              params={"as_of": "2026-09-01T00:00:00Z"})).json()
            assert {"count": 11, "observed_at": "2026-09-01T00:00:00Z", "source": "openalex"} in \
                record["external_citation_measurements"]
    finally:
        await drop_database(admin_url, url)


@pytest.mark.parametrize("first", ["retraction-watch", "crossref", "openalex"])
async def test_sources_stamped_with_the_same_instant_all_import(admin_url, tmp_path, first):
    """Each month's snapshots stamped with one date: Retraction Watch, Crossref and OpenAlex describing one work at
    the same --observed-at all import, in any order (constructed records in the published layouts). The work has
    one description at the instant, the same whichever came first (Crossref's, the DOI's registrar's: DESCRIBERS); a
    description that gives way to one stored is counted in the summary; everything else of each import is stored
    (its check, events, counts)."""
    from tests.test_sources import rw_csv

    at, doi = "2026-09-01T00:00:00Z", "10.1000/same.1"
    rw = tmp_path / "rw.csv"
    rw.write_text(rw_csv([{"Title": "Same (Retraction Watch)", "Journal": "J", "RetractionDate": "1/2/2020 0:00",
                           "RetractionDOI": "10.9999/same", "OriginalPaperDOI": doi, "RetractionNature": "Retraction",
                           "OriginalPaperDate": "1/1/2019 0:00"}]))
    files = {"retraction-watch": str(rw),
             "crossref": jsonl(tmp_path / "cr.jsonl", {"DOI": doi, "title": ["Same (Crossref)"], "type": "journal-article",
                                                        "is-referenced-by-count": 3}),
             "openalex": jsonl(tmp_path / "oa.jsonl", {"id": "https://openalex.org/W7000000001",
                                                        "doi": f"https://doi.org/{doi}", "title": "Same (OpenAlex)",
                                                        "publication_year": 2019, "cited_by_count": 4})}
    order = [first] + [s for s in files if s != first]
    url = await sample_database(admin_url, "pith_test_same_instant")
    try:
        summaries = [imported(url, source, files[source], at=at, extra=("--partial",) if source == "retraction-watch"
                              else ()) for source in order]
        conn = await asyncpg.connect(url)
        try:
            snapshots = await conn.fetch("SELECT metadata_source, title FROM work_snapshots AS w JOIN (SELECT DISTINCT "
                                         "work_id FROM work_snapshots WHERE doi = $1) AS d USING (work_id)", doi)
            receipts = {r[0] for r in await conn.fetch(
                "SELECT source FROM standing_receipts WHERE work_id IN (SELECT work_id FROM work_snapshots "
                "WHERE doi = $1)", doi)}
            measured = {r[0] for r in await conn.fetch(
                "SELECT source FROM work_measurements WHERE work_id IN (SELECT work_id FROM work_snapshots "
                "WHERE doi = $1)", doi)}
        finally:
            await conn.close()
    finally:
        await drop_database(admin_url, url)
    assert len(snapshots) == 1, snapshots  # one description at the instant
    assert receipts == {"retraction_watch", "crossref", "openalex"} and {"crossref", "openalex"} <= measured
    assert (snapshots[0]["metadata_source"], snapshots[0]["title"]) == ("crossref", "Same (Crossref)"), snapshots
    after = summaries[order.index("crossref") + 1:]  # each gave way to Crossref's, and says so
    assert all("1 work descriptions at an instant another source described the work at" in s for s in after), after


KEPT = """query($at: DateTime) { works(asOf: $at, first: 10) { nodes { doi title venue year metadataSource } } }"""


async def work_at_instants(admin_url: str, imports: list[tuple], instants: list[str], doi: str) -> list:
    """A sample database given these imports (source, file, --observed-at, extra arguments) in this order: the
    work with this DOI as `works(asOf:)` answers at each instant."""
    url = await sample_database(admin_url, "pith_test_work_at")
    try:
        for source, path, at, extra in imports:
            imported(url, source, path, at=at, extra=extra)
        answers = []
        async for served in serve(url, StatementLog()):
            for at in instants:
                body = await served.graphql(KEPT, {"at": at})
                assert "errors" not in body, body
                answers.append([w for w in body["data"]["works"]["nodes"] if w["doi"] == doi])
        return answers
    finally:
        await drop_database(admin_url, url)


async def test_values_a_description_keeps_are_those_date_order_keeps(admin_url, tmp_path):
    """A source's description keeps what its source does not give (a venue, a year) from the work's latest earlier
    description, whichever source gave it: Retraction Watch's Journal (1 September), kept by OpenAlex's description
    without a venue (1 October), whose year is kept by a Crossref record giving only a title (1 November). Imported
    in reverse date order, or with the earliest last, every instant answers as date order does (constructed rows
    in the published layouts)."""
    doi = "10.1000/kept.1"
    rw = tmp_path / "rw.csv"
    rw.write_text(rw_csv([{"Title": "Kept", "Journal": "Journal of Keeping", "RetractionDate": "1/2/2020 0:00",
                           "RetractionDOI": "10.9999/kept", "OriginalPaperDOI": doi, "RetractionNature": "Retraction"}]))
    files = {"retraction-watch": ("2026-09-01T00:00:00Z", str(rw)),
             "openalex": ("2026-10-01T00:00:00Z", jsonl(tmp_path / "oa.jsonl", {
                 "id": "https://openalex.org/W7000000002", "doi": f"https://doi.org/{doi}", "title": "Kept (OpenAlex)",
                 "publication_year": 2019, "cited_by_count": 4})),
             "crossref": ("2026-11-01T00:00:00Z", jsonl(tmp_path / "cr.jsonl", {
                 "DOI": doi, "title": ["Kept (Crossref)"], "type": "journal-article", "is-referenced-by-count": 3}))}
    orders = {"date order": ["retraction-watch", "openalex", "crossref"],
              "reverse": ["crossref", "openalex", "retraction-watch"],
              "earliest last": ["openalex", "crossref", "retraction-watch"]}
    instants = ["2026-09-15T00:00:00Z", "2026-10-15T00:00:00Z", "2026-11-15T00:00:00Z"]
    found = {}
    for name, order in orders.items():
        found[name] = await work_at_instants(admin_url, [
            (source, files[source][1], files[source][0], ("--partial",) if source == "retraction-watch" else ())
            for source in order], instants, doi)
    assert found["date order"] == [
        [{"doi": doi, "title": "Kept", "venue": "Journal of Keeping", "year": None, "metadataSource": "retraction_watch"}],
        [{"doi": doi, "title": "Kept (OpenAlex)", "venue": "Journal of Keeping", "year": 2019,
          "metadataSource": "openalex"}],
        [{"doi": doi, "title": "Kept (Crossref)", "venue": "Journal of Keeping", "year": 2019,
          "metadataSource": "crossref"}]]
    for name in orders:
        assert found[name] == found["date order"], name


# --- references that arrive before their arXiv paper ----------------------------------------------------------

LATE = "2501.00002"  # an arXiv paper with no journal DOI: sources name it by its arXiv DOI (constructed)
LATE_DOI = f"10.48550/arxiv.{LATE}"
LATE_OUTBOUND = """query($at: DateTime) { papers(arxivIds: ["1203.00001", "%s"], asOf: $at) { arxivId
  outbound(first: 100) { totalCount nodes { observationId source referenceIndex sourceObservedAt
    resolution { status resolverSource observedAt } citedWork { doi title year metadataSource } } } } }""" % LATE


def late_snapshots(tmp_path: Path) -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str]]]:
    """Two monthly snapshots of each source naming two arXiv papers, and the arXiv snapshots that load them
    (constructed, in the published layouts; the references are real Crossref ones): the journal version of one
    (PLoS ONE) with its 70 Crossref references and OpenCitations rows; the other by its arXiv DOI, with a
    Crossref list, OpenCitations rows, and an OpenAlex work whose references name works described in the same
    snapshot, only in the next one, and in none."""
    import gzip

    real = json.loads(gzip.open(DATA / "funded.json.gz").read())["items"][0]["reference"]
    sources, papers = [], []
    for m in range(2):
        late_refs = [dict(r, key=f"late-{i}") for i, r in enumerate(real[:5 + m], start=1)]
        crossref = [plos_work(), {"DOI": LATE_DOI.replace("arxiv", "arXiv"), "title": ["A late paper"],
                                  "type": "posted-content", "reference": late_refs}]
        sources.append(("crossref", instant(m, "crossref"), jsonl(tmp_path / f"late-cr-{m}.jsonl", *crossref)))
        oc = ['"oci","citing","cited","creation","timespan","journal_sc","author_sc"']
        oc += [f'"0-{i}","{citing}","10.1000/oc.{i}","2024","P1Y","no","no"'
               for i, citing in enumerate([PLOS, PLOS, LATE_DOI] + ([LATE_DOI] if m else []))]
        path = tmp_path / f"late-oc-{m}.csv"
        path.write_text("\n".join(oc) + "\n")
        sources.append(("opencitations", instant(m, "opencitations"), str(path)))
        work = {"id": "https://openalex.org/W9000000077", "doi": None, "title": "A late paper",
                "publication_year": 2025, "cited_by_count": 2 + m,
                "locations": [{"landing_page_url": f"https://arxiv.org/abs/{LATE}v1"}],
                "referenced_works": [REAL["id"], OTHER["id"], "https://openalex.org/W1000000001"]}
        sources.append(("openalex", instant(m, "openalex"),
                        jsonl(tmp_path / f"late-oa-{m}.jsonl", work, REAL, *([OTHER] if m else []))))
        records = [{"id": "1203.00001", "title": "An arXiv paper", "categories": "q-bio.PE", "doi": PLOS,
                    "versions": [{"version": "v1", "created": "Mon, 5 Mar 2012 10:00:00 GMT"}]},
                   {"id": LATE, "title": "A late paper", "categories": "cs.LG",
                    "versions": [{"version": "v1", "created": "Thu, 2 Jan 2025 10:00:00 GMT"}]}]
        papers.append(("arxiv", instant(m, "arxiv"), jsonl(tmp_path / f"late-arxiv-{m}.jsonl", *records)))
    return sources, papers


async def test_references_given_before_their_arxiv_paper_are_its_outbound_as_date_order_gives(admin_url, tmp_path):
    """The arXiv snapshots imported after every other source's (the later month first): the references the
    sources gave for papers not loaded then were kept, and are the papers' outbound at the sources' own instants
    once the papers are loaded, as in date order. References of a journal DOI no paper had (a Crossref list,
    OpenCitations rows) are counted, not kept (keeping them would keep those sources' references whole), with the
    files they came from: the arXiv import that makes the DOI a paper's reads those files again for that DOI alone.
    Where the files are no longer as they were (moved, rewritten), it names the snapshots to import again, and
    those imports add them."""
    sources, papers = late_snapshots(tmp_path)
    instants = sorted({at for _, at, _ in sources + papers}) + ["2026-12-01T00:00:00Z"]
    shuffled = random.Random(3).sample(sources, len(sources)) + papers[::-1]
    orders = {"date order": sorted(sources + papers, key=lambda f: f[1]), "papers last": shuffled,
              "papers last, files changed": shuffled}
    found, said = {}, {}
    for name, order in orders.items():
        url = await sample_database(admin_url, "pith_test_refs_first")
        try:
            said[name] = []
            for source, at, path in order:
                if name.endswith("files changed") and source == "arxiv":
                    for _, _, other in sources:  # each file rewritten since (as a new download is)
                        os.utime(other, ns=(os.stat(other).st_atime_ns, os.stat(other).st_mtime_ns + 10**9))
                said[name].append(imported(url, source, path, at=at))
            if name == "papers last":
                # Read again: both snapshots of the PLoS work's Crossref list and of the OpenCitations rows citing
                # its DOI, said once each by the arXiv import that made the DOI a paper's at their instants.
                assert not any("not kept: import" in x for x in said[name]), said[name]
                assert any("references counted, not kept, for these papers' DOIs added" in x for x in said[name])
            if name.endswith("files changed"):
                # What the arXiv imports said: the snapshots to import again, which then add them.
                again = [(s, at, p) for s, at, p in sources
                         if any(f"{s} gave at {at} for these papers' DOIs were not kept (its file {p}: changed or "
                                f"gone since)" in x for x in said[name])]
                assert sorted(s for s, _, _ in again) == ["crossref"] * 2 + ["opencitations"] * 2, said[name]
                assert not any("read again" in x for x in said[name]), said[name]
                for source, at, path in again:
                    imported(url, source, path, at=at)
            if name != "date order":
                # Added now: an arXiv import again no longer says so, nor reads anything again.
                last = imported(url, "arxiv", papers[1][2], at=papers[1][1])
                assert "not kept" not in last and "read again" not in last, last
            async for served in serve(url, StatementLog()):
                answers = []
                for at in instants:
                    body = await served.graphql(LATE_OUTBOUND, {"at": at})
                    assert "errors" not in body, body
                    answers.append(body["data"]["papers"])
                found[name] = answers
        finally:
            await drop_database(admin_url, url)
    for name in ("papers last", "papers last, files changed"):
        for at, expected, got in zip(instants, found["date order"], found[name]):
            assert got == expected, f"{name} differs at {at}: {first_difference(expected, got)}"
    final = {p["arxivId"]: p["outbound"] for p in found["date order"][-1]}
    plos, late = final["1203.00001"], final[LATE]
    assert plos["totalCount"] == 72 and sum(n["source"] == "crossref" for n in plos["nodes"]) == 70
    assert late["totalCount"] == 6 + 2 + 3, [(n["source"], n["referenceIndex"]) for n in late["nodes"]]
    openalex = sorted((n["referenceIndex"], n["citedWork"] and n["citedWork"]["doi"]) for n in late["nodes"]
                      if n["source"] == "openalex")
    assert openalex == [(1, REAL["doi"].removeprefix("https://doi.org/").lower()), (2, "10.1000/other.7"), (3, None)]
    assert "references kept for these papers added" in said["papers last"][-2], said["papers last"][-2]


async def test_references_kept_for_a_paper_are_added_when_a_v1_load_brings_it(admin_url, tmp_path):
    """A v1 document is the other way a paper arrives: the references OpenAlex and OpenCitations gave for it before
    (kept) are its outbound once the document is loaded, as when the document came first (constructed rows in the
    real layouts; the bundled v1 records)."""
    sample = [str(Path(__file__).resolve().parent.parent / "app" / "sample" / name)
              for name in ("citation-record-2402.15627-2026-08-05.json", "records-2402.15627-2026-08-09.ndjson")]
    at = "2026-09-01T00:00:00Z"
    openalex = jsonl(tmp_path / "oa.jsonl", ARXIV_WORK, REAL)
    oc = tmp_path / "oc.csv"
    oc.write_text('"oci","citing","cited","creation","timespan","journal_sc","author_sc"\n'
                  f'"0-1","{ARXIV_DOI}","10.1000/oc.1","2024","P1Y","no","no"\n')
    found, said = {}, {}
    for name in ("documents first", "documents last"):
        url = await create_database(admin_url, "pith_test_kept_load")
        try:
            if name == "documents first":
                assert pith("load", *sample, url=url).returncode == 0
            imported(url, "openalex", openalex, at=at)
            imported(url, "opencitations", str(oc), at=at, extra=("--partial",))
            if name == "documents last":
                done = pith("load", *sample, url=url)
                assert done.returncode == 0, done.stderr.decode()
                said[name] = done.stderr.decode()
            async for served in serve(url, StatementLog()):
                body = await served.graphql(OUTBOUND, {"at": at})
                assert "errors" not in body, body
                found[name] = body["data"]["paper"]["outbound"]["nodes"]
        finally:
            await drop_database(admin_url, url)
    assert found["documents last"] == found["documents first"]
    assert {n["source"] for n in found["documents first"]} >= {"openalex", "opencitations"}
    assert "references kept for these papers added" in said["documents last"], said


@pytest.mark.parametrize("source", ["openalex", "crossref"])
async def test_an_arxiv_import_and_a_source_import_at_once_miss_no_reference(admin_url, tmp_path, source):
    """An arXiv import and an OpenAlex (or Crossref) import run at the same time (one cron job per source): the
    source's import decides whether the paper is loaded (or whose DOI a work's is) only once the arXiv import has
    committed it, or the arXiv import sees the references the other kept. Made deterministic: a side transaction
    holds the change log's lock, which the arXiv import takes before it commits; the other import starts while the
    arXiv import waits there. (Crossref: a journal work's list, which is counted, not kept, when read first.)"""
    import subprocess
    import sys
    import os
    import asyncio

    from app.ingest.store import CHANGE_LOG_LOCK

    paper = {"id": LATE, "title": "A late paper", "categories": "cs.LG", "doi": "10.1000/journal.1",
             "versions": [{"version": "v1", "created": "Thu, 2 Jan 2025 10:00:00 GMT"}]}
    work = {"id": "https://openalex.org/W9000000077", "doi": None, "title": "A late paper", "publication_year": 2025,
            "locations": [{"landing_page_url": f"https://arxiv.org/abs/{LATE}v1"}], "referenced_works": [REAL["id"]]}
    journal = {**plos_work(), "DOI": "10.1000/journal.1"}
    journal["reference"] = journal["reference"][:5]
    arxiv_file = jsonl(tmp_path / "arxiv.jsonl", paper)
    source_file = jsonl(tmp_path / "oa.jsonl", work, REAL) if source == "openalex" else \
        jsonl(tmp_path / "cr.jsonl", journal)
    url = await create_database(admin_url, "pith_test_kept_race")
    side = await asyncpg.connect(url)

    async def waiting(n: int) -> None:
        for _ in range(600):
            if await side.fetchval("SELECT count(DISTINCT pid) FROM pg_locks WHERE NOT granted") >= n:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"{n} imports never waited")

    def start(source: str, path: str, at: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "app.cli", "import", source, "--observed-at", at, path],
                                env={**os.environ, "DATABASE_URL": url}, stderr=subprocess.PIPE)

    try:
        held = side.transaction()
        await held.start()
        await side.execute("SELECT pg_advisory_xact_lock($1)", CHANGE_LOG_LOCK)
        arxiv = start("arxiv", arxiv_file, "2026-09-01T01:00:00Z")
        await waiting(1)
        other = start(source, source_file, "2026-09-01T04:00:00Z")
        await waiting(2)
        await held.rollback()
        for child in (arxiv, other):
            _, err = await asyncio.to_thread(child.communicate, timeout=120)
            assert child.returncode == 0, err.decode()
        observations = await side.fetchval("SELECT count(*) FROM citation_observations WHERE citing_arxiv_id = $1",
                                           LATE)
        kept = await side.fetchval("SELECT count(*) FROM kept_references")
    finally:
        await side.close()
        await drop_database(admin_url, url)
    assert (observations, kept) == ((1 if source == "openalex" else 5), 0)


async def test_a_doi_a_paper_had_only_later_takes_no_references_of_earlier_instants(admin_url, tmp_path):
    """A journal work's Crossref list (1 September) belongs to an arXiv paper from the instant the paper is said to
    have that DOI: loaded on 1 August without one and given it on 1 October, or first loaded on 1 October, the list
    of 1 September is not the paper's at any instant, in date order or not, and no import asks for it again."""
    journal = {**plos_work(), "DOI": "10.1000/journal.2"}
    journal["reference"] = journal["reference"][:4]
    crossref = ("crossref", "2026-09-01T03:00:00Z", jsonl(tmp_path / "cr.jsonl", journal))

    def arxiv(name: str, at: str, doi: str | None) -> tuple[str, str, str]:
        record = {"id": "1203.00077", "title": "A paper", "categories": "q-bio.PE",
                  "versions": [{"version": "v1", "created": "Mon, 5 Mar 2012 10:00:00 GMT"}], **({"doi": doi} if doi else {})}
        return ("arxiv", at, jsonl(tmp_path / f"{name}.jsonl", record))

    cases = {"a DOI given later": [arxiv("aug", "2026-08-01T01:00:00Z", None), arxiv("oct", "2026-10-01T01:00:00Z",
                                                                                    "10.1000/journal.2")],
             "loaded later": [arxiv("oct", "2026-10-01T01:00:00Z", "10.1000/journal.2")]}
    query = """query($at: DateTime) { paper(arxivId: "1203.00077", asOf: $at) { doi outbound(first: 10) { totalCount } } }"""
    for name, papers in cases.items():
        found = {}
        for order in ("date order", "list first"):
            url = await create_database(admin_url, "pith_test_doi_later")
            try:
                steps = sorted(papers + [crossref], key=lambda f: f[1]) if order == "date order" else [crossref] + papers
                said = [imported(url, source, path, at=at) for source, at, path in steps]
                assert not any("not kept" in x for x in said), (name, order, said)
                async for served in serve(url, StatementLog()):
                    found[order] = [(await served.graphql(query, {"at": at}))["data"]["paper"]
                                    for at in ("2026-09-15T00:00:00Z", "2026-10-15T00:00:00Z")]
            finally:
                await drop_database(admin_url, url)
        assert found["list first"] == found["date order"], name
        assert [p and p["outbound"]["totalCount"] for p in found["date order"]] == [0 if len(papers) == 2 else None, 0]


PRINTED = "Cheng, K.T., Krishnakumar, A.S.: Automatic functional test generation using the extended finite state machine"


@pytest.mark.parametrize("rw_at", ["2026-08-01T00:00:00Z", "2026-09-01T00:00:00Z", "2026-10-01T00:00:00Z"])
async def test_a_retraction_watch_title_replaces_what_a_crossref_reference_printed_in_any_order(admin_url, tmp_path,
                                                                                               rw_at):
    """A work known only from a Crossref reference to it is described by what the reference printed; a Retraction
    Watch row's title replaces that (a printed reference is no title), from the row's instant, whichever of the two
    is imported first, and where both are stamped with one instant (constructed records in the published layouts:
    the arXiv DOI's Crossref record citing the work, a Retraction Watch row of it)."""
    from tests.test_sources import rw_csv

    cr_at, cited = "2026-09-01T00:00:00Z", "10.1145/157485.164585"
    crossref = jsonl(tmp_path / "cr.jsonl", {
        "DOI": ARXIV_DOI, "title": ["MegaScale"], "type": "posted-content",
        "reference": [{"key": "r1", "DOI": cited, "doi-asserted-by": "crossref", "unstructured": PRINTED,
                       "year": "1993"}]})
    rw = tmp_path / "rw.csv"
    rw.write_text(rw_csv([{"Title": "Automatic generation of functional vectors", "Journal": "ACM",
                           "RetractionDate": "1/2/2020 0:00", "RetractionDOI": "10.9999/fsm",
                           "OriginalPaperDOI": cited, "RetractionNature": "Retraction",
                           "OriginalPaperDate": "1/1/1993 0:00"}]))
    files = {"crossref": (crossref, cr_at, ()), "retraction-watch": (str(rw), rw_at, ("--partial",))}
    instants = ["2026-08-01T00:00:00Z", "2026-09-01T00:00:00Z", "2026-10-01T00:00:00Z", "2026-12-01T00:00:00Z"]
    found = {}
    for order in (("crossref", "retraction-watch"), ("retraction-watch", "crossref")):
        found[order] = await work_at_instants(admin_url, [(source, *files[source]) for source in order], instants,
                                              cited)
    first, second = found.values()
    for at, a, b in zip(instants, first, second):
        assert a == b, f"differs at {at}: {a} against {b}"
    (final,) = first[-1]
    assert final["title"] == "Automatic generation of functional vectors" and final["venue"] == "ACM", final
    if rw_at > cr_at:  # what the reference printed, until the row
        (then,) = first[1]
        assert then["title"] == PRINTED and then["metadataSource"] == "crossref_reference", then


async def test_a_v1_documents_description_never_gives_way_at_its_instant(admin_url, tmp_path):
    """A work snapshot a v1 document stated stays as stated when an import describes the work at the same instant,
    whatever the precedence of the import's source (the bundled record's cited arXiv work, described by Crossref at
    its snapshot's instant: constructed record in the published layout); the import's description is counted."""
    from app.ingest.sources import Importer

    doi, at = "10.48550/arxiv.2402.15627", "2026-08-05T02:28:24.338817+00:00"
    url = await sample_database(admin_url, "pith_test_v1_stays")
    try:
        conn = await asyncpg.connect(url)
        try:
            query = "SELECT metadata_source, title FROM work_snapshots WHERE doi = $1 AND observed_at = $2"
            before = await conn.fetch(query, doi, datetime.fromisoformat(at))
            assert [r["metadata_source"] for r in before] == ["arxiv_reference"], before
            # (In process: the command line's --observed-at keeps whole seconds, the document's instant has more.)
            summary = await Importer(conn, "crossref", datetime.fromisoformat(at)).run(
                [jsonl(tmp_path / "cr.jsonl", {"DOI": doi, "title": ["Another title"]})])
            said = summary.line()
            assert await conn.fetch(query, doi, datetime.fromisoformat(at)) == before  # (kept is NULL)
        finally:
            await conn.close()
    finally:
        await drop_database(admin_url, url)
    assert "1 work descriptions at an instant another source described the work at" in said, said
