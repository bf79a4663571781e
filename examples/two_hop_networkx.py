"""A paper's two-hop neighbourhood as a networkx graph, straight from the GraphML export.

    pip install networkx
    python examples/two_hop_networkx.py 2402.15627 --direction both --per-paper 20

Downloads /graph/neighbourhood.graphml (the same papers and edges as GraphQL `neighbourhood`), reads it
with networkx.read_graphml, and prints the graph's size and its most-cited papers within the walk as
CSV. Node ids are typed (arxiv:2402.15627); node attributes: arxiv_id, title, primary_category, submitted, latest_version; edge attributes:
observation_id, reference_index, citation_source, resolution_status, standing_state,
cited_work_retracted.
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
import urllib.error
import urllib.parse
import urllib.request

import networkx as nx
from graphql_client import headers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("arxiv_id")
    parser.add_argument("--base", default="http://127.0.0.1:8000", help="the server's address")
    parser.add_argument("--direction", choices=("inbound", "outbound", "both"), default="inbound")
    parser.add_argument("--per-paper", type=int, default=10, help="edges followed per paper (1 to 100)")
    parser.add_argument("--as-of", help="UTC instant (default: now)")
    parser.add_argument("--top", type=int, default=10, help="how many most-cited papers to list")
    args = parser.parse_args(argv)

    params = {"arxiv_id": args.arxiv_id, "direction": args.direction, "depth": 2, "per_paper": args.per_paper}
    if args.as_of:
        params["as_of"] = args.as_of
    url = f"{args.base}/graph/neighbourhood.graphml?{urllib.parse.urlencode(params)}"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers("*/*")),
                                    timeout=120) as response:
            graph = nx.read_graphml(io.BytesIO(response.read()), force_multigraph=True)
            truncated = response.headers.get("X-Truncated") == "true"
    except urllib.error.HTTPError as exc:
        raise SystemExit(f"error: {exc.read().decode(errors='replace')}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise SystemExit(f"error: cannot reach {args.base}: {exc}") from None

    print(f"{graph.number_of_nodes()} papers, {graph.number_of_edges()} citations"
          + (" (cut by --per-paper or the 10,000-paper cap)" if truncated else ""), file=sys.stderr)
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(["arxiv_id", "cited_within_walk", "title"])
    ranked = sorted(graph.nodes, key=lambda n: (-graph.in_degree(n), n))[:args.top]
    for node in ranked:
        writer.writerow([graph.nodes[node]["arxiv_id"], graph.in_degree(node), graph.nodes[node].get("title", "")])
    return 0


if __name__ == "__main__":
    sys.exit(main())
