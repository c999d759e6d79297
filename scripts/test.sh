#!/usr/bin/env bash
# Runs the whole test suite: C++ (GoogleTest through CTest), then Python (pytest).
set -uo pipefail
cd "$(dirname "$0")/.."
status=0
ctest --test-dir build --output-on-failure -j2 || status=1
# Two worker processes (pytest-xdist), each taking whole files: most tests wait on one thread
# (imports, tracing, XLA's compiles), so two at a time use both cores.
.venv/bin/python -m pytest tests/python -q -n 2 --dist loadfile --durations=25 || status=1
exit $status
