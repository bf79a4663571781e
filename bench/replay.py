"""The record's own statements replayed: the least a Python service on uvicorn + asyncpg can do to serve it.

A bare ASGI app (no framework, no checks, no document) that answers GET
/paper/<id>/citation-record.json by sending, on one pooled connection, exactly what pith-graph
sends for that record: the read transaction's BEGIN, the record's statements
(loaders.record.record_items: the head, then both pages' items with their standing) with
the same parameters, and the ROLLBACK; asyncpg decodes
every row. It answers with the rows' counts. pith-graph's record can only be slower: the ratio of the
two (throughput under the same load, latency sequentially) is what the document, the HTTP stack and
the rules cost on top of the database.

    DATABASE_URL=... python bench/replay.py --port 8124
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import datetime
from pathlib import Path
from urllib.parse import parse_qs

import asyncpg
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.db.pool import BEGIN, DEFAULT_STATEMENT_TIMEOUT_MS, create_pool  # noqa: E402
from app.settings import Settings  # noqa: E402
from loaders.record import RECORD, SERVED_CAPS  # noqa: E402

PREFIX, SUFFIX = "/paper/", "/citation-record.json"


async def replay(conn: asyncpg.Connection, arxiv_id: str, at: datetime) -> dict[str, int]:
    """The statements of one record, as loaders.record.record_items sends them for one paper."""
    await conn.execute(BEGIN.format(ms=DEFAULT_STATEMENT_TIMEOUT_MS))
    try:
        rows = await conn.fetch(RECORD, [arxiv_id], at, SERVED_CAPS.inbound, SERVED_CAPS.outbound)
        return {"heads": sum(r[0] == 0 for r in rows), "inbound": sum(r[0] == 1 for r in rows),
                "outbound": sum(r[0] == 2 for r in rows)}
    finally:
        await conn.execute("ROLLBACK")


class Replay:
    def __init__(self, url: str) -> None:
        self.url = url
        self.pool: asyncpg.Pool | None = None

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    # pith-graph's own pool (array types introspected on connect, no reset on release).
                    self.pool = await create_pool(Settings.from_env(), self.url)
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await self.pool.close()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        path = scope["path"]
        if not (path.startswith(PREFIX) and path.endswith(SUFFIX)):
            await self._answer(send, 404, b"{}")
            return
        query = parse_qs(scope["query_string"].decode())
        at = datetime.fromisoformat(query["as_of"][0].replace("Z", "+00:00"))
        async with self.pool.acquire() as conn:
            counts = await replay(conn, path[len(PREFIX):-len(SUFFIX)], at)
        await self._answer(send, 200, orjson.dumps(counts))

    @staticmethod
    async def _answer(send, status: int, body: bytes) -> None:
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(Replay(os.environ["DATABASE_URL"]), host="127.0.0.1", port=args.port, log_config=None,
                log_level="warning", access_log=False, timeout_keep_alive=75)


if __name__ == "__main__":
    main()
