#!/usr/bin/env bash
# The long versions of the reliability tests: 60 s at 64 clients, 200 fuzz examples per operation, every
# entry of every drawn timeline (test_diff), 60 s of 16 clients through PgBouncer, 100 and 110 subscribers
# against the requests' pool (PITH_LONG_TESTS=1), the attack table's rows 3 s each.
# CI runs the short versions (seconds) through the ordinary test command.
set -euo pipefail
cd "$(dirname "$0")/.."
export PITH_LOAD_SECONDS="${PITH_LOAD_SECONDS:-60}" PITH_LOAD_CLIENTS="${PITH_LOAD_CLIENTS:-64}"
export PITH_FUZZ_EXAMPLES="${PITH_FUZZ_EXAMPLES:-200}" PITH_ATTACK_SECONDS="${PITH_ATTACK_SECONDS:-3}"
export PITH_DIFF_ENTRIES="${PITH_DIFF_ENTRIES:-100000}"
export PITH_LONG_TESTS=1
.venv/bin/python -m pytest -q -s tests/test_resilience.py tests/test_fuzz.py tests/test_faults.py tests/test_hostile.py \
    tests/test_attacks.py tests/test_diff.py
.venv/bin/python -m pytest -q -s tests/test_pgbouncer.py::test_sixteen_clients_mixing_reads_and_subscriptions_for_a_minute_get_no_503 \
    tests/test_live.py::test_a_hundred_subscribers_under_twelve_http_clients_all_receive_every_event \
    tests/test_live.py::test_subscriptions_and_key_checks_do_not_wait_on_a_request_pool_held_by_requests
echo "load figures: tests/artifacts/load.json, tests/artifacts/pgbouncer-16.json"
