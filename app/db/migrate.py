"""Plain SQL migrations, applied in file-name order and recorded in schema_migrations."""

from __future__ import annotations

from importlib import resources

import asyncpg

# Serializes concurrent migrators (two `serve` or `load` processes starting at once).
_LOCK_KEY = 0x70697468  # "pith"


def migration_files() -> list[tuple[str, str]]:
    folder = resources.files("app.db") / "migrations"
    names = sorted(p.name for p in folder.iterdir() if p.name.endswith(".sql"))
    return [(name.removesuffix(".sql"), (folder / name).read_text(encoding="utf-8")) for name in names]


async def applied_versions(conn: asyncpg.Connection) -> set[str]:
    exists = await conn.fetchval("SELECT to_regclass('schema_migrations') IS NOT NULL")
    if not exists:
        return set()
    return {r["version"] for r in await conn.fetch("SELECT version FROM schema_migrations")}


async def pending(conn: asyncpg.Connection) -> list[str]:
    done = await applied_versions(conn)
    return [version for version, _ in migration_files() if version not in done]


async def migrate(conn: asyncpg.Connection, notes: list[str] | None = None, until: str | None = None) -> list[str]:
    """Apply every pending migration (up to and including `until`, when named), each in its own
    transaction; return the versions applied.

    What a migration says of the data it repaired (a NOTICE that starts with its version and a colon,
    also kept in data_repairs) is appended to `notes`; PostgreSQL's own notices (IF NOT EXISTS...) are not."""
    applied: list[str] = []
    running = [""]

    def heard(_conn: asyncpg.Connection, message: asyncpg.PostgresLogMessage) -> None:
        if notes is not None and running[0] and str(message.message).startswith(running[0] + ":"):
            notes.append(str(message.message))

    conn.add_log_listener(heard)
    await conn.execute("SELECT pg_advisory_lock($1)", _LOCK_KEY)
    try:
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        done = await applied_versions(conn)
        for version, sql in migration_files():
            if until is not None and version > until:
                break
            if version in done:
                continue
            running[0] = version
            async with conn.transaction():
                await conn.execute(sql)
                await conn.execute("INSERT INTO schema_migrations (version) VALUES ($1)", version)
            applied.append(version)
    finally:
        conn.remove_log_listener(heard)
        await conn.execute("SELECT pg_advisory_unlock($1)", _LOCK_KEY)
    return applied
