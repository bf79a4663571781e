"""The plan cache: documents the pipeline answered with one compiled statement, answered again from their plan.

The first time a document runs, the pipeline answers it (app.pipeline: the text's check, parse,
validation with every limit, the price, admission, execution): a `paper` lookup with its pages is one
SQL statement (app/compiled.py). When that succeeds over POST, the document's plan is kept: its parsed
operation, the compiled statement and how its variables coerce, by text and operation name.

Every later POST to the view (app.graphql.view) looks its document up here first, after the view's own
checks (the client, its budget, the deadline), as clients send a query they use (Apollo, Relay, urql and
scripts send the same document with new variables). With a plan, the variables are coerced as
graphql-core coerces them, the price is the pipeline's (`cost.operation_price`, the same cache), the
arguments are checked as the compiled path checks them, admission and settlement are the governor's,
the statement runs and the response is the view's (`App.respond`, Starlette's gzip). Whatever the plan
is not sure of (another media type, persisted-query extensions, an Accept that allows no JSON, variables
that do not coerce, an argument the schema refuses, a price over the limit) goes on to the pipeline, which
answers as it always does, errors included. Validation results do not depend on variables, so a document
validated once stays valid.

What a plan leaves out: the request's session object (one statement needs no transaction; it is bounded by
the statement timeout and its connection is released when it ends).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Protocol

import orjson
from graphql import GraphQLError, OperationDefinitionNode, located_error
from graphql import is_leaf_type, is_non_null_type
from graphql.execution.get_variable_signature import get_variable_signature
from graphql.execution.values import VariableValues, VariableValueSource, get_variable_values
from graphql.pyutils import Undefined
from starlette.requests import Request
from starlette.responses import Response
from strawberry.types import ExecutionResult

from app import http, metrics
from app.compiled import Compiled, answer, arguments, compiled_for
from app.cost import Price, _parsed, actual_units, document_parts, operation_price, refusal
from app.db.pool import ACQUIRE_SECONDS, DeadlinePassed, StatementTimeout, acquire_timeout
from app.errors import busy_error, deadline_error
from app.governor import Client, RateLimited, Unauthenticated
from app.limits import MAX_TOKENS, MAX_VARIABLES_BYTES
from app.pipeline import charge_refusal, cost_extension, masked, report, settle, stopped_codes
from app.timeparse import answered_as_of, is_pinned, now_as_of

_MAX_PLANS = 1024


@dataclass(frozen=True)
class Plan:
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


class Plans:
    """Documents the pipeline answered with one compiled statement, by (text, operation name)."""

    def __init__(self) -> None:
        self.table: dict[tuple[str, str | None], Plan] = {}
        self.answered = 0  # requests answered from a plan (tests and /readyz read it)

    def get(self, query: str, operation_name: str | None) -> Plan | None:
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
        if len(self.table) >= _MAX_PLANS:
            self.table.clear()
        self.table[(query, operation_name)] = Plan(document, operations[0], compiled,
                                                   _variable_plan(schema, operations[0]))


class State(Protocol):
    """What a plan reads of the application's state (app.state.App, which holds the plan cache itself)."""

    plans: Plans
    settings: Any
    governor: Any
    schema: Any
    scale: Any

    def read_pool(self) -> Any: ...

    def respond(self, result: Any, media: str | None) -> Response: ...


async def answered(state: State, request: Request, client: Client) -> Response | None:
    """The response to a POST from its document's plan, or None (nothing sent) for the pipeline to answer it.
    The view has identified the client, refused it when over budget, and bounds this by the deadline."""
    media = _media_type(request)
    if media is None:
        return None
    started = time.monotonic()
    try:
        planned = _planned(state, await request.body())
    except Exception:  # noqa: BLE001 - anything unforeseen: the pipeline answers (and reports it)
        return None
    if planned is None:
        return None
    compiled, args, afters, price, operation = planned
    pool = state.read_pool()
    if pool is None:
        return None
    governor = state.governor
    settings = state.settings
    try:  # the pipeline's own admission: the client's budget, a slot, within the deadline
        ticket = await governor.admit(client, price.points, price.units, within=settings.request_timeout)
    except (Unauthenticated, RateLimited):
        return None  # the pipeline refuses it, in its words
    except TimeoutError:  # no slot within the deadline: answered and charged as the pipeline answers and charges
        await charge_refusal(governor, client)  # it (a refusal: its least, a point; not waited for again)
        refused = Price(0, 0).points
        result = ExecutionResult(data=None, errors=[busy_error(settings.request_timeout or 0)])
        result.extensions = {"cost": {**cost_extension(price, None, _Statements(0)), "points": refused}}
        _told(state, operation, result, 0, None, refused, started)
        return state.respond(result, media)
    except Exception:  # noqa: BLE001 - the database away: the pipeline answers
        return None
    statements = 0
    rows: Any = None
    # One statement without a transaction: its timeout is asyncpg's timer (cancelled in PostgreSQL).
    deadline = min(settings.request_timeout or float("inf"), settings.statement_timeout_ms / 1000)
    try:
        # With a connection idle the pool hands it over at once; only a wait for one needs the bound, the one
        # every request's wait has (app.db.pool.acquire_timeout: never past the request's deadline); asyncpg's
        # acquire timeout costs a twentieth of a small answer.
        wait = None if pool.get_idle_size() else acquire_timeout(min(ACQUIRE_SECONDS, deadline))
        async with pool.acquire(timeout=wait) as conn:
            statements = 1
            rows = await conn.fetch(compiled.sql, *args, timeout=deadline)
        result = ExecutionResult(data=answer(compiled, rows, afters, args[0]), errors=None)
    except DeadlinePassed:  # the request's deadline passed before a connection was free
        result = ExecutionResult(data=None, errors=[deadline_error(settings.request_timeout or 0)])
    except TimeoutError:
        if settings.request_timeout is not None and deadline >= settings.request_timeout:
            result = ExecutionResult(data=None, errors=[deadline_error(settings.request_timeout)])
        else:  # the statement's own timeout, answered as the pipeline answers it
            error = located_error(StatementTimeout(f"statement ran past {settings.statement_timeout_ms} ms"),
                                  [compiled.field], [compiled.response_key])
            state.schema.process_errors([error])
            result = ExecutionResult(data={compiled.response_key: None}, errors=[error])
    except Exception as exc:  # noqa: BLE001 - as graphql-core treats a failing nullable root field
        error = located_error(exc, [compiled.field], [compiled.response_key])
        state.schema.process_errors([error])
        result = ExecutionResult(data={compiled.response_key: None}, errors=[error])
    except BaseException as exc:  # cancelled (the client left, the server stops): its slots and light work end too
        governor.settle(ticket, None)
        if isinstance(exc, asyncio.CancelledError):  # told as the pipeline tells an operation stopped unanswered
            report(operation, stopped_codes(), statements, None, ticket.points, time.monotonic() - started)
        raise
    actual = actual_units(result.data, len(rows) if rows is not None else 0, statements)
    settle(governor, ticket, actual)
    result.extensions = {"cost": cost_extension(price, actual, _Statements(statements))}
    _told(state, operation, result, statements, actual, ticket.points, started)
    return state.respond(result, media)


_MEDIA: dict[bytes | None, str | None] = {}


def _media_type(request: Request) -> str | None:
    """The response media type when a plan may answer (a JSON body, JSON accepted), else None."""
    content_type = accept = None
    for name, value in request.scope["headers"]:
        if name == b"content-type":
            if content_type is not None:
                return None  # twice: for the pipeline to judge
            content_type = value
        elif name == b"accept":
            if accept is not None:
                return None
            accept = value
        elif name == b"content-encoding":
            return None  # for the pipeline to judge
    if content_type is None or content_type.split(b";")[0].strip().lower() != b"application/json":
        return None
    if accept not in _MEDIA:
        if len(_MEDIA) > 256:
            _MEDIA.clear()
        # Planned documents are queries: JSON whenever the Accept allows it (a stream only when not).
        _MEDIA[accept] = http.response_media_type(accept.decode("latin-1") if accept is not None else None)
    return _MEDIA[accept]


def _planned(state: State, body: bytes) -> tuple[Compiled, list[Any], list[bool], Price, str | None] | None:
    """The planned statement and its arguments for this body, or None when the pipeline must answer."""
    try:
        params = http.GraphQLParams.of(orjson.loads(body), MAX_VARIABLES_BYTES, len(body))
    except (orjson.JSONDecodeError, http.BadRequest):
        return None
    if params.extensions is not None or params.query is None:
        return None
    plan = state.plans.get(params.query, params.operation_name)
    if plan is None:
        return None
    schema = state.schema._schema
    coerced = plan.coerced(schema, params.variables or {})
    if isinstance(coerced, list):
        return None
    try:  # priced as the pipeline prices it (the same function, the same cache)
        price = operation_price(schema, plan.document, params.operation_name, params.variables, state.scale)
    except GraphQLError:
        return None
    if refusal(price) is not None:
        return None
    # The root field asks for its instant once, against the clock read once a second (app.timeparse.now_as_of):
    # an asOf in the future is answered as of now.
    now = now_as_of()

    def instant(as_of: Any) -> tuple[Any, bool]:  # the pipeline's rule (app.context.Context.instant)
        at = answered_as_of(as_of, now)
        return at, is_pinned(at, now)

    given = arguments(plan.compiled, schema, coerced, instant)
    if given is None:
        return None
    name = plan.operation.name.value if plan.operation.name is not None else None
    return plan.compiled, given[0], given[1], price, name


def _told(state: State, operation: str | None, result: ExecutionResult, statements: int, actual: int | None,
          points: int, started: float) -> None:
    """Counted and told (metrics, the access line) as the pipeline tells an operation's end."""
    state.plans.answered += 1
    metrics.prepared_answer()
    report(operation, [(masked(e, 0).extensions or {}).get("code") for e in result.errors or ()], statements, actual,
           points, time.monotonic() - started)


class _Statements:
    def __init__(self, statements: int) -> None:
        self.statements = statements
