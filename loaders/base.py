"""What a batch function needs of the database: a way to run one statement."""

from __future__ import annotations

from typing import Any, Protocol, Sequence


class Db(Protocol):
    async def fetch(self, sql: str, *args: Any) -> Sequence[Any]: ...
