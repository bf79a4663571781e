"""The one GraphQL call the examples make: POST a query, get its data or exit with the server's message.

Standard library only, so the examples run on a plain Python install.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any


class TooCostly(Exception):
    """The server priced the query over its per-operation limit (QUERY_TOO_COSTLY): ask for less at once."""


def query(url: str, document: str, variables: dict[str, Any] | None = None, *, key: str | None = None,
          patience: float = 120.0) -> dict[str, Any]:
    """The data of one query. Over the budget (429), waits as Retry-After says (within `patience` seconds);
    priced over the limit, raises TooCostly; any other error ends the program with the server's words."""
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    waited = 0.0
    while True:
        request = urllib.request.Request(url, data=json.dumps({"query": document, "variables": variables}).encode(),
                                         headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                body = json.load(response)
        except urllib.error.HTTPError as exc:  # a GraphQL error body comes with a 4xx
            if exc.code == 429 and waited < patience:
                wait = min(float(exc.headers.get("Retry-After") or 5), patience - waited)
                time.sleep(wait)
                waited += wait
                continue
            body = json.load(exc)
        except (urllib.error.URLError, OSError) as exc:
            raise SystemExit(f"error: cannot reach {url}: {exc}") from None
        break
    errors = body.get("errors") or []
    if any(e.get("extensions", {}).get("code") == "QUERY_TOO_COSTLY" for e in errors):
        raise TooCostly(errors[0]["message"])
    if errors:
        raise SystemExit("\n".join(f"error: {e['message']}" for e in errors))
    return body["data"]
