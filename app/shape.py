"""A document's shape, bounded before validation sees it: validation's costly rule (overlapping fields can be
merged) compares every pair of fields of one response name in a selection set, fragments spread into it
included, and recurses into their selections: 550 `paper { title }` took 6 s, 4,989 `a` 2 s. One linear
pass over the parsed document refuses what would make it slow:

- MAX_FIELDS: field selections of one definition (an operation or a fragment) with every fragment it
  spreads expanded where it is spread (so a fragment spread a thousand times counts a thousand times,
  and fragments spreading fragments cannot multiply unseen);
- MAX_COMPARISONS: a bound on the field comparisons validation makes (every selection set: each response
  name's fields, fragments expanded, compared pairwise, a pair of fields with selections as costly as
  their own selections' comparisons, recursively). Repeating a leaf is cheap (a field selected 100 times
  is 5,000 comparisons), repeating a field with a selection multiplies at every level it repeats.

At these bounds the worst documents validate in milliseconds (bench/validation.py, BENCHMARKS.md); what
clients send (Relay's and Apollo's generated documents included) is far below them.
"""

from __future__ import annotations

import re
from math import sqrt
from typing import Any

from graphql import (DocumentNode, FieldNode, FragmentDefinitionNode, FragmentSpreadNode, GraphQLError,
                     InlineFragmentNode, NameNode, OperationDefinitionNode, OperationType, SelectionSetNode)

from app.limits import MAX_ALIASES, MAX_COMPARISONS, MAX_FIELDS


# Comparing two fields that have selections costs about 25 leaf comparisons before their selections are
# compared (their arguments, and the fields of each selection collected): bench/validation.py.
SELECTION_PAIR = 25.0


class _Shape:
    def __init__(self, document: DocumentNode) -> None:
        self.fragments = {d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)}
        self._sizes: dict[str, int] = {}
        self._weights: dict[int, float] = {}
        self._sums: dict[int, dict[str, float]] = {}

    def size(self, selection_set: SelectionSetNode | None, seen: frozenset[str] = frozenset()) -> int:
        """Field selections under a selection set, fragments expanded (capped just past MAX_FIELDS)."""
        if selection_set is None:
            return 0
        total = 0
        for selection in selection_set.selections:
            if isinstance(selection, FieldNode):
                total += 1 + self.size(selection.selection_set, seen)
            elif isinstance(selection, InlineFragmentNode):
                total += self.size(selection.selection_set, seen)
            elif isinstance(selection, FragmentSpreadNode):
                total += self.fragment_size(selection.name.value, seen)
            if total > MAX_FIELDS:
                return MAX_FIELDS + 1
        return total

    def fragment_size(self, name: str, seen: frozenset[str]) -> int:
        if name in seen or name not in self.fragments:
            return 0  # a cycle or an unknown fragment: validation reports it
        found = self._sizes.get(name)
        if found is None:
            found = self._sizes[name] = self.size(self.fragments[name].selection_set, seen | {name})
        return found

    def weight(self, field: FieldNode, seen: frozenset[str]) -> float:
        """How costly comparing this field with another of its response name can be: 1 for a leaf; for a
        field with a selection, sqrt(SELECTION_PAIR + the sum over its response names of (the summed
        weights of that name's fields)^2), which bounds graphql-core's pairwise comparison of two such
        fields (it compares every pair of same-named fields of their selections, recursively)."""
        if field.selection_set is None:
            return 1.0
        found = self._weights.get(id(field))
        if found is None:
            sums = self.name_sums(field.selection_set, seen)
            found = self._weights[id(field)] = sqrt(SELECTION_PAIR + sum(v * v for v in sums.values()))
        return found

    def name_sums(self, selection_set: SelectionSetNode, seen: frozenset[str]) -> dict[str, float]:
        """The summed weights of the fields of each response name at a selection set's own level,
        fragments (spread or inline) expanded."""
        found = self._sums.get(id(selection_set))
        if found is not None:
            return found
        sums: dict[str, float] = {}
        for selection in selection_set.selections:
            if isinstance(selection, FieldNode):
                name = (selection.alias or selection.name).value
                sums[name] = sums.get(name, 0.0) + self.weight(selection, seen)
            elif isinstance(selection, InlineFragmentNode):
                for name, value in self.name_sums(selection.selection_set, seen).items():
                    sums[name] = sums.get(name, 0.0) + value
            elif isinstance(selection, FragmentSpreadNode):
                fragment = selection.name.value
                if fragment in seen or fragment not in self.fragments:
                    continue
                for name, value in self.name_sums(self.fragments[fragment].selection_set, seen | {fragment}).items():
                    sums[name] = sums.get(name, 0.0) + value
        self._sums[id(selection_set)] = sums
        return sums

    def comparisons(self, selection_set: SelectionSetNode, seen: frozenset[str]) -> float:
        """A bound on the field comparisons validation makes for one selection set: each response name's
        fields compared pairwise, each pair as costly as its weights allow."""
        return sum(v * v for v in self.name_sums(selection_set, seen).values()) / 2

    def sets(self, selection_set: SelectionSetNode | None) -> Any:
        """Every selection set of a definition, as written (fragments are definitions of their own)."""
        if selection_set is None:
            return
        yield selection_set
        for selection in selection_set.selections:
            if isinstance(selection, (FieldNode, InlineFragmentNode)):
                yield from self.sets(selection.selection_set)


def _what(definition: Any) -> str:
    return f"fragment {definition.name.value}" if isinstance(definition, FragmentDefinitionNode) else "the operation"


def _aliases_message(aliases: int) -> str:
    return f"the document has {aliases} aliases; at most {MAX_ALIASES} are allowed"


def _fields_message(definition: str) -> str:
    return (f"{definition} selects more than {MAX_FIELDS} fields with its fragments expanded; ask for fewer (or split "
            "the request)")


def _aliases(selection_set: SelectionSetNode | None) -> int:
    if selection_set is None:
        return 0
    found = 0
    for selection in selection_set.selections:
        if isinstance(selection, FieldNode):
            found += (selection.alias is not None) + _aliases(selection.selection_set)
        elif isinstance(selection, InlineFragmentNode):
            found += _aliases(selection.selection_set)
    return found


def shape_problem(document: DocumentNode) -> GraphQLError | None:
    """Why a document is refused before validation, or None."""
    # Aliases as written, counted here as well as by validation's rule (app.schema.LIMIT_RULES): a document
    # of a thousand aliased unknown fields is refused before validation reports a hundred errors about it.
    aliases = sum(_aliases(getattr(d, "selection_set", None)) for d in document.definitions)
    if aliases > MAX_ALIASES:
        return GraphQLError(_aliases_message(aliases), extensions={"code": "QUERY_TOO_COMPLEX", "limit": MAX_ALIASES})
    shape = _Shape(document)
    for definition in document.definitions:
        if not isinstance(definition, (OperationDefinitionNode, FragmentDefinitionNode)):
            continue
        seen = frozenset({definition.name.value}) if isinstance(definition, FragmentDefinitionNode) else frozenset()
        if shape.size(definition.selection_set, seen) > MAX_FIELDS:
            return GraphQLError(_fields_message(_what(definition)), definition,
                                extensions={"code": "QUERY_TOO_COMPLEX", "limit": MAX_FIELDS})
        total = 0.0
        for selection_set in shape.sets(definition.selection_set):
            total += shape.comparisons(selection_set, seen)
            if total > MAX_COMPARISONS:
                return GraphQLError(f"{_what(definition)} repeats fields of one name (fragments included) too often "
                                    f"to be checked in time: its selections would take more than {MAX_COMPARISONS:,} "
                                    "field comparisons to validate; select each field once per selection set, or "
                                    "give repeats aliases", definition,
                                    extensions={"code": "QUERY_TOO_COMPLEX", "limit": MAX_COMPARISONS})
    return None


# --- before parsing: what the text alone refuses ------------------------------------------------------

# GraphQL's tokens as graphql-core's lexer reads them (block strings, strings, comments, the spread,
# names, numbers, punctuators), anything else one character at a time; commas, white space and the BOM
# are not tokens. On a document that parses, this reads exactly the parser's tokens (comments aside).
_TOKEN = re.compile(r'"""(?:[^"\\]|\\(?!""")|\\"""|"(?!""))*"""|"(?:[^"\\\n\r]|\\.)*"|#[^\n\r]*|\.\.\.'
                    r'|[_A-Za-z][_0-9A-Za-z]*|-?[0-9][0-9.]*(?:[eE][+-]?[0-9]+)?[_0-9A-Za-z.]*|[^\s,\ufeff]')
_NAME = re.compile(r"[_A-Za-z][_0-9A-Za-z]*")
_NAME_START = re.compile(r"[_A-Za-z]")
_OPERATIONS = {"query": OperationType.QUERY, "mutation": OperationType.MUTATION,
               "subscription": OperationType.SUBSCRIPTION}


class TextRefused(GraphQLError):
    """A document refused from its text alone (lexical_problem): `operations` are its operations' (type,
    name), for a transport to choose the one to refuse as it chooses one from a parsed document."""

    operations: tuple[tuple[OperationType, str | None], ...] = ()

    def copy(self) -> TextRefused:
        """The same refusal, an object of its own (one is kept for the text, each request raises a copy)."""
        return _refused(self.message, dict(self.extensions or {}), list(self.operations))

    def document(self) -> DocumentNode:
        """A document of the refused one's operations, without their selections."""
        return DocumentNode(definitions=tuple(
            OperationDefinitionNode(operation=kind, name=NameNode(value=name) if name else None,
                                    variable_definitions=(), directives=(),
                                    selection_set=SelectionSetNode(selections=()))
            for kind, name in self.operations))


def lexical_problem(query: str, max_tokens: int) -> TextRefused | None:
    """What parsing and shape_problem would refuse, found in one pass over the text (a regular expression's
    tokens, a tenth of parsing's time): more than `max_tokens` tokens (the parser's own error), more than
    MAX_ALIASES aliases, a definition that writes more than MAX_FIELDS field selections (so selects at least
    as many with its fragments expanded). A document made of parsing's tokens is refused only where those
    would refuse it, with their messages; one that does not parse either may be told of a limit rather
    than of its syntax error (refused either way). Anything but operations and fragments (a schema
    definition) is left to the parser.
    """
    tokens = [t for t in _TOKEN.findall(query) if t[0] != "#"]
    operations: list[tuple[OperationType, str | None]] = []
    aliases = fields = braces = parens = 0
    too_many: str | None = None  # the first definition writing more than MAX_FIELDS fields
    start = True  # the next token starts a definition
    previous = previous2 = definition = ""
    last = len(tokens) - 1
    for i, token in enumerate(tokens):
        if start:
            following = tokens[i + 1] if i < last else ""
            if token == "{":
                operations.append((OperationType.QUERY, None))
                definition = "the operation"
            elif token in _OPERATIONS:
                operations.append((_OPERATIONS[token], following if _NAME.fullmatch(following) else None))
                definition = "the operation"
            elif token == "fragment":
                definition = f"fragment {following}"
            else:  # not an executable definition: the parser and validation say what it is
                return _too_many_tokens(max_tokens, [(OperationType.QUERY, None)]) if len(tokens) > max_tokens \
                    else None
            start, fields = False, 0
        if token == "{":
            braces += parens == 0
        elif token == "}":
            if parens == 0:
                braces -= 1
                start = braces == 0
        elif token == "(":
            parens += 1
        elif token == ")":
            parens -= 1
        elif parens == 0 and braces > 0 and _NAME_START.match(token):
            if i < last and tokens[i + 1] == ":":
                aliases += 1
            elif previous not in ("...", "@") and not (previous == "on" and previous2 == "..."):
                fields += 1
                if fields > MAX_FIELDS and too_many is None:
                    too_many = definition
        previous2, previous = previous, token
    if len(tokens) > max_tokens:  # the parser's refusal, first as it would be
        return _too_many_tokens(max_tokens, operations or [(OperationType.QUERY, None)])
    limits = {"code": "QUERY_TOO_COMPLEX"}
    if aliases > MAX_ALIASES:
        return _refused(_aliases_message(aliases), {**limits, "limit": MAX_ALIASES}, operations)
    if too_many is not None:
        return _refused(_fields_message(too_many), {**limits, "limit": MAX_FIELDS}, operations)
    return None


def operations_of(query: str) -> list[tuple[OperationType, str | None]]:
    """A text's operations (type, name), read from its tokens as lexical_problem reads them, without parsing: for
    a refusal made before the text is read (app.cost.ReaderBusy), each transport choosing the one it refuses."""
    tokens = [t for t in _TOKEN.findall(query) if t[0] != "#"]
    operations: list[tuple[OperationType, str | None]] = []
    braces = parens = 0
    start = True
    for i, token in enumerate(tokens):
        if start:
            following = tokens[i + 1] if i + 1 < len(tokens) else ""
            if token == "{":
                operations.append((OperationType.QUERY, None))
            elif token in _OPERATIONS:
                operations.append((_OPERATIONS[token], following if _NAME.fullmatch(following) else None))
            start = False
        if token == "(":
            parens += 1
        elif token == ")":
            parens -= 1
        elif token == "{" and parens == 0:
            braces += 1
        elif token == "}" and parens == 0:
            braces -= 1
            start = braces == 0
    return operations or [(OperationType.QUERY, None)]


def refused_unread(error: GraphQLError, query: str,
                   operations: list[tuple[OperationType, str | None]] | None = None) -> TextRefused:
    """`error` as a refusal of `query` made without a parsed document (before reading it, or the parser's own
    error), its place in the text kept, its operations those given or operations_of's."""
    extensions = dict(error.extensions or {})
    refused = TextRefused(error.message, source=error.source, positions=error.positions, extensions=extensions)
    refused.operations = tuple(operations if operations is not None else operations_of(query))
    return refused


def _too_many_tokens(max_tokens: int, operations: list) -> TextRefused:
    return _refused(f"Syntax Error: Document contains more than {max_tokens} tokens. Parsing aborted.",
                    {"code": "GRAPHQL_PARSE_FAILED"}, operations)


def _refused(message: str, extensions: dict, operations: list) -> TextRefused:
    error = TextRefused(message, extensions=extensions)
    error.operations = tuple(operations)
    return error
