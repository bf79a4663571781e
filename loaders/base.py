"""What a batch function needs of the database: a way to run one statement.

Statements are written once for one instant, with `$AS` where the instant goes: `at_param` gives the
ordinary statement (the instant is parameter n), `at_each` the same statement run at many instants
at once (parameter n is then an array of instants, and every row says which instant it is for).
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence


class Db(Protocol):
    async def fetch(self, sql: str, *args: Any) -> Sequence[Any]: ...


def at_param(template: str, param: int) -> str:
    return template.replace("$AS", f"${param}")


def at_each(template: str, param: int) -> str:
    """The statement at every instant of the array ${param}; each row leads with t_ord, the 1-based place
    of its instant. A lateral subquery runs once per instant, in the array's order, and hands its rows on
    in its own order, so the rows of each instant come as the one-instant statement gives them."""
    return (f"SELECT t.t_ord, x.* FROM unnest(${param}::timestamptz[]) WITH ORDINALITY AS t(t_as_of, t_ord)\n"
            f"CROSS JOIN LATERAL ({template.replace('$AS', 't.t_as_of')}) AS x")


def by_instant(rows: Sequence[Any], n: int) -> list[list[Any]]:
    grouped: list[list[Any]] = [[] for _ in range(n)]
    for row in rows:
        grouped[row["t_ord"] - 1].append(row)
    return grouped
