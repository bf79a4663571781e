"""Print retractions (and other notices) on works a paper cites, the moment they are imported.

    python examples/watch_retractions.py 2402.15627 [--url ws://127.0.0.1:8000/graphql] [--after CURSOR]

Uses `websockets` (installed with pith-graph) and the graphql-transport-ws protocol. Pass the last
cursor it printed as --after to resume without missing anything.
"""

import argparse
import asyncio
import json
import os

import websockets

QUERY = """subscription($id: String!, $after: String) { standingChanged(arxivId: $id, after: $after) {
  cursor standing endedAt event { eventType source reportedAt noticeDoi }
  observation { referenceIndex citedWork { title doi } } } }"""


def describe(change: dict) -> str:
    """One line for a change: a notice that now counts, or one that ended (a source no longer reports it)."""
    event, reference = change["event"], change["observation"]
    work = reference["citedWork"] or {}
    cited = work.get("title") or work.get("doi") or "a work"
    where = f"reference {reference['referenceIndex']}" if reference["referenceIndex"] is not None else "a reference"
    if change["standing"]:
        what = f"{event['eventType']} of {where} ({cited}) reported by {event['source']}"
    else:
        what = f"{event['eventType']} of {where} ({cited}) ended at {change['endedAt']} ({event['source']} no " \
               "longer reports it)"
    return f"{what}; cursor {change['cursor']}"


async def watch(url: str, arxiv_id: str, after: str | None) -> None:
    async with websockets.connect(url, subprotocols=["graphql-transport-ws"]) as ws:
        key = os.environ.get("PITH_API_KEY")  # a budget of its own (pith-graph keys create)
        await ws.send(json.dumps({"type": "connection_init",
                                  "payload": {"authorization": f"Bearer {key}"} if key else {}}))
        await ws.recv()  # connection_ack
        await ws.send(json.dumps({"id": "1", "type": "subscribe",
                                  "payload": {"query": QUERY, "variables": {"id": arxiv_id, "after": after}}}))
        async for raw in ws:
            message = json.loads(raw)
            if message["type"] == "next" and "data" in message["payload"]:
                print(describe(message["payload"]["data"]["standingChanged"]), flush=True)
            elif message["type"] in ("error", "complete") or message["payload"].get("errors"):
                raise SystemExit(f"subscription ended: {message.get('payload')}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("arxiv_id")
    parser.add_argument("--url", default="ws://127.0.0.1:8000/graphql")
    parser.add_argument("--after", help="resume after this cursor")
    args = parser.parse_args()
    asyncio.run(watch(args.url, args.arxiv_id, args.after))
