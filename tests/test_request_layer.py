"""The request's own layer (app.middleware.RequestLayer), driven as the server drives it, in process: the watch for
a client's leaving is started for the requests that run long, without a timer of each request's own, on whatever
event loop serves the application."""

from __future__ import annotations

import asyncio

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from app import middleware
from app.middleware import RequestLayer

BODY = b'{"query": "{ __typename }"}'


def layered() -> tuple[Starlette, list[str]]:
    seen: list[str] = []

    async def quick(request: Request) -> JSONResponse:
        await request.body()
        return JSONResponse({"ok": True})

    async def slow(request: Request) -> JSONResponse:  # runs until its client leaves
        await request.body()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        return JSONResponse({"ok": True})

    app = Starlette(routes=[Route("/quick", quick, methods=["POST"]), Route("/slow", slow, methods=["POST"])],
                    middleware=[Middleware(RequestLayer)])
    return app, seen


def scope(path: str) -> dict:
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
            "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())],
            "client": ("127.0.0.1", 5555), "server": ("127.0.0.1", 8000), "state": {}}


async def call(app: Starlette, path: str, leaves: asyncio.Event | None = None) -> list[dict]:
    """One request; its client leaves when `leaves` is set (never, without it)."""
    messages = [{"type": "http.request", "body": BODY, "more_body": False}]
    sent: list[dict] = []

    async def receive() -> dict:
        if messages:
            return messages.pop()
        await (leaves.wait() if leaves is not None else asyncio.Event().wait())
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    await app(scope(path), receive, send)
    return sent


def test_requests_answered_at_once_schedule_no_timer_of_their_own():
    """Two hundred requests answered before any watch is due: the layer scheduled one timer for them all (it made
    and cancelled one per request, a fortieth of a lookup's CPU)."""
    app, _ = layered()

    async def run() -> int:
        loop = asyncio.get_running_loop()
        timers = 0
        call_at = loop.call_at

        def counted(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            nonlocal timers
            timers += 1
            return call_at(*args, **kwargs)

        loop.call_at = counted  # type: ignore[method-assign]
        try:
            for _ in range(200):
                sent = await call(app, "/quick")
                assert sent[0]["status"] == 200, sent
        finally:
            del loop.call_at
        return timers

    assert asyncio.run(run()) <= 2


def test_a_client_that_leaves_a_long_request_cancels_it_on_every_loop_that_serves_the_app():
    """A request that runs past the watch's delay whose client leaves is cancelled (its query with it), on the
    application's first event loop and on a later one (a timer of the first loop never fires on the second)."""
    app, seen = layered()

    async def run() -> list[dict]:
        leaves = asyncio.Event()
        request = asyncio.ensure_future(call(app, "/slow", leaves))
        await asyncio.sleep(middleware.WATCH_AFTER / 5)
        leaves.set()  # gone before its watch started: found once the watch starts
        return await asyncio.wait_for(request, 30)

    for _ in range(2):
        assert asyncio.run(run()) == []  # nothing sent: the handler was cancelled, not answered
    assert seen == ["cancelled", "cancelled"]


def test_an_options_request_is_answered_from_its_head_its_declared_body_never_read_nor_charged():
    """A preflight (and any OPTIONS) is the CORS layer's to answer from its head: a declared body, over the limit or
    not yet sent, is neither waited for nor refused and charged to its client."""
    charged: list[str] = []

    async def on_refused(scope: dict) -> list:
        charged.append(scope["path"])
        return []

    from app.cors import Cors

    def cors(app):  # noqa: ANN001, ANN202
        return Cors(app, origins=("http://app.example",))

    app = Starlette(routes=[Route("/graphql", lambda request: JSONResponse({}), methods=["POST"])],
                    middleware=[Middleware(RequestLayer, on_refused=on_refused, answers=cors), Middleware(cors)])

    async def run(headers: list[tuple[bytes, bytes]]) -> list[dict]:
        sent: list[dict] = []

        async def receive() -> dict:  # the body never comes
            await asyncio.Event().wait()
            return {"type": "http.disconnect"}

        async def send(message: dict) -> None:
            sent.append(message)

        request = {**scope("/graphql"), "method": "OPTIONS", "headers": headers}
        await asyncio.wait_for(app(request, receive, send), 10)
        return sent

    preflight = [(b"origin", b"http://app.example"), (b"access-control-request-method", b"POST")]
    for declared in (b"10", str(middleware.MAX_BODY_BYTES + 1).encode()):
        answered = asyncio.run(run([*preflight, (b"content-length", declared)]))
        assert answered[0]["status"] == 200 and (b"access-control-allow-origin", b"http://app.example") in \
            answered[0]["headers"], answered
        assert any(name == b"x-request-id" for name, _ in answered[0]["headers"]), answered
        plain = asyncio.run(run([(b"content-length", declared)]))
        assert plain[0]["status"] == 204, plain
    assert charged == []


def test_a_request_stopped_at_shutdown_while_its_body_arrives_is_told_so_in_json():
    """The server stops a request whose body is still arriving (SIGTERM past the grace): a JSON 503 with its
    request id, as a request stopped while its handler runs gets, never uvicorn's plain-text 500."""
    app, _ = layered()

    async def run() -> list[dict]:
        sent: list[dict] = []
        parts = [{"type": "http.request", "body": BODY[:10], "more_body": True}]

        async def receive() -> dict:  # the rest of the body trickles and never completes
            if parts:
                return parts.pop()
            await asyncio.Event().wait()
            return {"type": "http.disconnect"}

        async def send(message: dict) -> None:
            sent.append(message)

        request = asyncio.ensure_future(app(scope("/quick"), receive, send))
        await asyncio.sleep(0.01)
        request.cancel()
        try:
            await request
        except asyncio.CancelledError:
            pass
        else:
            raise AssertionError("the cancellation was swallowed")
        return sent

    sent = asyncio.run(run())
    assert sent and sent[0]["status"] == 503, sent
    headers = dict(sent[0]["headers"])
    assert headers[b"content-type"].startswith(b"application/json") and b"x-request-id" in headers, headers
    assert b"shutting down" in sent[1]["body"], sent


async def stopped_by_uvicorn(app: Starlette, path: str, parts: list[dict],
                             started: asyncio.Event | None = None) -> tuple[list[dict], bool]:
    """A request given `parts` of its body (then nothing more), stopped as uvicorn stops it past its shutdown grace
    once `started` is set (else once it waits for more body): what it sent, and whether its task ended uncancelled
    (the cancellation, had it gone on up, raises here)."""
    from app.middleware import SERVER_STOP

    sent: list[dict] = []
    waiting = asyncio.Event()

    async def receive() -> dict:
        if parts:
            return {**parts.pop(0), "more_body": False}
        waiting.set()
        await asyncio.Event().wait()
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    request = asyncio.ensure_future(app(scope(path), receive, send))
    await (started or waiting).wait()
    request.cancel(msg=SERVER_STOP)
    await request
    return sent, request.cancelling() == 0


def test_a_request_uvicorn_stops_at_shutdown_ends_answered_not_as_an_error_of_the_application():
    """uvicorn cancels the requests still running past its grace with a message of its own, and logs a request
    task that ends cancelled as an application error, traceback and all: the layer's 503 answers it, and the
    request ends there. Any other cancellation of the request goes on up (asserted above)."""
    app, _ = layered()
    sent, uncancelled = asyncio.run(stopped_by_uvicorn(app, "/quick", []))  # (its body never comes)
    assert sent[0]["status"] == 503 and b"shutting down" in sent[1]["body"], sent
    assert uncancelled


def test_a_preflight_counts_under_its_route():
    """Requests a route's path matches with a method it does not serve (a preflight, a 405) count under the
    route's template, not `other`."""
    app, _ = layered()
    assert middleware.route_of({"app": app, "type": "http", "method": "OPTIONS", "path": "/quick"}) == "/quick"
    assert middleware.route_of({"app": app, "type": "http", "method": "POST", "path": "/nowhere"}) == "other"


def test_a_stream_uvicorn_stops_at_shutdown_is_ended_where_it_stands_not_cut():
    """A response already begun (a subscription's stream, still starting) when uvicorn stops its request past the
    grace cannot be answered 503: it is ended where it stands (its last chunk sent), so that uvicorn does not cut
    the connection under it and log the application as failing to complete its response."""
    from starlette.responses import StreamingResponse

    started = asyncio.Event()

    async def events():
        yield b": stream open\n\n"
        started.set()
        await asyncio.Event().wait()  # its first event never comes
        yield b""

    async def stream(request: Request) -> StreamingResponse:
        await request.body()
        return StreamingResponse(events(), media_type="text/event-stream")

    app = Starlette(routes=[Route("/stream", stream, methods=["POST"])], middleware=[Middleware(RequestLayer)])

    sent, _ = asyncio.run(stopped_by_uvicorn(app, "/stream", [{"type": "http.request", "body": BODY}], started))
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 200, sent
    assert sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False}, sent
