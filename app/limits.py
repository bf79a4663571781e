"""Every limit the service enforces, in one place: what a request may ask, how much work it may cost,
how long it may run, and what one client may hold. Modules import their limits from here; the README's
"Limits" table is this module read aloud.
"""

from __future__ import annotations

from typing import Final

# --- what one request may ask ---------------------------------------------------------------------
MAX_BODY_BYTES: Final = 100_000
MAX_VARIABLES_BYTES: Final = 20_000
# A WebSocket message carries what an HTTP body does, in the protocol's envelope ({"id", "type", "payload"}):
# larger is closed 1009 (message too big) by uvicorn as it arrives, never read whole.
MAX_WS_MESSAGE_BYTES: Final = MAX_BODY_BYTES + 1_000
MAX_QUERY_STRING_BYTES: Final = 16_000  # longer URLs are refused by many proxies anyway
# Request line plus headers; more is 431 before the rest is read (a GET may still carry a 16,000-byte
# query string and its headers).
MAX_HEADER_BYTES: Final = 24_576
MAX_DEPTH: Final = 15
MAX_TOTAL_DEPTH: Final = 20  # introspection included; GraphiQL's introspection query is 15 deep
MAX_ALIASES: Final = 30
MAX_TOKENS: Final = 5_000
# A document's shape before validation (app/shape.py): fields of one definition with its fragments expanded,
# and a bound on the field comparisons its validation makes. The worst document within them validates in
# milliseconds (bench/validation.py).
MAX_FIELDS: Final = 1_000
MAX_COMPARISONS: Final = 15_000
# Validation stops at this many errors ("Too many validation errors"): each costs a lookup of its place in the
# text and a line of the answer, and a document of distinct unknown fields is all errors.
MAX_VALIDATION_ERRORS: Final = 10
# A document this long or longer, not in the caches, is parsed and validated in a thread of the process's own
# (app.cost.read_off_loop), not on the event loop: ~1 ms of reading at the shortest, 30 ms for 12 kB.
OFF_LOOP_CHARS: Final = 2_000
# The reader thread is the process's, whoever sends: at most READER_SHARE of its time reading (it rests in
# proportion to what it read, so the event loop keeps the rest of the interpreter), and READER_WAITING long documents
# in it or queued for it. Another waits for a place, its text alone held, at most READER_WAIT_SECONDS, then is
# refused unread (503, Retry-After). Each client is bounded by its own budget; these bound them all together (a
# hundred addresses, each within its own, once held every worker's reader: seconds of queue, 560 MB of documents).
READER_SHARE: Final = 0.5
READER_WAITING: Final = 4
READER_WAIT_SECONDS: Final = 1.0
MAX_IDS: Final = 100  # papers(arxivIds:), nodes(ids:)
MAX_FIRST: Final = 100  # first / last of every connection
MAX_CURSOR_LENGTH: Final = 400
# The bounded arguments: (default when not given, lowest, highest), read by the schema (defaults,
# descriptions, checks), the prices (app/cost.py) and the REST exports (app/web/routes.py, snake_case).
ARGUMENTS: Final = {"first": (None, 1, MAX_FIRST), "last": (None, 1, MAX_FIRST), "perPaper": (10, 1, 100),
                    "depth": (2, 1, 3), "maxChanges": (1_000, 1, 10_000)}
MAX_NEIGHBOURHOOD_PAPERS: Final = 10_000


def argument_default(name: str) -> int:
    """The value a bounded argument takes when it is not given (ARGUMENTS)."""
    value = ARGUMENTS[name][0]
    assert value is not None, name
    return value


def out_of_range(name: str, value: object) -> str | None:
    """Why a bounded argument's value is refused (None: within its range), as every entry says it."""
    _, low, high = ARGUMENTS[name]
    if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high:
        return None
    return f"{name}: {value!r} is out of range; allowed {low} to {high}"

# --- how much work one operation may cost (app/cost.py) -----------------------------------------
MAX_NODES: Final = 500_000  # GitHub's rule: list nodes a query may return, multiplied out
# Work units: one unit is about one object completed in a response (~20-40 us on the reference machine,
# bench/calibrate.py). The largest admitted operation takes at most ~2 s there.
MAX_COST: Final = 50_000
POINT_UNITS: Final = 100  # a rate-limit point is 100 work units (at least 1 point per operation)

# --- how long, and how many at once --------------------------------------------------------------
DEFAULT_REQUEST_TIMEOUT_SECONDS: Final = 10.0
RETRY_AFTER_SECONDS: Final = "5"  # what a 503 asks a client to wait
HEAD_TIMEOUT_SECONDS: Final = 10.0  # a request's line and headers, from its first byte (or the connection's opening)
BODY_TIMEOUT_SECONDS: Final = 10.0  # its body, from the end of its headers (100 kB at 10 kB/s)
WORKER_HEALTHCHECK_SECONDS: Final = 30  # a worker silent this long is replaced (longer than any deadline)
HEAVY_COST: Final = 5_000  # operations priced above this are heavy: they take a heavy slot
# Operations priced at most this are light: every other one's turns of the event loop wait while a light one is in
# flight in its process (app.governor.LightFirst). A lookup is priced a few units, a page of 100 a few hundred.
LIGHT_COST: Final = 500
# Operations priced over LIGHT_COST running at once in a process (heavy ones among them); the others wait their turn,
# holding no connection, within their deadline (one holding a connection already does not wait:
# app.pipeline.admit). With forty clients each within its budget looping a paper's citers
# and what each cites (~900 units), a lookup waited a round of every one in flight at each of its steps (for a
# connection too): its p99 94x its unloaded p99.
COSTLY_SLOTS: Final = 2
HEAVY_PER_CLIENT: Final = 1  # heavy operations one client may run at once (the rest wait their turn)
HEAVY_SLOTS: Final = 2  # heavy operations at once per process, at most by default (app.settings.heavy_slots_for)
# Python work one operation does between turns of the event loop (completing a long list, converting
# thousands of rows): every other request of the process waits at most about this long per turn. (Through nginx,
# four funded keys looping heavy operations, 60 s a run: a light lookup's p99 at 2.51-2.74x its unloaded p99 with
# 2 ms, 3.11-3.61x with 5 ms, 3.23x with 1 ms; the heavy operations done the same.)
STRETCH_SECONDS: Final = 0.002
# A heavy operation's turn of the event loop waits at most this long for the process's light operations in
# flight to end (app.pipeline.LightFirst): lookups first, heavy work still a fifth of a busy loop.
LIGHT_FIRST_SECONDS: Final = 0.02
MEMORY_BOUND_MB: Final = 800  # the documented bound on a process's peak RSS under hostile load (bench/governance.py)

# --- what one client may hold --------------------------------------------------------------------
MAX_SUBSCRIPTIONS_PER_CONNECTION: Final = 20
MAX_SUBSCRIBERS: Final = 10_000  # per process
MAX_WEBSOCKETS_PER_CLIENT: Final = 50
MAX_SUBSCRIPTIONS_PER_CLIENT: Final = 200
PERSISTED_MAX_STORED: Final = 10_000  # documents kept; the least recently used go first
PERSISTED_REGISTRATIONS_PER_MINUTE: Final = 60  # new documents one client may register
DEFAULT_ANONYMOUS_POINTS_PER_HOUR: Final = 5_000  # on in production (PITH_ENV=production)
# Requests one client may send a second, per process (app.governor.Pace), on in production; bursts of
# twice as many. Cost budgets bound the work; this bounds the requests, refused ones included.
DEFAULT_REQUESTS_PER_SECOND: Final = 20
# What a request's token of that pace buys of its document's reading (parse and validation): each such stretch
# more costs a token more (app.governor.Governor.pace_reading).
READING_SECONDS_PER_REQUEST: Final = 0.001
# A streamed list (/paper/{id}/inbound.ndjson ...) must be read within the deadline plus a second per this many
# rows, or it is cut: a reader that stops reading cannot hold its heavy slot and transaction for long.
LIST_ROWS_PER_SECOND: Final = 1_000
# ... and a reader that takes nothing for this long (its socket's buffers full) is cut at once: a stalled download
# held its slot and transaction until that whole bound (29 s for a hub's list), and other clients' heavy work waited.
LIST_STALL_SECONDS: Final = 5.0
