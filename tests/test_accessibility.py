"""axe-core over every HTML page the server serves (home, search, paper, ledger, integrity, evidence, an
error page, GraphiQL) at 1280 px and 390 px in headless Chromium: no violation, no page wider than the
screen, GraphiQL's editor and result both on screen; and the icon browsers ask for is served.

axe-core and playwright-core are pinned in tests/frontend/package.json (installed by the first run, or
.ci/run); the browser is Debian's chromium.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.conftest import ROOT, npm_install

FRONTEND = ROOT / "tests" / "frontend"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (.ci/run installs it)")
def test_every_html_page_passes_axe_at_desktop_and_phone_widths(live):
    npm_install(FRONTEND, FRONTEND / "node_modules" / ".package-lock.json", "axe-core and playwright-core")
    done = subprocess.run(["node", "--test", "--test-reporter=spec", "axe.test.mjs"], cwd=FRONTEND,
                          capture_output=True, text=True, timeout=400,
                          env={**os.environ, "PITH_BASE": live.base, "PITH_CHROMIUM": CHROMIUM})
    assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-2000:]
