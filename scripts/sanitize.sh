#!/usr/bin/env bash
# Builds the torch-free core (runtime/, hlo/, graph/, exec/) and its GoogleTest suites with
# sanitizers in build-sanitize/ (or build-tsan/ for thread) and runs them.
#   bash scripts/sanitize.sh            # AddressSanitizer + LeakSanitizer + UndefinedBehaviorSanitizer
#   bash scripts/sanitize.sh thread     # ThreadSanitizer
# Needs scripts/setup.sh to have run (the PJRT header and plugin come from .venv).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
kind=${1:-address,undefined}
dir=build-sanitize
[ "$kind" = thread ] && dir=build-tsan
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DTORCHTPU_SANITIZE="$kind" \
  -DPython_EXECUTABLE="$ROOT/.venv/bin/python" >/dev/null
cmake --build "$dir" --target hlo_tests runtime_tests exec_tests exec_collective_tests
# The PJRT plugin is not instrumented: its own allocations at exit are not ours to report.
export LSAN_OPTIONS="suppressions=$ROOT/scripts/lsan.supp:print_suppressions=0"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export TSAN_OPTIONS="suppressions=$ROOT/scripts/tsan.supp:report_mutex_bugs=0"
ctest --test-dir "$dir" --output-on-failure -j2
