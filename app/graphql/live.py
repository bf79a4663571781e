"""Strawberry's own view for subscriptions: graphql-transport-ws and graphql-ws over WebSocket, SSE and
multipart over HTTP, its context and its refusals (origin, key, connections per client)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.types import Receive, Scope, Send
from strawberry.asgi import GraphQL as StrawberryGraphQL

from app.context import Context
from app.limits import MAX_SUBSCRIPTIONS_PER_CONNECTION
from app.live import StoppableSocket
from app.state import PrimaryReads

if TYPE_CHECKING:
    from app.state import App


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


class LiveGraphQL(StrawberryGraphQL[Context, None]):
    """Strawberry's own transports for subscriptions: graphql-transport-ws and graphql-ws over WebSocket,
    SSE and multipart over HTTP; keep-alive pings; the WebSocket origin rule follows PITH_CORS_ORIGINS
    (same origin only when none is configured)."""

    def __init__(self, state: App) -> None:
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
        return self.state.context(client, hub=self.state.hub, per_connection=True, app=PrimaryReads(self.state),
                                  connection=request.scope.get("pith.connection"))

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
        from app.db.pool import governor_pool

        token = governor_pool.set(self.state.live_pool)  # its key checks and claims never wait behind requests
        try:
            await self._serve(scope, receive, send)
        finally:
            governor_pool.reset(token)

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
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
        socket = scope["pith.connection"] = StoppableSocket(self.state.hub, send)
        try:
            await socket.run(super().__call__(scope, receive, socket.send))
        finally:
            left = self.connections.get(client.id, 1) - 1
            if left > 0:
                self.connections[client.id] = left
            else:
                self.connections.pop(client.id, None)


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

