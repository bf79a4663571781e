"""`visible_from` on each observation is kept right by the database, whatever writes and in what order.

It must always equal the later of the parse and the citing paper's first snapshot (NULL while the
citing paper has none): the rule pages and counts rely on.
"""

from __future__ import annotations

import subprocess
import sys
import os
from datetime import timedelta

import asyncpg
import pytest

from app.ingest.load import load_file
from tests.conftest import AUG9, SEED
from tests.graphs import BASE, Graph

pytestmark = pytest.mark.asyncio(loop_scope="session")

# greatest() ignores NULLs, so the recomputation spells the rule out: NULL without any snapshot.
WRONG = """
SELECT count(*) FROM citation_observations AS o
LEFT JOIN LATERAL (SELECT min(s.observed_at) AS first FROM paper_snapshots AS s
                   WHERE s.arxiv_id = o.citing_arxiv_id) AS f ON true
WHERE o.visible_from IS DISTINCT FROM
      (CASE WHEN f.first IS NULL THEN NULL ELSE greatest(o.source_observed_at, f.first) END)
"""


async def test_every_write_order_keeps_visible_from_right(empty_database):
    conn = await asyncpg.connect(empty_database)
    try:
        late = BASE + timedelta(days=30)
        g = Graph()
        g.paper("9100.00001", "Cited", BASE)
        g.cite("9100.00002", "9100.00001", 1, at=BASE + timedelta(days=1))  # its citing paper comes later
        g.cite("9100.00003", "9100.00001", 1, at=BASE + timedelta(days=2))
        g.paper("9100.00003", "Citing, known early", BASE)
        await g.write(conn)
        rows = {r["citing_arxiv_id"]: r["visible_from"] for r in await conn.fetch(
            "SELECT citing_arxiv_id, visible_from FROM citation_observations")}
        assert rows == {"9100.00002": None, "9100.00003": BASE + timedelta(days=2)}

        # The citing paper's first snapshot arrives: visible from then.
        later = Graph()
        later.paper("9100.00002", "Citing, known late", late)
        await later.write(conn)
        assert await conn.fetchval("SELECT visible_from FROM citation_observations WHERE citing_arxiv_id = "
                                   "'9100.00002'") == late
        # An earlier snapshot of it, learned afterwards, moves the observation earlier (not before its parse).
        earlier = Graph()
        earlier.paper("9100.00002", "Citing, known late", BASE)
        await earlier.write(conn)
        assert await conn.fetchval("SELECT visible_from FROM citation_observations WHERE citing_arxiv_id = "
                                   "'9100.00002'") == BASE + timedelta(days=1)
        # A later snapshot changes nothing.
        again = Graph()
        again.paper("9100.00002", "Citing, known late", late + timedelta(days=5))
        await again.write(conn)
        assert await conn.fetchval("SELECT visible_from FROM citation_observations WHERE citing_arxiv_id = "
                                   "'9100.00002'") == BASE + timedelta(days=1)
        assert await conn.fetchval(WRONG) == 0

        # The importer, in both orders of the two sample files.
        for path in (AUG9, SEED):
            await load_file(conn, str(path))
        assert await conn.fetchval(WRONG) == 0
        assert await conn.fetchval("SELECT count(*) FROM citation_observations WHERE visible_from IS NOT NULL") > 13
    finally:
        await conn.close()


async def test_the_bulk_path_keeps_visible_from_right(empty_database):
    done = subprocess.run([sys.executable, "-m", "app.cli", "synth", "--papers", "300", "--seed", "3"],
                          env={**os.environ, "DATABASE_URL": empty_database}, capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    conn = await asyncpg.connect(empty_database)
    try:
        assert await conn.fetchval("SELECT count(*) FROM citation_observations") > 1000
        assert await conn.fetchval(WRONG) == 0
        # The bulk path's change log (built from the stage, every row being new) says what a load would.
        logged = dict(await conn.fetch("SELECT kind, count(*) FROM change_log GROUP BY kind"))
        assert logged["citation_added"] == await conn.fetchval(
            "SELECT count(*) FROM citation_observations WHERE cited_arxiv_id IS NOT NULL")
        assert logged.get("standing_changed", 0) == await conn.fetchval(
            "SELECT count(*) FROM (SELECT DISTINCT e.work_id, e.source, e.event_type, e.observed_at, c.citing_arxiv_id "
            "FROM work_events e JOIN citation_observations c USING (work_id)) AS pairs")
        assert logged["record_changed"] == await conn.fetchval(
            "SELECT count(*) FROM (SELECT arxiv_id FROM paper_snapshots UNION SELECT cited_arxiv_id FROM "
            "citation_observations WHERE cited_arxiv_id IS NOT NULL UNION SELECT arxiv_id FROM external_measurements) a")
    finally:
        await conn.close()
