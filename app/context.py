"""Per-request context: the database session, the loaders per instant, and the request's default instant."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from app.db.pool import Session
from app.timeparse import BadInput, answered_as_of, is_pinned, now_as_of
from loaders.dataloaders import AcrossInstants, Loaders, let_go


@dataclass
class Context:
    session: Session | None  # None until the operation starts: app.pipeline.OperationSession opens it
    now: datetime = field(default_factory=now_as_of)
    _loaders: dict[datetime, Loaders] = field(default_factory=dict)
    cost: dict = field(default_factory=dict)
    hub: Any = None  # live changes (subscriptions), when the transport has them
    app: Any = None  # the application state: sessions and the pool, for subscriptions
    client: Any = None  # app.governor.Client: who asks (None in-process: priced, not governed)
    governor: Any = None  # app.governor.Governor
    ticket: Any = None  # the admitted operation's charge (app.governor.Ticket)
    event_price: Any = None  # a subscription's: the price of each event (its selection), admitted per event
    deadline_seconds: float | None = None  # PITH_REQUEST_TIMEOUT; None: no deadline
    deadline_at: float | None = None  # the event loop's clock when it passes
    connection_params: Any = None  # a WebSocket's connection_init payload (Strawberry sets it)
    payload_checked: bool = False  # its authorization read (GraphQLView.payload_client): once a connection
    # A connection's context (a WebSocket's, an HTTP stream's): each operation runs in a copy of its own
    # (for_operation), with its own session, loaders, instant, charge and deadline.
    per_connection: bool = False
    # The live connection carrying it (app.live.StoppableSocket): told as one when the server stops.
    connection: Any = None

    def __post_init__(self) -> None:
        if self.deadline_at is None:
            self.restart_deadline()

    def restart_deadline(self) -> None:
        """The deadline from now (an operation, or a subscription's event, starting)."""
        if self.deadline_seconds is not None:
            self.deadline_at = asyncio.get_running_loop().time() + self.deadline_seconds
            if not self.per_connection:  # an operation's (or event's) deadline bounds its pool waits
                from app.db.pool import request_deadline

                request_deadline.set(self.deadline_at)

    def remaining(self) -> float | None:
        """Seconds until the deadline (None: no deadline)."""
        if self.deadline_at is None:
            return None
        return max(0.0, self.deadline_at - asyncio.get_running_loop().time())

    def for_operation(self, session: Session) -> Context:
        """The context of one operation on a connection: who asks, and everything else its own."""
        from dataclasses import replace

        return replace(self, session=session, now=now_as_of(), _loaders={}, cost={}, ticket=None,
                       deadline_at=None, per_connection=False)

    def renew(self, session: Session) -> None:
        """A fresh session and instant: a subscription resolves each event as of when it is sent."""
        self.release()
        self.session = session
        self.now = now_as_of()
        self.restart_deadline()

    def instant(self, as_of: object | None) -> datetime:
        """The instant a root field is answered as of (app.timeparse.answered_as_of: none, or one after the
        server's clock, is now); every field below it uses the same one."""
        try:
            return answered_as_of(as_of, self.now)  # type: ignore[arg-type]
        except BadInput as exc:
            from app.errors import UserInputError

            raise UserInputError(f"asOf: {exc}") from None

    def pinned(self, at: datetime) -> bool:
        """Whether an answer as of `at` is fixed (its ids name `at`): app.timeparse.is_pinned."""
        return is_pinned(at, self.now)

    def release(self) -> None:
        """The operation is over: its loaders go now and what they held in stretches (Loaders.release), not
        at the collector's next walk of the older generations."""
        let_go([cache for loaders in self._loaders.values() for cache in loaders.release()])
        self._loaders = {}

    def loaders(self, as_of: datetime) -> Loaders:
        found = self._loaders.get(as_of)
        if found is None:
            assert self.session is not None, "an operation's session opens before its fields resolve"
            # The instants of one operation share their lookups by id (loaders.dataloaders.AcrossInstants).
            across = next(iter(self._loaders.values())).across if self._loaders else AcrossInstants(self.session)
            found = self._loaders[as_of] = Loaders(self.session, as_of, across)
        return found
