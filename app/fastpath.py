"""Prepared operations: a compiled query the full pipeline has already answered, answered again without it.

The first time a document runs, it goes the whole way: Starlette's routing, the GraphQL-over-HTTP
handler, Strawberry (parse, validation with every limit, the node budget) and the execution context,
which answers a `paper` lookup with its pages as one statement (app/compiled.py). When that succeeds,
the document is *prepared*: its text and operation name are remembered with the compiled statement.

A later POST of the same text and operation name, as clients send a query they use (Apollo, Relay,
urql and scripts all send the same document with new variables), is answered here, before the rest
of the stack: the body is read and parsed, the variables are coerced by graphql-core against the
operation's definitions, the node budget is computed as the pipeline computes it, the arguments are
checked as the compiled path checks them, the statement runs, and the response is built by the same
function the full handler uses (same bytes, same headers, same gzip); a successful answer under gzip's
minimum size is sent as the two messages that response would send, without building it (tests
compare the two paths' bytes and headers). Whatever this path is not sure
of (another media type, persisted-query extensions, an Accept that allows no JSON, variables that do not coerce,
an argument the schema refuses, a query over budget) it hands on, with the body it read, to the full
stack, which answers as it always does, errors included. Validation results do not depend on
variables, so a document validated once stays valid.

What this path leaves out: the watch for a client that goes away (a compiled operation is one short
statement, bounded by the statement timeout; its connection is released when it ends) and the
request's session object (one statement needs no transaction).
"""

from __future__ import annotations

import time

import json
from dataclasses import dataclass
from typing import Any

import orjson
from graphql import GraphQLError, OperationDefinitionNode, located_error
from graphql import is_leaf_type, is_non_null_type
from graphql.execution.get_variable_signature import get_variable_signature
from graphql.execution.values import VariableValues, VariableValueSource, get_variable_values
from graphql.pyutils import Undefined
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from strawberry.types import ExecutionResult

from app.compiled import Compiled, answer, arguments, compiled_for
from app import metrics
from app.db.pool import StatementTimeout
from app.cost import Price, _parsed, actual_units, document_parts, operation_price, refusal
from app.governor import RateLimited, Unauthenticated, rate_limit_headers
from app.errors import deadline_error
from app.pipeline import cost_extension, masked, over_budget, report, settle
from app.compression import GZIP_MINIMUM, GZip
from app.http import response_media_type
from app.limits import MAX_TOKENS
from app.timeparse import answered_as_of, is_pinned, now_as_of

_ALLOWED_KEYS = frozenset({"query", "variables", "operationName"})
_MAX_PREPARED = 1024
ACQUIRE_TIMEOUT = 5.0  # as a request's session waits for a connection


@dataclass(frozen=True)
class Prepared:
    document: Any  # kept alive: the caches below are keyed by its identity
    operation: OperationDefinitionNode
    compiled: Compiled
    variables: tuple[tuple[str, Any, Any, bool], ...] | None  # _variable_plan's, None: graphql-core coerces

    def coerced(self, schema: Any, given: dict[str, Any]) -> Any:
        """The variables coerced as graphql-core's get_variable_values coerces them (its VariableValues), or
        a list of errors. Leaf variables without defaults (the ids, instants and counts clients send) are
        coerced here with the leaf types' own coercion, each step as graphql-core takes it; any other
        value, or one that does not coerce, goes to graphql-core itself (which says why)."""
        plan = self.variables
        if plan is not None:
            sources: dict[str, VariableValueSource] = {}
            coerced: dict[str, Any] = {}
            for name, signature, leaf, non_null in plan:
                value = given.get(name, Undefined)
                if value is Undefined:
                    if non_null:
                        break
                    sources[name] = VariableValueSource(signature)
                    continue  # a nullable variable not given is omitted
                sources[name] = VariableValueSource(signature, value)
                if value is None:
                    if non_null:
                        break
                    coerced[name] = None
                    continue
                if type(value) not in _LEAF_VALUES:
                    break
                try:
                    result = leaf.coerce_input_value(value)
                except Exception:  # noqa: BLE001 - graphql-core reports it
                    break
                if result is Undefined:
                    break
                coerced[name] = result
            else:
                return VariableValues(sources, coerced)
        return get_variable_values(schema, self.operation.variable_definitions or (), given, max_errors=1)


_LEAF_VALUES = frozenset({str, int, float, bool})


def _variable_plan(schema: Any, operation: OperationDefinitionNode) -> tuple[tuple[str, Any, Any, bool], ...] | None:
    """Each variable's name, signature, leaf type and nullness, when every variable is a leaf (a scalar or
    an enum, non-null or not) without a default; None otherwise."""
    plan = []
    for definition in operation.variable_definitions or ():
        signature = get_variable_signature(schema, definition)
        if isinstance(signature, GraphQLError) or definition.default_value is not None:
            return None
        kind: Any = signature.type
        non_null = is_non_null_type(kind)
        leaf = kind.of_type if non_null else kind
        if not is_leaf_type(leaf):
            return None
        plan.append((signature.name, signature, leaf, non_null))
    return tuple(plan)


class PreparedOperations:
    """Documents the full pipeline answered with one compiled statement, by (text, operation name)."""

    def __init__(self) -> None:
        self.table: dict[tuple[str, str | None], Prepared] = {}
        self.answered = 0  # requests this path answered (tests and /readyz read it)

    def get(self, query: str, operation_name: str | None) -> Prepared | None:
        return self.table.get((query, operation_name))

    def learn(self, schema: Any, query: str, operation_name: str | None) -> None:
        """Called after the full pipeline answered this document without errors."""
        if (query, operation_name) in self.table:
            return
        document = _parsed(query, MAX_TOKENS)
        operations, fragments = document_parts(document, operation_name)
        if len(operations) != 1:
            return
        compiled = compiled_for(operations[0], fragments)
        if compiled is None:
            return
        if len(self.table) >= _MAX_PREPARED:
            self.table.clear()
        self.table[(query, operation_name)] = Prepared(document, operations[0], compiled,
                                                       _variable_plan(schema, operations[0]))


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """The request's messages already read, then the rest as they come."""
    pending = list(messages)

    async def replayed() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replayed


class PreparedFastPath:
    """ASGI middleware: POST /graphql of a prepared document is answered here; anything else passes on."""

    def __init__(self, app: ASGIApp, state: Any, path: str = "/graphql", max_body: int = 100_000,
                 max_variables: int = 20_000) -> None:
        self.app = app
        self.state = state
        self.path = path
        self.max_body = max_body
        self.max_variables = max_variables
        self._media: dict[bytes | None, str | None] = {}
        # The gzip of the full stack (app.compression); built once (its set-up is a tenth of a small answer).
        self._gzip = GZip(_send_response)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != self.path
                or not self.state.prepared.table):
            await self.app(scope, receive, send)
            return
        media = self._media_type(scope)
        if media is None:
            await self.app(scope, receive, send)
            return
        messages: list[Message] = []
        size = 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break
            size += len(message.get("body", b""))
            if size > self.max_body or not message.get("more_body", False):
                break
        handled = False
        if messages[-1]["type"] == "http.request" and size <= self.max_body:
            body = messages[0].get("body", b"") if len(messages) == 1 else b"".join(m.get("body", b"")
                                                                                    for m in messages)
            handled = await self._answer(body, media, scope, receive, send)
        if not handled:
            await self.app(scope, _replay(messages, receive), send)

    def _media_type(self, scope: Scope) -> str | None:
        """The response media type when this path may answer (JSON body, JSON accepted), else None."""
        content_type = accept = None
        for name, value in scope["headers"]:
            if name == b"content-type":
                if content_type is not None:
                    return None  # twice: for the full stack to judge
                content_type = value
            elif name == b"accept":
                if accept is not None:
                    return None
                accept = value
        if content_type is None or content_type.split(b";")[0].strip().lower() != b"application/json":
            return None
        if accept not in self._media:
            if len(self._media) > 256:
                self._media.clear()
            text = accept.decode("latin-1") if accept is not None else None
            # Prepared documents are queries: JSON whenever the Accept allows it (a stream only when not).
            self._media[accept] = response_media_type(text)
        return self._media[accept]

    def _plan(self, body: bytes) -> tuple[Compiled, list[Any], list[bool], Price, str | None] | None:
        """The prepared statement and its arguments for this body, or None when the full stack must answer."""
        try:
            request = orjson.loads(body)
        except orjson.JSONDecodeError:
            return None
        if type(request) is not dict or not request.keys() <= _ALLOWED_KEYS:
            return None
        query, variables, operation_name = request.get("query"), request.get("variables"), request.get("operationName")
        if type(query) is not str or (operation_name is not None and type(operation_name) is not str):
            return None
        if variables is not None and type(variables) is not dict:
            return None
        # The full stack measures variables as json.dumps writes them; no byte of a body becomes more
        # than six characters there, so a short body needs no measuring.
        if variables and len(body) * 6 > self.max_variables and len(json.dumps(variables)) > self.max_variables:
            return None
        prepared = self.state.prepared.get(query, operation_name or None)
        if prepared is None:
            return None
        schema = self.state.schema._schema
        coerced = prepared.coerced(schema, variables or {})
        if isinstance(coerced, list):
            return None
        try:  # priced as the pipeline prices it (the same function, the same cache)
            price = operation_price(schema, prepared.document, operation_name or None, variables, self.state.scale)
        except GraphQLError:
            return None
        if refusal(price) is not None:
            return None
        # The root field asks for its instant once: "now" is read only when no asOf is given.
        now = now_as_of()

        def instant(as_of: Any) -> tuple[Any, bool]:  # the pipeline's rule (app.context.Context.instant)
            at = answered_as_of(as_of, now)
            return at, is_pinned(at, now)

        given = arguments(prepared.compiled, schema, coerced, instant)
        if given is None:
            return None
        name = prepared.operation.name.value if prepared.operation.name is not None else None
        return prepared.compiled, given[0], given[1], price, name

    async def _answer(self, body: bytes, media: str, scope: Scope, receive: Receive, send: Send) -> bool:
        """Answer the request and say True, or say False (nothing sent) for the full stack to answer it."""
        started = time.monotonic()
        try:
            planned = self._plan(body)
        except Exception:  # noqa: BLE001 - anything unforeseen: the full stack answers (and reports it)
            return False
        if planned is None:
            return False
        compiled, args, afters, price, operation = planned
        pool = self.state.read_pool()
        if pool is None:
            return False
        governor = self.state.governor
        settings = self.state.settings
        try:  # the pipeline's own admission: who asks, their budget, a heavy slot, within the deadline
            client = await self.state.identify(scope)
            if over_budget(governor, client, scope) is not None:
                return False  # the full stack refuses it, in its words (the same answer: the scope keeps it)
            ticket = await governor.admit(client, price.points, price.units, within=settings.request_timeout)
        except (Unauthenticated, RateLimited):
            return False  # the full stack refuses it, in its words
        except TimeoutError:  # no slot within the deadline: answered as the pipeline answers it (not waited again)
            result = ExecutionResult(data=None, errors=[deadline_error(settings.request_timeout or 0)])
            result.extensions = {"cost": cost_extension(price, None, _Statements(0))}
            self._answered(operation, result, 0, None, price.points, started)
            await self._send(result, media, client, scope, receive, send)
            return True
        except Exception:  # noqa: BLE001 - the database away: the full stack answers
            return False
        statements = 0
        rows: Any = None
        # One statement without a transaction: its timeout is asyncpg's timer (cancelled in PostgreSQL).
        deadline = min(settings.request_timeout or float("inf"), settings.statement_timeout_ms / 1000)
        try:
            # With a connection idle the pool hands it over at once; only a wait for one needs the bound
            # (asyncpg's acquire timeout costs a twentieth of a small answer). The deadline is the
            # statement's own timeout (a timer in asyncpg's protocol, which cancels it in PostgreSQL).
            wait = None if pool.get_idle_size() else min(ACQUIRE_TIMEOUT, deadline or ACQUIRE_TIMEOUT)
            async with pool.acquire(timeout=wait) as conn:
                statements = 1
                rows = await conn.fetch(compiled.sql, *args, timeout=deadline)
            result = ExecutionResult(data=answer(compiled, rows, afters), errors=None)
        except TimeoutError:
            if settings.request_timeout is not None and deadline >= settings.request_timeout:
                result = ExecutionResult(data=None, errors=[deadline_error(settings.request_timeout)])
            else:  # the statement's own timeout, answered as the full stack answers it
                error = located_error(StatementTimeout(f"statement ran past {settings.statement_timeout_ms} ms"),
                                      [compiled.field], [compiled.response_key])
                self.state.schema.process_errors([error])
                result = ExecutionResult(data={compiled.response_key: None}, errors=[error])
        except Exception as exc:  # noqa: BLE001 - as graphql-core treats a failing nullable root field
            error = located_error(exc, [compiled.field], [compiled.response_key])
            self.state.schema.process_errors([error])
            result = ExecutionResult(data={compiled.response_key: None}, errors=[error])
        except BaseException:  # cancelled (the client left, the server stops): its slots and light work end too
            governor.settle(ticket, None)
            raise
        actual = actual_units(result.data, len(rows) if rows is not None else 0, statements)
        settle(governor, ticket, actual)
        result.extensions = {"cost": cost_extension(price, actual, _Statements(statements))}
        self._answered(operation, result, statements, actual, ticket.points, started)
        await self._send(result, media, client, scope, receive, send)
        return True

    def _answered(self, operation: str | None, result: ExecutionResult, statements: int, actual: int | None,
                  points: int, started: float) -> None:
        """Counted and told (metrics, the access line) as the pipeline tells an operation's end."""
        self.state.prepared.answered += 1
        metrics.prepared_answer()
        report(operation, [masked(e, 0).extensions.get("code") for e in result.errors or ()], statements, actual,
               points, time.monotonic() - started)

    async def _send(self, result: ExecutionResult, media: str, client: Any, scope: Scope, receive: Receive,
                    send: Send) -> None:
        governor = self.state.governor
        if result.errors is None:
            small = _small_answer(result, media, rate_limit_headers(governor.status(client)))
            if small is not None:  # what the response below sends for it, without building one
                await send(small[0])
                await send(small[1])
                return
        response = self.state.respond(result, media)
        for name, value in rate_limit_headers(governor.status(client)):
            response.headers[name.decode()] = value.decode()
        if len(response.body) < GZIP_MINIMUM:  # gzip sends these as they are
            await response(scope, receive, send)
        else:
            scope["pith.response"] = response
            await self._gzip(scope, receive, send)


class _Statements:
    def __init__(self, statements: int) -> None:
        self.statements = statements


def _small_answer(result: ExecutionResult, media: str, extra: list[tuple[bytes, bytes]]
                  ) -> tuple[Message, Message] | None:
    """The two messages of a successful answer under gzip's minimum size, byte for byte what
    app.http.result_response and Starlette's JSONResponse send (tests compare them); None otherwise."""
    try:
        body = orjson.dumps({"data": result.data, "extensions": result.extensions})
    except TypeError:
        return None
    if len(body) >= GZIP_MINIMUM:
        return None
    headers = [(b"content-length", str(len(body)).encode()), (b"content-type", _CONTENT_TYPES[media]), *extra]
    return ({"type": "http.response.start", "status": 200, "headers": headers},
            {"type": "http.response.body", "body": body})


_CONTENT_TYPES: dict[str, bytes] = {m: f"{m}; charset=utf-8".encode() for m in ("application/json",
                                                                                "application/graphql-response+json")}


async def _send_response(scope: Scope, receive: Receive, send: Send) -> None:
    await scope["pith.response"](scope, receive, send)
