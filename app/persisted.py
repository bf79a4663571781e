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

import hashlib
import json
import re
from collections import OrderedDict
from pathlib import Path
from typing import Any

import asyncpg

HASH = re.compile(r"^[0-9a-f]{64}$")
MAX_STORED = 10_000  # documents kept in the database at most; past that, queries still run, unregistered
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
            return self._seen[sha]
        if pool is None:
            return None
        async with pool.acquire(timeout=5) as conn:
            document = await conn.fetchval("SELECT document FROM persisted_queries WHERE sha256 = $1", sha)
        if document is not None:
            self._remember(sha, document)
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

    async def register(self, pool: asyncpg.Pool | None, sha: str, document: str) -> None:
        """Store a document that has passed validation (idempotent; capped)."""
        self._remember(sha, document)
        if self.only or pool is None or sha in self.manifest:
            return
        async with pool.acquire(timeout=5) as conn:
            await conn.execute(
                "INSERT INTO persisted_queries (sha256, document) SELECT $1, $2 "
                "WHERE (SELECT count(*) FROM persisted_queries) < $3 ON CONFLICT DO NOTHING",
                sha, document, MAX_STORED)
