"""Configuration from the environment, in one place; command-line flags override it."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from app.limits import (DEFAULT_ANONYMOUS_POINTS_PER_HOUR, DEFAULT_REQUEST_TIMEOUT_SECONDS, DEFAULT_REQUESTS_PER_SECOND,
                        HEAVY_SLOTS, MAX_SUBSCRIPTIONS_PER_CLIENT, MAX_WEBSOCKETS_PER_CLIENT)


def _default_data_dir() -> Path:
    import platformdirs

    return Path(platformdirs.user_data_dir("pith-graph")) / "pgdata"


def _split(value: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in value.split(",") if part.strip())


@dataclass(frozen=True)
class Settings:
    database_url: str | None = None
    # Read replicas: the API's reads go to these (one replica per request); writes stay on the primary.
    replica_urls: tuple[str, ...] = ()
    host: str = "127.0.0.1"
    port: int = 8000
    data_dir: Path = field(default_factory=_default_data_dir)
    pool_min: int = 1
    pool_max: int = 10
    # Connections of the live transports' own pool (subscriptions' events, replays, a WebSocket's key
    # check), on the primary: live work never waits behind requests for one of theirs.
    live_pool_max: int = 4
    statement_timeout_ms: int = 10_000
    cors_origins: tuple[str, ...] = ()
    cors_headers: tuple[str, ...] = ()  # request headers allowed besides app.cors.DEFAULT_HEADERS
    log_format: str = "text"
    introspection: bool = True  # off by default with PITH_ENV=production (PITH_INTROSPECTION=1 turns it on)
    graphiql: bool = True  # GraphiQL at GET /graphql in a browser; off by default in production
    production: bool = False
    # Behind a pooler in transaction mode (PgBouncer before 1.21): 0, so asyncpg prepares no named statements.
    prepared_statements: bool = True
    # LISTEN needs one session-long connection to the primary: not through a transaction-mode pooler.
    listen_database_url: str | None = None  # default: DATABASE_URL
    metrics_token: str | None = None  # /metrics (and /readyz details) for this Bearer token, besides loopback
    gc_freeze: bool = True
    # The collector's first threshold (allocations between young collections). A record allocates
    # tens of thousands of short-lived objects; at Python's 700 it ran a dozen young collections per
    # record over objects that were all still alive (1 ms of a 10 ms record). 0 keeps Python's.
    gc_young_threshold: int = 50_000
    # How long (microseconds) a thread holding the interpreter may keep it once another asks (Python's own: 5,000).
    # A worker's reader thread parses and validates long documents in pure Python: at 5 ms, each of the event
    # loop's wake-ups (a request's arrival, its rows, its answer) could wait that long behind it, and a light
    # lookup's p99 went from 5 to 20 ms while distinct long documents arrived. 0 keeps Python's.
    switch_interval_us: int = 500
    persisted_documents: str | None = None
    persisted_only: bool = False
    access_log: bool = True
    # Documents answered once by the full pipeline with one compiled statement are answered again from
    # their plan (app/graphql/plan.py); off only to compare the two.
    prepared_fast_path: bool = True
    # Seconds an operation may take from its arrival; past it, it is cancelled (TIMEOUT). 0: none.
    request_timeout: float | None = DEFAULT_REQUEST_TIMEOUT_SECONDS
    # Points per hour for clients without a key (by IP address); None: unlimited. On in production.
    anonymous_points_per_hour: int | None = None
    # Requests per second one client may send each process (bursts of twice as many); None: unlimited.
    # On in production.
    requests_per_second: int | None = None
    trusted_proxies: tuple[str, ...] = ()  # addresses or networks whose proxy header counts
    proxy_header: str = "x-forwarded-for"  # the one header trusted proxies set: x-forwarded-for or forwarded
    # Heavy operations (app.limits.HEAVY_COST) running at once in the server, its workers together; each
    # process runs at most app.limits.HEAVY_SLOTS of them.
    heavy_slots: int = HEAVY_SLOTS
    # The folder of lock files through which the workers share the server's heavy slots (set by `serve
    # --workers N` for its workers); None: one process, its slots its own.
    heavy_locks: str | None = None
    # One client's share of the live transports (raise them for many users behind one address).
    websockets_per_client: int = MAX_WEBSOCKETS_PER_CLIENT
    subscriptions_per_client: int = MAX_SUBSCRIPTIONS_PER_CLIENT

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> "Settings":
        """The settings the environment gives; SettingsError naming every variable that cannot work (each
        on a line: the variable, the value given, what it accepts), before anything starts."""
        env = dict(os.environ if env is None else env)
        base = cls()
        read = _Reader(env)
        production = read.word("PITH_ENV", ("production", "development"), "development") == "production"
        settings = replace(
            base,
            database_url=env.get("DATABASE_URL") or None,
            replica_urls=_split(env.get("DATABASE_REPLICA_URLS", "")),
            host=env.get("PITH_HOST", base.host),
            port=read.integer("PITH_PORT", base.port, 1, 65535),
            data_dir=Path(env["PITH_DATA_DIR"]) if env.get("PITH_DATA_DIR") else base.data_dir,
            pool_min=read.integer("PITH_POOL_MIN", base.pool_min, 0),
            pool_max=read.integer("PITH_POOL_MAX", base.pool_max, 1),
            live_pool_max=read.integer("PITH_LIVE_POOL_MAX", base.live_pool_max, 1),
            statement_timeout_ms=read.integer("PITH_STATEMENT_TIMEOUT_MS", base.statement_timeout_ms, 1),
            cors_origins=read.checked("PITH_CORS_ORIGINS", cors_origins, ()),
            cors_headers=_split(env.get("PITH_CORS_HEADERS", "")),
            log_format=read.word("PITH_LOG_FORMAT", ("text", "json"), base.log_format),
            introspection=read.switch("PITH_INTROSPECTION", not production),
            graphiql=read.switch("PITH_GRAPHIQL", not production),
            production=production,
            prepared_statements=read.switch("PITH_DB_PREPARED_STATEMENTS", True),
            listen_database_url=env.get("PITH_LISTEN_DATABASE_URL") or None,
            metrics_token=env.get("PITH_METRICS_TOKEN") or None,
            gc_freeze=read.switch("PITH_GC_FREEZE", True),
            gc_young_threshold=read.integer("PITH_GC_YOUNG_THRESHOLD", base.gc_young_threshold, 0),
            switch_interval_us=read.integer("PITH_SWITCH_INTERVAL_US", base.switch_interval_us, 0, 100_000),
            persisted_documents=env.get("PITH_PERSISTED_DOCUMENTS") or None,
            persisted_only=read.switch("PITH_PERSISTED_ONLY", False),
            access_log=read.switch("PITH_ACCESS_LOG", True),
            prepared_fast_path=read.switch("PITH_PREPARED_FAST_PATH", True),
            request_timeout=read.seconds("PITH_REQUEST_TIMEOUT", DEFAULT_REQUEST_TIMEOUT_SECONDS) or None,
            anonymous_points_per_hour=read.integer(
                "PITH_ANONYMOUS_POINTS_PER_HOUR", DEFAULT_ANONYMOUS_POINTS_PER_HOUR if production else 0, 0) or None,
            requests_per_second=read.integer(
                "PITH_REQUESTS_PER_SECOND", DEFAULT_REQUESTS_PER_SECOND if production else 0, 0) or None,
            trusted_proxies=read.checked("PITH_TRUSTED_PROXIES", _networks, ()),
            proxy_header=read.word("PITH_PROXY_HEADER", ("x-forwarded-for", "forwarded"), base.proxy_header),
            heavy_slots=read.integer("PITH_HEAVY_SLOTS", heavy_slots_for(), 1),
            heavy_locks=env.get("PITH_HEAVY_LOCKS") or None,
            websockets_per_client=read.integer("PITH_WEBSOCKETS_PER_CLIENT", base.websockets_per_client, 1),
            subscriptions_per_client=read.integer("PITH_SUBSCRIPTIONS_PER_CLIENT", base.subscriptions_per_client, 1),
        )
        read.integer("PITH_METRICS_OPERATION_NAMES", 1_000, 0)  # read by app.metrics
        read.integer("PITH_WORKERS", 1, 1)  # read by the command line (serve)
        if not read.problems and settings.pool_min > settings.pool_max:
            read.problems.append(f"PITH_POOL_MIN: {settings.pool_min} is more than PITH_POOL_MAX "
                                 f"({settings.pool_max}); give a minimum at most the maximum")
        if read.problems:
            raise SettingsError(read.problems)
        return settings


def hides_names(production: bool, introspection: bool) -> bool:
    """Whether errors leave out names the client did not write ("Did you mean", enum types and values): where
    the schema is not public, in production with introspection off. With introspection on it is public, and
    an error naming what is allowed is what a client needs."""
    return production and not introspection


def heavy_slots_for(cpus: int | None = None) -> int:
    """Heavy operations running at once in the server by default: its cores less one (at least one), so heavy work
    never holds every core while lookups wait for one. (Two workers on two cores running a heavy operation each
    held both cores: a light lookup's p99 was 1.7-3.6x its unloaded figure, against 1.1-1.4x with one for both.)"""
    if cpus is None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cpus - 1)


class SettingsError(ValueError):
    """Settings that cannot work: one line per variable, naming it, the value given and what it accepts."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


SWITCH_ON = ("1", "true", "yes", "on")
SWITCH_OFF = ("0", "false", "no", "off")


class _Reader:
    """Reads variables of one environment, noting each one that cannot be read instead of stopping at it."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.problems: list[str] = []

    def _given(self, name: str) -> str | None:
        value = self.env.get(name)
        return None if value is None or not value.strip() else value.strip()

    def integer(self, name: str, default: int, minimum: int, maximum: int | None = None) -> int:
        given = self._given(name)
        if given is None:
            return default
        allowed = f"a whole number from {minimum}" + (f" to {maximum}" if maximum is not None else " up")
        try:
            value = int(given)
        except ValueError:
            self.problems.append(f"{name}: {given!r} is not a whole number; give {allowed}")
            return default
        if value < minimum or (maximum is not None and value > maximum):
            self.problems.append(f"{name}: {value} is out of range; give {allowed}")
            return default
        return value

    def seconds(self, name: str, default: float) -> float:
        given = self._given(name)
        if given is None:
            return default
        try:
            value = float(given)
        except ValueError:
            value = -1.0
        if not value >= 0 or value == float("inf"):
            self.problems.append(f"{name}: {given!r} is not a number of seconds; give a number such as 10 or 2.5 "
                                 "(no unit; 0 for none)")
            return default
        return value

    def word(self, name: str, choices: tuple[str, ...], default: str) -> str:
        given = self._given(name)
        if given is None:
            return default
        if given.lower() not in choices:
            self.problems.append(f"{name}: {given!r} is not one of {', '.join(choices)} (any case)")
            return default
        return given.lower()

    def switch(self, name: str, default: bool) -> bool:
        """On or off: 1, true, yes or on; 0, false, no or off (any case); unset: the default."""
        given = self._given(name)
        if given is None:
            return default
        if given.lower() in SWITCH_ON:
            return True
        if given.lower() in SWITCH_OFF:
            return False
        self.problems.append(f"{name}: {given!r} is not on or off; give 1, true, yes or on, or 0, false, no or off "
                             "(any case)")
        return default

    def checked(self, name: str, parse, default):  # type: ignore[no-untyped-def]
        """A value `parse` reads, or raises ValueError saying what is wrong (its message names the variable)."""
        given = self.env.get(name, "")
        try:
            return parse(given)
        except ValueError as exc:
            message = str(exc)
            self.problems.append(message if message.startswith(name) else f"{name}: {message}")
            return default


def _networks(value: str) -> tuple[str, ...]:
    """PITH_TRUSTED_PROXIES: comma-separated addresses or networks (checked here, parsed by the governor)."""
    import ipaddress

    parts = _split(value)
    for part in parts:
        try:
            ipaddress.ip_network(part, strict=False)
        except ValueError:
            raise ValueError(f"PITH_TRUSTED_PROXIES: {part!r} is not an IP address or network; give addresses or "
                             "networks such as 10.0.0.0/8, comma-separated") from None
    return parts


DEFAULT_PORTS = {"http": 80, "https": 443}


def normalize_origin(origin: str) -> str:
    """An origin as browsers send it in `Origin`: scheme and host in lower case, no default port, no
    trailing slash. What is not an origin raises ValueError saying the form to give."""
    from urllib.parse import urlsplit

    text = origin.strip()
    if text == "*":
        return text
    form = "give scheme://host[:port], e.g. http://localhost:5173 or https://app.example.org"
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        raise ValueError(f"PITH_CORS_ORIGINS: {origin!r} is not an origin ({form})") from None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname:
        raise ValueError(f"PITH_CORS_ORIGINS: {origin!r} is not an origin: it needs http:// or https:// and a "
                         f"host ({form})")
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError(f"PITH_CORS_ORIGINS: {origin!r} is not an origin: an origin has no path, query or user "
                         f"({form}; browsers send no more)")
    host = parts.hostname.lower()
    if ":" in host:  # an IPv6 address keeps its brackets
        host = f"[{host}]"
    return f"{scheme}://{host}" + (f":{port}" if port is not None and port != DEFAULT_PORTS[scheme] else "")


def cors_origins(value: str) -> tuple[str, ...]:
    """PITH_CORS_ORIGINS: comma-separated origins, each normalized (normalize_origin), duplicates dropped."""
    return tuple(dict.fromkeys(normalize_origin(part) for part in _split(value)))


def redact_url(url: str | None) -> str:
    """Hide the password of a database URL, for logs and error messages."""
    if not url:
        return ""
    return re.sub(r"(//[^:/@]+):[^@]*@", r"\1:***@", url)
