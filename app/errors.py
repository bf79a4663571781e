"""Errors clients see: typed, with a message that says what was wrong and what is allowed."""

from __future__ import annotations

from graphql import GraphQLError


class UserInputError(GraphQLError):
    """A bad argument: reported with extensions.code = BAD_USER_INPUT, never masked."""

    def __init__(self, message: str, nodes: object = None, **extensions: object) -> None:
        super().__init__(message, nodes=nodes, extensions={"code": "BAD_USER_INPUT", **extensions})  # type: ignore[arg-type]


class QueryCostError(GraphQLError):
    """A query refused before execution because a limit would be exceeded."""

    def __init__(self, message: str, nodes: object = None, **extensions: object) -> None:
        super().__init__(message, nodes=nodes, extensions={"code": "QUERY_TOO_COSTLY", **extensions})  # type: ignore[arg-type]
