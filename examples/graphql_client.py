"""The one GraphQL call the examples make: POST a query, get its data or exit with the server's message.

Standard library only, so the examples run on a plain Python install.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


def query(url: str, document: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
    request = urllib.request.Request(url, data=json.dumps({"query": document, "variables": variables}).encode(),
                                     headers={"Content-Type": "application/json", "Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            body = json.load(response)
    except urllib.error.HTTPError as exc:  # a GraphQL error body comes with a 4xx
        body = json.load(exc)
    except (urllib.error.URLError, OSError) as exc:
        raise SystemExit(f"error: cannot reach {url}: {exc}") from None
    if body.get("errors"):
        raise SystemExit("\n".join(f"error: {e['message']}" for e in body["errors"]))
    return body["data"]
