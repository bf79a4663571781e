"""The bulk route: a paper's whole inbound (or outbound) list over HTTP, uncapped, at one instant.

    GET /paper/{arxiv_id}/inbound.ndjson    (also .csv, and .parquet where pyarrow is installed)
    GET /paper/{arxiv_id}/outbound.ndjson   ?as_of=<instant> (default: now)

Each row is an edge of the graph export (app.export.Edge: the same columns, the same typed node ids), in
the connection's order (inbound: citing arXiv id, reference index, observation id; outbound: reference
index, observation id). The rows are read in keyset batches of BATCH by the statements GraphQL pages
with (loaders.citations), all inside one read-only REPEATABLE READ transaction, so the list is the one
paging would give at that instant, whatever is imported meanwhile; the server holds one batch at a time.

It is governed as every operation is (app.governor): who asks, their budget, a heavy slot for heavy
work. The price is a unit per row (ROW_UNITS; GraphQL charges about 20 a row for the same columns
paged), from the paper's stored observations (paper_observation_counts, an upper bound), charged
before the first byte and settled to the rows sent. There is no per-operation cap: the client's budget
is the limit.
"""

from __future__ import annotations

import csv
import io
from typing import Any, AsyncIterator, Final

import orjson

from app import export
from app.cost import PRICES, Price, paper_sizes
from app.export import EDGE_FIELDS, Edge, paper_node_id, reference_node_id, work_node_id, z_text

BATCH: Final = 2_000  # rows per statement
ROW_UNITS: Final = 1  # work units a row costs (GraphQL paging: ~20 for the same columns)
DIRECTIONS: Final = ("inbound", "outbound")
MEDIA_TYPES: Final = {"ndjson": "application/x-ndjson", "csv": "text/csv; charset=utf-8",
                      "parquet": "application/vnd.apache.parquet"}


def parquet_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("pyarrow") is not None


def formats() -> tuple[str, ...]:
    return tuple(f for f in MEDIA_TYPES if f != "parquet" or parquet_available())


def price(rows: int) -> Price:
    """What a list of at most `rows` rows is charged before it streams (a statement a batch besides)."""
    return Price(0, ROW_UNITS * rows + PRICES["statement"] * (rows // BATCH + 2))


def observation_edge(obs: Any, standing: dict[Any, Any]) -> Edge:
    """An observation as the graph export writes its edge: to the cited Pith paper when it has a snapshot
    at the instant, else to the linked work when the work has one, else to the unlinked reference."""
    from app.record import notice_state

    state, _, known = notice_state(obs, standing)
    latest = known.events[-1] if state == "measured" and known is not None and known.events else None
    target = (paper_node_id(obs.cited.arxiv_id) if obs.cited is not None else
              work_node_id(obs.work.work_id) if obs.work is not None else reference_node_id(obs.observation_id))
    return Edge(source=paper_node_id(obs.citing.arxiv_id), target=target, observation_id=str(obs.observation_id),
                reference_index=obs.reference_index, citation_source=obs.source,
                resolution_status=obs.resolution.status, standing_state=state,
                cited_work_retracted=export.cited_work_retracted(state, known),
                cited_work_event_type=latest.event_type if latest else None,
                cited_work_event_source=latest.source if latest else None,
                cited_work_event_reported_at=z_text(latest.reported_at) if latest else None,
                cited_work_event_observed_at=z_text(latest.observed_at) if latest else None)


async def edges(session: Any, arxiv_id: str, direction: str, as_of: Any) -> AsyncIterator[list[Edge]]:
    """The paper's whole list in the connection's order, a batch of edges at a time, from the session's
    one snapshot."""
    from loaders.citations import PageKey, inbound_pages, outbound_pages
    from loaders.dataloaders import Loaders

    after: tuple | None = None
    while True:
        key = PageKey(arxiv_id, after)
        if direction == "inbound":
            (page,) = await inbound_pages(session, [key], as_of, BATCH)
        else:
            (page,) = await outbound_pages(session, [key], as_of, BATCH)
        if not page:
            return
        works = list(dict.fromkeys(o.work.work_id for o in page if o.work is not None))
        loaders = Loaders(session, as_of)  # one batch's: nothing is kept from one batch to the next
        standing = dict(zip(works, await loaders.standing.load_many(works))) if works else {}
        yield [observation_edge(o, standing) for o in page]
        if len(page) < BATCH:
            return
        last = page[-1]
        after = ((last.citing_arxiv_id, last.reference_index, last.observation_id) if direction == "inbound"
                 else (last.reference_index, last.observation_id))


class Encoder:
    """Edges to bytes, a batch at a time: ndjson lines as the graph export writes its edges, CSV with the
    export's header, or Parquet row groups (one per batch)."""

    def __init__(self, format: str) -> None:
        self.format = format
        self.buffer = io.BytesIO()
        if format == "csv":
            self.text = io.TextIOWrapper(self.buffer, encoding="utf-8", newline="", write_through=True)
            self.rows = csv.writer(self.text)
            self.rows.writerow(EDGE_FIELDS)
        elif format == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            types = {"reference_index": pa.int64(), "cited_work_retracted": pa.bool_()}
            self.schema = pa.schema([(n, types.get(n, pa.string())) for n in EDGE_FIELDS])
            self.writer = pq.ParquetWriter(pa.PythonFile(self.buffer, mode="w"), self.schema)

    def take(self) -> bytes:
        data = self.buffer.getvalue()
        self.buffer.seek(0)
        self.buffer.truncate()
        return data

    def batch(self, batch: list[Edge]) -> bytes:
        if self.format == "ndjson":
            return b"".join(orjson.dumps({"type": "edge", **e._asdict()}) + b"\n" for e in batch)
        if self.format == "csv":
            for e in batch:
                self.rows.writerow([("true" if v else "false") if isinstance(v, bool) else ("" if v is None else v)
                                    for v in e])
            return self.take()
        import pyarrow as pa

        columns = list(zip(*batch))
        self.writer.write_table(pa.table([pa.array(c, type=f.type) for c, f in zip(columns, self.schema)],
                                         schema=self.schema))
        return self.take()

    def close(self) -> bytes:
        if self.format == "parquet":
            self.writer.close()
        return self.take()


async def sized(session: Any, arxiv_id: str, direction: str) -> int:
    """The rows the list can have at most (the paper's stored observations that way, at any visibility)."""
    size = (await paper_sizes(session, [arxiv_id]))[arxiv_id]
    return size.inbound if direction == "inbound" else size.outbound
