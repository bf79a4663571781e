"""Per-request context: the database session, the loaders per instant, and the request's default instant."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from app.db.pool import Session
from app.timeparse import BadInput, now_as_of, parse_as_of
from loaders.dataloaders import Loaders


@dataclass
class Context:
    session: Session
    now: datetime = field(default_factory=now_as_of)
    _loaders: dict[datetime, Loaders] = field(default_factory=dict)
    cost: dict = field(default_factory=dict)
    hub: Any = None  # live changes (subscriptions), when the transport has them
    app: Any = None  # the application state: sessions and the pool, for subscriptions

    def renew(self, session: Session) -> None:
        """A fresh session and instant: a subscription resolves each event as of when it is sent."""
        self.session = session
        self.now = now_as_of()
        self._loaders = {}

    def instant(self, as_of: object | None) -> datetime:
        """The instant a root field asks for; every field below it uses the same one."""
        if as_of is None:
            return self.now
        try:
            return parse_as_of(as_of)  # type: ignore[arg-type]
        except BadInput as exc:
            from app.errors import UserInputError

            raise UserInputError(f"asOf: {exc}") from None

    def loaders(self, as_of: datetime) -> Loaders:
        found = self._loaders.get(as_of)
        if found is None:
            found = self._loaders[as_of] = Loaders(self.session, as_of)
        return found
