"""Metrics that tell the truth across worker restarts, checked by scraping `pith-graph serve --workers 2`,
and the documented queries, alerts and dashboard evaluated by a real Prometheus (Debian's package;
.ci/run installs it)."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import ROOT, LiveServer, free_port

CAP = 6  # PITH_METRICS_OPERATION_NAMES for this server


@pytest.fixture(scope="module")
def server(database_url):
    live = LiveServer(database_url, env={"PITH_WORKERS": "2", "PITH_METRICS_OPERATION_NAMES": str(CAP)})
    yield live
    live.stop()


def scrape(server: LiveServer) -> dict:
    text = httpx.get(server.base + "/metrics", timeout=10).text
    return {f.name: f for f in text_string_to_metric_families(text)}


def workers(server: LiveServer) -> set[int]:
    """The worker processes uvicorn spawned (not its resource tracker)."""
    found = set()
    for child in psutil.Process(server.process.pid).children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE and "spawn_main" in " ".join(child.cmdline()):
                found.add(child.pid)
        except psutil.NoSuchProcess:
            pass
    return found


def ask(server: LiveServer, name: str) -> None:
    with httpx.Client(base_url=server.base, timeout=10) as client:  # a connection each: both workers answer
        response = client.post("/graphql", json={"query": f'query {name} {{ paper(arxivId: "2402.15627") {{ title }} }}',
                                                 "operationName": name})
        assert response.status_code == 200, response.text


def counted(found: dict, operation: str) -> float:
    return sum(s.value for s in found["pith_graphql_operations"].samples
               if s.name.endswith("_total") and s.labels["operation"] == operation)


def process_pids(found: dict) -> set[int]:
    return {int(s.labels["pid"]) for s in found["pith_process_start_time_seconds"].samples}


def wait_for(condition, seconds: float = 30.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    return condition()


def test_a_killed_worker_leaves_the_gauges_its_counters_stay_and_the_name_cap_is_the_servers(server):
    for _ in range(12):
        ask(server, "Probe")
    for i in range(4):
        ask(server, f"Early{i}")
    before = wait_for(lambda: (lambda f: f if len(process_pids(f)) == 2 else None)(scrape(server)))
    assert before, "both workers report their process figures"
    live = workers(server)
    assert process_pids(before) == live, (process_pids(before), live)
    probes = counted(before, "Probe")
    assert probes >= 12
    assert {s.labels["version"] for s in before["pith_build_info"].samples} and \
        all(s.value == 1 for s in before["pith_build_info"].samples)
    assert before["pith_imports"].samples[0].value >= 1  # the database's data version, read at start

    victim = sorted(live)[0]
    psutil.Process(victim).send_signal(signal.SIGKILL)
    # (a new worker imports the app and opens its pool: on a loaded machine that took more than 30 s once)
    replaced = wait_for(lambda: (lambda w: w if len(w) == 2 and victim not in w else None)(workers(server)), 120)
    assert replaced, "the killed worker was not replaced"
    after = wait_for(lambda: (lambda f: f if process_pids(f) == replaced else None)(scrape(server)))
    assert after, f"the dead worker's gauges stay: {process_pids(scrape(server))} vs live {replaced}"
    assert victim not in process_pids(after)
    assert counted(after, "Probe") >= probes  # counters survive the worker that counted them
    waiting = sum(s.value for s in after["pith_db_pool_connections"].samples if s.labels["state"] == "waiting")
    assert waiting == 0

    for i in range(8):  # new names, to both workers (the new one included)
        ask(server, f"Late{i}")
    names = {s.labels["operation"] for s in scrape(server)["pith_graphql_operations"].samples
             if s.name.endswith("_total")} - {"anonymous", "other"}
    assert len(names) <= CAP, sorted(names)
    assert counted(scrape(server), "other") >= 1


def documented_queries() -> list[str]:
    text = (ROOT / "docs" / "deployment.md").read_text()
    table = text[text.index("| question | expression |"):]
    table = table[:table.index("\n\n")]
    queries = []
    for row in table.splitlines()[2:]:
        expressions = row.split("|")[2]
        queries += re.findall(r"`([^`]+)`", expressions)
    assert len(queries) >= 15, queries
    return queries


def dashboard_queries() -> list[str]:
    dashboard = json.loads((ROOT / "deploy" / "grafana" / "pith-graph.json").read_text())
    return [t["expr"] for p in dashboard["panels"] for t in p["targets"]]


@pytest.fixture(scope="module")
def prometheus(server):
    if shutil.which("prometheus") is None or shutil.which("promtool") is None:
        pytest.skip("needs Prometheus (Debian package `prometheus`; .ci/run installs it)")
    folder = Path(tempfile.mkdtemp(prefix="pith-prometheus-"))
    port = free_port()
    rules = ROOT / "deploy" / "prometheus" / "alerts.yml"
    (folder / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: [{json.dumps(str(rules))}]\n"
        "scrape_configs:\n"
        f"  - job_name: pith-graph\n    static_configs: [{{targets: ['127.0.0.1:{server.port}']}}]\n")
    log = open(folder / "prometheus.log", "wb")
    process = subprocess.Popen(["prometheus", f"--config.file={folder / 'prometheus.yml'}",
                                f"--storage.tsdb.path={folder / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
                               stdout=log, stderr=log)
    base = f"http://127.0.0.1:{port}"
    try:
        ready = wait_for(lambda: _ok(base + "/-/ready"), 60)
        assert ready, (folder / "prometheus.log").read_text()[-2000:]
        yield base
    finally:
        process.terminate()
        process.wait(20)
        log.close()
        shutil.rmtree(folder, ignore_errors=True)


def _ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def query(base: str, expression: str) -> list:
    body = httpx.get(base + "/api/v1/query", params={"query": expression}, timeout=10).json()
    assert body["status"] == "success", (expression, body)
    return body["data"]["result"]


def test_the_alert_rules_pass_promtool():
    done = subprocess.run(["promtool", "check", "rules", str(ROOT / "deploy" / "prometheus" / "alerts.yml")],
                          capture_output=True, text=True) if shutil.which("promtool") else None
    if done is None:
        pytest.skip("needs promtool (Debian package `prometheus`; .ci/run installs it)")
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr


def test_every_documented_query_and_dashboard_panel_returns_series_and_no_alert_fires(server, prometheus):
    def traffic() -> None:
        for i in range(3):
            ask(server, "Probe")
            httpx.get(server.base + "/paper/2402.15627", timeout=10)

    # rate() needs two scrapes of every series inside its window.
    traffic()
    assert wait_for(lambda: query(prometheus, 'count_over_time(up{job="pith-graph"}[1m]) >= 3'), 60)
    traffic()
    assert wait_for(lambda: query(prometheus, "sum(rate(pith_graphql_operation_duration_seconds_count[5m])) > 0"), 60)
    empty = [q for q in documented_queries() + dashboard_queries() if not query(prometheus, q)]
    assert not empty, f"these documented queries return no series: {empty}"
    rules = wait_for(lambda: (lambda groups: groups if groups and all(
        r.get("lastEvaluation", "").startswith("20") and not r["lastEvaluation"].startswith("0001")
        for g in groups for r in g["rules"]) else None)(
        httpx.get(prometheus + "/api/v1/rules", timeout=10).json()["data"]["groups"]), 30)
    assert rules, "the alert rules were not evaluated"
    evaluated = [r for g in rules for r in g["rules"]]
    assert len(evaluated) == 6 and all(r["health"] == "ok" for r in evaluated), evaluated
    assert not [r["name"] for r in evaluated if r["state"] != "inactive"]  # a healthy server pages no one


def test_two_scrapes_forgetting_the_same_dead_worker_both_answer(tmp_path, monkeypatch):
    """Two workers' scrapes can list a dead worker's live gauges at once; prometheus_client's mark_process_dead
    in the one that removes them second finds a file gone (FileNotFoundError). That is no error: it was a 500
    on /metrics after a worker was killed."""
    from prometheus_client import multiprocess

    from app import metrics

    (tmp_path / "gauge_liveall_999999999.db").write_bytes(b"")

    def second(pid, path=None):  # as the library fails when the other scrape removed the file after its glob
        raise FileNotFoundError(f"{path}/gauge_liveall_{pid}.db")

    monkeypatch.setattr(multiprocess, "mark_process_dead", second)
    assert metrics.forget_dead_processes(str(tmp_path)) == [999999999]
