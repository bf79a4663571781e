"""Fuzzing: schemathesis against the running server; random mutations of documents against the importer."""

from __future__ import annotations

import copy
import json
import os
import re

import asyncpg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app import record
from app.ingest.store import ImportRejected
from app.ingest.load import load_file
from tests.conftest import FACT_TABLES as TABLES, seed_bytes

EXAMPLES = int(os.environ.get("PITH_FUZZ_EXAMPLES", "25"))


def test_schemathesis_finds_no_server_errors(live, tmp_path):
    """schemathesis in GraphQL mode, fixed examples and seed, against `pith-graph serve`."""
    import subprocess
    import sys
    from pathlib import Path

    cli = Path(sys.executable).parent / "schemathesis"
    done = subprocess.run([str(cli), "run", live.base + "/graphql", "--max-examples", str(EXAMPLES),
                           "--seed", "20261129", "--checks", "not_a_server_error", "--workers", "1"],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)  # its cache stays out of the clone
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    summary = re.search(r"(\d+) generated, (\d+) passed", done.stdout)
    assert summary and summary.group(1) == summary.group(2) and int(summary.group(1)) >= EXAMPLES, done.stdout[-2000:]


# --- the importer ---------------------------------------------------------------------------------

SEED = json.loads(seed_bytes())


def paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from paths(v, prefix + (i,))


ALL_PATHS = [p for p in paths(SEED) if p]
JUNK = st.one_of(st.none(), st.booleans(), st.integers(-10, 10**6), st.text(max_size=20),
                 st.sampled_from(["2026-08-05T04:52:00Z", "verified_exact", "retraction", "", "sha256:00"]),
                 st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


@st.composite
def mutations(draw):
    doc = copy.deepcopy(SEED)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(ALL_PATHS))
        parent = doc
        try:
            for step in path[:-1]:
                parent = parent[step]
            kind = draw(st.sampled_from(["replace", "delete", "redigest"]))
            if kind == "delete" and isinstance(parent, dict):
                parent.pop(path[-1], None)
            else:
                parent[path[-1]] = draw(JUNK)
        except (KeyError, IndexError, TypeError):
            continue
        if kind == "redigest" and isinstance(doc.get("inbound"), list):
            try:
                for o in doc["inbound"]:
                    o["observation_digest"] = record.observation_digest(o)
                doc["context_digest"] = record.context_digest(doc)
            except Exception:  # noqa: BLE001 - a mutated shape may not digest at all
                pass
    return doc




def test_mutated_documents_load_exactly_or_write_nothing(empty_database, tmp_path):
    import asyncio

    from app.db.pool import Session
    from app.timeparse import parse_as_of
    from loaders.record import record_rows

    outcomes = {"loaded": 0, "rejected": 0}

    async def attempt(path: str, doc: dict) -> str:
        conn = await asyncpg.connect(empty_database)
        try:
            before = [await conn.fetchval(f"SELECT count(*) FROM {t}") for t in TABLES]
            try:
                await load_file(conn, path)
            except ImportRejected:
                assert [await conn.fetchval(f"SELECT count(*) FROM {t}") for t in TABLES] == before
                return "rejected"
            # Loaded: the database now rebuilds exactly this document.
            session = Session.from_connection(conn)
            try:
                (rows,) = await record_rows(session, [doc["paper"]["arxiv_id"]], parse_as_of(doc["as_of"]))
            finally:
                await session.close()
            assert record.canonical_bytes(record.build_record(rows)) == record.canonical_bytes(doc)
            return "loaded"
        finally:
            await conn.close()

    @settings(max_examples=EXAMPLES * 2, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
    @given(mutations())
    def run(doc):
        path = tmp_path / "mutated.json"
        try:
            path.write_bytes(record.canonical_bytes(doc))
        except TypeError:
            return
        outcomes[asyncio.run(attempt(str(path), doc))] += 1

    run()
    assert outcomes["rejected"] > 0
