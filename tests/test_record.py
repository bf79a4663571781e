"""The canonical v1 record: byte-exact through GraphQL, HTTP and export; both snapshots; the statement bound."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import asyncpg
import pytest

from app import record
from app.ingest.document import parse_document
from tests.conftest import AUG9, AUG9_AS_OF, SEED, SEED_AS_OF, aug9_documents, seed_bytes, serve
from tests.graphs import hub

pytestmark = pytest.mark.asyncio(loop_scope="session")

RECORD_QUERY = """
query($id: String!, $at: DateTime) {
  citationRecord(arxivId: $id, asOf: $at) { canonicalJson document schema asOf contextDigest thesis }
}"""


def pith_graph(*args: str, url: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "DATABASE_URL": url}
    return subprocess.run([sys.executable, "-m", "app.cli", *args], env=env, input=stdin, capture_output=True,
                          timeout=120)


async def test_seed_is_byte_exact_through_graphql(served):
    body = await served.graphql(RECORD_QUERY, {"id": "2402.15627", "at": SEED_AS_OF})
    got = body["data"]["citationRecord"]
    assert got["canonicalJson"].encode("utf-8") == seed_bytes()
    seed = json.loads(seed_bytes())
    assert got["document"] == seed
    assert got["schema"] == seed["schema"]
    assert got["asOf"] == seed["as_of"]
    assert got["contextDigest"] == seed["context_digest"]
    assert got["thesis"] == seed["thesis"]


async def test_seed_is_byte_exact_through_http(served):
    response = await served.client.get("/paper/2402.15627/citation-record.json", params={"as_of": SEED_AS_OF})
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.content == seed_bytes()
    etag = response.headers["etag"]
    assert etag == 'W/"' + json.loads(seed_bytes())["context_digest"].removeprefix("sha256:") + '"'
    again = await served.client.get("/paper/2402.15627/citation-record.json", params={"as_of": SEED_AS_OF},
                                    headers={"If-None-Match": etag})
    assert again.status_code == 304
    assert again.content == b""


async def test_seed_is_byte_exact_through_export(database_url):
    done = pith_graph("export", "2402.15627", "--as-of", SEED_AS_OF, url=database_url)
    assert done.returncode == 0, done.stderr
    assert done.stdout == seed_bytes()


async def test_both_snapshots_in_one_database(served):
    """Each as_of gets its own answer: 7 observations on 5 August, 13 on 9 August."""
    aug9 = aug9_documents()[0]
    body = await served.graphql(RECORD_QUERY, {"id": "2402.15627", "at": AUG9_AS_OF})
    got = body["data"]["citationRecord"]
    assert got["canonicalJson"] == record.canonical(aug9)
    assert len(got["document"]["inbound"]) == 13
    added = {o["citation"]["citing_paper"]["arxiv_id"]: o for o in got["document"]["inbound"]}
    for arxiv_id in ("2502.03885", "2502.04896", "2505.15536", "2507.01880", "2507.05934", "2507.22294"):
        assert added[arxiv_id]["resolution"]["status"] == "unresolved"
        assert added[arxiv_id]["standing_notice"]["reason"] == "canonical_work_link_unavailable"
    body = await served.graphql(RECORD_QUERY, {"id": "2402.15627", "at": SEED_AS_OF})
    assert body["data"]["citationRecord"]["canonicalJson"].encode() == seed_bytes()


async def test_citing_papers_own_records_carry_categories(served):
    body = await served.graphql("""{ papers(arxivIds: ["2502.03885", "2502.04896", "2505.15536", "2507.01880",
        "2507.05934", "2507.22294"], asOf: "2026-08-09T12:00:00Z") { arxivId latestVersion primaryCategory } }""")
    papers = {p["arxivId"]: p for p in body["data"]["papers"]}
    assert papers["2502.03885"] == {"arxivId": "2502.03885", "latestVersion": 6, "primaryCategory": "cs.NI"}
    assert papers["2502.04896"]["primaryCategory"] == "cs.CV"
    assert papers["2507.01880"]["primaryCategory"] == "cs.DC"
    assert papers["2507.05934"]["primaryCategory"] == "cs.AI"


async def test_unknown_paper_or_no_snapshot_yet_is_null(served):
    body = await served.graphql(RECORD_QUERY, {"id": "2401.00001"})
    assert body["data"]["citationRecord"] is None and "errors" not in body
    body = await served.graphql(RECORD_QUERY, {"id": "2402.15627", "at": "2026-07-01T00:00:00Z"})
    assert body["data"]["citationRecord"] is None and "errors" not in body
    response = await served.client.get("/paper/2401.00001/citation-record.json")
    assert response.status_code == 404
    assert "2401.00001" in response.json()["error"]["message"]


@pytest.mark.parametrize("arxiv_id", ["2402.15627v1", "abc", "24021.5627", "HEP-TH/9901001", ""])
async def test_malformed_arxiv_id_is_bad_user_input(served, arxiv_id):
    body = await served.graphql(RECORD_QUERY, {"id": arxiv_id})
    (error,) = body["errors"]
    assert error["extensions"]["code"] == "BAD_USER_INPUT"
    assert "hep-th/9901001" in error["message"] and "2402.15627" in error["message"]


async def test_old_style_ids_are_valid(served):
    body = await served.graphql(RECORD_QUERY, {"id": "hep-th/9901001"})
    assert body["data"]["citationRecord"] is None and "errors" not in body
    response = await served.client.get("/paper/hep-th/9901001/citation-record.json")
    assert response.status_code == 404


@pytest.mark.parametrize("instant", ["yesterday", "2026-08-32", "2026-08-05T04:52:00", "2026-13-05T04:52:00Z"])
async def test_malformed_instant_is_bad_user_input(served, instant):
    body = await served.graphql(RECORD_QUERY, {"id": "2402.15627", "at": instant})
    (error,) = body["errors"]
    assert error["extensions"]["code"] == "BAD_USER_INPUT"
    assert "2026-08-05T04:52:00Z" in error["message"]
    literal = await served.graphql(f'{{ citationRecord(arxivId: "2402.15627", asOf: "{instant}") {{ thesis }} }}')
    assert literal["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
    response = await served.client.get("/paper/2402.15627/citation-record.json", params={"as_of": instant})
    assert response.status_code == 400
    assert "2026-08-05T04:52:00Z" in response.json()["error"]["message"]


async def test_http_bad_id_is_400(served):
    response = await served.client.get("/paper/not-an-id/citation-record.json")
    assert response.status_code == 400
    assert "hep-th/9901001" in response.json()["error"]["message"]


async def test_as_of_is_truncated_to_whole_seconds_and_offsets_normalized(served):
    body = await served.graphql(RECORD_QUERY, {"id": "2402.15627", "at": "2026-08-05T06:52:00.999+02:00"})
    assert body["data"]["citationRecord"]["canonicalJson"].encode() == seed_bytes()


async def test_record_statement_bound_with_250_inbound_and_150_outbound(empty_database, statements):
    conn = await asyncpg.connect(empty_database)
    try:
        await hub("8800.00001", inbound=250, outbound=150).write(conn)
    finally:
        await conn.close()
    async for s in serve(empty_database, statements):
        statements.clear()
        body = await s.graphql(RECORD_QUERY, {"id": "8800.00001"})
        sent = statements.counted
        document = body["data"]["citationRecord"]["document"]
        assert len(document["inbound"]) == 100 and len(document["outbound"]) == 100
        assert document["coverage"][2]["denominator"] == 250
        assert document["reference_resolution"]["total_outbound_references"] == 150
        assert "100 of 250 inbound" in document["thesis"]
        assert 1 <= len(sent) <= 6, "\n".join(q.strip()[:50].replace("\n", " ") for q in sent)
        assert body["extensions"]["cost"]["statements"] == len(sent)

        statements.clear()
        response = await s.client.get("/paper/8800.00001/citation-record.json")
        assert response.status_code == 200
        assert 1 <= len(statements.counted) <= 6

        # A record is internally consistent and its digests verify: it loads back as is.
        parse_document(json.loads(response.content))


async def test_capped_export_loads_and_uncapped_round_trips(empty_database, admin_url):
    conn = await asyncpg.connect(empty_database)
    try:
        await hub("8800.00002", inbound=130, outbound=120, prefix="8811").write(conn)
    finally:
        await conn.close()
    at = "2026-06-01T00:00:00Z"
    capped = pith_graph("export", "8800.00002", "--as-of", at, url=empty_database)
    uncapped = pith_graph("export", "8800.00002", "--as-of", at, "--uncapped", url=empty_database)
    assert capped.returncode == 0 and uncapped.returncode == 0, capped.stderr + uncapped.stderr
    full = json.loads(uncapped.stdout)
    assert full["caps"] == {"database_statements": 6, "inbound": 130, "outbound": 120}
    assert len(full["inbound"]) == 130 and len(full["outbound"]) == 120

    from tests.conftest import create_database, drop_database

    other = await create_database(admin_url, "pith_test_rt")
    try:
        path = os.path.join(os.environ.get("TMPDIR", "/tmp"), "pith-uncapped.json")
        with open(path, "wb") as f:
            f.write(uncapped.stdout)
        loaded = pith_graph("load", path, url=other)
        assert loaded.returncode == 0, loaded.stderr
        assert pith_graph("export", "8800.00002", "--as-of", at, url=other).stdout == capped.stdout
        assert pith_graph("export", "8800.00002", "--as-of", at, "--uncapped", url=other).stdout == uncapped.stdout
    finally:
        await drop_database(admin_url, other)


async def test_load_then_export_round_trip_from_the_cli(empty_database):
    first = pith_graph("load", str(SEED), url=empty_database)
    assert first.returncode == 0, first.stderr
    assert b"documents/s" in first.stderr
    assert pith_graph("export", "2402.15627", "--as-of", SEED_AS_OF, url=empty_database).stdout == seed_bytes()
    second = pith_graph("load", str(AUG9), url=empty_database)
    assert second.returncode == 0, second.stderr
    assert pith_graph("export", "2402.15627", "--as-of", SEED_AS_OF, url=empty_database).stdout == seed_bytes()
    for doc in aug9_documents():
        out = pith_graph("export", doc["paper"]["arxiv_id"], "--as-of", doc["as_of"], url=empty_database).stdout
        assert out == record.canonical_bytes(doc)


async def test_export_rejects_bad_arguments(database_url):
    done = pith_graph("export", "nope", url=database_url)
    assert done.returncode == 2 and "hep-th/9901001" in done.stderr.decode()
    done = pith_graph("export", "2402.15627", "--as-of", "tomorrow", url=database_url)
    assert done.returncode == 2 and "2026-08-05T04:52:00Z" in done.stderr.decode()
    done = pith_graph("export", "2402.15627", "--as-of", "2020-01-01T00:00:00Z", url=database_url)
    assert done.returncode == 1 and done.stdout == b""
