"""Cross-origin requests: Starlette's CORSMiddleware with the headers GraphQL clients send allowed, and
refusals that say why, in the shape every GraphQL client reads.

Without PITH_CORS_ORIGINS no other origin may call the API: a preflight is refused with a message
that names the setting, and ordinary requests pass without CORS headers (no Vary cost). A request
with OPTIONS that is not a preflight is answered 204 with the methods allowed.
"""

from __future__ import annotations

from typing import Collection

from starlette.datastructures import Headers
from starlette.middleware.cors import SAFELISTED_HEADERS, CORSMiddleware
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

# What Apollo Client, urql, Relay, graphql-sse, tracing and error-reporting libraries send across origins, and
# a client's own request that no cache answer it (Cache-Control: no-cache, and Pragma from older code).
DEFAULT_HEADERS = ("authorization", "content-type", "if-none-match", "x-request-id", "cache-control", "pragma",
                   "apollographql-client-name", "apollographql-client-version", "x-apollo-operation-name",
                   "apollo-require-preflight", "traceparent", "tracestate", "baggage", "sentry-trace")
# What a page may read of an answer: its validator, id and budget, and what the exports say of themselves (the
# instant answered, the cost, a list cut at its bound, the file's name).
EXPOSED_HEADERS = ("etag", "x-request-id", "retry-after", "ratelimit", "ratelimit-policy", "x-as-of",
                   "x-cost-requested", "x-cost-points", "x-truncated", "content-disposition")
METHODS = ("GET", "POST")


class Cors(CORSMiddleware):
    def __init__(self, app: ASGIApp, origins: Collection[str] = (), headers: Collection[str] = ()) -> None:
        from app.settings import normalize_origin

        origins = tuple(dict.fromkeys(normalize_origin(origin) for origin in origins))
        # A page of an origin named may send its credentials (Apollo's and urql's `credentials: "include"`): the
        # API reads none but a key, and an origin the operator named is trusted with the answers anyway. Any
        # origin ("*") may not: a deployment behind a proxy that signs readers in by cookie would answer every
        # site with its reader's view.
        super().__init__(app, allow_origins=list(origins), allow_methods=list(METHODS),
                         allow_headers=[*DEFAULT_HEADERS, *(h.lower() for h in headers)],
                         allow_credentials=bool(origins) and "*" not in origins,
                         expose_headers=list(EXPOSED_HEADERS), max_age=600)
        self.origins = tuple(origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "OPTIONS":
            headers = Headers(scope=scope)
            if "origin" not in headers or "access-control-request-method" not in headers:
                await Response(status_code=204, headers={"Allow": ", ".join((*METHODS, "HEAD", "OPTIONS"))})(
                    scope, receive, send)
                return
        elif not self.origins:
            await self.app(scope, receive, send)
            return
        await super().__call__(scope, receive, send)

    def is_allowed_origin(self, origin: str) -> bool:
        """As Starlette decides, for the origin in the form the configured ones were normalized to (a
        client other than a browser may send `HTTP://Host:80`)."""
        from app.settings import normalize_origin

        try:
            origin = normalize_origin(origin) if origin != "null" else origin
        except ValueError:
            return False
        return super().is_allowed_origin(origin)

    def preflight_response(self, request_headers: Headers) -> Response:
        from app.http import transport_error

        answer = super().preflight_response(request_headers)
        if answer.status_code < 400:  # Starlette's own answer, as it is (200, "OK")
            return answer
        reasons = []
        origin = request_headers["origin"]
        if not self.is_allowed_origin(origin):
            reasons.append(f"origin {origin!r} may not call this API; " + (
                "allowed origins: " + ", ".join(self.origins) if self.origins else
                "no other origin may (set PITH_CORS_ORIGINS to the origins of your apps)"))
        method = request_headers["access-control-request-method"]
        if method not in METHODS:
            reasons.append(f"method {method} is not allowed; allowed: {', '.join(METHODS)}")
        asked = [h.strip().lower() for h in request_headers.get("access-control-request-headers", "").split(",")]
        refused = [h for h in asked if h and h not in self.allow_headers]
        if "" in asked and request_headers.get("access-control-request-headers") is not None:
            reasons.append("Access-Control-Request-Headers names an empty header; name each header, or leave the "
                           "field out when there is none")
        if refused:
            allowed = sorted(set(self.allow_headers) - {h.lower() for h in SAFELISTED_HEADERS})
            reasons.append(f"request headers {', '.join(refused)} are not allowed; allowed: {', '.join(allowed)} "
                           "(add more with PITH_CORS_HEADERS)")
        if request_headers.get("access-control-request-private-network") is not None:
            reasons.append("private network access is not allowed")
        keep = {k: v for k, v in answer.headers.items() if k.lower().startswith(("access-control-", "vary"))}
        return transport_error(403, "CORS preflight refused: " + "; ".join(reasons), "CORS_REFUSED", headers=keep)


_configured: Cors | None = None


def refusal_headers(origin: bytes | None) -> list[tuple[bytes, bytes]]:
    """The CORS fields of an answer written before the middleware runs (uvicorn's protocol: a 431 for a head
    past its bound, a 503 at the connection limit), by the same rule as every other answer (Cors, from the
    settings, made once per worker): a page of an allowed origin can read why it was refused."""
    global _configured
    if origin is None:
        return []
    if _configured is None:
        from app.settings import Settings

        try:
            settings = Settings.from_env()
            _configured = Cors(_nothing, origins=settings.cors_origins, headers=settings.cors_headers)
        except Exception:  # noqa: BLE001 - the server refuses a bad setting at start; here, allow none
            _configured = Cors(_nothing)
    text = origin.decode("latin-1")
    if not _configured.origins or not _configured.is_allowed_origin(text):
        return []
    fields = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in _configured.simple_headers.items()]
    if not _configured.allow_all_origins:
        fields += [(b"access-control-allow-origin", origin), (b"vary", b"Origin")]
    return fields


async def _nothing(scope: Scope, receive: Receive, send: Send) -> None:
    return None
