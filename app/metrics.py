"""Prometheus metrics, summed over worker processes.

`pith-graph serve` points PROMETHEUS_MULTIPROC_DIR at a fresh folder before any worker starts (the
Prometheus client's multiprocess mode, as gunicorn deployments use it): each process writes its
values there, and /metrics, answered by any worker, reads them all. Without that variable (the app
run in-process, as the tests do) the process's own registry answers.

The family names are the contract (docs/deployment.md lists them):
  pith_http_requests_total{route,status}        pith_request_duration_seconds{route} (histogram)
  pith_graphql_operations_total{operation,outcome}   pith_statements (histogram, per operation)
  pith_operations_refused_total{reason}         pith_cost_units_total, pith_cost_points_total
  pith_prepared_path_answers_total              pith_db_pool_connections{state} (idle, busy, waiting)
  pith_subscriptions                            pith_change_log_lag_seconds
  pith_imports (the database's import counter, data_version)
"""

from __future__ import annotations

import os
from typing import Any, Iterable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# Operation names as clients send them: a process labels at most this many, the rest are `other`.
MAX_OPERATION_NAMES = 1_000
_names: set[str] = set()

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
PREPARED = Counter("pith_prepared_path_answers", "Operations the prepared path answered (one statement, no pipeline).")
POOL = Gauge("pith_db_pool_connections", "Database connections of the pools (primary and replicas), by state.", ["state"],
             multiprocess_mode="livesum")
SUBSCRIPTIONS = Gauge("pith_subscriptions", "Live subscriptions held.", multiprocess_mode="livesum")
CHANGE_LAG = Gauge("pith_change_log_lag_seconds", "Seconds from an import's change-log row to the listener reading "
                   "it (the latest batch).", multiprocess_mode="livemax")
IMPORTS = Gauge("pith_imports", "The database's data version: every import that commits adds one.",
                multiprocess_mode="max")

# Error codes (app.pipeline) that stop an operation, as refusal reasons.
REASONS = {"RATE_LIMITED": "rate_limited", "TIMEOUT": "timeout", "QUERY_TOO_COSTLY": "too_costly",
           "UNAUTHENTICATED": "unauthenticated", "SERVICE_UNAVAILABLE": "unavailable"}
for _reason in REASONS.values():  # every reason shows, at 0 until it happens
    REFUSED.labels(_reason)
REQUEST_ERROR_CODES = {"GRAPHQL_PARSE_FAILED", "GRAPHQL_VALIDATION_FAILED", "BAD_USER_INPUT",
                       "OPERATION_RESOLUTION_FAILURE", "OPERATION_NOT_SUPPORTED", "BAD_REQUEST"}


def operation_label(name: str | None) -> str:
    if not name:
        return "anonymous"
    name = name[:100]
    if name in _names:
        return name
    if len(_names) >= MAX_OPERATION_NAMES:
        return "other"
    _names.add(name)
    return name


def outcome(codes: Iterable[str | None]) -> str:
    """ok, a refusal reason, invalid (the request was refused as written), or error (field errors)."""
    codes = set(codes)
    if not codes:
        return "ok"
    for code, reason in REASONS.items():
        if code in codes:
            return reason
    return "invalid" if codes <= REQUEST_ERROR_CODES else "error"


def record_operation(name: str | None, codes: Iterable[str | None], statements: int, units: int | None,
                     points: int | None) -> str:
    """Count one operation (every transport, the prepared path too); its outcome, for the access log."""
    result = outcome(codes)
    OPERATIONS.labels(operation_label(name), result).inc()
    STATEMENTS.observe(statements)
    if result in REASONS.values():
        REFUSED.labels(result).inc()
    if units:
        COST_UNITS.inc(units)
    if points:
        COST_POINTS.inc(points)
    return result


def record_request(route: str, status: int, seconds: float) -> None:
    HTTP_REQUESTS.labels(route, str(status)).inc()
    DURATION.labels(route).observe(seconds)


def sample_pool(pools: Iterable[Any], waiting: int) -> None:
    """The connections of this process's pools (the primary's and any replicas'), by state."""
    pools = [p for p in pools if p is not None]
    size = sum(p.get_size() for p in pools)
    idle = sum(p.get_idle_size() for p in pools)
    POOL.labels("idle").set(idle)
    POOL.labels("busy").set(size - idle)
    POOL.labels("waiting").set(waiting)


def exposition() -> tuple[bytes, str]:
    """The text exposition of every process's metrics (one process's without multiprocess mode)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry), CONTENT_TYPE_LATEST
    from prometheus_client import REGISTRY

    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST


def process_exits() -> None:
    """A process stopping: its live gauges leave the sums (counters and histograms stay)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(os.getpid())
