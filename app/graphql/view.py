"""GraphQL over HTTP: POST and GET answered by our view (GraphQLView), subscriptions streamed by
Strawberry's (app.graphql.live); GraphQLEndpoint picks one per request."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from strawberry.exceptions import MissingQueryError
from strawberry.schema.exceptions import CannotGetOperationTypeError, InvalidOperationTypeError
from strawberry.types.graphql import OperationType

from app.governor import Client, rate_limit_headers
from app.limits import MAX_BODY_BYTES, MAX_QUERY_STRING_BYTES, MAX_VARIABLES_BYTES
from app.persisted import PersistedQueryError, requested_hash

if TYPE_CHECKING:
    from app.state import App

DEADLINE_MARGIN = 0.5  # past its deadline, a request still waiting for anything is answered 504


class GraphQLView:
    """/graphql over HTTP for queries, as the GraphQL-over-HTTP specification says (see app/http.py)."""

    def __init__(self, state: App) -> None:
        self.state = state

    async def graphql(self, request: Request) -> Response:
        """GraphQL over HTTP, as the GraphQL-over-HTTP specification says (see app/http.py)."""
        from app import http
        from app.governor import Unauthenticated

        try:
            client = await self.state.identify(request.scope)
        except Unauthenticated as exc:
            return http.transport_error(401, str(exc), "UNAUTHENTICATED", headers={"WWW-Authenticate": "Bearer"})
        from app.pipeline import over_budget

        refused = over_budget(self.state.governor, client)  # nothing left of its hour: 429 before the body is read
        if refused is not None:
            from graphql import ExecutionResult

            media = http.response_media_type(request.headers.get("accept")) or http.GRAPHQL_RESPONSE
            response = self.state.respond(ExecutionResult(data=None, errors=[refused]), media)
        else:
            response = await self._bounded(request, client)
        for name, value in rate_limit_headers(self.state.governor.status(client)):
            response.headers[name.decode()] = value.decode()
        return response

    async def _bounded(self, request: Request, client: Client) -> Response:
        """The request within its deadline, whatever it waits for (the body, a pool connection for the
        cache validator or the paper sizes, admission, execution, its session's close): the operation's own
        deadline answers TIMEOUT at PITH_REQUEST_TIMEOUT; this bound, DEADLINE_MARGIN later, catches any wait
        outside it, so no answer comes later than the deadline plus the margin."""
        from app import http
        from app.errors import deadline_error

        seconds = self.state.settings.request_timeout
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
                    self.state.settings.graphiql or "query" not in request.query_params):
                if not self.state.settings.graphiql:
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
            query = self.state.persisted.resolve(params.query, sha)
            if query is None:  # an APQ naming its document by hash alone
                query = await self.state.persisted.lookup(self.state.pool, sha)  # type: ignore[arg-type]
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
            version = await self.state.data_version()
            etag = http.get_validator(version, params, query, media)
            cache = http.cache_headers(etag, http.pins_every_instant(query, params.operation_name, params.variables))
            from app.web.routes import not_modified

            if not_modified(request, etag):
                return Response(status_code=304, headers=cache)

        context = self.state.context(client)
        try:
            result = await self.state.schema.execute(query, variable_values=params.variables, context_value=context,
                                               operation_name=params.operation_name,
                                               allowed_operation_types={OperationType.QUERY})
        except (CannotGetOperationTypeError, InvalidOperationTypeError, MissingQueryError) as exc:
            return http.operation_error(exc, replace(params, query=query), media, get_like)
        response = self.state.respond(result, media)
        if response.status_code >= 400 and response.status_code != 400:
            return response
        if sha is not None and params.query is not None and not http.is_request_error(result):
            await self.state.persisted.register(self.state.pool, sha, query, client)  # validated: it ran
        if not result.errors and not get_like and params.extensions is None and context.session is not None \
                and context.session.statements == 1:
            # Answered by one compiled statement: later requests of this document take app/fastpath.py.
            self.state.prepared.learn(self.state.schema._schema, query, params.operation_name)
        if cache is not None and not result.errors:
            response.headers.update(cache)
        return response


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
