"""The GraphQL-over-HTTP working group's audit (npm graphql-http's auditServer) against `pith-graph serve`."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.conftest import ROOT

AUDIT = ROOT / "tests" / "audit"


@pytest.fixture(scope="module")
def audit_installed() -> None:
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("needs Node.js and npm (the audit is an npm package); .ci/run has them")
    if not (AUDIT / "node_modules" / "graphql-http").exists():
        done = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"], cwd=AUDIT,
                              capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            pytest.skip(f"npm could not install the audit: {done.stderr[-500:]}")


def test_graphql_over_http_audit_passes_with_no_error_and_no_warning(live, audit_installed):
    done = subprocess.run(["node", str(AUDIT / "audit.mjs"), live.base + "/graphql"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert '"warn":0,"error":0' in done.stdout
