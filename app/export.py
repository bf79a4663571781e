"""The citation graph in analysis formats: CSV (a zip of nodes.csv and edges.csv), GraphML, ndjson, Parquet.

Every writer takes nodes, then edges, one at a time, and writes to a binary stream as it goes, so an
export of any size holds one row at a time (Parquet: one batch of rows). Nodes are papers, works and
unlinked references (`kind`); edges are citation observations, from the citing paper to what it cites.

Node ids are typed and never numeric (`arxiv:1501.00010`, `work:<uuid>`, `reference:<uuid>`), so a
reader that guesses column types (pandas.read_csv, read_json) keeps them as text and every edge end
equals a node id. The bare arXiv id is in the `arxiv_id` column (text; pass dtype to keep it so).
"""

from __future__ import annotations

import csv
import io
import re
import zipfile
from datetime import datetime
from typing import IO, Any, Final, NamedTuple
from xml.sax.saxutils import escape as _escape, quoteattr as _quoteattr

from loaders.rows import retracted_by, shown_reference_index

FORMATS: Final = ("csv", "graphml", "ndjson", "parquet")
MEDIA_TYPES: Final = {"csv": "application/zip", "graphml": "application/graphml+xml",
                      "ndjson": "application/x-ndjson"}


class Node(NamedTuple):  # a tuple: writers take its values as they are, with no per-row conversion
    id: str  # "arxiv:<arXiv id>", "work:<uuid>", or "reference:<observation uuid>"
    kind: str  # paper, work or reference
    arxiv_id: str | None = None
    title: str | None = None
    primary_category: str | None = None
    submitted: str | None = None  # papers: when version 1 was submitted (UTC, ISO 8601)
    latest_version: int | None = None
    doi: str | None = None
    year: int | None = None


class Edge(NamedTuple):
    source: str  # the citing paper's node id
    target: str
    observation_id: str
    reference_index: int | None  # None: the source gives no place in the reference list (OpenCitations)
    citation_source: str  # how the reference was extracted
    resolution_status: str
    standing_state: str  # measured, or unavailable (no linked work, or no source has checked it)
    cited_work_retracted: bool
    # The latest of the cited work's events at the instant (the last of its notice's events), when measured.
    cited_work_event_type: str | None = None
    cited_work_event_source: str | None = None
    cited_work_event_reported_at: str | None = None  # UTC, ISO 8601
    cited_work_event_observed_at: str | None = None


# Characters XML 1.0 cannot carry at all (C0 controls but tab, newline, return; U+FFFE, U+FFFF): written
# as U+FFFD in GraphML, the one format with that limit.
_NOT_XML: Final = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def escape(text: str) -> str:
    return _escape(_NOT_XML.sub("\ufffd", text))


def quoteattr(text: str) -> str:
    return _quoteattr(_NOT_XML.sub("\ufffd", text))


NODE_FIELDS: Final = Node._fields
EDGE_FIELDS: Final = Edge._fields
_TYPES: Final = {"latest_version": "int", "year": "int", "reference_index": "int", "cited_work_retracted": "boolean"}


def z_text(value: datetime | None) -> str | None:
    from app.record import z_time

    return z_time(value)


def paper_node_id(arxiv_id: str) -> str:
    return f"arxiv:{arxiv_id}"


def work_node_id(work_id: Any) -> str:
    return f"work:{work_id}"


def reference_node_id(observation_id: Any) -> str:
    return f"reference:{observation_id}"


class Writer:
    """Nodes first, then edges; `close` finishes the file (it does not close the stream)."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out = out
        self.nodes = self.edges = 0

    def node(self, node: Node) -> None:
        self.nodes += 1
        self._node(node)

    def edge(self, edge: Edge) -> None:
        self.edges += 1
        self._edge(edge)

    def _node(self, node: Node) -> None:
        raise NotImplementedError

    def _edge(self, edge: Edge) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class NdjsonWriter(Writer):
    def _line(self, kind: str, row: Any) -> None:
        import orjson

        values = {"type": kind}
        values.update(zip(NODE_FIELDS if kind == "node" else EDGE_FIELDS, row))
        self.out.write(orjson.dumps(values) + b"\n")

    def _node(self, node: Node) -> None:
        self._line("node", node)

    def _edge(self, edge: Edge) -> None:
        self._line("edge", edge)


class GraphmlWriter(Writer):
    """GraphML as networkx.read_graphml and igraph read it: typed keys, a directed graph, edge ids."""

    def __init__(self, out: IO[bytes]) -> None:
        super().__init__(out)
        keys = [(name, "node") for name in NODE_FIELDS if name != "id"]
        keys += [(name, "edge") for name in EDGE_FIELDS if name not in ("source", "target")]
        head = ['<?xml version="1.0" encoding="UTF-8"?>\n'
                '<graphml xmlns="http://graphml.graphdrawing.org/xmlns">\n']
        head += [f'<key id="{name}" for="{scope}" attr.name="{name}" attr.type="{_TYPES.get(name, "string")}"/>\n'
                 for name, scope in keys]
        head.append('<graph id="citations" edgedefault="directed">\n')
        self.out.write("".join(head).encode())

    @staticmethod
    def _data(names: tuple[str, ...], row: Any, skip: tuple[str, ...]) -> str:
        parts = []
        for name, value in zip(names, row):
            if name in skip or value is None:
                continue
            text = ("true" if value else "false") if isinstance(value, bool) else escape(str(value))
            parts.append(f'<data key="{name}">{text}</data>')
        return "".join(parts)

    def _node(self, node: Node) -> None:
        self.out.write(f'<node id={quoteattr(node.id)}>{self._data(NODE_FIELDS, node, ("id",))}</node>\n'.encode())

    def _edge(self, edge: Edge) -> None:
        data = self._data(EDGE_FIELDS, edge, ("source", "target"))
        self.out.write(f'<edge id={quoteattr(edge.observation_id)} source={quoteattr(edge.source)} '
                       f'target={quoteattr(edge.target)}>{data}</edge>\n'.encode())

    def close(self) -> None:
        self.out.write(b"</graph>\n</graphml>\n")


class CsvWriter(Writer):
    """A zip of nodes.csv and edges.csv, each with a header row; written as it goes (no seeking)."""

    def __init__(self, out: IO[bytes]) -> None:
        super().__init__(out)
        self.zip = zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED)
        self.member: IO[bytes] | None = None
        self.text: io.TextIOWrapper | None = None
        self._open("nodes.csv", NODE_FIELDS)

    def _open(self, name: str, header: tuple[str, ...]) -> None:
        if self.text is not None:
            self.text.close()  # closes the member too
        self.member = self.zip.open(name, "w", force_zip64=True)
        self.text = io.TextIOWrapper(self.member, encoding="utf-8", newline="")
        self.rows = csv.writer(self.text)
        self.rows.writerow(header)

    @staticmethod
    def _cells(row: Any) -> list[Any]:
        return [("true" if v else "false") if isinstance(v, bool) else ("" if v is None else v) for v in row]

    def _node(self, node: Node) -> None:
        self.rows.writerow(self._cells(node))

    def _edge(self, edge: Edge) -> None:
        if self.edges == 1:
            self._open("edges.csv", EDGE_FIELDS)
        self.rows.writerow(self._cells(edge))

    def close(self) -> None:
        if self.edges == 0:
            self._open("edges.csv", EDGE_FIELDS)
        assert self.text is not None
        self.text.close()
        self.zip.close()


class ParquetWriter(Writer):
    """nodes.parquet and edges.parquet in a folder (`out` is unused: Parquet needs files), in row groups."""

    BATCH = 50_000

    def __init__(self, folder: str) -> None:
        super().__init__(io.BytesIO())
        import importlib.util
        import os

        if importlib.util.find_spec("pyarrow") is None:
            raise SystemExit("error: Parquet needs pyarrow: pip install 'pith-graph[parquet]'")

        os.makedirs(folder, exist_ok=True)
        self.folder = folder
        self.batch: list[tuple] = []
        self.writer: Any = None
        self._start("nodes")

    def _schema(self, kind: str) -> Any:
        import pyarrow as pa

        names = NODE_FIELDS if kind == "nodes" else EDGE_FIELDS
        types = {"int": pa.int64(), "boolean": pa.bool_()}
        return pa.schema([(n, types.get(_TYPES.get(n, ""), pa.string())) for n in names])

    def _start(self, kind: str) -> None:
        import pyarrow.parquet as pq

        self.kind = kind
        self.writer = pq.ParquetWriter(f"{self.folder}/{kind}.parquet", self._schema(kind))

    def _flush(self) -> None:
        import pyarrow as pa

        if self.batch:
            schema = self._schema(self.kind)
            columns = list(zip(*self.batch))
            self.writer.write_table(pa.table([pa.array(c, type=f.type) for c, f in zip(columns, schema)],
                                             schema=schema))
            self.batch = []

    def _add(self, row: Any) -> None:
        self.batch.append(row)
        if len(self.batch) >= self.BATCH:
            self._flush()

    def _node(self, node: Node) -> None:
        self._add(node)

    def _edge(self, edge: Edge) -> None:
        if self.kind == "nodes":
            self._switch()
        self._add(edge)

    def _switch(self) -> None:
        self._flush()
        self.writer.close()
        self._start("edges")

    def close(self) -> None:
        if self.kind == "nodes":
            self._switch()
        self._flush()
        self.writer.close()


def writer_for(format: str, out: IO[bytes]) -> Writer:
    return {"csv": CsvWriter, "graphml": GraphmlWriter, "ndjson": NdjsonWriter}[format](out)


class Chunks:
    """A write-only stream whose bytes are taken out as they come (for a streamed HTTP response)."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def write(self, data: bytes) -> int:
        self.parts.append(bytes(data))
        return len(data)

    def flush(self) -> None:
        pass

    def take(self) -> bytes:
        data, self.parts = b"".join(self.parts), []
        return data


def paper_node(paper: Any) -> Node:
    return Node(id=paper_node_id(paper.arxiv_id), kind="paper", arxiv_id=paper.arxiv_id, title=paper.title,
                primary_category=paper.primary_category, submitted=z_text(paper.submitted_at),
                latest_version=paper.latest_version)


def cited_work_retracted(state: str, standing: Any) -> bool:
    """The rule of `citesRetracted`: a measured notice whose deciding event (loaders.rows.retracted_by)
    is a retraction or withdrawal."""
    if state != "measured" or standing is None:
        return False
    return retracted_by(standing.events)  # the events standing at the instant


def paper_edge(obs: Any, standing: dict[Any, Any]) -> Edge:
    """An edge between two papers (a walk's edge), with the cited work's standing at the walk's instant."""
    from app.record import notice_state

    state, _, known = notice_state(obs, standing)
    latest = known.events[-1] if state == "measured" and known is not None and known.events else None
    return Edge(source=paper_node_id(obs.citing.arxiv_id), target=paper_node_id(obs.cited.arxiv_id),
                observation_id=str(obs.observation_id),
                reference_index=shown_reference_index(obs.source, obs.reference_index),
                citation_source=obs.source, resolution_status=obs.resolution.status, standing_state=state,
                cited_work_retracted=cited_work_retracted(state, known),
                cited_work_event_type=latest.event_type if latest else None,
                cited_work_event_source=latest.source if latest else None,
                cited_work_event_reported_at=z_text(latest.reported_at) if latest else None,
                cited_work_event_observed_at=z_text(latest.observed_at) if latest else None)
