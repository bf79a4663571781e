"""Imports: every rejection names the file, line, JSON path and what was expected, and writes nothing."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import asyncpg
import pytest
import pytest_asyncio

from app import record
from app.ingest.store import ImportRejected
from app.ingest.load import load_file
from tests.conftest import FACT_TABLES, AUG9, SEED, aug9_documents, seed_bytes
from tests.test_record import pith_graph

pytestmark = pytest.mark.asyncio(loop_scope="session")



def seed() -> dict:
    return json.loads(seed_bytes())


def redigest(doc: dict) -> dict:
    """Recompute every digest, so that only the change under test differs."""
    for o in doc["inbound"] + doc["outbound"]:
        o["observation_digest"] = record.observation_digest(o)
    doc["context_digest"] = record.context_digest(doc)
    return doc


async def fact_counts(conn: asyncpg.Connection) -> dict[str, int]:
    return {t: await conn.fetchval(f"SELECT count(*) FROM {t}") for t in FACT_TABLES}


@pytest_asyncio.fixture(loop_scope="session")
async def conn(empty_database):
    connection = await asyncpg.connect(empty_database)
    yield connection
    await connection.close()


def write(tmp_path: Path, name: str, docs: list | dict | str) -> str:
    path = tmp_path / name
    if isinstance(docs, str):
        path.write_text(docs)
    elif isinstance(docs, dict):
        path.write_text(record.canonical(docs))
    else:
        path.write_text("\n".join(record.canonical(d) for d in docs) + "\n")
    return str(path)


async def rejected(conn, path: str) -> ImportRejected:
    before = await fact_counts(conn)
    with pytest.raises(ImportRejected) as caught:
        await load_file(conn, path)
    assert await fact_counts(conn) == before, "a rejected file wrote facts"
    assert path in str(caught.value)
    return caught.value


async def test_loading_twice_changes_nothing(conn):
    first = await load_file(conn, str(SEED))
    counts = await fact_counts(conn)
    second = await load_file(conn, str(SEED))
    assert first.facts_added > 0 and second.facts_added == 0
    assert await fact_counts(conn) == counts


async def test_malformed_json(conn, tmp_path):
    error = await rejected(conn, write(tmp_path, "broken.json", '{"schema": '))
    assert "not valid JSON" in error.message


async def test_ndjson_error_names_the_line_and_loses_the_whole_file(conn, tmp_path):
    bad = seed()
    bad["inbound"][2]["resolution"]["status"] = "kinda_resolved"
    path = write(tmp_path, "two.ndjson", [aug9_documents()[1], redigest(bad)])
    error = await rejected(conn, path)
    assert error.line == 2
    assert error.path == "$.inbound[2].resolution.status"
    assert "kinda_resolved" in error.message and "verified_exact" in error.message and "metadata_mismatch" in error.message
    assert "line 2" in str(error)


async def test_failed_observation_digest(conn, tmp_path):
    bad = seed()
    bad["inbound"][3]["citation"]["citing_paper"]["title"] = "Something else"
    error = await rejected(conn, write(tmp_path, "digest.json", bad))
    assert error.path == "$.inbound[3].observation_digest"
    assert bad["inbound"][3]["observation_digest"] in error.message
    assert "digest does not match" in error.message


async def test_failed_context_digest(conn, tmp_path):
    bad = seed()
    bad["context_digest"] = "sha256:" + "0" * 64
    error = await rejected(conn, write(tmp_path, "context.json", bad))
    assert error.path == "$.context_digest"
    assert seed()["context_digest"] in error.message


@pytest.mark.parametrize(("where", "value"), [
    (("paper", "submitted_at"), "2024-02-23 22:10:59"),
    (("paper", "submitted_at"), "2024-02-23T22:10:59+00:00"),
    (("external_citation_measurements", 0, "observed_at"), "yesterday"),
])
async def test_bad_timestamp(conn, tmp_path, where, value):
    bad = seed()
    target = bad
    for step in where[:-1]:
        target = target[step]
    target[where[-1]] = value
    error = await rejected(conn, write(tmp_path, "time.json", redigest(bad)))
    assert error.path == "$." + ".".join(str(s) if isinstance(s, str) else f"[{s}]" for s in where).replace(".[", "[")
    assert "2024-02-23T22:10:59Z" in error.message or "2026-07-06T17:34:49.001670Z" in error.message


async def test_standing_time_must_use_the_offset_family(conn, tmp_path):
    bad = seed()
    bad["inbound"][0]["standing_notice"]["source_receipts"][0]["observed_at"] = "2026-08-04T06:34:03.388597Z"
    error = await rejected(conn, write(tmp_path, "family.json", redigest(bad)))
    assert error.path == "$.inbound[0].standing_notice.source_receipts[0].observed_at"
    assert "+00:00" in error.message


async def test_derived_fields_are_checked(conn, tmp_path):
    bad = seed()
    bad["thesis"] = bad["thesis"].replace("7 inbound", "8 inbound")
    error = await rejected(conn, write(tmp_path, "thesis.json", redigest(bad)))
    assert error.path == "$.thesis"

    bad = seed()
    bad["coverage"][1]["records_observed"] = 6
    error = await rejected(conn, write(tmp_path, "lane.json", redigest(bad)))
    assert error.path == "$.coverage[1].records_observed"


async def test_unknown_field_and_missing_field(conn, tmp_path):
    bad = seed()
    bad["paper"]["abstract"] = "x"
    error = await rejected(conn, write(tmp_path, "extra.json", redigest(bad)))
    assert error.path == "$.paper.abstract"
    bad = seed()
    del bad["inbound"][0]["citation"]["reference_index"]
    error = await rejected(conn, write(tmp_path, "missing.json", redigest(bad)))
    assert error.path == "$.inbound[0].citation.reference_index"


async def test_itemized_list_must_match_totals_and_caps(conn, tmp_path):
    bad = seed()
    del bad["inbound"][6]
    error = await rejected(conn, write(tmp_path, "short.json", redigest(bad)))
    assert error.path == "$.inbound"
    assert "expected 7" in error.message


async def test_fact_observed_after_as_of(conn, tmp_path):
    bad = seed()
    bad["as_of"] = "2026-08-04T00:00:00Z"
    bad["thesis"] = bad["thesis"].replace("5 August", "4 August")
    error = await rejected(conn, write(tmp_path, "future.json", redigest(bad)))
    assert "after the document's as_of" in error.message


async def test_conflict_with_the_database_shows_both_values(conn, tmp_path):
    await load_file(conn, str(SEED))
    bad = seed()
    bad["as_of"] = "2026-08-06T00:00:00Z"
    bad["thesis"] = bad["thesis"].replace("5 August", "6 August")
    for o in bad["inbound"]:
        if o["citation"]["citing_paper"]["arxiv_id"] == "2409.19256":
            o["citation"]["citing_paper"]["title"] = "HybridFlow, retitled"
    error = await rejected(conn, write(tmp_path, "conflict.json", redigest(bad)))
    assert "paper_snapshots" in error.message
    assert "HybridFlow, retitled" in error.message
    assert "HybridFlow: A Flexible and Efficient RLHF Framework" in error.message
    assert "2409.19256" in error.message


def conflicting_pair() -> list[dict]:
    """The seed and a document of the next day stating another resolver for the same resolution."""
    other = seed()
    other["as_of"] = "2026-08-06T00:00:00Z"
    other["thesis"] = other["thesis"].replace("5 August", "6 August")
    other["inbound"][0]["resolution"]["resolver_source"] = "doi"
    return [seed(), redigest(other)]


async def test_conflict_within_one_file(conn, tmp_path):
    error = await rejected(conn, write(tmp_path, "pair.ndjson", conflicting_pair()))
    assert "resolutions" in error.message and "'doi'" in error.message and "'arxiv_id'" in error.message


async def test_short_form_neither_sets_nor_contradicts_the_category(conn, tmp_path):
    await load_file(conn, str(AUG9))
    category = await conn.fetchval(
        "SELECT primary_category FROM paper_snapshots WHERE arxiv_id = '2502.03885'")
    assert category == "cs.NI"
    await load_file(conn, str(SEED))  # short forms of 2402.15627 only
    assert await conn.fetchval("SELECT primary_category FROM paper_snapshots WHERE arxiv_id = '2402.15627'") == "cs.LG"


async def test_unsupported_and_missing_files(conn, tmp_path):
    error = await rejected(conn, write(tmp_path, "records.txt", "{}"))
    assert ".ndjson" in error.message
    with pytest.raises(ImportRejected) as caught:
        await load_file(conn, str(tmp_path / "absent.json"))
    assert "cannot read" in caught.value.message


async def test_empty_file(conn, tmp_path):
    error = await rejected(conn, write(tmp_path, "empty.ndjson", "\n\n"))
    assert "no document" in error.message


async def test_cli_exit_code_and_standard_input(empty_database, tmp_path):
    bad = seed()
    bad["schema"] = "pith.paper-citation-record.v2"
    path = write(tmp_path, "v2.json", bad)
    done = pith_graph("load", path, url=empty_database)
    assert done.returncode == 1
    assert b"$.schema" in done.stderr and b"pith.paper-citation-record.v1" in done.stderr
    assert b"nothing of this file was written" in done.stderr

    done = pith_graph("load", "-", url=empty_database, stdin=AUG9.read_bytes())
    assert done.returncode == 0, done.stderr
    done = pith_graph("load", "-", url=empty_database, stdin=json.dumps(seed(), indent=2).encode())
    assert done.returncode == 0, done.stderr
    out = pith_graph("export", "2402.15627", "--as-of", "2026-08-05T04:52:00Z", url=empty_database)
    assert out.stdout == seed_bytes()


async def test_documents_at_two_instants_merge(conn):
    await load_file(conn, str(AUG9))
    await load_file(conn, str(SEED))
    docs = {d["paper"]["arxiv_id"]: d for d in aug9_documents()}
    assert copy.deepcopy(docs["2402.15627"])["as_of"] == "2026-08-09T12:00:00Z"
    # Receipts re-observed on 9 August are kept beside those of 4 August.
    crossref = await conn.fetch("SELECT observed_at FROM standing_receipts WHERE source = 'crossref' ORDER BY 1")
    assert len(crossref) == 2


def with_event(observed_at: str) -> dict:
    """The seed with a Retraction Watch correction on the work its inbound observations cite (every notice of
    the work shows it), digests recomputed: only the event's instant is under test."""
    doc = seed()
    event = {"event_type": "correction", "notice_doi": "10.9999/c.1", "observed_at": observed_at,
             "reported_at": "2026-07-01T00:00:00+00:00", "source": "retraction_watch"}
    for o in doc["inbound"]:
        notice = o["standing_notice"]
        if notice["state"] == "measured":
            notice["events"] = [event]
            notice["observation"] = notice["observation"].replace("No event found", "1 event found")
    return redigest(doc)


async def test_a_document_whose_event_has_no_receipt_of_its_source_then_is_refused(empty_database, tmp_path):
    from tests.conftest import StatementLog, serve

    conn = await asyncpg.connect(empty_database)
    try:
        # Retraction Watch's latest receipt in the notices is 2026-08-04T06:33:57.428241: an event after it
        # would need a receipt the document does not show.
        bad = await rejected(conn, write(tmp_path, "late.json", with_event("2026-08-04T12:00:00+00:00")))
        assert ".standing_notice.events[0].observed_at" in str(bad)
        assert "needs a receipt of retraction_watch at that instant" in str(bad)
        assert "the standing rule" in str(bad) and "2026-08-04T06:33:57.428241+00:00" in str(bad)
        # One observed at the latest receipt, or before it, is what the store keeps: it loads and comes back.
        for name, at in (("at.json", "2026-08-04T06:33:57.428241+00:00"), ("before.json", "2026-08-01T00:00:00+00:00")):
            doc = with_event(at)
            await load_file(conn, write(tmp_path, name, doc))
            async for served in serve(empty_database, StatementLog()):
                response = await served.client.get("/paper/2402.15627/citation-record.json",
                                                   params={"as_of": doc["as_of"]})
                assert response.content == record.canonical(doc).encode(), name
            # (Each document on its own: the first one's check of Retraction Watch, without the second one's
            # event, would contradict the second one, tests/test_document_runs.py.)
            await conn.execute("TRUNCATE work_event_ends, work_events, standing_receipts CASCADE")
    finally:
        await conn.close()
