#!/usr/bin/env bash
# The long versions of the reliability tests: 60 s at 64 clients, 200 fuzz examples per operation.
# CI runs the short versions (seconds) through the ordinary test command.
set -euo pipefail
cd "$(dirname "$0")/.."
export PITH_LOAD_SECONDS="${PITH_LOAD_SECONDS:-60}" PITH_LOAD_CLIENTS="${PITH_LOAD_CLIENTS:-64}"
export PITH_FUZZ_EXAMPLES="${PITH_FUZZ_EXAMPLES:-200}"
.venv/bin/python -m pytest -q -s tests/test_resilience.py tests/test_fuzz.py tests/test_faults.py tests/test_hostile.py
echo "load figures: tests/artifacts/load.json"
