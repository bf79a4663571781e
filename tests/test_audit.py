"""The GraphQL-over-HTTP working group's audit (npm graphql-http's auditServer) against `pith-graph serve`."""

from __future__ import annotations

import subprocess

import pytest

from tests.conftest import ROOT, npm_install

AUDIT = ROOT / "tests" / "audit"


@pytest.fixture(scope="module")
def audit_installed() -> None:
    npm_install(AUDIT, AUDIT / "node_modules" / "graphql-http", "the audit")


def test_graphql_over_http_audit_passes_with_no_error_and_no_warning(live, audit_installed):
    done = subprocess.run(["node", str(AUDIT / "audit.mjs"), live.base + "/graphql"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert '"warn":0,"error":0' in done.stdout
