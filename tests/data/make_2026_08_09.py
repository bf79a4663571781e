"""Write app/sample/records-2402.15627-2026-08-09.ndjson: the 9 August 2026 state of the sample paper.

The ledger of 9 August shows six more citing papers (ids, titles, versions, reference numbers and
resolution times below come from it). Times the ledger does not show are chosen here: submission
and update dates, snapshot times, the printed reference titles, and the refreshed standing receipts.
Besides the 13-observation record of 2402.15627, each citing paper's own record is written, so
the file also carries categories and outbound references.

Run: python tests/data/make_2026_08_09.py  (from the repository root)
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from uuid import UUID

from app import record
from app.ingest.document import parse_document
from loaders.rows import Counts, Observation, PaperSnapshot, Receipt, RecordRows, Resolution, Standing

HERE = Path(__file__).parent
SEED = HERE.parent.parent / "app" / "sample" / "citation-record-2402.15627-2026-08-05.json"
OUT = HERE.parent.parent / "app" / "sample" / "records-2402.15627-2026-08-09.ndjson"
AS_OF = datetime.fromisoformat("2026-08-09T12:00:00+00:00")


def t(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


# (observation id, arXiv id, title, version, category, submitted, last updated, snapshot,
#  reference index, parsed at, printed title)
CITERS = [
    ("fd958756-76f8-458d-9489-a4cfacf4dcc3", "2502.03885",
     "InfiniteHBD: Building Datacenter-Scale High-Bandwidth Domain for LLM with Optical Circuit Switching "
     "Transceivers", 6, "cs.NI", "2025-02-06T08:51:12Z", "2026-06-30T14:02:44Z", "2026-08-08T23:58:10.204518Z",
     32, "2026-08-09T00:27:31.152088Z", "MegaScale: Scaling large language model training to more than 10, 000 GPUs,"),
    ("5efa6d26-87f3-48ad-9a39-2f07ad1c15a1", "2502.04896", "Goku: Flow Based Video Generative Foundation Models",
     2, "cs.CV", "2025-02-07T12:17:01Z", "2025-02-10T06:39:29Z", "2026-08-08T20:41:55.918003Z",
     43, "2026-08-08T21:07:32.315237Z", "Megascale: Scaling large language model training to more than 10,000 gpus"),
    ("3096847c-53a4-4aa4-b1ac-49ce794eef91", "2505.15536",
     "DeepCEE: Efficient Cross-Region Model Distributed Training System under Heterogeneous GPUs and Networks",
     2, "cs.DC", "2025-05-21T14:05:33Z", "2025-11-04T09:12:20Z", "2026-08-07T14:50:27.661092Z",
     15, "2026-08-07T15:18:10.526279Z", "MegaScale: Scaling large language model training to more than 10,000 GPUs."),
    ("8c2bf174-ace9-4cdd-a052-9d1b2be0ea38", "2507.01880", "Evolving HPC services to enable ML workloads on HPE Cray EX",
     1, "cs.DC", "2025-07-02T16:40:08Z", "2025-07-02T16:40:08Z", "2026-08-06T20:11:36.030417Z",
     14, "2026-08-06T20:45:14.380662Z", "MegaScale: Scaling Large Language Model Training to More Than 10,000 GPUs,"),
    ("9b54b7f8-9df3-4bc9-922d-d99dbeffcb90", "2507.05934", "BlueLM-2.5-3B Technical Report",
     1, "cs.AI", "2025-07-08T12:31:47Z", "2025-07-08T12:31:47Z", "2026-08-06T18:58:02.447120Z",
     19, "2026-08-06T19:20:53.803437Z", "Megascale: Scaling large language model training to more than 10,000 gpus,"),
    ("8e8bd21b-d892-4068-8334-cff07a1e3c6d", "2507.22294",
     "Towards Experiment Execution in Support of Community Benchmark Workflows for HPC",
     1, "cs.DC", "2025-07-29T23:18:35Z", "2025-07-29T23:18:35Z", "2026-08-06T11:30:44.815729Z",
     45, "2026-08-06T11:57:01.397736Z", "MegaScale: Scaling large language model training to more than 10,000 GPUs"),
]

# The standing sources checked the MegaScale work again on 9 August.
REFRESHED = {"crossref": "2026-08-09T06:31:02.800959+00:00", "retraction_watch": "2026-08-09T06:30:56.120874+00:00"}


def main() -> None:
    seed = parse_document(json.loads(SEED.read_bytes())).rows
    paper = seed.paper
    new: list[Observation] = []
    own_records: list[RecordRows] = []
    for oid, arxiv_id, title, version, category, submitted, updated, snap, index, parsed, printed in CITERS:
        citing = PaperSnapshot(arxiv_id, t(snap), title, version, category, t(submitted), t(updated))
        obs = Observation(
            observation_id=UUID(oid), citing_arxiv_id=arxiv_id, reference_index=index, source="pdf_text",
            source_observed_at=t(parsed), cited_arxiv_id=paper.arxiv_id, work_id=None, printed_title=printed,
            printed_year=2024, citing=replace(citing, primary_category=None), cited=paper, work=None,
            resolution=Resolution(UUID(oid), t(parsed), "unresolved", None),
        )
        new.append(obs)
        own_records.append(RecordRows(as_of=AS_OF, paper=citing, counts=Counts(inbound=0, outbound=1), inbound=[],
                                      outbound=[obs], measurements=[], standing={}))

    standing = {}
    for work_id, known in seed.standing.items():
        receipts = {r.source: r for r in known.receipts}
        for source, at in REFRESHED.items():
            receipts[source] = Receipt(work_id, source, datetime.fromisoformat(at))
        standing[work_id] = Standing(receipts=tuple(sorted(receipts.values(), key=lambda r: r.source)),
                                     events=known.events)
    inbound = sorted(seed.inbound + new, key=lambda o: (o.citing_arxiv_id, o.reference_index, str(o.observation_id)))
    megascale = replace(seed, as_of=AS_OF, inbound=inbound, counts=Counts(inbound=len(inbound), outbound=0),
                        standing=standing)
    lines = [record.canonical(record.build_record(r)) for r in [megascale, *own_records]]
    OUT.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {OUT} ({len(lines)} documents)")


if __name__ == "__main__":
    main()
