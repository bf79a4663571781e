"""Which papers cite retracted (or withdrawn) work, and since when?

    python examples/retracted_references.py > retracted.csv                 # every paper, as of now
    python examples/retracted_references.py --as-of 2026-06-30T23:59:59Z --since 2026-03-01T00:00:00Z
    python examples/retracted_references.py 2402.15627 2502.03885           # these papers only
    python examples/retracted_references.py --ids-file corpus.txt

Without ids, walks every paper that cites retracted work with browsePapers(filter: {citesRetracted: true})
and reads each page's retracted references in the same request (outbound(citesRetracted: true)); with
ids, asks for them in batches of papers(arxivIds:). Either way a reference is listed by the API's one
rule (the latest of the cited work's retraction, withdrawal and reinstatement events at the instant is a
retraction or withdrawal), with that event: `retracted_since` is when it was observed, `reported_at` when
the source says it happened. --since keeps the references whose event was observed after that instant.
Requests shrink when the server prices them over its limit. Standard library only; CSV on standard
output, one row per retracted reference.
"""

from __future__ import annotations

import argparse
import csv
import sys
from datetime import datetime
from typing import Any

from graphql_client import Progress, TooCostly, query

PAPERS_PER_REQUEST = 20
REFERENCES = 20  # retracted references per paper in a batch; a paper with more is paged alone
EDGE = """edges { node { observationId referenceIndex citedWork { doi title }
  standingNotice { events { eventType source observedAt reportedAt noticeDoi } } } }
  pageInfo { hasNextPage endCursor }"""
BROWSE = f"""query($first: Int!, $after: String, $at: DateTime, $refs: Int!) {{
  browsePapers(filter: {{citesRetracted: true}}, first: $first, after: $after, asOf: $at) {{
    nodes {{ arxivId outbound(citesRetracted: true, first: $refs) {{ {EDGE} }} }}
    pageInfo {{ hasNextPage endCursor }} }} }}"""
BY_ID = f"""query($ids: [String!]!, $at: DateTime, $refs: Int!) {{ papers(arxivIds: $ids, asOf: $at) {{
    arxivId outbound(citesRetracted: true, first: $refs) {{ {EDGE} }} }} }}"""
MORE = f"""query($id: String!, $at: DateTime, $after: String) {{ paper(arxivId: $id, asOf: $at) {{
    arxivId outbound(citesRetracted: true, first: 100, after: $after) {{ {EDGE} }} }} }}"""
COLUMNS = ["arxiv_id", "reference_index", "cited_doi", "cited_title", "event", "event_source", "notice_doi",
           "retracted_since", "reported_at", "observation_id"]
DECIDING = ("RETRACTION", "WITHDRAWAL", "REINSTATEMENT")


def deciding_event(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The event that makes the work retracted: the latest of its retraction, withdrawal, reinstatement."""
    return [e for e in events if e["eventType"] in DECIDING][-1]


def instant(text: str, what: str) -> datetime:
    try:
        found = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        found = None
    if found is None or found.tzinfo is None:
        raise SystemExit(f"error: {what}: {text!r} is not a UTC instant; give e.g. 2026-03-01T00:00:00Z")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("arxiv_ids", nargs="*", metavar="ARXIV_ID", help="only these papers (default: every paper)")
    parser.add_argument("--ids-file", help="a file of arXiv ids, one per line (# comments)")
    parser.add_argument("--as-of", help="UTC instant to answer as of (default: now)")
    parser.add_argument("--since", help="only references whose retraction was observed after this UTC instant")
    parser.add_argument("--url", default="http://127.0.0.1:8000/graphql")
    args = parser.parse_args(argv)
    ids = list(args.arxiv_ids)
    if args.ids_file:
        with open(args.ids_file, encoding="utf-8") as lines:
            ids += [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    since = instant(args.since, "--since") if args.since else None
    if args.as_of:
        instant(args.as_of, "--as-of")

    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(COLUMNS)
    found = papers_seen = 0

    def write(paper: dict[str, Any]) -> None:
        nonlocal found
        connection = paper["outbound"]
        while True:
            for edge in connection["edges"]:
                node = edge["node"]
                event = deciding_event(node["standingNotice"]["events"])
                if since is not None and instant(event["observedAt"], "observedAt") <= since:
                    continue
                writer.writerow([paper["arxivId"], node["referenceIndex"], node["citedWork"]["doi"],
                                 node["citedWork"]["title"], event["eventType"].lower(), event["source"],
                                 event["noticeDoi"], event["observedAt"], event["reportedAt"], node["observationId"]])
                found += 1
            if not connection["pageInfo"]["hasNextPage"]:
                return
            connection = query(args.url, MORE, {"id": paper["arxivId"], "at": args.as_of,
                                                "after": connection["pageInfo"]["endCursor"]})["paper"]["outbound"]

    with Progress(len(ids) if ids else None, "papers") as progress:
        size = PAPERS_PER_REQUEST
        if ids:
            start = 0
            while start < len(ids):
                batch = ids[start:start + size]
                try:
                    papers = query(args.url, BY_ID, {"ids": batch, "at": args.as_of, "refs": REFERENCES})["papers"]
                except TooCostly:
                    if size == 1:
                        raise SystemExit(f"error: the server prices even one paper ({batch[0]}) over its limit")
                    size = max(1, size // 2)  # the server says how much it takes at once: ask for less
                    continue
                for paper in papers:
                    if paper is not None:
                        write(paper)
                papers_seen += len(batch)
                progress.done = papers_seen
                start += len(batch)
        else:
            after = None
            while True:
                try:
                    page = query(args.url, BROWSE, {"first": size, "after": after, "at": args.as_of,
                                                    "refs": REFERENCES})["browsePapers"]
                except TooCostly:
                    if size == 1:
                        raise SystemExit("error: the server prices even one paper a page over its limit")
                    size = max(1, size // 2)
                    continue
                for paper in page["nodes"]:
                    write(paper)
                papers_seen += len(page["nodes"])
                progress.done = papers_seen
                if not page["pageInfo"]["hasNextPage"]:
                    break
                after = page["pageInfo"]["endCursor"]
    print(f"{found} retracted or withdrawn references among {papers_seen} papers"
          + ("" if ids else " citing retracted work"), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
