"""/graphql: the one view every GraphQL transport enters, Strawberry's (strawberry.asgi.GraphQL), with hooks.

POST and GET answer JSON as the GraphQL-over-HTTP specification says (app/http.py); a request whose Accept
allows only a stream, or allows JSON and a stream and selects a subscription, streams (SSE, multipart);
WebSockets speak graphql-transport-ws and graphql-ws. Strawberry's `run` drives every request: `__call__`
refuses before the body (401, 429) and bounds the rest (504); `parse_http_body` reads the request (406, 413,
415, 400) and its persisted or trusted document; `execute_operation` runs it (a GET's 304); `process_result`
and `create_response` give the outcome's status and headers, gathered on the sub-response."""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from cross_web import HTTPException
from graphql import ExecutionResult
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send
from strawberry.asgi import GraphQL as StrawberryGraphQL
from strawberry.exceptions import MissingQueryError
from strawberry.http import GraphQLRequestData
from starlette.websockets import WebSocketDisconnected as SocketClosed
from strawberry.http.exceptions import WebSocketDisconnected
from strawberry.http.streaming import MultipartSubscriptionTransport, SSETransport
from strawberry.schema.exceptions import CannotGetOperationTypeError, InvalidOperationTypeError
from strawberry.subscriptions.protocols.graphql_transport_ws.handlers import BaseGraphQLTransportWSHandler
from strawberry.subscriptions.protocols.graphql_ws.handlers import BaseGraphQLWSHandler
from strawberry.subscriptions.protocols.graphql_ws.types import ErrorMessage
from strawberry.subscriptions import (GRAPHQL_SSE_PROTOCOL, GRAPHQL_TRANSPORT_WS_PROTOCOL, GRAPHQL_WS_PROTOCOL,
                                      MULTIPART_SUBSCRIPTION_PROTOCOL)
from strawberry.types.graphql import OperationType

from app import http
from app.context import Context
from app.db.pool import governor_pool
from app.governor import Unauthenticated, with_budget
from app.cost import READER_STANDING, ReaderBusy, read_off_loop
from app.limits import (MAX_BODY_BYTES, MAX_QUERY_STRING_BYTES, MAX_SUBSCRIPTIONS_PER_CONNECTION, MAX_TOKENS,
                        MAX_VARIABLES_BYTES, RETRY_AFTER_SECONDS)
from app.graphql import plan
from app.live import StoppableSocket
from app.persisted import PersistedQueryError
from app.pipeline import outcome_status, over_budget
from app.state import PrimaryReads

if TYPE_CHECKING:
    from app.state import App

DEADLINE_MARGIN = 0.5  # past its deadline, a request still waiting for anything is answered 504


async def _read(query: str, media: str | None) -> None:
    """A long text read in the reader thread (app.cost.read_off_loop); 503 with Retry-After, unread, when the
    reader holds as many as it may (its refusal charged to the client as any refused request is)."""
    try:
        await read_off_loop(query, MAX_TOKENS)
    except ReaderBusy as exc:
        raise Answer(http.transport_error(503, exc.message, "SERVICE_UNAVAILABLE", media,
                                          {"Retry-After": RETRY_AFTER_SECONDS})) from None


class Answer(Exception):
    """A response decided before the operation runs (a refusal, a 304, the GraphiQL page)."""

    def __init__(self, response: Response) -> None:
        self.response = response


@dataclass
class Operation(GraphQLRequestData):
    """What a request asks for, its document resolved (persisted and trusted documents)."""

    query: str  # None only for a stream naming its document by hash (app.schema.Schema.stream resolves it)
    sha: str | None = None  # the APQ hash it named
    given: str | None = None  # the document it sent (None: by hash alone)


class LFSSETransport(SSETransport):
    """Strawberry's SSE transport with lines ended by LF alone: the event-stream format allows CR LF too,
    but clients that look for an event's end as two LFs (urql's fetch source) never find one in it."""

    def encode_event(self, event: str, data: str | None = None) -> str:
        return super().encode_event(event, data).replace("\r\n", "\n")

    def encode_comment(self, comment: str) -> str:
        return f": {comment}\n\n"


class WellFormedMultipart(MultipartSubscriptionTransport):
    """Strawberry's multipart subscription transport with its Content-Type well-formed, as the
    incremental-delivery spec writes parameters (quoted, `; `-separated): Strawberry's own value ends in
    `,application/json`, a second media type where a header has room for one."""

    @property
    def headers(self) -> dict[str, str]:
        # (and, as Strawberry's SSE transport says of its own stream, no cache keeps it and nginx does not
        # buffer its parts)
        return {"Content-Type": f'multipart/mixed; boundary="{self.separator}"; subscriptionSpec="1.0"',
                "Cache-Control": "no-cache, no-transform", "X-Accel-Buffering": "no"}


def _error(message: str, code: str) -> Any:
    """An error as an operation's WebSocket error message carries it: with its code and the request id, as
    every error of every transport."""
    from app.logs import request_id

    return {"message": message, "extensions": {"code": code, "requestId": request_id.get()}}


async def _past_the_limit(handler: Any, running: int) -> Any:
    """The error for an operation past the connection's limit of operations at once (None: within it),
    said here rather than as Strawberry's bare "Subscription limit reached"; a refused request like any
    other, it costs a point of its client's hour."""
    from app.pipeline import charge_refusal

    limit = handler.max_subscriptions_per_connection
    if limit is None or running < limit:
        return None
    context = handler.context
    await charge_refusal(getattr(context, "governor", None), getattr(context, "client", None))
    return _error(f"this connection holds its limit of {limit} operations at once; complete some (or wait for "
                  "them to end), or open another connection", "BAD_USER_INPUT")


def _malformed(message: Any) -> str | None:
    """What is wrong with an operation's message (graphql-transport-ws `subscribe`, graphql-ws `start`) that the
    protocol's handler would otherwise fail on (a null payload, a list for an id, no query): None when it is
    well formed. Over WebSockets an operation sends its document's text (the protocols carry no extensions: a
    persisted or trusted document is sent as its text, which the same rules check)."""
    payload = message.get("payload")
    if not isinstance(message.get("id"), str):
        return "an operation's id must be a string"
    if not isinstance(payload, dict):
        return "an operation's payload must be an object ({\"query\": ..., \"variables\": {...}})"
    if "query" not in payload:
        return "payload.query is missing: send the operation's document (its text, persisted documents too)"
    for name, kind in (("query", str), ("operationName", str), ("variables", dict), ("extensions", dict)):
        if payload.get(name) is not None and not isinstance(payload[name], kind):
            return f"payload.{name} must be {'a string' if kind is str else 'an object'} or null"
    return None


class NotJSON:
    """A WebSocket message that is not JSON, and why (GraphQLView.decode_json): Strawberry closes
    graphql-transport-ws with a fixed reason and lets graphql-ws ignore it; each protocol's handler says why
    instead (4400 with the reason; graphql-ws's connection_error, as its reference server answers)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _envelope_problem(message: Any) -> str | None:
    """What is wrong with a WebSocket message's envelope, for either protocol: None when it is an object
    with a string `type` (its handler judges the rest)."""
    if isinstance(message, NotJSON):
        return f"the message is not valid JSON ({message.reason})"
    if not isinstance(message, dict):
        return "a message must be a JSON object ({\"type\": ..., ...})"
    if not isinstance(message.get("type"), str):
        return "a message needs a string `type`"
    return None


class TransportWSHandler(BaseGraphQLTransportWSHandler[Context, None]):
    async def handle_connection_init(self, message: Any) -> None:
        # A key refused: closed 4403 as the protocol asks, with the reason (Strawberry's close says "Forbidden",
        # the word a refused origin's close would need too: a page could not tell a bad key from its origin).
        payload = message.get("payload")
        if isinstance(payload, dict) and not self.connection_init_received and not self.connection_timed_out:
            refused = await self.view.payload_client(self.context, payload)  # type: ignore[attr-defined]
            if refused is not None:
                self.connection_init_received = True
                if self.connection_init_timeout_task:
                    self.connection_init_timeout_task.cancel()
                await self.websocket.close(code=4403, reason=_close_reason(refused))
                return
        await super().handle_connection_init(message)

    async def handle_message(self, message: Any) -> None:
        problem = _envelope_problem(message)
        if problem is not None:  # the protocol's answer to an invalid message: close 4400 with the reason
            await self.handle_invalid_message(problem)
            return
        await super().handle_message(message)

    async def handle_subscribe(self, message: Any) -> None:
        problem = _malformed(message)
        if problem is not None:  # the protocol's answer to a malformed message: close 4400 with the reason
            await self.handle_invalid_message(problem)
            return
        if self.connection_acknowledged and message["id"] not in self.operations:
            refused = await _past_the_limit(self, len(self.operations))
            if refused is not None:
                await self.send_message(cast(Any, {"id": message["id"], "type": "error", "payload": [refused]}))
                return
        await super().handle_subscribe(message)

    async def handle_task_exception(self, error: Exception) -> None:
        if isinstance(error, (WebSocketDisconnected, SocketClosed)):  # the client left before its answer: nothing
            return  # went wrong here (Strawberry's or Starlette's word for it, by when it was found)
        await super().handle_task_exception(error)


_GRAPHQL_WS_TYPES = frozenset({"connection_init", "connection_terminate", "start", "stop"})  # a client's


class WSHandler(BaseGraphQLWSHandler[Context, None]):
    async def handle_message(self, message: Any) -> None:
        # graphql-ws has no close code for a bad message: the connection's error, and the connection stays
        problem = _envelope_problem(message)
        if problem is None and message["type"] == "stop" and not isinstance(message.get("id"), str):
            problem = "a stop message needs the string id of the operation it stops"
        if problem is None and message["type"] not in _GRAPHQL_WS_TYPES:
            problem = (f"unknown message type {message['type'][:40]!r}; graphql-ws sends "
                       + ", ".join(sorted(_GRAPHQL_WS_TYPES)))
        if problem is None and message["type"] == "connection_init" and not isinstance(message.get("payload"),
                                                                                        (dict, type(None))):
            problem = "connection_init's payload must be an object (its connection parameters) or absent"
        if problem is not None:
            await self.send_message({"type": "connection_error", "payload": _error(problem, "BAD_REQUEST")})  # type: ignore
            refused_init = isinstance(message, dict) and message.get("type") == "connection_init"
            if refused_init and not self.connection_acknowledged:
                await self.websocket.close(code=1000, reason="")  # a connection refused, as Strawberry closes it
            return
        await super().handle_message(message)

    async def handle_start(self, message: Any) -> None:
        problem = _malformed(message)
        if problem is not None:  # (graphql-ws has no close code for it: an error for the operation, if it has an id)
            operation = message.get("id")
            await self.send_message(ErrorMessage(type="error", id=operation if isinstance(operation, str) else "",
                                                 payload=_error(problem, "BAD_REQUEST")))
            return
        if self.connection_acknowledged and message["id"] not in self.tasks:
            refused = await _past_the_limit(self, len(self.tasks))
            if refused is not None:
                await self.send_message(ErrorMessage(type="error", id=message["id"], payload=refused))
                return
        await super().handle_start(message)

    async def handle_async_results(self, *args: Any, **kwargs: Any) -> None:
        # The client left before its answer (else logged as a task exception never retrieved).
        with contextlib.suppress(WebSocketDisconnected, SocketClosed):
            await super().handle_async_results(*args, **kwargs)


class ClosingStream(StreamingResponse):
    """Starlette's StreamingResponse, whose body (Strawberry's stream: a heartbeat task and a task reading the
    subscription) is closed when the response ends, however it ends. A client that goes away cancels the
    response while it waits to send a chunk, and Starlette leaves the body suspended: its tasks then waited
    on a queue no one read until the collector found them, each logged as an error ("Task was destroyed but
    it is pending", "aclose(): asynchronous generator is already running"), the subscription held till then."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            close = getattr(self.body_iterator, "aclose", None)
            if close is not None:
                await close()


class GraphQLView(StrawberryGraphQL[Context, None]):
    """GraphQL over HTTP (POST, GET, SSE, multipart) and WebSocket; keep-alive pings; the WebSocket origin
    rule follows PITH_CORS_ORIGINS (same origin only when none is configured)."""

    def decode_json(self, data: str | bytes) -> object:
        """Every JSON the view reads (WebSocket messages here, HTTP bodies in parse_http_body): app.http.loads;
        a message that is not JSON, as NotJSON (the protocol's handler refuses it, saying why)."""
        try:
            return http.loads(data)
        except ValueError as exc:
            return NotJSON(exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc))

    def parse_json(self, data: str | bytes) -> Any:
        """Strawberry's reading of a JSON part of an HTTP request (this view reads its own: parse_http_body)."""
        value = self.decode_json(data)
        if isinstance(value, NotJSON):
            raise HTTPException(400, f"not valid JSON ({value.reason})")
        return value

    graphql_transport_ws_handler_class = TransportWSHandler
    graphql_ws_handler_class = WSHandler

    def __init__(self, state: App) -> None:
        self.stream_transport_classes_by_protocol = {GRAPHQL_SSE_PROTOCOL: LFSSETransport,
                                                     MULTIPART_SUBSCRIPTION_PROTOCOL: WellFormedMultipart}
        super().__init__(state.schema, graphql_ide="graphiql", keep_alive=True, keep_alive_interval=15,
                         max_subscriptions_per_connection=MAX_SUBSCRIPTIONS_PER_CONNECTION,
                         allowed_origins=state.settings.cors_origins,
                         subscription_protocols=(GRAPHQL_TRANSPORT_WS_PROTOCOL, GRAPHQL_WS_PROTOCOL,
                                                 GRAPHQL_SSE_PROTOCOL, MULTIPART_SUBSCRIPTION_PROTOCOL))
        self.state = state
        self.connections: dict[str, int] = {}  # open WebSockets per client

    # --- the entry ---------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        token = governor_pool.set(self.state.live_pool if scope["type"] == "websocket" else None)
        try:  # a live transport's key checks and claims never wait behind requests (parse_http_body)
            if scope["type"] == "websocket":
                await self._socket(scope, receive, send)
            else:
                await (await self._http(Request(scope, receive)))(scope, receive, send)
        finally:
            governor_pool.reset(token)

    async def _http(self, request: Request) -> Response:
        try:
            client = await self.state.identify(request.scope)
        except Unauthenticated as exc:
            return http.transport_error(exc.status, str(exc), exc.code, headers=exc.headers)
        request.scope["pith.client"] = client
        # Spent, or too fast: 429 before the body is read.
        refused = over_budget(self.state.governor, client, request.scope)
        READER_STANDING.set(self.state.governor.standing(client))
        if refused is not None:
            media = http.response_media_type(request.headers.get("accept")) or http.GRAPHQL_RESPONSE
            response = self.state.respond(ExecutionResult(data=None, errors=[refused]), media)
        else:
            response = await self._bounded(request)
        if request.method in ("GET", "HEAD") and not any(k == b"cache-control" for k, _ in response.raw_headers):
            # A GET's answer without a validator and a rule of its own (an error, an APQ miss, the client's
            # own budget): no cache keeps it, a CDN's default time to live included.
            response.raw_headers.append((b"cache-control", b"no-store"))
        return with_budget(response, self.state.governor, client)  # (no answer has them yet)

    async def _bounded(self, request: Request) -> Response:
        """The request within its deadline, whatever it waits for (the body, a pool connection for the
        cache validator or the paper sizes, admission, execution, its session's close): the operation's own
        deadline answers TIMEOUT at PITH_REQUEST_TIMEOUT; this bound, DEADLINE_MARGIN later, catches any wait
        outside it, so no answer comes later than the deadline plus the margin. A stream is bounded until
        its response starts."""
        from app.errors import deadline_error

        seconds = self.state.settings.request_timeout
        if not seconds:
            return await self._run(request)
        try:
            async with asyncio.timeout(seconds + DEADLINE_MARGIN):
                return await self._run(request)
        except TimeoutError:
            from app.logs import note

            note(outcome="timeout")  # (before its operation began too: a GET waiting for its validator's read)
            return http.transport_error(504, deadline_error(seconds).message, "TIMEOUT",
                                        http.response_media_type(request.headers.get("accept")))

    async def _run(self, request: Request) -> Response:
        """The answer; a request refused before its operation ran costs its client a point, as a refused document
        does (a 304 is an answer, not a refusal)."""
        if request.method in ("GET", "HEAD") and len(request.url.query) > MAX_QUERY_STRING_BYTES:
            await self.state.charge_refusal(request.scope)
            return http.transport_error(413, f"query string is larger than {MAX_QUERY_STRING_BYTES} bytes; "
                                             "POST large queries", "PAYLOAD_TOO_LARGE")
        if request.method == "POST" and self.state.plans.table and self.state.settings.prepared_fast_path:
            planned = await plan.answered(self.state, request, request.scope["pith.client"])
            if planned is not None:
                return planned
        try:
            return await self.run(request)
        except Answer as exc:
            if exc.response.status_code != 304:
                await self.state.charge_refusal(request.scope)
            return exc.response
        except HTTPException as exc:  # Strawberry's own refusals
            await self.state.charge_refusal(request.scope)
            code = http.ERROR_CODES.get(exc.status_code, "BAD_REQUEST")
            return http.transport_error(exc.status_code, exc.reason, code,
                                        http.response_media_type(request.headers.get("accept")))

    # --- Strawberry's hooks: HTTP ------------------------------------------------------------------

    def is_request_allowed(self, request: Any) -> bool:
        return request.method in ("GET", "HEAD", "POST")

    def should_render_graphql_ide(self, request: Any) -> bool:
        from app.web.routes import wants_html

        return request.method == "GET" and wants_html(request) and (
            self.state.settings.graphiql or "query" not in request.query_params)

    async def render_graphql_ide(self, request: Request) -> Response:
        if not self.state.settings.graphiql:  # (a browser, from the pages' links): how to call the API instead;
            from starlette.responses import HTMLResponse  # no word of the server's settings to a visitor

            from app.web.layout import page

            body = ("<h1>The GraphQL API</h1><p>This server does not serve GraphiQL. Send GraphQL requests to this "
                    "URL: <code>POST</code> with <code>Content-Type: application/json</code> and the body "
                    "<code>{\"query\": \"...\", \"variables\": {...}}</code>, or <code>GET ?query=...</code> for a "
                    "query.</p><p><a href=\"/\">Search the citation graph</a></p>")
            raise Answer(HTMLResponse(page("The GraphQL API", body)))  # the page asked for: 200
        from app.web.pages import graphiql_page

        return graphiql_page(request, request.query_params.get("query"))

    async def get_sub_response(self, request: Request) -> Response:  # type: ignore[override]
        """Where the outcome's status and headers and the media type gather until the response is built."""
        response = await super().get_sub_response(request)
        response.media_type = http.response_media_type(request.headers.get("accept"))
        request.scope["pith.response"] = response
        return response

    async def get_context(self, request: Any, response: Any = None) -> Context:  # type: ignore[override]
        client = request.scope["pith.client"]
        if request.scope["type"] == "http":
            return self.state.context(client)
        # The connection's context: each operation runs in a copy of its own, with its own session
        # (app.pipeline.OperationSession), opened when it starts and closed when it ends.
        # Live operations read on the primary: the change log is appended there, and an event's row may
        # not be replayed on a replica yet when its notification arrives.
        return self.state.context(client, hub=self.state.hub, per_connection=True, app=PrimaryReads(self.state),
                                  connection=request.scope.get("pith.connection"))

    async def parse_http_body(self, request: Any) -> Operation:  # type: ignore[override]
        accept = request.headers.get("accept")
        media = http.response_media_type(accept)
        if request.method in ("GET", "HEAD"):
            body: Any = http.body_from_query_string(request.query_params)
        else:
            content_type = (request.content_type or "").split(";")[0].strip().lower()
            if content_type != "application/json":
                raise Answer(http.transport_error(
                    415, "send the GraphQL request as application/json ({\"query\": ..., \"variables\": {...}}) "
                         "or use GET with ?query=", "UNSUPPORTED_MEDIA_TYPE", media))
            encoding = (request.headers.get("content-encoding") or "identity").strip().lower()
            if encoding != "identity":  # (read as sent, a compressed body would be taken for other bytes)
                raise Answer(http.transport_error(
                    415, f"a request body is read as it is sent: Content-Encoding {encoding[:40]!r} is not "
                         "supported; send it uncompressed", "UNSUPPORTED_MEDIA_TYPE", media,
                    {"Accept-Encoding": "identity"}))  # (RFC 7694: the codings a request may use)
            body = await request.get_body()
            if len(body) > MAX_BODY_BYTES:
                raise Answer(http.transport_error(413, f"request body is {len(body)} bytes; the limit is "
                                                       f"{MAX_BODY_BYTES}", "PAYLOAD_TOO_LARGE", media))
            try:
                body = http.loads(body)
            except ValueError as exc:
                reason = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
                raise Answer(http.transport_error(400, f"request body is not valid JSON ({reason})", "BAD_REQUEST",
                                                  media)) from None
        streams = http.stream_choice(accept) if request.method != "HEAD" else False
        if media is None and streams is False:
            raise Answer(http.transport_error(406, "this endpoint answers application/graphql-response+json or "
                                                   "application/json; say one of them in Accept (a subscription also "
                                                   f"streams as {http.STREAM_MEDIA})", "NOT_ACCEPTABLE"))
        try:
            params = http.GraphQLParams.of(body, MAX_VARIABLES_BYTES)
            if params.query:  # a long text not seen before is read in the reader thread, not on the event loop
                await _read(params.query, media)
            # Its document, persisted or trusted, resolved before any answer starts (a stream's refusal is then
            # an HTTP answer, as POST's is); a WebSocket's is resolved by Schema.stream, by the same rule.
            found, sha = await self.state.persisted.document(self.state.pool, params.query, params.extensions)
            query = cast("str", found)  # (a request without its text names a hash: GraphQLParams)
            if streams is None:  # the Accept allows JSON and a stream: subscriptions stream, the rest is JSON
                streams = http.is_subscription(query, params.operation_name)
            transport = self._get_stream_transport_from_headers(request.headers) if streams else None
            if transport is not None:  # Schema.stream keeps a document sent with its hash once it runs
                governor_pool.set(self.state.live_pool)
                return Operation(query=query, variables=params.variables, operation_name=params.operation_name,
                                 extensions=params.extensions if params.query is not None else None,
                                 protocol=transport.protocol)
        except http.BadRequest as exc:
            raise Answer(http.transport_error(exc.status, exc.message, exc.code, media)) from None
        except PersistedQueryError as exc:
            # 200 with the error is APQ's way in application/json; in the GraphQL media type, or to a client
            # that takes only a stream (a JSON 200 would look like a stream that never came), 400.
            status = exc.status if exc.status != 200 or media == http.JSON else 400
            raise Answer(http.graphql_response({"errors": [http.error_entry(exc.message, exc.code)]}, status,
                                               media)) from None
        await _read(query, media)
        problem = http.operation_problem(query, params.operation_name)  # its parse charged with the operation
        if problem is not None:
            raise Answer(http.resolution_failure(problem, media))
        return Operation(query=query, variables=params.variables, operation_name=params.operation_name,
                         extensions=params.extensions, protocol="http", sha=sha, given=params.query)

    async def execute_operation(self, request: Request, request_adapter: Any, request_data: Operation,  # type: ignore[override]
                                context: Context, root_value: Any, sub_response: Response) -> Any:
        if request_data.protocol != "http":
            request.scope["pith.stream"] = True
            live = self.state.context(context.client, hub=self.state.hub, per_connection=True,
                                      app=PrimaryReads(self.state))
            return await super().execute_operation(request, request_adapter, request_data, live, root_value,
                                                   sub_response)
        media = sub_response.media_type
        get_like = request.method in ("GET", "HEAD")
        cache: dict[str, str] | None = None
        if get_like and not http.reads_its_client(request_data.query, request_data.operation_name):
            # Read before the data: an import committing in between can only make the answer newer
            # than its validator, never older.
            version = await self.state.data_version()
            etag = http.get_validator(version, request_data.query, request_data.variables,
                                      request_data.operation_name, media)
            cache = http.cache_headers(etag, http.pins_every_instant(request_data.query, request_data.operation_name,
                                                                     request_data.variables))
            from app.web.routes import not_modified

            if not_modified(request, etag):
                raise Answer(http.not_modified(cache))
        try:
            result = await self.schema.execute(request_data.query, variable_values=request_data.variables,
                                               context_value=context, operation_name=request_data.operation_name,
                                               allowed_operation_types={OperationType.QUERY})
        except (CannotGetOperationTypeError, InvalidOperationTypeError, MissingQueryError) as exc:
            raise Answer(http.operation_error(exc, request_data.query, request_data.operation_name, media,
                                              get_like)) from None
        if result.errors and outcome_status([self.state.format_error(e) for e in result.errors]) is not None:
            return result
        if request_data.sha is not None and request_data.given is not None and not http.is_request_error(result):
            await self.state.persisted.register(self.state.pool, request_data.sha, request_data.query,
                                                context.client)  # validated: it ran
        if not result.errors and not get_like and request_data.extensions is None and context.session is not None \
                and context.session.statements == 1:
            # Answered by one compiled statement: later POSTs of this document are answered from its plan.
            self.state.plans.learn(self.state.schema._schema, request_data.query, request_data.operation_name)
        if cache is not None and not result.errors:
            sub_response.headers.update(cache)
        return result

    async def process_result(self, request: Request, result: Any) -> Any:  # type: ignore[override]
        if request.scope.get("pith.stream"):
            return await super().process_result(request, result)
        sub_response = request.scope["pith.response"]
        payload, status, headers = self.state.outcome(result, sub_response.media_type)
        sub_response.status_code = status
        sub_response.headers.update(headers)
        return payload

    async def create_streaming_response(self, request: Any, stream: Any, sub_response: Response,  # type: ignore[override]
                                        headers: Any) -> Response:
        """Strawberry's streaming response (SSE, multipart), its stream closed however the response ends."""
        return ClosingStream(stream(), status_code=sub_response.status_code or 200,
                             headers={**sub_response.headers, **headers})

    def create_response(self, response_data: Any, sub_response: Response) -> Response:  # type: ignore[override]
        return http.vary_once(http.graphql_response(response_data, sub_response.status_code or 200,
                                                    sub_response.media_type, sub_response.headers))

    # --- WebSockets --------------------------------------------------------------------------------

    async def _socket(self, scope: Scope, receive: Receive, send: Send) -> None:
        from starlette.websockets import WebSocket

        try:
            client = await self.state.identify(scope)
        except Unauthenticated as exc:
            await _refuse_websocket(WebSocket(scope, receive, send), 4400 + exc.status % 100, str(exc))
            return
        held = self.connections.get(client.id, 0)
        limit = self.state.settings.websockets_per_client
        if held >= limit:
            await _refuse_websocket(WebSocket(scope, receive, send), 4429,
                                    f"this client holds its limit of {limit} WebSocket connections; close some first")
            return
        self.connections[client.id] = held + 1
        scope["pith.client"] = client
        socket = scope["pith.connection"] = StoppableSocket(self.state.hub, send)
        try:
            await socket.run(super().__call__(scope, self.state.governor.paced_receive(client, receive), socket.send))
        finally:
            left = self.connections.get(client.id, 1) - 1
            if left > 0:
                self.connections[client.id] = left
            else:
                self.connections.pop(client.id, None)

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

        refused = await self.payload_client(context, context.connection_params)
        if refused is not None:
            raise ConnectionRejectionError({"reason": refused})
        return await super().on_ws_connect(context)

    async def payload_client(self, context: Context, payload: Any) -> str | None:
        """The client a connection_init payload's `authorization` names, set on the context (once per
        connection: a bad key is charged once); or why it is refused."""
        if context.payload_checked:
            return None
        context.payload_checked = True
        params = payload if isinstance(payload, dict) else {}
        given = params.get("authorization") or params.get("Authorization")
        if given is None:
            return None
        if not isinstance(given, str):
            return "connection_init payload: authorization must be a string"
        try:
            context.client = await self.state.governor.client_of(context.client.address, given)
        except Unauthenticated as exc:
            return str(exc)
        return None


async def _refuse_websocket(ws: Any, code: int, reason: str) -> None:
    """Accept (with a protocol the client offered) only to close with a code and a reason it can read."""
    offered = ws.scope.get("subprotocols") or []
    protocol = next((p for p in offered if p in (GRAPHQL_TRANSPORT_WS_PROTOCOL, GRAPHQL_WS_PROTOCOL)), None)
    await ws.accept(subprotocol=protocol)
    await ws.close(code=code, reason=_close_reason(reason))


def _close_reason(reason: str) -> str:
    """A close frame's reason: at most 123 bytes of UTF-8 (RFC 6455), cut on a character."""
    return reason.encode()[:120].decode(errors="ignore")
