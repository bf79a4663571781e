"""Who is asking, and may they: clients, API keys, budgets (points per hour) and heavy-work slots.

- A client is its API key (`Authorization: Bearer <secret>`; on WebSockets also the `connection_init`
  payload's `authorization`) or else its IP address. The peer's address is used unless it is one of
  PITH_TRUSTED_PROXIES (addresses or networks), in which case the nearest untrusted address of the one
  header the proxies set (PITH_PROXY_HEADER: `X-Forwarded-For`, the default, or RFC 7239 `Forwarded`)
  counts, read from its right end. The address is computed once per request (Governor.address_of).
- Budgets follow GitHub's model: an operation is charged its price in points (app.cost.Price.points)
  before it runs; one that would pass the budget of the current clock hour does not run (429,
  RATE_LIMITED, Retry-After). After it ran, the difference between its price and the work it did is
  given back (Shopify's requested/actual cost).
- Budgets hold across processes and servers sharing the database without a write per request: a
  process claims a chunk of a client's hour (a twentieth of the budget, or what the operation needs)
  with one statement and spends it locally. Claims never pass the budget, so all processes together
  never admit more than it (no over-admission); what a process claimed and has not spent is unusable
  by the others until the hour ends (at most one chunk per process and client).
- Requests are paced as well as priced (Pace): a client sends at most `requests_per_second` requests a
  second to a process (PITH_REQUESTS_PER_SECOND), in bursts of twice as many; past that each request is
  refused 429 (RATE_LIMITED, Retry-After) before it is read further, and costs a point of what the process
  holds of the client's hour (no statement). HTTP requests and pages are counted by the one check every
  transport asks first (app.pipeline.over_budget); a WebSocket's messages each, waiting their turn past
  the pace rather than refused (paced_receive).
- Heavy operations (priced above HEAVY_COST) take a slot: at most HEAVY_PER_CLIENT per client, HEAVY_SLOTS
  per process and `heavy_slots` in the whole server (its workers share them through lock files:
  SharedSlots) run at once, the rest wait their turn (within their deadline), so cheap lookups keep
  connections, the event loop and a core. Every operation priced over LIGHT_COST (heavy or not) also takes one
  of the process's COSTLY_SLOTS: however many clients send them, each within its own budget, a lookup shares
  the process with at most that many, whose stretches wait for it (LightFirst).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import fcntl
import hashlib
import ipaddress
import logging
import math
import os
import threading
import secrets
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable
from uuid import UUID, uuid4

import asyncpg

from app.db.pool import connection, governor_pool
from app.limits import (COSTLY_SLOTS, HEAVY_COST, HEAVY_PER_CLIENT, HEAVY_SLOTS, LIGHT_COST, LIGHT_FIRST_SECONDS,
                        READING_SECONDS_PER_REQUEST)
from loaders.system import KEYS, LIVE_KEYS

log = logging.getLogger("pith.governor")

KEY_PREFIX = "pith_"
KEY_CACHE_SECONDS = 30.0  # a revoked key stops working within this
KEY_MISS_SECONDS = 0.5  # an unknown key re-reads the keys at most this often per process
CHUNK_FRACTION = 20  # a claim takes at least 1/20 of the hour's budget
WINDOW_SECONDS = 3600


class Unauthenticated(Exception):
    """An Authorization header or payload naming no valid key (401, UNAUTHENTICATED). Each costs the address
    it came from a point of its anonymous hour; once that is spent, the refusal is 429 (RATE_LIMITED), so a
    flood of made-up keys is limited like any other work."""

    def __init__(self, message: str, limited: RateLimited | None = None) -> None:
        super().__init__(message if limited is None else f"{message}; and {limited}")
        self.limited = limited

    @property
    def status(self) -> int:
        return 401 if self.limited is None else 429

    @property
    def code(self) -> str:
        return "UNAUTHENTICATED" if self.limited is None else "RATE_LIMITED"

    @property
    def headers(self) -> dict[str, str]:
        if self.limited is None:
            return {"WWW-Authenticate": "Bearer"}
        return {"WWW-Authenticate": "Bearer", "Retry-After": str(self.limited.status.retry_after)}


class RateLimited(Exception):
    def __init__(self, status: "BudgetStatus", cost: int, keyed: bool = False) -> None:
        # A key holder is not told that a key has a budget of its own: theirs is the one spent.
        more = ("this key's budget is set by the server's operator (pith-graph keys create --points-per-hour)"
                if keyed else "an API key has a budget of its own (asked of the server's operator)")
        super().__init__(f"this operation costs {cost} points and {status.remaining} of the {status.limit} points "
                         f"per hour remain; the budget resets at {status.reset_text} (in {status.retry_after} s). "
                         + ("A smaller request may fit what remains. " if 0 < status.remaining < cost else "")
                         + "Reading a whole list: a page costs about the same whatever its size, so first: 100 reads "
                         "it for the fewest points, and the bulk routes (GET /paper/{arxivId}/inbound.ndjson, "
                         "outbound.ndjson) send it in one request for about a point a hundred rows, charged when "
                         f"it starts; {more}")
        self.status, self.cost = status, cost


class TooFast(Exception):
    """A request over its client's pace (Pace): refused 429 (RATE_LIMITED) with Retry-After."""

    def __init__(self, rate: int, burst: int, wait: float) -> None:
        self.rate, self.burst = rate, burst
        self.retry_after = max(1, math.ceil(wait))
        super().__init__(f"more than {rate} requests a second from this client (in bursts of up to {burst}; a document "
                         f"new to the server counts as one for each {READING_SECONDS_PER_REQUEST * 1000:g} ms of its "
                         "reading); slow down: "
                         f"retry after {self.retry_after} s")


@dataclass(frozen=True)
class Client:
    id: str  # "key:<uuid>" or "ip:<network>" (anonymous_network)
    address: str
    key_name: str | None = None
    points_per_hour: int | None = None  # None: no budget


@dataclass(frozen=True)
class BudgetStatus:
    limit: int
    used: int
    remaining: int
    reset_at: datetime

    @property
    def retry_after(self) -> int:
        return max(1, int(self.reset_at.timestamp() - time.time()) + 1)

    @property
    def reset_text(self) -> str:
        return self.reset_at.strftime("%Y-%m-%dT%H:%M:%SZ")


def hash_secret(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).digest()


def new_secret() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


# --- keys (the command line writes them; servers read them) ----------------------------------------

async def create_key(conn: asyncpg.Connection, name: str, points_per_hour: int) -> tuple[UUID, str]:
    if not 1 <= len(name) <= 100:
        raise ValueError("--name: give 1 to 100 characters")
    if points_per_hour < 1:
        raise ValueError("--points-per-hour: give a positive number")
    secret = new_secret()
    key_id = uuid4()
    try:
        await conn.execute("INSERT INTO api_keys (key_id, name, secret_sha256, points_per_hour) VALUES ($1, $2, $3, $4)",
                           key_id, name, hash_secret(secret), points_per_hour)
    except asyncpg.UniqueViolationError:
        raise ValueError(f"--name: a key named {name!r} exists already (names stay taken after a revocation: choose another)") from None
    return key_id, secret


async def list_keys(conn: asyncpg.Connection) -> list[asyncpg.Record]:
    return await conn.fetch(KEYS)


async def revoke_key(conn: asyncpg.Connection, name: str) -> bool:
    status = await conn.execute("UPDATE api_keys SET revoked_at = now() WHERE name = $1 AND revoked_at IS NULL", name)
    return status.endswith(" 1")


# --- who is asking ------------------------------------------------------------------------------

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_networks(values: Iterable[str]) -> tuple[Network, ...]:
    networks = []
    for value in values:
        try:
            networks.append(ipaddress.ip_network(value, strict=False))
        except ValueError:
            raise ValueError(f"PITH_TRUSTED_PROXIES: {value!r} is not an IP address or network") from None
    return tuple(networks)


def _address(text: str) -> str | None:
    text = text.strip().strip('"')
    if text.startswith("["):  # [v6]:port
        text = text[1:].split("]", 1)[0]
    elif text.count(":") == 1:  # v4:port
        text = text.split(":", 1)[0]
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None


PROXY_HEADERS = ("x-forwarded-for", "forwarded")  # what PITH_PROXY_HEADER may name


def forwarded_chain(headers: Any, header: bytes = b"x-forwarded-for") -> list[str | None]:
    """The addresses a request passed through, nearest last, from the one header the proxies set
    (PITH_PROXY_HEADER): X-Forwarded-For, or RFC 7239 Forwarded (its `for=` parameters). Every line of
    that header counts, in order (two lines are one comma-joined list); any other header is ignored, so
    a client's own `Forwarded` cannot pass through a proxy that sets X-Forwarded-For."""
    items = headers.items() if isinstance(headers, dict) else headers
    text = ",".join(v.decode("latin-1") for n, v in items if n == header)
    if not text:
        return []
    if header == b"forwarded":
        hops = []
        for element in text.split(","):
            found = None
            for pair in element.split(";"):
                name, _, value = pair.partition("=")
                if name.strip().lower() == "for":
                    found = value
            hops.append(found if found is not None else "")
    else:
        hops = text.split(",")
    return [_address(h) for h in hops]


def client_address(peer: str | None, headers: Any, trusted: tuple[Network, ...],
                   header: bytes = b"x-forwarded-for") -> str:
    """The client's address, by the one rule: the peer, unless it is a trusted proxy; then, walking the
    proxies' header from its right end (the hop nearest us), the first address that is not a trusted
    proxy (what a client wrote itself is further left, and never reached past an untrusted hop)."""
    address = peer or "unknown"

    def is_trusted(value: str) -> bool:
        try:
            ip = ipaddress.ip_address(value)
        except ValueError:
            return False
        return any(ip in n for n in trusted)

    if not trusted or not is_trusted(address):
        return address
    for hop in reversed(forwarded_chain(headers, header)):
        if hop is None:
            return address  # a hop we cannot read: stop at the last proxy we trust
        if not is_trusted(hop):
            return hop
        address = hop
    return address


def anonymous_network(address: str) -> str:
    """Who an anonymous address is: an IPv4 address itself; an IPv6 address its /64, the least a network gives one
    subscriber (RFC 6177), so a host cannot take a new budget with each of its 2^64 addresses; an IPv4-mapped
    IPv6 address its IPv4 address."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address  # ("unknown": no peer)
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return address


def bearer(value: str | None) -> str | None:
    """The secret of `Bearer <secret>`; Unauthenticated for any other non-empty value."""
    if value is None or not value.strip():
        return None
    scheme, _, secret = value.strip().partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        raise Unauthenticated("Authorization: expected `Bearer <API key>`")
    return secret.strip()


# --- budgets ------------------------------------------------------------------------------------

@dataclass
class Lease:
    window: int
    limit: int
    claimed: int = 0  # granted to this process
    spent: int = 0  # spent by this process
    total: int = 0  # claimed by every process, as of this process's last claim


# With the database read-only (a standby, default_transaction_read_only = on) claims cannot be
# written: budgets are then counted in this process alone (each process admits up to the whole
# budget), and the database is tried again after this long.
READ_ONLY_RETRY_SECONDS = 30.0


class Budgets:
    def __init__(self, pool: Callable[[], asyncpg.Pool | None]) -> None:
        self._pool = pool
        self._leases: dict[str, Lease] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self.local_until = 0.0  # time.monotonic() until which claims are granted in-process

    @property
    def local(self) -> bool:
        """Budgets are counted in this process only (the database refused the last claim as read-only)."""
        return time.monotonic() < self.local_until

    @staticmethod
    def window(now: float | None = None) -> int:
        return int((time.time() if now is None else now) // WINDOW_SECONDS)

    def _lease(self, client: Client, now: float | None = None) -> Lease:
        window = self.window(now)
        lease = self._leases.get(client.id)
        if lease is None or lease.window != window:
            if len(self._leases) > 100_000:
                self._leases = {k: v for k, v in self._leases.items() if v.window == window}
            lease = self._leases[client.id] = Lease(window, client.points_per_hour or 0)
        lease.limit = client.points_per_hour or 0
        return lease

    def status(self, client: Client) -> BudgetStatus | None:
        if client.points_per_hour is None:
            return None
        lease = self._lease(client)
        used = max(lease.total - (lease.claimed - lease.spent), lease.spent)
        reset = datetime.fromtimestamp((lease.window + 1) * WINDOW_SECONDS, timezone.utc)
        return BudgetStatus(limit=lease.limit, used=used, remaining=max(0, lease.limit - used), reset_at=reset)

    def held(self, client: Client, points: int) -> bool:
        """Whether charging `points` needs no statement (no budget, or this process holds the points)."""
        if client.points_per_hour is None:
            return True
        lease = self._lease(client)
        return lease.spent + points <= lease.claimed

    async def charge(self, client: Client, points: int) -> None:
        """Spend `points` of the client's hour, claiming more from the database when the lease runs out."""
        if client.points_per_hour is None:
            return
        lease = self._lease(client)
        if lease.spent + points <= lease.claimed:
            lease.spent += points
            return
        if lease.total >= lease.limit:
            # Every point of the hour is claimed (by this process or others): refused from memory, no
            # statement (a client looping past its budget costs the database nothing).
            raise RateLimited(self.status(client), points, client.key_name is not None)  # type: ignore[arg-type]
        lock = self._locks.setdefault(client.id, asyncio.Lock())
        async with lock:
            lease = self._lease(client)
            need = lease.spent + points - lease.claimed
            if need > 0 and lease.total < lease.limit:
                chunk = max(need, -(-lease.limit // CHUNK_FRACTION))
                granted, total = await self._claim(client.id, lease.window, chunk, lease.limit)
                lease.claimed += granted
                lease.total = total
            if lease.spent + points > lease.claimed:
                raise RateLimited(self.status(client), points, client.key_name is not None)  # type: ignore[arg-type]
            lease.spent += points
        if len(self._locks) > 10_000:
            self._locks = {k: v for k, v in self._locks.items() if v.locked()}

    def spend_held(self, client: Client, points: int) -> None:
        """Spend up to `points` of what this process has claimed of the client's hour, without a statement."""
        if client.points_per_hour is None:
            return
        lease = self._lease(client)
        lease.spent = max(lease.spent, min(lease.claimed, lease.spent + points))

    def refund(self, client: Client, points: int) -> None:
        if client.points_per_hour is None or points <= 0:
            return
        lease = self._lease(client)
        lease.spent = max(0, lease.spent - points)

    async def _claim(self, client_id: str, window: int, wanted: int, limit: int) -> tuple[int, int]:
        pool = governor_pool.get() or self._pool()
        if pool is None:
            raise ConnectionError("the database pool is not open")
        if self.local:
            return self._claim_here(client_id, wanted, limit)
        start = datetime.fromtimestamp(window * WINDOW_SECONDS, timezone.utc)
        try:
            async with connection(pool) as conn:
                row = await conn.fetchrow("SELECT granted, claimed FROM pith_claim_points($1, $2, $3, $4)",
                                          client_id, start, wanted, limit)
        except asyncpg.ReadOnlySQLTransactionError:
            if not self.local:
                log.warning("the database is read-only: budgets are counted in this process only (each process "
                            "admits up to a whole budget) until it takes writes again")
            self.local_until = time.monotonic() + READ_ONLY_RETRY_SECONDS
            return self._claim_here(client_id, wanted, limit)
        return int(row["granted"]), int(row["claimed"])

    def _claim_here(self, client_id: str, wanted: int, limit: int) -> tuple[int, int]:
        """A claim granted by this process alone: what is left of the budget as this process counts it."""
        lease = self._leases.get(client_id)
        claimed = lease.claimed if lease is not None else 0
        granted = max(0, min(wanted, limit - claimed))
        return granted, claimed + granted


# --- pace: requests per second ------------------------------------------------------------------

class Pace:
    """Each client's requests per second in this process: a token bucket holding up to `burst` requests,
    refilled at `rate` a second. A request takes a token, or is refused with the wait until one is free."""

    def __init__(self, rate: int, burst: int | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.burst = burst if burst is not None else max(2, 2 * rate)
        self.clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # client id -> (tokens, when counted)

    def take(self, client_id: str) -> float:
        """0.0 when a request may go on (its token taken); else the seconds until a token is free."""
        now = self.clock()
        found = self._buckets.get(client_id)
        tokens = self.burst if found is None else min(self.burst, found[0] + (now - found[1]) * self.rate)
        if tokens >= 1:
            self._buckets[client_id] = (tokens - 1, now)
            if found is None and len(self._buckets) > 100_000:
                self._forget_full(now)
            return 0.0
        self._buckets[client_id] = (tokens, now)
        return (1 - tokens) / self.rate

    def left(self, client_id: str) -> float:
        """The client's tokens now (a burst for one not seen lately), taking none."""
        found = self._buckets.get(client_id)
        if found is None:
            return float(self.burst)
        return min(self.burst, found[0] + (self.clock() - found[1]) * self.rate)

    def reserve(self, client_id: str) -> float:
        """A token for a message that is to wait its turn rather than be refused: taken now (the balance may go
        below zero, by at most a burst), with the seconds to wait until it was due (0.0: at once)."""
        now = self.clock()
        found = self._buckets.get(client_id)
        tokens = self.burst if found is None else min(self.burst, found[0] + (now - found[1]) * self.rate)
        tokens = max(-self.burst, tokens - 1)
        self._buckets[client_id] = (tokens, now)
        return max(0.0, -tokens / self.rate) if tokens < 0 else 0.0

    def spend(self, client_id: str, tokens: float) -> None:
        """Tokens more, for what a request turned out to cost (its reading, Governor.pace_reading): the balance
        may go below zero, by at most a burst, and the client's next requests wait until it is paid back."""
        now = self.clock()
        found = self._buckets.get(client_id)
        have = self.burst if found is None else min(self.burst, found[0] + (now - found[1]) * self.rate)
        self._buckets[client_id] = (max(-self.burst, have - tokens), now)

    def _forget_full(self, now: float) -> None:
        """Drop the buckets that have filled again (their clients are as if new)."""
        self._buckets = {k: (t, at) for k, (t, at) in self._buckets.items()
                         if t + (now - at) * self.rate < self.burst}


# --- the governor: identify, admit, settle ------------------------------------------------------

class SharedSlots:
    """Heavy slots shared by the worker processes of one server: a lock file per slot in a folder of the
    server's own (`serve --workers N` makes it), each held with flock(2) by the process running a heavy
    operation in it. A process waits for a slot in a thread of its own (one per slot it may hold), blocked
    in the kernel, which hands the slot over when its holder lets it go, or dies."""

    def __init__(self, folder: str, slots: int, per_process: int) -> None:
        self.paths = [Path(folder) / f"heavy-{n}.lock" for n in range(slots)]
        self._threads = concurrent.futures.ThreadPoolExecutor(max_workers=per_process, thread_name_prefix="pith-heavy")
        self._turn = 0

    def _take(self, gave_up: threading.Event) -> int | None:
        """A slot's descriptor, its lock held: any free slot, else (blocking) the next in turn."""
        for path in self.paths:
            fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except BlockingIOError:
                os.close(fd)
        self._turn += 1
        fd = os.open(self.paths[self._turn % len(self.paths)], os.O_CREAT | os.O_RDWR, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        if gave_up.is_set():  # the operation stopped waiting (its deadline): give the slot on
            os.close(fd)
            return None
        return fd

    async def acquire(self) -> int:
        gave_up = threading.Event()
        taking = self._threads.submit(self._take, gave_up)
        try:
            fd = await asyncio.wrap_future(taking)
        except BaseException:
            gave_up.set()
            taking.add_done_callback(self._let_go)
            raise
        assert fd is not None
        return fd

    @staticmethod
    def _let_go(taking: concurrent.futures.Future) -> None:
        """A slot taken as its wait was given up: let it go at once."""
        if not taking.cancelled() and taking.exception() is None:
            fd = taking.result()
            if fd is not None:
                os.close(fd)

    @staticmethod
    def release(fd: int) -> None:
        os.close(fd)  # closing the descriptor lets the lock go


@dataclass
class Ticket:
    """An admitted operation: what it was charged, and the slots it holds until it is settled."""

    client: Client
    points: int
    held: list[asyncio.Semaphore] = field(default_factory=list)
    settled: bool = False
    light_first: LightFirst | None = None  # a light operation's: in flight until settled
    light: bool = True
    shared: int | None = None  # the server-wide heavy slot held (SharedSlots), by its descriptor
    slots: SharedSlots | None = None



class LightFirst:
    """Light work first, within a process: an operation admitted light (priced at most LIGHT_COST, by the
    pipeline or from a plan) is in flight until it is settled; any other operation's turns of the
    event loop (its start once admitted, then each of loaders.base.Turns' stretches: app.pipeline) wait
    while any light one is in flight, at most LIGHT_FIRST_SECONDS a turn: heavy operations (which also take a
    heavy slot), and those between (a hub's nested page, a record), which four clients looping them made a
    lookup wait a round of their stretches at each of its steps. So a lookup waits behind at most
    one stretch of heavy work however many heavy operations the process runs, and heavy work still gets
    a share of a loop that is never idle."""

    def __init__(self, longest: float = LIGHT_FIRST_SECONDS) -> None:
        self.longest = longest
        self.light = 0
        self._idle: list[asyncio.Future] = []

    def begin(self) -> None:
        self.light += 1

    def end(self) -> None:
        self.light -= 1
        if self.light <= 0:
            self.light = 0
            for waiting in self._idle:
                if not waiting.done():
                    with contextlib.suppress(RuntimeError):  # its loop closed (in-process servers of tests)
                        waiting.set_result(None)
            self._idle.clear()

    async def turn(self) -> None:
        """A heavy operation's turn: on once no light operation is in flight, or `longest` seconds on."""
        if self.light == 0:
            return
        idle = asyncio.get_running_loop().create_future()
        self._idle.append(idle)
        await asyncio.wait((idle,), timeout=self.longest)
        if not idle.done():
            idle.cancel()
            with contextlib.suppress(ValueError):
                self._idle.remove(idle)


class Governor:
    def __init__(self, pool: Callable[[], asyncpg.Pool | None], *, anonymous_points_per_hour: int | None,
                 trusted_proxies: tuple[Network, ...] = (), heavy_slots: int = HEAVY_SLOTS,
                 proxy_header: str = "x-forwarded-for", requests_per_second: int | None = None,
                 heavy_locks: str | None = None) -> None:
        self.pool = pool
        self.anonymous_points_per_hour = anonymous_points_per_hour or None
        self.trusted = trusted_proxies
        if proxy_header.lower() not in PROXY_HEADERS:
            raise ValueError(f"PITH_PROXY_HEADER: {proxy_header!r} is not one of {', '.join(PROXY_HEADERS)} (the one "
                             "header your proxies set; the server reads no other)")
        self.proxy_header = proxy_header.lower().encode("latin-1")
        self.budgets = Budgets(pool)
        self.paces = Pace(requests_per_second) if requests_per_second else None
        self.reading_seconds = READING_SECONDS_PER_REQUEST
        per_process = max(1, min(heavy_slots, HEAVY_SLOTS))
        self.heavy = asyncio.Semaphore(per_process)
        self.shared = SharedSlots(heavy_locks, max(1, heavy_slots), per_process) if heavy_locks else None
        self.costly = asyncio.Semaphore(COSTLY_SLOTS)
        self.light_first = LightFirst()
        self._per_client: dict[str, asyncio.Semaphore] = {}
        self._key_table: dict[bytes, asyncpg.Record] | None = None  # every valid key, by digest
        self._key_table_at = 0.0  # when its read started (monotonic)
        self._key_lock = asyncio.Lock()
        self.key_reads = 0  # statements that read the keys (tests read it)
        self._anonymous: dict[str, Client] = {}

    def anonymous(self, address: str) -> Client:
        """The client an address is (one object per address, reused): its budget, pace, slots and quotas are its
        network's (anonymous_network)."""
        found = self._anonymous.get(address)
        if found is None:
            if len(self._anonymous) > 100_000:
                self._anonymous.clear()
            found = self._anonymous[address] = Client(id=f"ip:{anonymous_network(address)}", address=address,
                                                      points_per_hour=self.anonymous_points_per_hour)
        return found

    def address_of(self, scope: Any) -> str:
        """The client's address for a request (HTTP or WebSocket), computed once and kept in its scope:
        budgets, heavy slots, WebSocket and persisted-query quotas, logs and the operator check all read
        this one."""
        found = scope.get("pith.address")
        if found is None:
            peer = scope.get("client")
            address = peer[0] if peer else None
            found = client_address(address, scope.get("headers") or (), self.trusted, self.proxy_header) \
                if self.trusted else (address or "unknown")
            scope["pith.address"] = found
        return found

    async def of_scope(self, scope: Any) -> Client:
        """The client of an ASGI request (HTTP or WebSocket); Unauthenticated for a bad key."""
        address = self.address_of(scope)
        authorization = None
        for name, value in scope.get("headers") or ():
            if name == b"authorization":
                authorization = value.decode("latin-1")
        if authorization is None:
            return self.anonymous(address)  # the common case
        return await self.client_of(address, authorization)

    async def identify(self, peer: str | None, headers: dict[bytes, bytes], authorization: str | None = None) -> Client:
        """The client of a request from its peer and headers; Unauthenticated when it names a key that is
        unknown or revoked."""
        address = client_address(peer, headers, self.trusted, self.proxy_header) if self.trusted \
            else (peer or "unknown")
        if authorization is None:
            raw = headers.get(b"authorization")
            authorization = raw.decode("latin-1") if raw is not None else None
        return await self.client_of(address, authorization)

    async def client_of(self, address: str, authorization: str | None) -> Client:
        """The client an address and an Authorization value are (the address already resolved)."""
        try:
            secret = bearer(authorization)
            if secret is None:
                return self.anonymous(address)
            key = await self._key(hash_secret(secret))
            if key is None:
                raise Unauthenticated("the API key is unknown or revoked; ask this API's operator for a key, or send "
                                      "none (anonymous requests are served within the anonymous budget)")
        except Unauthenticated as exc:
            try:  # the refusal is charged to the address, a point
                await self.budgets.charge(self.anonymous(address), 1)
            except RateLimited as over:
                raise Unauthenticated(str(exc), over) from None
            raise
        return Client(id=f"key:{key['key_id']}", address=address, key_name=key["name"],
                      points_per_hour=key["points_per_hour"])

    async def _key(self, digest: bytes) -> asyncpg.Record | None:
        """The key with this secret's digest, from memory: every valid key is read in one statement, again
        every KEY_CACHE_SECONDS (a revoked key stops working within that), and when a digest is not
        among them, once more, but at most every KEY_MISS_SECONDS per process however many unknown keys
        arrive (they wait for that read together). So a key created before the request arrived is
        found, and a flood of random keys costs the database one read every KEY_MISS_SECONDS."""
        now = time.monotonic()
        if self._key_table is None or now - self._key_table_at > KEY_CACHE_SECONDS:
            await self._refresh_keys(now)
        found = self._key_table.get(digest)  # type: ignore[union-attr]
        if found is not None:
            return found
        asked = time.monotonic()
        wait = self._key_table_at + KEY_MISS_SECONDS - asked
        if wait > 0:
            await asyncio.sleep(wait)
        if self._key_table_at < asked:  # no read has started since this request asked: start one
            await self._refresh_keys(asked)
        return self._key_table.get(digest)  # type: ignore[union-attr]

    async def _refresh_keys(self, asked: float) -> None:
        """Read every valid key (one reader at a time: a request that arrives while a read is under way
        waits for the next one, which starts after it arrived)."""
        async with self._key_lock:
            if self._key_table is not None and self._key_table_at >= asked:
                return  # read by another request after this one asked
            pool = governor_pool.get() or self.pool()
            if pool is None:
                raise ConnectionError("the database pool is not open")
            started = time.monotonic()
            async with connection(pool) as conn:
                rows = await conn.fetch(LIVE_KEYS)
            self._key_table = {bytes(r["secret_sha256"]): r for r in rows}
            self._key_table_at = started
            self.key_reads += 1

    def pace(self, client: Client, scope: Any = None) -> TooFast | None:
        """The client's request taken against its pace: None, or TooFast (the refusal costs a point of what
        this process holds of the client's hour, without a statement). A request's scope remembers the
        answer, so a request asked twice (a plan, then the full stack) is counted once."""
        if self.paces is None:
            return None
        if scope is not None and "pith.paced" in scope:
            return scope["pith.paced"]
        wait = self.paces.take(client.id)
        refused = None
        if wait > 0:
            refused = TooFast(self.paces.rate, self.paces.burst, wait)
            self.budgets.spend_held(client, 1)
        if scope is not None:
            scope["pith.paced"] = refused
        return refused

    def standing(self, client: Client) -> float:
        """How much of its pace the client has left, as a share of its burst (1.0: all; below 0: in debt, its
        reading spent ahead); 1.0 without pacing; a client with a key one more (ahead of every anonymous one:
        a flood from many addresses, each sending at a lookup's pace, stands as high as an ordinary anonymous
        client). Who goes first where requests wait for the same thing (the reader's places:
        app.cost.READER_STANDING)."""
        keyed = 1.0 if client.id.startswith("key:") else 0.0
        if self.paces is None:
            return 1.0 + keyed
        return self.paces.left(client.id) / self.paces.burst + keyed

    def pace_reading(self, client: Client, seconds: float) -> None:
        """A document's reading (parse and validation, measured) taken against the client's pace: a request's
        token buys READING_SECONDS_PER_REQUEST of it, each such stretch more costs a token more. So a client
        sending documents that are costly to read (distinct ones, which no cache holds) is paced by the time
        they take, not only by their number."""
        if self.paces is not None and seconds > self.reading_seconds:
            self.paces.spend(client.id, seconds / self.reading_seconds - 1)

    def paced_receive(self, client: Client, receive: Any) -> Any:
        """A WebSocket's receive, paced: each message the client sends takes a token of its pace, and past the
        pace waits its turn before it is read (the client's further messages wait in its socket), costing a
        point of what this process holds of the client's hour. Every message counts (operations, pings, and
        those the protocol refuses itself, such as a subscription past the connection's limit)."""
        if self.paces is None:
            return receive
        paces = self.paces

        async def paced() -> Any:
            message = await receive()
            if message.get("type") == "websocket.receive":
                wait = paces.reserve(client.id)
                if wait > 0:
                    self.budgets.spend_held(client, 1)
                    await asyncio.sleep(wait)
            return message

        return paced

    async def admit(self, client: Client, points: int, units: int, session: Any = None,
                    within: float | None = None) -> Ticket:
        """Charge the budget, then (for heavy work) wait for a slot, and (for work over LIGHT_COST) for a costly
        slot, unless the operation's `session` holds a connection already (its papers' sizes read for its price,
        a transaction open): waiting so, slot holders that needed a connection waited for it (behind PgBouncer's
        four, every one held) until the deadline. RateLimited when over budget; TimeoutError when admission
        takes longer than `within` seconds (the request's deadline: every caller passes what it has left),
        holding nothing then."""
        if units <= LIGHT_COST and units <= HEAVY_COST and self.budgets.held(client, points):
            # No slot to wait for and the points held in memory: nothing can wait, so no timer is set
            # (a lookup's admission, a few microseconds).
            return await self._admit(client, points, units, session)
        async with asyncio.timeout(within):
            return await self._admit(client, points, units, session)

    async def _admit(self, client: Client, points: int, units: int, session: Any) -> Ticket:
        costly_slot = getattr(session, "statements", 0) == 0
        await self.budgets.charge(client, points)
        ticket = Ticket(client, points, light_first=self.light_first, light=units <= LIGHT_COST)
        if ticket.light:
            self.light_first.begin()
        if units > HEAVY_COST:
            mine = self._per_client.get(client.id)
            if mine is None:
                if len(self._per_client) > 10_000:
                    self._per_client = {k: s for k, s in self._per_client.items() if s.locked()}
                mine = self._per_client[client.id] = asyncio.Semaphore(HEAVY_PER_CLIENT)
            try:
                for semaphore in (mine, self.heavy):
                    await semaphore.acquire()
                    ticket.held.append(semaphore)
                if self.shared is not None:
                    ticket.shared, ticket.slots = await self.shared.acquire(), self.shared
            except BaseException:
                self.settle(ticket, None)
                raise
        if not ticket.light and costly_slot:
            try:
                await self.costly.acquire()
            except BaseException:
                self.settle(ticket, None)
                raise
            ticket.held.append(self.costly)
        return ticket

    async def charge(self, client: Client, points: int) -> None:
        """Charge work done outside admission (a refused operation's parse and validation): as much of it as
        the hour has left; past that the client is over budget (its next request is 429 before parsing)."""
        try:
            await self.budgets.charge(client, points)
        except RateLimited:
            lease = self.budgets._lease(client)
            lease.spent = max(lease.spent, lease.claimed)

    def settle(self, ticket: Ticket, actual_points: int | None) -> None:
        """Release the slots and give back what the operation was charged beyond what it did."""
        if ticket.settled:
            return
        ticket.settled = True
        if ticket.light:
            self.light_first.end()
        if ticket.shared is not None and ticket.slots is not None:
            ticket.slots.release(ticket.shared)
            ticket.shared = None
        for semaphore in reversed(ticket.held):
            semaphore.release()
        ticket.held.clear()
        if actual_points is not None and actual_points < ticket.points:
            self.budgets.refund(ticket.client, ticket.points - actual_points)

    def status(self, client: Client | None) -> BudgetStatus | None:
        return self.budgets.status(client) if client is not None else None


def rate_limit_headers(status: BudgetStatus | None) -> list[tuple[bytes, bytes]]:
    """The IETF RateLimit fields (draft-ietf-httpapi-ratelimit-headers): the policy and what is left."""
    if status is None:
        return []
    reset = max(0, int(status.reset_at.timestamp() - time.time()))
    return [(b"ratelimit-policy", f'"points";q={status.limit};w={WINDOW_SECONDS}'.encode()),
            (b"ratelimit", f'"points";r={status.remaining};t={reset}'.encode())]


def with_budget(response: Any, governor: Governor, client: Client) -> Any:
    """Every answer to a governed client, whatever it is (GraphQL's and the REST routes'): its budget's fields
    (RateLimit, RateLimit-Policy), added to the response's headers."""
    response.raw_headers += rate_limit_headers(governor.status(client))
    return response
