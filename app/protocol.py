"""uvicorn's httptools protocol with a bound on the request line and headers (the head), and only on them.

uvicorn bounds a request's head only for h11 (`h11_max_incomplete_event_size`); httptools reads heads
of any size: a client sending a 100 MB header kept the event loop parsing for seconds. Past
MAX_HEADER_BYTES (the request line and every header) the request is answered 431 Request Header Fields
Too Large and the connection closed, without reading the rest. The body has its own bound
(MAX_BODY_BYTES, app.middleware.RequestLayer): no byte of it counts here.

Two counts, both of the head alone:
- what the parser hands over (the URL and each header, as parsed), reset as each request begins;
- raw bytes received while the parser is inside a head, for a header line that never ends (httptools
  hands a header over only once its line is complete). A chunk counts only when the parser was in a
  head before it and still is after it, and no head completed within it: a chunk that ends a head (or
  carries body bytes) is covered by the first count.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import struct
from http import HTTPStatus
from typing import Any

from uvicorn.protocols.http import httptools_impl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from app import metrics
from app.cors import refusal_headers
from app.limits import BODY_TIMEOUT_SECONDS, HEAD_TIMEOUT_SECONDS, MAX_HEADER_BYTES, RETRY_AFTER_SECONDS
from app.logs import chosen_request_id


async def service_unavailable(scope: Any, receive: Any, send: Any) -> None:
    """uvicorn's answer past `limit_concurrency`, with Retry-After and in the GraphQL error shape (uvicorn's
    own has neither), a request id and the CORS fields a page needs to read it: the request was not read, a
    client may retry it."""
    rid = os.urandom(16).hex()
    body = (b'{"errors":[{"message":"the server is at its limit of connections; retry shortly",'
            b'"extensions":{"code":"SERVICE_UNAVAILABLE","requestId":"' + rid.encode() + b'"}}]}')
    origin = next((value for name, value in scope.get("headers") or () if name == b"origin"), None)
    await send({"type": "http.response.start", "status": 503,
                "headers": [(b"content-type", b"application/json; charset=utf-8"),
                            (b"content-length", str(len(body)).encode()),
                            (b"retry-after", RETRY_AFTER_SECONDS.encode()),
                            (b"x-request-id", rid.encode()), *refusal_headers(origin),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body, "more_body": False})


# uvicorn's httptools protocol answers with the module's `service_unavailable` past its limit: ours instead.
httptools_impl.service_unavailable = service_unavailable  # type: ignore[assignment]


MAX_CONNECTIONS_PER_PEER = 256  # without limit_concurrency; with it, a quarter of it
ROOM = 32  # connections past limit_concurrency still accepted to answer 503 (app.cli.concurrency_limit keeps 64)
_per_peer: dict[str, int] = {}  # connections open per untrusted peer address, in this worker
_trusted_networks: Any = None


def _trusted(peer: str) -> bool:
    """Whether the peer is one of PITH_TRUSTED_PROXIES (read once per worker)."""
    global _trusted_networks
    if _trusted_networks is None:
        import ipaddress

        from app.governor import parse_networks
        from app.settings import Settings

        try:
            _trusted_networks = parse_networks(Settings.from_env().trusted_proxies)
        except Exception:  # noqa: BLE001 - the server refuses a bad setting at start; here, trust none
            _trusted_networks = ()
        _trusted_networks = (_trusted_networks, ipaddress)
    networks, ipaddress_module = _trusted_networks
    try:
        ip = ipaddress_module.ip_address(peer)
    except ValueError:
        return False
    return any(ip in n for n in networks)


class HeadersTooLarge(Exception):
    pass


class BadHost(Exception):
    pass


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    limit = MAX_HEADER_BYTES

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self._head = 0  # bytes of the request line and headers parsed so far
        self._raw = 0  # bytes received while a head was incomplete
        self._in_head = True  # the next bytes belong to a request's head
        self._heads_done = 0  # heads completed on this connection
        self._too_large = False
        self._begun = False  # a request's first byte has arrived and its last has not
        self._timer: asyncio.TimerHandle | None = None  # the head's or the body's deadline
        self._due: float | None = None  # the deadline a message still being read needs, armed once its chunk is read
        self._peer: str | None = None  # the untrusted address this connection is counted against
        self._origin: bytes | None = None  # the request's Origin, for a refusal's CORS fields
        self._given_id = ""  # the request's X-Request-ID, for a refusal's request id
        self._hosts = 0  # the request's Host header lines
        self._fault: str | None = None  # why this protocol refused the request's head (None: the parser did)
        self._refused = False  # answered and closing: nothing more is read
        self._deferred: bytes | None = None  # a refusal waiting for the answers to the requests before it
        self._chunk = b""  # the last bytes received
        self._idle_since = 0.0  # when the connection opened, or its last response was sent

    # --- timeouts: a head must arrive within HEAD_TIMEOUT_SECONDS of its first byte (or of the connection
    # opening), a body within BODY_TIMEOUT_SECONDS of its head; uvicorn's timeout_keep_alive bounds the
    # idle time between requests. A slow client is closed, not kept (slowloris): a request begun and not
    # answered is told so first (408, as RFC 9110 says, with `Connection: close`), a connection that sent
    # nothing is closed without a word. The parser's callbacks only say which deadline applies; it is armed
    # after the chunk that began it is read, and only when the message is still incomplete then: a request
    # that arrives whole (most do) sets no timer at all.
    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._timer = self.loop.call_later(seconds, self._too_slow)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _too_slow(self) -> None:
        self._timer = None
        if self.transport is None or self.transport.is_closing():
            return
        cycle = self.cycle
        if self._begun and (self._in_head or cycle is None or not cycle.response_started):
            # (a body still arriving whose request was answered already, a 413 or a preflight: closed alone)
            self._refuse(408, "the request did not arrive in time: its line and headers are allowed "
                              f"{HEAD_TIMEOUT_SECONDS:g} s from their first byte, its body {BODY_TIMEOUT_SECONDS:g} s "
                              "from the end of its headers", "REQUEST_TIMEOUT")
            return
        self.logger.debug("closed a connection whose request did not arrive in time")
        self.transport.close()

    def handle_websocket_upgrade(self) -> None:
        # The WebSocket protocol takes the connection over (its pings bound it, and the per-client WebSocket
        # cap counts it): this protocol's connection_lost is never called for it, so let go of it here.
        self._disarm()
        self._release_peer()
        super().handle_websocket_upgrade()

    def _release_peer(self) -> None:
        peer = getattr(self, "_peer", None)
        if peer is not None:
            self._peer = None
            left = _per_peer.get(peer, 1) - 1
            if left > 0:
                _per_peer[peer] = left
            else:
                _per_peer.pop(peer, None)

    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if metrics._tally.in_flight is not self.server_state.tasks:
            metrics.watch_requests(self.server_state.tasks)
        self._peer = None
        peer = self.client[0] if self.client else None
        if peer is not None and not _trusted(peer):
            # One address holds at most a quarter of the worker's connections (a trusted proxy is exempt: it
            # limits its clients itself, docs/deployment.md): idle sockets of one client cannot take them all.
            held = _per_peer.get(peer, 0)
            if held >= max(8, (self.limit_concurrency or 4 * MAX_CONNECTIONS_PER_PEER) // 4):
                transport.close()
                return
            _per_peer[peer] = held + 1
            self._peer = peer
        self._idle_since = self.loop.time()
        limit = self.limit_concurrency
        if limit and len(self.connections) >= limit and not self._make_room(limit):
            return
        self._arm(HEAD_TIMEOUT_SECONDS)

    def _spare(self) -> int:
        """How readily this connection is closed for a new one past the limit (0: not at all). A connection that
        has not yet brought a request through (it sent nothing, or a head still unfinished) goes first; one
        between requests of a client it has served, only when there is no such connection."""
        if self._heads_done == 0 and self.cycle is None:
            return 2
        return 1 if self.timeout_keep_alive_task is not None else 0

    def _make_room(self, limit: int) -> bool:
        """Past `limit_concurrency` connections: one is closed for the new one, as nginx reuses its idle
        keep-alive connections when it has no more. uvicorn answers a request past the limit 503 with Retry-After,
        but idle sockets (from many addresses, each within its share) kept being accepted till the descriptors
        ran out, and from then on every new connection was reset unanswered. The one closed is, of those that
        never brought a request through, the oldest; failing those, the one between requests the longest (a
        client served a moment ago keeps its connection while any socket that never asked for anything is
        open). With none to close, a new connection is kept (its request gets that 503) while descriptors are
        spare (ROOM), and closed at once past that."""
        best, best_rank = None, (0, 0.0)
        for other in self.connections:
            if other is self or not isinstance(other, BoundedHttpToolsProtocol):
                continue
            spare = other._spare()
            if spare and (spare, -other._idle_since) > best_rank:
                best, best_rank = other, (spare, -other._idle_since)
        if best is not None:
            if best.transport is not None:
                best.transport.close()
            self.connections.discard(best)
            return True
        if len(self.connections) > limit + ROOM:
            self.transport.close()
            return False
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._release_peer()
        super().connection_lost(exc)

    def _count(self, n: int) -> None:
        self._head += n
        if self._head > self.limit:
            self._too_large = True
            raise HeadersTooLarge  # httptools stops parsing; data_received answers (send_400_response)

    def on_message_begin(self) -> None:
        self._head, self._origin, self._given_id, self._hosts, self._begun = 0, None, "", 0, True
        self._due = HEAD_TIMEOUT_SECONDS
        super().on_message_begin()

    def on_url(self, url: bytes) -> None:
        self._count(len(url) + 16)  # the method, the version and the line's end
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if len(name) == 6 and name.lower() == b"origin":
            self._origin = value
        elif len(name) == 12 and name.lower() == b"x-request-id":
            self._given_id = value.decode("latin-1")
        elif len(name) == 4 and name.lower() == b"host":
            self._hosts += 1
        self._count(len(name) + len(value) + 4)
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        if self._hosts != 1 and (self._hosts or self.parser.get_http_version() != "1.0"):
            # RFC 9112, section 3.2: a request of HTTP/1.1 without a Host, or any request with more than one, is
            # 400 (two could name two hosts to two readers of one request: a proxy and this server).
            self._fault = (f"an HTTP/1.1 request names its host in one Host header (RFC 9112, section 3.2); this one "
                           f"has {self._hosts or 'none'}; the connection is closed")
            raise BadHost  # httptools stops parsing; data_received answers (send_400_response)
        self._in_head, self._raw = False, 0
        self._heads_done += 1
        self._due = BODY_TIMEOUT_SECONDS
        super().on_headers_complete()
        # A response the application gives up on with bytes still unsent (a list whose reader stopped reading,
        # app.web.routes.ListResponse) drops them and the socket at once: uvicorn's close would wait for a
        # reader that never reads, holding the socket and its buffers.
        self.scope["pith.abort"] = self._abort  # type: ignore[typeddict-unknown-key]

    def _abort(self) -> None:
        """Drop the connection now: what the transport holds, and (a zero linger: a reset) what the kernel
        has queued for the reader, which a close would still deliver, however long that takes."""
        if self.transport is None:
            return
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.transport.abort()

    def on_response_complete(self) -> None:
        self._idle_since = self.loop.time()
        super().on_response_complete()
        if self._deferred is not None and not self.pipeline and (self.cycle is None or self.cycle.response_complete) \
                and not self.transport.is_closing():
            answer, self._deferred = self._deferred, None
            self.transport.write(answer)
            self.transport.close()

    def on_message_complete(self) -> None:
        self._in_head, self._begun = True, False  # what follows on this connection is the next request's head
        self._chunk = b""  # (not kept past its request: an idle connection holds no bytes of it)
        self._due = None
        self._disarm()  # read: answering is the handler's (its deadline), idling uvicorn's keep-alive
        super().on_message_complete()

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return  # answered and closing: read nothing more
        in_head, heads = self._in_head, self._heads_done
        self._chunk = data  # (a refusal of a head reads the header line the parser had not handed over yet)
        super().data_received(data)
        if self._due is not None:  # a message begun or its head completed in this chunk, and not yet whole
            self._arm(self._due)
            self._due = None
        if in_head and self._in_head and heads == self._heads_done and not self._refused:
            self._raw += len(data)
            if self._raw > self.limit:
                self._too_large = True
                self.send_400_response("")

    def shutdown(self) -> None:
        _stopping()  # streams (SSE, multipart) end their subscriptions with cursors while still open
        super().shutdown()

    def send_400_response(self, msg: str) -> None:
        """A request the parser refused (uvicorn answers it in plain text: "Invalid HTTP request received."), or a
        head past its bound (431), answered in the GraphQL error shape every other refusal has (_refuse)."""
        if self._too_large:
            self._refuse(431, f"the request line and headers are larger than {self.limit} bytes",
                         "REQUEST_HEADER_FIELDS_TOO_LARGE")
        elif self._fault is not None:
            self._refuse(400, self._fault, "BAD_REQUEST")
        else:
            self._refuse(400, f"{msg.rstrip('.').lower()}: not an HTTP/1.1 request this server reads (RFC 9112: a "
                              "method of letters, header names of token characters, values of visible characters); "
                              "the connection is closed", "BAD_REQUEST")

    def _pending_header(self) -> None:
        """The request's Origin and X-Request-ID, when either is the last whole header line of a head refused (too
        slow, or a fault after it): httptools hands a header over only once the next one begins, so that line is
        read here from the bytes last received."""
        if self._origin is not None and self._given_id:
            return
        received = self._chunk[:-2] if self._chunk.endswith(b"\r\n\r\n") else self._chunk  # (a head ended, refused)
        for line in received.rpartition(b"\r\n\r\n")[2].split(b"\r\n")[1:-1]:  # this head's whole header lines
            name, colon, value = line.partition(b":")
            name = name.lower()
            if colon and name == b"origin" and self._origin is None:
                self._origin = value.strip()
            elif colon and name == b"x-request-id" and not self._given_id:
                self._given_id = value.strip().decode("latin-1")

    def _refuse(self, status: int, message: str, code: str) -> None:
        """A request refused before the application has it whole (a head the parser refused, a head past its bound,
        a request too slow to arrive), answered in the GraphQL error shape every other refusal has, with a request
        id and, for a page of an allowed origin whose Origin came before the fault, the CORS fields to read it;
        then the connection is closed (what else it carries is never read)."""
        self._refused = True
        if self._in_head:
            self._pending_header()
        cycle = None if self._in_head else self.cycle  # the application has the request (its body still arriving)
        scope: Any = cycle.scope if cycle is not None else {}
        rid = scope.get("pith.request_id") or chosen_request_id(self._given_id)  # the one its own lines carry
        self.logger.warning("refused a request: %d %s (request id %s)", status, code, rid)
        body = json.dumps({"errors": [{"message": message, "extensions": {"code": code, "requestId": rid}}]},
                          separators=(",", ":")).encode()
        fields = b"".join(name + b": " + value + b"\r\n" for name, value in refusal_headers(self._origin))
        answer = (f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n".encode()
                  + b"content-type: application/json; charset=utf-8\r\ncontent-length: " + str(len(body)).encode()
                  + b"\r\nx-request-id: " + rid.encode() + b"\r\n" + fields + b"connection: close\r\n\r\n" + body)
        if cycle is not None:
            scope["pith.answered"] = (status, len(body))  # for its access line (app.middleware)
        if self._in_head and (self.pipeline or self.cycle is not None and not self.cycle.response_complete):
            self._deferred = answer  # a request pipelined behind others: answered after theirs, in order
            return
        self.transport.write(answer)
        self.transport.close()


def _stopping() -> None:
    """SIGTERM reached this connection: every subscription ends now, telling its cursor (app.live)."""
    from app.live import server_stopping

    server_stopping()


class StoppingWebSockets(WebSocketsSansIOProtocol):
    """uvicorn's WebSocket protocol, whose SIGTERM close (1012, no reason, at once) waits up to
    app.live.CLOSE_SECONDS: the application closes the socket first, 1012 with the cursor to resume from
    (app.live.StoppableSocket); a socket still open then is closed as uvicorn would."""

    def shutdown(self) -> None:
        from app.live import CLOSE_SECONDS

        _stopping()
        if self.handshake_complete and not self.close_sent:
            asyncio.get_running_loop().call_later(CLOSE_SECONDS + 0.5, super().shutdown)
            return
        super().shutdown()
