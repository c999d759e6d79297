#!/usr/bin/env bash
# Runs the whole test suite: C++ (GoogleTest through CTest), then Python (pytest).
set -uo pipefail
cd "$(dirname "$0")/.."
status=0
ctest --test-dir build --output-on-failure -j2 || status=1
.venv/bin/python -m pytest tests/python -q --durations=25 || status=1
exit $status
