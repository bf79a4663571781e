"""Connection pools and the per-request database session."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from typing import Any, AsyncIterator, Awaitable, Callable, Final, Sequence

import asyncpg

from app.settings import Settings

DEFAULT_STATEMENT_TIMEOUT_MS: Final = Settings.statement_timeout_ms
_log = logging.getLogger("pith.db")


# asyncpg introspects array types on first use; doing it when a connection opens keeps a
# request's statements to the ones its query needs.
WARM_UP = "SELECT $1::uuid[], $2::int[], $3::text[], $4::boolean, $5::timestamptz, $6::timestamptz[]"


async def warm_up(conn: asyncpg.Connection) -> None:
    await conn.fetch(WARM_UP, [], [], [], None, None, [])


async def _keep_connection(conn: asyncpg.Connection) -> None:
    return None


# Settings a read transaction takes for itself (SET LOCAL, in the round trip that begins it), not at
# connection start-up: PgBouncer refuses start-up parameters it does not track (statement_timeout,
# plan_cache_mode) and in transaction mode a session-level SET would leak to other clients.
# Every read is batched over array parameters, so a custom plan cannot use the values anyway: plan once
# per connection instead of on every execution. No JIT and no parallel workers: a generic plan's
# estimates (a LIMIT $n is taken as a tenth of the rows) pass jit_above_cost and the parallel thresholds
# for index walks of a few hundred rows; at 1,000,000 papers compiling took 175 ms and starting two
# workers 5 ms where the page itself took 1 to 2 (bench/browse.py).
BEGIN: Final = ("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET LOCAL statement_timeout = {ms}; "
                "SET LOCAL plan_cache_mode = force_generic_plan; SET LOCAL jit = off; "
                "SET LOCAL max_parallel_workers_per_gather = 0")


async def connect(dsn: str, **options: Any) -> asyncpg.Connection:
    """A connection of its own (commands, the change listener, statistics), with the pool's rule for
    prepared statements (PITH_DB_PREPARED_STATEMENTS)."""
    options.setdefault("statement_cache_size", 100 if Settings.from_env().prepared_statements else 0)
    return await asyncpg.connect(dsn, **options)


# Waiting for a pool connection: at most this long, and never past the request's deadline.
ACQUIRE_SECONDS: Final = 5.0
# The event loop's time when the current request's deadline passes (set as it arrives, and as an
# operation's deadline starts: app.middleware.RequestLayer, app.context.Context); None: no deadline.
request_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar("request_deadline", default=None)


# The pool the governor's own reads (keys, budget claims) take a connection from while a live transport's
# connection runs (app.graphql.view sets it to the live pool): a WebSocket's key check or a
# subscription's claim never waits behind requests. None: the requests' pool.
governor_pool: contextvars.ContextVar[asyncpg.Pool | None] = contextvars.ContextVar("governor_pool", default=None)


class DeadlinePassed(Exception):
    """The request's deadline passed before a database connection was free (answered TIMEOUT, 504)."""


def acquire_timeout(bound: float | None = None) -> float:
    """How long the current request may wait for a pool connection: `bound`, or what is left of its
    deadline when that is less (every wait for a connection asks here: requests, budgets, keys, APQ),
    so a request waiting on the pool gives up by its deadline instead of after it."""
    bound = ACQUIRE_SECONDS if bound is None else bound
    deadline = request_deadline.get()
    if deadline is None:
        return bound
    left = deadline - asyncio.get_running_loop().time()
    if left <= 0:  # (spent before: reading its document, waiting its turn)
        raise DeadlinePassed("the request's deadline passed before it could take a database connection")
    return min(bound, left)


async def acquire_by_deadline(pool: asyncpg.Pool, bound: float | None = None) -> asyncpg.Connection:
    """A connection of the pool, waited for as acquire_timeout says: DeadlinePassed when the request's
    deadline ends the wait, asyncpg's TimeoutError when the pool's own bound does."""
    bound = ACQUIRE_SECONDS if bound is None else bound
    wait = acquire_timeout(bound)
    try:
        return await pool.acquire(timeout=wait)
    except TimeoutError:
        if wait < bound:
            raise DeadlinePassed("the request's deadline passed while it waited for a database connection") from None
        raise


@contextlib.asynccontextmanager
async def connection(pool: asyncpg.Pool, bound: float | None = None) -> AsyncIterator[asyncpg.Connection]:
    """`async with connection(pool) as conn`: pool.acquire() with the request's deadline (acquire_by_deadline)."""
    conn = await acquire_by_deadline(pool, bound)
    try:
        yield conn
    finally:
        await pool.release(conn)


class StatementTimeout(Exception):
    """A statement ran past PITH_STATEMENT_TIMEOUT_MS (cancelled in PostgreSQL)."""


async def create_pool(settings: Settings, dsn: str, *, init: Callable[[asyncpg.Connection], Awaitable[None]] | None = None,
                      min_size: int | None = None, max_size: int | None = None) -> asyncpg.Pool:
    async def setup(conn: asyncpg.Connection) -> None:
        await warm_up(conn)
        if init is not None:
            await init(conn)

    return await asyncpg.create_pool(
        dsn,
        min_size=settings.pool_min if min_size is None else min_size,
        max_size=settings.pool_max if max_size is None else max_size,
        init=setup,
        # Bounded waits when the server is unreachable or stops answering.
        timeout=5,
        command_timeout=settings.statement_timeout_ms / 1000 + 5,
        # Sessions only run read-only transactions that they roll back, so a connection comes back
        # clean; skipping asyncpg's reset query saves a round trip per request.
        reset=_keep_connection,
        # Only what PgBouncer passes through at start-up; the rest is set per transaction (BEGIN).
        server_settings={"application_name": "pith-graph", "timezone": "UTC"},
        # Named prepared statements live on one server connection: behind a pooler in transaction mode
        # (PgBouncer before 1.21) the next transaction may run on another. 0 makes asyncpg use unnamed ones.
        statement_cache_size=100 if settings.prepared_statements else 0,
    )


class SessionClosed(RuntimeError):
    """A statement was asked of a session that its request has already closed."""


# asyncpg's words, through the event loop's exception handler (logged at ERROR by asyncio), for a connection its
# pool rolls back on release.
_POOL_ROLLBACK: Final = "Resetting connection with an active transaction"


def pool_rollbacks_expected(loop: asyncio.AbstractEventLoop) -> Callable[[], None]:
    """Let the pool's rollback of a session whose statement was cancelled (its deadline, its client gone) go
    without an ERROR line: Session._finish leaves exactly those to the pool's release, which waits out the
    cancellation (no ROLLBACK can be sent before it ends) and rolls back, as asyncpg intends. Every other report
    goes to the loop's handler as before. Returns the call that puts the handler back."""
    previous = loop.get_exception_handler()

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if str(context.get("message", "")).startswith(_POOL_ROLLBACK):
            _log.debug("a cancelled statement's transaction rolled back by the pool")
        elif previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)
    return lambda: loop.set_exception_handler(previous)


# Cleanups that outlive a cancelled caller: kept referenced until they finish.
_cleanups: set[asyncio.Task] = set()


class Session:
    """One read-only REPEATABLE READ transaction, opened on the first statement.

    Everything a request reads comes from one snapshot, so totals and itemized lists agree even
    while a load commits. DataLoaders of one request dispatch concurrently, each batch in a task of
    its own (aiodataloader schedules them); the lock keeps their statements in turn on the one
    connection.

    Closing is the one way a connection goes back: a closed session refuses every statement (a batch
    task that wakes up late cannot take a second connection), the tasks still running a statement
    are cancelled and awaited, and only then is the transaction rolled back and the connection
    released. The cleanup runs in a task of its own, so cancelling the request does not cut it
    short; asyncpg's release waits out a cancelled statement and rolls back whatever is left open.
    """

    def __init__(self, acquire: Callable[[], Awaitable[asyncpg.Connection]],
                 release: Callable[[asyncpg.Connection], Awaitable[None]] | None = None,
                 statement_timeout_ms: int = DEFAULT_STATEMENT_TIMEOUT_MS, begin_settings: str = "") -> None:
        self._acquire = acquire
        self._release = release
        self.statement_timeout_ms = statement_timeout_ms  # 0: none of its own
        self.begin_settings = begin_settings  # more "; SET LOCAL ..." sent with BEGIN
        self._conn: asyncpg.Connection | None = None
        self._tx = False  # in the read transaction (BEGIN sent)
        self._lock = asyncio.Lock()
        self._closed = False
        self._working: set[asyncio.Task] = set()
        self._stopped: set[asyncio.Task] = set()  # tasks close() cancelled in a statement
        self.statements = 0
        self.rows = 0  # rows the statements returned, plus work charged (app.cost.actual_units)
        # Set before execution when the query is known to need one statement: it then runs on its own
        # (a statement reads one snapshot by itself), saving BEGIN and ROLLBACK round trips.
        self.single_statement = False

    def charge(self, units: int) -> None:
        """Work done in Python beyond the rows (a record built, observations scanned), in work units."""
        self.rows += units

    @classmethod
    def from_pool(cls, pool: asyncpg.Pool, timeout: float = 5.0,
                  statement_timeout_ms: int = DEFAULT_STATEMENT_TIMEOUT_MS) -> "Session":
        return cls(lambda: pool.acquire(timeout=timeout), pool.release, statement_timeout_ms)

    @classmethod
    def from_connection(cls, conn: asyncpg.Connection, statement_timeout_ms: int = DEFAULT_STATEMENT_TIMEOUT_MS,
                        begin_settings: str = "") -> "Session":
        """A session on a connection of the caller's (commands: export, dump), with the statement
        timeout it asks for (0: none; the commands pass PITH_STATEMENT_TIMEOUT_MS when it is set)."""
        async def acquire() -> asyncpg.Connection:
            return conn

        return cls(acquire, None, statement_timeout_ms, begin_settings)

    @property
    def closed(self) -> bool:
        return self._closed

    async def fetch(self, sql: str, *args: Any) -> Sequence[asyncpg.Record]:
        task = asyncio.current_task()
        if task is not None:
            self._working.add(task)
        try:
            async with self._lock:
                if self._closed:
                    raise SessionClosed("the request's database session is closed")
                if self._conn is None:
                    conn = await self._acquire()
                    if self.single_statement:
                        self._conn = conn
                    else:
                        try:
                            await conn.execute(BEGIN.format(ms=int(self.statement_timeout_ms))
                                               + self.begin_settings)
                        except BaseException:
                            if self._release is not None:
                                await self._release(conn)
                            raise
                        self._conn, self._tx = conn, True
                elif not self._tx:
                    # Planned as one statement, asked for a second: that would read another snapshot.
                    raise RuntimeError("a query planned as one statement asked for a second one")
                self.statements += 1
                if self._tx:
                    rows = await self._conn.fetch(sql, *args)
                else:  # outside a transaction: the statement's timeout is asyncpg's (it cancels in PostgreSQL)
                    try:
                        rows = await self._conn.fetch(sql, *args,
                                                      timeout=self.statement_timeout_ms / 1000 or None)
                    except TimeoutError:
                        raise StatementTimeout(f"statement ran past {self.statement_timeout_ms} ms") from None
                self.rows += len(rows)
                return rows
        except asyncio.CancelledError:
            if task is not None and task in self._stopped and task.uncancel() == 0:
                # Stopped by close() alone (the operation is over): an error, as a statement asked for after the
                # close gets, so a DataLoader's batch fails its keys (it lets a cancellation through and leaves
                # them pending: whatever awaits them would wait until the collector destroyed it, logged).
                raise SessionClosed("the request's database session closed while this statement ran") from None
            raise
        finally:
            if task is not None:
                self._working.discard(task)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._conn is None and not self._working:
            return  # never took a connection (a subscription event answered from shared reads)
        current = asyncio.current_task()
        others = [t for t in self._working if t is not current and not t.done()]
        self._stopped.update(others)
        for task in others:
            task.cancel()
        cleanup = asyncio.ensure_future(self._finish(others))
        _cleanups.add(cleanup)
        cleanup.add_done_callback(_cleanups.discard)
        await asyncio.shield(cleanup)

    async def _finish(self, others: list[asyncio.Task]) -> None:
        if others:
            await asyncio.gather(*others, return_exceptions=True)
        async with self._lock:
            conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            # After a cancelled statement the connection is still cancelling: the pool's release
            # waits for that and rolls back. Otherwise roll back here, as the transaction's owner.
            if self._tx and not conn.is_closed() and conn.is_in_transaction() \
                    and (not others or self._release is None):
                await conn.execute("ROLLBACK")
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError):
            if self._release is None:
                raise
        finally:
            if self._release is not None:
                await self._release(conn)
