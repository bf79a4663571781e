"""What a batch function needs of the database: a way to run one statement.

Statements are written once for one instant, with `$AS` where the instant goes: `at_param` gives the
ordinary statement (the instant is parameter n), `at_pairs` the same statement run for many (key,
instant) pairs at once (the keys and the instants are then arrays, and every row says which pair it is
for).
"""

from __future__ import annotations

import asyncio
import time
from contextvars import ContextVar
from typing import Any, Awaitable, Callable, Iterable, Protocol, Sequence, TypeVar

from app.limits import STRETCH_SECONDS


class Db(Protocol):
    async def fetch(self, sql: str, *args: Any) -> Sequence[Any]: ...


# Work units of building one record from its rows (app.cost; bench/calibrate.py measures them).
RECORD_BUILD_UNITS = 300
STANDING_UNITS = 12  # a standing notice (or an observation's digest): a loader key and the notice built
TIMELINE_ENTRY_UNITS = 150  # a timeline entry's record: its statements are shared with the page's others
# Rows an index walk inside one statement visits per work unit (an aggregate or a join the database does
# without sending the rows: citationsByYear's count of a paper's citers).
ROWS_PER_UNIT = 8


# What the current operation's turns of the event loop wait for besides the loop (app.pipeline.LightFirst:
# a heavy operation's wait for the process's light work), or None.
TURN: ContextVar[Callable[[], Awaitable[None]] | None] = ContextVar("turn", default=None)


class Turns:
    """Long Python work in stretches of STRETCH_SECONDS: `await turns.take()` between items gives the
    event loop to the process's other requests once the stretch is used up (a no-op before)."""

    __slots__ = ("since",)

    def __init__(self) -> None:
        self.since = time.perf_counter()

    def due(self) -> bool:
        return time.perf_counter() - self.since >= STRETCH_SECONDS

    async def take(self) -> None:
        if self.due():
            await asyncio.sleep(0)
            wait = TURN.get()
            if wait is not None:
                await wait()
            self.since = time.perf_counter()


T = TypeVar("T")
R = TypeVar("R")


async def in_stretches(items: Iterable[T], convert: Callable[[T], R]) -> list[R]:
    """`[convert(item) for item in items]` for thousands of items: in stretches (Turns), the event loop given to the
    process's other requests between them."""
    turns = Turns()
    out = []
    for item in items:
        await turns.take()
        out.append(convert(item))
    return out


def scanned(rows: int) -> int:
    """The work units of visiting `rows` index rows inside a statement (priced by app.cost, charged here)."""
    return -(-rows // ROWS_PER_UNIT)


def charge(db: Any, units: int) -> None:
    """Tell the request's session of work done beyond the rows it read (a no-op for a bare connection)."""
    found = getattr(db, "charge", None)
    if found is not None:
        found(units)


def at_param(template: str, param: int) -> str:
    return template.replace("$AS", f"${param}")


def at_pairs(template: str, instant_param: int, key_param: int = 1, key_type: str = "text", repeat: int = 1) -> str:
    """The statement once per (key, instant) pair: ${key_param} is then the array of keys and
    ${instant_param} the array of instants, one of each per pair (the template's key array becomes the
    pair's key, `repeat` times). Each row leads with t_ord, the pair's 1-based place, as at_each's do."""
    keys = f"${key_param}::{key_type}[]"
    assert keys in template, f"the template takes no {keys}"
    one = "ARRAY[" + ", ".join(["t.t_key"] * repeat) + f"]::{key_type}[]"
    inner = template.replace(keys, one).replace("$AS", "t.t_as_of")
    return (f"SELECT t.t_ord, x.* FROM unnest({keys}, ${instant_param}::timestamptz[]) "
            f"WITH ORDINALITY AS t(t_key, t_as_of, t_ord)\nCROSS JOIN LATERAL ({inner}) AS x")


async def fetch_at_pairs(db: Db, template: str, pairs: Sequence[tuple[Any, Any]], key_type: str = "text",
                         ) -> list[list[Any]]:
    """A one-key, one-instant template ($1 the key array, $AS the instant) run for every (key, instant)
    pair in one statement: each pair's rows, in pair order."""
    rows = await db.fetch(at_pairs(template, 2, key_type=key_type), [k for k, _ in pairs], [t for _, t in pairs])
    return by_instant(rows, len(pairs))


def by_instant(rows: Sequence[Any], n: int) -> list[list[Any]]:
    grouped: list[list[Any]] = [[] for _ in range(n)]
    for row in rows:
        grouped[row["t_ord"] - 1].append(row)
    return grouped
