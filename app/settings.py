"""Configuration from the environment, in one place; command-line flags override it."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from app.limits import (DEFAULT_ANONYMOUS_POINTS_PER_HOUR, DEFAULT_REQUEST_TIMEOUT_SECONDS, HEAVY_SLOTS,
                        MAX_SUBSCRIPTIONS_PER_CLIENT, MAX_WEBSOCKETS_PER_CLIENT)


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
    persisted_documents: str | None = None
    persisted_only: bool = False
    access_log: bool = True
    # Documents answered once by the full pipeline with one compiled statement are answered again
    # before it (app/fastpath.py); off only to compare the two.
    prepared_fast_path: bool = True
    # Seconds an operation may take from its arrival; past it, it is cancelled (TIMEOUT). 0: none.
    request_timeout: float | None = DEFAULT_REQUEST_TIMEOUT_SECONDS
    # Points per hour for clients without a key (by IP address); None: unlimited. On in production.
    anonymous_points_per_hour: int | None = None
    trusted_proxies: tuple[str, ...] = ()  # addresses or networks whose Forwarded / X-Forwarded-For count
    heavy_slots: int = HEAVY_SLOTS  # heavy operations (app.limits.HEAVY_COST) running at once per process
    # One client's share of the live transports (raise them for many users behind one address).
    websockets_per_client: int = MAX_WEBSOCKETS_PER_CLIENT
    subscriptions_per_client: int = MAX_SUBSCRIPTIONS_PER_CLIENT

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> "Settings":
        env = dict(os.environ if env is None else env)
        base = cls()
        return replace(
            base,
            database_url=env.get("DATABASE_URL") or None,
            replica_urls=_split(env.get("DATABASE_REPLICA_URLS", "")),
            host=env.get("PITH_HOST", base.host),
            port=int(env.get("PITH_PORT", base.port)),
            data_dir=Path(env["PITH_DATA_DIR"]) if env.get("PITH_DATA_DIR") else base.data_dir,
            pool_min=int(env.get("PITH_POOL_MIN", base.pool_min)),
            pool_max=int(env.get("PITH_POOL_MAX", base.pool_max)),
            statement_timeout_ms=int(env.get("PITH_STATEMENT_TIMEOUT_MS", base.statement_timeout_ms)),
            cors_origins=cors_origins(env.get("PITH_CORS_ORIGINS", "")),
            cors_headers=_split(env.get("PITH_CORS_HEADERS", "")),
            log_format=env.get("PITH_LOG_FORMAT", base.log_format),
            introspection=_switch(env, "PITH_INTROSPECTION", env.get("PITH_ENV", "") != "production"),
            graphiql=_switch(env, "PITH_GRAPHIQL", env.get("PITH_ENV", "") != "production"),
            production=env.get("PITH_ENV", "") == "production",
            prepared_statements=_switch(env, "PITH_DB_PREPARED_STATEMENTS", True),
            listen_database_url=env.get("PITH_LISTEN_DATABASE_URL") or None,
            metrics_token=env.get("PITH_METRICS_TOKEN") or None,
            gc_freeze=env.get("PITH_GC_FREEZE", "1") not in ("0", "false", "no"),
            gc_young_threshold=int(env.get("PITH_GC_YOUNG_THRESHOLD", base.gc_young_threshold)),
            persisted_documents=env.get("PITH_PERSISTED_DOCUMENTS") or None,
            persisted_only=env.get("PITH_PERSISTED_ONLY", "") in ("1", "true", "yes"),
            access_log=env.get("PITH_ACCESS_LOG", "1") not in ("0", "false", "no"),
            prepared_fast_path=env.get("PITH_PREPARED_FAST_PATH", "1") not in ("0", "false", "no"),
            request_timeout=float(env.get("PITH_REQUEST_TIMEOUT", DEFAULT_REQUEST_TIMEOUT_SECONDS)) or None,
            anonymous_points_per_hour=_anonymous_budget(env),
            trusted_proxies=_split(env.get("PITH_TRUSTED_PROXIES", "")),
            heavy_slots=int(env.get("PITH_HEAVY_SLOTS", base.heavy_slots)),
            websockets_per_client=int(env.get("PITH_WEBSOCKETS_PER_CLIENT", base.websockets_per_client)),
            subscriptions_per_client=int(env.get("PITH_SUBSCRIPTIONS_PER_CLIENT", base.subscriptions_per_client)),
        )


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


def _switch(env: dict[str, str], name: str, default: bool) -> bool:
    """An on/off setting: 0, false, no or off turn it off, 1, true, yes or on turn it on; unset: the default."""
    given = env.get(name, "").strip().lower()
    if given in ("0", "false", "no", "off"):
        return False
    if given in ("1", "true", "yes", "on"):
        return True
    return default


def _anonymous_budget(env: dict[str, str]) -> int | None:
    """PITH_ANONYMOUS_POINTS_PER_HOUR; unset: the default in production, unlimited elsewhere; 0: unlimited."""
    given = env.get("PITH_ANONYMOUS_POINTS_PER_HOUR")
    if given is None or not given.strip():
        return DEFAULT_ANONYMOUS_POINTS_PER_HOUR if env.get("PITH_ENV", "") == "production" else None
    return int(given) or None


def redact_url(url: str | None) -> str:
    """Hide the password of a database URL, for logs and error messages."""
    if not url:
        return ""
    return re.sub(r"(//[^:/@]+):[^@]*@", r"\1:***@", url)
