"""A bounded multi-hop walk from one paper: what GraphQL `neighbourhood` and its HTTP exports both serve."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence
from uuid import UUID

from loaders.base import charge
from loaders.dataloaders import Loaders, PageRequest

HOP_UNITS = 100  # a hop's batched statement over a frontier (bench/calibrate.py)
from loaders.rows import Observation, PaperSnapshot


@dataclass
class Walk:
    papers: dict[str, PaperSnapshot]  # the start first, then in order of discovery
    edges: dict[UUID, Observation]  # each edge followed, once
    truncated: bool  # perPaper or the paper cap cut the walk


async def walk(loaders: Loaders, root: str, directions: Sequence[str], depth: int, per_paper: int,
               max_papers: int) -> Walk | None:
    """Follow at most `per_paper` edges of each paper (record order) for `depth` hops in the directions
    ('in', 'out'); one batched statement per hop and direction, over as much of the frontier as the walk has
    room for. At most `max_papers` papers and as many edges (what its price counts): the frontier is read a
    slice at a time, each slice no larger than the edges still allowed could use, and the walk stops when
    either is full (truncated), so no hop reads a hundred edges of each of 10,000 papers to keep a few.
    None when the start is unknown."""
    start = await loaders.paper.load(root)
    if start is None:
        return None
    found = Walk({root: start}, {}, False)
    frontier = [root]
    for _ in range(depth):
        reached: list[str] = []
        for d in directions:
            loader = loaders.inbound if d == "in" else loaders.outbound
            todo = frontier
            while todo:
                room = max_papers - len(found.edges)
                if room <= 0:
                    found.truncated = True
                    break
                chunk, todo = todo[:-(-room // per_paper)], todo[-(-room // per_paper):]
                pages = await loader.load_many([PageRequest(a, None, per_paper + 1) for a in chunk])
                charge(loaders.db, HOP_UNITS)
                for page in pages:
                    found.truncated |= len(page) > per_paper
                    for o in page[:per_paper]:
                        neighbour = o.citing if d == "in" else o.cited
                        if neighbour is None:
                            continue
                        if len(found.edges) >= max_papers and o.observation_id not in found.edges:
                            found.truncated = True
                            continue
                        if neighbour.arxiv_id not in found.papers:
                            if len(found.papers) >= max_papers:
                                found.truncated = True
                                continue
                            found.papers[neighbour.arxiv_id] = neighbour
                            reached.append(neighbour.arxiv_id)
                        found.edges.setdefault(o.observation_id, o)
        frontier = reached
        if not frontier:
            break
    return found
