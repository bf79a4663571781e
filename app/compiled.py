"""Compiled queries: a `paper` lookup and its inbound/outbound first pages as one SQL statement that
builds the response's JSON inside PostgreSQL, as PostGraphile does.

Which documents compile: one root field, `paper(arxivId, asOf)`, selecting (through fragments and
inline fragments as clients send them, but without directives) Paper's scalar fields and `id`, and
`inbound(first, after)` / `outbound(first, after)` connections with `totalCount`, `pageInfo`,
`edges { cursor node }` and `nodes`, whose nodes select CitationObservation's scalar fields, `id`,
`citingPaper`, `citedPaper` (scalar fields) and `resolution`. Anything else, and any argument the ordinary path would refuse (a malformed arXiv id,
`first` out of range), runs the ordinary way, so errors are what the schema makes of them. Values are
the same as the ordinary path's to the byte: tests run both over random selections, papers and
instants and compare the responses.

A compiled operation is one statement, so it runs without a transaction (one statement reads one
snapshot) and its `extensions.cost.statements` is 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Final

from graphql import FieldNode, FragmentSpreadNode, InlineFragmentNode, OperationDefinitionNode, OperationType
from graphql import VariableNode, is_non_null_type, is_required_argument
from graphql.execution.values import get_argument_values
from graphql.pyutils import Undefined
from graphql.utilities.coerce_input_value import coerce_default_value

from app import cursors
from app.errors import UserInputError
from app.limits import MAX_FIRST
from app.timeparse import BadInput, parse_arxiv_id
from app.types.node import global_id_sql as _gid  # the one global-id rule, in SQL
from app.types.node import pin_suffix
from app.types.scalars import datetime_sql as _dt  # the one DateTime format, in SQL
from loaders.citations import LATERALS, LOW_KEY, inbound_total_sql
from loaders.rows import UNRESOLVED, shown_reference_index_sql


PIN: Final = "$3::text"  # the ids' instant suffix (app.types.node.pin_suffix): '' unless asOf is given


def _paper_fields(a: str) -> dict[str, str]:
    return {"arxivId": f"{a}.arxiv_id", "title": f"{a}.title", "latestVersion": f"{a}.latest_version",
            "primaryCategory": f"{a}.primary_category", "submittedAt": _dt(f"{a}.submitted_at"),
            "lastUpdated": _dt(f"{a}.last_updated"), "snapshotObservedAt": _dt(f"{a}.observed_at"),
            "id": _gid("Paper", f"{a}.arxiv_id", PIN), "__typename": "'Paper'"}


_OBSERVATION_FIELDS: Final = {
    "observationId": "o.observation_id::text", "referenceIndex": shown_reference_index_sql("o"), "source": "o.source",
    "sourceObservedAt": _dt("o.source_observed_at"), "id": _gid("CitationObservation", "o.observation_id::text", PIN),
    "__typename": "'CitationObservation'"}
# Unresolved as of the parse until a resolution is recorded (loaders.citations.observation_from).
_RESOLUTION_FIELDS: Final = {
    "status": f"upper(coalesce(r.status, '{UNRESOLVED}'))", "observedAt": _dt("coalesce(r.observed_at, o.source_observed_at)"),
    "resolverSource": "r.resolver_source", "__typename": "'Resolution'"}
# Per direction: the observations' key column, the record order, the page's index-only columns.
_SIDES: Final = {
    "inbound": ("cited_arxiv_id", ("citing_arxiv_id", "reference_index", "observation_id")),
    "outbound": ("citing_arxiv_id", ("reference_index", "observation_id")),
}


class Unsupported(Exception):
    """The document has something this compiler does not do: the ordinary path answers it."""


@dataclass(frozen=True)
class Compiled:
    response_key: str
    sql: str
    field: FieldNode
    pages: tuple["_Page", ...]  # every connection; those with a page take $3, $4, ... (first, after key)


def _fields(selection_set: Any, type_name: str, fragments: dict[str, Any]) -> list[FieldNode]:
    """The fields a selection asks of an object of `type_name`, fragments inlined, in graphql-core's order
    (first occurrence); a field asked twice is merged when it is the same leaf, else not compiled."""
    if selection_set is None:
        raise Unsupported("no selection")
    found: dict[str, FieldNode] = {}

    def applies(condition: Any) -> bool:
        return condition is None or condition.name.value in (type_name, *_INTERFACES.get(type_name, ()))

    def walk(selections: Any, depth: int) -> None:
        if depth > 8:
            raise Unsupported("fragments nested too deep")
        for s in selections:
            if s.directives:
                raise Unsupported("directives")
            if isinstance(s, FieldNode):
                key = (s.alias or s.name).value
                seen = found.get(key)
                if seen is None:
                    found[key] = s
                elif not (seen.name.value == s.name.value and not seen.arguments and not s.arguments
                          and seen.selection_set is None and s.selection_set is None):
                    raise Unsupported("a response key twice")
            elif isinstance(s, InlineFragmentNode):
                if applies(s.type_condition):
                    walk(s.selection_set.selections, depth + 1)
            elif isinstance(s, FragmentSpreadNode):
                fragment = fragments.get(s.name.value)
                if fragment is None or getattr(s, "arguments", None) or getattr(fragment, "variable_definitions", None):
                    raise Unsupported("unknown fragment, or one with variables")
                if applies(fragment.type_condition):
                    walk(fragment.selection_set.selections, depth + 1)
            else:
                raise Unsupported("selection")

    walk(selection_set.selections, 0)
    return list(found.values())


# Interfaces a fragment may name for each object type the compiler answers.
_INTERFACES: Final = {"Paper": ("Node",), "CitationObservation": ("Node",)}


def _object(pairs: list[tuple[str, str]]) -> str:
    if not pairs:
        raise Unsupported("empty selection")
    if len(pairs) > 50:
        raise Unsupported("json_build_object takes at most 100 arguments")
    return "json_build_object(" + ", ".join(f"'{key}', {expr}" for key, expr in pairs) + ")"


def _key(f: FieldNode) -> str:
    key = (f.alias or f.name).value
    if not key.replace("_", "").isalnum():
        raise Unsupported("unexpected name")
    return key


class _Compiler:
    def __init__(self, fragments: dict[str, Any]) -> None:
        self.fragments = fragments
        self.next_param = 4  # $1 the arXiv id, $2 the instant, $3 the ids' instant suffix
        self.pages: list[_Page] = []

    def leaves(self, selection: Any, type_name: str, table: dict[str, str],
               nested: dict[str, Callable[[FieldNode], str]] | None = None) -> str:
        pairs = []
        for f in _fields(selection, type_name, self.fragments):
            name = f.name.value
            if nested and name in nested:
                pairs.append((_key(f), nested[name](f)))
            elif name in table and not f.arguments and f.selection_set is None:
                pairs.append((_key(f), table[name]))
            else:
                raise Unsupported(f"field {name}")
        return _object(pairs)

    def paper(self, selection: Any, alias: str, connections: bool) -> str:
        nested = {"inbound": self.connection, "outbound": self.connection} if connections else None
        return self.leaves(selection, "Paper", _paper_fields(alias), nested)

    def observation(self, f: FieldNode) -> str:
        def paper_of(alias: str) -> Callable[[FieldNode], str]:
            def build(g: FieldNode) -> str:
                if g.arguments:
                    raise Unsupported("arguments")
                body = self.paper(g.selection_set, alias, connections=False)
                return body if alias == "c" else f"CASE WHEN d.arxiv_id IS NULL THEN NULL ELSE {body} END"
            return build

        def resolution(g: FieldNode) -> str:
            if g.arguments:
                raise Unsupported("arguments")
            return self.leaves(g.selection_set, "Resolution", _RESOLUTION_FIELDS)

        return self.leaves(f.selection_set, "CitationObservation", _OBSERVATION_FIELDS,
                           {"citingPaper": paper_of("c"), "citedPaper": paper_of("d"), "resolution": resolution})

    def connection(self, f: FieldNode) -> str:
        direction = f.name.value
        if any(a.name.value not in ("first", "after") for a in f.arguments or ()):
            raise Unsupported("connection arguments other than first and after")
        column, order = _SIDES[direction]
        keys = ", ".join(f"o.{k}" for k in order)
        visible = f"o.{column} = p.arxiv_id AND o.visible_from <= $2"
        page = _Page(self, f, direction)

        def page_sql() -> str:
            """The page's keys, one more than asked (to know whether more follow), numbered in order."""
            limit, bounds = page.params()
            return (f"(SELECT {keys}, row_number() OVER (ORDER BY {keys}) AS n FROM citation_observations AS o "
                    f"WHERE {visible} AND ({keys}) > ({bounds}) ORDER BY {keys} LIMIT {limit} + 1) AS page")

        def items(node: Callable[[], str]) -> str:
            limit, _ = page.params()
            text = node()
            joins = "\n".join(LATERALS[a].replace("$AS", "$2") for a in ("c", "d", "r") if f"{a}." in text)
            return (f"(SELECT coalesce(json_agg({text} ORDER BY page.n) FILTER (WHERE page.n <= {limit}), "
                    f"'[]'::json) FROM {page_sql()} JOIN citation_observations AS o "
                    f"ON o.observation_id = page.observation_id {joins})")

        key_array = f"json_build_array({keys})"

        def edges(g: FieldNode) -> str:
            if g.arguments:
                raise Unsupported("arguments")
            cursors = page.edges_at(_key(g))
            inner = {"node": lambda n: self.observation(n), "cursor": lambda c: cursors.append(_key(c)) or key_array}
            return items(lambda: self.leaves(g.selection_set, "CitationEdge", {"__typename": "'CitationEdge'"}, inner))

        def nodes(g: FieldNode) -> str:
            if g.arguments:
                raise Unsupported("arguments")
            return items(lambda: self.observation(g))

        def page_info(g: FieldNode) -> str:
            if g.arguments:
                raise Unsupported("arguments")
            info = page.page_info_at(_key(g))
            ends = {"startCursor": "ASC", "endCursor": "DESC"}

            def end(kind: str) -> Callable[[FieldNode], str]:
                def build(c: FieldNode) -> str:
                    info[kind].append(_key(c))
                    limit, _ = page.params()
                    page_keys = keys.replace("o.", "page.")
                    return (f"(SELECT json_build_array({page_keys}) FROM {page_sql()} WHERE page.n <= {limit} "
                            f"ORDER BY page.n {ends[kind]} LIMIT 1)")
                return build

            def next_page(_: FieldNode) -> str:
                limit, _ = page.params()
                return f"(SELECT count(*) > {limit} FROM {page_sql()})"

            def previous(c: FieldNode) -> str:
                info["hasPreviousPage"].append(_key(c))
                return "false"  # set after the statement: whether `after` was given

            return self.leaves(g.selection_set, "PageInfo", {"__typename": "'PageInfo'"},
                               {"startCursor": end("startCursor"), "endCursor": end("endCursor"),
                                "hasNextPage": next_page, "hasPreviousPage": previous})

        total = (inbound_total_sql("p.arxiv_id", "$2") if column == "cited_arxiv_id"
                 else f"(SELECT count(*) FROM citation_observations AS o WHERE {visible})")
        table = {"totalCount": total,
                 "__typename": "'CitationConnection'"}
        body = self.leaves(f.selection_set, "CitationConnection", table,
                           {"edges": edges, "nodes": nodes, "pageInfo": page_info})
        page.response_key = _key(f)
        self.pages.append(page)  # even without a page: its arguments are checked as the ordinary path does
        return body


class _Page:
    """One connection's page: its parameters (size, then the `after` key), and where its cursors go."""

    def __init__(self, compiler: _Compiler, field: FieldNode, direction: str) -> None:
        self.compiler, self.field = compiler, field
        self.side = "in" if direction == "inbound" else "out"
        self.numbers: list[int] = []
        self.response_key = ""
        self.edges: dict[str, list[str]] = {}  # edges response key -> its cursor response keys
        self.page_infos: dict[str, dict[str, list[str]]] = {}

    def params(self) -> tuple[str, str]:
        """($limit, the keyset bound) as SQL, taking parameter numbers on first use."""
        width = len(_SIDES["inbound" if self.side == "in" else "outbound"][1])
        if not self.numbers:
            start = self.compiler.next_param
            self.numbers = list(range(start, start + 1 + width))
            self.compiler.next_param += 1 + width
        limit, *after = self.numbers
        low = LOW_KEY[-width:]
        types = ("text", "int", "uuid")[-width:]
        bounds = ", ".join(f"coalesce(${n}::{t}, {v})" for n, t, v in zip(after, types, low))
        return f"${limit}::int", bounds

    def uses_params(self) -> bool:
        return bool(self.numbers)

    def edges_at(self, key: str) -> list[str]:
        return self.edges.setdefault(key, [])

    def page_info_at(self, key: str) -> dict[str, list[str]]:
        return self.page_infos.setdefault(key, {"startCursor": [], "endCursor": [], "hasPreviousPage": []})


_COMPILED: dict[int, tuple[OperationDefinitionNode, Compiled | None]] = {}
_COMPILED_MAX = 1024


def compiled_for(operation: OperationDefinitionNode, fragments: dict[str, Any]) -> Compiled | None:
    """The compiled form of an operation (with its document's fragments), or None when it does not
    compile. Cached by the operation node (the parse cache hands every request of a document the same
    nodes, fragments included; the entry keeps its node alive)."""
    found = _COMPILED.get(id(operation))
    if found is not None and found[0] is operation:
        return found[1]
    compiled = _compile(operation, fragments)
    if len(_COMPILED) >= _COMPILED_MAX:
        _COMPILED.clear()
    _COMPILED[id(operation)] = (operation, compiled)
    return compiled


def _compile(operation: OperationDefinitionNode, fragments: dict[str, Any]) -> Compiled | None:
    if operation.operation is not OperationType.QUERY or operation.directives:
        return None
    try:
        fields = _fields(operation.selection_set, "Query", fragments)
        if len(fields) != 1 or fields[0].name.value != "paper":
            raise Unsupported("root field")
        root = fields[0]
        compiler = _Compiler(fragments)
        body = compiler.paper(root.selection_set, "p", connections=True)
        key = _key(root)
    except Unsupported:
        return None
    # $3 is named in the subquery too, so its type is known whether or not the selection has an id.
    sql = (f"SELECT {body}::text AS data FROM (SELECT arxiv_id, observed_at, title, latest_version, primary_category,"
           " submitted_at, last_updated, $3::text AS pin FROM paper_snapshots WHERE arxiv_id = $1 AND observed_at <= $2"
           " ORDER BY observed_at DESC LIMIT 1) AS p")
    # In parameter order (a connection that selects no page, e.g. only totalCount, takes none: first).
    return Compiled(key, sql, root, tuple(sorted(compiler.pages, key=lambda page: page.numbers[:1] or [0])))


async def run(compiled: Compiled, executor: Any) -> dict[str, Any] | None:
    """The operation's data from one statement; None when the ordinary path must answer (bad arguments)."""
    context = executor.context_value
    session = getattr(context, "session", None)
    if session is None or session.statements:
        return None
    def instant(as_of: Any) -> tuple[Any, bool]:  # as the resolvers decide (app.context.Context)
        at = context.instant(as_of)
        return at, context.pinned(at)

    given = arguments(compiled, executor.schema, executor.variable_values, instant)
    if given is None:
        return None
    return answer(compiled, await session.fetch(compiled.sql, *given[0]), given[1], given[0][0])


def arguments(compiled: Compiled, schema: Any, variable_values: Any,
              instant: Callable[[Any], Any]) -> tuple[list[Any], list[bool]] | None:
    """The statement's parameters and, per page, whether `after` was given; None when an argument is one
    the ordinary path refuses (it then answers, with the schema's own error). `instant` gives the instant
    an asOf is answered as of and whether the answer is pinned (app.timeparse.answered_as_of, is_pinned)."""
    values = _values(variable_values, compiled.field, schema.query_type.fields["paper"])
    if values is None:
        return None
    try:
        arxiv_id = parse_arxiv_id(values["arxivId"])
        at, pinned = instant(values.get("asOf"))
    except (BadInput, UserInputError, KeyError, TypeError):
        return None
    args: list[Any] = [arxiv_id, at, pin_suffix(at if pinned else None)]
    afters: list[bool] = []
    paper_type = schema.get_type("Paper")
    for page in compiled.pages:
        given = _values(variable_values, page.field, paper_type.fields[page.field.name.value])
        if given is None:
            return None
        first = given.get("first")
        first = MAX_FIRST if first is None else first
        if not isinstance(first, int) or not 1 <= first <= MAX_FIRST:
            return None
        try:
            after = cursors.decode(page.side, given.get("after"), owner=arxiv_id)
        except UserInputError:
            return None
        if page.uses_params():
            width = len(page.numbers) - 1
            args += [first, *(after if after is not None else (None,) * width)]
        afters.append(after is not None)
    return args, afters


def answer(compiled: Compiled, rows: Any, afters: list[bool], owner: str) -> dict[str, Any]:
    """The operation's data from the statement's rows (no row: no such paper at the instant); `owner` the
    paper whose pages these are (each cursor names it)."""
    import orjson

    data = orjson.loads(rows[0]["data"]) if rows else None
    if data is not None:
        for page, after_given in zip(compiled.pages, afters):
            _finish_cursors(data[page.response_key], page, after_given, owner)
    return {compiled.response_key: data}


def _finish_cursors(connection: dict[str, Any], page: _Page, after_given: bool, owner: str) -> None:
    """Cursors come out of the statement as key arrays; here they become the opaque cursors of app.cursors."""
    def encode(key: list[Any] | None) -> str | None:
        return None if key is None else cursors.encode_key([page.side, *key, owner])

    for edges_key, cursor_keys in page.edges.items():
        for edge in connection[edges_key]:
            for k in cursor_keys:
                edge[k] = encode(edge[k])
    for info_key, fields in page.page_infos.items():
        info = connection[info_key]
        for k in fields["startCursor"] + fields["endCursor"]:
            info[k] = encode(info[k])
        for k in fields["hasPreviousPage"]:
            info[k] = after_given


def _values(variable_values: Any, field: FieldNode, definition: Any) -> dict[str, Any] | None:
    """Coerced arguments of a field by their GraphQL names; None when they do not coerce."""
    binding = _binding(field, definition)
    if binding is not None:
        coerced = getattr(variable_values, "coerced", None)
        if coerced is not None:
            return _bound(binding, coerced)
    try:
        coerced = get_argument_values(definition, field, variable_values)
    except Exception:  # noqa: BLE001 - the ordinary path reports it
        return None
    names = {(arg.out_name or name): name for name, arg in definition.args.items()}
    return {names.get(k, k): v for k, v in coerced.items()}


# A field's arguments when each that its node gives is a variable (as clients send them): per argument its
# GraphQL name, the variable's name (None: not given), its coerced default (Undefined: none), whether it is
# required and whether its type is non-null; made once per field node and definition, kept with both (their
# identities are the key). graphql-core's get_argument_values binds such a field the same way, each time.
_BINDINGS: dict[tuple[int, int], tuple[Any, Any, tuple | None]] = {}


def _binding(field: FieldNode, definition: Any) -> tuple | None:
    key = (id(field), id(definition))
    found = _BINDINGS.get(key)
    if found is not None and found[0] is field and found[1] is definition:
        return found[2]
    binding: tuple | None
    try:
        given = {a.name.value: a.value for a in field.arguments or ()}
        steps = []
        for name, arg in definition.args.items():
            node = given.get(name)
            if node is not None and not isinstance(node, VariableNode):
                raise Unsupported("a literal argument")  # graphql-core coerces it each time
            steps.append((name, node.name.value if node is not None else None, coerce_default_value(arg),
                          is_required_argument(arg), is_non_null_type(arg.type)))
        binding = tuple(steps)
    except Exception:  # noqa: BLE001 - (a literal, or a default that does not coerce): get_argument_values
        binding = None
    if len(_BINDINGS) >= 1024:
        _BINDINGS.clear()
    _BINDINGS[key] = (field, definition, binding)
    return binding


def _bound(binding: tuple, coerced: Any) -> dict[str, Any] | None:
    """get_argument_values' answer for a field whose arguments are variables, from the coerced variables:
    a variable not given leaves its argument to its default (or out); None where graphql-core raises (a
    required argument without its value, a null for a non-null one)."""
    values: dict[str, Any] = {}
    for name, variable, default, required, non_null in binding:
        if variable is None or variable not in coerced:
            if required:
                return None
            if default is not Undefined:
                values[name] = default
            continue
        value = coerced[variable]
        if value is None and non_null:
            return None
        values[name] = value
    return values
