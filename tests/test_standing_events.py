"""The standing rule over real imports (docs/standing.md): at an instant, the events standing then decide, in the
order they happened; a source's newer check that no longer reports an event ends it. Every reader answers the
same: the notice, Work.retracted, citesRetracted, works(filter:), recordDiff, the timeline, the exports. The
Retraction Watch rows, Crossref records and OpenAlex works are constructed in the published layouts."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import asyncpg
import pytest

from loaders.graph import Graph
from tests.conftest import StatementLog, drop_database, sample_database, serve
from tests.test_sources import CITING, imported, rw_csv

pytestmark = pytest.mark.asyncio(loop_scope="session")

DOI = "10.48550/arxiv.2402.15627"  # the work of 2402.15627, which CITING and five other papers cite
T1, T2, T3 = "2026-09-01T00:00:00Z", "2026-10-01T00:00:00Z", "2026-11-01T00:00:00Z"
BEFORE = "2026-08-31T00:00:00Z"

ANSWERS = """query($doi: String!, $at: DateTime) {
  work(doi: $doi, asOf: $at) { retracted standing { state events { eventType source observedAt reportedAt noticeDoi }
    sourceReceipts { source observedAt } } }
  paper(arxivId: "%s", asOf: $at) { flagged: outbound(citesRetracted: true) { totalCount } }
  works(filter: {retracted: true}, asOf: $at) { nodes { doi } } }""" % CITING


async def answers(served, url: str, at: str) -> dict:
    """What each reader says of the work at `at`."""
    body = await served.graphql(ANSWERS, {"doi": DOI, "at": at})
    assert "errors" not in body, body
    data = body["data"]
    instant = datetime.fromisoformat(at.replace("Z", "+00:00"))
    conn = await asyncpg.connect(url)
    try:
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            exported = [e async for e in Graph(conn, instant).edges()]
    finally:
        await conn.close()
    edges = [e for e in exported if e.source == f"arxiv:{CITING}" and e.target == "arxiv:2402.15627"]
    assert edges, [e.source for e in exported][:5]
    hood = await served.client.get("/graph/neighbourhood.ndjson", params={
        "arxiv_id": CITING, "direction": "outbound", "depth": 1, "per_paper": 100, "as_of": at})
    assert hood.status_code == 200, hood.text
    hood_edges = [r for r in map(json.loads, hood.text.splitlines())
                  if r["type"] == "edge" and r["target"] == "arxiv:2402.15627"]
    return {
        "retracted": data["work"]["retracted"],
        "events": [(e["eventType"], e["source"], e["reportedAt"]) for e in data["work"]["standing"]["events"]],
        "cites_retracted": data["paper"]["flagged"]["totalCount"] > 0,
        "listed": DOI in {w["doi"] for w in data["works"]["nodes"]},
        "export": {e.cited_work_retracted for e in edges},
        "neighbourhood": {r["cited_work_retracted"] for r in hood_edges},
    }


def agreeing(found: dict, retracted: bool) -> bool:
    return (found["retracted"] is found["cites_retracted"] is found["listed"] is retracted
            and found["export"] == found["neighbourhood"] == {retracted})


async def diff_and_timeline(served, frm: str, to: str) -> tuple[list, list]:
    diff = await served.graphql("""query($f: DateTime!, $t: DateTime!) { recordDiff(arxivId: "%s", from: $f, to: $t,
      kinds: [STANDING_EVENT]) { changes { observedAt event { eventType source } previous current } } }""" % CITING,
                                {"f": frm, "t": to})
    timeline = await served.graphql("""{ paper(arxivId: "%s", asOf: "%s") { timeline(from: "%s") {
      nodes { at kinds } } } }""" % (CITING, to, frm))
    return diff["data"]["recordDiff"]["changes"], timeline["data"]["paper"]["timeline"]["nodes"]


RW_ROWS = [  # the retraction, then its reinstatement four years on
    {"Title": "MegaScale", "Journal": "arXiv", "RetractionDate": "9/3/2018 0:00", "RetractionDOI": "10.9999/rw.retract",
     "OriginalPaperDOI": DOI, "RetractionNature": "Retraction", "OriginalPaperDate": "2/23/2018 0:00"},
    {"Title": "MegaScale", "Journal": "arXiv", "RetractionDate": "4/4/2022 0:00", "RetractionDOI": "10.9999/rw.back",
     "OriginalPaperDOI": DOI, "RetractionNature": "Reinstatement", "OriginalPaperDate": "2/23/2018 0:00"},
]
CROSSREF_RETRACTION = {  # a 2025-layout record stating the original retraction, observed after the reinstatement
    "DOI": DOI, "title": ["MegaScale"], "type": "posted-content", "is-referenced-by-count": 2,
    "updated-by": [{"type": "retraction", "DOI": "10.9999/cr.retract", "source": "publisher",
                    "updated": {"date-parts": [[2018, 9, 1]], "date-time": "2018-09-01T00:00:00Z"}}]}


async def test_an_old_retraction_observed_after_a_reinstatement_does_not_retract_again(admin_url, tmp_path):
    url = await sample_database(admin_url, "pith_test_reinstated")
    rw = tmp_path / "rw.csv"
    rw.write_text(rw_csv(RW_ROWS))
    crossref = tmp_path / "crossref.jsonl"
    crossref.write_text(json.dumps(CROSSREF_RETRACTION) + "\n")
    try:
        async for served in serve(url, StatementLog()):
            imported(url, "retraction-watch", str(rw), at=T1)
            at_t1 = await answers(served, url, T1)
            assert agreeing(at_t1, False), at_t1
            assert at_t1["events"] == [("RETRACTION", "retraction_watch", "2018-09-03T00:00:00Z"),
                                       ("REINSTATEMENT", "retraction_watch", "2022-04-04T00:00:00Z")]
            imported(url, "crossref", str(crossref), at=T2)
            at_t2 = await answers(served, url, T2)
            # Crossref's retraction happened in 2018, before the reinstatement of 2022: it does not decide.
            assert agreeing(at_t2, False), at_t2
            assert ("RETRACTION", "crossref", "2018-09-01T00:00:00Z") in at_t2["events"]
            assert len(at_t2["events"]) == 3
            imported(url, "retraction-watch", str(rw), at=T3)  # the monthly refresh: the same rows
            at_t3 = await answers(served, url, T3)
            assert agreeing(at_t3, False) and at_t3["events"] == at_t2["events"], at_t3
            assert await answers(served, url, T1) == at_t1  # nothing earlier was rewritten
            # Without the reinstatement row, the next file ends it: the retractions stand again.
            rw.write_text(rw_csv(RW_ROWS[:1]))
            t4 = "2026-12-01T00:00:00Z"
            imported(url, "retraction-watch", str(rw), at=t4)
            at_t4 = await answers(served, url, t4)
            assert agreeing(at_t4, True), at_t4
            assert [e[0] for e in at_t4["events"]] == ["RETRACTION", "RETRACTION"]
            assert await answers(served, url, T3) == at_t3
            changes, timeline = await diff_and_timeline(served, T3, t4)
            ended = [c for c in changes if c["current"] and c["current"].get("standing") is False]
            assert [(c["observedAt"], c["event"]["eventType"], c["event"]["source"]) for c in ended] == [
                (t4, "REINSTATEMENT", "retraction_watch")]
            assert any(n["at"] == t4 and "STANDING_EVENT" in n["kinds"] for n in timeline), timeline
    finally:
        await drop_database(admin_url, url)


def openalex(retracted: bool) -> str:
    return json.dumps({"id": "https://openalex.org/W9000000001", "doi": f"https://doi.org/{DOI}",
                       "title": "MegaScale", "publication_year": 2024, "cited_by_count": 3,
                       "is_retracted": retracted}) + "\n"


@pytest.mark.parametrize("order", ["in date order", "the later check first"])
async def test_openalex_is_retracted_true_then_false_ends_the_retraction_from_that_check(admin_url, tmp_path, order):
    url = await sample_database(admin_url, "pith_test_unretracted")
    checks = {T1: tmp_path / "feb.jsonl", T2: tmp_path / "mar.jsonl"}
    checks[T1].write_text(openalex(True))
    checks[T2].write_text(openalex(False))
    try:
        async for served in serve(url, StatementLog()):
            for at in ([T1, T2] if order == "in date order" else [T2, T1]):
                imported(url, "openalex", str(checks[at]), at=at)
            before, at_t1, at_t2 = [await answers(served, url, at) for at in (BEFORE, T1, T2)]
            assert agreeing(before, False) and agreeing(at_t1, True) and agreeing(at_t2, False), (at_t1, at_t2)
            assert at_t1["events"] == [("RETRACTION", "openalex", None)] and at_t2["events"] == []
            changes, timeline = await diff_and_timeline(served, BEFORE, T2)
            assert [(c["observedAt"], c["event"]["eventType"], (c["current"] or {}).get("standing", True))
                    for c in changes] == [(T1, "RETRACTION", True), (T2, "RETRACTION", False)]
            assert {n["at"] for n in timeline if "STANDING_EVENT" in n["kinds"]} == {T1, T2}
            conn = await asyncpg.connect(url)
            try:
                stored = await conn.fetch("SELECT e.observed_at, x.ended_at FROM work_events AS e LEFT JOIN "
                                          "work_event_ends AS x USING (work_id, source, event_type, observed_at)")
            finally:
                await conn.close()
            feb, mar = (datetime.fromisoformat(t.replace("Z", "+00:00")) for t in (T1, T2))
            assert [(r[0], r[1]) for r in stored] == [(feb, mar)]
            # True again in April: a new run of the event from April on.
            april = tmp_path / "apr.jsonl"
            april.write_text(openalex(True))
            imported(url, "openalex", str(april), at=T3)
            assert agreeing(await answers(served, url, T3), True)
            assert agreeing(await answers(served, url, T2), False)
    finally:
        await drop_database(admin_url, url)


@pytest.mark.parametrize("order", ["date", "later first"])
async def test_a_row_a_later_whole_check_no_longer_lists_ends_there_in_either_order(admin_url, tmp_path, order):
    """Retraction Watch's September file lists X and Y retracted, October's only Y (X's row withdrawn; rows
    constructed in the published layout). Imported in either order into an empty store, X's retraction
    stands in September and ends at the October check, as date order says: the October check was of the
    whole database, X included, though X was not stored yet when it was imported."""
    from tests.conftest import create_database

    rows = [{"Title": "X", "Journal": "J", "RetractionDate": "3/1/2020 0:00", "RetractionDOI": "10.9999/x.r",
             "OriginalPaperDOI": "10.1000/x.1", "RetractionNature": "Retraction"},
            {"Title": "Y", "Journal": "J", "RetractionDate": "3/1/2021 0:00", "RetractionDOI": "10.9999/y.r",
             "OriginalPaperDOI": "10.1000/y.1", "RetractionNature": "Retraction"}]
    september, october = tmp_path / "sep.csv", tmp_path / "oct.csv"
    september.write_text(rw_csv(rows))
    october.write_text(rw_csv(rows[1:]))
    files = [(september, "2026-09-01T00:00:00Z"), (october, "2026-10-01T00:00:00Z")]
    url = await create_database(admin_url, "pith_test_withdrawn")
    try:
        for path, at in (files if order == "date" else files[::-1]):
            imported(url, "retraction-watch", str(path), at=at)
        conn = await asyncpg.connect(url)
        try:
            stored = [tuple(r) for r in await conn.fetch(
                "SELECT w.doi, e.observed_at::text, x.ended_at::text FROM work_events AS e "
                "JOIN (SELECT DISTINCT work_id, doi FROM work_snapshots) AS w USING (work_id) "
                "LEFT JOIN work_event_ends AS x USING (work_id, source, event_type, observed_at) ORDER BY 1")]
        finally:
            await conn.close()
        assert stored == [("10.1000/x.1", "2026-09-01 00:00:00+00", "2026-10-01 00:00:00+00"),
                          ("10.1000/y.1", "2026-09-01 00:00:00+00", None)], stored
        async for served in serve(url, StatementLog()):
            for at, retracted in (("2026-09-15T00:00:00Z", True), ("2026-10-15T00:00:00Z", False)):
                body = await served.graphql('query($at: DateTime) { works(filter: {retracted: true}, asOf: $at, '
                                            'first: 10) { nodes { doi } } }', {"at": at})
                assert "errors" not in body, body
                assert ("10.1000/x.1" in [n["doi"] for n in body["data"]["works"]["nodes"]]) is retracted, (at, body)
    finally:
        await drop_database(admin_url, url)
