"""The ASGI layer every request passes first (inside tracing): its id, log line, counters and deadline; its
bounded body, read up front; and the cancel when the client goes away. One layer, with one wrapper of `send`:
the two layers these were cost a lookup a tenth of its CPU in their frames and wrappers alone."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app import metrics
from app.db.pool import request_deadline
from app.http import error_response
from app.limits import MAX_BODY_BYTES
from app.logs import chosen_request_id, request_facts, request_id

log = logging.getLogger("pith.http")
access = logging.getLogger("pith.access")

# What uvicorn's Server.shutdown cancels the requests still running past timeout_graceful_shutdown with.
SERVER_STOP = "Task cancelled, timeout graceful shutdown exceeded"


class RequestLayer:
    """Every request: an id (a sane X-Request-ID kept) in its logs and on its response; its deadline; its access line
    and counters; a response to a request that carried Authorization made private (keyed_cache_rule). Every HTTP
    request: its body read up front, refused past `max_body` (413, charged to its client); then the handler
    cancelled if the client goes away (_Watch), which cancels the query it awaits (asyncpg sends PostgreSQL a
    cancel request), so a client that gives up does not keep a backend busy.

    This layer's own answers (the 413, the 503 of a request stopped at shutdown, the last-resort 500) go out
    through `answers`, the CORS layer the stack has inside this one: a page reads them as it reads any other.
    """

    def __init__(self, app: ASGIApp, traced: bool = False, deadline_seconds: float | None = None,
                 max_body: int = MAX_BODY_BYTES,
                 on_refused: Callable[[Scope], Awaitable[list[tuple[bytes, bytes]]]] | None = None,
                 answers: Callable[[ASGIApp], ASGIApp] | None = None) -> None:
        self.app = app
        self.traced = traced  # inside OpenTelemetry's server span: its ids go on the access line
        self.deadline_seconds = deadline_seconds  # PITH_REQUEST_TIMEOUT, from the request's arrival
        self.max_body = max_body
        self.on_refused = on_refused  # a body over the limit is charged to its client (app.state.App.charge_refusal)
        self.answers = answers or (lambda response: response)
        self.starts = _Starts()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind != "http" and kind != "websocket":
            await self.app(scope, receive, send)
            return
        given, keyed, declared = "", False, b""
        for name, value in scope["headers"]:  # one pass for the headers this layer reads
            if name == b"x-request-id":
                given = value.decode("latin-1")
            elif name == b"authorization":
                keyed = True
            elif name == b"content-length":
                declared = value
        rid = chosen_request_id(given)
        token = request_id.set(rid)
        if self.traced:
            from app.tracing import current_span_ids

            span_ids = current_span_ids(rid)
        else:
            span_ids = {}
        if kind == "websocket":  # every operation of the connection carries its id
            try:
                await self.app(scope, receive, send)
            finally:
                request_id.reset(token)
            return

        started = time.monotonic()
        status = 0
        sent = 0
        complete = False  # the whole response went out
        watch: _Watch | None = None
        if self.deadline_seconds:
            request_deadline.set(asyncio.get_running_loop().time() + self.deadline_seconds)
        facts: dict[str, Any] = dict(span_ids)
        facts_token = request_facts.set(facts)
        scope["pith.request_id"] = rid  # (the server's protocol answers a body too slow to arrive with it)
        rid_header = (b"x-request-id", rid.encode())

        async def send_logged(message: Message) -> None:
            nonlocal status, sent, complete
            if message["type"] == "http.response.body":
                sent += len(message.get("body", b""))
                await send(message)
                if not message.get("more_body", False):
                    complete = True
                    if watch is not None:
                        watch.finished = True
                return
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = [*message.get("headers", ()), rid_header]
                message["headers"] = keyed_cache_rule(headers) if keyed else headers
            await send(message)

        inner = receive  # what the handler reads: the body read here, then the client's leaving
        try:
            if scope["method"] == "OPTIONS":
                # Answered by the CORS layer (a preflight, or the methods allowed) from its head alone: no body is
                # read, refused, charged or waited for.
                await self.app(scope, receive, send_logged)
                return
            body = await self._body(scope, receive, send_logged, declared)
            if body is None:  # refused (413) or the client gone before its body was in
                return
            watch = _Watch(receive, asyncio.current_task(), self.starts)  # type: ignore[arg-type]
            delivered = False

            async def replay() -> Message:
                nonlocal delivered
                if not delivered:
                    delivered = True
                    return {"type": "http.request", "body": body, "more_body": False}
                await watch.gone().wait()
                return {"type": "http.disconnect"}

            inner = replay
            try:
                await self.app(scope, replay, send_logged)
            finally:
                watch.stop()
        except asyncio.CancelledError as exc:
            if watch is not None and watch.left and watch.task.uncancel() == 0:  # by the watch alone: the client left
                log.info("client went away: cancelled %s %s", scope.get("method"), scope.get("path"))
                return
            # This request is being cancelled (the server is shutting down past its grace), its body still arriving
            # or its handler running (whose cleanup, rollback and release, ran as the cancellation unwound it).
            # Unanswered, it is told so in JSON, as every other answer (uvicorn would send a plain-text 500).
            if status == 0:
                with contextlib.suppress(Exception):
                    await self.answers(error_response(
                        503, "the server is shutting down and stopped this request before it was answered; "
                             "retry (another server answers)", scope.get("path")))(scope, inner, send_logged)
            if exc.args == (SERVER_STOP,) and status:  # uvicorn's own stop, answered: over, as far as it goes
                if not complete:  # a stream begun (a subscription still starting): ended where it stands, not cut
                    with contextlib.suppress(Exception):
                        await send_logged({"type": "http.response.body", "body": b"", "more_body": False})
                log.warning("stopped at shutdown, past the grace: %s %s answered %d", scope["method"], scope["path"],
                            status)  # (uvicorn logs a task that ends cancelled as an error in the application)
                asyncio.current_task().uncancel()  # type: ignore[union-attr]
                return
            raise
        except Exception as exc:  # noqa: BLE001 - the one place an unexpected error is logged and answered
            log.error("unhandled error on %s %s", scope["method"], scope["path"], exc_info=exc)
            if status == 0:  # nothing sent yet: answer, with the request id, in the shape clients read
                from app.http import transport_error

                response = transport_error(500, f"internal error (request id {rid})", "INTERNAL_SERVER_ERROR")
                await self.answers(response)(scope, receive, send_logged)
        finally:
            elapsed = time.monotonic() - started
            if status == 0 and "pith.answered" in scope:  # by the server's protocol (a body too slow: app.protocol)
                status, sent = scope["pith.answered"]
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

    async def _body(self, scope: Scope, receive: Receive, send: Send, declared: bytes) -> bytes | None:
        """The whole body, or None: the client left before it was in, or it is larger than the limit (answered
        413 here, charged to its client, with what its budget holds after it). A body declared larger is
        refused before any of it is read: its client, which may wait for `100 Continue` (sent by the server at
        the first read), never sends it: that connection is closed after the 413 (`Connection: close`, as RFC
        9110 asks of a server that answers before reading a request's whole body), its next request never taken
        for the body. A body on its way is read on and dropped by the server (a close would reset the connection
        under it, the 413 lost), within the time a body has (app.protocol)."""
        unread = declared.isdigit() and int(declared) > self.max_body
        if not unread:
            chunks: list[bytes] = []
            size = 0
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return None
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > self.max_body:
                    break
                chunks.append(chunk)
                if not message.get("more_body", False):
                    return chunks[0] if len(chunks) == 1 else b"".join(chunks)
        budget = await self.on_refused(scope) if self.on_refused is not None else []
        response = error_response(413, f"request body is larger than {self.max_body} bytes", scope.get("path"))
        response.raw_headers += budget
        if unread and any(k == b"expect" and v.lower() == b"100-continue" for k, v in scope["headers"]):
            response.raw_headers.append((b"connection", b"close"))
        await self.answers(response)(scope, receive, send)
        return None


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


_ROUTES: dict[tuple[Any, str, str, str], str] = {}  # (app, type, method, path) -> template, as last matched


def route_of(scope: Scope) -> str:
    """The route template a request matched (a bounded label): the first route matching path and method, else the
    first matching the path alone (a preflight, a 405), else `other`. Matching a path against every route is
    regular expressions per route: each path's answer is kept (a bounded table)."""
    app = scope.get("app")
    key = (app, scope["type"], scope.get("method", ""), scope["path"])
    found = _ROUTES.get(key)
    if found is None:
        from starlette.routing import Match

        found = "other"
        for route in getattr(app, "routes", ()):
            matched, _ = route.matches(scope)
            if matched is Match.FULL:
                found = getattr(route, "path", "other")
                break
            if matched is Match.PARTIAL and found == "other":
                found = getattr(route, "path", "other")
        if len(_ROUTES) >= 4096:
            _ROUTES.clear()
        _ROUTES[key] = found
    return found


WATCH_AFTER = 0.05  # seconds a request runs before the watch for its client's leaving starts (at most twice that)


class _Watch:
    """The watch for a client's going away (RequestLayer): one task reading the connection's next message,
    started WATCH_AFTER seconds into the request (_Starts) or when the handler first waits for the client's
    leaving; a disconnect before the response is finished cancels the request's task."""

    __slots__ = ("task", "_gone", "left", "finished", "stopped", "reader", "_receive")

    def __init__(self, receive: Receive, task: asyncio.Task[Any], starts: _Starts) -> None:
        self.task = task
        self._gone: asyncio.Event | None = None  # made when the handler first waits for the client's leaving
        self.left = False  # the watch cancelled the task
        self.finished = False  # the whole response went out
        self.stopped = False  # the request is over: never started
        self.reader: asyncio.Future[Message] | None = None
        self._receive = receive
        starts.add(self, task.get_loop())

    def start(self) -> None:
        """Read the connection's next message (once)."""
        if self.reader is None and not self.stopped:
            self.reader = asyncio.ensure_future(self._receive())
            self.reader.add_done_callback(self._read)

    def _read(self, reader: asyncio.Future[Message]) -> None:
        if reader.cancelled() or reader.exception() is not None or reader.result()["type"] != "http.disconnect":
            return
        self.gone().set()
        if not self.finished:  # once the answer is out, the handler's last steps (settling, release) run on
            self.left = True
            self.task.cancel()

    def gone(self) -> asyncio.Event:
        """Set once the client has gone away (the watch started, if it had not)."""
        if self._gone is None:
            self._gone = asyncio.Event()
        self.start()
        return self._gone

    def stop(self) -> None:
        self.stopped = True
        if self.reader is not None and not self.reader.done():
            self.reader.cancel()


class _Starts:
    """When the watches of a layer's requests start: one timer for every watch made within a WATCH_AFTER rather
    than a timer made and cancelled per request (most answers are out long before: the timers were a fortieth of
    a lookup's CPU). Each tick starts the watches made during the period before the last, so a watch starts
    between WATCH_AFTER and twice that into its request; with none waiting, no timer runs."""

    __slots__ = ("loop", "older", "newer", "timer")

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.older: list[_Watch] = []  # made in the period before the last tick: started at the next
        self.newer: list[_Watch] = []  # made since the last tick
        self.timer: asyncio.TimerHandle | None = None

    def add(self, watch: _Watch, loop: asyncio.AbstractEventLoop) -> None:
        if loop is not self.loop:  # (an application served by another loop than before: its timer died with it)
            self.loop, self.older, self.newer, self.timer = loop, [], [], None
        self.newer.append(watch)
        if self.timer is None:
            self.timer = loop.call_later(WATCH_AFTER, self._tick)

    def _tick(self) -> None:
        due, self.older, self.newer = self.older, self.newer, []
        self.timer = self.loop.call_later(WATCH_AFTER, self._tick) if self.older and self.loop else None
        for watch in due:
            watch.start()
