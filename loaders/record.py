"""The rows of citation records: at most six statements for any number of papers and observations."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Sequence

from loaders.base import Db
from loaders.citations import PageKey, citation_counts, inbound_pages, outbound_pages
from loaders.measurements import measurements_by_paper
from loaders.papers import paper_snapshots
from loaders.rows import Caps, Counts, RecordRows
from loaders.standing import standing_by_work

SERVED_CAPS = Caps()


async def record_rows(db: Db, arxiv_ids: Sequence[str], as_of: datetime,
                      caps: Caps | None = SERVED_CAPS) -> list[RecordRows | None]:
    """Rows for each paper's record, None where the paper has no snapshot by as_of.

    caps=None itemizes every observation (an uncapped export); its disclosed caps are then the
    larger of the served caps and the paper's totals.
    """
    papers = await paper_snapshots(db, arxiv_ids, as_of)
    present = [p for p in papers if p is not None]
    if not present:
        return [None] * len(arxiv_ids)
    ids = [p.arxiv_id for p in present]
    totals = await citation_counts(db, [(a, "in") for a in ids] + [(a, "out") for a in ids], as_of)
    counts = [Counts(inbound=totals[i], outbound=totals[len(ids) + i]) for i in range(len(ids))]
    if caps is None:
        per_paper = [replace(SERVED_CAPS, inbound=max(SERVED_CAPS.inbound, c.inbound),
                             outbound=max(SERVED_CAPS.outbound, c.outbound)) for c in counts]
    else:
        per_paper = [caps] * len(ids)
    measurements = await measurements_by_paper(db, ids, as_of)
    keys = [PageKey(a) for a in ids]
    inbound = await inbound_pages(db, keys, as_of, max(c.inbound for c in per_paper))
    outbound = await outbound_pages(db, keys, as_of, max(c.outbound for c in per_paper))
    inbound = [page[: c.inbound] for page, c in zip(inbound, per_paper)]
    outbound = [page[: c.outbound] for page, c in zip(outbound, per_paper)]
    work_ids = list(dict.fromkeys(o.work.work_id for page in inbound + outbound for o in page if o.work is not None))
    standing = dict(zip(work_ids, await standing_by_work(db, work_ids, as_of))) if work_ids else {}

    built = {
        p.arxiv_id: RecordRows(as_of=as_of, paper=p, counts=counts[i], inbound=inbound[i], outbound=outbound[i],
                               measurements=measurements[i], standing=standing, caps=per_paper[i])
        for i, p in enumerate(present)
    }
    return [built.get(a) if p is not None else None for a, p in zip(arxiv_ids, papers)]
