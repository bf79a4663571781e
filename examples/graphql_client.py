"""The one GraphQL call the examples make: POST a query, get its data or exit with the server's message.

Standard library only, so the examples run on a plain Python install. Every example sends the key in
PITH_API_KEY (`pith-graph keys create`: a budget of its own) when it is set, and waits as Retry-After
says when over budget, up to PITH_PATIENCE seconds in all (default 120); a wait longer than that ends the
program at once, saying how long the server asked for.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from typing import Any


class TooCostly(Exception):
    """The server priced the query over its per-operation limit (QUERY_TOO_COSTLY): ask for less at once."""


def headers(accept: str = "application/json") -> dict[str, str]:
    """What every request of the examples carries: the media type wanted, and the key when there is one."""
    found = {"Accept": accept}
    key = os.environ.get("PITH_API_KEY")
    if key:
        found["Authorization"] = f"Bearer {key}"
    return found


def patience() -> float:
    try:
        return float(os.environ.get("PITH_PATIENCE", "120"))
    except ValueError:
        raise SystemExit("error: PITH_PATIENCE: give the seconds the program may wait in all, e.g. 600") from None


def query(url: str, document: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
    """The data of one query. Over the budget (429), waits as Retry-After says (within the patience);
    priced over the limit, raises TooCostly; any other error ends the program with the server's words."""
    sent = {**headers(), "Content-Type": "application/json"}
    allowed = patience()
    waited = 0.0
    while True:
        request = urllib.request.Request(url, data=json.dumps({"query": document, "variables": variables}).encode(),
                                         headers=sent)
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                body = json.load(response)
        except urllib.error.HTTPError as exc:  # a GraphQL error body comes with a 4xx
            if exc.code == 429:
                wait = float(exc.headers.get("Retry-After") or 5)
                if waited + wait <= allowed:
                    time.sleep(wait)
                    waited += wait
                    continue
                said = "; ".join(e.get("message", "") for e in (_json(exc).get("errors") or []))
                raise SystemExit(f"error: refused for now, 429 ({said}); the server asks for {wait:.0f} s more, "
                                 f"beyond this program's patience ({allowed:.0f} s in all, PITH_PATIENCE): run again later, "
                                 "or with a key of your own in PITH_API_KEY") from None
            body = _json(exc)
        except (urllib.error.URLError, OSError) as exc:
            raise SystemExit(f"error: cannot reach {url}: {exc}") from None
        break
    errors = body.get("errors") or []
    if any(e.get("extensions", {}).get("code") == "QUERY_TOO_COSTLY" for e in errors):
        raise TooCostly(errors[0]["message"])
    if errors:
        raise SystemExit("\n".join(f"error: {e['message']}" for e in errors))
    return body["data"]


def _json(exc: urllib.error.HTTPError) -> dict[str, Any]:
    try:
        found = json.load(exc)
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


class Progress:
    """Rows written so far, said on standard error when the program ends before its list does: the CSV on
    standard output holds what was answered, and the exit status (1) and this line say it is not the whole."""

    def __init__(self, total: int | None, what: str) -> None:
        self.done, self.total, self.what = 0, total, what

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        if kind is not None:
            of = f" of {self.total}" if self.total is not None else ""
            print(f"incomplete: {self.done}{of} {self.what} written before the program stopped", file=sys.stderr)
