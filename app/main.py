"""create_app(): the Starlette application, composed: its routes, its middleware (outermost first), and
its lifespan, which opens and closes the asyncpg pools and the change listener.

The parts: app.state (what handlers share), app.graphql (GraphQL over HTTP and subscriptions),
app.web.routes (records and pages), app.ops (health, readiness, metrics), app.middleware."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route, WebSocketRoute

from app import metrics
from app.compression import GZip
from app.cors import Cors
from app.db.pool import DeadlinePassed, StatementTimeout, create_pool, pool_rollbacks_expected
from app.graphql.view import GraphQLView
from app.http import error_response
from app.live import Hub, LiveError
from app.logs import note, request_id
from app.middleware import RequestLayer
from app.ops import Ops
from app.pipeline import UNAVAILABLE
from app.settings import Settings
from app.state import App, close_pool

log = logging.getLogger("pith.http")


def create_app(settings: Settings | None = None, dsn: str | None = None, *,
               pool_init: Callable[[asyncpg.Connection], Awaitable[None]] | None = None,
               tracer_provider: Any = None) -> Starlette:
    """The application; with `tracer_provider` (or OTEL_* variables asking for traces, app.tracing) traced."""
    settings = settings or Settings.from_env()
    if not logging.getLogger().handlers:  # a worker process (--workers N) starts with no logging of its own
        from app.logs import configure_logging

        configure_logging(settings.log_format)
        if not settings.access_log:
            logging.getLogger("pith.access").setLevel(logging.WARNING)
    dsn = dsn or settings.database_url
    if not dsn:
        raise ValueError("no database: set DATABASE_URL or use `pith-graph serve` for the embedded server")
    if tracer_provider is None:
        from app.tracing import provider_from_env

        tracer_provider = provider_from_env()
    state = App(settings, dsn, pool_init, tracer_provider)
    ops = Ops(state)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        metrics.announce_build()
        state.pool = await create_pool(settings, dsn, init=pool_init)
        state.replicas = [await create_pool(settings, url, init=pool_init) for url in settings.replica_urls]
        # Live work on the listener's URL (straight to the primary when a pooler is in front): never
        # queued behind requests in PgBouncer either, and untouched by its restarts.
        state.live_pool = await create_pool(settings, settings.listen_database_url or dsn, init=pool_init,
                                            min_size=min(1, settings.pool_min), max_size=settings.live_pool_max)
        # Live changes are read from the primary: the change log is appended there, and a replica may
        # not have replayed a notified position yet.
        state.hub = Hub(settings.listen_database_url or dsn, per_owner=settings.subscriptions_per_client)
        await state.hub.start()
        # Ready means listening: a start-up that answers /readyz before the listener's first LISTEN
        # would report a healthy process as degraded. A listener that cannot connect does not stop
        # the start: readiness says so until it is back.
        with contextlib.suppress(LiveError):
            await state.hub.ready(timeout=5)
        try:  # prices are known before the first request; refreshed every 5 minutes after
            await asyncio.wait_for(state.refresh_scale_once(), 10)
        except Exception as exc:  # noqa: BLE001 - the defaults price conservatively
            log.warning("data scale not read (%s): prices assume %s", type(exc).__name__, state.scale.current)
        scale_task = asyncio.create_task(state.refresh_scale(), name="pith-data-scale")
        sample_task = asyncio.create_task(ops.sample(), name="pith-metrics")
        if settings.gc_freeze:
            # What start-up built (schema, modules, pools) lives as long as the process: moved out of
            # the collector's generations, full collections no longer walk it (they were the p99).
            gc.collect()
            gc.freeze()
        thresholds, switch = gc.get_threshold(), sys.getswitchinterval()
        if settings.gc_young_threshold:
            gc.set_threshold(settings.gc_young_threshold, *thresholds[1:])
        if settings.switch_interval_us:
            sys.setswitchinterval(settings.switch_interval_us / 1e6)
        handler_back = pool_rollbacks_expected(asyncio.get_running_loop())
        try:
            yield
        finally:
            gc.set_threshold(*thresholds)
            sys.setswitchinterval(switch)
            scale_task.cancel()
            sample_task.cancel()
            await asyncio.gather(scale_task, sample_task, return_exceptions=True)
            metrics.process_exits()
            await state.hub.stop()
            pools, state.pool, state.replicas = [state.pool, *state.replicas, state.live_pool], None, []
            state.live_pool = None
            for pool in pools:
                await close_pool(pool)
            handler_back()

    from app.web import routes as web_routes

    graphql = GraphQLView(state)
    routes = [
        Route("/graphql", graphql, methods=["GET", "POST"]),
        WebSocketRoute("/graphql", graphql),
        Route("/healthz", ops.healthz),
        Route("/metrics", ops.metrics),
        Route("/readyz", ops.readyz),
        *web_routes.routes(state),
    ]

    def cors(app: Any) -> Cors:  # the CORS layer, for the stack and for what RequestLayer answers itself
        return Cors(app, origins=settings.cors_origins, headers=settings.cors_headers)

    middleware = [Middleware(RequestLayer, traced=tracer_provider is not None,
                             deadline_seconds=settings.request_timeout, on_refused=state.charge_refusal, answers=cors),
                  Middleware(cors), Middleware(GZip)]
    if tracer_provider is not None:  # the request's server span encloses everything else
        from app.tracing import tracing_middleware

        middleware.insert(0, tracing_middleware(tracer_provider))
    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan,
                    exception_handlers={Exception: _unhandled, 404: web_routes.not_found, 405: web_routes.not_found,
                                        asyncpg.QueryCanceledError: _unavailable, DeadlinePassed: _deadline_passed,
                                        asyncpg.PostgresError: _unavailable, StatementTimeout: _unavailable,
                                        **{e: _unavailable for e in UNAVAILABLE}})
    app.state.pith = state
    return app


async def _unavailable(request: Request, exc: Exception) -> Response:
    log.warning("database unavailable: %s", type(exc).__name__)
    metrics.refused_unavailable()
    note(outcome="unavailable")  # (its access line says why, as an operation's would)
    return error_response(503, "the database is unavailable; retry shortly", request.url.path)


async def _deadline_passed(request: Request, exc: Exception) -> Response:
    """A request whose deadline passed while it waited for a connection (before its operation began)."""
    from app import http
    from app.errors import deadline_error

    seconds = request.app.state.pith.settings.request_timeout or 0
    note(outcome="timeout")
    return http.transport_error(504, deadline_error(seconds).message, "TIMEOUT",
                                http.response_media_type(request.headers.get("accept")))


async def _unhandled(request: Request, exc: Exception) -> Response:
    log.error("unhandled error on %s", request.url.path, exc_info=exc)
    return error_response(500, f"internal error (request id {request_id.get()})")
