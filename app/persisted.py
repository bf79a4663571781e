"""Persisted queries: Apollo's automatic persisted queries, and trusted documents for production frontends.

- APQ: a client sends `extensions.persistedQuery {version: 1, sha256Hash}`; without the document it
  gets PERSISTED_QUERY_NOT_FOUND and sends both, and the document is then stored (once it has passed
  validation) in PostgreSQL, so every worker and every restart knows it. Documents are content-
  addressed and immutable, so each process keeps a bounded in-memory copy of those it has seen.
- Trusted documents: PITH_PERSISTED_DOCUMENTS names a JSON manifest {"<sha256 hex>": "<document>"}
  loaded at start-up; with PITH_PERSISTED_ONLY=1 the server runs nothing else (PERSISTED_QUERY_REQUIRED),
  and registers nothing.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
import re
from collections import OrderedDict
from pathlib import Path
from typing import Any

import asyncpg

from app.db.pool import ACQUIRE_SECONDS, connection
from app.limits import PERSISTED_MAX_STORED as MAX_STORED
from app.limits import PERSISTED_REGISTRATIONS_PER_MINUTE
from loaders.system import PERSISTED_DOCUMENT

log = logging.getLogger("pith.persisted")

HASH = re.compile(r"^[0-9a-f]{64}$")
LOCAL_CACHE = 2_048


def sha256_hex(document: str) -> str:
    return hashlib.sha256(document.encode("utf-8", "surrogatepass")).hexdigest()


def load_manifest(path: str | Path) -> dict[str, str]:
    """{sha256: document}; refuses a file that is not such an object or whose hashes do not match."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"PITH_PERSISTED_DOCUMENTS={path}: cannot read a JSON object ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"PITH_PERSISTED_DOCUMENTS={path}: expected a JSON object {{\"<sha256>\": \"<document>\"}}")
    for key, document in data.items():
        if not isinstance(key, str) or not HASH.match(key) or not isinstance(document, str):
            raise ValueError(f"PITH_PERSISTED_DOCUMENTS={path}: entry {str(key)[:70]!r} is not "
                             "\"<64 lowercase hex>\": \"<document>\"")
        if sha256_hex(document) != key:
            raise ValueError(f"PITH_PERSISTED_DOCUMENTS={path}: entry {key} is not the SHA-256 of its document")
    return dict(data)


class PersistedQueryError(Exception):
    def __init__(self, message: str, code: str, status: int = 200) -> None:
        self.message, self.code, self.status = message, code, status


def requested_hash(extensions: dict[str, Any] | None) -> str | None:
    """The sha256Hash an APQ request names, None for an ordinary request; a malformed one is refused."""
    if not extensions or "persistedQuery" not in extensions:
        return None
    pq = extensions["persistedQuery"]
    if not isinstance(pq, dict) or pq.get("version") != 1 or not isinstance(pq.get("sha256Hash"), str) \
            or not HASH.match(pq["sha256Hash"]):
        raise PersistedQueryError("extensions.persistedQuery: expected {\"version\": 1, \"sha256Hash\": "
                                  "\"<64 lowercase hex>\"}", "PERSISTED_QUERY_NOT_SUPPORTED", 400)
    return pq["sha256Hash"]


class PersistedDocuments:
    def __init__(self, manifest: dict[str, str] | None = None, only: bool = False) -> None:
        self.manifest = manifest or {}
        self.only = only
        self._seen: OrderedDict[str, str] = OrderedDict()
        self._touched: dict[str, float] = {}
        self._rate = PerMinute(PERSISTED_REGISTRATIONS_PER_MINUTE)
        self.refused = 0  # registrations refused for rate (tests read it)

    def _remember(self, sha: str, document: str) -> None:
        self._seen[sha] = document
        self._seen.move_to_end(sha)
        while len(self._seen) > LOCAL_CACHE:
            self._seen.popitem(last=False)

    async def lookup(self, pool: asyncpg.Pool | None, sha: str) -> str | None:
        if sha in self.manifest:
            return self.manifest[sha]
        if self.only:
            return None
        if sha in self._seen:
            self._seen.move_to_end(sha)
            self.touch(pool, sha)
            return self._seen[sha]
        if pool is None:
            return None
        async with connection(pool) as conn:
            document = await conn.fetchval(PERSISTED_DOCUMENT, sha)
        if document is not None:
            self._remember(sha, document)
            self.touch(pool, sha)
        return document

    def resolve(self, query: str | None, sha: str | None) -> str | None:
        """Check what can be checked without the database: the hash of a given document, trusted-only mode."""
        if sha is not None and query is not None and sha256_hex(query) != sha:
            raise PersistedQueryError("provided sha does not match query: sha256Hash must be the SHA-256 (hex) of "
                                      "the query text", "PERSISTED_QUERY_HASH_MISMATCH", 400)
        if self.only:
            if sha is None and query is not None:
                sha = sha256_hex(query)
            if sha not in self.manifest:
                raise PersistedQueryError("this server runs only its trusted documents; send the sha256Hash of "
                                          "one of them in extensions.persistedQuery", "PERSISTED_QUERY_REQUIRED", 400)
        return query

    async def document(self, pool: asyncpg.Pool | None, query: str | None,
                       extensions: dict[str, Any] | None) -> tuple[str | None, str | None]:
        """The document a request runs and the hash it named (None: none): its text, checked against the
        hash it names and the trusted-only rule, or the stored document its hash alone names. The one rule
        for every transport (POST, GET, SSE, multipart, WebSockets); PersistedQueryError when refused."""
        sha = requested_hash(extensions)
        found = self.resolve(query, sha)
        if found is None and sha is not None:
            found = await self.lookup(pool, sha)
            if found is None:
                raise PersistedQueryError("PersistedQueryNotFound", "PERSISTED_QUERY_NOT_FOUND")
        return found, sha

    async def register(self, pool: asyncpg.Pool | None, sha: str, document: str, client: Any = None) -> None:
        """Store a document that has passed validation (idempotent). A full table makes room by evicting the
        least recently used documents; one client registers at most PERSISTED_REGISTRATIONS_PER_MINUTE new
        documents a minute (per process), so a flood can neither evict documents in use nor fill the table."""
        if sha in self._seen:
            return  # stored already (this process registered or read it)
        if self.only or pool is None or sha in self.manifest:
            self._remember(sha, document)
            return
        if client is not None and not self._rate.take(client.id):
            self.refused += 1
            return
        try:
            async with connection(pool) as conn:
                await conn.execute(REGISTER, sha, document, MAX_STORED)
        except asyncpg.ReadOnlySQLTransactionError:
            # A read-only database (a standby, default_transaction_read_only): this process keeps the
            # document, so the hash alone works here; the others learn it when it is sent again.
            log.warning("persisted query kept in this process only: the database is read-only")
        self._remember(sha, document)

    def touch(self, pool: asyncpg.Pool | None, sha: str) -> None:
        """A document was used: refresh its last use (at most once a minute per document and process)."""
        now = time.monotonic()
        if pool is None or sha in self.manifest or now - self._touched.get(sha, -TOUCH_SECONDS) < TOUCH_SECONDS:
            return
        if len(self._touched) > LOCAL_CACHE * 4:
            self._touched.clear()
        self._touched[sha] = now

        async def write() -> None:
            try:
                async with pool.acquire(timeout=ACQUIRE_SECONDS) as conn:
                    await conn.execute("UPDATE persisted_queries SET last_used = now() WHERE sha256 = $1", sha)
            except Exception as exc:  # noqa: BLE001 - a missed refresh only ages the document
                log.warning("could not refresh a persisted query's last use: %s", type(exc).__name__)

        task = asyncio.ensure_future(write())
        _pending.add(task)
        task.add_done_callback(_pending.discard)


# A full table evicts its least recently used documents to make room, in the statement that inserts.
REGISTER = """
WITH room AS (
    DELETE FROM persisted_queries WHERE sha256 IN (
        SELECT sha256 FROM persisted_queries ORDER BY last_used, sha256
        LIMIT greatest(0, (SELECT count(*) FROM persisted_queries) - $3 + 1))
    AND NOT EXISTS (SELECT 1 FROM persisted_queries WHERE sha256 = $1)
)
INSERT INTO persisted_queries (sha256, document) VALUES ($1, $2) ON CONFLICT DO NOTHING
"""
TOUCH_SECONDS = 60.0
_pending: set[asyncio.Task] = set()


class PerMinute:
    """At most `rate` takes per key in any minute (a token bucket refilled continuously)."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self._buckets: dict[str, tuple[float, float]] = {}

    def take(self, key: str) -> bool:
        now = time.monotonic()
        tokens, at = self._buckets.get(key, (float(self.rate), now))
        tokens = min(float(self.rate), tokens + (now - at) * self.rate / 60.0)
        if tokens < 1:
            self._buckets[key] = (tokens, now)
            return False
        if len(self._buckets) > 100_000:
            self._buckets.clear()
        self._buckets[key] = (tokens - 1, now)
        return True
