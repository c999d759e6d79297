#!/usr/bin/env bash
# Runs the whole test suite: C++ (GoogleTest through CTest), then Python (pytest).
set -uo pipefail
cd "$(dirname "$0")/.."
status=0
ctest --test-dir build --output-on-failure -j2 --timeout 300 || status=1
# Two worker processes (pytest-xdist), each taking whole files: most tests wait on one thread
# (imports, tracing, XLA's compiles), so two at a time use both cores. The longest files go
# first, so that the workers finish together (xdist's default order, most tests first, left the
# single multi-minute tests for the end).
longest=(test_benchmarks test_conformance_gate test_distributed test_torchtitan test_train test_module_db test_fuzz
         test_compile test_modes test_packaging test_threads test_checkpoint)
files=()
for name in "${longest[@]}"; do files+=("tests/python/$name.py"); done
for f in tests/python/test_*.py; do
  [[ " ${longest[*]} " == *" $(basename "$f" .py) "* ]] || files+=("$f")
done
.venv/bin/python -m pytest "${files[@]}" -q -n 2 --dist loadfile --no-loadscope-reorder --durations=25 || status=1
exit $status
