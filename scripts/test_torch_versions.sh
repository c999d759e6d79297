#!/usr/bin/env bash
# The core tests against other PyTorch releases of the supported window (default: the oldest and the
# newest, 2.11 and 2.15): for each, scripts/setup.sh --torch VERSION makes .venv-torchVERSION with
# torchtpu built against that release, then the core test files run in it. Not part of CI (each
# release is a separate environment and build); results go to docs/porting.md.
#   bash scripts/test_torch_versions.sh [VERSION...]
set -uo pipefail
cd "$(dirname "$0")/.."
versions=("$@")
((${#versions[@]})) || versions=(2.11.0 2.15.0)
core=(test_first_slice test_device test_modes test_patches test_training test_attention test_checkpoint
      test_compile_cache)
files=()
for name in "${core[@]}"; do files+=("tests/python/$name.py"); done
status=0
for v in "${versions[@]}"; do
  printf '\n== torch %s\n' "$v"
  if ! bash scripts/setup.sh --torch "$v"; then status=1; continue; fi
  ".venv-torch$v/bin/python" -m pytest "${files[@]}" -q -n 2 -p no:cacheprovider || status=1
done
exit $status
