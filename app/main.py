"""create_app(): the Starlette application; its lifespan opens and closes the asyncpg pool."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import os
import time
from dataclasses import replace
from typing import Any, AsyncIterator, Awaitable, Callable

import asyncpg
from graphql import GraphQLError
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from strawberry.asgi import GraphQL as StrawberryGraphQL
from strawberry.exceptions import MissingQueryError
from strawberry.schema.exceptions import CannotGetOperationTypeError, InvalidOperationTypeError
from strawberry.types.graphql import OperationType

from app.context import Context
from app.cost import DataScale
from app.governor import Client, Governor, parse_networks, rate_limit_headers
from app.db.pool import (DeadlinePassed, Session, StatementTimeout, acquire_by_deadline, connect, connection,
                         create_pool)
from app.fastpath import GZIP_LEVEL, GZIP_MINIMUM, PreparedFastPath, PreparedOperations
from app.cors import Cors
from app.http import GRAPHQL_PATH, error_response
from app.limits import MAX_BODY_BYTES, MAX_QUERY_STRING_BYTES, MAX_SUBSCRIPTIONS_PER_CONNECTION, MAX_VARIABLES_BYTES
from app.live import Hub, LiveError
from app import metrics
from app.logs import note, request_facts, request_id
from app.persisted import PersistedDocuments, PersistedQueryError, load_manifest, requested_hash
from app.limits import RETRY_AFTER_SECONDS
from app.pipeline import UNAVAILABLE
from app.schema import make_schema
from app.settings import Settings

log = logging.getLogger("pith.http")
access = logging.getLogger("pith.access")


class RequestIdMiddleware:
    """Give every request an id (or keep a sane X-Request-ID), put it in logs and on the response."""

    def __init__(self, app: ASGIApp, traced: bool = False, deadline_seconds: float | None = None) -> None:
        self.app = app
        self.traced = traced  # inside OpenTelemetry's server span: its ids go on the access line
        self.deadline_seconds = deadline_seconds  # PITH_REQUEST_TIMEOUT, from the request's arrival

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(b"x-request-id", b"").decode("latin-1")
        rid = given if given and len(given) <= 64 and given.replace("-", "").isalnum() else os.urandom(16).hex()
        token = request_id.set(rid)
        if self.traced:
            from app.tracing import current_span_ids

            span_ids = current_span_ids(rid)
        else:
            span_ids = {}
        if scope["type"] == "websocket":  # every operation of the connection carries its id
            try:
                await self.app(scope, receive, send)
            finally:
                request_id.reset(token)
            return

        keyed = any(name == b"authorization" for name, _ in scope["headers"])

        async def send_with_id(message: dict) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                headers = list(message["headers"]) + [(b"x-request-id", rid.encode())]
                message["headers"] = keyed_cache_rule(headers) if keyed else headers
            await send(message)

        started = time.monotonic()
        status = 0
        sent = 0
        if self.deadline_seconds:
            from app.db.pool import request_deadline

            request_deadline.set(asyncio.get_running_loop().time() + self.deadline_seconds)
        facts: dict[str, Any] = dict(span_ids)
        facts_token = request_facts.set(facts)

        async def send_logged(message: dict) -> None:
            nonlocal status, sent
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                sent += len(message.get("body", b""))
            await send_with_id(message)

        try:
            await self.app(scope, receive, send_logged)
        except Exception as exc:  # noqa: BLE001 - the one place an unexpected error is logged and answered
            log.error("unhandled error on %s %s", scope["method"], scope["path"], exc_info=exc)
            if status == 0:  # nothing sent yet: answer, with the request id, in the shape clients read
                from app.http import transport_error

                response = transport_error(500, f"internal error (request id {rid})", "INTERNAL_SERVER_ERROR")
                await response(scope, receive, send_logged)
        finally:
            elapsed = time.monotonic() - started
            metrics.record_request(route_of(scope), status, elapsed)
            if access.isEnabledFor(logging.INFO):
                client = facts.pop("client", None)
                fields = {"client": client.address if client is not None else _peer(scope),
                          "key": getattr(client, "key_name", None), "method": scope["method"],
                          "path": scope["path"], "status": status, "duration_ms": round(elapsed * 1000, 1),
                          "bytes": sent, **facts}
                access.info("%s %s %s %.1fms", scope["method"], scope["path"], status, elapsed * 1000,
                            extra={"access": fields})
            request_facts.reset(facts_token)
            request_id.reset(token)


def keyed_cache_rule(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The response headers of a request that carried Authorization, on every route: what it says is for
    its reader alone. A `public` Cache-Control becomes `private` (a shared cache must not keep it), and
    `Vary: Authorization` tells every cache that another key gets another answer."""
    out: list[tuple[bytes, bytes]] = []
    varied = False
    for name, value in headers:
        lower = name.lower()
        if lower == b"cache-control":
            value = b", ".join(b"private" if part.strip().lower() == b"public" else part.strip()
                               for part in value.split(b","))
        elif lower == b"vary":
            if b"authorization" not in value.lower() and value.strip() != b"*":
                value = value + b", Authorization"
            varied = True
        out.append((name, value))
    if not varied:
        out.append((b"vary", b"Authorization"))
    return out


def _peer(scope: Scope) -> str | None:
    """The address a request came from, for a request no handler identified: the one rule's
    (Governor.address_of, through trusted proxies)."""
    state = getattr(scope.get("app"), "state", None)
    governor = getattr(getattr(state, "pith", None), "governor", None)
    if governor is not None:
        return governor.address_of(scope)
    peer = scope.get("client")
    return peer[0] if peer else None


def route_of(scope: Scope) -> str:
    """The route template a request matched (a bounded label), `other` when none did."""
    from starlette.routing import Match

    app = scope.get("app")
    for route in getattr(app, "routes", ()):
        matched, _ = route.matches(scope)
        if matched is Match.FULL:
            return getattr(route, "path", "other")
    return "other"


class BodyLimitAndCancelOnDisconnect:
    """Read the (bounded) request body up front, then cancel the handler if the client goes away.

    Cancelling the handler cancels the query it awaits (asyncpg sends PostgreSQL a cancel request), so a
    client that gives up does not keep a backend busy.
    """

    def __init__(self, app: ASGIApp, max_body: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                response = error_response(413, f"request body is larger than {self.max_body} bytes", scope.get("path"))
                await response(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        gone = asyncio.Event()
        delivered = False
        finished = False  # the whole response went out

        async def replay() -> dict:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            await gone.wait()
            return {"type": "http.disconnect"}

        started = False  # the response's start went out

        async def send_tracked(message: dict) -> None:
            nonlocal finished, started
            if message["type"] == "http.response.start":
                started = True
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                finished = True

        handler = asyncio.ensure_future(self.app(scope, replay, send_tracked))
        watcher = asyncio.ensure_future(receive())
        try:
            done, _ = await asyncio.wait({handler, watcher}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            # This request is being cancelled (the server is shutting down past its grace): so is its
            # handler, and its cleanup (rollback, release) finishes before we go. Unanswered, it is told
            # so in JSON, as every other answer (uvicorn would send a plain-text 500).
            watcher.cancel()
            handler.cancel()
            await asyncio.wait({handler})
            if not started:
                with contextlib.suppress(Exception):
                    response = error_response(503, "the server is shutting down and stopped this request before "
                                                   "it was answered; retry (another server answers)", scope.get("path"))
                    await response(scope, replay, send_tracked)
            raise
        if handler in done:
            watcher.cancel()
            handler.result()
            return
        message = watcher.result()
        if message["type"] == "http.disconnect":
            gone.set()
            handler.cancel()
            if not finished:
                log.info("client went away: cancelled %s %s", scope.get("method"), scope.get("path"))
            with contextlib.suppress(asyncio.CancelledError):
                await handler
        else:  # pragma: no cover - nothing else arrives after a complete body
            await handler


class App:
    """Holds what the handlers share: settings, the pool, the schema."""

    def __init__(self, settings: Settings, dsn: str,
                 pool_init: Callable[[asyncpg.Connection], Awaitable[None]] | None = None,
                 tracer_provider: Any = None) -> None:
        self.settings = settings
        self.dsn = dsn
        self.pool_init = pool_init
        self.pool: asyncpg.Pool | None = None
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
                                 heavy_slots=settings.heavy_slots, proxy_header=settings.proxy_header)
        manifest = load_manifest(settings.persisted_documents) if settings.persisted_documents else None
        self.persisted = PersistedDocuments(manifest, only=settings.persisted_only)
        self.prepared = PreparedOperations()
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

    # --- GraphQL -----------------------------------------------------------------------------------

    async def identify(self, scope: Scope) -> Client:
        """The client of an HTTP or WebSocket request (Unauthenticated for a bad key)."""
        client = await self.governor.of_scope(scope)
        note(client=client)
        return client

    async def graphql(self, request: Request) -> Response:
        """GraphQL over HTTP, as the GraphQL-over-HTTP specification says (see app/http.py)."""
        from app import http
        from app.governor import Unauthenticated

        try:
            client = await self.identify(request.scope)
        except Unauthenticated as exc:
            return http.transport_error(401, str(exc), "UNAUTHENTICATED", headers={"WWW-Authenticate": "Bearer"})
        from app.pipeline import over_budget

        refused = over_budget(self.governor, client)  # nothing left of its hour: 429 before the body is read
        if refused is not None:
            from graphql import ExecutionResult

            response = self.respond(ExecutionResult(data=None, errors=[refused]),
                                    http.response_media_type(request.headers.get("accept")) or http.GRAPHQL_RESPONSE)
        else:
            response = await self._bounded(request, client)
        for name, value in rate_limit_headers(self.governor.status(client)):
            response.headers[name.decode()] = value.decode()
        return response

    async def _bounded(self, request: Request, client: Client) -> Response:
        """The request within its deadline, whatever it waits for (the body, a pool connection for the
        cache validator or the paper sizes, admission, execution, its session's close): the operation's own
        deadline answers TIMEOUT at PITH_REQUEST_TIMEOUT; this bound, DEADLINE_MARGIN later, catches any wait
        outside it, so no answer comes later than the deadline plus the margin."""
        from app import http
        from app.errors import deadline_error

        seconds = self.settings.request_timeout
        if not seconds:
            return await self._graphql(request, client)
        try:
            async with asyncio.timeout(seconds + DEADLINE_MARGIN):
                return await self._graphql(request, client)
        except TimeoutError:
            error = deadline_error(seconds)
            return http.transport_error(504, error.message, "TIMEOUT",
                                        http.response_media_type(request.headers.get("accept")))

    async def _graphql(self, request: Request, client: Client) -> Response:
        from app import http

        media = http.response_media_type(request.headers.get("accept"))
        if request.method in ("GET", "HEAD"):
            if len(request.url.query) > MAX_QUERY_STRING_BYTES:
                return http.transport_error(413, f"query string is larger than {MAX_QUERY_STRING_BYTES} bytes; "
                                                 "POST large queries", "PAYLOAD_TOO_LARGE")
            from app.web.routes import wants_html

            if request.method == "GET" and wants_html(request) and (
                    self.settings.graphiql or "query" not in request.query_params):
                if not self.settings.graphiql:
                    return http.transport_error(404, "GraphiQL is off (PITH_ENV=production; PITH_GRAPHIQL=1 turns "
                                                     "it on); send GraphQL requests to this URL", "NOT_FOUND")
                from app.web.pages import graphiql_page

                return graphiql_page(request, request.query_params.get("query"))
            body: Any = http.body_from_query_string(request.query_params)
        else:
            content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
            if content_type != "application/json":
                return http.transport_error(
                    415, "send the GraphQL request as application/json ({\"query\": ..., \"variables\": {...}}) "
                         "or use GET with ?query=", "UNSUPPORTED_MEDIA_TYPE", media)
            raw = await request.body()
            if len(raw) > MAX_BODY_BYTES:
                return http.transport_error(413, f"request body is {len(raw)} bytes; the limit is {MAX_BODY_BYTES}",
                                            "PAYLOAD_TOO_LARGE", media)
            try:
                body = json.loads(raw)
            except (ValueError, RecursionError):
                return http.transport_error(400, "request body is not valid JSON", "BAD_REQUEST", media)
        if media is None:
            return http.transport_error(406, "this endpoint answers application/graphql-response+json or "
                                             "application/json; say one of them in Accept", "NOT_ACCEPTABLE")
        try:
            params = http.GraphQLParams.of(body, MAX_VARIABLES_BYTES)
            sha = requested_hash(params.extensions)
            query = self.persisted.resolve(params.query, sha)
            if query is None:  # an APQ naming its document by hash alone
                query = await self.persisted.lookup(self.pool, sha)  # type: ignore[arg-type]
                if query is None:
                    raise PersistedQueryError("PersistedQueryNotFound", "PERSISTED_QUERY_NOT_FOUND")
        except http.BadRequest as exc:
            return http.transport_error(exc.status, exc.message, exc.code, media)
        except PersistedQueryError as exc:
            status = exc.status if exc.status != 200 or media != http.GRAPHQL_RESPONSE else 400
            return http.graphql_response({"errors": [http.error_entry(exc.message, exc.code)]}, status, media)

        problem = http.operation_problem(query, params.operation_name)
        if problem is not None:
            return http.resolution_failure(problem, media)
        get_like = request.method in ("GET", "HEAD")
        cache: dict[str, str] | None = None
        if get_like:
            # Read before the data: an import committing in between can only make the answer newer
            # than its validator, never older.
            version = await self.data_version()
            etag = http.get_validator(version, params, query, media)
            cache = http.cache_headers(etag, http.pins_every_instant(query, params.operation_name, params.variables))
            from app.web.routes import not_modified

            if not_modified(request, etag):
                return Response(status_code=304, headers=cache)

        context = self.context(client)
        try:
            result = await self.schema.execute(query, variable_values=params.variables, context_value=context,
                                               operation_name=params.operation_name,
                                               allowed_operation_types={OperationType.QUERY})
        except (CannotGetOperationTypeError, InvalidOperationTypeError, MissingQueryError) as exc:
            return http.operation_error(exc, replace(params, query=query), media, get_like)
        response = self.respond(result, media)
        if response.status_code >= 400 and response.status_code != 400:
            return response
        if sha is not None and params.query is not None and not http.is_request_error(result):
            await self.persisted.register(self.pool, sha, query, client)  # validated: it ran
        if not result.errors and not get_like and params.extensions is None and context.session is not None \
                and context.session.statements == 1:
            # Answered by one compiled statement: later requests of this document take app/fastpath.py.
            self.prepared.learn(self.schema._schema, query, params.operation_name)
        if cache is not None and not result.errors:
            response.headers.update(cache)
        return response

    def respond(self, result: Any, media: str | None) -> Response:
        """The HTTP response for an execution result: errors as the masking policy left them (app.pipeline),
        the status their outcome calls for (401, 429, 503, 504). The transports add the RateLimit fields."""
        from app import http
        from app.pipeline import outcome_status, retry_after

        errors = [self.format_error(e) for e in result.errors or []]
        status = outcome_status(errors) if errors else None
        if status is not None:
            headers = {}
            wait = retry_after(errors)
            if wait is not None:
                headers["Retry-After"] = wait
            payload: dict[str, Any] = {"errors": errors} if result.data is None else {"data": result.data,
                                                                                        "errors": errors}
            if status == 503:
                payload = {"data": None, "errors": errors}
            if result.extensions:
                payload["extensions"] = result.extensions
            return http.graphql_response(payload, status, media, headers)
        return http.result_response(result, errors, media)

    def format_error(self, error: GraphQLError) -> dict[str, Any]:
        """An error as sent: the masking policy's (applied once, by the schema) or, for an error made
        outside execution, the same policy applied here."""
        from app.pipeline import masked

        return masked(error, self.settings.statement_timeout_ms, self.settings.production).formatted

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
            return await conn.fetchval("SELECT version FROM data_version")

    # --- health ------------------------------------------------------------------------------------

    async def healthz(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    def operator(self, request: Request) -> bool:
        """An operator asks: a client on loopback (its address by the one rule, through trusted proxies: a
        proxy on the same host does not make everyone an operator), or with `Authorization: Bearer
        $PITH_METRICS_TOKEN`."""
        import hmac

        if self.governor.address_of(request.scope) in ("127.0.0.1", "::1", "localhost"):
            return True
        token = self.settings.metrics_token
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
            if self.replicas and beat % 5 == 0:
                try:
                    await self.replica_states()  # their lag, and any that went down
                except Exception as exc:  # noqa: BLE001
                    log.debug("replica states not read: %s", type(exc).__name__)
            beat += 1
            metrics.sample_pool([self.pool, *self.replicas], self.waiting)
            metrics.SUBSCRIPTIONS.set(self.hub.count if self.hub else 0)
            metrics.CHANGE_LAG.set(self.hub.lag_seconds() if self.hub else 0.0)
            try:
                metrics.sample_process()
            except Exception as exc:  # noqa: BLE001 - a figure missing is no reason to stop sampling
                log.debug("process figures not read: %s", type(exc).__name__)
            await asyncio.sleep(1)

    async def readyz(self, request: Request) -> Response:
        from app.db.migrate import pending

        try:
            if self.pool is None:
                raise ConnectionError("pool not open")
            async with self.pool.acquire(timeout=2) as conn:
                missing = await conn.fetch("SELECT 1") and await pending(conn)
                read_only = await conn.fetchval("SELECT current_setting('transaction_read_only') = 'on'")
        except Exception as exc:  # noqa: BLE001 - readiness reports any failure
            return JSONResponse({"status": "unavailable", "database": "unreachable",
                                 "detail": type(exc).__name__}, status_code=503,
                                headers={"Retry-After": RETRY_AFTER_SECONDS})
        if missing:
            return JSONResponse({"status": "unavailable", "database": "reachable",
                                 "pending_migrations": missing}, status_code=503)
        replicas = await self.replica_states()
        degraded = []
        for r in replicas:
            if not r["reachable"]:
                degraded.append(f"replica {r['replica']} is unreachable: its reads go to "
                                + ("the other replicas" if any(x["reachable"] for x in replicas) else "the primary"))
        if read_only:
            degraded.append("the database is read-only: reads are served, imports and key changes fail, and "
                            "budgets are counted in each process alone")
        elif self.governor.budgets.local:
            degraded.append("budgets are counted in each process alone (the database refused a claim as read-only)")
        if self.hub is not None and not self.hub.listening:
            degraded.append("the change listener is reconnecting: live events arrive once it is back")
        status = "degraded" if degraded else "ready"
        database = "read-only" if read_only else "reachable"
        if self.settings.production and not self.operator(request):  # the figures are for operators
            return JSONResponse({"status": status, "database": database})
        return JSONResponse({"status": status, "database": database, "degraded": degraded, "pending_migrations": [],
                             "replicas": replicas, "pool": pool_figures(self.pool),
                             "budgets": "in-process" if read_only or self.governor.budgets.local else "shared",
                             "prepared": {"documents": len(self.prepared.table),
                                          "answered": self.prepared.answered},
                             "live": {"subscribers": self.hub.count if self.hub else 0,
                                      "position": self.hub.position if self.hub else None}})

    async def replica_states(self) -> list[dict[str, Any]]:
        """Each replica: reachable, and how far its replay is behind (seconds since the last replayed
        commit; 0 when it has replayed all the primary sent), also the lag metric."""
        states = []
        for i, pool in enumerate(self.replicas):
            try:
                async with pool.acquire(timeout=2) as conn:
                    lag = await conn.fetchval(REPLICA_LAG)
                states.append({"replica": i, "reachable": True, "replay_lag_seconds": lag})
                metrics.REPLICA_LAG.labels(str(i)).set(lag or 0.0)
            except Exception as exc:  # noqa: BLE001 - any failure: the replica is down for now
                self.mark_replica_down(i, type(exc).__name__)
                states.append({"replica": i, "reachable": False, "detail": type(exc).__name__})
                metrics.REPLICA_LAG.labels(str(i)).set(float("nan"))
        return states


# How far a standby's replay is behind: 0 when it has replayed everything it received, else the age
# of the last commit it replayed.
REPLICA_LAG = """SELECT CASE WHEN pg_last_wal_receive_lsn() IS NOT DISTINCT FROM pg_last_wal_replay_lsn() THEN 0
                   ELSE extract(epoch FROM now() - pg_last_xact_replay_timestamp()) END::float8"""


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

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        metrics.announce_build()
        state.pool = await create_pool(settings, dsn, init=pool_init)
        state.replicas = [await create_pool(settings, url, init=pool_init) for url in settings.replica_urls]
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
        sample_task = asyncio.create_task(state.sample(), name="pith-metrics")
        if settings.gc_freeze:
            # What start-up built (schema, modules, pools) lives as long as the process: moved out of
            # the collector's generations, full collections no longer walk it (they were the p99).
            gc.collect()
            gc.freeze()
        thresholds = gc.get_threshold()
        if settings.gc_young_threshold:
            gc.set_threshold(settings.gc_young_threshold, *thresholds[1:])
        try:
            yield
        finally:
            gc.set_threshold(*thresholds)
            scale_task.cancel()
            sample_task.cancel()
            await asyncio.gather(scale_task, sample_task, return_exceptions=True)
            metrics.process_exits()
            await state.hub.stop()
            pools, state.pool, state.replicas = [state.pool, *state.replicas], None, []
            for pool in pools:
                await close_pool(pool)

    from app.web import routes as web_routes

    live = LiveGraphQL(state)
    graphql_http = Route("/graphql", state.graphql, methods=["GET", "POST"])
    routes = [
        Route("/graphql", GraphQLEndpoint(graphql_http.app, live), methods=["GET", "POST"]),
        WebSocketRoute("/graphql", live),
        Route("/healthz", state.healthz),
        Route("/metrics", state.metrics),
        Route("/readyz", state.readyz),
        *web_routes.routes(state),
    ]
    middleware = [Middleware(RequestIdMiddleware, traced=tracer_provider is not None,
                             deadline_seconds=settings.request_timeout)]
    if tracer_provider is not None:  # the request's server span encloses everything else
        from app.tracing import tracing_middleware

        middleware.insert(0, tracing_middleware(tracer_provider))
    middleware.append(Middleware(Cors, origins=settings.cors_origins, headers=settings.cors_headers))
    if settings.prepared_fast_path:
        middleware.append(Middleware(PreparedFastPath, state=state, path=GRAPHQL_PATH, max_body=MAX_BODY_BYTES,
                                     max_variables=MAX_VARIABLES_BYTES))
    middleware += [
        Middleware(BodyLimitAndCancelOnDisconnect),
        Middleware(GZipMiddleware, minimum_size=GZIP_MINIMUM, compresslevel=GZIP_LEVEL),
    ]
    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan,
                    exception_handlers={Exception: _unhandled, 404: web_routes.not_found, 405: web_routes.not_found,
                                        asyncpg.QueryCanceledError: _unavailable, DeadlinePassed: _deadline_passed,
                                        asyncpg.PostgresError: _unavailable, StatementTimeout: _unavailable,
                                        **{e: _unavailable for e in UNAVAILABLE}})
    app.state.pith = state
    return app


def pool_figures(pool: asyncpg.Pool | None) -> dict[str, int]:
    """Connections open, idle (free to take), and the ceiling; readiness shows them."""
    if pool is None:
        return {"size": 0, "idle": 0, "max": 0}
    return {"size": pool.get_size(), "idle": pool.get_idle_size(), "max": pool.get_max_size()}


def _sse_transport() -> type:
    """Strawberry's SSE transport with lines ended by LF alone: the event-stream format allows CR LF too,
    but clients that look for an event's end as two LFs (urql's fetch source) never find one in it."""
    from strawberry.http.streaming import SSETransport

    class LFSSETransport(SSETransport):
        def encode_event(self, event: str, data: str | None = None) -> str:
            return super().encode_event(event, data).replace("\r\n", "\n")

        def encode_comment(self, comment: str) -> str:
            return f": {comment}\n\n"

    return LFSSETransport


def _multipart_transport() -> type:
    """Strawberry's multipart subscription transport with its Content-Type well-formed, as the
    incremental-delivery spec writes parameters (quoted, `; `-separated): Strawberry's own value ends in
    `,application/json`, a second media type where a header has room for one."""
    from strawberry.http.streaming import MultipartSubscriptionTransport

    class WellFormedMultipart(MultipartSubscriptionTransport):
        @property
        def headers(self) -> dict[str, str]:
            return {"Content-Type": f'multipart/mixed; boundary="{self.separator}"; subscriptionSpec="1.0"'}

    return WellFormedMultipart


class LiveGraphQL(StrawberryGraphQL):
    """Strawberry's own transports for subscriptions: graphql-transport-ws and graphql-ws over WebSocket,
    SSE and multipart over HTTP; keep-alive pings; the WebSocket origin rule follows PITH_CORS_ORIGINS
    (same origin only when none is configured)."""

    def __init__(self, state: "App") -> None:
        from strawberry.subscriptions import (GRAPHQL_SSE_PROTOCOL, GRAPHQL_TRANSPORT_WS_PROTOCOL,
                                              GRAPHQL_WS_PROTOCOL, MULTIPART_SUBSCRIPTION_PROTOCOL)

        from strawberry.http.base import BaseView

        self.stream_transport_classes_by_protocol = {**BaseView.stream_transport_classes_by_protocol,
                                                     GRAPHQL_SSE_PROTOCOL: _sse_transport(),
                                                     MULTIPART_SUBSCRIPTION_PROTOCOL: _multipart_transport()}
        super().__init__(state.schema, graphql_ide=None, keep_alive=True, keep_alive_interval=15,
                         max_subscriptions_per_connection=MAX_SUBSCRIPTIONS_PER_CONNECTION,
                         allowed_origins=state.settings.cors_origins,
                         subscription_protocols=(GRAPHQL_TRANSPORT_WS_PROTOCOL, GRAPHQL_WS_PROTOCOL,
                                                 GRAPHQL_SSE_PROTOCOL, MULTIPART_SUBSCRIPTION_PROTOCOL))
        self.state = state
        self.connections: dict[str, int] = {}  # open WebSockets per client

    async def get_context(self, request: Any, response: Any = None) -> Context:  # type: ignore[override]
        client = request.scope.get("pith.client")
        if client is None:  # SSE and multipart: identified here (a bad key is refused before the stream)
            from app.governor import Unauthenticated

            try:
                client = await self.state.identify(request.scope)
            except Unauthenticated as exc:
                raise _Refused(401, str(exc)) from None
        # The connection's context: each operation runs in a copy of its own, with its own session
        # (app.pipeline.OperationSession), opened when it starts and closed when it ends.
        # Live operations read on the primary: the change log is appended there, and an event's row may
        # not be replayed on a replica yet when its notification arrives.
        return self.state.context(client, hub=self.state.hub, per_connection=True, app=PrimaryReads(self.state))

    async def reject_websocket(self, request: Any) -> Any:
        """A page on an origin not allowed: accepted only to close with a reason the page can read (a
        handshake refused with 403 tells the browser's code nothing)."""
        origin = request.headers.get("origin", "")
        allowed = self.state.settings.cors_origins
        await _refuse_websocket(request, 4403, f"origin {origin[:40]} may not open WebSockets here; " + (
            "allowed: " + ", ".join(allowed) if allowed else "same origin only (set PITH_CORS_ORIGINS)"))
        return request

    async def on_ws_connect(self, context: Context) -> Any:  # type: ignore[override]
        """connection_init: an `authorization` in its payload names the client (as the header would)."""
        from strawberry.exceptions import ConnectionRejectionError

        from app.governor import Unauthenticated

        params = context.connection_params if isinstance(context.connection_params, dict) else {}
        given = params.get("authorization") or params.get("Authorization")
        if given is None:
            return await super().on_ws_connect(context)
        if not isinstance(given, str):
            raise ConnectionRejectionError({"reason": "connection_init payload: authorization must be a string"})
        try:
            context.client = await self.state.governor.client_of(context.client.address, given)
        except Unauthenticated as exc:
            raise ConnectionRejectionError({"reason": str(exc)}) from None
        return await super().on_ws_connect(context)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "websocket":
            try:
                await super().__call__(scope, receive, send)
            except _Refused as exc:
                from app.http import transport_error

                await transport_error(exc.status, exc.message, "UNAUTHENTICATED")(scope, receive, send)
            return
        from starlette.websockets import WebSocket

        from app.governor import Unauthenticated

        try:
            client = await self.state.identify(scope)
        except Unauthenticated as exc:
            await _refuse_websocket(WebSocket(scope, receive, send), 4401, str(exc))
            return
        held = self.connections.get(client.id, 0)
        limit = self.state.settings.websockets_per_client
        if held >= limit:
            await _refuse_websocket(WebSocket(scope, receive, send), 4429,
                                    f"this client holds its limit of {limit} WebSocket connections; close some first")
            return
        self.connections[client.id] = held + 1
        scope["pith.client"] = client
        try:
            await super().__call__(scope, receive, send)
        finally:
            left = self.connections.get(client.id, 1) - 1
            if left > 0:
                self.connections[client.id] = left
            else:
                self.connections.pop(client.id, None)


class PrimaryReads:
    """The application state, its sessions taken on the primary (for live operations)."""

    def __init__(self, state: App) -> None:
        self._state = state

    def session(self, primary: bool = True) -> Session:
        return self._state.session(primary=True)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._state, name)


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        self.status, self.message = status, message


async def _refuse_websocket(ws: Any, code: int, reason: str) -> None:
    """Accept (with a protocol the client offered) only to close with a code and a reason it can read."""
    from strawberry.subscriptions import GRAPHQL_TRANSPORT_WS_PROTOCOL, GRAPHQL_WS_PROTOCOL

    offered = ws.scope.get("subprotocols") or []
    protocol = next((p for p in offered if p in (GRAPHQL_TRANSPORT_WS_PROTOCOL, GRAPHQL_WS_PROTOCOL)), None)
    await ws.accept(subprotocol=protocol)
    await ws.close(code=code, reason=reason[:120])


class GraphQLEndpoint:
    """/graphql over HTTP: streaming subscription requests go to Strawberry's view, the rest to ours."""

    def __init__(self, ordinary: ASGIApp, live: ASGIApp) -> None:
        self.ordinary, self.live = ordinary, live

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        from app import http

        streams = http.stream_choice(scope)
        if streams is None:  # the Accept allows JSON and a stream: subscriptions stream, the rest is JSON
            if scope["method"] == "POST":
                body, receive = await _buffered(receive)
                try:
                    given = json.loads(body)
                except (ValueError, RecursionError):
                    given = None
            else:
                from urllib.parse import parse_qs

                given = {k: v[0] for k, v in parse_qs(scope.get("query_string", b"").decode("latin-1")).items()}
            streams = isinstance(given, dict) and http.is_subscription(given.get("query"), given.get("operationName"))
        await (self.live if streams else self.ordinary)(scope, receive, send)


async def _buffered(receive: Receive) -> tuple[bytes, Receive]:
    """The request body, read whole, and a receive that hands it on as if unread."""
    chunks, more = [], True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            return b"", receive  # gone: the handler sees the disconnect
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    body, replayed = b"".join(chunks), False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return body, replay


POOL_CLOSE_SECONDS = 3.0
DEADLINE_MARGIN = 0.5  # past its deadline, a request still waiting for anything is answered 504
REPLICA_RETRY_SECONDS = 10.0  # a failed replica gets no reads for this long, then is tried again
REPLICA_ACQUIRE_SECONDS = 1.0  # a replica that gives no connection in this long is taken for down


async def close_pool(pool: asyncpg.Pool) -> None:
    """Close gracefully, but within a bound: a connection still out after it is terminated."""
    try:
        await asyncio.wait_for(pool.close(), POOL_CLOSE_SECONDS)
    except (TimeoutError, asyncio.TimeoutError):
        log.warning("pool did not close in %.0f s; terminating its connections", POOL_CLOSE_SECONDS)
        pool.terminate()


async def _unavailable(request: Request, exc: Exception) -> Response:
    log.warning("database unavailable: %s", type(exc).__name__)
    metrics.refused_unavailable()
    return error_response(503, "the database is unavailable; retry shortly", request.url.path)


async def _deadline_passed(request: Request, exc: Exception) -> Response:
    """A request whose deadline passed while it waited for a connection (before its operation began)."""
    from app import http
    from app.errors import deadline_error

    seconds = request.app.state.pith.settings.request_timeout or 0
    return http.transport_error(504, deadline_error(seconds).message, "TIMEOUT",
                                http.response_media_type(request.headers.get("accept")))


async def _unhandled(request: Request, exc: Exception) -> Response:
    log.error("unhandled error on %s", request.url.path, exc_info=exc)
    return error_response(500, f"internal error (request id {request_id.get()})")
