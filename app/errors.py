"""Errors clients see: typed, with a message that says what was wrong and what is allowed."""

from __future__ import annotations

from typing import Any

from graphql import GraphQLError


class UserInputError(GraphQLError):
    """A bad argument: reported with extensions.code = BAD_USER_INPUT, never masked."""

    def __init__(self, message: str, nodes: object = None, **extensions: object) -> None:
        super().__init__(message, nodes=nodes, extensions={"code": "BAD_USER_INPUT", **extensions})  # type: ignore[arg-type]


class QueryCostError(GraphQLError):
    """A query refused before execution because a limit would be exceeded."""

    def __init__(self, message: str, nodes: object = None, **extensions: object) -> None:
        super().__init__(message, nodes=nodes, extensions={"code": "QUERY_TOO_COSTLY", **extensions})  # type: ignore[arg-type]


class OperationError(GraphQLError):
    """An operation refused or stopped by the service (not a bad argument): code and details in extensions."""

    def __init__(self, message: str, code: str, **extensions: Any) -> None:
        super().__init__(message, extensions={"code": code, **extensions})


def deadline_error(seconds: float) -> OperationError:
    return OperationError(f"the operation did not finish within the {seconds:g} s deadline and was stopped; ask for "
                          "less (smaller first, maxChanges, perPaper, depth or fewer ids) or split it", "TIMEOUT",
                          deadlineSeconds=seconds)


def busy_error(seconds: float) -> OperationError:
    """An operation that never started: the capacity it waits for (a heavy slot, the client's own places) stayed
    taken by other work until its deadline. Not the operation's size: the same request may fit a moment later, so
    it is the server's unavailability (503 with Retry-After, SERVICE_UNAVAILABLE), not a timeout of the work."""
    from app.limits import RETRY_AFTER_SECONDS

    return OperationError(f"the server is busy: this did not start within the {seconds:g} s deadline, its capacity for "
                          "work of this price taken by other requests (yours or other clients'); nothing ran; retry in "
                          f"{RETRY_AFTER_SECONDS} s, or send fewer such requests at once", "SERVICE_UNAVAILABLE",
                          deadlineSeconds=seconds, retryAfter=int(RETRY_AFTER_SECONDS))
