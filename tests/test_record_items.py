"""The items the database writes (loaders.record.record_items) are the builder's items, byte for byte:
every escape of JSON text, instants with and without microseconds, unlinked and unresolved references,
papers and works without a snapshot, standing notices with none, one and many events (one of them ended
by a later check), at instants before and after each fact."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

import asyncpg
import pytest

from app import record
from app.db.pool import Session, create_pool
from app.settings import Settings
from loaders.record import record_items, record_rows

pytestmark = pytest.mark.asyncio(loop_scope="session")

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=timezone.utc)
ODD = 'q"uote\\back/slash\n\r\t\b\f\x01\x1f\x7f é ß 中文 \u2028\u2029 \ufeff 😀 </script>'


async def same_bytes(url: str, arxiv_ids: list[str], instants: list[datetime]) -> int:
    pool = await create_pool(Settings(), url, min_size=1, max_size=2)
    compared = 0
    try:
        for at in instants:
            session = Session.from_pool(pool)
            try:
                rows = await record_rows(session, arxiv_ids, at)
                items = await record_items(session, arxiv_ids, at)
            finally:
                await session.close()
            for a, r, i in zip(arxiv_ids, rows, items, strict=True):
                assert (r is None) == (i is None), (a, at)
                if r is None:
                    continue
                body, document = record.record_bytes(i)
                assert body == record.canonical_bytes(record.build_record(r)), (a, at)
                assert document["context_digest"] == record.context_digest(record.build_record(r))
                compared += 1
    finally:
        await pool.close()
    return compared


async def test_odd_text_and_instants(empty_database):
    conn = await asyncpg.connect(empty_database)
    work, bare = uuid.uuid4(), uuid.uuid4()
    micro = T0 + timedelta(microseconds=4500)
    try:
        await conn.execute("INSERT INTO paper_snapshots VALUES ($1, $2, $3, 2, NULL, $4, $5)",
                           "2603.00001", T0, ODD, T0 - timedelta(days=3), micro)
        await conn.execute("INSERT INTO paper_snapshots VALUES ($1, $2, $3, 1, 'cs.LG', $2, $2)",
                           "hep-th/9901001", micro + timedelta(days=1), "Old " + ODD)
        await conn.execute("INSERT INTO work_snapshots VALUES ($1, $2, NULL, $3, NULL, NULL, $4, NULL, NULL)",
                           work, micro, "10.1/" + ODD, ODD)
        await conn.execute("INSERT INTO standing_receipts VALUES ($1, 'crossref', $2), ($1, 'retraction_watch', $3), "
                           "($1, 'crossref_status_cache', $4)", work, T0, micro, micro + timedelta(days=2))
        # Events standing at some instants and not at others: one ended by a later check of its source.
        await conn.execute("INSERT INTO work_events VALUES ($1, 'crossref', 'retraction', $2, NULL, $3), "
                           "($1, 'retraction_watch', 'expression_of_concern', $4, $2, NULL), "
                           "($1, 'retraction_watch', 'correction', $4, $5, $3)",
                           work, T0, ODD, micro, T0 - timedelta(days=400))
        await conn.execute("INSERT INTO work_event_ends VALUES ($1, 'crossref', 'retraction', $2, $3)",
                           work, T0, micro + timedelta(days=2))
        observations = [
            # linked, resolved with no resolver named; unlinked with a printed title; linked to a work with no
            # snapshot yet; citing the other paper (which has a snapshot only later); unresolved.
            (uuid.uuid4(), "2603.00001", 1, "pdf_text", micro, "hep-th/9901001", work, None, None),
            (uuid.uuid4(), "2603.00001", 2, "opencitations", T0, None, None, ODD, 1999),
            (uuid.uuid4(), "2603.00001", 3, "pdf_text", T0, None, bare, None, None),
            (uuid.uuid4(), "hep-th/9901001", 7, "pdf_text", micro + timedelta(days=1), "2603.00001", work, ODD, None),
        ]
        await conn.copy_records_to_table("citation_observations", records=observations, columns=[
            "observation_id", "citing_arxiv_id", "reference_index", "source", "source_observed_at", "cited_arxiv_id",
            "work_id", "printed_title", "printed_year"])
        await conn.copy_records_to_table("resolutions", records=[
            (observations[0][0], micro, "verified_exact", None),
            (observations[1][0], T0 + timedelta(hours=1), "unresolved", "title_search"),
            (observations[3][0], micro + timedelta(days=2), "verified_fuzzy", ODD),
        ], columns=["observation_id", "observed_at", "status", "resolver_source"])
    finally:
        await conn.close()
    instants = [T0, micro, micro + timedelta(days=1), micro + timedelta(days=2), micro + timedelta(days=3)]
    assert await same_bytes(empty_database, ["2603.00001", "hep-th/9901001", "2603.00001"], instants) >= 8


async def test_the_sample_records(database_url):
    conn = await asyncpg.connect(database_url)
    try:
        ids = [r[0] for r in await conn.fetch("SELECT DISTINCT arxiv_id FROM paper_snapshots ORDER BY 1")]
        latest = await conn.fetchval("SELECT max(source_observed_at) FROM citation_observations")
    finally:
        await conn.close()
    instants = [latest, latest - timedelta(days=2), latest + timedelta(days=1)]
    assert await same_bytes(database_url, ids, instants) >= len(ids)
