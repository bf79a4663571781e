"""The rows of citation records: at most six statements for any number of papers and observations."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any, Callable, Sequence, TypeVar

from loaders.base import Db, at_each, by_instant
from loaders.citations import (
    CITATION_COUNTS_TEMPLATE,
    INBOUND_PAGES_TEMPLATE,
    OUTBOUND_PAGES_TEMPLATE,
    PageKey,
    citation_counts,
    inbound_pages,
    outbound_pages,
    pages_from_rows,
    totals_from_rows,
)
from loaders.measurements import MEASUREMENTS_TEMPLATE, measurements_by_paper, measurements_from_rows
from loaders.papers import PAPER_SNAPSHOTS_TEMPLATE, paper_snapshots, papers_from_rows
from loaders.rows import Caps, Counts, RecordRows
from loaders.standing import STANDING_TEMPLATE, standing_by_work, standing_from_rows

T = TypeVar("T")

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


async def record_history(db: Db, arxiv_id: str, instants: Sequence[datetime],
                         caps: Caps = SERVED_CAPS) -> list[RecordRows | None]:
    """Rows for one paper's record at each instant (None where it has no snapshot by then): the same six
    statements as one record, each run at every instant at once (loaders.base.at_each)."""
    n = len(instants)
    papers = [found[0] for found in _each(
        await db.fetch(at_each(PAPER_SNAPSHOTS_TEMPLATE, 2), [arxiv_id], list(instants)), n,
        lambda rows: papers_from_rows(rows, 1))]
    at = [t for t, p in zip(instants, papers) if p is not None]
    if not at:
        return [None] * n
    m = len(at)
    totals = _each(await db.fetch(at_each(CITATION_COUNTS_TEMPLATE, 3), [arxiv_id, arxiv_id], ["in", "out"],
                                  at, None, None), m, lambda rows: totals_from_rows(rows, 2))
    measurements = _each(await db.fetch(at_each(MEASUREMENTS_TEMPLATE, 2), [arxiv_id], at), m,
                         lambda rows: measurements_from_rows(rows, [arxiv_id])[0])
    inbound = _each(await db.fetch(at_each(INBOUND_PAGES_TEMPLATE, 5), [arxiv_id], [None], [None], [None], at,
                                   caps.inbound, None), m, lambda rows: pages_from_rows(rows, 1)[0])
    outbound = _each(await db.fetch(at_each(OUTBOUND_PAGES_TEMPLATE, 4), [arxiv_id], [None], [None], at,
                                    caps.outbound, None, None), m, lambda rows: pages_from_rows(rows, 1)[0])
    work_ids = list(dict.fromkeys(o.work.work_id for page in inbound + outbound for o in page if o.work is not None))
    if work_ids:
        standing = _each(await db.fetch(at_each(STANDING_TEMPLATE, 2), work_ids, at), m,
                         lambda rows: dict(zip(work_ids, standing_from_rows(rows, work_ids))))
    else:
        standing = [{} for _ in at]
    built = iter([
        RecordRows(as_of=t, paper=p, counts=Counts(inbound=c[0], outbound=c[1]), inbound=i, outbound=o,
                   measurements=ms, standing=s, caps=caps)
        for t, p, c, i, o, ms, s in zip(at, [p for p in papers if p is not None], totals, inbound, outbound,
                                         measurements, standing)
    ])
    return [next(built) if p is not None else None for p in papers]


def _each(rows: Sequence[Any], n: int, convert: Callable[[list[Any]], T]) -> list[T]:
    return [convert(group) for group in by_instant(rows, n)]
