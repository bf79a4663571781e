"""`load` and `dump` at scale: the staged conflict checks do work in proportion to the rows staged (not to
their square), a killed load's backend ends with its client, and `dump` reads one snapshot with no
statement timeout of its own."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys

import asyncpg
import pytest
import pytest_asyncio

from app.ingest import load, store
from app.ingest.document import parse_document
from app.ingest.load import load_file
from app.ingest.store import TABLES, ImportRejected, Loader
from tests.conftest import SEED, drop_database, synthetic_database
from tests.test_import import conflicting_pair, fact_counts, redigest, rejected, seed, write

pytestmark = pytest.mark.asyncio(loop_scope="session")
AS_OF = "2026-11-01T00:00:00Z"  # after every synthetic fact


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def dumped(admin_url, tmp_path_factory):
    """A 60-paper synthetic graph written by `synth` and dumped by `pith-graph dump`."""
    url = await synthetic_database(admin_url, "pith_test_dump", 60, 7)
    path = tmp_path_factory.mktemp("dump") / "all.ndjson"
    done = subprocess.run([sys.executable, "-m", "app.cli", "dump", str(path), "--as-of", AS_OF], env={**os.environ, "DATABASE_URL": url},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    yield url, path
    await drop_database(admin_url, url)


def _removed_by_join_filters(plan: dict) -> int:
    return int(plan.get("Rows Removed by Join Filter", 0)) + sum(_removed_by_join_filters(p)
                                                                 for p in plan.get("Plans", ()))


async def test_staged_conflict_checks_do_work_in_proportion_to_the_rows_staged(dumped, empty_database, monkeypatch):
    _, path = dumped
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    assert len(lines) == 60
    conn = await asyncpg.connect(empty_database)
    try:
        tx = conn.transaction()
        await tx.start()
        loader = Loader(conn, str(path))
        await loader.start()
        for number, line in enumerate(lines, start=1):
            loader.add(parse_document(json.loads(line)).facts, f"line {number}")
            if number % 5 == 0:  # small batches: the stage holds every repeated fact once per batch
                await loader.flush()
        assert await loader.finish() > 0
        for t in TABLES:
            if not t.values:
                continue
            staged = await conn.fetchval(f"SELECT count(*) FROM stage_{t.name}")
            for check in (store._staged_conflict_sql(t), store._conflict_sql(t)):
                (plan,) = json.loads(await conn.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {check}"))
                removed = _removed_by_join_filters(plan["Plan"])
                assert removed <= staged, (t.name, staged, removed, check)
        await tx.rollback()
    finally:
        await conn.close()


async def test_the_papers_a_load_changes_are_found_in_proportion_to_what_it_read(dumped, empty_database):
    """The change log's affected papers (store._AFFECTED_PAPERS), EXPLAINed after a whole load with the least
    work_mem: every scan reads each row a bounded number of times. As one scan with "... OR observation_id IN
    (new resolutions)", the second test was a subplan run once per observation over every new resolution when
    they passed work_mem (over 8 minutes for a 20,000-paper dump)."""
    _, path = dumped
    conn = await asyncpg.connect(empty_database)
    try:
        tx = conn.transaction()
        await tx.start()
        loader = Loader(conn, str(path), merge_each_batch=True)
        await loader.start()
        for number, line in enumerate((line for line in path.read_text().splitlines() if line.strip()), start=1):
            loader.add(parse_document(json.loads(line)).facts, f"line {number}")
        assert await loader.finish() > 0
        observations = await conn.fetchval("SELECT count(*) FROM citation_observations")
        resolutions = await conn.fetchval("SELECT count(*) FROM new_resolutions")
        assert observations > 1000 and resolutions > 1000, (observations, resolutions)
        # The case the second test is for: observations re-resolved whose works have no new fact.
        await conn.execute("TRUNCATE new_work_snapshots, new_standing_receipts, new_work_events")
        await conn.execute("SET LOCAL work_mem = '64kB'")
        (plan,) = json.loads(await conn.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {store._AFFECTED_PAPERS}"))

        def read(node: dict) -> int:
            own = ((node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)) * node.get("Actual Loops", 1)
                   if "Scan" in node["Node Type"] or node["Node Type"] == "Materialize" else 0)
            return own + sum(read(child) for child in node.get("Plans", ()))

        assert read(plan["Plan"]) <= 20 * (observations + resolutions), (read(plan["Plan"]), observations, resolutions)
        # As a dump of 20,000 papers has it: more new resolutions than a hash of them fits in work_mem. No test
        # of a row may then be a subplan run again for each row (Filter: "... OR (SubPlan 3)").
        await conn.execute("INSERT INTO new_resolutions (observation_id, observed_at, status, resolver_source) "
                           "SELECT gen_random_uuid(), now(), 'unresolved', 'test' FROM generate_series(1, 50000)")
        await conn.execute("ANALYZE new_resolutions")
        (plan,) = json.loads(await conn.fetchval(f"EXPLAIN (FORMAT JSON) {store._AFFECTED_PAPERS}"))
        filters = re.findall(r'"(?:Filter|Join Filter)": "([^"]*)"', json.dumps(plan))
        assert not [f for f in filters if re.search(r"(?<!hashed )SubPlan \d", f)], filters
        await tx.rollback()
    finally:
        await conn.close()


async def test_a_load_of_the_dump_adds_every_fact_once_a_rerun_none_and_dumps_the_same(dumped, empty_database,
                                                                                      tmp_path):
    _, path = dumped
    conn = await asyncpg.connect(empty_database)
    try:
        first = await load_file(conn, str(path))
        assert first.documents == 60 and first.facts_added > 0
        counts = await fact_counts(conn)
        again = await load_file(conn, str(path))
        assert again.facts_added == 0 and await fact_counts(conn) == counts
    finally:
        await conn.close()
    copy = tmp_path / "copy.ndjson"
    done = subprocess.run([sys.executable, "-m", "app.cli", "dump", str(copy), "--as-of", AS_OF],
                          env={**os.environ, "DATABASE_URL": empty_database}, capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode()
    assert copy.read_bytes() == path.read_bytes()


async def test_conflicts_between_batches_are_found_in_the_stage(empty_database, tmp_path, monkeypatch):
    monkeypatch.setattr(load, "LOAD_BATCH_DOCUMENTS", 1)  # every document its own batch: only the stage compares them
    conn = await asyncpg.connect(empty_database)
    try:
        error = await rejected(conn, write(tmp_path, "pair.ndjson", conflicting_pair()))
        assert "resolutions" in error.message and "'doi'" in error.message and "'arxiv_id'" in error.message
        assert "line 1" in error.message and "line 2" in error.message

        retitled = seed()
        retitled["as_of"] = "2026-08-06T00:00:00Z"
        retitled["thesis"] = retitled["thesis"].replace("5 August", "6 August")
        for o in retitled["inbound"]:
            if o["citation"]["citing_paper"]["arxiv_id"] == "2409.19256":
                o["citation"]["citing_paper"]["title"] = "HybridFlow, retitled"
        error = await rejected(conn, write(tmp_path, "titles.ndjson", [seed(), redigest(retitled)]))
        assert "paper_snapshots" in error.message and "HybridFlow, retitled" in error.message

        same = write(tmp_path, "same.ndjson", [seed(), seed()])  # the same facts twice agree
        assert (await load_file(conn, same)).facts_added > 0
    finally:
        await conn.close()


async def test_a_load_merged_batch_by_batch_is_the_load_in_one_batch(dumped, admin_url, monkeypatch, tmp_path):
    """A load merges each batch into the fact tables while it reads the next: with every document its own
    batch, the database equals the one-batch load of the same file (facts, change log, totals, version);
    and a file refused at its last line, after every earlier batch was merged, writes nothing."""
    from tests.conftest import create_database, database_state

    _, path = dumped
    states = []
    for batch in (1, 10_000):
        monkeypatch.setattr(load, "LOAD_BATCH_DOCUMENTS", batch)
        url = await create_database(admin_url, "pith_test_batches")
        try:
            conn = await asyncpg.connect(url)
            try:
                assert (await load_file(conn, str(path))).documents == 60
            finally:
                await conn.close()
            states.append(await database_state(url))
        finally:
            await drop_database(admin_url, url)
    assert states[0] == states[1]

    monkeypatch.setattr(load, "LOAD_BATCH_DOCUMENTS", 1)
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    bad_json = tmp_path / "bad-last-json.ndjson"
    bad_json.write_text("\n".join(lines) + "\n{not json\n")
    bad_document = tmp_path / "bad-last-document.ndjson"
    bad_document.write_text("\n".join(lines) + "\n" + json.dumps({"schema": "nope"}) + "\n")
    url = await create_database(admin_url, "pith_test_batches")
    try:
        conn = await asyncpg.connect(url)
        try:
            for bad in (bad_json, bad_document):
                error = await rejected(conn, str(bad))
                assert "line 61" in str(error), error
                assert sum((await fact_counts(conn)).values()) == 0
                assert await conn.fetchval("SELECT count(*) FROM change_log") == 0
            assert (await load_file(conn, str(path))).documents == 60  # the connection is usable after
        finally:
            await conn.close()
    finally:
        await drop_database(admin_url, url)


async def test_a_killed_load_ends_its_backend_and_releases_its_locks(empty_database):
    holder = await asyncpg.connect(empty_database)
    watcher = await asyncpg.connect(empty_database)
    process = None
    try:
        # Hold the row every load updates last: the load's backend waits on it, mid-statement.
        await holder.execute("BEGIN; UPDATE data_version SET version = version")
        process = subprocess.Popen([sys.executable, "-m", "app.cli", "load", str(SEED)],
                                   env={**os.environ, "DATABASE_URL": empty_database},
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        waiting = ("SELECT pid FROM pg_stat_activity WHERE application_name = 'pith-graph load' AND wait_event_type = 'Lock' "
                   "AND datname = current_database()")
        for _ in range(600):
            pid = await watcher.fetchval(waiting)
            if pid is not None:
                break
            assert process.poll() is None, "the load ended before it waited on the lock"
            await asyncio.sleep(0.1)
        assert pid is not None, "the load never reached its last statement"
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        for _ in range(300):  # client_connection_check_interval is 2 s; the bound is generous
            if not await watcher.fetchval("SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid):
                break
            await asyncio.sleep(0.1)
        gone = not await watcher.fetchval("SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid)
        assert gone, "the killed load's backend still runs, holding its locks"
        await holder.execute("ROLLBACK")
        assert (await fact_counts(watcher))["paper_snapshots"] == 0  # nothing half-way
        done = subprocess.run([sys.executable, "-m", "app.cli", "load", str(SEED)],
                              env={**os.environ, "DATABASE_URL": empty_database}, capture_output=True, timeout=120)
        assert done.returncode == 0, done.stderr.decode()
    finally:
        if process is not None and process.poll() is None:
            process.kill()
        await holder.close()
        await watcher.close()


async def test_the_commands_read_session_has_no_timeout_of_its_own_unless_one_is_set(database_url, monkeypatch):
    from app.cli import command_session

    conn = await asyncpg.connect(database_url)
    try:
        for given, expected in ((None, "0"), ("1234", "1234ms")):
            if given is None:
                monkeypatch.delenv("PITH_STATEMENT_TIMEOUT_MS", raising=False)
            else:
                monkeypatch.setenv("PITH_STATEMENT_TIMEOUT_MS", given)
            session = command_session(conn)
            try:
                (row,) = await session.fetch("SELECT current_setting('statement_timeout') AS timeout, "
                                             "current_setting('client_connection_check_interval') AS check, "
                                             "current_setting('transaction_read_only') AS read_only")
            finally:
                await session.close()
            assert (row["timeout"], row["check"], row["read_only"]) == (expected, "2s", "on")
    finally:
        await conn.close()
