"""Prometheus metrics, summed over worker processes.

`pith-graph serve` points PROMETHEUS_MULTIPROC_DIR at a fresh folder before any worker starts (the
Prometheus client's multiprocess mode, as gunicorn deployments use it): each process writes its
values there, and /metrics, answered by any worker, reads them all. Without that variable (the app
run in-process, as the tests do) the process's own registry answers.

The family names are the contract (docs/deployment.md lists them, with the queries that read them;
deploy/prometheus/alerts.yml and deploy/grafana/pith-graph.json use them):
  pith_http_requests_total{route,status}        pith_request_duration_seconds{route} (histogram)
  pith_graphql_operations_total{operation,outcome}   pith_statements (histogram, per operation)
  pith_graphql_operation_duration_seconds{operation} (histogram)
  pith_operations_refused_total{reason}         pith_cost_units_total, pith_cost_points_total
  pith_prepared_path_answers_total              pith_db_pool_connections{state} (idle, busy, waiting)
  pith_subscriptions                            pith_change_log_lag_seconds
  pith_imports (the database's import counter, data_version)
  pith_build_info{version,python}               pith_process_* {pid} (memory, CPU, descriptors, start)

Across worker restarts: a dead worker's gauges leave the sums (its files are marked dead at the next
scrape, however it died), its counters and histograms stay (so rates do not jump back), and the cap
on operation names is the server's, shared by every worker through a file beside the values.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import sys
from bisect import bisect_left
from typing import Any, Iterable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# Operation names as clients send them: the server labels at most this many (all workers together, for
# its whole life), the rest are `other`.
MAX_OPERATION_NAMES = 1_000  # PITH_METRICS_OPERATION_NAMES changes it (checked with the other settings)
NAMES_FILE = "operation-names.txt"  # in PROMETHEUS_MULTIPROC_DIR: the names labelled so far, one a line

HTTP_REQUESTS = Counter("pith_http_requests", "HTTP requests answered, by route (the path's template) and status.",
                        ["route", "status"])
DURATION = Histogram("pith_request_duration_seconds", "Time from a request's arrival to its response's end.",
                     ["route"], buckets=(0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
OPERATIONS = Counter("pith_graphql_operations", "GraphQL operations run, by operation name as sent (`anonymous` "
                     "without one) and outcome.", ["operation", "outcome"])
STATEMENTS = Histogram("pith_statements", "SQL statements per GraphQL operation.",
                       buckets=(0, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89))
REFUSED = Counter("pith_operations_refused", "Operations refused or stopped, by reason (rate_limited, timeout, "
                  "too_costly, unauthenticated, unavailable).", ["reason"])
COST_UNITS = Counter("pith_cost_units", "Work units operations did (their extensions.cost.actual).")
COST_POINTS = Counter("pith_cost_points", "Budget points operations were charged.")
PREPARED = Counter("pith_prepared_path_answers", "Operations answered from a plan (one statement, no resolvers).")
POOL = Gauge("pith_db_pool_connections", "Database connections of the pools (primary and replicas), by state.", ["state"],
             multiprocess_mode="livesum")
SUBSCRIPTIONS = Gauge("pith_subscriptions", "Live subscriptions held.", multiprocess_mode="livesum")
CHANGE_LAG = Gauge("pith_change_log_lag_seconds", "Seconds from an import's change-log row to the listener reading "
                   "it (the latest batch).", multiprocess_mode="livemax")
IMPORTS = Gauge("pith_imports", "The database's data version: every import that commits adds one (it never "
                "goes down: read it with `pith_imports - pith_imports offset 1h`, or changes()).",
                multiprocess_mode="livemax")
REPLICA_LAG = Gauge("pith_db_replica_lag_seconds", "How far each read replica's replay is behind the primary "
                    "(0: it replayed all it received; NaN: unreachable), by replica (its index in "
                    "DATABASE_REPLICA_URLS).", ["replica"], multiprocess_mode="livemax")
OPERATION_DURATION = Histogram("pith_graphql_operation_duration_seconds", "Time from an operation's start to its "
                               "result, by operation name (as pith_graphql_operations_total labels it).",
                               ["operation"], buckets=(0.005, 0.025, 0.1, 0.5, 1, 2.5, 10))
BUILD = Gauge("pith_build_info", "1, labelled with the running release and Python version.",
              ["version", "python"], multiprocess_mode="livemax")
PROCESS_MEMORY = Gauge("pith_process_resident_memory_bytes", "Resident memory of each live worker process.",
                       multiprocess_mode="liveall")
PROCESS_CPU = Gauge("pith_process_cpu_seconds", "CPU seconds each live worker process has used (rate() it).",
                    multiprocess_mode="liveall")
PROCESS_FDS = Gauge("pith_process_open_fds", "Open file descriptors of each live worker process.",
                    multiprocess_mode="liveall")
PROCESS_START = Gauge("pith_process_start_time_seconds", "When each live worker process started (Unix time).",
                      multiprocess_mode="liveall")

# Error codes (app.pipeline) that stop an operation, as refusal reasons.
REASONS = {"RATE_LIMITED": "rate_limited", "TIMEOUT": "timeout", "QUERY_TOO_COSTLY": "too_costly",
           "UNAUTHENTICATED": "unauthenticated", "SERVICE_UNAVAILABLE": "unavailable"}
for _reason in REASONS.values():  # every reason shows, at 0 until it happens
    REFUSED.labels(_reason)
_REASON_NAMES = frozenset(REASONS.values())
REQUEST_ERROR_CODES = {"GRAPHQL_PARSE_FAILED", "GRAPHQL_VALIDATION_FAILED", "BAD_USER_INPUT",
                       "OPERATION_RESOLUTION_FAILURE", "OPERATION_NOT_SUPPORTED", "BAD_REQUEST",
                       "QUERY_TOO_COMPLEX", "PAYLOAD_TOO_LARGE", "UNSUPPORTED_MEDIA_TYPE", "PERSISTED_QUERY_NOT_FOUND"}


class _Names:
    """The operation names labelled so far. In multiprocess mode they are kept in a file every worker
    shares (appended under a lock), so the cap holds for the server, not per worker: a worker that
    replaces a killed one starts from the names already labelled."""

    def __init__(self) -> None:
        self.known: set[str] = set()
        self.full = False
        given = os.environ.get("PITH_METRICS_OPERATION_NAMES", "").strip()
        self.cap = int(given) if given.isdigit() else MAX_OPERATION_NAMES

    def label(self, name: str) -> str:
        if name in self.known:
            return name
        if self.full:
            return "other"
        folder = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        if not folder:
            if len(self.known) >= self.cap:
                self.full = True
                return "other"
            self.known.add(name)
            return name
        import fcntl

        with open(os.path.join(folder, NAMES_FILE), "a+", encoding="utf-8") as shared:
            fcntl.flock(shared, fcntl.LOCK_EX)
            shared.seek(0)
            self.known.update(shared.read().splitlines())
            if name in self.known:
                return name
            if len(self.known) >= self.cap:
                self.full = True
                return "other"
            shared.write(name + "\n")
            self.known.add(name)
        return name


_names = _Names()


def operation_label(name: str | None) -> str:
    if not name:
        return "anonymous"
    return _names.label(re.sub(r"\s", " ", name[:100]))


CANCELLED = "CANCELLED"  # (no error's code: an operation stopped unanswered, app.pipeline.RequestPipeline)


def outcome(codes: Iterable[str | None]) -> str:
    """ok, a refusal reason, invalid (the request was refused as written), error (field errors), or cancelled
    (stopped before its answer: its client left, or the server stopped it)."""
    codes = set(codes)
    if not codes:
        return "ok"
    if CANCELLED in codes:
        return "cancelled"
    for code, reason in REASONS.items():
        if code in codes:
            return reason
    return "invalid" if codes <= REQUEST_ERROR_CODES else "error"


class _Tally:
    """What requests add to the per-request families, kept in plain dicts and written to Prometheus's
    values in one go: at the next turn of the event loop when this process has no other request in
    flight, else within COALESCE_SECONDS (one write per series however many requests it covers), and
    always before this process's exposition. A write in multiprocess mode is a locked mmap write with a
    pid check (eleven of them per answer), and labelling a series builds its label strings under a lock:
    done for each request, the counters of a small answer took about a tenth of its CPU. A process with
    nothing else in flight has written an answer's counts before it can read another request, so a
    scrape that follows an answer sees it; under load a scrape may miss the last COALESCE_SECONDS."""

    def __init__(self) -> None:
        self.counts: dict[Any, float] = {}  # a counter's series -> what to add
        self.observed: dict[Any, list[float]] = {}  # a histogram's series -> [sum, count per bucket]
        self.series: dict[tuple[Any, tuple[str, ...]], Any] = {}
        self.scheduled = False
        self.in_flight: Any = None  # uvicorn's set of this process's request tasks, once a connection is made

    def of(self, metric: Any, labels: tuple[str, ...] = ()) -> Any:
        key = (metric, labels)
        found = self.series.get(key)
        if found is None:
            if len(self.series) > 50_000:  # bounded: operation names are capped, routes are templates
                self.series.clear()
            found = self.series[key] = metric.labels(*labels) if labels else metric
        return found

    def add(self, series: Any, amount: float = 1) -> None:
        self.counts[series] = self.counts.get(series, 0) + amount
        if not self.scheduled:
            self._schedule()

    def observe(self, series: Any, value: float) -> None:
        row = self.observed.get(series)
        if row is None:
            row = self.observed[series] = [0.0] * (1 + len(series._upper_bounds))
        row[0] += value
        row[1 + bisect_left(series._upper_bounds, value)] += 1  # the first bound >= value, as observe()
        if not self.scheduled:
            self._schedule()

    def _schedule(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a command, a synchronous caller): written at once
            self.flush()
            return
        self.scheduled = True
        if self.in_flight is not None and len(self.in_flight) > 1:  # others in flight: written with theirs
            loop.call_later(COALESCE_SECONDS, self.flush)
        else:
            loop.call_soon(self.flush)

    def flush(self) -> None:
        self.scheduled = False
        counts, observed = self.counts, self.observed
        if not counts and not observed:
            return
        self.counts, self.observed = {}, {}
        for series, amount in counts.items():
            series.inc(amount)
        for series, row in observed.items():
            series._sum.inc(row[0])
            for i, n in enumerate(row[1:]):
                if n:
                    series._buckets[i].inc(n)


COALESCE_SECONDS = 0.05
_tally = _Tally()


def watch_requests(tasks: Any) -> None:
    """The server's set of request tasks in flight (uvicorn's ServerState.tasks), read by the tally."""
    _tally.in_flight = tasks


def record_operation(name: str | None, codes: Iterable[str | None], statements: int, units: int | None,
                     points: int | None, seconds: float | None = None) -> str:
    """Count one operation (every transport, plans too); its outcome, for the access log."""
    result = outcome(codes) if codes else "ok"
    label = operation_label(name)
    tally = _tally
    tally.add(tally.of(OPERATIONS, (label, result)))
    if seconds is not None:
        tally.observe(tally.of(OPERATION_DURATION, (label,)), seconds)
    tally.observe(STATEMENTS, statements)
    if result in _REASON_NAMES:
        tally.add(tally.of(REFUSED, (result,)))
    if units:
        tally.add(COST_UNITS, units)
    if points:
        tally.add(COST_POINTS, points)
    return result


def record_request(route: str, status: int, seconds: float) -> None:
    tally = _tally
    tally.add(tally.of(HTTP_REQUESTS, (route, str(status))))
    tally.observe(tally.of(DURATION, (route,)), seconds)


def prepared_answer() -> None:
    """One operation answered from a plan (app.graphql.plan)."""
    _tally.add(PREPARED)


def sample_pool(pools: Iterable[Any], waiting: int) -> None:
    """The connections of this process's pools (the primary's and any replicas'), by state."""
    pools = [p for p in pools if p is not None]
    size = sum(p.get_size() for p in pools)
    idle = sum(p.get_idle_size() for p in pools)
    POOL.labels("idle").set(idle)
    POOL.labels("busy").set(size - idle)
    POOL.labels("waiting").set(waiting)


def refused_unavailable() -> None:
    """A request answered 503 outside an operation's own accounting (the database failed under it)."""
    _tally.add(_tally.of(REFUSED, ("unavailable",)))


_LIVE_FILE = re.compile(r"gauge_live\w*_(\d+)\.db$")


def forget_dead_processes(folder: str) -> list[int]:
    """Mark dead the processes whose live gauges are still in the folder (a worker killed with -9, or
    that crashed, never marked itself): their gauges leave the sums. Counters stay."""
    import psutil
    from prometheus_client import multiprocess

    dead = set()
    for name in os.listdir(folder):
        found = _LIVE_FILE.match(name)
        if found and not psutil.pid_exists(int(found.group(1))):
            dead.add(int(found.group(1)))
    for pid in dead:
        # Another worker's scrape may forget it first (both listed its files; one removed them).
        with contextlib.suppress(FileNotFoundError):
            multiprocess.mark_process_dead(pid, folder)
    return sorted(dead)


def sample_process() -> None:
    """This process's own figures (multiprocess mode has no process collector: these are per pid)."""
    import psutil

    me = psutil.Process()
    with me.oneshot():
        PROCESS_MEMORY.set(me.memory_info().rss)
        cpu = me.cpu_times()
        PROCESS_CPU.set(cpu.user + cpu.system)
        PROCESS_FDS.set(me.num_fds())
        PROCESS_START.set(me.create_time())


def announce_build() -> None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        release = version("pith-graph")
    except PackageNotFoundError:  # pragma: no cover - run from a source tree that is not installed
        release = "unknown"
    BUILD.labels(release, ".".join(map(str, sys.version_info[:3]))).set(1)


def exposition() -> tuple[bytes, str]:
    """The text exposition of every process's metrics (one process's without multiprocess mode)."""
    _tally.flush()
    folder = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if folder:
        from prometheus_client import multiprocess

        forget_dead_processes(folder)
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry), CONTENT_TYPE_LATEST
    from prometheus_client import REGISTRY

    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST


def process_exits() -> None:
    """A process stopping: its live gauges leave the sums (counters and histograms stay)."""
    _tally.flush()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(os.getpid())
