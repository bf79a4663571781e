"""Query cost, computed from the document and its arguments before anything runs (GitHub's node rule).

Every list a query can ask for counts the nodes it may return, multiplied by the lists around it:
`papers(arxivIds: [..100 ids]) { inbound(first: 100) }` may touch 100 + 100 x 100 nodes. A query over
MAX_NODES is refused before execution, and every response reports its cost in `extensions.cost`.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Iterator

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
from strawberry.extensions import SchemaExtension
from strawberry.types import ExecutionResult

from app.errors import QueryCostError, UserInputError

MAX_NODES = 500_000
MAX_NEIGHBOURHOOD_PAPERS = 10_000
LIMITS = {"first": (1, 100), "last": (1, 100), "perPaper": (1, 100), "depth": (1, 3)}
# (field name) -> (argument that sizes it, its default)
LISTS = {"inbound": ("first", 100), "outbound": ("first", 100), "searchPapers": ("first", 10),
         "timeline": ("first", 100)}


# Introspection fields that return lists: nesting one inside another multiplies the answer
# (types > fields > type > fields > ...), the classic introspection abuse. GraphiQL's own query
# nests none of them twice along a path.
INTROSPECTION_LISTS = frozenset({"types", "fields", "inputFields", "interfaces", "possibleTypes", "enumValues", "args",
                                 "directives"})
MAX_TOTAL_DEPTH = 20  # introspection included; GraphiQL's introspection query is 15 deep


class Costing:
    def __init__(self, fragments: dict[str, FragmentDefinitionNode], variables: dict[str, Any]) -> None:
        self.fragments = fragments
        self.variables = variables

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

    def nodes(self, selection_set: SelectionSetNode | None, multiplier: int) -> int:
        total = 0
        for field in self.fields(selection_set):
            name = field.name.value
            args = self.args(field)
            size = 1
            if name in LISTS:
                arg, default = LISTS[name]
                size = next((args[a] for a in (arg, "last") if args.get(a) is not None), default)
            elif name in ("papers", "nodes"):
                argument = "arxivIds" if name == "papers" else "ids"
                ids = args.get(argument)
                size = len(ids) if isinstance(ids, list) else 1
                if not 1 <= size <= 100:
                    raise UserInputError(f"{argument}: {size} ids given; give 1 to 100", nodes=[field],
                                         argument=argument)
            elif name == "neighbourhood":
                depth = args.get("depth") or 2
                per_paper = args.get("perPaper") or 10
                size = min(MAX_NEIGHBOURHOOD_PAPERS, sum(per_paper ** h for h in range(1, depth + 1)))
            own = multiplier * size
            if name in LISTS or name in ("papers", "nodes", "neighbourhood"):
                total += own
            total += self.nodes(field.selection_set, own)
            if total > MAX_NODES * 1000:  # no need to count further
                return total
        return total


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


def query_nodes(document: Any, operation_name: str | None, variables: dict[str, Any] | None,
                schema: Any = None) -> int:
    operations, fragments = document_parts(document, operation_name)
    if len(operations) != 1:
        return 0  # no operation to run: execution reports it as a request error
    if schema is not None:
        coerced = coerced_variables(schema, operations[0], variables)
        if coerced is None:
            return 0  # variables that do not coerce: execution reports them, with locations
        variables = coerced
    costing = Costing(fragments, variables or {})
    for op in operations[:1]:
        costing.check_shape(op.selection_set)
    return sum(costing.nodes(op.selection_set, 1) for op in operations[:1])


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


class RequestPipeline(SchemaExtension):
    """Everything a request goes through before execution, in one extension (one set of hooks).

    Limits (tokens at parse time; depth and aliases as validation rules built once), parse and
    validation results cached by document (LRU, per process), then the node budget over the coerced
    arguments, refused before execution; after execution, the cost in `extensions.cost`.
    """

    def __init__(self, *, execution_context: Any = None, rules: tuple = (), max_tokens: int = 5_000) -> None:
        self.rules = rules
        self.max_tokens = max_tokens
        self.nodes: int | None = None

    def on_operation(self):  # type: ignore[override]
        ctx = self.execution_context
        ctx.parse_options["max_tokens"] = self.max_tokens
        ctx.validation_rules = ctx.validation_rules + self.rules
        yield

    def on_parse(self):  # type: ignore[override]
        ctx = self.execution_context
        if ctx.graphql_document is None and ctx.query:
            ctx.graphql_document = _parsed(ctx.query, self.max_tokens)
        yield

    def on_validate(self):  # type: ignore[override]
        ctx = self.execution_context
        if ctx.pre_execution_errors is None and ctx.graphql_document is not None:
            ctx.pre_execution_errors = _validated(ctx.schema._schema, ctx.graphql_document, ctx.validation_rules)
        yield

    def on_execute(self):  # type: ignore[override]
        ctx = self.execution_context
        error: GraphQLError | None = None
        document = ctx.graphql_document
        if document is not None:
            compiled = getattr(ctx.schema.execution_context_class, "compiled", False)
            single, sized_by_variables = _plan(ctx.schema._schema, document, ctx.operation_name, compiled)
            try:
                self.nodes = query_nodes(document, ctx.operation_name, ctx.variables,
                                         ctx.schema._schema if sized_by_variables else None)
            except GraphQLError as exc:
                error = exc
            else:
                if self.nodes > MAX_NODES:
                    error = QueryCostError(
                        f"query may touch {self.nodes} nodes; the limit is {MAX_NODES} per query "
                        f"(lower `first`, `perPaper`, `depth` or the number of ids)",
                        cost=self.nodes, limit=MAX_NODES)
            if error is None:
                session = getattr(ctx.context, "session", None)
                if session is not None and session.statements == 0:
                    session.single_statement = single
        if error is not None:
            ctx.result = ExecutionResult(data=None, errors=[error])
        yield

    def get_results(self) -> dict[str, Any]:
        context = self.execution_context.context
        statements = getattr(getattr(context, "session", None), "statements", None)
        return {"cost": {"nodes": self.nodes, "limit": MAX_NODES, "statements": statements}}
