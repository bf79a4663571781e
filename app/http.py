"""GraphQL over HTTP, as the GraphQL-over-HTTP specification (graphql.github.io/graphql-over-http) says.

- Media types: `Accept: application/graphql-response+json` gets that type and the specification's
  status codes (a request error is 400 with no `data` key; a result, field errors included, is 200).
  `application/json` (or no Accept, or `*/*`) gets 200 for every well-formed GraphQL request, request
  errors included. An Accept that allows neither is 406.
- GET (and HEAD) run queries only: any other operation type is 405 with `Allow: POST`.
- Every error body is GraphQL-shaped: `{"errors": [{"message", "extensions": {"code", "requestId"}}]}`.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any, Final, Mapping, cast

import orjson
from graphql import FragmentDefinitionNode, OperationDefinitionNode
from starlette.responses import JSONResponse, Response

from app.compression import GZIP_MINIMUM
from app.limits import RETRY_AFTER_SECONDS
from app.logs import request_id
from app.timeparse import BadInput, answered_as_of, is_pinned, now_as_of

GRAPHQL_RESPONSE = "application/graphql-response+json"
JSON = "application/json"


def accept_entries(accept: str | None) -> list[tuple[str, dict[str, str], float]]:
    """The media ranges of an Accept header: (type, parameters, q), in the order given."""
    entries = []
    for part in (accept or "").split(","):
        fields = part.split(";")
        media = fields[0].strip().lower()
        if not media:
            continue
        params: dict[str, str] = {}
        q = 1.0
        for param in fields[1:]:
            name, _, value = param.partition("=")
            name, value = name.strip().lower(), value.strip().strip('"')
            if name == "q":
                try:
                    q = min(max(float(value), 0.0), 1.0)
                except ValueError:
                    q = 0.0
            else:
                params[name] = value
        entries.append((media, params, q))
    return entries


def response_media_type(accept: str | None) -> str | None:
    """The media type to answer in, from the client's Accept; None when it allows neither of ours."""
    if accept is None or not accept.strip():
        return JSON
    best: str | None = None
    best_q = 0.0
    for media, _, q in accept_entries(accept):
        if media == GRAPHQL_RESPONSE:
            candidate = GRAPHQL_RESPONSE
        elif media in (JSON, "application/*", "*/*"):
            candidate = JSON
        else:
            continue
        # Equal preference: the GraphQL media type wins, as the specification recommends.
        if q > best_q or (q == best_q and q > 0 and candidate == GRAPHQL_RESPONSE):
            best, best_q = candidate, q
    return best


def accepts_stream(accept: str | None) -> bool:
    """Whether the Accept allows a stream of results: SSE, or multipart with the subscription spec."""
    return any(q > 0 and (media == "text/event-stream" or (media == "multipart/mixed" and "subscriptionspec" in params))
               for media, params, q in accept_entries(accept))


def stream_choice(accept: str | None) -> bool | None:
    """Whether a GraphQL request over HTTP is answered as a stream: False when its Accept allows no
    stream, True when it allows a stream and no JSON type, None when it allows both (then the
    operation decides: a subscription streams, a query or mutation answers JSON)."""
    if not accepts_stream(accept):
        return False
    return None if response_media_type(accept) is not None else True


def is_subscription(query: object, operation_name: object) -> bool:
    """Whether the operation a request selects is a subscription (False when none can be chosen)."""
    if not isinstance(query, str) or not (operation_name is None or isinstance(operation_name, str)):
        return False
    document = _document(query)
    if document is None:
        return False
    operations = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)
                  and (operation_name is None or (d.name is not None and d.name.value == operation_name))]
    return len(operations) == 1 and operations[0].operation.value == "subscription"


class GraphQLJSONResponse(JSONResponse):
    """orjson for GraphQL results (the same compact UTF-8 JSON, several times faster than json.dumps).

    A string orjson refuses (a lone surrogate a client sent in an argument, echoed in a message)
    falls back to ASCII-escaped JSON, which represents it.
    """

    def render(self, content: Any) -> bytes:
        try:
            return orjson.dumps(content)
        except TypeError:
            return json.dumps(content, ensure_ascii=True, separators=(",", ":"), default=str).encode()


def graphql_response(payload: dict[str, Any], status: int, media: str | None,
                     headers: Mapping[str, str] | None = None) -> Response:
    return GraphQLJSONResponse(payload, status_code=status, headers=headers,
                               media_type=_CONTENT_TYPES.get(media or JSON) or f"{media}; charset=utf-8")


_CONTENT_TYPES = {m: f"{m}; charset=utf-8" for m in ("application/json", "application/graphql-response+json")}


def error_entry(message: str, code: str, **extensions: Any) -> dict[str, Any]:
    return {"message": message, "extensions": {"code": code, "requestId": request_id.get(), **extensions}}


def transport_error(status: int, message: str, code: str, media: str | None = JSON,
                    headers: Mapping[str, str] | None = None) -> Response:
    """An HTTP-level refusal, in the shape every GraphQL client reads."""
    return graphql_response({"errors": [error_entry(message, code)]}, status, media, headers)


class _Overlong(float):
    """A JSON integer past Python's 4,300 digits (int() refuses it with a ValueError no JSON reader expects):
    an infinity, which no GraphQL Int or Float accepts, named by its length in the coercion's message."""

    digits = 0

    def __repr__(self) -> str:
        return f"<an integer of {self.digits} digits>"


def _int(text: str) -> int | float:
    if len(text) <= 4300:
        return int(text)
    value = _Overlong("-inf" if text.startswith("-") else "inf")
    value.digits = len(text.lstrip("-"))
    return value


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (RFC 8259 has no NaN or Infinity)")


def _float(text: str) -> float:
    value = float(text)
    if value in (math.inf, -math.inf):
        raise ValueError(f"the number {text[:40]} is out of a double's range")
    return value


def loads(data: str | bytes) -> Any:
    """A request's JSON (an HTTP body, a WebSocket message): JSONDecodeError, saying why, for anything it
    cannot read, nesting too deep included; NaN, Infinity and a number past a double's range are not JSON
    (orjson, the plans' reader, refuses them too)."""
    try:
        return json.loads(data, parse_int=_int, parse_constant=_constant, parse_float=_float)
    except ValueError as exc:
        if isinstance(exc, json.JSONDecodeError):
            raise
        text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
        raise json.JSONDecodeError(str(exc), text, 0) from None
    except RecursionError:
        text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
        raise json.JSONDecodeError("objects and arrays nest too deeply to read", text, 0) from None


class BadRequest(Exception):
    def __init__(self, message: str, status: int = 400, code: str = "BAD_REQUEST") -> None:
        self.message, self.status, self.code = message, status, code


def body_from_query_string(params: Mapping[str, str]) -> dict[str, Any]:
    body: dict[str, Any] = {"query": params.get("query"), "operationName": params.get("operationName")}
    for name in ("variables", "extensions"):
        text = params.get(name)
        if text:
            try:
                body[name] = loads(text)
            except ValueError:
                body[name] = _Invalid(name)
    return body


class _Invalid:
    def __init__(self, name: str) -> None:
        self.name = name


@dataclass(frozen=True)
class GraphQLParams:
    query: str | None  # None: an automatic persisted query names its document by hash
    variables: dict[str, Any] | None
    operation_name: str | None
    extensions: dict[str, Any] | None

    @classmethod
    def of(cls, body: Any, max_variables_bytes: int, body_bytes: int | None = None) -> "GraphQLParams":
        """The request's parameters, refused (BadRequest) as the GraphQL-over-HTTP rules say. Variables are
        measured as json.dumps writes them; given the body's length (`body_bytes`), a body too short for its
        variables to reach the limit is not measured (no byte of a body becomes more than six characters)."""
        if isinstance(body, list):
            raise BadRequest("batched operations are not supported; send one operation per request")
        if not isinstance(body, dict):
            raise BadRequest("expected a JSON object with query, variables and operationName")
        for name in ("variables", "extensions"):
            if isinstance(body.get(name), _Invalid):
                raise BadRequest(f"{name}: not valid JSON; expected a JSON object")
        query, variables = body.get("query"), body.get("variables")
        operation, extensions = body.get("operationName"), body.get("extensions")
        persisted = isinstance(extensions, dict) and "persistedQuery" in extensions
        if persisted and (query is None or query == ""):  # the hash alone (some clients send an empty text)
            query = None
        elif not isinstance(query, str) or not query.strip():
            raise BadRequest("query: a GraphQL document (string) is required")
        if variables is not None and not isinstance(variables, dict):
            raise BadRequest("variables: expected a JSON object")
        too_large = variables_too_large(variables, max_variables_bytes, body_bytes)
        if too_large is not None:
            raise BadRequest(too_large, 413, "PAYLOAD_TOO_LARGE")
        if operation is not None and not isinstance(operation, str):
            raise BadRequest("operationName: expected a string")
        if extensions is not None and not isinstance(extensions, dict):
            raise BadRequest("extensions: expected a JSON object")
        return cls(query, variables, operation or None, extensions)


def variables_too_large(variables: Any, max_variables_bytes: int, body_bytes: int | None = None) -> str | None:
    """Why an operation's variables are refused for their size (None: within it), on every transport (the
    HTTP body's, a stream's, a WebSocket message's): measured as compact UTF-8 JSON; given the length of
    what carried them (`body_bytes`), a carrier too short for them to reach the limit is not measured (no byte
    becomes more than six characters)."""
    if variables and (body_bytes is None or body_bytes * 6 > max_variables_bytes) \
            and _json_size(variables) > max_variables_bytes:
        return f"variables are larger than {max_variables_bytes} bytes"
    return None


def _json_size(value: Any) -> int:
    """Bytes of `value` as compact UTF-8 JSON, as a client sends it (orjson's, or json's for what orjson does
    not write: integers past 64 bits, nesting past its depth)."""
    try:
        return len(orjson.dumps(value))
    except (TypeError, orjson.JSONEncodeError):
        try:
            # (a lone surrogate, which a client may send escaped, counted as the three bytes it stands for)
            return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass"))
        except (ValueError, RecursionError):  # (an integer json will not write either: more than any bound)
            return 1 << 62


def operation_problem(query: str, operation_name: str | None) -> str | None:
    """Why no single operation can be chosen from the document (None when one can, or it does not parse)."""
    document = _document(query)
    if document is None:
        return None
    return document_operation_problem(document, operation_name)


NO_MUTATIONS = "this API answers queries only; it has no mutation operations"
STREAM_MEDIA = 'text/event-stream (SSE) or multipart/mixed;subscriptionSpec="1.0"'
# Where a subscription is served: what a refusal of one elsewhere says.
SUBSCRIPTIONS_STREAM = (f"a subscription streams: send it with Accept: {STREAM_MEDIA}, or over a WebSocket "
                        "(graphql-transport-ws or graphql-ws)")


def stream_operation_problem(query: Any, operation_name: Any) -> str | None:
    """What a streamed operation (SSE, multipart, WebSockets) is refused for before it runs, in the words the
    POST and GET view uses: no single operation to choose (operation_problem), or a mutation (NO_MUTATIONS)."""
    document = _document(query) if isinstance(query, str) else None
    if document is None or (operation_name is not None and not isinstance(operation_name, str)):
        return None  # (not parsed: the pipeline reports it)
    problem = document_operation_problem(document, operation_name)
    if problem is not None:
        return problem
    chosen = next(d for d in document.definitions if isinstance(d, OperationDefinitionNode)
                  and (operation_name is None or (d.name is not None and d.name.value == operation_name)))
    return NO_MUTATIONS if chosen.operation.value == "mutation" else None


def document_operation_problem(document: Any, operation_name: str | None) -> str | None:
    """Why no single operation can be chosen from a parsed document (None when one can): every transport's rule
    (the HTTP view's, before a request is run; app.pipeline's, for the streams and WebSockets)."""
    operations = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
    names = [op.name.value for op in operations if op.name is not None]
    if not operations:
        return "the document has no operation (only fragments); add an operation such as `query { ... }`"
    if operation_name is not None and operation_name not in names:
        return (f"operationName {operation_name!r} names no operation in the document; it has "
                + (", ".join(repr(n) for n in names) if names else "only an anonymous operation"))
    if operation_name is None and len(operations) > 1:
        return (f"the document has {len(operations)} operations; say which to run with operationName (one of "
                + ", ".join(repr(n) for n in names) + ")")
    return None


def operation_error(exc: Exception, query: str, operation_name: str | None, media: str | None,
                    get_like: bool) -> Response:
    """The operation to run cannot be chosen, or is not a query: a request error that says why."""
    from strawberry.schema.exceptions import InvalidOperationTypeError

    status = 400 if media == GRAPHQL_RESPONSE else 200
    if isinstance(exc, InvalidOperationTypeError):
        kind = exc.operation_type.value
        if get_like:
            return transport_error(405, NO_MUTATIONS if kind == "mutation" else
                                   f"GET answers a subscription only as a stream; {SUBSCRIPTIONS_STREAM}",
                                   "METHOD_NOT_ALLOWED", media, {"Allow": "POST"})
        message = NO_MUTATIONS if kind == "mutation" else SUBSCRIPTIONS_STREAM
        return graphql_response({"errors": [error_entry(message, "OPERATION_NOT_SUPPORTED")]}, status, media)
    message = operation_problem(query, operation_name) or "no operation could be chosen"
    return resolution_failure(message, media)


def resolution_failure(message: str, media: str | None) -> Response:
    status = 400 if media == GRAPHQL_RESPONSE else 200
    return graphql_response({"errors": [error_entry(message, "OPERATION_RESOLUTION_FAILURE")]}, status, media)


def is_request_error(result: Any) -> bool:
    """No execution happened: the document, the operation or the variables were refused."""
    return result.data is None and bool(result.errors) and all(e.path is None for e in result.errors)


def result_payload(result: Any, errors: list[dict[str, Any]], media: str | None) -> tuple[dict[str, Any], int]:
    """The body and status of a result no error's outcome decides (app.state.App.outcome)."""
    if is_request_error(result):
        payload: dict[str, Any] = {"errors": errors}
        if result.extensions:
            payload["extensions"] = result.extensions
        return payload, 400 if media == GRAPHQL_RESPONSE else 200
    payload = {"data": result.data}
    if errors:
        payload["errors"] = errors
    if result.extensions:
        payload["extensions"] = result.extensions
    return payload, 200


# --- cacheable GET --------------------------------------------------------------------------------

PINNED_MAX_AGE = 300  # a pinned answer changes only when an import adds facts from before its instant
NOW_MAX_AGE = 60  # an answer as of now changes with the next import


def cache_control(pinned: bool) -> str:
    """The one caching rule of every answer read from the data, GraphQL and REST alike: pinned to an instant
    before the server's clock, five minutes (an import may still add facts dated before it: `--observed-at`);
    as of now, a minute. Each route adds its validator (ETag); a keyed request's answer is made private on the
    way out (app.middleware.keyed_cache_rule)."""
    return _PINNED if pinned else _NOW


_PINNED = f"public, max-age={PINNED_MAX_AGE}"
_NOW = f"public, max-age={NOW_MAX_AGE}"


def _document(query: str) -> Any:
    """The parsed document, from the same cache execution uses (None when it does not parse: execution
    reports that)."""
    from app.cost import _parsed
    from app.limits import MAX_TOKENS

    try:
        return _parsed(query, MAX_TOKENS)
    except Exception:  # noqa: BLE001
        return None


CLIENT_ROOTS: Final = frozenset({"rateLimit"})  # root fields whose answer is the asking client's own


def reads_its_client(query: str, operation_name: str | None) -> bool:
    """Whether the operation to run asks for a root field whose answer is its client's own (its budget): such an
    answer has no validator and is kept by no cache, whoever asks (two clients' budgets differ; one client's
    changes with each request)."""
    from graphql import FieldNode, FragmentSpreadNode, InlineFragmentNode

    document = _document(query)
    if document is None:
        return False
    fragments = {d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)}
    pending = [d.selection_set for d in document.definitions if isinstance(d, OperationDefinitionNode)
               and (operation_name is None or (d.name is not None and d.name.value == operation_name))]
    seen: set[str] = set()
    while pending:  # the root selections, through the fragments spread at the root
        for selection in pending.pop().selections:
            if isinstance(selection, FieldNode):
                if selection.name.value in CLIENT_ROOTS:
                    return True
            elif isinstance(selection, InlineFragmentNode):
                pending.append(selection.selection_set)
            elif isinstance(selection, FragmentSpreadNode) and selection.name.value in fragments \
                    and selection.name.value not in seen:
                seen.add(selection.name.value)
                pending.append(fragments[selection.name.value].selection_set)
    return False


def pins_every_instant(query: str, operation_name: str | None, variables: dict[str, Any] | None) -> bool:
    """Whether every root field of the operation to run is pinned to an instant: an asOf (a literal, or a
    variable given a value or a default; a diff's `to`), or node/nodes with ids that each name an instant
    (app.types.node)."""
    from graphql import FieldNode, value_from_ast_untyped

    document = _document(query)
    if document is None:
        return False
    operations = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)
                  and (operation_name is None or (d.name is not None and d.name.value == operation_name))]
    if len(operations) != 1:
        return False
    roots = [s for s in operations[0].selection_set.selections]
    if not roots or not all(isinstance(s, FieldNode) for s in roots):
        return False
    # The variables as execution sees them: each one's default where the request gives none.
    values = {d.variable.name.value: value_from_ast_untyped(d.default_value)
              for d in operations[0].variable_definitions or () if d.default_value is not None}
    values.update(variables or {})
    now = now_as_of()
    for field in cast(list[FieldNode], roots):
        if field.name.value == "__typename":
            continue
        if field.name.value in ("node", "nodes"):
            if not _ids_name_instants(field, values, value_from_ast_untyped, now):
                return False
            continue
        instant = _INSTANT_ARGUMENTS.get(field.name.value, "asOf")
        value = next((a.value for a in field.arguments or () if a.name.value == instant), None)
        if value is None or value.kind == "null_value":
            return False
        try:
            given = value_from_ast_untyped(value, values)
            # An instant after the server's clock is answered as of now: it changes with the next import.
            if given is None or not is_pinned(answered_as_of(given, now), now):
                return False
        except (BadInput, TypeError, ValueError):  # not an instant: execution reports it
            return False
    return True


# The argument that fixes a root field's answer when it is not asOf: a diff's later instant (its earlier one is before).
_INSTANT_ARGUMENTS = {"recordDiff": "to"}


def _ids_name_instants(field: Any, variables: dict[str, Any] | None, value_of: Any, now: Any) -> bool:
    from app.types.node import parse_global_id

    given = next((a.value for a in field.arguments or () if a.name.value in ("id", "ids")), None)
    if given is None:
        return False
    try:
        ids = value_of(given, variables or {})
    except Exception:  # noqa: BLE001 - not a value: execution reports it
        return False
    ids = ids if isinstance(ids, list) else [ids]
    try:
        instants = [parse_global_id(i).pinned for i in ids]
        return bool(ids) and all(at is not None and is_pinned(answered_as_of(at, now), now) for at in instants)
    except BadInput:
        return False


def get_validator(version: int, query: str, variables: dict[str, Any] | None, operation_name: str | None,
                  media: str | None) -> str:
    key = json.dumps([version, query, variables, operation_name, media], sort_keys=True,
                     ensure_ascii=True, default=str)
    return 'W/"' + hashlib.sha256(key.encode()).hexdigest()[:40] + '"'


# What an answer with a validator varies on, its 200 and its 304 alike: the media type asked for, and the encoding
# (Starlette's GZip, app.compression, adds Accept-Encoding to a 200 big enough to compress, whoever asks, and to
# nothing smaller, nor to a 304, which has no body: said here, every such answer varies on it, a miss at worst;
# vary_once leaves it to GZip where GZip says it).
CACHED_VARY: Final = "Accept, Accept-Encoding"


def cache_headers(etag: str, pinned: bool) -> dict[str, str]:
    return {"ETag": etag, "Vary": CACHED_VARY, "Cache-Control": cache_control(pinned)}


def vary_once(response: Response) -> Response:
    """An answer with a validator, its Vary as CACHED_VARY says it, Accept-Encoding left to Starlette's GZip where it
    adds it itself (a body of GZIP_MINIMUM bytes or more): else caches read it twice."""
    if len(response.body) >= GZIP_MINIMUM and response.headers.get("vary") == CACHED_VARY:
        response.headers["vary"] = "Accept"
    return response


def not_modified(headers: dict[str, str]) -> Response:
    """A 304 with the validator's headers (Vary included: CACHED_VARY, as its 200's)."""
    return Response(status_code=304, headers=headers)


GRAPHQL_PATH = "/graphql"
ERROR_CODES = {400: "BAD_REQUEST", 401: "UNAUTHENTICATED", 404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED",
               413: "PAYLOAD_TOO_LARGE",
               429: "RATE_LIMITED", 500: "INTERNAL_SERVER_ERROR", 503: "SERVICE_UNAVAILABLE", 504: "TIMEOUT"}


def error_response(status: int, message: str, path: str | None = None, **extra: Any) -> Response:
    """A JSON error; on the GraphQL endpoint in the shape GraphQL clients read."""
    headers = {"Retry-After": RETRY_AFTER_SECONDS} if status == 503 else None
    if path == GRAPHQL_PATH:
        return transport_error(status, message, ERROR_CODES.get(status, "BAD_REQUEST"), headers=headers)
    return JSONResponse({"error": {"status": status, "message": message, **extra}}, status_code=status,
                        headers=headers)
