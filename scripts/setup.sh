#!/usr/bin/env bash
# Installs everything torchtpu needs into .venv, builds the C++ code and the Python extension, runs
# examples/quickstart.py and trains a small GPT with torchtpu-train (the README's main job). Safe to
# re-run: each install and build step is skipped when its inputs are unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
# --with-torch-xla: also create .venv-torch-xla with PyTorch/XLA (it pins its own PyTorch), which
# benchmarks/run.py then measures beside torchtpu. Optional and large (several GB).
# --torch VERSION: instead of the pinned PyTorch, make .venv-torchVERSION with that PyTorch (2.11 to
# 2.15) and torchtpu built against it (a wheel install, built in build-torchVERSION, so .venv's
# editable build is left alone); then run the quickstart. scripts/test_torch_versions.sh uses it.
WITH_TORCH_XLA=0
TORCH_VERSION=""
while (($#)); do
  case "$1" in
    --with-torch-xla) WITH_TORCH_XLA=1 ;;
    --torch) TORCH_VERSION=${2:?"--torch needs a version, e.g. --torch 2.15.0"}; shift ;;
    *) echo "unknown option: $1 (known: --with-torch-xla, --torch VERSION)" >&2; exit 2 ;;
  esac
  shift
done
step() { printf '\n== %s\n' "$*"; }

# System tools (Debian): compiler, CMake, Ninja, ccache, GoogleTest, Google Benchmark.
missing=()
for pkg in g++ cmake ninja-build ccache libgtest-dev libbenchmark-dev python3-venv; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if ((${#missing[@]})); then
  step "installing system packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq "${missing[@]}"
fi

if [ -n "$TORCH_VERSION" ]; then
  venv=.venv-torch$TORCH_VERSION
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  stamp=$venv/.requirements.sha256
  if ! sha256sum -c --status "$stamp" 2>/dev/null; then
    step "installing Python packages with torch==$TORCH_VERSION into $venv"
    # requirements.txt without its torch and torchvision pins (torchvision pairs with one torch:
    # the model zoo needs it, the core tests do not)
    grep -vE '^(torch|torchvision)==' requirements.txt > "$venv/requirements.txt"
    "$venv/bin/python" -m pip install -q --upgrade pip
    "$venv/bin/python" -m pip install -q "torch==$TORCH_VERSION" -r "$venv/requirements.txt"
    sha256sum requirements.txt > "$stamp"
  fi
  step "building torchtpu against torch $TORCH_VERSION (build-torch$TORCH_VERSION)"
  TORCH_DEVICE_BACKEND_AUTOLOAD=0 "$venv/bin/python" -m pip install -q --no-build-isolation --no-deps \
    -C build-dir="build-torch$TORCH_VERSION" .
  step "running examples/quickstart.py on torch $TORCH_VERSION"
  (cd examples && "$ROOT/$venv/bin/python" quickstart.py)
  exit 0
fi

# Python environment, reinstalled only when requirements.txt changes.
if [ ! -x .venv/bin/python ]; then
  step "creating .venv"
  python3 -m venv .venv
fi
stamp=.venv/.requirements.sha256
if ! sha256sum -c --status "$stamp" 2>/dev/null; then
  step "installing Python packages (requirements.txt)"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r requirements.txt
  sha256sum requirements.txt > "$stamp"
fi
# vLLM for torchtpu's vLLM plugin (docs/vllm.md): its wheel declares a CUDA stack the plugin does
# not use, so vllm itself goes in without dependencies and requirements-vllm.txt lists what it imports.
stamp=.venv/.requirements-vllm.sha256
if ! sha256sum -c --status "$stamp" 2>/dev/null; then
  step "installing vLLM (requirements-vllm.txt)"
  .venv/bin/python -m pip install -q -r requirements-vllm.txt
  .venv/bin/python -m pip install -q --no-deps vllm==0.33.0
  sha256sum requirements-vllm.txt > "$stamp"
fi
if [ "$WITH_TORCH_XLA" = 1 ] && [ ! -x .venv-torch-xla/bin/python ]; then
  step "creating .venv-torch-xla (PyTorch/XLA for benchmarks/run.py)"
  python3 -m venv .venv-torch-xla
  .venv-torch-xla/bin/python -m pip install -q -r benchmarks/requirements-torch-xla.txt
fi
# torchtpu itself, as an editable install (pyproject.toml: scikit-build-core runs CMake and Ninja
# in build/, which also holds the C++ tests): `import torch` then loads it (autoload entry point),
# torch.compile finds backend="tpu", and `torchtpu-train` is on the PATH. Python edits take effect
# at once; C++ edits need this again (or `cmake --build build`).
step "building and installing torchtpu (pip install -e .)"
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
rm -rf "$site/torchtpu.pth" "$site/torchtpu-0.1.0.dist-info"  # what earlier versions of this script wrote
TORCH_DEVICE_BACKEND_AUTOLOAD=0 .venv/bin/python -m pip install -q --no-build-isolation --no-deps -e .

step "running examples/quickstart.py"
.venv/bin/python examples/quickstart.py

# The main job: a small GPT-2 learns to write English from the Python standard library's
# docstrings, on the tpu device (here the XLA CPU plugin) in fused mode, with the config-driven
# trainer (~3 minutes).
step "training a small GPT: torchtpu-train examples/configs/gpt_small.yaml"
.venv/bin/torchtpu-train examples/configs/gpt_small.yaml
