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

from math import sqrt
from typing import Any

from graphql import (DocumentNode, FieldNode, FragmentDefinitionNode, FragmentSpreadNode, GraphQLError,
                     InlineFragmentNode, OperationDefinitionNode, SelectionSetNode)

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
        return GraphQLError(f"the document has {aliases} aliases; at most {MAX_ALIASES} are allowed",
                            extensions={"code": "QUERY_TOO_COMPLEX", "limit": MAX_ALIASES})
    shape = _Shape(document)
    for definition in document.definitions:
        if not isinstance(definition, (OperationDefinitionNode, FragmentDefinitionNode)):
            continue
        seen = frozenset({definition.name.value}) if isinstance(definition, FragmentDefinitionNode) else frozenset()
        if shape.size(definition.selection_set, seen) > MAX_FIELDS:
            return GraphQLError(f"{_what(definition)} selects more than {MAX_FIELDS} fields with its fragments "
                                "expanded; ask for fewer (or split the request)", definition,
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
