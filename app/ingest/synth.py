"""A deterministic synthetic citation graph with realistic shapes, for scale tests and benchmarks.

Papers arrive month by month; each cites 20 to 60 references. About half point at earlier Pith
papers, chosen by a copying model (cite what others cited), which gives heavy-tailed inbound counts:
most papers have a few citers, a few have thousands. The rest point at external works drawn from a
shared, Zipf-weighted pool, so works are shared between references. Resolution statuses are mostly
verified_exact with every other status present; unresolved and malformed references have no work
link. A small share of works carry corrections, expressions of concern and retractions. Several
standing sources check works at different times, two or three measurement sources count citations,
and papers have one to three snapshots over time. The same --papers and --seed give the same rows.

`hub_citations` (--hub-citations N) makes the first paper a hub of arXiv's shape: besides what the
copying model gives it, later papers cite it N times in all, spread evenly over them in id order (a
paper cites it more than once only when N exceeds the papers after it), each an extra reference at the
end of the citing paper's bibliography, verified exact. Without it the rows are as before.

Every source is named synthetic_* (loaders.rows.SYNTHETIC_PREFIX), so receipts, records and /evidence
say the data are generated; every event is written with its source's receipt at that instant (the
rule the database keeps for every writer, migration 0009).
"""

from __future__ import annotations

import bisect
import itertools
import random
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Iterator

from loaders.rows import SYNTHETIC_PREFIX as S

STATUS_WEIGHTS = (
    ("verified_exact", 80), ("verified_fuzzy", 7), ("unresolved", 6), ("parse_uncertain", 3),
    ("malformed_identifier", 2), ("metadata_mismatch", 2),
)
LINKED = {"verified_exact", "verified_fuzzy", "metadata_mismatch"}
CATEGORIES = ("cs.LG", "cs.CL", "cs.CV", "cs.DC", "cs.AI", "stat.ML", "cs.NI", "math.OC", "physics.comp-ph")
STANDING = ((S + "crossref", 0.75), (S + "retraction_watch", 0.6), (S + "crossref_status_cache", 0.3),
            (S + "openalex_status_cache", 0.3))
EVENT_SOURCES = {"correction": S + "crossref"}  # every other event: S + "retraction_watch"
MEASUREMENT_SOURCES = (S + "arxiv_reference", S + "openalex", S + "semantic_scholar")
CITATION_SOURCE = S + "pdf_text"
METADATA_SOURCES = {"arxiv": S + "arxiv_reference", "external": S + "crossref"}
RESOLVERS = {"arxiv": S + "arxiv_id", "external": S + "doi"}
OBSERVED_FROM = datetime(2026, 1, 1, tzinfo=timezone.utc)
OBSERVED_SPAN_S = 200 * 86400  # facts are observed over the first 200 days of 2026
EXTERNAL_WORDS = ("deep", "learning", "scaling", "graph", "neural", "networks", "training", "efficient",
                  "distributed", "language", "models", "optimization", "inference", "systems", "data",
                  "attention", "transformers", "benchmark", "robust", "sparse", "parallel", "memory")


@dataclass
class Batch:
    """Rows per fact table, in the column order of app.ingest.store.TABLES."""

    papers: list[tuple] = field(default_factory=list)
    works: list[tuple] = field(default_factory=list)
    observations: list[tuple] = field(default_factory=list)
    resolutions: list[tuple] = field(default_factory=list)
    receipts: list[tuple] = field(default_factory=list)
    events: list[tuple] = field(default_factory=list)
    measurements: list[tuple] = field(default_factory=list)

    def size(self) -> int:
        return sum(len(v) for v in self.__dict__.values())


def arxiv_ids(n: int) -> list[str]:
    """n new-style ids, month by month from 2015-01, about evenly spread."""
    months = max(1, min(137, n // 50 or 1))
    per_month = -(-n // months)
    ids = []
    for i in range(n):
        month, seq = divmod(i, per_month)
        year, mm = divmod(month, 12)
        ids.append(f"{15 + year:02d}{mm + 1:02d}.{seq + 1:05d}")
    return ids


def _uuid(rng: random.Random) -> uuid.UUID:
    return uuid.UUID(int=rng.getrandbits(128))


def _at(rng: random.Random, after: datetime | None = None) -> datetime:
    base = after or OBSERVED_FROM
    span = OBSERVED_SPAN_S - int((base - OBSERVED_FROM).total_seconds())
    return base + timedelta(seconds=rng.randrange(max(span, 60)), microseconds=rng.randrange(1, 1_000_000))


def hub_references(i: int, papers: int, hub_citations: int) -> int:
    """How many extra references to the hub paper i (1 .. papers-1) makes: N in all, evenly spread."""
    if i < 1 or papers < 2:
        return 0
    return i * hub_citations // (papers - 1) - (i - 1) * hub_citations // (papers - 1)


def generate(papers: int, seed: int, batch_papers: int = 2000, hub_citations: int = 0) -> Iterator[Batch]:
    """Yield the graph's rows in batches of about batch_papers papers (with `hub_citations` extra
    citations of the first paper, see the module's note)."""
    rng = random.Random(seed)
    hub_rng = random.Random(f"hub:{seed}")  # its own stream: the rest of the graph is the same with or without
    ids = arxiv_ids(papers)
    statuses = [s for s, _ in STATUS_WEIGHTS]
    cumulative = list(itertools.accumulate(w for _, w in STATUS_WEIGHTS))
    total_weight = cumulative[-1]
    pith_work = [uuid.uuid5(uuid.NAMESPACE_URL, f"pith-work:{a}") for a in ids]
    external_pool = max(100, papers * 3)
    external_seen: set[int] = set()
    first_seen: list[datetime] = [OBSERVED_FROM] * papers
    cited_targets: list[int] = []  # one entry per Pith citation: the copying model's urn
    batch = Batch()

    def standing_for(work_id: uuid.UUID, linked_at: datetime) -> None:
        for source, share in STANDING:
            if rng.random() < share:
                batch.receipts.append((work_id, source, _at(rng, linked_at)))
                if rng.random() < 0.3:
                    batch.receipts.append((work_id, source, _at(rng, linked_at)))
        roll = rng.random()
        if roll < 0.001:
            kinds = ["retraction"] + (["reinstatement"] if rng.random() < 0.1 else [])
        elif roll < 0.0015:
            kinds = ["expression_of_concern"]
        elif roll < 0.0015 + 0.005:
            kinds = ["correction"]
        elif roll < 0.0015 + 0.0055:
            kinds = ["withdrawal"]
        else:
            return
        at = linked_at
        for kind in kinds:
            at = _at(rng, at)
            source = EVENT_SOURCES.get(kind, S + "retraction_watch")
            batch.receipts.append((work_id, source, at))  # the source checked the work when it reported
            batch.events.append((work_id, source, kind, at, at - timedelta(days=rng.randrange(1, 400)),
                                 f"10.5555/notice.{rng.getrandbits(40):x}"))

    for i, arxiv_id in enumerate(ids):
        # Snapshots: the paper as first observed, then re-observed with later versions.
        submitted = datetime(2015 + int(arxiv_id[:2]) - 15, int(arxiv_id[2:4]), 1, tzinfo=timezone.utc) + \
            timedelta(seconds=rng.randrange(27 * 86400))
        title = f"Synthetic study {i} of " + " ".join(rng.sample(EXTERNAL_WORDS, 4))
        category = CATEGORIES[rng.randrange(len(CATEGORIES))]
        # Papers are first observed in id order over the first half of the span, so references
        # mostly point at papers already observed.
        seen = OBSERVED_FROM + timedelta(seconds=i * (OBSERVED_SPAN_S // 2) / papers + rng.randrange(86400),
                                         microseconds=rng.randrange(1, 1_000_000))
        first_seen[i] = seen
        version, updated = 1, submitted
        for _ in range(1 + (rng.random() < 0.4) + (rng.random() < 0.15)):
            batch.papers.append((arxiv_id, seen, title, version, category, submitted, updated))
            version += 1 + (rng.random() < 0.2)
            updated = updated + timedelta(days=rng.randrange(1, 200))
            seen = _at(rng, seen)
        batch.works.append((pith_work[i], first_seen[i], arxiv_id, f"10.48550/arxiv.{arxiv_id}", METADATA_SOURCES["arxiv"],
                            arxiv_id, title, "arXiv", submitted.year))
        standing_for(pith_work[i], first_seen[i])
        for source in MEASUREMENT_SOURCES[: 2 + (rng.random() < 0.5)]:
            at = _at(rng, first_seen[i])
            batch.measurements.append((arxiv_id, source, at, rng.randrange(0, 50)))
            if rng.random() < 0.5:
                batch.measurements.append((arxiv_id, source, _at(rng, at), rng.randrange(0, 80)))

        parsed = first_seen[i] + timedelta(seconds=rng.randrange(2 * 86400))
        for index in range(1, rng.randint(20, 60) + 1):
            status = statuses[bisect.bisect_right(cumulative, rng.randrange(total_weight))]
            linked = status in LINKED
            observed = parsed + timedelta(microseconds=rng.randrange(1, 5_000_000))
            if i > 0 and rng.random() < 0.5:
                target = rng.randrange(i) if not cited_targets or rng.random() < 0.3 else \
                    cited_targets[rng.randrange(len(cited_targets))]
                cited_targets.append(target)
                cited = ids[target]
                work = pith_work[target] if linked else None
                printed = None if linked else f"{ids[target]} as printed, {status}"
            else:
                cited = None
                # Zipf-like: small external ids are cited far more often.
                ext = int(external_pool ** rng.random()) - 1
                work = uuid.uuid5(uuid.NAMESPACE_URL, f"external-work:{seed}:{ext}") if linked else None
                printed = None if linked else f"External reference {ext}"
                if work is not None and ext not in external_seen:
                    external_seen.add(ext)
                    batch.works.append((work, OBSERVED_FROM, None, f"10.5555/ext.{ext}", METADATA_SOURCES["external"], None,
                                        "On " + " ".join(rng.sample(EXTERNAL_WORDS, 3)), "Journal of Examples",
                                        2000 + ext % 26))
                    standing_for(work, OBSERVED_FROM)
            oid = _uuid(rng)
            batch.observations.append((oid, arxiv_id, index, CITATION_SOURCE, observed, cited, work, printed,
                                       None if linked else 2000 + index % 26))
            resolved = observed + timedelta(seconds=rng.randrange(1, 600))
            if status != "unresolved" and rng.random() < 0.1:
                # Resolved later than first parsed: unresolved at first.
                batch.resolutions.append((oid, observed, "unresolved", None))
            batch.resolutions.append((oid, resolved, status, None if status in ("unresolved", "parse_uncertain")
                                      else RESOLVERS["arxiv" if cited else "external"]))
        last = index
        for extra in range(1, hub_references(i, papers, hub_citations) + 1):
            oid = _uuid(hub_rng)
            observed = parsed + timedelta(microseconds=hub_rng.randrange(1, 5_000_000))
            batch.observations.append((oid, arxiv_id, last + extra, CITATION_SOURCE, observed, ids[0], pith_work[0],
                                       None, None))
            batch.resolutions.append((oid, observed + timedelta(seconds=hub_rng.randrange(1, 600)), "verified_exact",
                                      RESOLVERS["arxiv"]))
        if (i + 1) % batch_papers == 0:
            yield batch
            batch = Batch()
    if batch.size():
        yield batch
