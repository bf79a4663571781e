"""The DataLoaders of one request and one instant: one loader per batch key, built per request."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import dataclass
from functools import cached_property
from datetime import datetime
from typing import Any, Awaitable, Callable, Coroutine, Sequence
from uuid import UUID

from aiodataloader import DataLoader

from loaders.base import RECORD_BUILD_UNITS, Db, Turns, charge
from loaders.citations import (PageKey, citation_counts, citations_by_year, inbound_pages, observations_at,
                               observations_by_id, outbound_pages)
from loaders.measurements import measurements_by_paper
from loaders.papers import paper_snapshots, paper_snapshots_at
from loaders.record import SERVED_CAPS, record_histories, record_rows
from loaders.rows import Measurement, Observation, PaperSnapshot, RecordRows, Standing, WorkSnapshot
from loaders.standing import standing_at, standing_by_work
from loaders.timeline import Entry, instant, timelines
from loaders.works import paper_dois, work_measurements, work_snapshots, work_snapshots_at, works_by_doi


@dataclass(frozen=True, slots=True)
class PageRequest:
    """A page of one paper's edges; pages that share everything but the paper and cursor batch together."""

    arxiv_id: str
    after: tuple | None  # the cursor's key: the page starts after it (forward) or ends before it (backward)
    limit: int
    statuses: tuple[str, ...] | None = None
    cites_retracted: bool | None = None
    backward: bool = False


@dataclass(frozen=True, slots=True)
class TimelineRequest:
    """A page of one paper's timeline: entries with low <= at <= high (Unix seconds), records for `first`."""

    arxiv_id: str
    low: int
    high: int
    first: int


@dataclass(frozen=True, slots=True)
class CountRequest:
    arxiv_id: str
    direction: str  # "in" or "out"
    statuses: tuple[str, ...] | None = None
    cites_retracted: bool | None = None


def _grouped(fetch: Callable[[Any, list[Any]], Awaitable[list[Any]]]):
    """Batch function that runs one statement per group of keys sharing the same filters."""

    async def batch(keys: Sequence[Any]) -> list[Any]:
        groups: dict[Any, list[int]] = defaultdict(list)
        for i, key in enumerate(keys):
            groups[group_of(key)].append(i)
        results: list[Any] = [None] * len(keys)
        for group, positions in groups.items():
            found = await fetch(group, [keys[i] for i in positions])
            for i, value in zip(positions, found):
                results[i] = value
        return results

    return batch


def group_of(key: Any) -> tuple:
    if isinstance(key, PageRequest):
        return (key.limit, key.statuses, key.cites_retracted, key.backward)
    return (key.direction, key.statuses, key.cites_retracted)


def _across(one: Callable[[Db, list[Any], datetime], Awaitable[list[Any]]],
            pairs: Callable[[Db, list[tuple[Any, datetime]]], Awaitable[list[Any]]], db: Db):
    """Batch function over (key, instant) keys: the one-instant statement when every key has the same
    instant (the common case, unchanged), else one statement for all the pairs."""

    async def batch(keys: Sequence[tuple[Any, datetime]]) -> list[Any]:
        instants = {at for _, at in keys}
        if len(instants) == 1:
            return await one(db, [key for key, _ in keys], instants.pop())
        return await pairs(db, list(keys))

    return batch


class AcrossInstants:
    """One request's loaders keyed by (key, instant), under the per-instant Loaders of the lookups that
    ids naming many instants fan out to (nodes(ids:), each id as of its own instant): the per-instant
    loaders of a tick pass their keys down here, so a kind costs one statement however many instants."""

    def __init__(self, db: Db) -> None:
        self.db = db

    @cached_property
    def paper(self) -> DataLoader:
        return DataLoader(_across(paper_snapshots, paper_snapshots_at, self.db), cache=False)

    @cached_property
    def work(self) -> DataLoader:
        return DataLoader(_across(work_snapshots, work_snapshots_at, self.db), cache=False)

    @cached_property
    def observation(self) -> DataLoader:
        return DataLoader(_across(observations_by_id, observations_at, self.db), cache=False)

    @cached_property
    def standing(self) -> DataLoader:
        return DataLoader(_across(standing_by_work, standing_at, self.db), cache=False)


class Loaders:
    """Every loader for one instant. Keys are plain values; results are rows, never GraphQL types.

    With `across` (a request's AcrossInstants), lookups by id (papers, works, observations, standing)
    batch with the same lookups of the request's other instants."""

    def __init__(self, db: Db, as_of: datetime, across: AcrossInstants | None = None) -> None:
        self.db = db
        self.as_of = as_of
        self.across = across
        self._caches: list[dict[Any, Any]] = []

    def _loader(self, batch: Callable[[list[Any]], Coroutine[Any, Any, list[Any]]]) -> DataLoader:
        cache: dict[Any, Any] = {}
        self._caches.append(cache)
        return DataLoader(batch, cache_map=cache)

    def release(self) -> list[dict[Any, Any]]:
        """Drop every loader made, once the operation is over, and give their caches to free (let_go). A
        loader's batch function is a method of this object, which holds the loader: a reference cycle that
        refcounting cannot free, holding every row the operation loaded (a heavy one's hundreds of thousands
        of objects) until a collection of the older generations walked them all: 300-470 ms with the event
        loop stopped, every request of the process waiting. Without the loaders there is no cycle."""
        for name, value in list(vars(self).items()):
            if isinstance(value, DataLoader):
                del self.__dict__[name]
        caches, self._caches = self._caches, []
        return caches

    # Each loader is made when a request first needs it: most requests use one or two.
    @cached_property
    def paper(self) -> DataLoader:
        return self._loader(self._papers)

    @cached_property
    def inbound(self) -> DataLoader:
        return self._loader(_grouped(self._inbound))

    @cached_property
    def outbound(self) -> DataLoader:
        return self._loader(_grouped(self._outbound))

    @cached_property
    def count(self) -> DataLoader:
        return self._loader(_grouped(self._counts))

    @cached_property
    def standing(self) -> DataLoader:
        return self._loader(self._standing)

    @cached_property
    def measurements(self) -> DataLoader:
        return self._loader(self._measurements)

    @cached_property
    def observation(self) -> DataLoader:
        return self._loader(self._observations)

    @cached_property
    def record(self) -> DataLoader:
        return self._loader(self._records)

    @cached_property
    def work(self) -> DataLoader:
        return self._loader(self._works)

    @cached_property
    def timeline(self) -> DataLoader:
        return self._loader(self._timelines)

    @cached_property
    def work_inbound(self) -> DataLoader:
        """Pages of the observations citing a work (PageRequest.arxiv_id holds the work id)."""
        return self._loader(_grouped(self._work_inbound))

    @cached_property
    def work_by_doi(self) -> DataLoader:
        return self._loader(self._works_by_doi)

    @cached_property
    def work_measurements(self) -> DataLoader:
        return self._loader(self._work_measurements)

    @cached_property
    def paper_doi(self) -> DataLoader:
        return self._loader(self._paper_dois)

    @cached_property
    def citations_by_year(self) -> DataLoader:
        return self._loader(self._citations_by_year)

    async def _citations_by_year(self, keys: Sequence[str]) -> list[list[tuple[int, int]]]:
        return await citations_by_year(self.db, keys, self.as_of)

    async def _works_by_doi(self, keys: Sequence[str]) -> list[WorkSnapshot | None]:
        return await works_by_doi(self.db, keys, self.as_of)

    async def _work_measurements(self, keys: Sequence[UUID]) -> list[list[Measurement]]:
        return await work_measurements(self.db, keys, self.as_of)

    async def _paper_dois(self, keys: Sequence[str]) -> list[str | None]:
        return await paper_dois(self.db, keys, self.as_of)

    async def _papers(self, keys: Sequence[str]) -> list[PaperSnapshot | None]:
        if self.across is not None:
            return await self.across.paper.load_many([(key, self.as_of) for key in keys])
        return await paper_snapshots(self.db, keys, self.as_of)

    async def _inbound(self, group: tuple, keys: list[PageRequest], of_works: bool = False) -> list[list[Observation]]:
        limit, statuses, _, backward = group
        pages = await inbound_pages(self.db, [PageKey(k.arxiv_id, k.after) for k in keys], self.as_of, limit, statuses,
                                    backward, of_works)
        await self._prime(pages)
        return pages

    async def _outbound(self, group: tuple, keys: list[PageRequest]) -> list[list[Observation]]:
        limit, statuses, cites_retracted, backward = group
        pages = await outbound_pages(self.db, [PageKey(k.arxiv_id, k.after) for k in keys], self.as_of, limit,
                                     statuses, cites_retracted, backward)
        await self._prime(pages)
        return pages

    async def _work_inbound(self, group: tuple, keys: list[PageRequest]) -> list[list[Observation]]:
        return await self._inbound(group, keys, of_works=True)

    async def _prime(self, pages: list[list[Observation]]) -> None:
        # Rows carry the citing and cited snapshots: later lookups of those papers cost nothing. (In stretches:
        # a batch may hold 10,000 observations.)
        turns = Turns()
        for page in pages:
            for o in page:
                self.paper.prime(o.citing.arxiv_id, o.citing)
                if o.cited is not None:
                    self.paper.prime(o.cited.arxiv_id, o.cited)
            await turns.take()

    async def _counts(self, group: tuple, keys: list[CountRequest]) -> list[int]:
        direction, statuses, cites_retracted = group
        return await citation_counts(self.db, [(k.arxiv_id, direction) for k in keys], self.as_of, statuses,
                                     cites_retracted)

    async def _standing(self, keys: Sequence[UUID]) -> list[Standing]:
        if self.across is not None:
            return await self.across.standing.load_many([(key, self.as_of) for key in keys])
        return await standing_by_work(self.db, keys, self.as_of)

    async def _measurements(self, keys: Sequence[str]) -> list[list[Measurement]]:
        return await measurements_by_paper(self.db, keys, self.as_of)

    async def _observations(self, keys: Sequence[UUID]) -> list[Observation | None]:
        if self.across is not None:
            return await self.across.observation.load_many([(key, self.as_of) for key in keys])
        return await observations_by_id(self.db, keys, self.as_of)

    async def _works(self, keys: Sequence[UUID]) -> list[WorkSnapshot | None]:
        if self.across is not None:
            return await self.across.work.load_many([(key, self.as_of) for key in keys])
        return await work_snapshots(self.db, keys, self.as_of)

    async def _timelines(self, keys: Sequence[TimelineRequest]) -> list[tuple[list[Entry], list[RecordRows | None]]]:
        """Every paper's page at once: two statements per window asked (one, usually), then the records at
        all the pages' entries in one set of six."""
        windows: dict[tuple[int, int], list[int]] = defaultdict(list)
        for i, key in enumerate(keys):
            windows[(key.low, key.high)].append(i)
        entries: list[list[Entry]] = [[] for _ in keys]
        for (low, high), places in windows.items():
            found = await timelines(self.db, [keys[i].arxiv_id for i in places], low, high, SERVED_CAPS.inbound,
                                    SERVED_CAPS.outbound)
            for i, page in zip(places, found):
                entries[i] = page
        pairs = [(key.arxiv_id, instant(e.at)) for key, page in zip(keys, entries) for e in page[:key.first]]
        rows = iter(await record_histories(self.db, pairs))
        return [(page, [next(rows) for _ in page[:key.first]]) for key, page in zip(keys, entries)]

    async def _records(self, keys: Sequence[str]) -> list[RecordRows | None]:
        found = await record_rows(self.db, keys, self.as_of)
        # Building each record, and counting its totals (a scan of every observation of the paper).
        charge(self.db, sum(RECORD_BUILD_UNITS + (r.counts.inbound + r.counts.outbound) // 20
                            for r in found if r is not None))
        return found


_LETTING_GO: set[asyncio.Task[None]] = set()


async def _let_go(caches: list[dict[Any, Any]]) -> None:
    turns = Turns()
    for cache in caches:
        while cache:
            await turns.take()
            cache.popitem()


def let_go(caches: list[dict[Any, Any]]) -> None:
    """Free what an operation's loaders held, in stretches (loaders.base.Turns): a heavy operation's rows freed
    at once held the event loop for 40 ms."""
    if not any(caches):
        return
    try:
        task = asyncio.get_running_loop().create_task(_let_go(caches))
    except RuntimeError:  # no loop running: freed here
        for cache in caches:
            cache.clear()
        return
    _LETTING_GO.add(task)
    task.add_done_callback(_LETTING_GO.discard)
