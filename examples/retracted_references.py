"""Which of these papers had a reference retracted (or withdrawn) between two dates?

    python examples/retracted_references.py --from 2026-03-01T00:00:00Z --to 2026-06-30T23:59:59Z \\
        2402.15627 2502.03885 > retracted.csv
    python examples/retracted_references.py --from ... --to ... --ids-file corpus.txt

One recordDiff per paper, several papers per request (fewer when the server prices a request over its
limit), asking for the STANDING_EVENT changes alone: the typed changes between the two instants include
every standing event on a work the paper cites, so a retraction is found even when the paper's record
shows only its first 100 references. A paper with more standing events than one page holds is asked
again alone with the largest page. Standard library only. CSV on standard output, one row per
retracted reference.
"""

from __future__ import annotations

import argparse
import csv
import sys

from graphql_client import TooCostly, query

BATCH = 25
PAGE = 100  # standing events per paper in a batch; a paper with more is asked again alone
MAX_PAGE = 10_000
FIELDS = """recordDiff(arxivId: "{id}", from: $from, to: $to, kinds: [STANDING_EVENT], maxChanges: {most}) {{
  changesTruncated changes {{ kind observedAt event {{ eventType source noticeDoi }}
    observation {{ observationId referenceIndex citingPaper {{ arxivId }}
                   citedWork {{ doi title }} }} }} }}"""
COLUMNS = ["arxiv_id", "reference_index", "cited_doi", "cited_title", "event", "event_source", "notice_doi",
           "observed_at", "observation_id"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("arxiv_ids", nargs="*", metavar="ARXIV_ID")
    parser.add_argument("--ids-file", help="a file of arXiv ids, one per line")
    parser.add_argument("--from", dest="start", required=True, help="UTC instant, e.g. 2026-03-01T00:00:00Z")
    parser.add_argument("--to", dest="end", required=True, help="UTC instant (not before --from)")
    parser.add_argument("--url", default="http://127.0.0.1:8000/graphql")
    args = parser.parse_args(argv)
    ids = list(args.arxiv_ids)
    if args.ids_file:
        with open(args.ids_file, encoding="utf-8") as lines:
            ids += [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    if not ids:
        parser.error("give arXiv ids or --ids-file")

    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(COLUMNS)
    variables = {"from": args.start, "to": args.end}

    def diffs(batch: list[str], most: int) -> dict[str, dict]:
        fields = "\n".join(f"p{n}: " + FIELDS.format(id=arxiv_id.replace('"', ""), most=most)
                           for n, arxiv_id in enumerate(batch))
        data = query(args.url, f"query($from: DateTime!, $to: DateTime!) {{ {fields} }}", variables)
        return {arxiv_id: data[f"p{n}"] for n, arxiv_id in enumerate(batch)}

    found, start, size = 0, 0, BATCH
    while start < len(ids):
        batch = ids[start:start + size]
        try:
            got = diffs(batch, PAGE)
        except TooCostly:
            if size == 1:
                raise SystemExit(f"error: the server prices even one diff of {batch[0]} over its limit")
            size = max(1, size // 2)  # the server says how much it takes at once: ask for less
            continue
        for arxiv_id, diff in got.items():
            if diff is not None and diff["changesTruncated"]:
                diff = diffs([arxiv_id], MAX_PAGE)[arxiv_id]  # more standing events than a page: the largest page
            for change in (diff or {}).get("changes", []):
                event, obs = change["event"], change["observation"]
                if change["kind"] != "STANDING_EVENT" or event["eventType"] not in ("RETRACTION", "WITHDRAWAL"):
                    continue
                if obs is None or obs["citingPaper"]["arxivId"] != arxiv_id:
                    continue  # an event on a work that cites this paper, not one it cites
                writer.writerow([arxiv_id, obs["referenceIndex"], obs["citedWork"]["doi"], obs["citedWork"]["title"],
                                 event["eventType"].lower(), event["source"], event["noticeDoi"],
                                 change["observedAt"], obs["observationId"]])
                found += 1
        start += len(batch)
    print(f"{found} retracted or withdrawn references among {len(ids)} papers", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
