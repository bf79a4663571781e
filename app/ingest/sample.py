"""The bundled sample, as the embedded server loads it on first start (and `pith-graph load --sample`).

First the v1 records of 2402.15627 (`app/sample/*.json`, `*.ndjson`: 5 and 9 August 2026), then real
records of the open sources (`app/sample/sources/`, provenance in its README.md) through the importers,
as `pith-graph import` runs them: a retracted work (Wakefield et al. 1998), the Lancet's notice that
retracted it, a work under an expression of concern, and arXiv 2012.11475, a paper that cites the
retracted work. They are imported on 10 August, after the v1 records, so the records of 5 and 9 August
stay exactly what they are.
"""

from __future__ import annotations

from importlib import resources
from typing import Final

import asyncpg

from app.ingest.sources import Importer, instant
from app.ingest.load import load_file

# (source, files, observed at, partial): in this order, each one import (one transaction, one instant).
# The arXiv record first: the citation row is the paper's only once the paper and its journal DOI are known.
IMPORTS: Final = (
    ("arxiv", ("arxiv-2012.11475.jsonl",), "2026-08-10T00:00:00Z", False),
    ("crossref", ("crossref-10.1016_s0140-6736-97-11096-0.json", "crossref-10.1016_s0140-6736-10-60175-4.json",
                  "crossref-10.1371_journal.pone.0064723.json"), "2026-08-10T00:01:00Z", False),
    # Three rows of the database, not the whole of it: no work is checked clean by them.
    ("retraction-watch", ("retraction_watch-excerpt.csv",), "2026-08-10T00:02:00Z", True),
    # One row of the index: a citation, not the index's count of the cited work's citations.
    ("opencitations", ("opencitations-excerpt.csv",), "2026-08-10T00:03:00Z", True),
)


def record_files() -> list[str]:
    """The sample's v1 records, oldest first."""
    base = resources.files("app") / "sample"
    return sorted(str(base / p.name) for p in base.iterdir() if p.name.endswith((".json", ".ndjson")))


async def load_sample(conn: asyncpg.Connection) -> None:
    """Load the whole bundled sample into a migrated database (each file or import in its own transaction)."""
    for path in record_files():
        await load_file(conn, path)
    base = resources.files("app") / "sample" / "sources"
    for source, names, at, partial in IMPORTS:
        await Importer(conn, source, instant(at), partial=partial).run([str(base / name) for name in names])
