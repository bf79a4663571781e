"""The clients frontend apps run, with their defaults, against `pith-graph serve`: Apollo Client 3
(relayStylePagination, APQ over GET), urql 6 + graphcache 9 (queries, SSE subscriptions), Relay 21
(relay-compiler's artifacts run by relay-runtime: @refetchable + @connection, @appendNode), graphql-ws,
graphql-sse, and GraphiQL in headless Chromium running a subscription.

The npm packages are pinned in tests/clients/package.json and installed into tests/clients/node_modules
(not committed) by the first run; later runs reuse them. The graph: the 5 August record, and a
time-travel paper whose citations, resolutions and references arrive over the first half of 2026
(tests/graphs.py time_travel). Each subscription test loads one more 9 August record
(`pith-graph load`), which adds one citation of 2402.15627.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from datetime import datetime

import asyncpg
import pytest
import pytest_asyncio

from app.ingest.load import load_file
from tests.conftest import AUG9, ROOT, SEED, LiveServer, create_database, drop_database, npm_install
from tests.graphs import BASE, citers_at, time_travel

pytestmark = pytest.mark.asyncio(loop_scope="session")

CLIENTS = ROOT / "tests" / "clients"
GENERATED = CLIENTS / "build" / "__generated__"
TRAVEL_ROOT = "5500.99999"
FEB, MAY = "2026-02-01T00:00:00Z", "2026-05-01T00:00:00Z"
LIVE = "2402.15627"


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@pytest.fixture(scope="module")
def npm_installed() -> None:
    npm_install(CLIENTS, CLIENTS / "node_modules" / ".package-lock.json", "the clients")


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def clients_server(admin_url, tmp_path_factory):
    url = await create_database(admin_url, "pith_test_clients")
    conn = await asyncpg.connect(url)
    try:
        await load_file(conn, str(SEED))
        await time_travel(TRAVEL_ROOT).write(conn)
    finally:
        await conn.close()
    folder = tmp_path_factory.mktemp("loads")
    documents = [line for line in AUG9.read_text().splitlines() if line.strip()]
    loads = []
    for i, line in enumerate(documents):
        if json.loads(line)["paper"]["arxiv_id"] == LIVE:
            continue  # the citing papers' records each add one citation of LIVE
        path = folder / f"record-{i}.json"
        path.write_text(line + "\n")
        loads.append(str(path))
    server = LiveServer(url)
    yield server, url, loads
    server.stop()
    await drop_database(admin_url, url)


def travel() -> dict:
    """What the time-travel graph holds at February and May, from its definition."""
    feb = citers_at(_at(FEB))
    out_feb = sum(1 for j in range(30) if (BASE.timestamp() + 2 * j * 86400) <= _at(FEB).timestamp())
    return {"root": TRAVEL_ROOT, "feb": FEB, "may": MAY, "live": LIVE,
            "counts": {"feb": feb, "may": citers_at(_at(MAY)), "outFeb": out_feb},
            "citersFeb": [f"5500.{i:05d}" for i in range(feb)]}


_taken = 0


def node_test(script: str, server: LiveServer, url: str, loads: list[str], events: int = 0) -> None:
    global _taken
    share, _taken = loads[_taken:_taken + events], _taken + events
    assert len(share) == events, "not enough documents left to load"
    env = {**os.environ, "PITH_BASE": server.base, "PITH_TRAVEL": json.dumps(travel()), "PITH_LOADS": json.dumps(share),
           "PITH_PYTHON": sys.executable, "PITH_ROOT": str(ROOT), "DATABASE_URL": url}
    done = subprocess.run(["node", "--test", "--test-reporter=spec", script], cwd=CLIENTS, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]


@pytest.fixture(scope="module")
def relay_compiled(npm_installed) -> subprocess.CompletedProcess:
    shutil.rmtree(GENERATED, ignore_errors=True)
    GENERATED.mkdir(parents=True)
    # relay-compiler writes CommonJS (require('./X.graphql')): this folder says so to Node.
    (GENERATED / "package.json").write_text('{"type": "commonjs"}\n')
    return subprocess.run([str(CLIENTS / "node_modules" / ".bin" / "relay-compiler")], cwd=CLIENTS,
                          capture_output=True, text=True, timeout=300)


async def test_relay_compiler_compiles_refetchable_connections_and_append_node(relay_compiled):
    assert relay_compiled.returncode == 0, relay_compiled.stdout + relay_compiled.stderr
    made = {p.name.removesuffix(".graphql.js") for p in GENERATED.glob("*.graphql.js")}
    assert {"PaperInboundPaginationQuery", "PaperOutboundPaginationQuery", "PaperTimelinePaginationQuery",
            "SearchResultsPaginationQuery", "CitationAddedSubscription", "CitationEdgeAddedSubscription"} <= made


async def test_apollo_client(npm_installed, clients_server):
    node_test("apollo.test.mjs", *clients_server)


async def test_urql_and_graphcache(npm_installed, clients_server):
    node_test("urql.test.mjs", *clients_server, events=1)


async def test_relay_runtime_runs_the_compiled_artifacts(relay_compiled, clients_server):
    assert relay_compiled.returncode == 0, relay_compiled.stderr
    node_test("relay.test.mjs", *clients_server, events=1)


async def test_the_readmes_live_recipes_splice_and_resume(npm_installed, clients_server):
    node_test("splice.test.mjs", *clients_server)


async def test_graphql_ws_and_graphql_sse(npm_installed, clients_server):
    node_test("subscriptions.test.mjs", *clients_server, events=2)


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None or shutil.which("chromedriver") is None,
                    reason="needs Debian's chromium and chromium-driver (.ci/run installs them)")
async def test_graphiql_in_chromium_runs_a_subscription_that_receives_a_loaded_record(clients_server):
    from urllib.parse import quote

    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    from tests.test_browser import open_browser, resources_outside, shot

    server, url, loads = clients_server
    global _taken
    document, _taken = loads[_taken], _taken + 1
    query = "subscription { citationAdded(arxivId: \"%s\") { cursor observation { citingPaper { arxivId } } } }" % LIVE
    with open_browser() as browser:
        wait = WebDriverWait(browser, 30)
        browser.get(server.base + "/graphql?query=" + quote(query))
        run = wait.until(ec.element_to_be_clickable((By.CSS_SELECTOR, ".graphiql-execute-button")))
        run.click()
        time.sleep(1.5)  # the WebSocket is open and the subscription registered
        done = subprocess.run([sys.executable, "-m", "app.cli", "load", document], capture_output=True, timeout=120,
                              env={**os.environ, "DATABASE_URL": url})
        assert done.returncode == 0, done.stderr.decode()[-2000:]
        wait.until(lambda d: "citationAdded" in d.find_element(By.CSS_SELECTOR, ".graphiql-response").text)
        shot(browser, "graphiql-subscription")
        response = browser.find_element(By.CSS_SELECTOR, ".graphiql-response").text
        assert '"errors"' not in response and "arxivId" in response, response
        assert resources_outside(browser, server.base) == []
