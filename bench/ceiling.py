"""The ceiling of the stack: the least a Python service on uvicorn + asyncpg can do to answer Q2.

A bare ASGI app (no framework, no GraphQL, no checks) that answers POST /graphql for Q2 with one
asyncpg statement and orjson, under the same uvicorn settings as `pith-graph serve`. Whatever
pith-graph does on top of that (Starlette, Strawberry, limits, cost, one snapshot per request) can
only be slower; so pith / PostGraphile can be no better than ceiling / PostGraphile, and the ratio
pith / ceiling says how much of the gap is ours rather than the stack's.

    DATABASE_URL=... python bench/ceiling.py --port 8123
    python bench/ceiling.py --port 8123 --constant   # no database: a fixed answer (bench/stack.py)
    python bench/ceiling.py --port 8123 --starlette  # the same answer from a Starlette route: its own layers
"""

from __future__ import annotations

import argparse
import os
from datetime import datetime

import asyncpg
import orjson

TITLE = """SELECT title FROM paper_snapshots WHERE arxiv_id = $1 AND observed_at <= $2
ORDER BY observed_at DESC LIMIT 1"""


async def _no_reset(conn: asyncpg.Connection) -> None:
    return None


class Ceiling:
    def __init__(self, url: str | None) -> None:
        self.url = url  # None: no database, every request answered with one fixed document
        self.pool: asyncpg.Pool | None = None

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    # No reset on release: asyncpg's default sends RESET ALL, UNLISTEN * ... (a round
                    # trip per request) for state this app never sets.
                    if self.url is not None:
                        self.pool = await asyncpg.create_pool(self.url, min_size=4, max_size=16, reset=_no_reset)
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    if self.pool is not None:
                        await self.pool.close()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if self.pool is None:
            await _answer(send, CONSTANT)
            return
        variables = orjson.loads(body)["variables"]
        at = datetime.fromisoformat(variables["at"].replace("Z", "+00:00"))
        async with self.pool.acquire() as conn:
            title = await conn.fetchval(TITLE, variables["id"], at)
        await _answer(send, orjson.dumps({"data": {"paper": {"title": title} if title is not None else None}}))


CONSTANT = orjson.dumps({"status": "ok"})


async def _answer(send, answer: bytes) -> None:
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(answer)).encode())]})
    await send({"type": "http.response.body", "body": answer})


def starlette_app():
    """The fixed answer from one Starlette route: what Starlette's own layers (its error and exception
    middleware, the router, a Response) cost with none of pith-graph's."""
    from starlette.applications import Starlette
    from starlette.responses import Response
    from starlette.routing import Route

    async def fixed(request) -> Response:
        return Response(CONSTANT, media_type="application/json")

    return Starlette(routes=[Route(path, fixed, methods=["GET", "POST"]) for path in ("/", "/graphql")])


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--constant", action="store_true",
                        help="no database: answer every request with a fixed document")
    parser.add_argument("--starlette", action="store_true", help="no database: the fixed document from a Starlette route")
    args = parser.parse_args()
    app = starlette_app() if args.starlette else Ceiling(None if args.constant else os.environ["DATABASE_URL"])
    uvicorn.run(app, host="127.0.0.1", port=args.port,
                log_config=None, log_level="warning", access_log=False, timeout_keep_alive=75)


if __name__ == "__main__":
    main()
