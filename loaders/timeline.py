"""A paper's timeline: the whole-second instants at which stored facts change its (capped) v1 record.

Two statements find them, whatever the paper's size: its observations (ids, links, when each became
visible), then every fact in the window about the paper, its observations, their works and the papers
at their other ends. Which of those facts the record shows is then decided here, exactly:

- A fact at time t shows from the instant T = t rounded up to the whole second (an as-of instant is
  whole seconds, and a fact is in the record at T when observed_at <= T).
- An observation is in the record at T when it is visible by T and fewer than `cap` observations of
  its side that come before it in record order are visible by then. Observations are never hidden
  again, so that is an interval: from its visibility to the instant the cap-th of those before it
  becomes visible (found in one pass in record order, keeping the cap earliest instants in a heap).
- A new observation always changes the record (its side's total is in the record); the paper's own
  snapshots and measurements always do. A resolution shows when its observation is in the record; a
  work's snapshot, receipt or event when an observation of that work is in the record (receipts and
  events only once the work has a snapshot; an event always comes with its source's receipt); a
  citing (cited) paper's snapshot when one of its inbound (outbound) observations is.
- Nothing shows before the paper's first snapshot (there is no record yet); the thesis date turning
  over at midnight is not a fact.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Final, Iterable, Sequence
from uuid import UUID

from loaders.base import Db

# $1 the paper: its observations, each side in record order, with when each became visible. Run for many
# papers at once (OBSERVATIONS_OF_EACH, each row led by p_ord, the paper's place in the array).
OBSERVATIONS: Final = """
SELECT * FROM (
    SELECT 'in' AS side, o.observation_id, o.work_id, o.citing_arxiv_id AS other, o.visible_from, o.linked_from
    FROM citation_observations AS o
    WHERE o.cited_arxiv_id = $1
    ORDER BY o.citing_arxiv_id, o.reference_index, o.observation_id
) AS inbound
UNION ALL
SELECT * FROM (
    SELECT 'out', o.observation_id, o.work_id, o.cited_arxiv_id, o.visible_from, o.linked_from
    FROM citation_observations AS o
    WHERE o.citing_arxiv_id = $1
    ORDER BY o.reference_index, o.observation_id
) AS outbound
"""

OBSERVATIONS_OF_EACH: Final = ("SELECT t.p_ord, x.* FROM unnest($1::text[]) WITH ORDINALITY AS t(p_id, p_ord)\n"
                                f"CROSS JOIN LATERAL ({OBSERVATIONS.replace('$1', 't.p_id')}) AS x")

# $1 the papers, $2 window start (exclusive), $3 window end (inclusive), $4 observation ids, $5 work ids,
# $6 citing paper ids (inbound), $7 cited paper ids (outbound), each the union over the papers. FIRST_*
# rows: when a paper or work got its first snapshot, at any time (they decide what can show). A paper's own facts carry its arxiv_id.
# (kind, table, the row's observation / work / paper columns, which rows) of each fact in the window.
_IN_WINDOW: Final = (
    ("PAPER_UPDATED", "paper_snapshots", "NULL", "NULL", "arxiv_id", "arxiv_id = ANY($1::text[])"),
    ("RESOLUTION_CHANGED", "resolutions", "observation_id", "NULL", "NULL", "observation_id = ANY($4::uuid[])"),
    ("WORK_UPDATED", "work_snapshots", "NULL", "work_id", "NULL", "work_id = ANY($5::uuid[])"),
    ("STANDING_EVENT", "work_events", "NULL", "work_id", "NULL", "work_id = ANY($5::uuid[])"),
    ("STANDING_CHECKED", "standing_receipts", "NULL", "work_id", "NULL", "work_id = ANY($5::uuid[])"),
    ("MEASUREMENT_CHANGED", "external_measurements", "NULL", "NULL", "arxiv_id", "arxiv_id = ANY($1::text[])"),
    ("CITING_PAPER_UPDATED", "paper_snapshots", "NULL", "NULL", "arxiv_id", "arxiv_id = ANY($6::text[])"),
    ("CITED_PAPER_UPDATED", "paper_snapshots", "NULL", "NULL", "arxiv_id", "arxiv_id = ANY($7::text[])"),
)
FACTS: Final = "\nUNION ALL\n".join(
    [f"SELECT '{kind}' AS kind, observed_at AS at, {obs}::uuid AS observation_id, {work}::uuid AS work_id, "
     f"{paper}::text AS arxiv_id FROM {table} WHERE {rows} AND observed_at > $2 AND observed_at <= $3"
     for kind, table, obs, work, paper, rows in _IN_WINDOW]
    # An event's end (the standing rule): a change of its work's standing at the check that ended it.
    + ["SELECT 'STANDING_EVENT', ended_at, NULL, work_id, NULL FROM work_event_ends "
       "WHERE work_id = ANY($5::uuid[]) AND ended_at > $2 AND ended_at <= $3",
       "SELECT 'FIRST_PAPER', min(observed_at), NULL, NULL, arxiv_id FROM paper_snapshots "
       "WHERE arxiv_id = ANY($1::text[]) GROUP BY arxiv_id",
       "SELECT 'FIRST_WORK', min(observed_at), NULL, work_id, NULL FROM work_snapshots "
       "WHERE work_id = ANY($5::uuid[]) GROUP BY work_id"])

NEVER: Final = math.inf
# The order kinds are listed in an entry (the order of the ChangeKind enum).
KINDS: Final = ("PAPER_UPDATED", "CITATION_ADDED", "REFERENCE_ADDED", "RESOLUTION_CHANGED", "WORK_UPDATED",
                "STANDING_EVENT", "STANDING_CHECKED", "MEASUREMENT_CHANGED", "CITING_PAPER_UPDATED",
                "CITED_PAPER_UPDATED")


def second_up(value: datetime) -> int:
    """The first whole second (as Unix time) at which a fact observed at `value` shows (exact: no float
    arithmetic on the microseconds)."""
    return int(value.replace(microsecond=0).timestamp()) + (1 if value.microsecond else 0)


def instant(second: int) -> datetime:
    return datetime.fromtimestamp(second, timezone.utc)


@dataclass(frozen=True, slots=True)
class Entry:
    at: int  # Unix seconds
    kinds: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Shown:
    """When one observation is in the record: from `start` (inclusive) to `end` (exclusive), in seconds."""

    side: str
    work_id: UUID | None
    other: str | None
    start: int
    end: float
    linked: int = 0  # from when its work link holds (a link a later import made: loaders.citations.linked_sql)

    def at(self, second: int) -> bool:
        return self.start <= second < self.end

    def linked_at(self, second: int) -> bool:
        return self.linked <= second and self.at(second)


def shown_intervals(rows: Iterable[Any], caps: dict[str, int]) -> dict[tuple[str, UUID], Shown]:
    """Each visible observation's interval in the record, by (side, id); `rows` in record order within
    each side ('in' and 'out', capped at caps[side])."""
    found: dict[tuple[str, UUID], Shown] = {}
    earliest: dict[str, list[int]] = {"in": [], "out": []}  # per side, the cap earliest starts seen, negated
    for row in rows:
        if row["visible_from"] is None:
            continue  # never visible: not in the record, and ahead of nothing
        side, cap = row["side"], caps[row["side"]]
        heap = earliest[side]
        start = second_up(row["visible_from"])
        end = -heap[0] if len(heap) == cap else NEVER
        linked = second_up(row["linked_from"]) if row["linked_from"] is not None else 0
        found[(side, row["observation_id"])] = Shown(side, row["work_id"], row["other"], start, end, linked)
        if len(heap) < cap:
            heapq.heappush(heap, -start)
        elif start < -heap[0]:
            heapq.heapreplace(heap, -start)
    return found


def changes(shown: dict[tuple[str, UUID], Shown], facts: Sequence[Any], low: int, high: int) -> list[Entry]:
    """The entries with low <= at <= high, oldest first."""
    first_paper = NEVER
    first_work: dict[UUID, int] = {}
    for f in facts:
        if f["kind"] == "FIRST_PAPER" and f["at"] is not None:
            first_paper = second_up(f["at"])
        elif f["kind"] == "FIRST_WORK":
            first_work[f["work_id"]] = second_up(f["at"])
    by_work: dict[UUID, list[Shown]] = defaultdict(list)
    by_citing: dict[str, list[Shown]] = defaultdict(list)
    by_cited: dict[str, list[Shown]] = defaultdict(list)
    for s in shown.values():
        if s.work_id is not None:
            by_work[s.work_id].append(s)
        if s.other is not None:
            (by_citing if s.side == "in" else by_cited)[s.other].append(s)

    def any_at(group: list[Shown], second: int) -> bool:
        return any(s.at(second) for s in group)

    found: dict[int, set[str]] = defaultdict(set)

    def add(second: int, kind: str) -> None:
        if low <= second <= high and second >= first_paper:
            found[second].add(kind)

    for s in shown.values():
        add(s.start, "CITATION_ADDED" if s.side == "in" else "REFERENCE_ADDED")
    for f in facts:
        kind = f["kind"]
        if kind.startswith("FIRST_"):
            continue
        second = second_up(f["at"])
        if kind in ("PAPER_UPDATED", "MEASUREMENT_CHANGED"):
            shows = True
        elif kind == "RESOLUTION_CHANGED":
            shows = any(s is not None and s.at(second)
                        for s in (shown.get(("in", f["observation_id"])), shown.get(("out", f["observation_id"]))))
        elif kind == "WORK_UPDATED":
            shows = any(s.linked_at(second) for s in by_work[f["work_id"]])
        elif kind in ("STANDING_CHECKED", "STANDING_EVENT"):
            shows = first_work.get(f["work_id"], NEVER) <= second and any(
                s.linked_at(second) for s in by_work[f["work_id"]])
        elif kind == "CITING_PAPER_UPDATED":
            shows = any_at(by_citing[f["arxiv_id"]], second)
        else:  # CITED_PAPER_UPDATED
            shows = any_at(by_cited[f["arxiv_id"]], second)
        if shows:
            add(second, kind)
    return [Entry(at, tuple(k for k in KINDS if k in kinds)) for at, kinds in sorted(found.items())]


OWN: Final = frozenset({"PAPER_UPDATED", "MEASUREMENT_CHANGED", "FIRST_PAPER"})  # a paper's own facts
OF_WORKS: Final = frozenset({"WORK_UPDATED", "STANDING_EVENT", "STANDING_CHECKED", "FIRST_WORK"})


async def timelines(db: Db, papers: Sequence[str], low: int, high: int, cap_in: int,
                    cap_out: int) -> list[list[Entry]]:
    """Each paper's entries with low <= at <= high (Unix seconds), oldest first: two statements for any
    number of papers (their observations, then every fact in the window), each fact then given to the
    papers it concerns."""
    if high < low or not papers:
        return [[] for _ in papers]
    rows = await db.fetch(OBSERVATIONS_OF_EACH, list(papers))
    each: list[list[Any]] = [[] for _ in papers]
    for row in rows:
        each[row["p_ord"] - 1].append(row)
    ids = [r["observation_id"] for r in rows]
    works = list({r["work_id"] for r in rows if r["work_id"] is not None})
    citing = list({r["other"] for r in rows if r["side"] == "in"})
    cited = list({r["other"] for r in rows if r["side"] == "out" and r["other"] is not None})
    # A fact at t shows at ceil(t): those showing in [low, high] have low - 1 < t <= high.
    facts = await db.fetch(FACTS, list(papers), instant(low - 1), instant(high), ids, works, citing, cited)
    own: dict[str, list[Any]] = defaultdict(list)
    by_observation: dict[UUID, list[Any]] = defaultdict(list)
    by_work: dict[UUID, list[Any]] = defaultdict(list)
    by_paper: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for f in facts:
        kind = f["kind"]
        if kind in OWN:
            own[f["arxiv_id"]].append(f)
        elif kind == "RESOLUTION_CHANGED":
            by_observation[f["observation_id"]].append(f)
        elif kind in OF_WORKS:
            by_work[f["work_id"]].append(f)
        else:  # CITING_PAPER_UPDATED, CITED_PAPER_UPDATED
            by_paper[(kind, f["arxiv_id"])].append(f)
    found = []
    for paper, mine in zip(papers, each):
        shown = shown_intervals(mine, {"in": cap_in, "out": cap_out})
        relevant = list(own.get(paper, ()))
        for r in mine:
            relevant += by_observation.get(r["observation_id"], ())
        for work in {r["work_id"] for r in mine if r["work_id"] is not None}:
            relevant += by_work.get(work, ())
        for kind, side in (("CITING_PAPER_UPDATED", "in"), ("CITED_PAPER_UPDATED", "out")):
            for other in {r["other"] for r in mine if r["side"] == side and r["other"] is not None}:
                relevant += by_paper.get((kind, other), ())
        found.append(changes(shown, relevant, low, high))
    return found


async def timeline(db: Db, arxiv_id: str, low: int, high: int, cap_in: int, cap_out: int) -> list[Entry]:
    """One paper's entries with low <= at <= high (Unix seconds), oldest first, in two statements."""
    return (await timelines(db, [arxiv_id], low, high, cap_in, cap_out))[0]
