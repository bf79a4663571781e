"""A paper's citations month by month, from its timeline.

    python examples/citation_growth.py 2402.15627 > growth.csv

Pages through `timeline` (the instants at which the paper's record changed), keeps those where a new
citation became visible, and asks the paper's inbound total at the last such instant of each month
(25 instants per request). Months without a new citation carry the previous total. Standard library
only. CSV: month, citations at the end of the month, new that month.
"""

from __future__ import annotations

import argparse
import csv
import sys

from graphql_client import query

TIMELINE = """query($id: String!, $after: String) { paper(arxivId: $id) {
  timeline(first: 100, after: $after) { edges { node { at kinds } } pageInfo { hasNextPage endCursor } } } }"""


def months_between(first: str, last: str) -> list[str]:
    year, month = int(first[:4]), int(first[5:7])
    found = []
    while f"{year:04d}-{month:02d}" <= last:
        found.append(f"{year:04d}-{month:02d}")
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("arxiv_id")
    parser.add_argument("--url", default="http://127.0.0.1:8000/graphql")
    args = parser.parse_args(argv)

    last_of_month: dict[str, str] = {}  # month -> the last instant in it at which a citation was added
    after = None
    while True:
        paper = query(args.url, TIMELINE, {"id": args.arxiv_id, "after": after})["paper"]
        if paper is None:
            raise SystemExit(f"error: no paper {args.arxiv_id} is known")
        page = paper["timeline"]
        for edge in page["edges"]:
            if "CITATION_ADDED" in edge["node"]["kinds"]:
                last_of_month[edge["node"]["at"][:7]] = edge["node"]["at"]
        if not page["pageInfo"]["hasNextPage"]:
            break
        after = page["pageInfo"]["endCursor"]

    totals: dict[str, int] = {}
    instants = sorted(last_of_month.items())
    for start in range(0, len(instants), 25):
        batch = instants[start:start + 25]
        fields = " ".join(f'm{n}: paper(arxivId: $id, asOf: "{at}") {{ inbound(first: 1) {{ totalCount }} }}'
                          for n, (_, at) in enumerate(batch))
        data = query(args.url, f"query($id: String!) {{ {fields} }}", {"id": args.arxiv_id})
        for n, (month, _) in enumerate(batch):
            totals[month] = data[f"m{n}"]["inbound"]["totalCount"]

    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(["month", "citations", "new"])
    previous = 0
    for month in months_between(min(totals), max(totals)) if totals else []:
        current = totals.get(month, previous)
        writer.writerow([month, current, current - previous])
        previous = current
    return 0


if __name__ == "__main__":
    sys.exit(main())
