"""The research script in examples/ works against a running server."""

from __future__ import annotations

import csv
import io
import subprocess
import sys

from tests.conftest import AUG9_AS_OF, ROOT


def test_two_hop_csv_against_the_server(live):
    """-S: no site-packages, so the example runs on a plain install (the standard library only)."""
    done = subprocess.run(
        [sys.executable, "-S", str(ROOT / "examples" / "two_hop_csv.py"), "2402.15627", "--url", live.base + "/graphql",
         "--as-of", AUG9_AS_OF],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    assert len(rows) == 13
    assert {r["cited_arxiv_id"] for r in rows} == {"2402.15627"}
    assert sum(r["resolution_status"] == "unresolved" for r in rows) == 7
    assert {"2502.03885", "2507.22294"} <= {r["citing_arxiv_id"] for r in rows}


def test_two_hop_csv_reports_errors(live):
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "two_hop_csv.py"), "nonsense", "--url", live.base + "/graphql"],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 1
    assert "hep-th/9901001" in done.stderr
