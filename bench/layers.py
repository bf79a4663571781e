"""What each ASGI layer of the stack costs a request, in process: CPU per request, no socket, no database.

The layers of app/main.py (RequestLayer, Cors, GZip) around one Starlette route that reads the body and answers a
small JSON document, called as the server calls them, 20,000 requests a measure: Starlette alone, each layer
alone, and the whole stack; the best of several rounds (a shared machine's noise only adds). Under wrk the
same differences are a few percent of a lookup and lost in the spread of rounds (bench/request_ab.py); here
they are read directly.

    python bench/layers.py [--requests 20000 --rounds 9]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from starlette.applications import Starlette  # noqa: E402
from starlette.middleware import Middleware  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import Response  # noqa: E402
from starlette.routing import Route  # noqa: E402

from app import metrics  # noqa: E402
from app.compression import GZip  # noqa: E402
from app.cors import Cors  # noqa: E402
from app.middleware import RequestLayer  # noqa: E402

ANSWER = b'{"data":{"paper":{"title":"Synthetic study 8642 of transformers sparse memory deep"}}}'
BODY = (b'{"query":"query($id: String!, $at: DateTime) { paper(arxivId: $id, asOf: $at) { title } }",'
        b'"variables":{"id":"2411.00029","at":"2026-08-01T00:00:00Z"}}')
LAYERS = {"RequestLayer": Middleware(RequestLayer, deadline_seconds=30.0, answers=Cors), "Cors": Middleware(Cors),
          "GZip": Middleware(GZip)}


async def fixed(request: Request) -> Response:
    await request.body()
    return Response(ANSWER, media_type="application/json")


def stack(names: list[str]) -> Starlette:
    return Starlette(routes=[Route("/graphql", fixed, methods=["POST"])], middleware=[LAYERS[n] for n in names])


async def cpu_per_request(app: Starlette, n: int) -> float:
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": "/graphql", "raw_path": b"/graphql", "query_string": b"", "root_path": "",
             "headers": [(b"host", b"127.0.0.1:8000"), (b"content-type", b"application/json"),
                         (b"content-length", str(len(BODY)).encode())],
             "client": ("127.0.0.1", 5555), "server": ("127.0.0.1", 8000), "state": {}}

    async def receive() -> dict:
        return {"type": "http.request", "body": BODY, "more_body": False}

    async def send(message: dict) -> None:
        return None

    started = time.process_time()
    for _ in range(n):
        await app(dict(scope), receive, send)
    return (time.process_time() - started) / n * 1e6


async def measure(requests: int, rounds: int) -> dict:
    logging.getLogger("pith.access").setLevel(logging.WARNING)  # as the benchmarks serve (PITH_ACCESS_LOG=0)
    metrics.watch_requests({1, 2})  # under load: counters written together, not once a request
    configs = {"Starlette alone": [], **{name: [name] for name in LAYERS}, "the stack": list(LAYERS)}
    apps = {name: stack(layers) for name, layers in configs.items()}
    for app in apps.values():
        await cpu_per_request(app, 2000)
    runs: dict[str, list[float]] = {name: [] for name in apps}
    for _ in range(rounds):
        for name, app in apps.items():
            runs[name].append(await cpu_per_request(app, requests))
    best = {name: min(values) for name, values in runs.items()}
    base = best["Starlette alone"]
    return {"requests": requests, "rounds": rounds, "us_per_request": best,
            "us_added": {name: value - base for name, value in best.items()}, "runs": runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    result = asyncio.run(measure(args.requests, args.rounds))
    for name, value in result["us_per_request"].items():
        print(f"{name:16s} {value:6.1f} us  (+{result['us_added'][name]:5.1f})", file=sys.stderr)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
