"""A frontend developer's first hour, end to end: a Vite + React app (tests/frontend) with Apollo Client 4
and with urql, typed by graphql-codegen (codegen.ts), served from another origin and driven in headless
Chromium by playwright-core (tests/frontend/app.test.mjs). It pages citations, switches instants, shows a
retraction after an import, splices a live citation with no query sent, resumes after the API restarts
with the citation made while it was down, and the API logs no error in the whole run (preflights too).

The npm packages are pinned in tests/frontend/package.json (lock file beside it), installed into
tests/frontend/node_modules by the first run (.ci/run installs them too).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import asyncpg
import pytest

from app.ingest.load import load_file
from tests.conftest import AUG9, ROOT, SEED, free_port, npm_install
from tests.test_splice import own_work_retraction  # noqa: F401

pytestmark = pytest.mark.asyncio(loop_scope="session")

FRONTEND = ROOT / "tests" / "frontend"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def frontend_installed() -> None:
    npm_install(FRONTEND, FRONTEND / "node_modules" / ".package-lock.json", "the frontend app")


def run(*args: str, env: dict | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=FRONTEND, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


async def test_codegen_types_the_scalars_and_refuses_an_unmapped_one(frontend_installed, tmp_path):
    done = run(str(FRONTEND / "node_modules" / ".bin" / "graphql-codegen"), "--config", "codegen.ts")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    types = (FRONTEND / "src" / "gql" / "graphql.ts").read_text()
    assert "asOf?: string | null | undefined;" in types  # DateTime: a string, not unknown
    assert "unknown;" not in types.split("export const")[0].replace("[key: string]: unknown", "")
    # Without the mapping, strictScalars stops the generation and names the scalar.
    unmapped = tmp_path / "codegen.yml"
    unmapped.write_text(f"schema: {ROOT / 'schema.graphql'}\ndocuments: {FRONTEND / 'src'}/**/*.tsx\n"
                        f"generates:\n  {tmp_path / 'gql'}/:\n    preset: client\n    config:\n"
                        "      strictScalars: true\n")
    refused = run(str(FRONTEND / "node_modules" / ".bin" / "graphql-codegen"), "--config", str(unmapped))
    assert refused.returncode != 0 and "DateTime" in refused.stdout + refused.stderr


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (.ci/run installs it)")
async def test_the_app_from_another_origin_pages_switches_splices_and_resumes(frontend_installed, empty_database,
                                                                               own_work_retraction, tmp_path):
    conn = await asyncpg.connect(empty_database)
    try:
        await load_file(conn, str(SEED))
        await load_file(conn, str(AUG9))
    finally:
        await conn.close()
    api, app = free_port(), free_port()
    gen = run(str(FRONTEND / "node_modules" / ".bin" / "graphql-codegen"), "--config", "codegen.ts")
    assert gen.returncode == 0, gen.stdout[-2000:]
    dist = tmp_path / "dist"
    built = run(str(FRONTEND / "node_modules" / ".bin" / "vite"), "build", "--outDir", str(dist), "--emptyOutDir",
                env={"VITE_PITH_API": f"http://127.0.0.1:{api}"})
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    retraction, _ = own_work_retraction
    log = tmp_path / "api.log"
    done = run("node", "--test", "--test-reporter=spec", "app.test.mjs", timeout=400, env={
        "PITH_PYTHON": sys.executable, "PITH_ROOT": str(ROOT), "DATABASE_URL": empty_database,
        "PITH_API_PORT": str(api), "PITH_APP_PORT": str(app), "PITH_DIST": str(dist),
        "PITH_RETRACTION": str(retraction), "PITH_LOG": str(log), "PITH_CHROMIUM": CHROMIUM})
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
