"""Start-up: settings are checked before anything starts (one line per bad variable, naming it and what it
accepts; words in any case), and commands other than migrate and serve refuse a database whose
migrations are behind instead of applying them."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import asyncpg
import httpx
import pytest

from app.db.migrate import migration_files
from app.settings import Settings, SettingsError
from tests.conftest import LiveServer, create_database, drop_database, free_port


def pith_graph(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("PITH_") and k != "DATABASE_URL"}
    return subprocess.run([sys.executable, "-m", "app.cli", *args], env={**base, **(env or {})},
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("env, line", [
    ({"PITH_POOL_MAX": "ten"}, "error: PITH_POOL_MAX: 'ten' is not a whole number; give a whole number from 1 up"),
    ({"PITH_REQUEST_TIMEOUT": "10s"}, "error: PITH_REQUEST_TIMEOUT: '10s' is not a number of seconds"),
    ({"PITH_POOL_MIN": "20", "PITH_POOL_MAX": "5"}, "error: PITH_POOL_MIN: 20 is more than PITH_POOL_MAX (5)"),
    ({"PITH_ENV": "prod"}, "error: PITH_ENV: 'prod' is not one of production, development (any case)"),
    ({"PITH_LOG_FORMAT": "yaml"}, "error: PITH_LOG_FORMAT: 'yaml' is not one of text, json (any case)"),
    ({"PITH_PORT": "70000"}, "error: PITH_PORT: 70000 is out of range; give a whole number from 1 to 65535"),
    ({"PITH_GC_FREEZE": "maybe"}, "error: PITH_GC_FREEZE: 'maybe' is not on or off"),
    ({"PITH_WORKERS": "two"}, "error: PITH_WORKERS: 'two' is not a whole number"),
    ({"PITH_TRUSTED_PROXIES": "10.0.0.300"}, "error: PITH_TRUSTED_PROXIES: '10.0.0.300' is not an IP address"),
])
def test_a_bad_setting_stops_serve_before_it_binds_with_one_line_saying_what_is_accepted(database_url, env, line):
    port = free_port()
    done = pith_graph("serve", "--port", str(port), env={"DATABASE_URL": database_url, **env}, timeout=60)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(line), done.stderr
    assert "Traceback" not in done.stderr and "serving on" not in done.stderr


def test_every_bad_setting_is_named_at_once():
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({"PITH_POOL_MAX": "ten", "PITH_HEAVY_SLOTS": "0", "PITH_ACCESS_LOG": "sometimes"})
    assert [p.split(":")[0] for p in caught.value.problems] == ["PITH_POOL_MAX", "PITH_ACCESS_LOG", "PITH_HEAVY_SLOTS"]


def test_words_and_switches_are_read_in_any_case():
    settings = Settings.from_env({"PITH_ENV": "Production", "PITH_LOG_FORMAT": "JSON", "PITH_GRAPHIQL": "On",
                                  "PITH_ACCESS_LOG": "FALSE", "PITH_REQUEST_TIMEOUT": "2.5"})
    assert settings.production and not settings.introspection and settings.graphiql
    assert settings.log_format == "json" and not settings.access_log and settings.request_timeout == 2.5
    assert settings.anonymous_points_per_hour  # production's default budget
    assert Settings.from_env({"PITH_ENV": "development"}).production is False


def test_production_and_json_in_capitals_are_what_the_server_does(database_url):
    server = LiveServer(database_url, env={"PITH_ENV": "Production", "PITH_LOG_FORMAT": "JSON"})
    try:
        body = httpx.post(server.base + "/graphql", json={"query": "{ __schema { types { name } } }"},
                          timeout=10).json()
        assert body["errors"] and "introspection" in body["errors"][0]["message"].lower(), body
    finally:
        server.stop()
    lines = [line for line in server.logs().splitlines() if line.strip()]
    assert lines and all(line.startswith("{") for line in lines), lines[:3]


@pytest.fixture
def behind_database(admin_url):
    """A database migrated up to, not including, this release's last migration."""
    versions = [v for v, _ in migration_files()]
    url = asyncio.run(create_database(admin_url, "pith_test_behind", until=versions[-2]))
    yield url, versions[-1]
    asyncio.run(drop_database(admin_url, url))


def _applied(url: str) -> list[str]:
    async def read() -> list[str]:
        conn = await asyncpg.connect(url)
        try:
            return [r[0] for r in await conn.fetch("SELECT version FROM schema_migrations ORDER BY 1")]
        finally:
            await conn.close()

    return asyncio.run(read())


def test_commands_refuse_a_database_whose_migrations_are_behind(behind_database, tmp_path):
    url, last = behind_database
    before = _applied(url)
    assert last not in before
    for args in (("keys", "create", "--name", "ops", "--points-per-hour", "10"), ("keys", "list"),
                 ("load", "--sample"), ("dump", str(tmp_path / "all.ndjson")), ("export", "2402.15627"),
                 ("synth", "--papers", "3")):
        done = pith_graph(*args, "--database-url", url)
        assert done.returncode == 1, (args, done.stderr)
        assert "migrations are behind" in done.stderr and last in done.stderr and "pith-graph migrate" in done.stderr
        assert "Traceback" not in done.stderr
    assert _applied(url) == before  # nothing applied behind the operator's back
    assert not (tmp_path / "all.ndjson").exists()
    done = pith_graph("migrate", "--database-url", url)
    assert done.returncode == 0 and last in done.stdout, done.stderr
    listed = pith_graph("keys", "list", "--database-url", url)
    assert listed.returncode == 0, listed.stderr


def test_heavy_slots_default_to_the_cores_less_one():
    """Heavy work never holds every core by default: on two cores the server's workers run one heavy operation
    between them; each process at most two."""
    from app.governor import Governor
    from app.settings import Settings, heavy_slots_for

    assert [heavy_slots_for(cpus=c) for c in (1, 2, 4, 8)] == [1, 1, 3, 7]
    assert Settings.from_env({"PITH_WORKERS": "64", "PITH_HEAVY_SLOTS": "3"}).heavy_slots == 3
    assert Settings.from_env({"PITH_HEAVY_LOCKS": "/x"}).heavy_locks == "/x"
    assert Governor(lambda: None, anonymous_points_per_hour=None, heavy_slots=7).heavy._value == 2
