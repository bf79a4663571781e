"""No credentials in logs or errors; the image runs as non-root."""

from __future__ import annotations

import os
import subprocess
import sys

from app.settings import redact_url
from tests.conftest import ROOT


def test_database_password_never_reaches_logs_or_errors(tmp_path):
    url = "postgresql://pith:s3cret-pass@127.0.0.1:1/nowhere"
    assert "s3cret-pass" not in redact_url(url) and "***" in redact_url(url)
    done = subprocess.run([sys.executable, "-m", "app.cli", "export", "2402.15627"], env={**os.environ,
                          "DATABASE_URL": url}, capture_output=True, timeout=60)
    assert done.returncode == 1
    assert b"s3cret-pass" not in done.stderr + done.stdout


def test_docker_image_runs_as_non_root():
    dockerfile = (ROOT / "Dockerfile").read_text()
    users = [line.split()[1] for line in dockerfile.splitlines() if line.startswith("USER ")]
    assert users and users[-1] not in ("root", "0")
    assert "HEALTHCHECK" in dockerfile and 'CMD ["' in dockerfile
