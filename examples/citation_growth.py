"""How a paper's citations grow by publication year: distinct citing papers by the year of their version 1.

    python examples/citation_growth.py 2402.15627 > growth.csv
    python examples/citation_growth.py 2402.15627 2502.03885 --as-of 2026-06-30T23:59:59Z
    python examples/citation_growth.py --category cs.LG --submitted-from 2019-01-01T00:00:00Z > growth.csv

Reads Paper.citationsByYear (one statement for a whole batch of papers, uncapped) for the papers named,
or for every paper browsePapers lists with --category / --submitted-from / --submitted-to. Batches
shrink when the server prices them over its limit (a batch holding a much-cited paper), and grow back
after. A paper priced over the limit even alone (a hub with a few hundred thousand citations) is counted
as the refusal advises: its whole inbound list from the bulk route (GET /paper/<id>/inbound.ndjson, one
request), its citing papers' submission times looked up a hundred at a time. Standard library only. CSV: arxiv_id, year, citing_papers (submitted that year), cumulative (up
to and including that year).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import urllib.parse
import urllib.request
from collections import Counter
from typing import Any, Iterator

from graphql_client import Progress, TooCostly, headers, query

BATCH = 100
YEARS = """query($ids: [String!]!, $at: DateTime) { papers(arxivIds: $ids, asOf: $at) {
  arxivId citationsByYear { year count } } }"""
BROWSE = """query($filter: PaperFilter, $after: String, $at: DateTime) {
  browsePapers(filter: $filter, first: 100, after: $after, asOf: $at) {
    nodes { arxivId } pageInfo { hasNextPage endCursor } } }"""


def listed(url: str, filter: dict[str, Any], at: str | None) -> Iterator[str]:
    after = None
    while True:
        page = query(url, BROWSE, {"filter": filter, "after": after, "at": at})["browsePapers"]
        yield from (p["arxivId"] for p in page["nodes"])
        if not page["pageInfo"]["hasNextPage"]:
            return
        after = page["pageInfo"]["endCursor"]


SUBMITTED = """query($ids: [String!]!, $at: DateTime) { papers(arxivIds: $ids, asOf: $at) { arxivId submittedAt } }"""


def by_year_from_bulk(url: str, arxiv_id: str, at: str | None) -> list[dict[str, int]]:
    """citationsByYear of one paper from its whole inbound list (the bulk route) and its citers' versions 1:
    distinct citing papers by the year each was submitted."""
    base = url.rsplit("/graphql", 1)[0]
    route = f"{base}/paper/{urllib.parse.quote(arxiv_id)}/inbound.ndjson"
    if at:
        route += "?" + urllib.parse.urlencode({"as_of": at})
    citers: set[str] = set()
    with urllib.request.urlopen(urllib.request.Request(route, headers=headers("application/x-ndjson")),
                                timeout=600) as response:
        for line in response:
            if line.strip():
                source = json.loads(line)["source"]  # the citing paper's node id, "arxiv:<id>"
                citers.add(source.split(":", 1)[1])
    years: Counter[int] = Counter()
    ordered = sorted(citers)
    for start in range(0, len(ordered), BATCH):
        for paper in query(url, SUBMITTED, {"ids": ordered[start:start + BATCH], "at": at})["papers"]:
            if paper is not None:
                years[int(paper["submittedAt"][:4])] += 1
    return [{"year": year, "count": years[year]} for year in sorted(years)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("arxiv_ids", nargs="*", metavar="ARXIV_ID")
    parser.add_argument("--category", help="every paper of this primary category (with browsePapers)")
    parser.add_argument("--submitted-from", help="every paper submitted at or after this UTC instant")
    parser.add_argument("--submitted-to", help="every paper submitted at or before this UTC instant")
    parser.add_argument("--as-of", help="UTC instant to answer as of (default: now)")
    parser.add_argument("--url", default="http://127.0.0.1:8000/graphql")
    args = parser.parse_args(argv)
    filter = {k: v for k, v in (("category", args.category), ("submittedFrom", args.submitted_from),
                                ("submittedTo", args.submitted_to)) if v is not None}
    if not args.arxiv_ids and not filter:
        parser.error("give arXiv ids, or --category / --submitted-from / --submitted-to to list papers")
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(["arxiv_id", "year", "citing_papers", "cumulative"])
    sys.stdout.flush()
    with Progress(None, "papers") as progress:  # (stopped while listing the papers: none of them written)
        ids = list(args.arxiv_ids) + (list(listed(args.url, filter, args.as_of)) if filter else [])
        progress.total = len(ids)
        write_growth(args, ids, writer, progress)
    print(f"{len(ids)} papers", file=sys.stderr)
    return 0


def write_growth(args: argparse.Namespace, ids: list[str], writer: Any, progress: Progress) -> None:
    start, size = 0, BATCH
    while start < len(ids):
        batch = ids[start:start + size]
        try:
            papers = query(args.url, YEARS, {"ids": batch, "at": args.as_of})["papers"]
        except TooCostly as refused:
            if size > 1:
                size = max(1, size // 2)
                continue
            print(f"{batch[0]}: {refused}; counted from the bulk route instead", file=sys.stderr)
            papers = [{"arxivId": batch[0], "citationsByYear": by_year_from_bulk(args.url, batch[0], args.as_of)}]
        for arxiv_id, paper in zip(batch, papers):
            if paper is None:
                raise SystemExit(f"error: no paper {arxiv_id} is known at that instant")
            total = 0
            for row in paper["citationsByYear"]:
                total += row["count"]
                writer.writerow([paper["arxivId"], row["year"], row["count"], total])
        start += len(batch)
        progress.done = start
        size = min(BATCH, size * 2)  # one costly paper shrinks its own batch, not every batch after it


if __name__ == "__main__":
    sys.exit(main())
