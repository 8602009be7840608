#!/usr/bin/env bash
# tests/gpu/run.sh's verdicts without a GPU, in a few seconds and without building anything (it
# runs the binaries of BIN_DIR through PP_GPU_BIN):
# - a fake nvidia-smi that lists an H200, with the CUDA plugin missing (PP_CUDA_PLUGIN=
#   /nonexistent.so): "CUDA plugin loads" FAILs naming the plugin, no step reads as skipped, the
#   last line is the count and the exit status is non-zero;
# - a fake nvidia-smi that fails, and one that lists nothing: every GPU step is
#   "SKIP: <step> (skipped: no GPU)" and the exit status is 0.
#
#   tests/gpu/run_sh_test.sh BIN_DIR      (ctest: gpu_run_sh)
set -euo pipefail
if [ $# -ne 1 ] || [ ! -x "$1/ppctl" ]; then
  echo "usage: $0 BIN_DIR (a folder holding ppctl, ppcoord and ppworker)" >&2
  exit 2
fi
bin="$(cd "$1" && pwd)"
run_sh="$(cd "$(dirname "$0")" && pwd)/run.sh"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
failures=0

fail() {
  echo "run_sh_test: FAILED: $*" >&2
  failures=$((failures + 1))
}

# fake_nvidia_smi NAME BODY: a folder holding an nvidia-smi script with BODY, to go first on PATH.
fake_nvidia_smi() {
  mkdir -p "$tmp/$1"
  printf '#!/bin/sh\n%s\n' "$2" >"$tmp/$1/nvidia-smi"
  chmod +x "$tmp/$1/nvidia-smi"
}

# run_case NAME: run.sh with NAME's nvidia-smi; its output in $tmp/NAME.txt, status in $rc.
run_case() {
  rc=0
  PATH="$tmp/$1:$PATH" OUT="$tmp/out-$1" PP_GPU_SKIP_BUILD=1 PP_GPU_BIN="$bin" \
    PP_CUDA_PLUGIN=/nonexistent.so timeout 50 bash "$run_sh" >"$tmp/$1.txt" 2>&1 || rc=$?
  echo "---- run.sh with nvidia-smi '$1' (exit $rc):"
  cat "$tmp/$1.txt"
}

# The printed lines are step lines and, last, the count; results.tsv holds every step.
check_shape() {
  local text="$tmp/$1.txt" last steps
  last="$(tail -n 1 "$text")"
  [[ "$last" =~ ^[0-9]+\ passed,\ [0-9]+\ failed,\ [0-9]+\ skipped$ ]] ||
    fail "$1: last line is not the count: '$last'"
  if head -n -1 "$text" | grep -vqE '^(PASS|FAIL|SKIP): '; then
    fail "$1: a line that is no step line: $(head -n -1 "$text" | grep -vE '^(PASS|FAIL|SKIP): ')"
  fi
  steps="$(head -n -1 "$text" | wc -l)"
  [ "$(($(wc -l <"$tmp/out-$1/results.tsv") - 1))" -eq "$steps" ] ||
    fail "$1: results.tsv does not hold the $steps steps"
}

fake_nvidia_smi gpu 'echo "GPU 0: NVIDIA H200 (UUID: GPU-fake)"'
run_case gpu
check_shape gpu
[ "$rc" -ne 0 ] || fail "gpu: a visible GPU without a plugin exited 0"
grep -q '^FAIL: CUDA plugin loads (.*CUDA plugin not found (tried /nonexistent.so' "$tmp/gpu.txt" ||
  fail "gpu: no 'FAIL: CUDA plugin loads' naming /nonexistent.so"
! grep -q '^SKIP: ' "$tmp/gpu.txt" || fail "gpu: a step was skipped with a GPU visible"
tail -n 1 "$tmp/gpu.txt" | grep -qE ' 0 skipped$' || fail "gpu: the count shows skips"

# PP_GPU_STEPS: only the matching step runs (here it fails: no plugin); the others are skipped as
# not selected, which does not fail the run by itself.
fake_nvidia_smi selected 'echo "GPU 0: NVIDIA H200 (UUID: GPU-fake)"'
PP_GPU_STEPS='^GPU and CUDA libraries$' run_case selected
check_shape selected
grep -q '^FAIL: GPU and CUDA libraries (' "$tmp/selected.txt" ||
  fail "selected: the selected step did not run"
# Every GPU step of the unselected run (its lines but the bundle's) but the one selected.
others=$(($(grep -cE '^(PASS|FAIL): ' "$tmp/gpu.txt") - 2))
[ "$(grep -c '^SKIP: .* (not selected by PP_GPU_STEPS)$' "$tmp/selected.txt" || true)" -eq \
  "$others" ] || fail "selected: not all $others other GPU steps were skipped as not selected"
[ "$rc" -ne 0 ] || fail "selected: the failed step did not fail the run"

for case in "no-devices:echo 'No devices were found'; exit 6" "empty:exit 0"; do
  name="${case%%:*}"
  fake_nvidia_smi "$name" "${case#*:}"
  run_case "$name"
  check_shape "$name"
  [ "$rc" -eq 0 ] || fail "$name: no GPU, yet exit $rc"
  steps="$(grep -c '^SKIP: .* (skipped: no GPU)$' "$tmp/$name.txt" || true)"
  [ "$steps" -ge 10 ] || fail "$name: only $steps steps skipped for want of a GPU"
  [ "$(grep -c '^PASS: ' "$tmp/$name.txt" || true)" -eq 1 ] ||
    fail "$name: more than the bundle passed"
  ! grep -q '^FAIL: ' "$tmp/$name.txt" || fail "$name: a step failed"
done

if [ "$failures" -ne 0 ]; then
  echo "run_sh_test: $failures check(s) failed" >&2
  exit 1
fi
echo "run_sh_test: ok"
