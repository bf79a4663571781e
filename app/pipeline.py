"""The stages every GraphQL operation shares, whatever carries it (HTTP, WebSocket, SSE, multipart, a
plan): admission and settlement against the client's budget, the deadline, the one error
masking policy, the cost report, and the HTTP status an outcome gets. RequestPipeline (below) calls
them from Strawberry's hooks; the transports call them for what happens around an operation.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from typing import Any, Protocol, cast

import asyncpg
from graphql import GraphQLError, OperationType
from strawberry.extensions import MaskErrors, SchemaExtension
from strawberry.types import ExecutionResult

from app.db.pool import DeadlinePassed, StatementTimeout
from app.cost import (READER_STANDING, READING, DataScale, PaperSize, Price, ReaderBusy, _parsed, _plan,
                      UnreadSizes, actual_units, checked, operation_price, paper_sizes, priced_papers, read_in_thread,
                      read_off_loop, refusal, validated_off_loop)
from app.errors import OperationError, busy_error, deadline_error
from app.governor import RateLimited, Ticket, TooFast
from app.http import document_operation_problem
from app.limits import MAX_COST, MAX_NODES, RETRY_AFTER_SECONDS
from app import metrics
from app.logs import note, request_id
from app.shape import TextRefused, refused_unread
from loaders.base import TURN

class _Typed(Protocol):
    """What the masking policy reads of the schema (app.schema.Schema): its types' names, made once."""

    type_names: frozenset[str]


def rate_limited_error(exc: RateLimited) -> OperationError:
    s = exc.status
    return OperationError(str(exc), "RATE_LIMITED", cost=exc.cost, limit=s.limit, remaining=s.remaining,
                          resetAt=s.reset_text, retryAfter=s.retry_after)


async def admit(context: Any, price: Price) -> tuple[Ticket | None, GraphQLError | None]:
    """Admit an operation of this price for the context's client: (ticket, None), or (None, the refusal)."""
    governor = getattr(context, "governor", None)
    client = getattr(context, "client", None)
    if governor is None or client is None:
        return None, None  # in-process execution (tests, the command line): priced, not governed
    remaining = context.remaining()
    try:
        ticket = await governor.admit(client, price.points, price.units, getattr(context, "session", None), remaining)
    except RateLimited as exc:
        return None, rate_limited_error(exc)
    except TimeoutError:
        return None, busy_error(context.deadline_seconds)
    context.ticket = ticket
    return ticket, None


# One work unit is about one object completed in a response, 20 to 40 us on the reference machine
# (app.limits.MAX_COST): measured parse and validation time is charged at this rate.
WORK_UNIT_SECONDS = 30e-6


def over_budget(governor: Any, client: Any, scope: Any = None, *, pace: bool = True) -> GraphQLError | None:
    """RATE_LIMITED for a client with nothing left of its hour, or over its pace (Governor.pace: requests a
    second), before its request is read any further (from memory: no statement); None otherwise. Every
    transport asks this first, once per request or streamed operation (app.graphql.view, its plans,
    app.schema.Schema.stream); `scope` is the HTTP request's, so that a request asked twice counts once;
    `pace` False for what was paced already (a streamed operation: by its request, or its WebSocket message,
    Governor.paced_receive)."""
    if governor is None or client is None:
        return None
    status = governor.status(client)
    if status is not None and status.remaining <= 0:
        return rate_limited_error(RateLimited(status, 1, getattr(client, "key_name", None) is not None))
    fast = governor.pace(client, scope) if pace else None
    if fast is not None:
        return too_fast_error(fast)
    return None


def too_fast_error(exc: TooFast) -> OperationError:
    return OperationError(str(exc), "RATE_LIMITED", requestsPerSecond=exc.rate, burst=exc.burst,
                          retryAfter=exc.retry_after)


async def charge_refused(context: Any, units: int) -> None:
    """Charge a refused operation's parse and validation to its client: the points its units make, at
    least one (a client cannot send invalid documents for free)."""
    await charge_refusal(getattr(context, "governor", None), getattr(context, "client", None), units)


async def charge_refusal(governor: Any, client: Any, units: int = 0) -> None:
    """Charge a refused request to its client: the points its units of work make, at least one. Every refusal
    comes here: a document that fails (above), and a request refused before any operation ran (a body too large
    or not JSON, a media type or Accept not served, an unknown persisted query: app.state.App.charge_refusal)."""
    if governor is None or client is None:
        return
    try:
        await governor.charge(client, Price(0, units).points)
    except Exception:  # noqa: BLE001 - over budget, or the database away: the refusal stands either way
        return


def settle(governor: Any, ticket: Ticket, actual_units: int) -> None:
    """Release the ticket's slots and give back what was charged beyond the work done."""
    if governor is not None:
        governor.settle(ticket, Price(0, actual_units).points)


def cost_extension(price: Price | None, actual: int | None, session: Any) -> dict[str, Any]:
    """extensions.cost: the list nodes (GitHub's limit), the work units priced and done, the statements sent."""
    return {"nodes": price.nodes if price is not None else None, "limit": MAX_NODES,
            "statements": getattr(session, "statements", None),
            "requested": price.units if price is not None else None, "actual": actual, "maxRequested": MAX_COST,
            "points": price.points if price is not None else None}


# --- errors: one masking policy for every transport -------------------------------------------------

# Failures that mean the database is unreachable right now, not that the request is wrong.
UNAVAILABLE = (
    OSError,
    asyncpg.CannotConnectNowError,
    asyncpg.ConnectionDoesNotExistError,
    asyncpg.InterfaceError,
    asyncpg.AdminShutdownError,
    asyncpg.TooManyConnectionsError,
    asyncpg.PostgresConnectionError,
    TimeoutError,
)


# A statement cancelled at PITH_STATEMENT_TIMEOUT_MS: by PostgreSQL (SET LOCAL statement_timeout in a
# transaction) or by asyncpg's timer (a statement run on its own).
STATEMENT_TIMEOUTS = (asyncpg.QueryCanceledError, StatementTimeout)


def request_error_code(original: BaseException | None) -> str | None:
    """The code of a request Strawberry refuses before execution (an operation of a type the transport
    does not carry, none to choose, no query): the client's error, told as it is; None for others."""
    from strawberry.exceptions import MissingQueryError
    from strawberry.schema.exceptions import CannotGetOperationTypeError, InvalidOperationTypeError

    if isinstance(original, InvalidOperationTypeError):
        return "OPERATION_NOT_SUPPORTED"
    if isinstance(original, CannotGetOperationTypeError):
        return "OPERATION_RESOLUTION_FAILURE"
    if isinstance(original, MissingQueryError):
        return "BAD_REQUEST"
    return None


def bad_literal(error: GraphQLError) -> bool:
    """A literal of the document that its type's parser could not even read (a 4,301-digit Int: Python's
    int() refuses it): graphql-core reports it in validation with the parser's exception attached. The
    client's input, refused as such (BAD_USER_INPUT), never an internal error."""
    original = error.original_error
    return (error.path is None and bool(error.nodes) and isinstance(original, (ValueError, ArithmeticError))
            and not isinstance(original, GraphQLError))


SUGGESTION = re.compile(r" ?Did you mean [^?]*\?")
NAME = re.compile(r"[_A-Za-z][_0-9A-Za-z]*")
QUOTED = re.compile(r"'([^']*)'")
# Names every GraphQL schema has (the operation roots, the built-in scalars): nothing to hide.
PUBLIC_NAMES = frozenset({"Query", "Mutation", "Subscription", "String", "Int", "Float", "Boolean", "ID"})


def said_by_client(query: str | None, variables: Any = None) -> frozenset[str]:
    """Every name the client's request spells (its document and its variables)."""
    import json

    text = query or ""
    if variables:
        with contextlib.suppress(TypeError, ValueError):
            text += json.dumps(variables, default=str)
    return frozenset(NAME.findall(text))


def unsaid_hidden(message: str, said: frozenset[str]) -> str:
    """The message with every quoted name the client did not spell itself replaced by '…': in production a
    request error tells what was wrong with what was sent, not the schema's names (a type, an argument,
    a field's type) that introspection is off to keep (clairvoyance rebuilds a schema from them)."""
    def hide(found: re.Match) -> str:
        names = NAME.findall(found.group(1))
        return found.group(0) if all(n in said or n in PUBLIC_NAMES for n in names) else "'…'"

    return QUOTED.sub(hide, message)


def masked(error: GraphQLError, statement_timeout_ms: int, production: bool = False,
           said: frozenset[str] | None = None) -> GraphQLError:
    """The error as clients see it: the service's own errors as they are (with a code and the request id),
    anything unexpected replaced by a message naming the request id (the original is logged once, by
    the schema's process_errors). In production no message suggests a name ("Did you mean"): with
    introspection off, suggestions would rebuild the schema (validation already hides its own; this
    catches every other source, variable coercion included)."""
    original = error.original_error
    rid = request_id.get()
    if bad_literal(error):
        node = error.nodes[0]  # type: ignore[index]
        size = len(getattr(node, "value", "") or "")
        message = (error.message.split(", but encountered")[0] + f"; the literal ({size} characters) is not a "
                   "value of this type")
        return GraphQLError(message, nodes=error.nodes, source=error.source, positions=error.positions,
                            extensions={"code": "BAD_USER_INPUT", "requestId": rid})
    if production and ("Did you mean" in error.message or (said is not None and error.path is None)):
        message = SUGGESTION.sub("", error.message)
        if said is not None and error.path is None:  # a request error (syntax, validation, variables)
            message = unsaid_hidden(message, said)
        if message != error.message:
            error = GraphQLError(message, nodes=error.nodes, source=error.source, positions=error.positions,
                                 path=error.path, original_error=error.original_error, extensions=error.extensions)
    if original is not None and not isinstance(original, GraphQLError):
        code = request_error_code(original)
        if code is not None:
            message = error.message
            if code == "OPERATION_NOT_SUPPORTED":
                message += (" over this transport: a query is answered as JSON over HTTP (Accept: application/json) "
                            "or over graphql-transport-ws; a subscription streams over HTTP (SSE, multipart) or a "
                            "WebSocket (graphql-transport-ws, graphql-ws)")
            return GraphQLError(message, nodes=error.nodes, source=error.source, positions=error.positions,
                                path=error.path, extensions={"code": code, "requestId": rid})
        if isinstance(original, DeadlinePassed):  # the wait for a connection ended by the deadline
            return GraphQLError(f"{original}; the operation was stopped at its deadline: retry, or ask for less",
                                nodes=error.nodes, source=error.source, positions=error.positions,
                                path=error.path, extensions={"code": "TIMEOUT", "requestId": rid})
        if isinstance(original, STATEMENT_TIMEOUTS):
            message = (f"the query ran longer than the {statement_timeout_ms} ms statement timeout; ask for less "
                       "(smaller first, perPaper or depth) or retry")
            code = "SERVICE_UNAVAILABLE"
        elif isinstance(original, UNAVAILABLE):
            message, code = "the database is unavailable; retry shortly", "SERVICE_UNAVAILABLE"
        elif isinstance(original, asyncpg.PostgresError):
            # Whatever else the database answered (a pooler that lost a prepared statement, a table gone
            # under a running server): the service cannot answer, a 503 to alert on, never a 200.
            message, code = f"the database could not answer (request id {rid}); retry shortly", "SERVICE_UNAVAILABLE"
        else:
            message, code = f"internal error (request id {rid})", "INTERNAL_SERVER_ERROR"
        return GraphQLError(message, nodes=error.nodes, source=error.source, positions=error.positions,
                            path=error.path, extensions={"code": code, "requestId": rid})
    extensions = dict(error.extensions or {})
    if "code" not in extensions:
        if error.path is None:
            from graphql import GraphQLSyntaxError

            extensions["code"] = ("GRAPHQL_PARSE_FAILED" if isinstance(error, GraphQLSyntaxError)
                                  else "BAD_USER_INPUT" if INPUT_VALUE.match(error.message)
                                  else "GRAPHQL_VALIDATION_FAILED")
        else:
            extensions["code"] = "BAD_REQUEST"
    extensions["requestId"] = rid
    if extensions == error.extensions:
        return error
    return GraphQLError(error.message, nodes=error.nodes, source=error.source, positions=error.positions,
                        path=error.path, original_error=error.original_error, extensions=extensions)


# A value the client gave that its type cannot read: a variable's value (coercion), or a literal (validation's
# ValuesOfCorrectTypeRule: a scalar that cannot represent it, an enum, an input object's fields). BAD_USER_INPUT;
# every other validation error (an unknown field, a variable never used or not defined) is
# GRAPHQL_VALIDATION_FAILED.
INPUT_VALUE = re.compile(r"Variable '\$[^']*' (?!is never used|is not defined|of type .* used in position|cannot be "
                         r"non-input type)|Expected value of type |Field '[^']*' of required type "
                         r"|Field '[^']*' is not defined by type |[^\n]* cannot represent ")


class MaskingPolicy(MaskErrors):
    """Strawberry's MaskErrors with our policy: applied to every result of every transport (streams too)."""

    def __init__(self, statement_timeout_ms: int = 10_000, production: bool = False) -> None:
        super().__init__()
        self.statement_timeout_ms = statement_timeout_ms
        self.production = production

    def _process_errors(self, errors: list[GraphQLError]) -> list[GraphQLError]:
        said = None
        if self.production:
            ctx = self.execution_context
            # A type's name is never among what the client said, whoever spelled it: otherwise a wordlist anywhere
            # in the request (a comment, aliases, unknown fields) came back as the types of the fields it probed
            # ("Cannot query field 'x' on type 'Paper'"), confirmed in one request.
            said = said_by_client(ctx.query, ctx.variables) - cast(_Typed, ctx.schema).type_names
        return [masked(e, self.statement_timeout_ms, self.production, said) for e in errors]


def error_codes(errors: list[dict[str, Any]]) -> set[str]:
    return {e.get("extensions", {}).get("code") for e in errors}


# HTTP status by what stopped an operation, whatever the media type (the outcome is the server's, not a
# GraphQL result): the first that applies.
STATUS_BY_CODE = (("UNAUTHENTICATED", 401), ("RATE_LIMITED", 429), ("SERVICE_UNAVAILABLE", 503), ("TIMEOUT", 504))


def outcome_status(errors: list[dict[str, Any]]) -> int | None:
    codes = error_codes(errors)
    return next((status for code, status in STATUS_BY_CODE if code in codes), None)


def retry_after(errors: list[dict[str, Any]]) -> str | None:
    for e in errors:
        extensions = e.get("extensions", {})
        if extensions.get("code") == "RATE_LIMITED":
            return str(extensions.get("retryAfter", RETRY_AFTER_SECONDS))
        if extensions.get("code") == "SERVICE_UNAVAILABLE":
            return RETRY_AFTER_SECONDS
    return None


def report(operation: str | None, codes: list[str | None], statements: int, units: int | None,
           points: int | None, seconds: float | None = None) -> None:
    """An operation's end, as every transport and the plans tell it: metrics and the access line."""
    outcome = metrics.record_operation(operation, codes, statements, units, points, seconds)
    note(operation=operation or "anonymous", outcome=outcome, cost=units, points=points, statements=statements)


SESSION_CLOSE_GRACE = 0.5  # seconds an answer waits for its session's close


class OperationSession(SchemaExtension):
    """Each operation's database session, whatever carries it (HTTP, SSE, multipart, both WebSocket
    protocols): opened as the operation starts, closed (rolled back, its connection back in the pool) when
    it ends, however it ends (answered, refused, failed, cancelled, its stream closed by a client that
    left). An operation of a connection (a WebSocket's, an HTTP stream's) runs in a context of its own
    (Context.for_operation): operations of one socket share who asks, nothing else. A context that brings
    a session of its own (in-process execution, tests) keeps it, and its owner closes it.
    """

    async def on_operation(self):  # type: ignore[override]
        ctx = self.execution_context
        context = ctx.context
        app = getattr(context, "app", None)
        opened = None
        if app is not None and getattr(context, "session", None) is None:
            opened = app.session()
            if context.per_connection:
                ctx.context = context.for_operation(opened)
            else:
                context.session = opened
        try:
            yield
        finally:
            release = getattr(ctx.context, "release", None)
            if release is not None:
                release()
            if opened is not None:
                # Closing waits for a cancelled statement to end in PostgreSQL and rolls back; past
                # SESSION_CLOSE_GRACE the answer goes without waiting (the close goes on in a task of its
                # own, and the connection returns to the pool when it is done).
                # (asyncio.timeout, not wait_for: Python 3.11's wait_for loses a cancellation that arrives as
                # the close ends, and the operation then went on as if its client were still there.)
                closing = asyncio.ensure_future(opened.close())
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(SESSION_CLOSE_GRACE):
                        await asyncio.shield(closing)


def stopped_codes() -> list[str | None]:
    """What an operation stopped unanswered ended in, for its access line and counters (every path that runs one):
    TIMEOUT when its request's deadline has passed (the transport's bound answers 504), else CANCELLED (its client
    left, or the server stopped it)."""
    return ["TIMEOUT"] if _stopped_at_its_deadline() else [metrics.CANCELLED]


def _subscription(ctx: Any) -> bool:
    """Whether an operation is a subscription (its document read, its operation found; Strawberry's OperationType,
    whose value graphql-core's shares)."""
    try:
        return ctx.graphql_document is not None and ctx.operation_type.value == OperationType.SUBSCRIPTION.value
    except Exception:  # noqa: BLE001 - no such operation in its document: not one
        return False


def _stopped_at_its_deadline() -> bool:
    """Whether this task is being cancelled past its request's deadline (the transport's bound answering
    TIMEOUT), rather than for its client leaving."""
    from app.db.pool import request_deadline

    task, deadline = asyncio.current_task(), request_deadline.get()
    return task is not None and task.cancelling() > 0 and deadline is not None \
        and asyncio.get_running_loop().time() >= deadline


class RequestPipeline(SchemaExtension):
    """Every stage an operation goes through, for every transport (HTTP, WebSocket, SSE, multipart):

    parse (cached, token limit), validate (cached; depth and aliases as rules built once), price (list
    nodes and work units from the coerced arguments), refuse what is over a limit (QUERY_TOO_COSTLY),
    admit (the client's budget, and a heavy-work slot; app.governor), execute, then account: the work
    actually done (rows read and objects returned) settles the charge and is reported in
    `extensions.cost`. The deadline is the execution context's (app.execution: every transport, each
    subscription event); admission waits within what is left of it.
    """

    def __init__(self, *, execution_context: Any = None, rules: tuple = (), max_tokens: int = 5_000,
                 scale: DataScale | None = None) -> None:
        self.rules = rules
        self.max_tokens = max_tokens
        self.scale = scale or DataScale()
        self.price: Price | None = None
        self.actual: int | None = None
        self.front_seconds = 0.0  # parse and validation, measured
        self.charged = False  # a refusal's parse and validation charged
        self.charged_points: int | None = None  # ... at so many points (extensions.cost.points says it)
        self.refused: TextRefused | None = None  # refused from its text, unparsed

    async def on_operation(self):  # type: ignore[override]
        ctx = self.execution_context
        ctx.parse_options["max_tokens"] = self.max_tokens
        ctx.validation_rules = ctx.validation_rules + self.rules
        started = time.monotonic()
        cancelled = False
        try:
            yield
        except asyncio.CancelledError:
            cancelled = True
            raise
        finally:  # however it ends: a stream whose first result is an error is closed at that result
            context = ctx.context
            result = ctx.result
            errors = list(getattr(result, "errors", None) or ()) or list(ctx.pre_execution_errors or ())
            ticket = getattr(context, "ticket", None)
            codes = [masked(e, 0).extensions.get("code") for e in errors]
            if result is None and not codes and (_stopped_at_its_deadline() or cancelled and not _subscription(ctx)):
                codes = stopped_codes()  # (a subscription its client ends ends as it should: ok)
            if ticket is None and "RATE_LIMITED" not in codes:
                await self.charge_refused()  # refused otherwise (an operation type this transport does not carry)
            report(ctx.operation_name, codes, getattr(getattr(context, "session", None), "statements", 0),
                   self.actual, ticket.points if ticket is not None else None, time.monotonic() - started)

    async def charge_refused(self) -> None:
        """Refused before admission (a syntax error, a validation error, a shape or price refusal): the
        reading and checking it cost is charged all the same, at least a point, before the refusal is
        sent (so the client's next request sees it)."""
        if not self.charged:
            self.charged = True
            units = self.front_units()
            self.charged_points = Price(0, units).points
            await charge_refused(self.execution_context.context, units)

    def front_units(self) -> int:
        """Work units of this operation's parse and validation (measured; 0 when both came from the caches):
        its document's reading wherever this request did it (READING), taken once."""
        self.front_seconds += READING.get()
        READING.set(0.0)
        return int(self.front_seconds / WORK_UNIT_SECONDS)

    async def on_parse(self):  # type: ignore[override]
        ctx = self.execution_context
        if ctx.graphql_document is None and ctx.query:
            governor, client = getattr(ctx.context, "governor", None), getattr(ctx.context, "client", None)
            if governor is not None and client is not None:  # (a WebSocket's operation: its client's standing)
                READER_STANDING.set(governor.standing(client))
            try:
                await read_off_loop(ctx.query, self.max_tokens)  # a long text: in the reader thread
            except ReaderBusy as exc:  # refused unread, as a text refused from its text alone is
                self.refused = refused_unread(exc, ctx.query)
                ctx.graphql_document = self.refused.document()
        self._parse()  # its time counted in READING, with any other reading of this request's document
        started = time.perf_counter()
        try:
            yield  # Strawberry's own parse, of a document that does not parse
        finally:
            self.front_seconds += time.perf_counter() - started
        if self.execution_context.graphql_document is None:
            self.pace_reading()  # (no validation follows)
        if self.execution_context.graphql_document is None or self.refused is not None:
            await self.charge_refused()

    def _parse(self) -> None:
        ctx = self.execution_context
        if ctx.graphql_document is None and ctx.query:
            # A short text that does not parse is left to Strawberry's own parse (same options, stopping at
            # the same error), which reports it inside its error handling, as a result every transport sends
            # (an error raised from this hook escaped a stream: SSE dropped the connection, WebSockets sent a
            # bare `complete`). A long one is not parsed again on the event loop: its parser's error (read in
            # the reader thread) is its refusal, as a text refused unparsed is.
            try:
                ctx.graphql_document = _parsed(ctx.query, self.max_tokens)
            except TextRefused as exc:  # refused unparsed: its operations stand in for it, validation answers it
                self.refused = exc
                ctx.graphql_document = exc.document()
            except GraphQLError as exc:
                if read_in_thread(ctx.query):
                    # Its stand-in an operation this transport takes, by the name asked for: Strawberry checks
                    # the type before validation reports the parser's error (which comes first, as its own did).
                    allowed = {getattr(a, "value", a) for a in ctx.allowed_operations}
                    kind = next((k for k in OperationType if k.value in allowed), OperationType.QUERY)
                    self.refused = refused_unread(exc, ctx.query,
                                                  [(kind, getattr(ctx, "_provided_operation_name", None))])
                    ctx.graphql_document = self.refused.document()

    async def on_validate(self):  # type: ignore[override]
        ctx = self.execution_context
        if self.refused is not None:
            ctx.pre_execution_errors = [self.refused]
        elif ctx.pre_execution_errors is None and ctx.graphql_document is not None:
            rules = (ctx.schema._schema, ctx.graphql_document, tuple(ctx.validation_rules),
                     ctx.schema.config.disable_field_suggestions)
            try:
                found = await validated_off_loop(ctx.query, *rules)  # a long text: in the reader thread
            except ReaderBusy as exc:
                found = [exc], 0.0
            if found is not None:
                ctx.pre_execution_errors, seconds = found
                self.front_seconds += seconds
            else:
                started = time.perf_counter()
                try:
                    ctx.pre_execution_errors = checked(*rules)
                finally:
                    self.front_seconds += time.perf_counter() - started
            if not ctx.pre_execution_errors:
                # The name the client gave (Strawberry's `operation_name` falls back to the first operation's).
                given = getattr(ctx, "_provided_operation_name", ctx.operation_name)
                problem = document_operation_problem(ctx.graphql_document, given)
                if problem is not None:  # (Strawberry would run the first operation)
                    ctx.pre_execution_errors = [GraphQLError(problem,
                                                             extensions={"code": "OPERATION_RESOLUTION_FAILURE"})]
        yield
        self.pace_reading()
        if ctx.pre_execution_errors:
            await self.charge_refused()

    def pace_reading(self) -> None:
        """The document's reading so far (this request's, READING included) taken against the client's pace
        (Governor.pace_reading), once an operation."""
        context = self.execution_context.context
        governor, client = getattr(context, "governor", None), getattr(context, "client", None)
        if governor is not None and client is not None:
            governor.pace_reading(client, self.front_seconds + READING.get())

    async def on_execute(self):  # type: ignore[override]
        ctx = self.execution_context
        error: GraphQLError | None = None
        document = ctx.graphql_document
        context = ctx.context
        ticket = None
        turn = None
        if document is not None:
            compiled = getattr(ctx.schema.execution_context_class, "compiled", False)
            try:
                sizes = await self.sizes(document, ctx)
                self.price = operation_price(ctx.schema._schema, document, ctx.operation_name, ctx.variables,
                                             self.scale, compiled, sizes)
            except GraphQLError as exc:
                error = exc
            else:
                error = refusal(self.price)
            if error is None:
                ticket, error = await admit(context, self.price)
            if ticket is not None and not ticket.light:  # its turns wait for the process's light work
                turn = TURN.set(ticket.light_first.turn)
                try:
                    await ticket.light_first.turn()
                except BaseException:  # cancelled while it waited (its client left): its slots back, as settled
                    TURN.reset(turn)  # below (a ticket held here kept a costly slot for the process's life)
                    context.governor.settle(ticket, None)
                    raise
            if error is None:
                session = getattr(context, "session", None)
                if session is not None and session.statements == 0:
                    single, _ = _plan(ctx.schema._schema, document, ctx.operation_name, compiled)
                    session.single_statement = single
        subscription = _subscription(ctx)
        if error is not None:
            ctx.result = ExecutionResult(data=None, errors=[error])
            if ticket is None and error.extensions.get("code") != "RATE_LIMITED":
                await self.charge_refused()
            if subscription:  # Strawberry subscribes whatever result this sets: refused by raising, answered as
                raise error  # an error raised here (one result with it, then the stream ends), on every transport
        elif subscription:  # each event is priced as its selection and admitted as a query of it (app.types.live)
            context.event_price = self.price
        try:
            yield
        finally:
            if turn is not None:
                TURN.reset(turn)
            if error is None:
                session = getattr(context, "session", None)
                self.actual = actual_units(getattr(ctx.result, "data", None), getattr(session, "rows", 0),
                                           getattr(session, "statements", 0))
            if ticket is not None and subscription:  # its start costs an event's price (recordChanged reads the
                context.governor.settle(ticket, None)  # record then), whatever its source stream does later
            elif ticket is not None:  # settled to the work done, its parse and validation included
                settle(getattr(context, "governor", None), ticket, (self.actual or 0) + self.front_units())

    async def sizes(self, document: Any, ctx: Any) -> Any:
        """The sizes of the papers the operation names, when data-sized work of theirs is asked (a
        timeline, a diff, citationsByYear, a neighbourhood): read by the operation's own session, the
        first statement of its transaction, so the price is that of the data it answers from."""
        session = getattr(ctx.context, "session", None)
        if session is None or not hasattr(session, "fetch"):
            return None
        papers = priced_papers(ctx.schema._schema, document, ctx.operation_name, ctx.variables)
        if not papers:
            return None
        # What no paper's size can bring under the limit is refused without reading any (what it says fits is
        # then a bound: UnreadSizes).
        unread = UnreadSizes({arxiv_id: PaperSize() for arxiv_id in papers})
        least = operation_price(ctx.schema._schema, document, ctx.operation_name, ctx.variables, self.scale,
                                sizes=unread)
        if refusal(least) is not None:
            return unread
        # A subscription's are read in a session of their own, closed at once: its operation's session lasts as long
        # as the subscription, and would hold a connection all that while (its events read in sessions of theirs).
        app = getattr(ctx.context, "app", None)
        own = app.session() if _subscription(ctx) and app is not None else None
        try:
            async with asyncio.timeout(ctx.context.remaining() if hasattr(ctx.context, "remaining") else None):
                return await paper_sizes(own or session, papers)  # within the deadline (a pool wait included)
        except TimeoutError:
            raise deadline_error(getattr(ctx.context, "deadline_seconds", None) or 0) from None
        except Exception as exc:  # the database away: reported as every failed statement is (app.pipeline.masked)
            raise GraphQLError("the database could not price the operation", original_error=exc) from exc
        finally:
            if own is not None:
                await own.close()

    def get_results(self) -> dict[str, Any]:
        context = self.execution_context.context
        cost = cost_extension(self.price, self.actual, getattr(context, "session", None))
        if self.charged_points is not None:  # refused: what it was charged, not what it would have cost
            cost["points"] = self.charged_points
        return {"cost": cost}
