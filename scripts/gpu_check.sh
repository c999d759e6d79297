#!/usr/bin/env bash
# The device check for a machine with an NVIDIA GPU and the XLA CUDA plugin (jax-cuda13-pjrt) but no
# network, sized for one call of a 15-minute lease: builds the extension against that machine's
# PyTorch (the C++ runtime tests, built on the CPU machine and carried in .device/, run meanwhile),
# then the quickstart, the dispatch benchmark and the peers benchmark (benchmarks/run.py --device
# gpu: PyTorch CUDA eager, Inductor, torchtpu's modes and JAX), and whatever of the Python tests the
# time left allows. Each step gets what is left of BUDGET_S seconds; a build error stops the run at
# once so that the lease keeps time for a second try. Writes logs to $OUT (or ./gpu-out).
#
# Prepare on the CPU machine:  bash scripts/gpu_check.sh --prepare
set -uo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = --prepare ]; then
  mkdir -p .device/include .device/lib
  inc=$(.venv/bin/python -c "import os, xla_plugins.xla_cpu_pjrt as p; print(os.path.join(os.path.dirname(p.__file__), 'include'))")
  cp "$inc/pjrt_c_api.h" .device/include/
  cp build/tests/runtime_tests build/tests/exec_tests build/benchmarks/runtime_bench .device/
  strip .device/runtime_tests .device/exec_tests .device/runtime_bench  # the lease carries 64 MiB in all
  cp /usr/lib/x86_64-linux-gnu/libbenchmark.so.1debian .device/lib/  # that machine lacks Google Benchmark
  exit 0
fi

OUT=${OUT:-$PWD/gpu-out}
BUDGET_S=${BUDGET_S:-560}
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu_check.log") 2>&1
export PYTHONUNBUFFERED=1
left() { echo $((BUDGET_S - SECONDS)); }
until_end_less() { local s=$(($(left) - $1)); echo $((s > 10 ? s : 10)); }  # a timeout for the next step
step() { printf '\n== [%ds] %s\n' "$SECONDS" "$*"; }

nvidia-smi -L
python3 -c "import torch, jax; print('torch', torch.__version__, 'jax', jax.__version__)"
PLUGIN=$(python3 -c "import os, jax_plugins.xla_cuda13 as p; print(os.path.join(os.path.dirname(p.__file__), 'xla_cuda_plugin.so'))")
echo "plugin: $PLUGIN"
export TORCHTPU_PJRT_PLUGIN=$PLUGIN
export LD_LIBRARY_PATH=$PWD/.device/lib:${LD_LIBRARY_PATH:-}

step "C++ runtime and executor tests on the CUDA plugin, beside the build (collectives need 4 devices)"
( timeout 150 .device/runtime_tests --gtest_filter=-Collectives.*; timeout 90 .device/exec_tests ) \
  > "$OUT/cpp_tests.log" 2>&1 &
cpp_tests=$!

step "build the extension against this machine's PyTorch"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DTORCHTPU_BUILD_TESTS=OFF -DPJRT_INCLUDE_DIR="$PWD/.device/include" \
  -DPython_EXECUTABLE="$(command -v python3)" > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
if ! cmake --build build-gpu -j 16 -- -k 0 >> "$OUT/build.log" 2>&1; then
  grep -E "error" -A5 "$OUT/build.log" | head -80
  exit 1
fi
export PYTHONPATH=$PWD/python:/tmp/torchtpu-meta
# What `pip install -e .` would register: torch's device autoload and backend="tpu" for torch.compile.
mkdir -p /tmp/torchtpu-meta/torchtpu-0.1.0.dist-info
printf 'Metadata-Version: 2.1\nName: torchtpu\nVersion: 0.1.0\n' > /tmp/torchtpu-meta/torchtpu-0.1.0.dist-info/METADATA
printf '[torch.backends]\ntorchtpu = torchtpu:_autoload\n\n[torch_dynamo_backends]\ntpu = torchtpu.compile:backend\n' \
  > /tmp/torchtpu-meta/torchtpu-0.1.0.dist-info/entry_points.txt

wait $cpp_tests  # each PJRT CUDA client takes most of the GPU's memory: one process at a time from here
grep -E "^\[  (PASSED|FAILED) |tests? ran|FAILED  \]" "$OUT/cpp_tests.log"

step "quickstart"
timeout 90 python3 examples/quickstart.py

step "dispatch overhead (strict mode) beside PyTorch eager on the CPU"
timeout 120 python3 benchmarks/dispatch_overhead.py --repeats 10 --json "$OUT/dispatch_gpu.json" 2>&1 | grep -v Warn

step "torchtpu beside PyTorch CUDA eager, Inductor and JAX on the GPU (benchmarks/run.py)"
timeout "$(until_end_less 20)" python3 benchmarks/run.py --device gpu --only gpt_train add_chain mlp_train resnet_train \
  --json "$OUT/bench_gpu.json" 2>&1 | tail -45

if [ "$(left)" -gt 30 ]; then
  step "runtime benchmark"
  timeout "$(until_end_less 10)" .device/runtime_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
    > "$OUT/runtime_bench.log" 2>&1
  grep -E "median|Run on" "$OUT/runtime_bench.log"
fi
if [ "$(left)" -gt 60 ]; then
  step "Python tests on the CUDA plugin, as far as the time left goes"
  timeout "$(until_end_less 5)" python3 -m pytest tests/python -q -p no:cacheprovider > "$OUT/pytest.log" 2>&1
  grep -E "passed|failed|Error" "$OUT/pytest.log" | tail -20
fi
step "done"  # $OUT: 8 files at most come back
