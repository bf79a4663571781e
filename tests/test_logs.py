"""Logs: JSON lines with PITH_LOG_FORMAT=json, each with the request id; no credentials."""

from __future__ import annotations

import json


def test_json_logs_carry_the_request_id(database_url):
    import httpx

    from tests.conftest import LiveServer

    server = LiveServer(database_url, env={"PITH_LOG_FORMAT": "json"})
    try:
        response = httpx.get(server.base + "/paper/2402.15627/citation-record.json", timeout=10)
        rid = response.headers["x-request-id"]
    finally:
        server.stop()
    err = server.logs().encode()
    lines = [line for line in err.decode().splitlines() if line.strip()]
    entries = [json.loads(line) for line in lines if line.startswith("{")]
    assert entries, err
    assert all(line.startswith("{") for line in lines ), lines
    access = [e for e in entries if e["logger"] == "pith.access" and e["request_id"] == rid]
    assert access and "/paper/2402.15627/citation-record.json 200" in access[0]["message"]
    assert database_url not in err.decode()
