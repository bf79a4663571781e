"""Query cost, computed from the document and its arguments before anything runs (GitHub's node rule).

Every list a query can ask for counts the nodes it may return, multiplied by the lists around it:
`papers(arxivIds: [..100 ids]) { inbound(first: 100) }` may touch 100 + 100 x 100 nodes. A query over
MAX_NODES is refused before execution, and every response reports its cost in `extensions.cost`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final, Iterator

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
from graphql.error import GraphQLError

from app.errors import QueryCostError, UserInputError
from app.limits import ARGUMENT_RANGES as LIMITS
from app.limits import (DEFAULT_MAX_CHANGES, MAX_COST, MAX_IDS, MAX_NEIGHBOURHOOD_PAPERS, MAX_NODES,
                        MAX_TOTAL_DEPTH, POINT_UNITS)

# (field name) -> (argument that sizes it, its default)
LISTS = {"inbound": ("first", 100), "outbound": ("first", 100), "searchPapers": ("first", 10),
         "timeline": ("first", 100), "browsePapers": ("first", 100), "works": ("first", 100)}


# Introspection fields that return lists: nesting one inside another multiplies the answer
# (types > fields > type > fields > ...), the classic introspection abuse. GraphiQL's own query
# nests none of them twice along a path.
INTROSPECTION_LISTS = frozenset({"types", "fields", "inputFields", "interfaces", "possibleTypes", "enumValues", "args",
                                 "directives"})


class Costing:
    def __init__(self, fragments: dict[str, FragmentDefinitionNode], variables: dict[str, Any],
                 scale: "DataScale | None" = None) -> None:
        self.fragments = fragments
        self.variables = variables
        self.scale = scale or DataScale()
        self.root = True  # papers/nodes are the root fields; a Paper has none of those names
        self.max_changes = DEFAULT_MAX_CHANGES

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
        for name, (low, high) in LIMITS.items():
            if values.get(name) is not None:
                value = values[name]
                if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
                    raise UserInputError(f"{name}: {value!r} is out of range; allowed {low} to {high}",
                                         nodes=[field], argument=name)
        return values

    def fields(self, selection_set: SelectionSetNode | None, seen: frozenset[str] = frozenset()) -> Iterator[FieldNode]:
        if selection_set is None:
            return
        for selection in selection_set.selections:
            if isinstance(selection, FieldNode):
                yield selection
            elif isinstance(selection, InlineFragmentNode):
                yield from self.fields(selection.selection_set, seen)
            elif isinstance(selection, FragmentSpreadNode):
                name = selection.name.value
                if name in seen or name not in self.fragments:
                    continue
                yield from self.fields(self.fragments[name].selection_set, seen | {name})

    def price(self, selection_set: SelectionSetNode | None, multiplier: int) -> "Price":
        """What the selection may cost: list nodes (GitHub's rule) and work units (see PRICES)."""
        nodes = units = 0
        for field in self.fields(selection_set):
            name = field.name.value
            args = self.args(field)
            size = 1
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
            elif name == "neighbourhood":
                depth = args.get("depth") or 2
                per_paper = args.get("perPaper") or 10
                # No walk reaches more papers than there are (nor than the cap).
                size = min(self.scale.current.papers, sum(per_paper ** h for h in range(1, depth + 1)))
            elif name == "changes":
                size = self.max_changes
            own = multiplier * size
            if name in LISTS or name in ("papers", "nodes", "neighbourhood") and self.root:
                nodes += own
            connection = name in LISTS or name == "neighbourhood"
            if field.selection_set is not None:  # objects to complete: a connection is one, its items many
                units += multiplier if connection else own
            units += multiplier * self.work(name, args, size)
            root, self.root = self.root, False
            saved = self.max_changes
            if name == "recordDiff":
                self.max_changes = args.get("maxChanges") or DEFAULT_MAX_CHANGES
            # Inside a list, what repeats per item is its items (edges, nodes, papers...); a connection's
            # totalCount and pageInfo come once per connection.
            below = self.price_connection(field.selection_set, own, multiplier) if connection \
                else self.price(field.selection_set, own)
            self.root, self.max_changes = root, saved
            nodes += below.nodes
            units += below.units
            if nodes > MAX_NODES * 1000 or units > MAX_COST * 1000:  # no need to count further
                break
        return Price(nodes, units)

    def price_connection(self, selection_set: SelectionSetNode | None, items: int, once: int) -> "Price":
        nodes = units = 0
        for field in self.fields(selection_set):
            multiplier = items if field.name.value in ("edges", "nodes", "papers") else once
            found = self.price(SelectionSetNode(selections=(field,)), multiplier)
            nodes += found.nodes
            units += found.units
        return Price(nodes, units)

    def work(self, name: str, args: dict[str, Any], size: int) -> int:
        """Work a field does beyond the objects it returns (records built, rows scanned)."""
        if name == "citationRecord":
            return PRICES["record"]
        if name == "recordDiff":
            # Two records, the changes, and a scan of every observation of the paper (and their facts).
            return 2 * PRICES["record"] + (args.get("maxChanges") or DEFAULT_MAX_CHANGES) + 2 * self.scale.max_degree
        if name == "timeline":
            # Every observation of the paper and the facts about them (about as many again) are read, then a
            # record is built at each entry of the page (they share their statements: cheaper than one each).
            return 2 * self.scale.max_degree + size * PRICES["timeline_entry"]
        if name == "searchPapers":
            return PRICES["search"]
        if name in ("browsePapers", "works"):
            # An index walk that stops after the page; ordered by inbound total, every paper's is counted first.
            scan = 2 * self.scale.current.papers if args.get("orderBy") == "INBOUND_COUNT_DESC" else 0
            return PRICES["search"] + scan
        if name == "neighbourhood":
            return size + (args.get("depth") or 2) * PRICES["hop"]  # the edges read, a statement per hop
        if name == "totalCount":
            return PRICES["count"]
        if name == "citationsByYear":  # every citing observation of the paper, and each citer's snapshot
            return 2 * self.scale.max_degree
        if name in ("standingNotice", "standing", "digest"):
            return PRICES["standing"]
        return 0


@dataclass(frozen=True)
class Price:
    nodes: int  # list nodes, GitHub's rule (limit MAX_NODES)
    units: int  # work units (limit MAX_COST)

    @property
    def points(self) -> int:
        """What the operation is charged against a client's budget: a point per POINT_UNITS, at least 1."""
        return max(1, -(-self.units // POINT_UNITS))


# Work units of what a field does beyond its objects, calibrated by bench/calibrate.py on the
# 10,000-paper graph (a unit is about one object completed, ~20-40 us there).
PRICES: Final = {"record": 1_000, "search": 900, "count": 50, "standing": 15, "statement": 50, "hop": 150,
                  "timeline_entry": 200}


@dataclass(frozen=True)
class Scale:
    """What the data makes some work cost: the most observations one paper has (a timeline and a diff
    read them all), and how many papers there are (no walk reaches more)."""

    max_degree: int = 20_000
    papers: int = MAX_NEIGHBOURHOOD_PAPERS


@dataclass
class DataScale:
    """The current Scale, refreshed from PostgreSQL's statistics (app.main), never on a request's path."""

    current: Scale = Scale()

    @property
    def max_degree(self) -> int:
        return self.current.max_degree


# PostgreSQL's statistics: the most common cited (citing) paper's share of the observations, times
# their number, is the planner's own estimate of the largest degree; the snapshots' row estimate bounds
# the papers. Before ANALYZE (reltuples -1, no pg_stats) a small table is counted instead.
SCALE_ESTIMATE: Final = """
SELECT (SELECT max(f * c.reltuples)::bigint
          FROM pg_stats AS s, unnest(s.most_common_freqs) AS f, pg_class AS c
         WHERE s.tablename = 'citation_observations' AND s.attname IN ('cited_arxiv_id', 'citing_arxiv_id')
           AND c.relname = 'citation_observations' AND c.reltuples >= 0) AS max_degree,
       (SELECT reltuples::bigint FROM pg_class WHERE relname = 'citation_observations') AS observations,
       (SELECT reltuples::bigint FROM pg_class WHERE relname = 'paper_snapshots') AS snapshots
"""
SMALL: Final = 200_000  # rows that are counted exactly when statistics are missing
EXACT_SCALE: Final = f"""
SELECT (SELECT count(*) FROM (SELECT 1 FROM paper_snapshots LIMIT {SMALL + 1}) AS s) AS snapshots,
       (SELECT count(*) FROM (SELECT 1 FROM citation_observations LIMIT {SMALL + 1}) AS s) AS observations
"""
EXACT_DEGREE: Final = """
SELECT greatest((SELECT max(n) FROM (SELECT count(*) AS n FROM citation_observations GROUP BY cited_arxiv_id) a),
                (SELECT max(n) FROM (SELECT count(*) AS n FROM citation_observations GROUP BY citing_arxiv_id) b))
"""


async def data_scale(conn: Any) -> Scale:
    """The data's scale for pricing, from PostgreSQL's statistics (exact counts while the tables are small)."""
    row = await conn.fetchrow(SCALE_ESTIMATE)
    degree, observations, snapshots = row["max_degree"], row["observations"], row["snapshots"]
    if snapshots is None or snapshots < 0 or observations is None or observations < 0 or degree is None:
        exact = await conn.fetchrow(EXACT_SCALE)
        snapshots = exact["snapshots"] if snapshots is None or snapshots < 0 else snapshots
        observations = exact["observations"] if observations is None or observations < 0 else observations
        if degree is None and observations <= SMALL:
            degree = await conn.fetchval(EXACT_DEGREE) or 0
    default = Scale()
    return Scale(max_degree=max(100, int(degree)) if degree is not None else default.max_degree,
                 papers=max(1, min(int(snapshots), MAX_NEIGHBOURHOOD_PAPERS)) if snapshots > 0 else 1)


def actual_units(data: Any, rows: int, statements: int = 0) -> int:
    """The work an operation did: the objects in its answer, the rows its statements returned (with the
    work charged beside them), and a fixed share per statement."""
    count = 0
    stack = [data]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            count += 1
            stack.extend(v for v in value.values() if isinstance(v, (dict, list)))
        elif isinstance(value, list):
            stack.extend(v for v in value if isinstance(v, (dict, list)))
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
                schema: Any = None, scale: DataScale | None = None) -> Price:
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
    costing = Costing(fragments, variables or {}, scale)
    costing.check_shape(operations[0].selection_set)
    return costing.price(operations[0].selection_set, 1)


def refusal(price: Price) -> GraphQLError | None:
    """Why an operation of this price may not run (QUERY_TOO_COSTLY), or None."""
    if price.nodes > MAX_NODES:
        return QueryCostError(
            f"query may touch {price.nodes} nodes; the limit is {MAX_NODES} per query "
            "(lower `first`, `perPaper`, `depth` or the number of ids)", cost=price.nodes, limit=MAX_NODES)
    if price.units > MAX_COST:
        return QueryCostError(
            f"query is priced at {price.units} work units; the limit is {MAX_COST} per operation (a record "
            f"costs {PRICES['record']}, a timeline entry a record, a recordDiff two records plus maxChanges, "
            "each object returned 1: lower `first`, `maxChanges`, `perPaper`, `depth` or the number of ids, "
            "or split the query)", cost=price.units, limit=MAX_COST)
    return None


@lru_cache(maxsize=1024)
def _parsed(query: str, max_tokens: int) -> Any:
    from graphql import parse

    return parse(query, max_tokens=max_tokens)


def by_identity(fn: Any) -> Any:
    """Cache by the identity of the schema and document (the parse cache hands every request of a
    query the same document): hashing a document, as lru_cache would, walks its whole tree."""
    cache: dict[tuple, tuple] = {}

    def cached(schema: Any, document: Any, *rest: Any) -> Any:
        key = (id(schema), id(document), rest)
        found = cache.get(key)
        if found is not None and found[0] is schema and found[1] is document:
            return found[2]
        value = fn(schema, document, *rest)
        if len(cache) >= 1024:
            cache.clear()
        cache[key] = (schema, document, value)  # holding both keeps their ids from being reused
        return value

    return cached


@by_identity
def _validated(schema: Any, document: Any, rules: tuple) -> list[GraphQLError]:
    from strawberry.schema.schema import validate_document

    return validate_document(schema, document, rules)


@by_identity
def _plan(schema: Any, document: Any, operation_name: str | None, compiled: bool = False) -> tuple[bool, bool]:
    """(one statement, whether any argument the budget reads comes from a variable) for a document."""
    from graphql import VariableNode, visit
    from graphql.language import Visitor

    class Sized(Visitor):
        found = False

        def enter_argument(self, node: Any, *_: Any) -> None:
            if node.name.value in (*LIMITS, "arxivIds", "ids") and isinstance(node.value, VariableNode):
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
                    scale: DataScale, compiled: bool = True) -> Price:
    """The price of running the operation with these variables: computed once per document when no
    variable sizes a list (cached), else per request. Raises UserInputError for an argument out of range.
    Every transport and the prepared path price operations here."""
    _, sized = _plan(schema, document, operation_name, compiled)
    if not sized:
        return _static_price(schema, document, operation_name, scale.current)
    return query_price(document, operation_name, variables, schema, scale)
