"""Live changes for subscriptions: one listening connection per process, fanned out to subscribers.

Imports append to `change_log` and NOTIFY `pith_changes` with the newest position (migration 0006).
The hub keeps one connection to the primary that LISTENs; each notification (or, as a safety net,
every POLL_SECONDS) it reads the rows after the last position it has seen, in order, and hands each
row to the subscribers of its (kind, paper). When the connection drops (PostgreSQL restarted), it
reconnects with back-off and reads from the last position it saw, so no row is lost.

A subscriber is a bounded queue: one that falls QUEUE_SIZE rows behind is dropped with a reason
rather than growing memory. A process holds at most MAX_SUBSCRIBERS subscriptions.

Every way a subscription ends early (it fell behind, an event could not be read, the server stops) tells
the subscriber the cursor to resume from (`after`), in its error's extensions. When the server stops
(SIGTERM), every hub ends its subscriptions at once (server_stopping, called by the connections' protocols,
app.protocol, before they close), and a WebSocket is closed 1012 with the reason naming that cursor.
"""

from __future__ import annotations

import asyncio
import binascii
import contextlib
import logging
import weakref
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import asyncpg
from starlette.types import Message, Send

from app.cursors import decode_token, encode_token
from app.db.pool import Session, acquire_by_deadline, connect
from app.limits import MAX_SUBSCRIBERS, MAX_SUBSCRIPTIONS_PER_CLIENT
from loaders.system import CHANGES_AFTER, CHANGES_BATCH, DATA_VERSION, NEWEST_POSITION, PRUNED_UP_TO, REPLAY

log = logging.getLogger("pith.live")

CHANNEL = "pith_changes"
POLL_SECONDS = 5.0
QUEUE_SIZE = 1_000
SHARE_SECONDS = 5.0
# A live session waits this long for a connection of the live pool (and never past its event's deadline).
LIVE_ACQUIRE_SECONDS = 10.0
# An event that cannot be read (no connection, the database restarting) is read again for this long
# before its subscription ends, with the cursor to resume from.
EVENT_RETRY_SECONDS = 60.0
# When the server stops, a WebSocket's subscriptions have this long to tell their subscribers before it closes.
CLOSE_SECONDS = 2.0
STOPPING = "the server is restarting"


class LiveError(Exception):
    """A subscription that cannot go on (or start); the message says why and what to do."""


def live_session(pool: asyncpg.Pool, statement_timeout_ms: int) -> Session:
    """A read session on the live pool: a subscription's event, its replay, a live transport's operation."""
    return Session(lambda: acquire_by_deadline(pool, LIVE_ACQUIRE_SECONDS), pool.release, statement_timeout_ms)


def encode_cursor(position: int) -> str:
    return encode_token(f"change:{position}")


def decode_cursor(cursor: str) -> int:
    try:
        if len(cursor) <= 64:
            text = decode_token(cursor)
            kind, _, number = text.partition(":")
            if kind == "change" and number.isdigit() and len(number) <= 18:
                return int(number)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        pass
    raise LiveError(f"after: {cursor[:60]!r} is not a cursor of this subscription; pass an event's cursor")


@dataclass(eq=False)
class Subscriber:
    kind: str
    arxiv_id: str
    queue: asyncio.Queue = field(default_factory=lambda: asyncio.Queue(QUEUE_SIZE))
    dropped: str | None = None
    owner: str | None = None  # the client (app.governor.Client.id) holding it
    connection: object = None  # the live connection carrying it (a WebSocket's, a stream's)
    last: int = 0  # the position it has handled up to: `after` for resuming it


class Hub:
    def __init__(self, dsn: str, per_owner: int = MAX_SUBSCRIPTIONS_PER_CLIENT) -> None:
        self.dsn = dsn
        self.per_owner = per_owner
        self.position = 0
        self.subscribers: dict[tuple[str, str], set[Subscriber]] = {}
        self.count = 0
        self.by_owner: dict[str, int] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._ready = asyncio.Event()
        self._shared: dict[tuple, asyncio.Future] = {}
        self.stopping = asyncio.Event()  # the server stops: every subscription ends, telling its cursor
        self.listening = False  # the listener's connection is up
        self.caught_up_at: float | None = None  # when it last read to the end of the change log
        self._late = 0.0  # how late the rows of its last read were (0: there were none)

    def lag_seconds(self) -> float:
        """How far behind the change log the listener is, now: how late the rows of its last read were
        (0 when there were none), or, with the listener down, the time since it last caught up."""
        import time

        if self.listening or self.caught_up_at is None:
            return self._late
        return max(self._late, time.time() - self.caught_up_at)

    async def start(self) -> None:
        _hubs.add(self)
        self._task = asyncio.create_task(self._run(), name="pith-live-hub")

    def end_all(self, reason: str, *, sockets_closing: bool = False) -> None:
        """End every subscription now (each at the next row it would handle), telling its cursor. When the
        server stops with its WebSockets still open (sockets_closing), a WebSocket's subscriptions are not
        ended in the protocol: graphql-ws clients take an error or a `complete` as the end for good and would
        not subscribe again, while a 1012 close (close_when_told, naming the cursor) is one they retry,
        sending the same subscription, its `after` at the last cursor they received."""
        self.stopping.set()
        for subs in list(self.subscribers.values()):
            for sub in subs:
                if sockets_closing and isinstance(sub.connection, StoppableSocket):
                    continue
                sub.dropped = sub.dropped or reason
                with contextlib.suppress(asyncio.QueueFull):  # full: `dropped` is checked before each row
                    sub.queue.put_nowait(None)

    def held_by(self, connection: object) -> list[Subscriber]:
        return [sub for subs in self.subscribers.values() for sub in subs if sub.connection is connection]

    async def stop(self) -> None:
        _hubs.discard(self)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.end_all(STOPPING)

    async def ready(self, timeout: float = 10.0) -> None:
        """Wait until the hub listens (so that "from now on" has a position)."""
        if self._ready.is_set():
            return
        try:
            # asyncio.timeout, not wait_for: Python 3.11's wait_for loses a cancellation that arrives as the wait
            # ends, and a subscription cancelled there would go on, subscribed, after its socket had ended it.
            async with asyncio.timeout(timeout):
                await self._ready.wait()
        except (TimeoutError, asyncio.TimeoutError):
            raise LiveError("live updates are unavailable: the change log cannot be reached; retry shortly") from None

    async def shared(self, key: tuple, make: Any) -> Any:
        """One resolution of a row for every subscriber that sends it in the same second (a thousand
        subscribers of one paper cost one read, not a thousand)."""
        future = self._shared.get(key)
        if future is None:
            if len(self._shared) > 10_000:
                self._shared.clear()
            future = self._shared[key] = asyncio.ensure_future(make())
            # A failed (or cancelled) read is not shared: the next subscriber reads again.
            future.add_done_callback(lambda f: (f.cancelled() or f.exception() is not None)
                                     and self._shared.pop(key, None))
            asyncio.get_running_loop().call_later(SHARE_SECONDS, self._shared.pop, key, None)
        return await asyncio.shield(future)

    def subscribe(self, kind: str, arxiv_id: str, owner: str | None = None, connection: object = None) -> Subscriber:
        """A new subscriber; refused past the process's limit, or past the owner's (one client's) share."""
        if self.stopping.is_set():
            raise LiveError(f"{STOPPING}; subscribe again in a moment (to another process)")
        if self.count >= MAX_SUBSCRIBERS:
            raise LiveError(f"this server process holds its limit of {MAX_SUBSCRIBERS} subscriptions; retry later "
                            "or connect to another process")
        if owner is not None and self.by_owner.get(owner, 0) >= self.per_owner:
            raise LiveError(f"this client holds its limit of {self.per_owner} subscriptions; end some "
                            "(complete them or close their connections) first")
        sub = Subscriber(kind, arxiv_id, owner=owner, connection=connection, last=self.position)
        self.subscribers.setdefault((kind, arxiv_id), set()).add(sub)
        self.count += 1
        if owner is not None:
            self.by_owner[owner] = self.by_owner.get(owner, 0) + 1
        return sub

    def unsubscribe(self, sub: Subscriber) -> None:
        subs = self.subscribers.get((sub.kind, sub.arxiv_id))
        if subs is not None and sub in subs:
            subs.discard(sub)
            self.count -= 1
            if not subs:
                del self.subscribers[(sub.kind, sub.arxiv_id)]
            if sub.owner is not None:
                left = self.by_owner.get(sub.owner, 1) - 1
                if left > 0:
                    self.by_owner[sub.owner] = left
                else:
                    self.by_owner.pop(sub.owner, None)

    def _notified(self, *_: Any) -> None:
        self._wake.set()

    async def _run(self) -> None:
        delay = 0.2
        first = True
        while True:
            conn: asyncpg.Connection | None = None
            try:
                conn = await connect(self.dsn, timeout=5,
                                             server_settings={"application_name": "pith-graph live"})
                lost = asyncio.Event()
                conn.add_termination_listener(lambda *_: lost.set())
                await conn.add_listener(CHANNEL, self._notified)
                if first:  # "from now on" starts at the newest position when the process starts
                    self.position = await conn.fetchval(NEWEST_POSITION)
                    first = False
                from app import metrics

                metrics.IMPORTS.set(await conn.fetchval(DATA_VERSION))
                self.listening = True
                self._ready.set()
                delay = 0.2
                log.info("listening for changes after position %d", self.position)
                while not lost.is_set():
                    await self._catch_up(conn)
                    self._wake.clear()
                    waiters = [asyncio.ensure_future(self._wake.wait()), asyncio.ensure_future(lost.wait())]
                    try:
                        await asyncio.wait(waiters, timeout=POLL_SECONDS, return_when=asyncio.FIRST_COMPLETED)
                    finally:
                        for w in waiters:
                            w.cancel()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - any failure: reconnect, then read from the last position
                log.warning("change listener lost (%s); reconnecting in %.1f s", type(exc).__name__, delay)
            finally:
                self.listening = False
                if conn is not None:
                    with contextlib.suppress(Exception):
                        conn.terminate()
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    async def _catch_up(self, conn: asyncpg.Connection) -> None:
        import time

        from app import metrics

        late = 0.0
        while True:
            rows = await conn.fetch(CHANGES_AFTER, self.position)
            for row in rows:
                self._dispatch(row)
                self.position = row["position"]
            if rows:
                late = max(late, (datetime.now(timezone.utc) - rows[0]["committed_at"]).total_seconds())
                metrics.IMPORTS.set(await conn.fetchval(DATA_VERSION))
            if len(rows) < CHANGES_BATCH:
                self._late = max(0.0, late)
                self.caught_up_at = time.time()
                metrics.CHANGE_LAG.set(self.lag_seconds())
                return

    def _dispatch(self, row: asyncpg.Record) -> None:
        for sub in list(self.subscribers.get((row["kind"], row["arxiv_id"]), ())):
            if sub.dropped:
                continue
            try:
                sub.queue.put_nowait(row)
            except asyncio.QueueFull:
                sub.dropped = f"this subscriber fell {QUEUE_SIZE} events behind and was dropped"
                self.unsubscribe(sub)
                with contextlib.suppress(asyncio.QueueEmpty):
                    sub.queue.get_nowait()
                sub.queue.put_nowait(None)


_hubs: weakref.WeakSet[Hub] = weakref.WeakSet()  # the hubs of this process that are running


def server_stopping() -> None:
    """The server stops (SIGTERM): every running hub ends its subscriptions now, each telling its cursor,
    while the connections that carry them are still open (app.protocol calls this before closing them)."""
    for hub in list(_hubs):
        if not hub.stopping.is_set():
            log.info("stopping: ending %d subscriptions, each with the cursor to resume from", hub.count)
            hub.end_all(STOPPING, sockets_closing=True)


class StoppableSocket:
    """A WebSocket's `send`, which closes it 1012 with the cursor to resume from when the server stops
    (close_when_told), and passes nothing more once it is closed."""

    def __init__(self, hub: Hub | None, send: Send) -> None:
        self.hub, self._send, self.closed = hub, send, False

    async def send(self, message: Message) -> None:
        if self.closed:
            return
        if message["type"] == "websocket.close":
            self.closed = True
        await self._send(message)

    async def close(self, code: int, reason: str) -> None:
        await self.send({"type": "websocket.close", "code": code, "reason": reason[:120]})

    async def run(self, handler: Any) -> None:
        """Run the socket's handler (a coroutine), closing it as told when the server stops meanwhile."""
        if self.hub is None:
            await handler
            return
        watcher = asyncio.ensure_future(close_when_told(self.hub, self, self.close))
        try:
            await handler
        finally:
            watcher.cancel()


async def close_when_told(hub: Hub, connection: object, close: Any) -> None:
    """A WebSocket's part of stopping: `close(1012, reason)` at once, the reason naming the cursor to resume
    from when it held one subscription (its subscriptions are left to the close: Hub.end_all)."""
    await hub.stopping.wait()
    cursors = {encode_cursor(sub.last) for sub in hub.held_by(connection)}
    if len(cursors) == 1:
        reason = f"{STOPPING}; resubscribe with after: {cursors.pop()}"
    else:
        reason = f"{STOPPING}; resubscribe each subscription with after: the last cursor it received"
    await close(1012, reason)


async def replay(conn: asyncpg.Connection, kind: str, arxiv_id: str, after: int,
                 first: bool = True) -> list[asyncpg.Record]:
    """The next REPLAY_BATCH rows of one (kind, paper) after a position; the first batch refused when retention
    has removed some of them."""
    if first and after < await conn.fetchval(PRUNED_UP_TO):
        raise LiveError("after: that cursor is older than the change log keeps (retention); refetch the current "
                        "state with a query, then subscribe without `after`")
    return await conn.fetch(REPLAY, kind, arxiv_id, after)
