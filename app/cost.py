"""Query cost, computed from the document and its arguments before anything runs (GitHub's node rule).

Every list a query can ask for counts the nodes it may return, multiplied by the lists around it:
`papers(arxivIds: [..100 ids]) { inbound(first: 100) }` may touch 100 + 100 x 100 nodes. A query over
MAX_NODES is refused before execution, and every response reports its cost in `extensions.cost`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import heapq
import itertools
import time
from collections import OrderedDict
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Callable, Final, Iterator

from graphql import (
    FieldNode,
    Undefined,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    InlineFragmentNode,
    OperationDefinitionNode,
    SelectionSetNode,
    value_from_ast_untyped,
)
from graphql.error import GraphQLError, GraphQLSyntaxError

from app.cursors import decode_token
from app.errors import QueryCostError, UserInputError
from app.limits import ARGUMENTS, argument_default, out_of_range
from app.timeparse import is_arxiv_id
from loaders.base import scanned
from loaders.citations import FILTER_PROBE_ROWS
from app.limits import (MAX_COST, MAX_IDS, MAX_NEIGHBOURHOOD_PAPERS, MAX_NODES,
                        MAX_TOTAL_DEPTH, MAX_VALIDATION_ERRORS, OFF_LOOP_CHARS, POINT_UNITS, READER_SHARE,
                        READER_WAIT_SECONDS, READER_WAITING)

# (field name) -> (argument that sizes it, its default)
# A connection's filters: a filtered page or count reads the paper's edges that way (data-sized).
FILTERS: Final = ("status", "citesRetracted")
LISTS = {"inbound": ("first", 100), "outbound": ("first", 100), "searchPapers": ("first", 10),
         "timeline": ("first", 100), "browsePapers": ("first", 100), "works": ("first", 100)}


# Introspection fields that return lists: nesting one inside another multiplies the answer
# (types > fields > type > fields > ...), the classic introspection abuse. GraphiQL's own query
# nests none of them twice along a path.
INTROSPECTION_LISTS = frozenset({"types", "fields", "inputFields", "interfaces", "possibleTypes", "enumValues", "args",
                                 "directives"})


# Fields whose work grows with one paper's observations (priced from that paper's own counts).
# (recordChanged builds the paper's record as it starts, and again for each event: a citationRecord's work.)
DATA_SIZED = frozenset({"timeline", "recordDiff", "citationsByYear", "neighbourhood", "citationRecord",
                        "recordChanged"})
# Root fields that name the paper(s) everything directly below them is about.
PAPER_ROOTS = {"paper": "arxivId", "papers": "arxivIds", "recordDiff": "arxivId", "neighbourhood": "arxivId",
               "citationRecord": "arxivId", "recordChanged": "arxivId"}


@dataclass(frozen=True)
class PaperSize:
    """A paper's stored observations (paper_observation_counts, migration 0012): those citing it and its
    own references, at any visibility (an upper bound at every instant)."""

    inbound: int = 0
    outbound: int = 0


class UnreadSizes(dict):
    """Papers' sizes not read (each PaperSize(): none): an operation over the limit even so is refused without
    a statement, and what it says fits is an upper bound."""


class Costing:
    def __init__(self, fragments: dict[str, FragmentDefinitionNode], variables: dict[str, Any],
                 scale: "DataScale | None" = None, sizes: "dict[str, PaperSize] | None" = None) -> None:
        self.fragments = fragments
        self.variables = variables
        self.scale = scale or DataScale()
        self.root = True  # papers/nodes are the root fields; a Paper has none of those names
        self.max_changes = argument_default("maxChanges")
        self.sizes = sizes  # each named paper's size; None: the largest paper's stands for every paper
        self.paper: str | None = None  # the paper whose fields are being priced, when the query names it

    def size_of(self, arxiv_id: str | None) -> PaperSize:
        """What a data-sized field of this paper reads: its own counts when the query names it and they
        were read, else the largest paper's (a bound for any paper)."""
        if arxiv_id is not None and self.sizes is not None:
            return self.sizes.get(arxiv_id, PaperSize())
        return PaperSize(self.scale.max_degree, self.scale.current.max_outbound)

    def check_shape(self, selection_set: SelectionSetNode | None, depth: int = 0,
                    lists: frozenset[str] = frozenset(), introspecting: bool = False) -> None:
        """Refuse introspection that nests list fields, and any path deeper than MAX_TOTAL_DEPTH."""
        for field in self.fields(selection_set):
            name = field.name.value
            inside = introspecting or name.startswith("__")
            if depth + 1 > MAX_TOTAL_DEPTH:
                raise QueryCostError(f"query is deeper than {MAX_TOTAL_DEPTH} levels (introspection included)",
                                     limit=MAX_TOTAL_DEPTH)
            seen = lists
            if inside and name in INTROSPECTION_LISTS:
                if name in lists or (name == "fields" and "types" in lists and "fields" in lists):
                    raise QueryCostError(f"introspection nests `{name}` inside `{name}`; each list of the schema "
                                         "may appear once along a path (as in GraphiQL's introspection query)",
                                         limit="introspection nesting")
                seen = lists | {name}
            if field.selection_set is not None:
                self.check_shape(field.selection_set, depth + 1, seen, inside)

    def args(self, field: FieldNode) -> dict[str, Any]:
        """The field's argument values (variables already coerced; an absent one is absent)."""
        values = {}
        for arg in field.arguments or ():
            value = value_from_ast_untyped(arg.value, self.variables)
            if value is not Undefined:
                values[arg.name.value] = value
        for name, (_, low, _high) in ARGUMENTS.items():
            if values.get(name) is not None and out_of_range(name, values[name]) is not None:
                # The field refuses it when it runs (its connection null with the error, its parent and
                # siblings answered) and does no work: priced as the least it could ask.
                values[name] = low
        return values

    def fields(self, selection_set: SelectionSetNode | None) -> Iterator[FieldNode]:
        return (field for field, _ in self.typed_fields(selection_set))

    def typed_fields(self, selection_set: SelectionSetNode | None, kind: str | None = None,
                     seen: frozenset[str] = frozenset()) -> Iterator[tuple[FieldNode, str | None]]:
        """The fields of a selection, fragments spread, each with the type its fragment names (else `kind`)."""
        if selection_set is None:
            return
        for selection in selection_set.selections:
            if isinstance(selection, FieldNode):
                yield selection, kind
            elif isinstance(selection, InlineFragmentNode):
                condition = selection.type_condition.name.value if selection.type_condition else kind
                yield from self.typed_fields(selection.selection_set, condition, seen)
            elif isinstance(selection, FragmentSpreadNode):
                name = selection.name.value
                if name in seen or name not in self.fragments:
                    continue
                fragment = self.fragments[name]
                yield from self.typed_fields(fragment.selection_set, fragment.type_condition.name.value,
                                             seen | {name})

    def price(self, selection_set: SelectionSetNode | None, multiplier: int) -> "Price":
        """What the selection may cost: list nodes (GitHub's rule) and work units (see PRICES)."""
        nodes = units = 0
        for field in self.fields(selection_set):
            name = field.name.value
            args = self.args(field)
            size = 1
            if name in DATA_SIZED:
                self.advise(name, args)
            if name in LISTS:
                arg, default = LISTS[name]
                size = next((args[a] for a in (arg, "last") if args.get(a) is not None), default)
            elif name in ("papers", "nodes") and self.root:
                argument = "arxivIds" if name == "papers" else "ids"
                ids = args.get(argument)
                size = len(ids) if isinstance(ids, list) else 1
                if not 1 <= size <= MAX_IDS:
                    raise UserInputError(f"{argument}: {size} ids given; give 1 to {MAX_IDS}", nodes=[field],
                                         argument=argument)
                if name == "papers" and self.sizes is not None and isinstance(ids, list):
                    # Each paper priced by its own size (the same nodes as `size` papers priced at once).
                    nodes += multiplier * size
                    root, self.root = self.root, False
                    fitting, advised = 0, self.advice
                    for arxiv_id in ids:
                        self.paper = arxiv_id if isinstance(arxiv_id, str) else None
                        below = self.price(field.selection_set, multiplier)
                        nodes += below.nodes
                        units += below.units + (multiplier if field.selection_set is not None else 0)
                        fitting += units <= MAX_COST
                    self.root, self.paper = root, None
                    if units > MAX_COST and advised is None and 0 < fitting < size:
                        # Priced each by its own size: how many of these ids one query holds, in the order given.
                        if isinstance(self.sizes, UnreadSizes):  # (priced at none of their data: at most so many)
                            self.advice = (f"even priced at none of their data, at most the first {fitting} of the "
                                           f"{size} papers fit the limit together: ask for arxivIds[0:{fitting}] "
                                           "or fewer (its refusal, if it is refused, names how many fit by their "
                                           "own sizes), then the rest in further queries")
                        else:
                            self.advice = (f"the {size} papers are priced each by its own size and the first "
                                           f"{fitting} fit the limit together: ask for arxivIds[0:{fitting}], then "
                                           "the rest in further queries")
                    continue
            elif name == "neighbourhood":
                depth = args.get("depth") or argument_default("depth")
                per_paper = args.get("perPaper") or argument_default("perPaper")
                # No walk reaches more papers than there are (nor than the cap), nor more at its first hop
                # than the paper has edges that way.
                first_hop = per_paper
                if self.sizes is not None and self.root:
                    own = self.size_of(args.get("arxivId"))
                    direction = args.get("direction") or "INBOUND"
                    first_hop = min(per_paper, own.outbound if direction == "OUTBOUND" else own.inbound)
                size = min(self.scale.current.papers,
                           sum(first_hop * per_paper ** (h - 1) for h in range(1, depth + 1)))
            elif name == "changes":
                size = self.max_changes
            elif name == "externalCitationMeasurements":  # one a source (no cap on the list: the data's; two
                size = self.scale.current.measurement_sources + 2  # more: a rare one the statistics' sample missed)
            elif name == "byYear":  # a count's years, as its source gave them (OpenAlex: the recent ones)
                size = MEASURED_YEARS
            own = multiplier * size
            if name in LISTS or name in ("papers", "nodes", "neighbourhood") and self.root:
                nodes += own
            connection = name in LISTS or name == "neighbourhood"
            if field.selection_set is not None:  # objects to complete: a connection is one, its items many
                units += multiplier if connection else own
            work = multiplier * self.work(name, args, size)
            walked = filtered(field) and any(args.get(a) is not None for a in FILTERS)  # (null: no filter)
            if walked:
                # Its page reads the paper's edges that way until it has found `first` that pass (all of them
                # when few or none do), and its totalCount reads all of them again.
                walks = 1 + any(f.name.value == "totalCount" for f in self.fields(field.selection_set))
                work += multiplier * walks * self.filtered_walk(name)
            units += work
            if (name in DATA_SIZED or walked) and not self.root and self.paper is None and self.advice is None \
                    and work > MAX_COST:
                self.advice = (f"Each paper reached through a list has its {name} priced as the largest paper could "
                               f"be ({self.scale.max_degree:,} observations), whatever its own size; name the papers "
                               f"instead: papers(arxivIds: [...]) {{ {name} }} prices each by its own size (up to "
                               f"{MAX_IDS} ids a query, as many as their sizes fit: its refusal says how many)")
            if name == "citationRecord" and any(f.name.value == "document" for f in self.fields(field.selection_set)):
                # the document as a JSON object: its objects are the answer's (what it itemizes, ~12 each)
                units += multiplier * record_objects(self.size_of(args.get("arxivId") if self.root else self.paper))
            root, self.root = self.root, False
            paper = self.paper
            # Fields right below a root that names one paper are that paper's; anything deeper is another's.
            self.paper = args.get("arxivId") if root and name in PAPER_ROOTS and isinstance(args.get("arxivId"), str) \
                else None
            saved = self.max_changes
            if name == "recordDiff":
                self.max_changes = args.get("maxChanges") or argument_default("maxChanges")
            # Inside a list, what repeats per item is its items (edges, nodes, papers...); a connection's
            # totalCount and pageInfo come once per connection.
            below = self.price_connection(field.selection_set, own, multiplier) if connection \
                else self.price(field.selection_set, own)
            self.root, self.max_changes, self.paper = root, saved, paper
            nodes += below.nodes
            units += below.units
            if nodes > MAX_NODES * 1000 or units > MAX_COST * 1000:  # no need to count further
                break
        return Price(nodes, units, self.advice)

    advice: str | None = None

    def advise(self, name: str, args: dict[str, Any]) -> None:
        """What can succeed when one named paper's own size puts this field over the limit."""
        arxiv_id = args.get("arxivId") if self.root else self.paper
        if arxiv_id is None or self.sizes is None or self.advice is not None:
            return
        own = self.size_of(arxiv_id)
        if self.work(name, args, args.get("first") or 100) <= MAX_COST:
            return
        observations = own.inbound + own.outbound
        instead = []
        if name == "timeline":  # a shorter page: each entry is a record built (a tenth left for the rest asked)
            fits = [n for n in range(1, (args.get("first") or 100)) if self.work(name, args, n) <= MAX_COST * 0.9]
            if fits:
                instead.append(f"a shorter page (timeline(first: {fits[-1]}) or fewer, then after: its endCursor)")
        if name == "timeline" and diff_units(own, 100) <= MAX_COST:
            instead.append(f"recordDiff(arxivId: \"{arxiv_id}\", from:, to:, maxChanges:) for what changed in a "
                           "window")
        if name in ("timeline", "recordDiff") and served_record_units(own) <= MAX_COST // 2:
            instead.append(f"what changed between two instants: citationRecord(arxivId: \"{arxiv_id}\", asOf:) at "
                           "each (two aliases in one query), compared item by item (each carries its "
                           "observation_digest)")
        if name == "neighbourhood":
            instead.append("a smaller perPaper or depth")
        if name != "citationsByYear" and self.work("citationsByYear", {}, 1) <= MAX_COST:
            instead.append("citationsByYear for its citers by year")
        instead.append(f"its whole citation list from the bulk route (GET /paper/{arxiv_id}/inbound.ndjson, or .csv; "
                       "a unit a row), or page by page (inbound(first: 100, after:))")
        self.advice = (f"{arxiv_id} has {observations:,} stored observations ({own.inbound:,} citing it) and its "
                       f"{name} reads every one of them; ask instead for " + "; or ".join(instead))

    def price_connection(self, selection_set: SelectionSetNode | None, items: int, once: int) -> "Price":
        nodes = units = 0
        for field in self.fields(selection_set):
            multiplier = items if field.name.value in ("edges", "nodes", "papers") else once
            found = self.price(SelectionSetNode(selections=(field,)), multiplier)
            nodes += found.nodes
            units += found.units
        return Price(nodes, units, self.advice)

    def filtered_walk(self, name: str) -> int:
        """A walk of the paper's edges one way (inbound or outbound) under a filter: each edge read and probed
        (its latest resolution, or its cited work's events), as loaders.citations charges it."""
        own = self.size_of(self.paper)
        return scanned(FILTER_PROBE_ROWS * (own.inbound if name == "inbound" else own.outbound))

    def work(self, name: str, args: dict[str, Any], size: int) -> int:
        """Work a field does beyond the objects it returns (records built, rows scanned)."""
        if name in ("citationRecord", "recordChanged"):
            return served_record_units(self.size_of(args.get("arxivId") if self.root else self.paper))
        if name == "recordDiff":
            own = self.size_of(args.get("arxivId") if self.root else self.paper)
            return diff_units(own, args.get("maxChanges") or argument_default("maxChanges"))
        if name == "timeline":
            # Every observation of the paper and the facts about them are read into the server, then a
            # record is built at each entry of the page (they share their statements: cheaper than one each).
            own = self.size_of(self.paper)
            return (TIMELINE_STATEMENTS * PRICES["statement"] + FACTS_PER_INBOUND * own.inbound
                    + FACTS_PER_OUTBOUND * own.outbound
                    + size * (PRICES["timeline_entry"] + record_rows(own)))
        if name == "searchPapers":
            return PRICES["search"]
        if name in ("browsePapers", "works"):
            # An index walk that stops after the page, in every order: ordered by inbound total, the totals the
            # database keeps (migration 0011) serve every instant from the latest counted visibility on, which
            # is now; an instant asked for (asOf) may be earlier, and then every paper's total is counted first.
            counted = args.get("orderBy") == "INBOUND_COUNT_DESC" and args.get("asOf") is not None
            scan = 2 * self.scale.current.papers if counted else 0
            return PRICES["search"] + scan
        if name == "neighbourhood":
            # the edges read, a statement per hop
            return size + (args.get("depth") or argument_default("depth")) * PRICES["hop"]
        if name == "totalCount":
            return PRICES["count"]
        if name == "citationsByYear":  # every citing observation of the paper, and each citer's snapshot
            own = self.size_of(self.paper)
            # ... and a row and an object for each year with citers (no more years than citers).
            return (CITATIONS_BY_YEAR_STATEMENTS * PRICES["statement"] + scanned(2 * own.inbound)
                    + 2 * min(own.inbound, YEARS))
        if name in ("standingNotice", "standing", "digest"):
            return PRICES["standing"]
        if name in ("externalCitationMeasurements", "byYear"):  # a row read for each item
            return size
        return 0


@dataclass(frozen=True)
class Price:
    nodes: int  # list nodes, GitHub's rule (limit MAX_NODES)
    units: int  # work units (limit MAX_COST)
    advice: str | None = None  # what to ask instead, when one paper's own size makes a field too costly

    @property
    def points(self) -> int:
        """What the operation is charged against a client's budget: a point per POINT_UNITS, at least 1."""
        return max(1, -(-self.units // POINT_UNITS))


# Work units of what a field does beyond its objects, calibrated by bench/calibrate.py on the
# 10,000-paper graph (a unit is about one object completed, ~20-40 us there).
PRICES: Final = {"record": 1_000, "search": 900, "count": 50, "standing": 15, "statement": 50, "hop": 150,
                  "timeline_entry": 200}
# Data-sized work, priced from the paper's own size (PaperSize) when the query names the paper, with
# constants measured on synthetic graphs (bench/scale.py prints price and actual work side by side):
# A timeline reads each observation of the paper into the server with the facts about it in the window:
# its resolutions and the snapshots of the paper at its other end (an inbound one), and besides those the
# cited work's snapshots, checks and events (an outbound one). Rows, each a unit (app.cost.actual_units).
FACTS_PER_INBOUND: Final = 4
FACTS_PER_OUTBOUND: Final = 8
# Statements a field sends with the paper's lookup: a timeline two and six for the records of its entries,
# a diff two records' and its changes, citationsByYear one. (The read of the sizes is priced once, with a
# row for each paper and for its lookup: size_read.)
TIMELINE_STATEMENTS: Final = 9
DIFF_STATEMENTS: Final = 7
CITATIONS_BY_YEAR_STATEMENTS: Final = 2
RECORD_UNCAPPED_SHARE: Final = 16
YEARS: Final = 100  # years a paper's citers were submitted in, at most
MEASURED_YEARS: Final = 15  # years of a source's count by year (OpenAlex's counts_by_year: the last ten or so)
RECORD_CAP: Final = 100  # loaders.rows.Caps: the observations a served record itemizes on each side


def record_rows(own: PaperSize) -> int:
    """Rows a served record of the paper reads: its itemized observations (capped) with their facts."""
    return 3 * (min(own.inbound, RECORD_CAP) + min(own.outbound, RECORD_CAP)) // 2 + 10


def diff_units(own: PaperSize, max_changes: int) -> int:
    """recordDiff: two records, the changes, and a scan in the database of every observation of the paper
    and the facts about them (charged as it runs, two units an observation: app.schema.record_diff)."""
    return (DIFF_STATEMENTS * PRICES["statement"] + 2 * record_units(own) + max_changes
            + 2 * (own.inbound + own.outbound))


def served_record_units(own: PaperSize) -> int:
    """A served (capped) record of the paper: its build, the rows of what it itemizes, and what grows with the
    paper's whole size beyond the caps (its counts and the works whose standing it reports): a unit for
    every RECORD_UNCAPPED_SHARE observations, measured on hubs of 19,000 and 213,000 citations."""
    return PRICES["record"] + record_rows(own) + (own.inbound + own.outbound) // RECORD_UNCAPPED_SHARE


def record_objects(own: PaperSize) -> int:
    """The objects of a record of the paper as JSON: a dozen for each observation it itemizes, and its own."""
    return 12 * (min(own.inbound, RECORD_CAP) + min(own.outbound, RECORD_CAP)) + 30


def record_units(own: PaperSize) -> int:
    """A record of the paper built in full (as recordDiff builds two): its objects grow with what it itemizes."""
    return PRICES["record"] + 12 * (min(own.inbound, RECORD_CAP) + min(own.outbound, RECORD_CAP))


@dataclass(frozen=True)
class Scale:
    """What the data makes some work cost: the most observations one paper has (a timeline and a diff
    read them all), and how many papers there are (no walk reaches more)."""

    max_degree: int = 20_000
    # The longest reference list: what a paper's outbound walk reads at most (a hub's citations are many more).
    max_outbound: int = 20_000
    papers: int = MAX_NEIGHBOURHOOD_PAPERS
    measurement_sources: int = 10  # the sources counting citations: a paper's or a work's measurements, one each


@dataclass
class DataScale:
    """The current Scale, refreshed from PostgreSQL's statistics (app.state), never on a request's path."""

    current: Scale = Scale()

    @property
    def max_degree(self) -> int:
        return self.current.max_degree


async def data_scale(conn: Any) -> Scale:
    """The data's scale for pricing, from PostgreSQL's statistics (exact counts while the tables are small)."""
    from loaders.system import EXACT_DEGREE, EXACT_MEASUREMENT_SOURCES, EXACT_SCALE, MAX_OUTBOUND, SCALE_ESTIMATE, SMALL

    row = await conn.fetchrow(SCALE_ESTIMATE)
    degree, observations, snapshots = row["max_degree"], row["observations"], row["snapshots"]
    if snapshots is None or snapshots < 0 or observations is None or observations < 0 or degree is None:
        exact = await conn.fetchrow(EXACT_SCALE)
        snapshots = exact["snapshots"] if snapshots is None or snapshots < 0 else snapshots
        observations = exact["observations"] if observations is None or observations < 0 else observations
        if degree is None and observations <= SMALL:
            degree = await conn.fetchval(EXACT_DEGREE) or 0
    sources = row["measurement_sources"]
    if sources is None:  # no statistics yet (a new table): counted, as small as it then is
        sources = await conn.fetchval(EXACT_MEASUREMENT_SOURCES)
    default = Scale()
    outbound = await conn.fetchval(MAX_OUTBOUND)
    return Scale(max_degree=max(100, int(degree)) if degree is not None else default.max_degree,
                 max_outbound=max(100, int(outbound)) if outbound is not None else default.max_outbound,
                 papers=max(1, min(int(snapshots), MAX_NEIGHBOURHOOD_PAPERS)) if snapshots > 0 else 1,
                 measurement_sources=max(1, int(sources or 0)))


_LEAVES = frozenset({str, int, float, bool, type(None)})


def actual_units(data: Any, rows: int, statements: int = 0) -> int:
    """The work an operation did: the objects in its answer, the rows its statements returned (with the
    work charged beside them), and a fixed share per statement."""
    count = 0
    stack = [data]
    push, leaves = stack.append, _LEAVES
    while stack:
        value = stack.pop()
        kind = type(value)
        if kind is dict or (kind is not list and isinstance(value, dict)):
            count += 1
            children = value.values()
        elif kind is list or isinstance(value, list):
            children = value
        else:
            continue
        for child in children:  # a leaf's type is one of a few: one set lookup, not two isinstance calls
            kind = type(child)
            if kind not in leaves and (kind is dict or kind is list or isinstance(child, (dict, list))):
                push(child)
    return max(0, count - 1) + rows + PRICES["statement"] * statements  # the data object itself is not one


def document_parts(document: Any, operation_name: str | None = None) -> tuple[list[OperationDefinitionNode],
                                                                              dict[str, FragmentDefinitionNode]]:
    """The operations a request may mean (those named operation_name, when given) and the fragments by name."""
    operations = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)
                  and (operation_name is None or (d.name is not None and d.name.value == operation_name))]
    fragments = {d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)}
    return operations, fragments


# Root fields answered by one batched statement when nothing below them loads anything more.
ONE_STATEMENT_ROOTS = frozenset({"paper", "papers", "observation"})


def one_statement(schema: Any, document: Any, operation_name: str | None) -> bool:
    """Whether the operation needs exactly one statement: one root lookup, only plain fields below.

    Plain fields (attributes, or resolvers that take nothing but `self`) cannot reach a loader, so
    this holds by construction; anything else is answered inside one REPEATABLE READ transaction.
    """
    from graphql import get_named_type, is_leaf_type
    from graphql.language import OperationType as AstOperationType

    from app.execution import plain_fields

    operations, fragments = document_parts(document, operation_name)
    if len(operations) != 1 or operations[0].operation is not AstOperationType.QUERY:
        return False
    costing = Costing(fragments, {})
    roots = [f for f in costing.fields(operations[0].selection_set) if f.name.value != "__typename"]
    if len(roots) != 1 or roots[0].name.value not in ONE_STATEMENT_ROOTS:
        return False

    def plain_below(object_type: Any, selection_set: Any) -> bool:
        plain = plain_fields(object_type)
        for field in costing.fields(selection_set):
            name = field.name.value
            if name == "__typename":
                continue
            if name not in plain or field.arguments:
                return False
            named = get_named_type(object_type.fields[name].type)
            if not is_leaf_type(named) and not plain_below(named, field.selection_set):
                return False
        return True

    root_type = get_named_type(schema.query_type.fields[roots[0].name.value].type)
    return plain_below(root_type, roots[0].selection_set)


def coerced_variables(schema: Any, operation: OperationDefinitionNode, variables: dict[str, Any] | None
                      ) -> dict[str, Any] | None:
    """The variables as execution will see them; None when they do not coerce (execution says why)."""
    from graphql.execution.values import get_variable_values

    if not isinstance(variables, (dict, type(None))):
        return None
    try:
        coerced = get_variable_values(schema, operation.variable_definitions or (), variables or {}, max_errors=1)
    except Exception:  # noqa: BLE001 - anything odd is for execution to report
        return None
    if isinstance(coerced, list):
        return None
    return dict(coerced.coerced)


def query_price(document: Any, operation_name: str | None, variables: dict[str, Any] | None,
                schema: Any = None, scale: DataScale | None = None,
                sizes: dict[str, PaperSize] | None = None) -> Price:
    """The operation's price from its document and arguments, before anything runs (both limits checked
    by `refusal`)."""
    operations, fragments = document_parts(document, operation_name)
    if len(operations) != 1:
        return Price(0, 0)  # no operation to run: execution reports it as a request error
    if schema is not None:
        coerced = coerced_variables(schema, operations[0], variables)
        if coerced is None:
            return Price(0, 0)  # variables that do not coerce: execution reports them, with locations
        variables = coerced
    costing = Costing(fragments, variables or {}, scale, sizes)
    costing.check_shape(operations[0].selection_set)
    found = costing.price(operations[0].selection_set, 1)
    found = Price(found.nodes, found.units + statement_share(costing, operations[0].selection_set), found.advice)
    if sizes is not None:
        found = Price(found.nodes, found.units + size_read(len(sizes)), found.advice)
    return found


def statement_share(costing: Costing, selection_set: SelectionSetNode | None) -> int:
    """The statements an operation may send, at the share actual_units charges each, and the rows its root
    lookups return: a statement for each field with a selection (a root lookup, a list, an object loaded for
    every item of a list; the dataloaders batch one field's loads across the items of a list into one
    statement, so a field counts once however many items it is asked for) and a row for each id a root
    field names. Fields priced with their statements (timeline, diff, ...) count too: an upper bound."""
    count, rows, enough = 0, 0, MAX_COST // PRICES["statement"] + 1  # past the limit: no need to count further
    stack: list[tuple[SelectionSetNode | None, int, str | None]] = []
    for field in costing.fields(selection_set):
        if field.selection_set is not None:
            ids = next((costing.args(field).get(a) for a in ("arxivIds", "ids") if a in costing.args(field)), None)
            rows += len(ids) if isinstance(ids, list) else 1
            count += 1
            # nodes(ids:) answers each id as of its own instant: below it, a field loads once per instant, but
            # for the lookups batched across instants (the nodes themselves, standing).
            instants = _instants(ids) if field.name.value == "nodes" and isinstance(ids, list) else 1
            stack.append((field.selection_set, instants, None))
    while stack and count < enough:
        below, instants, parent = stack.pop()
        for field, kind in costing.typed_fields(below, parent):
            name = field.name.value
            if field.selection_set is not None or instants > 1 and name in PER_INSTANT_LEAVES.get(
                    kind, PER_INSTANT_LEAVES[None]):
                once = name in ACROSS_INSTANTS or name in ROW_FIELDS
                count += 1 if once else instants
                if field.selection_set is not None:  # (a standing's parts come with it)
                    stack.append((field.selection_set, 1 if name in ACROSS_INSTANTS else instants,
                                  ROW_KINDS.get(name)))
    return PRICES["statement"] * count + rows


# Fields whose loaders batch one request's instants into one statement (loaders.dataloaders.AcrossInstants), and
# leaves that load per instant (a paper's DOI; a connection's count).
ACROSS_INSTANTS: Final = frozenset({"standing", "standingNotice", "retracted"})
PER_INSTANT_LEAVES: Final = {None: frozenset({"doi", "totalCount"}), "Paper": frozenset({"doi", "totalCount"}),
                              "Work": frozenset(), "CitationObservation": frozenset()}
ROW_KINDS: Final = {"citingPaper": "Paper", "citedPaper": "Paper", "citedWork": "Work"}
# Fields read from the row of the statement above them (a page's wrappers, an observation's papers, work and
# resolution): no statement per instant of their own.
ROW_FIELDS: Final = frozenset({"edges", "node", "nodes", "pageInfo", "citingPaper", "citedPaper", "citedWork",
                               "resolution"})


def _instants(ids: list) -> int:
    """How many instants the global ids name (those that name none: now), as nodes(ids:) answers them."""
    named = set()
    for value in ids:
        try:
            text = decode_token(value) if isinstance(value, str) else ""
        except Exception:  # (not an id: execution refuses it)
            text = ""
        named.add(text.rpartition("@")[2] if "@" in text else None)
    return max(1, len(named))


def size_read(papers: int) -> int:
    """The statement reading the sizes of the papers an operation names, a row each (and a row each of
    the papers' lookup, which a query's price otherwise leaves to its objects)."""
    return PRICES["statement"] + 2 * papers


def refusal(price: Price) -> GraphQLError | None:
    """Why an operation of this price may not run (QUERY_TOO_COSTLY), or None."""
    if price.nodes > MAX_NODES:
        return QueryCostError(
            f"query may touch {price.nodes} nodes; the limit is {MAX_NODES} per query "
            "(lower `first`, `perPaper`, `depth` or the number of ids)", cost=price.nodes, limit=MAX_NODES)
    if price.units > MAX_COST and price.advice is not None:
        return QueryCostError(f"query is priced at {price.units} work units; the limit is {MAX_COST} per operation. "
                              + price.advice, cost=price.units, limit=MAX_COST)
    if price.units > MAX_COST:
        return QueryCostError(
            f"query is priced at {price.units} work units; the limit is {MAX_COST} per operation (a record "
            f"costs {PRICES['record']}, a timeline entry a record, a recordDiff two records plus maxChanges, "
            "each object returned 1: lower `first`, `maxChanges`, `perPaper`, `depth` or the number of ids, "
            "or split the query)", cost=price.units, limit=MAX_COST)
    return None


# Parsed documents are cached by their text, bounded in bytes (not entries): a document's tree takes 100 to
# 300 bytes per character of its text (graphql-core keeps every token), so 1,024 entries of 12 kB documents
# held ~2.8 GB across a validation cache that also kept them. The estimate below is the high end, and the
# caches keyed by document (by_identity) drop a document's entries when it leaves this one.
DOCUMENT_BYTES_PER_CHAR = 300
DOCUMENT_CACHE_BYTES = 64 * 2**20
_documents: OrderedDict[tuple[str, int], tuple[Any, int]] = OrderedDict()
_documents_bytes = 0
_evicted: list[Callable[[Any], None]] = []  # told of each document that leaves the cache


# Seconds the current request spent reading documents (the text's check and the parser), wherever it was
# asked (the HTTP view's checks, the pipeline): app.pipeline charges them with the operation's validation.
READING: ContextVar[float] = ContextVar("reading", default=0.0)


def _read_text(query: str, max_tokens: int) -> tuple[Any, float]:
    """A text read: its document, the refusal its text alone earns (app.shape.TextRefused) or the parser's
    error, and the seconds it took. Touches no shared state: a thread may run it (read_off_loop)."""
    from graphql import parse

    from app.shape import lexical_problem

    started = time.perf_counter()
    try:
        # What the text alone refuses, before the parser's dearer pass: kept as its refusal (the text's
        # size, not a tree's), so a client repeating it is refused from memory.
        found: Any = lexical_problem(query, max_tokens) or _unlinked(parse(query, max_tokens=max_tokens))
    except GraphQLError as exc:
        found = exc
    return found, time.perf_counter() - started


def _unlinked(document: Any) -> Any:
    """The document, its tokens linked forward only. The parser links each token to the one before it and the one
    after, a cycle per pair, so a document let go waited for the collector, which then walked thousands of tokens
    (and held every thread of the process meanwhile); nothing reads a token's `prev` once the parse is done."""
    token = document.loc.start_token if document.loc is not None else None
    while token is not None:
        token.prev = None
        token = token.next
    return document


def _parsed(query: str, max_tokens: int, read: tuple[Any, float] | None = None) -> Any:
    """The parsed document of a text (the same object for the same text while it is cached). Raises the
    parser's GraphQLError, or app.shape.TextRefused for what the text alone refuses (not parsed at all).
    `read`: the text already read (_read_text, in read_off_loop's thread)."""
    global _documents_bytes
    key = (query, max_tokens)
    found = _documents.get(key)
    if found is not None:
        _documents.move_to_end(key)
        if isinstance(found[0], GraphQLError):  # a refusal kept (the text's, or a syntax error)
            raise _copied(found[0])
        return found[0]
    document, seconds = read or _read_text(query, max_tokens)
    READING.set(READING.get() + seconds)
    # A refusal (the text's, or the parser's syntax error) is kept as itself, the text's size: every later reading
    # of the text in this request and the next (the view's, the pipeline's, a GET's validator) raises it again
    # without parsing. Strawberry's own parse still reports a syntax error: once, on the event loop.
    refused = document if isinstance(document, GraphQLError) else None
    weight = 1_000 + (2 if refused else DOCUMENT_BYTES_PER_CHAR) * len(query)
    if weight > DOCUMENT_CACHE_BYTES // 8:
        if refused is not None:
            raise _copied(refused)
        return document  # too large to keep: parsed again when asked again
    _documents[key] = (document, weight)
    _documents_bytes += weight
    while _documents_bytes > DOCUMENT_CACHE_BYTES:
        _, (old, old_weight) = _documents.popitem(last=False)
        _documents_bytes -= old_weight
        for forget in _evicted:
            forget(old)
    if refused is not None:
        raise _copied(refused)
    return document


def _copied(error: GraphQLError) -> GraphQLError:
    """A kept refusal, an object of its own for each raise (a kept one would hold the traceback of its last)."""
    from app.shape import TextRefused

    if isinstance(error, TextRefused):
        return error.copy()
    extensions = error.extensions
    if isinstance(error, GraphQLSyntaxError):  # (a copy is no longer one: its code says what it was)
        extensions = {**(extensions or {}), "code": "GRAPHQL_PARSE_FAILED"}
    return GraphQLError(error.message, source=error.source, positions=error.positions, extensions=extensions)


# Reading a long document not seen before (parsing it, checking its shape, validating it: pure Python, ~30 ms for
# a 12 kB one of a thousand fields) is done in a thread of the process's own, one document at a time, so the
# event loop goes on serving other requests meanwhile: in one piece on the loop, each such document held every
# request of the process (a light client's lookups waited up to 70 ms behind a flood of distinct ones). Short
# documents (almost every request) and those already in the caches are read on the loop, which is cheaper.
_READER = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="pith-reader")
READ_IN_THREAD = [0]  # parses and validations done in the reader thread (tests read it)
_in_reader = [0]  # long documents holding a place of the reader's (READER_WAITING)
READER_REFUSED = [0]  # long documents refused because the reader was full (tests and metrics read it)


class ReaderBusy(GraphQLError):
    """A long document refused before it was read: the process's reader had no place for it in time
    (SERVICE_UNAVAILABLE: 503 with Retry-After over HTTP, the same error on every other transport)."""

    def __init__(self) -> None:
        super().__init__(f"the server is busy reading other long documents; retry in a few seconds, or "
                         f"send a document under {OFF_LOOP_CHARS:,} characters (or a persisted one)",
                         extensions={"code": "SERVICE_UNAVAILABLE"})


async def _in_reader_thread(fn: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    """fn(*args) run in the reader thread, and the seconds it took there. A document waits for one of the
    READER_WAITING places (held until the thread is done with it, whether its request waited or left) at most
    READER_WAIT_SECONDS, its text alone held meanwhile; then ReaderBusy, unread. (Waiting, not refused at once: a
    client refused at once sends its next document at once, and refusing it costs the event loop too.) Places go
    to the waiting client with the most of its pace left (READER_STANDING), so a client that reads little is not
    queued behind those that read much."""
    places = _places()
    if not await places.take(-READER_STANDING.get(), READER_WAIT_SECONDS):
        READER_REFUSED[0] += 1
        raise ReaderBusy()
    loop = asyncio.get_running_loop()
    _in_reader[0] += 1

    def left(_: Any) -> None:
        _in_reader[0] -= 1
        places.give()

    try:
        future = _READER.submit(_paced, fn, *args)
    except BaseException:
        left(None)
        raise
    future.add_done_callback(lambda _: loop.call_soon_threadsafe(left, None))
    return await asyncio.wrap_future(future)


# How much of its pace the requesting client has left (app.governor.Governor.standing), set as a request is
# identified: the reader's places go to the waiting client with the most.
READER_STANDING: ContextVar[float] = ContextVar("reader_standing", default=0.0)


class Places:
    """`free` places, taken by rank (the lowest first, then in order of asking) by waiters that give up at their
    own time."""

    def __init__(self, free: int) -> None:
        self.free = free
        self._waiting: list[tuple[float, int, asyncio.Future]] = []
        self._asked = itertools.count()

    async def take(self, rank: float, seconds: float) -> bool:
        """A place (True), at once or within `seconds`; False when none came in time."""
        if self.free > 0 and not self._waiting:
            self.free -= 1
            return True
        given = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting, (rank, next(self._asked), given))
        try:
            async with asyncio.timeout(seconds):
                await given
            return True
        except BaseException as exc:
            if given.done() and not given.cancelled():
                self.give()  # given as the waiter gave up or left: the next has it
            if isinstance(exc, TimeoutError):
                return False
            raise

    def give(self) -> None:
        """A place back: to the first waiter still waiting, else free."""
        while self._waiting:
            _, _, given = heapq.heappop(self._waiting)
            if not given.done():
                given.set_result(None)
                return
        self.free += 1


_PLACES: list[tuple[Any, Places]] = []


def _places() -> Places:
    """The reader's places, for the running event loop (a worker has one; tests start several)."""
    loop = asyncio.get_running_loop()
    if not _PLACES or _PLACES[0][0] is not loop:
        _PLACES[:] = [(loop, Places(READER_WAITING))]
    return _PLACES[0][1]


def _paced(fn: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    """fn(*args) and its seconds, then a rest in proportion (READER_SHARE) queued for the thread: a job of its own,
    so this document's answer does not wait for it, the next document does (a sleep lets the interpreter go)."""
    started = time.perf_counter()
    try:
        return fn(*args), time.perf_counter() - started
    finally:
        _READER.submit(time.sleep, (time.perf_counter() - started) * (1 - READER_SHARE) / READER_SHARE)


def read_in_thread(query: str | None) -> bool:
    """Whether a document's reading goes to the reader thread (its text long: OFF_LOOP_CHARS)."""
    return query is not None and len(query) >= OFF_LOOP_CHARS


async def read_off_loop(query: str, max_tokens: int) -> None:
    """Put a long text's document in the parse cache, read in the reader thread (its seconds charged to the
    request's READING as any reading is); the caller's _parsed then finds it. A no-op for a short text or one
    already kept."""
    if not read_in_thread(query) or (query, max_tokens) in _documents:
        return
    read, _ = await _in_reader_thread(_read_text, query, max_tokens)
    READ_IN_THREAD[0] += 1
    with contextlib.suppress(GraphQLError):
        _parsed(query, max_tokens, read)


async def validated_off_loop(query: str | None, schema: Any, document: Any, rules: tuple,
                             hide_suggestions: bool) -> tuple[list[GraphQLError], float] | None:
    """A long document's errors (checked), found in the reader thread, with the seconds that took there; None
    when finding them is the loop's to do (a short text, or a validation already kept)."""
    if not read_in_thread(query) or _validated.known(schema, document, rules, hide_suggestions):
        return None

    def found() -> tuple[GraphQLError | None, list[GraphQLError] | None]:
        problem = _shape.__wrapped__(schema, document)
        return problem, None if problem is not None else _validated.__wrapped__(schema, document, rules,
                                                                                 hide_suggestions)

    (problem, errors), seconds = await _in_reader_thread(found)
    READ_IN_THREAD[0] += 1
    _shape.keep(problem, schema, document)
    if errors is None:
        return [problem], seconds  # type: ignore[list-item]
    _validated.keep(errors, schema, document, rules, hide_suggestions)
    return errors, seconds


def checked(schema: Any, document: Any, rules: tuple, hide_suggestions: bool) -> list[GraphQLError]:
    """What the server refuses in a parsed document: its shape (app.shape, a linear pass refusing what would make
    validation slow), else graphql-core's validation with `rules` (both kept by document)."""
    problem = _shape(schema, document)
    if problem is not None:
        return [problem]
    return _validated(schema, document, rules, hide_suggestions)


def document_cache_bytes() -> int:
    """The parse cache's estimated size (tests and metrics read it)."""
    return _documents_bytes


def by_identity(fn: Any) -> Any:
    """Cache by the identity of the schema and document (the parse cache hands every request of a
    query the same document): hashing a document, as lru_cache would, walks its whole tree. A
    document's entries go when the parse cache lets the document go (and at most 1,024 entries stay
    in any case, for documents parsed elsewhere)."""
    cache: dict[tuple, tuple] = {}
    keys_of: dict[int, list[tuple]] = {}

    def forget(document: Any) -> None:
        for key in keys_of.pop(id(document), ()):
            found = cache.get(key)
            if found is not None and found[1] is document:
                del cache[key]

    _evicted.append(forget)

    def cached(schema: Any, document: Any, *rest: Any) -> Any:
        key = (id(schema), id(document), rest)
        found = cache.get(key)
        if found is not None and found[0] is schema and found[1] is document:
            return found[2]
        value = fn(schema, document, *rest)
        if len(cache) >= 1024:
            cache.clear()
            keys_of.clear()
        cache[key] = (schema, document, value)  # holding both keeps their ids from being reused
        keys_of.setdefault(id(document), []).append(key)
        return value

    def known(schema: Any, document: Any, *rest: Any) -> bool:
        found = cache.get((id(schema), id(document), rest))
        return found is not None and found[0] is schema and found[1] is document

    def keep(value: Any, schema: Any, document: Any, *rest: Any) -> None:
        """Keep a value computed elsewhere (the reader thread) as if `cached` had computed it."""
        key = (id(schema), id(document), rest)
        if len(cache) >= 1024:
            cache.clear()
            keys_of.clear()
        cache[key] = (schema, document, value)
        keys_of.setdefault(id(document), []).append(key)

    cached.__wrapped__ = fn  # type: ignore[attr-defined]
    cached.known = known  # type: ignore[attr-defined]
    cached.keep = keep  # type: ignore[attr-defined]
    return cached


@by_identity
def _shape(schema: Any, document: Any) -> GraphQLError | None:
    from app.shape import shape_problem

    return shape_problem(document)


@by_identity
def _validated(schema: Any, document: Any, rules: tuple, hide_suggestions: bool = False) -> list[GraphQLError]:
    """graphql-core's validation; `hide_suggestions` (production) leaves every "Did you mean" out, and the
    work of finding one (a name's distance to every name it could have been)."""
    from strawberry.schema.validation_rules.maybe_null import MaybeNullValidationRule
    from strawberry.schema.validation_rules.one_of import OneOfInputValidationRule

    added: tuple = (MaybeNullValidationRule, OneOfInputValidationRule)
    if not _uses_variables(document):
        # The rules about variables say nothing of a document without any, and the first two walk the whole
        # operation for its variables' uses before any other rule has said a word: most of the validation of
        # a thousand fields (13 of 18 ms), all of it for a document of unknown fields.
        rules = tuple(r for r in rules if r not in _VARIABLE_RULES)
    if _undefined_fragments(document):
        # Strawberry's depth limiter follows every spread to its definition (a KeyError for one that has none):
        # graphql-core's own rules say what is wrong (Unknown fragment), the others are left out.
        rules, added = tuple(r for r in rules if r.__module__.startswith("graphql.")), ()
    # Strawberry's validate_document, with graphql-core's hide_suggestions.
    return _validate(schema, document, (*rules, *added), hide_suggestions)


def _validate(schema: Any, document: Any, rules: tuple, hide_suggestions: bool) -> list[GraphQLError]:
    """graphql-core's `validate` (its steps, in its order, with its own pieces; the schema's own check left to
    execution, which makes it anyway), but its visitors taken apart when it ends. graphql-core's visitors keep
    their own bound methods by node kind (a cycle each), its rules the context and so the document, its
    ParallelVisitor the node it skips: all of it, a document of thousands of nodes included, waited for the
    collector, which ran in whichever thread allocated next (in the reader thread, its collections of ~40,000
    objects held the event loop 30-70 ms). Taken apart, they go by reference counting."""
    from graphql import FragmentDefinitionNode, TypeInfo, TypeInfoVisitor, visit
    from graphql.language import ParallelVisitor
    from graphql.validation import ValidationContext
    from graphql.validation.validate import (FragmentNestingVisitor, ValidationAbortedError,
                                             query_document_keys_to_validate)

    errors: list[GraphQLError] = []

    def on_error(error: GraphQLError) -> None:
        if len(errors) >= MAX_VALIDATION_ERRORS:
            raise ValidationAbortedError("Too many validation errors, error limit reached. Validation aborted.")
        errors.append(error)

    type_info = TypeInfo(schema)
    context = ValidationContext(schema, document, type_info, on_error, hide_suggestions)
    visitors = [rule(context) for rule in rules]
    fragments = {d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)}
    if fragments:
        visitors.insert(0, FragmentNestingVisitor(fragments))
    together = ParallelVisitor(visitors)
    walker = TypeInfoVisitor(type_info, together)
    try:
        visit(document, walker, query_document_keys_to_validate)
    except ValidationAbortedError as error:
        error.__context__ = None
        errors.append(error.with_traceback(None))
    except RecursionError:
        errors.append(ValidationAbortedError("Validation aborted."))
    finally:
        for visitor in (walker, together, *visitors):
            getattr(visitor, "__dict__", {}).clear()
    return errors


def _variable_rules() -> tuple:
    from graphql.validation import (NoUndefinedVariablesRule, NoUnusedVariablesRule,
                                    VariablesInAllowedPositionRule)

    return (NoUndefinedVariablesRule, NoUnusedVariablesRule, VariablesInAllowedPositionRule)


_VARIABLE_RULES = _variable_rules()


def _uses_variables(document: Any) -> bool:
    """Whether the document defines or uses a variable: a `$` among its tokens (read from the parser's token
    list, without a walk of the tree; a document without locations is taken to use them)."""
    from graphql.language import TokenKind

    token = document.loc.start_token if document.loc is not None else None
    if token is None:
        return True
    while token is not None:
        if token.kind is TokenKind.DOLLAR:
            return True
        token = token.next
    return False


def _undefined_fragments(document: Any) -> bool:
    """Whether the document spreads a fragment it does not define."""
    from graphql import FragmentDefinitionNode
    from graphql.language import Visitor, visit

    defined = {d.name.value for d in document.definitions if isinstance(d, FragmentDefinitionNode)}
    spread: set[str] = set()

    class Spreads(Visitor):
        def enter_fragment_spread(self, node: Any, *_: Any) -> None:
            spread.add(node.name.value)

    visit(document, Spreads())
    return not spread <= defined


@by_identity
def _plan(schema: Any, document: Any, operation_name: str | None, compiled: bool = False) -> tuple[bool, bool]:
    """(one statement, whether any argument the budget reads comes from a variable) for a document."""
    from graphql import VariableNode, visit
    from graphql.language import Visitor

    class Sized(Visitor):
        found = False

        def enter_argument(self, node: Any, *_: Any) -> None:
            if node.name.value in (*ARGUMENTS, "arxivIds", "ids") and isinstance(node.value, VariableNode):
                Sized.found = True
            elif node.name.value in ("arxivIds", "ids") and any(isinstance(v, VariableNode)
                                                                for v in getattr(node.value, "values", ())):
                Sized.found = True

    visit(document, Sized())
    single = one_statement(schema, document, operation_name) or (compiled and _compiles(document, operation_name))
    return single, Sized.found


def _compiles(document: Any, operation_name: str | None) -> bool:
    """A compiled operation is one statement (app.compiled); if it falls back, it asks for a transaction."""
    from app.compiled import compiled_for

    operations, fragments = document_parts(document, operation_name)
    return len(operations) == 1 and compiled_for(operations[0], fragments) is not None


@by_identity
def _static_price(schema: Any, document: Any, operation_name: str | None, scale: Scale) -> Price:
    return query_price(document, operation_name, None, None, DataScale(scale))


def operation_price(schema: Any, document: Any, operation_name: str | None, variables: dict[str, Any] | None,
                    scale: DataScale, compiled: bool = True, sizes: dict[str, PaperSize] | None = None) -> Price:
    """The price of running the operation with these variables: computed once per document when no
    variable sizes a list (cached), else per request; with `sizes` (priced_papers' papers, read by
    paper_sizes), data-sized work of those papers is priced from their own sizes. Raises UserInputError
    for an argument out of range. Every transport and the plans price operations here."""
    if sizes is not None:
        return query_price(document, operation_name, variables, schema, scale, sizes)
    _, sized = _plan(schema, document, operation_name, compiled)
    if not sized:
        return _static_price(schema, document, operation_name, scale.current)
    return query_price(document, operation_name, variables, schema, scale)


def filtered(field: FieldNode) -> bool:
    """A paper's inbound or outbound connection that may be filtered (status, citesRetracted): its page and
    its totalCount walk the paper's edges that way, as many as the paper has (data-sized)."""
    return field.name.value in ("inbound", "outbound") and any(a.name.value in FILTERS for a in field.arguments or ())


@by_identity
def _data_sized(schema: Any, document: Any, operation_name: str | None) -> bool:
    """Whether the operation asks for data-sized work (DATA_SIZED) below a root field naming its paper(s)."""
    operations, fragments = document_parts(document, operation_name)
    if len(operations) != 1:
        return False
    costing = Costing(fragments, {})

    def sized(selection_set: Any, depth: int) -> bool:
        return any(f.name.value in DATA_SIZED or filtered(f) or (depth < 1 and sized(f.selection_set, depth + 1))
                   for f in costing.fields(selection_set))

    return any(f.name.value in PAPER_ROOTS and (f.name.value in DATA_SIZED or sized(f.selection_set, 0))
               for f in costing.fields(operations[0].selection_set))


def priced_papers(schema: Any, document: Any, operation_name: str | None,
                  variables: dict[str, Any] | None) -> list[str]:
    """The papers whose own sizes price this operation: those its root fields name, when data-sized work
    is asked of them ([] when none is; arguments that do not coerce are for execution to report)."""
    if not _data_sized(schema, document, operation_name):
        return []
    operations, fragments = document_parts(document, operation_name)
    coerced = coerced_variables(schema, operations[0], variables)
    if coerced is None:
        return []
    costing = Costing(fragments, coerced)
    found: list[str] = []
    for field in costing.fields(operations[0].selection_set):
        argument = PAPER_ROOTS.get(field.name.value)
        if argument is None:
            continue
        value = next((value_from_ast_untyped(a.value, coerced) for a in field.arguments or ()
                      if a.name.value == argument), None)
        for arxiv_id in value if isinstance(value, list) else [value]:
            # Only ids that can be papers' are looked up (a malformed one, a NUL in it say, is execution's to
            # refuse as BAD_USER_INPUT, not the database's to fail on).
            if isinstance(arxiv_id, str) and arxiv_id not in found and is_arxiv_id(arxiv_id):
                found.append(arxiv_id)
    return found[: MAX_IDS * 4]


async def paper_sizes(db: Any, arxiv_ids: list[str]) -> dict[str, PaperSize]:
    """Each paper's size, read by the operation's own session (the snapshot it then answers from)."""
    from loaders.system import PAPER_SIZES

    found = {arxiv_id: PaperSize() for arxiv_id in arxiv_ids}
    for row in await db.fetch(PAPER_SIZES, arxiv_ids):
        found[row["arxiv_id"]] = PaperSize(row["inbound"], row["outbound"])
    return found
