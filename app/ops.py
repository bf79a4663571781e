"""What operators ask a process: liveness (/healthz), readiness (/readyz), Prometheus metrics (/metrics),
and the once-a-second sampling of its gauges."""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from typing import TYPE_CHECKING, Any

import asyncpg
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app import metrics
from app.http import error_response
from app.limits import RETRY_AFTER_SECONDS
from loaders.system import PING, READ_ONLY, REPLICA_LAG

if TYPE_CHECKING:
    from app.state import App

log = logging.getLogger("pith.http")

READY_SECONDS = 1.0  # how old a readiness check may be when answered to a caller who is not an operator

class Ops:
    """The operator routes and the sampling loop of one application's state."""

    def __init__(self, state: App) -> None:
        self.state = state
        self._ready: tuple[float, tuple[int, dict[str, Any], dict[str, str] | None]] | None = None
        self._ready_lock = asyncio.Lock()

    async def healthz(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    def operator(self, request: Request) -> bool:
        """An operator asks: a client on loopback (its address by the one rule, through trusted proxies: a
        proxy on the same host does not make everyone an operator), or with `Authorization: Bearer
        $PITH_METRICS_TOKEN`."""
        if self.state.governor.address_of(request.scope) in ("127.0.0.1", "::1", "localhost"):
            return True
        token = self.state.settings.metrics_token
        given = request.headers.get("authorization", "")
        return bool(token) and hmac.compare_digest(given.encode(), f"Bearer {token}".encode())

    async def metrics(self, request: Request) -> Response:
        """Prometheus metrics of every worker process (app.metrics), for operators only."""
        if not self.operator(request):
            return error_response(403, "metrics are answered to loopback or to Authorization: Bearer "
                                       "$PITH_METRICS_TOKEN", request.url.path)
        body, media = metrics.exposition()
        return Response(body, media_type=media)

    async def sample(self) -> None:
        """This process's gauges, every second: the pools and the subscriptions (no statement: the change
        listener reads the import counter, app.live)."""
        beat = 0
        while True:
            if self.state.replicas and beat % 5 == 0:
                try:
                    await self.replica_states()  # their lag, and any that went down
                except Exception as exc:  # noqa: BLE001
                    log.debug("replica states not read: %s", type(exc).__name__)
            beat += 1
            metrics.sample_pool([self.state.pool, *self.state.replicas], self.state.waiting)
            metrics.SUBSCRIPTIONS.set(self.state.hub.count if self.state.hub else 0)
            metrics.CHANGE_LAG.set(self.state.hub.lag_seconds() if self.state.hub else 0.0)
            try:
                metrics.sample_process()
            except Exception as exc:  # noqa: BLE001 - a figure missing is no reason to stop sampling
                log.debug("process figures not read: %s", type(exc).__name__)
            await asyncio.sleep(1)

    async def readyz(self, request: Request) -> Response:
        """Readiness. An operator (Ops.operator) is answered from a fresh check with every figure. In production
        anyone else (a load balancer elsewhere, or the internet) is paced like any request (a refusal is a 429,
        costing a point of the client's hour) and answered status and database alone, from a check at most
        READY_SECONDS old that every such caller of this process shares: a flood of /readyz costs one check a
        second, never a statement a request."""
        if self.state.settings.production and not self.operator(request):
            governor = self.state.governor
            refused = governor.pace(governor.anonymous(governor.address_of(request.scope)), request.scope)
            if refused is not None:
                response = error_response(429, str(refused), request.url.path)
                response.headers["Retry-After"] = str(refused.retry_after)
                return response
            status, body, headers = await self.shared_readiness()
            short = {k: body[k] for k in ("status", "database", "detail") if k in body}
            return JSONResponse(short, status_code=status, headers=headers)
        status, body, headers = await self.readiness()
        return JSONResponse(body, status_code=status, headers=headers)

    async def shared_readiness(self) -> tuple[int, dict[str, Any], dict[str, str] | None]:
        """The last readiness check if it is under READY_SECONDS old, else a new one (one at a time: callers
        arriving while it runs wait for it)."""
        async with self._ready_lock:
            now = time.monotonic()
            if self._ready is None or now - self._ready[0] >= READY_SECONDS:
                self._ready = (time.monotonic(), await self.readiness())
            return self._ready[1]

    async def readiness(self) -> tuple[int, dict[str, Any], dict[str, str] | None]:
        """Readiness checked now: (HTTP status, every figure, headers)."""
        from app.db.migrate import pending

        try:
            if self.state.pool is None:
                raise ConnectionError("pool not open")
            async with self.state.pool.acquire(timeout=2) as conn:
                missing = await conn.fetch(PING) and await pending(conn)
                read_only = await conn.fetchval(READ_ONLY)
        except Exception as exc:  # noqa: BLE001 - readiness reports any failure
            return 503, {"status": "unavailable", "database": "unreachable", "detail": type(exc).__name__}, \
                {"Retry-After": RETRY_AFTER_SECONDS}
        if missing:
            return 503, {"status": "unavailable", "database": "reachable", "pending_migrations": missing}, None
        replicas = await self.replica_states()
        degraded = []
        for r in replicas:
            if not r["reachable"]:
                degraded.append(f"replica {r['replica']} is unreachable: its reads go to "
                                + ("the other replicas" if any(x["reachable"] for x in replicas) else "the primary"))
        if read_only:
            degraded.append("the database is read-only: reads are served, imports and key changes fail, and "
                            "budgets are counted in each process alone")
        elif self.state.governor.budgets.local:
            degraded.append("budgets are counted in each process alone (the database refused a claim as read-only)")
        if self.state.hub is not None and not self.state.hub.listening:
            degraded.append("the change listener is reconnecting: live events arrive once it is back")
        status = "degraded" if degraded else "ready"
        database = "read-only" if read_only else "reachable"
        return 200, {"status": status, "database": database, "degraded": degraded, "pending_migrations": [],
                     "replicas": replicas, "pool": pool_figures(self.state.pool),
                     "budgets": "in-process" if read_only or self.state.governor.budgets.local else "shared",
                     "prepared": {"documents": len(self.state.plans.table),
                                  "answered": self.state.plans.answered},
                     "live": {"subscribers": self.state.hub.count if self.state.hub else 0,
                              "position": self.state.hub.position if self.state.hub else None}}, None

    async def replica_states(self) -> list[dict[str, Any]]:
        """Each replica: reachable, and how far its replay is behind (seconds since the last replayed
        commit; 0 when it has replayed all the primary sent), also the lag metric."""
        states = []
        for i, pool in enumerate(self.state.replicas):
            try:
                async with pool.acquire(timeout=2) as conn:
                    lag = await conn.fetchval(REPLICA_LAG)
                states.append({"replica": i, "reachable": True, "replay_lag_seconds": lag})
                metrics.REPLICA_LAG.labels(str(i)).set(lag or 0.0)
            except Exception as exc:  # noqa: BLE001 - any failure: the replica is down for now
                self.state.mark_replica_down(i, type(exc).__name__)
                states.append({"replica": i, "reachable": False, "detail": type(exc).__name__})
                metrics.REPLICA_LAG.labels(str(i)).set(float("nan"))
        return states




def pool_figures(pool: asyncpg.Pool | None) -> dict[str, int]:
    """Connections open, idle (free to take), and the ceiling; readiness shows them."""
    if pool is None:
        return {"size": 0, "idle": 0, "max": 0}
    return {"size": pool.get_size(), "idle": pool.get_idle_size(), "max": pool.get_max_size()}
