"""The application's state, what every handler shares: settings, the pools and their sessions, the
schema, the governor, the persisted documents and the plan cache."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

import asyncpg
from graphql import GraphQLError
from starlette.responses import Response
from starlette.types import Scope

from app import http
from app.context import Context
from app.cost import DataScale
from app.db.pool import Session, acquire_by_deadline, connect, connection
from app.governor import Client, Governor, parse_networks
from app.graphql.plan import Plans
from app.live import LIVE_ACQUIRE_SECONDS, Hub, live_session
from app.logs import note
from app.persisted import PersistedDocuments, load_manifest
from app.pipeline import masked, outcome_status, retry_after
from app.schema import make_schema
from app.settings import Settings, hides_names
from loaders.system import DATA_VERSION

log = logging.getLogger("pith.http")

POOL_CLOSE_SECONDS = 3.0
REPLICA_RETRY_SECONDS = 10.0  # a failed replica gets no reads for this long, then is tried again
REPLICA_ACQUIRE_SECONDS = 1.0  # a replica that gives no connection in this long is taken for down


class App:
    """Holds what the handlers share: settings, the pool, the schema."""

    def __init__(self, settings: Settings, dsn: str,
                 pool_init: Callable[[asyncpg.Connection], Awaitable[None]] | None = None,
                 tracer_provider: Any = None) -> None:
        self.settings = settings
        self.dsn = dsn
        self.pool_init = pool_init
        self.pool: asyncpg.Pool | None = None
        self.live_pool: asyncpg.Pool | None = None  # the live transports' own (PITH_LIVE_POOL_MAX), on the primary
        self.hub: Hub | None = None
        self.replicas: list[asyncpg.Pool] = []
        self._next_replica = 0
        self._replica_down: dict[int, float] = {}  # replica index -> time.monotonic() until it is tried again
        self.scale = DataScale()
        self.schema = make_schema(introspection=settings.introspection, production=settings.production,
                                  scale=self.scale, statement_timeout_ms=settings.statement_timeout_ms,
                                  tracer_provider=tracer_provider)
        self.governor = Governor(lambda: self.pool, anonymous_points_per_hour=settings.anonymous_points_per_hour,
                                 trusted_proxies=parse_networks(settings.trusted_proxies),
                                 heavy_slots=settings.heavy_slots, proxy_header=settings.proxy_header,
                                 requests_per_second=settings.requests_per_second,
                                 heavy_locks=settings.heavy_locks)
        manifest = load_manifest(settings.persisted_documents) if settings.persisted_documents else None
        self.persisted = PersistedDocuments(manifest, only=settings.persisted_only)
        self.plans = Plans()  # the plan cache (app.graphql.plan)
        self.waiting = 0  # sessions waiting for a pool connection (the metrics' waiting state)

    def context(self, client: Client | None, **more: Any) -> Context:
        """A request's context: who asks, and its deadline (from now). Its session is the operation's,
        opened and closed around it by app.pipeline.OperationSession."""
        more.setdefault("app", self)
        return Context(session=None, client=client, governor=self.governor,
                       deadline_seconds=self.settings.request_timeout, **more)

    def read_pool(self) -> asyncpg.Pool | None:
        """The pool a read goes to: a replica when there are any that are not marked down (round robin),
        else the primary."""
        up = [i for i in range(len(self.replicas)) if not self.replica_is_down(i)]
        if up:
            self._next_replica = (self._next_replica + 1) % len(up)
            return self.replicas[up[self._next_replica]]
        return self.pool

    def replica_is_down(self, index: int) -> bool:
        return self._replica_down.get(index, 0.0) > time.monotonic()

    def mark_replica_down(self, index: int, reason: str) -> None:
        """A replica that failed: reads go to the others (or the primary) for REPLICA_RETRY_SECONDS."""
        if not self.replica_is_down(index):
            log.warning("replica %d failed (%s): its reads go to %s for %.0f s", index, reason,
                        "the other replicas" if len(self.replicas) > 1 else "the primary", REPLICA_RETRY_SECONDS)
        self._replica_down[index] = time.monotonic() + REPLICA_RETRY_SECONDS

    def session(self, primary: bool = False) -> Session:
        """A read session: on a replica when there are any (round robin), else (or with `primary`) on
        the primary. A replica that cannot give a connection is marked down and the session takes one
        from the primary instead: a failed replica costs its share of reads nothing but a retry.

        Every statement of one request runs on the one connection of its session, so a record's
        statements all come from one replica and one snapshot.
        """
        pool = self.pool if primary else self.read_pool()
        if pool is None:
            raise ConnectionError("the database pool is not open")
        replica = next((i for i, p in enumerate(self.replicas) if p is pool), None)
        taken: dict[int, asyncpg.Pool] = {}

        async def acquire() -> asyncpg.Connection:
            self.waiting += 1
            try:
                if replica is not None:
                    try:
                        conn = await acquire_by_deadline(pool, REPLICA_ACQUIRE_SECONDS)
                        taken[id(conn)] = pool
                        return conn
                    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError,
                            TimeoutError) as exc:
                        if self.pool is None:
                            raise
                        self.mark_replica_down(replica, type(exc).__name__)
                primary_pool = self.pool
                if primary_pool is None:
                    raise ConnectionError("the database pool is not open")
                conn = await acquire_by_deadline(primary_pool)
                taken[id(conn)] = primary_pool
                return conn
            finally:
                self.waiting -= 1

        async def release(conn: asyncpg.Connection) -> None:
            await taken.pop(id(conn), pool).release(conn)

        return Session(acquire, release, self.settings.statement_timeout_ms)

    async def identify(self, scope: Scope) -> Client:
        """The client of an HTTP or WebSocket request (Unauthenticated for a bad key)."""
        client = await self.governor.of_scope(scope)
        note(client=client)
        return client

    async def charge_refusal(self, scope: Scope) -> list[tuple[bytes, bytes]]:
        """A request refused before its operation ran (a body too large or not JSON, a media type or an Accept not
        served): a point of its client's hour, as a refused document costs (app.pipeline.charge_refusal). The
        RateLimit fields after it, for a refusal that no transport gives them (the request layer's 413)."""
        from app.governor import Unauthenticated, rate_limit_headers
        from app.pipeline import charge_refusal

        client = scope.get("pith.client")
        if client is None:
            try:
                client = await self.identify(scope)
            except Unauthenticated:
                return []  # (a bad key's refusal is charged to its address already)
        await charge_refusal(self.governor, client)
        return rate_limit_headers(self.governor.status(client))

    def respond(self, result: Any, media: str | None) -> Response:
        """The HTTP response for an execution result (App.outcome). The transports add the RateLimit fields."""
        payload, status, headers = self.outcome(result, media)
        return http.graphql_response(payload, status, media, headers)

    def outcome(self, result: Any, media: str | None) -> tuple[dict[str, Any], int, dict[str, str]]:
        """The body, status and headers of an execution result in a media type: errors as the masking
        policy left them (app.pipeline), the status their outcome calls for (401, 429, 503, 504)."""
        errors = [self.format_error(e) for e in result.errors or []]
        status = outcome_status(errors) if errors else None
        if status is None:
            payload, status = http.result_payload(result, errors, media)
            return payload, status, {}
        headers = {}
        wait = retry_after(errors)
        if wait is not None:
            headers["Retry-After"] = wait
        payload = {"errors": errors} if result.data is None else {"data": result.data, "errors": errors}
        if status == 503:
            payload = {"data": None, "errors": errors}
        if result.extensions:
            payload["extensions"] = result.extensions
        return payload, status, headers

    def format_error(self, error: GraphQLError) -> dict[str, Any]:
        """An error as sent: the masking policy's (applied once, by the schema) or, for an error made
        outside execution, the same policy applied here."""
        formatted = masked(error, self.settings.statement_timeout_ms,
                           hides_names(self.settings.production, self.settings.introspection)).formatted
        return cast("dict[str, Any]", formatted)  # a TypedDict, read as the dict it is

    async def refresh_scale(self, every: float = 300.0) -> None:
        """Keep the price of data-sized work (a timeline reads all of a paper's observations) current, from
        PostgreSQL's statistics, off every request's path."""
        while True:
            await asyncio.sleep(every)
            try:
                await self.refresh_scale_once()
            except Exception as exc:  # noqa: BLE001 - keep the last estimate
                log.debug("data scale not refreshed: %s", type(exc).__name__)

    async def refresh_scale_once(self) -> None:
        """Read the data's scale on a connection of its own (not one of the pool's: no request waits on it)."""
        from app.cost import data_scale

        conn = await connect(self.dsn, timeout=5, server_settings={"application_name": "pith-graph-scale"})
        try:
            self.scale.current = await data_scale(conn)
        finally:
            await conn.close()

    async def data_version(self) -> int:
        if self.pool is None:
            raise ConnectionError("the database pool is not open")
        async with connection(self.pool) as conn:
            return await conn.fetchval(DATA_VERSION)


class PrimaryReads:
    """The application state, its sessions taken on the primary from the live pool (for live operations:
    they never wait behind requests for a connection)."""

    def __init__(self, state: App) -> None:
        self._state = state

    def _pool(self) -> asyncpg.Pool:
        pool = self._state.live_pool or self._state.pool
        if pool is None:
            raise ConnectionError("the database pool is not open")
        return pool

    def session(self, primary: bool = True) -> Session:
        return live_session(self._pool(), self._state.settings.statement_timeout_ms)

    def connection(self) -> contextlib.AbstractAsyncContextManager[asyncpg.Connection]:
        return connection(self._pool(), LIVE_ACQUIRE_SECONDS)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._state, name)



async def close_pool(pool: asyncpg.Pool) -> None:
    """Close gracefully, but within a bound: a connection still out after it is terminated."""
    try:
        await asyncio.wait_for(pool.close(), POOL_CLOSE_SECONDS)
    except TimeoutError:
        log.warning("pool did not close in %.0f s; terminating its connections", POOL_CLOSE_SECONDS)
        pool.terminate()
