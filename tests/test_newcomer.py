"""What a newcomer runs into first: options where they type them, the sample, a quiet start, a clean clone."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
import pytest

from tests.conftest import ROOT, SEED_AS_OF, free_port, seed_bytes


def pith_graph(*args: str, env: dict[str, str] | None = None, **kwargs) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    return subprocess.run([sys.executable, "-m", "app.cli", *args], env={**base, **(env or {})},
                          capture_output=True, timeout=120, **kwargs)


def test_shared_options_work_after_the_subcommand(empty_database):
    """`--database-url` (and `--data-dir`) where a user types them: after the command, as the README shows."""
    done = pith_graph("load", "--sample", "--database-url", empty_database)
    assert done.returncode == 0, done.stderr.decode()
    out = pith_graph("export", "2402.15627", "--as-of", SEED_AS_OF, "--database-url", empty_database)
    assert out.returncode == 0, out.stderr.decode()
    assert out.stdout == seed_bytes()
    # And before it, as before.
    again = pith_graph("--database-url", empty_database, "export", "2402.15627", "--as-of", SEED_AS_OF)
    assert again.stdout == seed_bytes()


def test_load_without_files_says_what_to_give(empty_database):
    done = pith_graph("load", "--database-url", empty_database)
    assert done.returncode == 2
    assert b"--sample" in done.stderr


def test_serve_takes_data_dir_after_the_command_and_starts_quietly():
    """The embedded server in the directory named after `serve`; no runtime-dir warning on the way."""
    data = Path(tempfile.mkdtemp(prefix="pith-newcomer-"))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "XDG_RUNTIME_DIR")}
    log = data.parent / f"{data.name}.log"
    with open(log, "w") as err:
        process = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--data-dir", str(data / "pg"),
                                    "--port", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=err)
    try:
        import time

        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert process.poll() is None, log.read_text()
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/paper/2402.15627/citation-record.json",
                                   params={"as_of": SEED_AS_OF}, timeout=2)
                if answer.status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        assert answer.content == seed_bytes()
        assert (data / "pg").is_dir() and any((data / "pg").iterdir())
    finally:
        process.terminate()
        process.wait(20)
    assert "Warning" not in log.read_text(), log.read_text()


def test_the_repository_holds_what_its_tests_and_docs_need():
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if tracked.returncode != 0:
        pytest.skip("not a git checkout")
    files = set(tracked.stdout.split())
    assert "LICENSE" in files and "Apache License" in (ROOT / "LICENSE").read_text()[:200]
    assert "docs/citation-record-v1.md" in files
    assert not [f for f in files if f.startswith((".schemathesis/", ".hypothesis/", "tests/artifacts/"))]
    beside = "../" + "shared"  # spelled apart: this guard is not itself a read outside the repository
    outside = subprocess.run(["git", "grep", "-n", "-F", "-e", beside, "--", "tests", "app", "loaders", "bench",
                              "examples", "README.md", "docs", ":(exclude)tests/test_newcomer.py"], cwd=ROOT, capture_output=True, text=True)
    assert outside.stdout == "", outside.stdout


def _pid_namespaces() -> bool:
    import shutil

    if shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "--fork", "--pid", "--mount-proc", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _pid_namespaces(), reason="needs unshare and the right to make a PID namespace (root)")
def test_sigterm_during_start_up_stops_serve_as_pid_1():
    """As a container's PID 1 (a PID namespace of its own), SIGTERM while the embedded server starts ends it."""
    import time

    import psutil

    data = Path(tempfile.mkdtemp(prefix="pith-pid1-"))
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    process = subprocess.Popen(["unshare", "--fork", "--pid", "--mount-proc", sys.executable, "-m", "app.cli",
                                "serve", "--data-dir", str(data / "pg"), "--port", str(free_port())],
                               env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    inner = None
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (data / "pg").exists():  # start-up has begun
            time.sleep(0.02)
        children = psutil.Process(process.pid).children()
        inner = next(c for c in children if "app.cli" in " ".join(c.cmdline()))
        inner.send_signal(15)
        started = time.monotonic()
        process.wait(15)
        elapsed = time.monotonic() - started
    finally:
        # Killing unshare leaves the namespace's PID 1 running: end that one first.
        if inner is not None and inner.is_running():
            inner.kill()
        if process.poll() is None:
            process.kill()
            process.wait(10)
        import shutil

        shutil.rmtree(data, ignore_errors=True)
    assert elapsed < 10, f"PID 1 took {elapsed:.1f} s to stop after SIGTERM"
