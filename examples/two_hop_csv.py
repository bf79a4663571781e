"""Walk a paper's two-hop inbound neighbourhood through the GraphQL API and write its edges as CSV.

    python examples/two_hop_csv.py 2402.15627 --as-of 2026-08-09T12:00:00Z > edges.csv

Uses the standard library only. Every row is one citation observation: who cites whom, as which reference number,
how the reference resolved, and whether the cited work's standing was checked.
"""

from __future__ import annotations

import argparse
import csv
import sys

from graphql_client import TooCostly, query

QUERY = """
query TwoHop($id: String!, $perPaper: Int!, $asOf: DateTime) {
  neighbourhood(arxivId: $id, direction: INBOUND, depth: 2, perPaper: $perPaper, asOf: $asOf) {
    truncated
    edges {
      observationId
      referenceIndex
      sourceObservedAt
      citingPaper { arxivId }
      citedPaper { arxivId }
      resolution { status }
      standingNotice { state }
    }
  }
}
"""

COLUMNS = ["citing_arxiv_id", "cited_arxiv_id", "reference_index", "observation_id", "resolution_status",
           "standing_state", "source_observed_at"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("arxiv_id")
    parser.add_argument("--url", default="http://127.0.0.1:8000/graphql")
    parser.add_argument("--as-of", help="UTC instant, e.g. 2026-08-09T12:00:00Z (default: now)")
    parser.add_argument("--per-paper", type=int, default=50, help=(
        "edges followed per paper (1 to 100); when the server prices the walk over its per-operation limit (a "
        "paper with many citers), fewer are asked, halving until it is admitted, and stderr says so"))
    args = parser.parse_args(argv)

    per_paper = args.per_paper
    while True:
        try:
            hood = query(args.url, QUERY, {"id": args.arxiv_id, "perPaper": per_paper,
                                           "asOf": args.as_of})["neighbourhood"]
            break
        except TooCostly as refused:  # the server says how much it takes at once: ask for less
            if per_paper == 1:
                print(f"error: {refused}", file=sys.stderr)
                return 1
            per_paper = max(1, per_paper // 2)
            print(f"note: priced over the server's limit; following {per_paper} edges per paper", file=sys.stderr)
    if hood is None:
        print(f"error: no paper {args.arxiv_id} at that instant", file=sys.stderr)
        return 1
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(COLUMNS)
    for e in hood["edges"]:
        writer.writerow([e["citingPaper"]["arxivId"], e["citedPaper"]["arxivId"], e["referenceIndex"], e["observationId"],
                         e["resolution"]["status"].lower(), e["standingNotice"]["state"].lower(),
                         e["sourceObservedAt"]])
    if hood["truncated"]:
        print("note: the walk was cut by --per-paper or the 10,000-paper cap", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
