"""One client identity, computed once, by one rule (the peer, or past PITH_TRUSTED_PROXIES the rightmost
untrusted hop of the one configured header), used alike by budgets, WebSocket quotas, logs and the operator
check; and the documented nginx block clears what clients send in Forwarded / X-Forwarded-For, checked
with `nginx -t` and by requests through it.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import httpx
import pytest
import websockets

from app.governor import client_address, parse_networks
from bench.proxy import nginx_binary, nginx_config
from tests.conftest import UNSPENDABLE, LiveServer, free_port

ASYNC = pytest.mark.asyncio(loop_scope="session")

QUERY = '{ paper(arxivId: "2402.15627") { arxivId } }'


def remaining(response: httpx.Response) -> int:
    return int(re.search(r"r=(\d+)", response.headers["ratelimit"]).group(1))


def test_the_rule_reads_one_header_from_its_right_end():
    trusted = parse_networks(["10.0.0.0/8", "127.0.0.1"])
    xff = [(b"x-forwarded-for", b"192.0.2.1, 198.51.100.7, 10.1.1.1")]
    assert client_address("127.0.0.1", xff, trusted) == "198.51.100.7"  # the rightmost untrusted hop
    assert client_address("203.0.113.5", xff, trusted) == "203.0.113.5"  # an untrusted peer: its headers are not read
    spoofed = [(b"forwarded", b"for=192.0.2.1"), (b"x-forwarded-for", b"198.51.100.7")]
    assert client_address("127.0.0.1", spoofed, trusted) == "198.51.100.7"  # Forwarded is not the configured header
    assert client_address("127.0.0.1", spoofed, trusted, b"forwarded") == "192.0.2.1"
    two_lines = [(b"x-forwarded-for", b"192.0.2.1"), (b"x-forwarded-for", b"198.51.100.8")]
    assert client_address("127.0.0.1", two_lines, trusted) == "198.51.100.8"  # lines join, in order
    assert client_address("127.0.0.1", [(b"x-forwarded-for", b"junk, 10.2.2.2")], trusted) == "10.2.2.2"


@pytest.fixture(scope="module")
def behind_proxy(database_url):
    server = LiveServer(database_url, env={"PITH_ENV": "production", "PITH_TRUSTED_PROXIES": "127.0.0.1",
                                           "PITH_ANONYMOUS_POINTS_PER_HOUR": UNSPENDABLE,
                                           "PITH_WEBSOCKETS_PER_CLIENT": "1"})
    yield server
    server.stop()


@ASYNC
async def test_budgets_logs_and_the_operator_check_see_the_same_client(behind_proxy):
    base = behind_proxy.base
    async with httpx.AsyncClient(base_url=base, timeout=10) as client:
        a = {"x-forwarded-for": "192.0.2.50, 198.51.100.7"}
        first = await client.post("/graphql", json={"query": QUERY}, headers=a)
        assert first.status_code == 200
        # The same client, whatever it writes left of the proxy's hop or in another header.
        again = await client.post("/graphql", json={"query": QUERY},
                                  headers={"x-forwarded-for": "10.9.9.9, 198.51.100.7", "forwarded": "for=192.0.2.1"})
        assert remaining(again) < remaining(first)
        other = await client.post("/graphql", json={"query": QUERY}, headers={"x-forwarded-for": "198.51.100.8"})
        assert remaining(other) > remaining(again)
        # The operator check: loopback only if the client is; a client through the proxy is not.
        proxied = (await client.get("/readyz", headers=a)).json()
        assert "pool" not in proxied, proxied
        assert (await client.get("/metrics", headers=a)).status_code == 403
        spoof = (await client.get("/readyz", headers={"x-forwarded-for": "127.0.0.1, 198.51.100.7"})).json()
        assert "pool" not in spoof
        assert "pool" in (await client.get("/readyz")).json()  # loopback itself, no proxy hop
    lines = [line for line in behind_proxy.logs().splitlines() if "pith.access" in line and "POST /graphql" in line]
    assert any("client=198.51.100.7" in line for line in lines) and not any("192.0.2" in line for line in lines), lines


@ASYNC
async def test_an_ipv6_client_is_its_64_whatever_address_of_it_it_sends_from(behind_proxy):
    """Every address of an IPv6 /64 is one anonymous client (budget, pace, slots, quotas); the next /64 another;
    an IPv4-mapped address its IPv4 one. The access line still names the address itself."""
    from app.governor import anonymous_network

    assert anonymous_network("2001:db8:7:1::1") == anonymous_network("2001:db8:7:1:ffff:ffff:ffff:ffff")
    assert anonymous_network("2001:db8:7:1::1") != anonymous_network("2001:db8:7:2::1")
    assert anonymous_network("::ffff:198.51.100.9") == anonymous_network("198.51.100.9") == "198.51.100.9"
    async with httpx.AsyncClient(base_url=behind_proxy.base, timeout=10) as client:
        async def left(address: str) -> int:
            answer = await client.post("/graphql", json={"query": QUERY}, headers={"x-forwarded-for": address})
            assert answer.status_code == 200, answer.text[:300]
            return remaining(answer)

        first = await left("2001:db8:7:1::1")
        assert await left("2001:db8:7:1:a:b:c:d") < first  # another address of the same /64: the same hour
        assert await left("2001:db8:7:1:ffff::2") < first
        assert await left("2001:db8:7:2::1") > first - 1  # the next /64: an hour of its own
    lines = [line for line in behind_proxy.logs().splitlines() if "pith.access" in line]
    assert any("client=2001:db8:7:1:a:b:c:d" in line for line in lines), lines[-5:]


@ASYNC
async def test_websocket_quotas_follow_the_same_client(behind_proxy):
    url = behind_proxy.base.replace("http://", "ws://") + "/graphql"

    async def open_as(headers: dict) -> websockets.ClientConnection:
        ws = await websockets.connect(url, subprotocols=["graphql-transport-ws"], additional_headers=headers)
        try:
            await ws.send(json.dumps({"type": "connection_init"}))
        except websockets.ConnectionClosed:
            pass  # refused at once: recv() tells why
        return ws

    held = await open_as({"x-forwarded-for": "198.51.100.20"})
    try:
        assert json.loads(await held.recv())["type"] == "connection_ack"
        refused = await open_as({"x-forwarded-for": "192.0.2.9, 198.51.100.20", "forwarded": "for=192.0.2.10"})
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await refused.recv()
        assert closed.value.rcvd.code == 4429
        other = await open_as({"x-forwarded-for": "198.51.100.21"})
        assert json.loads(await other.recv())["type"] == "connection_ack"
        await other.close()
    finally:
        await held.close()


def nginx() -> str:
    found = nginx_binary()
    if not found:
        pytest.skip("needs nginx (apt-get install nginx; .ci/run does) to check the documented proxy block")
    return str(found)


async def until_up(client: httpx.AsyncClient) -> None:
    """Until the proxy in front answers (it starts in the background)."""
    for _ in range(50):
        try:
            await client.get("/healthz")
            return
        except httpx.TransportError:
            await asyncio.sleep(0.1)


def test_the_documented_nginx_block_passes_nginx_t(tmp_path):
    binary = nginx()
    config = nginx_config(tmp_path, 8000, free_port())
    checked = subprocess.run([binary, "-t", "-c", str(config), "-p", str(tmp_path), "-e", str(tmp_path / "e.log")],
                             capture_output=True, text=True, timeout=30)
    assert checked.returncode == 0, checked.stderr
    assert "syntax is ok" in checked.stderr and "test is successful" in checked.stderr


@ASYNC
async def test_through_the_documented_nginx_a_client_cannot_name_its_own_address(database_url):
    binary = nginx()
    folder = Path(tempfile.mkdtemp(prefix="pith-nginx-"))
    folder.chmod(0o755)  # nginx's workers run as another user
    # A budget no other test's spending from 127.0.0.1 this hour (kept in the shared database) can use up.
    server = LiveServer(database_url, env={"PITH_ENV": "production", "PITH_TRUSTED_PROXIES": "127.0.0.1",
                                           "PITH_ANONYMOUS_POINTS_PER_HOUR": UNSPENDABLE})
    port = free_port()
    proxy = subprocess.Popen([binary, "-c", str(nginx_config(folder, server.port, port)), "-p", str(folder),
                              "-e", str(folder / "e.log")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            await until_up(client)
            plain = await client.post("/graphql", json={"query": QUERY})
            assert plain.status_code == 200, plain.text
            for spoof in ({"forwarded": "for=192.0.2.1"}, {"x-forwarded-for": "192.0.2.2"},
                          {"forwarded": "for=192.0.2.3", "x-forwarded-for": "192.0.2.3, 192.0.2.4"}):
                answer = await client.post("/graphql", json={"query": QUERY}, headers=spoof)
                assert answer.status_code == 200
                assert remaining(answer) < remaining(plain)  # the same budget: the spoofed address is not believed
            big = await client.post("/graphql", content=json.dumps({"query": QUERY}) + " " * 90_000,
                                    headers={"content-type": "application/json"})
            assert big.status_code == 200, big.text[:300]  # a 90 kB body passes the proxy and the server
            assert (await client.get("/metrics")).status_code == 403
        lines = [line for line in server.logs().splitlines() if "pith.access" in line and "/graphql" in line]
        assert lines and not any("192.0.2." in line for line in lines), lines
    finally:
        proxy.terminate()
        proxy.wait(10)
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)


@ASYNC
async def test_the_documented_nginx_refuses_in_the_apis_shape_a_page_can_read(database_url):
    """nginx's own refusals behind the documented block of what a page can send (a body past its limit, a head past
    its buffers, limit_req's 429) are JSON in the GraphQL error shape with a code and a request id,
    a 429 with Retry-After, and the CORS fields for a page of an origin the block lists (the server's
    PITH_CORS_ORIGINS): a page reads why it was refused, as it reads the server's own refusals."""
    binary = nginx()
    origin = "https://app.example.org"  # the origin the documented block lists
    folder = Path(tempfile.mkdtemp(prefix="pith-nginx-"))
    folder.chmod(0o755)
    server = LiveServer(database_url, env={"PITH_TRUSTED_PROXIES": "127.0.0.1", "PITH_CORS_ORIGINS": origin,
                                           "PITH_ANONYMOUS_POINTS_PER_HOUR": UNSPENDABLE})
    port = free_port()
    proxy = subprocess.Popen([binary, "-c", str(nginx_config(folder, server.port, port)), "-p", str(folder),
                              "-e", str(folder / "e.log")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def cors(answer: httpx.Response) -> dict[str, str]:
        return {k: v for k, v in answer.headers.items() if k.startswith("access-control-")}

    # The CORS fields of the server's own refusals (a head past its bound, straight to it): nginx's must be these.
    own = httpx.get(server.base + "/graphql", headers={"origin": origin, "x-big": "a" * 30_000}, timeout=10)
    assert own.status_code == 431 and cors(own)["access-control-allow-origin"] == origin, own.headers

    def refused(answer: httpx.Response, status: int, code: str) -> None:
        assert answer.status_code == status, (answer.status_code, answer.text[:300])
        assert answer.headers["content-type"].startswith("application/json"), answer.headers
        assert cors(answer) == cors(own), (answer.headers, own.headers)
        (error,) = answer.json()["errors"]
        assert error["extensions"]["code"] == code and error["extensions"]["requestId"], error

    try:
        base = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient(base_url=base, timeout=10, headers={"origin": origin},
                                     limits=httpx.Limits(max_connections=64)) as client:
            await until_up(client)
            refused(await client.post("/graphql", content=json.dumps({"query": QUERY}) + " " * 150_000,
                                      headers={"content-type": "application/json"}), 413, "PAYLOAD_TOO_LARGE")
            refused(await client.get("/graphql", headers={"x-big": "a" * 30_000}), 431,
                    "REQUEST_HEADER_FIELDS_TOO_LARGE")

        async def raw_answer(request: bytes) -> bytes:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            try:
                writer.write(request)
                return await asyncio.wait_for(reader.read(), 10)
            finally:
                writer.close()

        # What no page sends, nginx refuses in its own words, but as a 400, never a failure of its own.
        for request in (b"GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n", b"G@T /graphql HTTP/1.1\r\nHost: x\r\n\r\n",
                        b"GET graphql HTTP/1.1\r\nHost: x\r\n\r\n"):
            raw = await raw_answer(request)
            assert raw.startswith(b"HTTP/1.1 400"), (request, raw[:400])
        # A client of HTTP/1.0 names no host, and is answered: the proxy names one to the server.
        raw = await raw_answer(b"GET /graphql?query=%7B__typename%7D HTTP/1.0\r\n\r\n")
        assert raw.startswith(b"HTTP/1.1 200") and b'"__typename":"Query"' in raw, raw[:600]
        # Last (its address is then limited for a while): limit_req's 429.
        async with httpx.AsyncClient(base_url=base, timeout=10, headers={"origin": origin},
                                     limits=httpx.Limits(max_connections=64)) as client:
            burst = await asyncio.gather(*(client.get("/healthz") for _ in range(300)))
        limited = [answer for answer in burst if answer.status_code == 429]
        assert limited, [answer.status_code for answer in burst]
        for answer in limited:
            refused(answer, 429, "RATE_LIMITED")
            assert answer.headers["retry-after"] == "1", answer.headers
    finally:
        proxy.terminate()
        proxy.wait(10)
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def small_budget(database_url):
    server = LiveServer(database_url, env={"PITH_ENV": "production", "PITH_TRUSTED_PROXIES": "127.0.0.1",
                                           "PITH_ANONYMOUS_POINTS_PER_HOUR": "12"})
    yield server
    server.stop()


@ASYNC
async def test_made_up_keys_cost_their_address_and_end_in_429(small_budget):
    """Each unknown key is a point of its address's anonymous hour: a flood of made-up keys gets 401s until
    that hour is spent, then 429 with Retry-After (on GraphQL and on the pages alike), and the address's
    own anonymous requests are then refused too; another address is not affected."""
    import secrets

    address, other = "198.51.100.77", "198.51.100.78"
    statuses = []
    async with httpx.AsyncClient(base_url=small_budget.base, timeout=30) as client:
        for n in range(20):
            path = "/graphql" if n % 2 else "/paper/2402.15627/citation-record.json"
            headers = {"x-forwarded-for": address, "authorization": f"Bearer pith_{secrets.token_hex(16)}"}
            r = (await client.post(path, json={"query": "{ __typename }"}, headers=headers) if n % 2
                 else await client.get(path, headers=headers))
            statuses.append(r.status_code)
            if r.status_code == 429:
                assert int(r.headers["retry-after"]) >= 1, r.headers
                assert "unknown or revoked" in r.text, r.text
        assert statuses[0] == 401 and statuses[-1] == 429, statuses
        assert statuses.index(429) <= 13 and set(statuses[statuses.index(429):]) == {429}, statuses
        mine = await client.post("/graphql", json={"query": "{ __typename }"}, headers={"x-forwarded-for": address})
        assert mine.status_code == 429, mine.text
        theirs = await client.post("/graphql", json={"query": "{ __typename }"}, headers={"x-forwarded-for": other})
        assert theirs.status_code == 200, theirs.text
