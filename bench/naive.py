"""R4's contrast: the same traversal with one query per object (the N+1 pattern), kept only here."""

from __future__ import annotations

from datetime import datetime

import asyncpg
import strawberry
from strawberry.types import Info

LATEST_PAPER = """SELECT arxiv_id, title FROM paper_snapshots WHERE arxiv_id = $1 AND observed_at <= $2
ORDER BY observed_at DESC LIMIT 1"""
INBOUND_IDS = """SELECT observation_id FROM citation_observations WHERE cited_arxiv_id = $1 AND source_observed_at <= $2
ORDER BY citing_arxiv_id, reference_index, observation_id LIMIT $3"""
OBSERVATION = "SELECT * FROM citation_observations WHERE observation_id = $1"
RESOLUTION = """SELECT status FROM resolutions WHERE observation_id = $1 AND observed_at <= $2
ORDER BY observed_at DESC LIMIT 1"""
RECEIPTS = "SELECT count(*) FROM standing_receipts WHERE work_id = $1 AND observed_at <= $2"


@strawberry.type
class NaiveResolution:
    status: str


@strawberry.type
class NaiveNotice:
    state: str


@strawberry.type
class NaivePaper:
    arxiv_id: str
    title: str
    as_of: strawberry.Private[datetime]

    @strawberry.field
    async def inbound(self, info: Info, first: int = 100) -> list["NaiveObservation"]:
        conn = info.context["conn"]
        rows = await conn.fetch(INBOUND_IDS, self.arxiv_id, self.as_of, first)
        return [NaiveObservation(id=str(r["observation_id"]), as_of=self.as_of) for r in rows]


@strawberry.type
class NaiveObservation:
    id: str
    as_of: strawberry.Private[datetime]

    async def _row(self, info: Info):
        return await info.context["conn"].fetchrow(OBSERVATION, self.id)

    @strawberry.field
    async def reference_index(self, info: Info) -> int:
        return (await self._row(info))["reference_index"]

    @strawberry.field
    async def citing_paper(self, info: Info) -> NaivePaper:
        row = await self._row(info)
        paper = await info.context["conn"].fetchrow(LATEST_PAPER, row["citing_arxiv_id"], self.as_of)
        return NaivePaper(arxiv_id=paper["arxiv_id"], title=paper["title"], as_of=self.as_of)

    @strawberry.field
    async def resolution(self, info: Info) -> NaiveResolution:
        status = await info.context["conn"].fetchval(RESOLUTION, self.id, self.as_of)
        return NaiveResolution(status=status or "unresolved")

    @strawberry.field
    async def standing_notice(self, info: Info) -> NaiveNotice:
        row = await self._row(info)
        if row["work_id"] is None:
            return NaiveNotice(state="unavailable")
        checked = await info.context["conn"].fetchval(RECEIPTS, row["work_id"], self.as_of)
        return NaiveNotice(state="measured" if checked else "unavailable")


@strawberry.type
class NaiveQuery:
    @strawberry.field
    async def paper(self, info: Info, arxiv_id: str, as_of: datetime) -> NaivePaper | None:
        row = await info.context["conn"].fetchrow(LATEST_PAPER, arxiv_id, as_of)
        return NaivePaper(arxiv_id=row["arxiv_id"], title=row["title"], as_of=as_of) if row else None


schema = strawberry.Schema(query=NaiveQuery)

QUERY = """query($id: String!, $at: DateTime!) { paper(arxivId: $id, asOf: $at) { inbound(first: 100) {
  referenceIndex citingPaper { arxivId title } resolution { status } standingNotice { state } } } }"""


class SerialConnection:
    """One connection used by concurrent resolvers in turn, counting statements."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        import asyncio

        self.conn, self.lock, self.statements = conn, asyncio.Lock(), 0

    async def fetch(self, *args):
        async with self.lock:
            self.statements += 1
            return await self.conn.fetch(*args)

    async def fetchrow(self, *args):
        async with self.lock:
            self.statements += 1
            return await self.conn.fetchrow(*args)

    async def fetchval(self, *args):
        async with self.lock:
            self.statements += 1
            return await self.conn.fetchval(*args)
