#!/usr/bin/env bash
# The device check for a machine with an NVIDIA GPU and the XLA CUDA plugin (jax-cuda13-pjrt) but no
# network: builds the extension against that machine's PyTorch, runs the C++ runtime tests (built
# on the CPU machine and carried in .device/) and the Python tests on the CUDA plugin, the
# quickstart, the runtime benchmark and the peers benchmark (benchmarks/run.py --device gpu). Writes
# logs to $OUT (or ./gpu-out).
#
# Prepare on the CPU machine:  bash scripts/gpu_check.sh --prepare
set -uo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = --prepare ]; then
  mkdir -p .device/include
  inc=$(.venv/bin/python -c "import os, xla_plugins.xla_cpu_pjrt as p; print(os.path.join(os.path.dirname(p.__file__), 'include'))")
  cp "$inc/pjrt_c_api.h" .device/include/
  cp build/tests/runtime_tests build/tests/exec_tests build/benchmarks/runtime_bench .device/
  mkdir -p .device/lib  # Google Benchmark's shared library, which that machine lacks
  cp /usr/lib/x86_64-linux-gnu/libbenchmark.so.1debian .device/lib/
  exit 0
fi

OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu_check.log") 2>&1
export PYTHONUNBUFFERED=1
nvidia-smi -L
python3 -c "import torch, jax; print('torch', torch.__version__, 'jax', jax.__version__)"
PLUGIN=$(python3 -c "import os, jax_plugins.xla_cuda13 as p; print(os.path.join(os.path.dirname(p.__file__), 'xla_cuda_plugin.so'))")
echo "plugin: $PLUGIN"
export TORCHTPU_PJRT_PLUGIN=$PLUGIN
export LD_LIBRARY_PATH=$PWD/.device/lib:${LD_LIBRARY_PATH:-}

echo "== C++ runtime and executor tests on the CUDA plugin (collectives need 4 devices: skipped on 1 GPU)"
.device/runtime_tests --gtest_filter=-Collectives.* > "$OUT/runtime_tests.log" 2>&1
grep -E "^\[  (PASSED|FAILED) |tests? ran" "$OUT/runtime_tests.log"
.device/exec_tests > "$OUT/exec_tests.log" 2>&1
grep -E "^\[  (PASSED|FAILED) |tests? ran" "$OUT/exec_tests.log"
echo "== runtime benchmark"
.device/runtime_bench --benchmark_repetitions=10 --benchmark_report_aggregates_only=true > "$OUT/runtime_bench.log" 2>&1
grep -E "median|Run on" "$OUT/runtime_bench.log"

echo "== build the extension against this machine's PyTorch"
cmake -S . -B build-gpu -G Ninja -DTORCHTPU_BUILD_TESTS=OFF -DPJRT_INCLUDE_DIR="$PWD/.device/include" \
  -DPython_EXECUTABLE="$(command -v python3)" > "$OUT/cmake.log" 2>&1 || { tail -30 "$OUT/cmake.log"; exit 1; }
cmake --build build-gpu -j 16 > "$OUT/build.log" 2>&1 || { grep -E "error" -A5 "$OUT/build.log" | head -60; exit 1; }
export PYTHONPATH=$PWD/python
echo "== quickstart"
python3 examples/quickstart.py
echo "== pytest"
timeout 600 python3 -m pytest tests/python -q --durations=5 > "$OUT/pytest.log" 2>&1
grep -E "passed|failed|Error|^[0-9.]+s " "$OUT/pytest.log" | tail -20
echo "== dispatch overhead (strict mode) beside PyTorch eager on the CPU"
timeout 120 python3 benchmarks/dispatch_overhead.py --repeats 10 --json "$OUT/dispatch_gpu.json" 2>&1 | grep -v Warn
echo "== torchtpu beside PyTorch CUDA eager, Inductor and JAX on the GPU (benchmarks/run.py --quick)"
timeout 600 python3 benchmarks/run.py --device gpu --quick --json "$OUT/bench_gpu.json" \
  --markdown "$OUT/benchmarks_gpu.md" 2>&1 | tail -45
