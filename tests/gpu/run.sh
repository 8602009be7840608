#!/usr/bin/env bash
# The GPU proof: one script that shows the CUDA backend, NCCL and the pipeline runtime right on one
# GPU, and reports each step as exactly one line:
#
#   PASS: <step> (<what it measured>)
#   FAIL: <step> (<why>)
#   SKIP: <step> (skipped: no GPU)
#
# and, as its last line, `N passed, N failed, N skipped`. Exit status 0 when nothing failed and,
# with a GPU visible, nothing skipped: a visible GPU with a step that skips (a test binary exiting
# 77, a CUDA plugin that does not load) is a failure, never a skip. The one exception is the
# two-GPU mesh test on a one-GPU machine, reported as a skip with that reason. Without a GPU
# (no nvidia-smi, or `nvidia-smi -L` failing or listing none) every GPU step is a SKIP and it
# exits 0.
#
#   bash tests/gpu/run.sh
#
# The steps, in order (logs of each in $OUT/run.log):
#   bundle                   build + pack, unpack, or the binaries of $PP_GPU_BIN (below)
#   GPU and CUDA libraries   nvidia-smi -L; the libcudart, libcublas and libnccl libpp_cuda.so loads
#   CUDA plugin loads        ppctl train --device=cuda:0 on a tiny spec (an early, clear failure;
#                            when it fails, every later step fails unrun)
#   ops vs CPU fp32, bf16    gpu_ops_compare --bench: every op against the CPU (1e-4), both
#                            precisions
#   compute-sanitizer ...    memcheck, racecheck, initcheck on cuda_ops_test (memcheck also on
#                            gpu_ops_compare; PP_GPU_SANITIZE_ALL=1: all three on it); absent = FAIL
#   ppctl train twice        ppctl train --device=cuda:0 twice: losses bitwise equal
#   ppctl train vs CPU       the same spec with --device=cpu: every step's loss within 1e-4 relative
#   ppctl up 1 worker        ppctl up --workers=1 --device=cuda:0: losses bitwise the GPU trainer's
#   ppctl up 2 workers 1f1b  two worker processes on the one GPU (NCCL over loopback), bitwise
#   ppctl up 2 workers zb-v  the same with zb-v (V=2), bitwise
#   NCCL transport           worker_nccl_transport_test
#   gpu_mesh_test            DP2 and TP2 over NCCL groups (needs two GPUs)
#   throughput fp32, bf16    ppctl train on a GPT-2 small shape: tokens/s and MFU against the
#                            device's dense peak (H100/H200 SXM: 67 TFLOP/s fp32, 989 bf16)
# Exact losses: `ppctl train --losses=FILE` (%.17g) and ppctl up's job store (DIR/ppcoord.db, table
# steps), read with python3's sqlite3 (stdlib only). The whole run stays under about 9 minutes on
# one GPU: each step has a time limit, no step runs past PP_GPU_BUDGET_S + 40 s, and a step that
# would start after PP_GPU_BUDGET_S (480 s) fails unrun.
#
# Two machines, one command:
# - Where the project's Debian dependencies are installed (a developer machine) it builds
#   $PP_GPU_BUILD (default build-gpu/, Release) and packs $PP_GPU_BUNDLE (default
#   build-gpu/bundle.tar.xz, xz -9e, must stay under 40 MiB): bundle/bin/ with ppcoord, ppworker,
#   ppctl and the GPU test binaries, bundle/lib/ with libpp_cuda.so and the non-system libraries
#   (deploy/docker/bundle-libs.sh), all stripped. Without a GPU every other step then skips.
# - A lent GPU machine has CUDA but none of those dependencies, and cannot build: there the script
#   unpacks $PP_GPU_BUNDLE next to itself and runs from it. Carry it: the device tool's
#   carry ["build-gpu/bundle.tar.xz"].
#
# Environment:
#   OUT                  where logs and results go (default $PP_GPU_BUILD/out): run.log (every
#                        step's output), results.tsv (step, result, seconds, detail), summary.txt
#                        (the lines printed), build.log
#   PP_GPU_BUILD         build folder (default build-gpu)
#   PP_GPU_BUNDLE        the .tar.xz (default build-gpu/bundle.tar.xz)
#   PP_GPU_SKIP_BUILD=1  never build: run the bundle (or $PP_GPU_BIN)
#   PP_GPU_BIN=DIR       run the binaries in DIR (e.g. build/bin; the plugin from DIR/../lib or
#                        $PP_CUDA_PLUGIN); never builds or packs. tests/gpu/run_sh_test.sh uses it
#   PP_GPU_BUDGET_S      seconds after which no further step starts (default 480)
#   PP_GPU_STEPS=REGEX   run only the steps whose names match (grep -E), e.g. 'racecheck|workers=2|bf16'
#                        (a rerun on a short device budget); the others are reported skipped. A
#                        step that needs the GPU trainer's losses needs 'twice' selected too
#   PP_GPU_NCCL_DEBUG    NCCL_DEBUG of the ppctl up steps with 2 workers (default INFO)
#   PP_GPU_SANITIZE_ALL=1  racecheck and initcheck on gpu_ops_compare too (slow)
#   PP_GPU_DEVICE        the device of the ppctl steps (default cuda:0); `cpu` with a fake
#                        nvidia-smi is a dry run of the loss comparisons on a machine without one
set -uo pipefail
if [ $# -ne 0 ]; then
  echo "usage: bash tests/gpu/run.sh (no arguments; its header lists the environment)" >&2
  exit 2
fi
# NCCL's warnings land in the workers' logs, which the ppctl up steps copy into run.log.
export NCCL_DEBUG="${NCCL_DEBUG:-WARN}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${PP_GPU_BUILD:-$root/build-gpu}"
tarball="${PP_GPU_BUNDLE:-$root/build-gpu/bundle.tar.xz}"
out="${OUT:-$build/out}"
device="${PP_GPU_DEVICE:-cuda:0}"
budget="${PP_GPU_BUDGET_S:-480}"
max_bundle_bytes=$((40 * 1024 * 1024))

mkdir -p "$out" || exit 2
work="$(mktemp -d "${TMPDIR:-/tmp}/pp-gpu-run.XXXXXX")" || exit 2
trap 'rm -rf "$work"' EXIT
: >"$out/run.log"
: >"$out/summary.txt"
printf 'step\tresult\tseconds\tdetail\n' >"$out/results.tsv"
passed=0 failed=0 skipped=0 expected_skips=0
gpu_count=0 gpu_name="" plugin_ok=0 bin=""
started_at=$SECONDS

# ---- reporting ------------------------------------------------------------------------------

# report RESULT STEP DETAIL SECONDS: the step's one line, on stdout and in the results.
report() {
  local result="$1" step="$2" detail="$3" seconds="$4" line
  line="$result: $step${detail:+ ($detail)}"
  echo "$line"
  echo "$line" >>"$out/summary.txt"
  printf '%s\t%s\t%s\t%s\n' "$step" "$result" "$seconds" "$detail" >>"$out/results.tsv"
  case "$result" in
    PASS) passed=$((passed + 1)) ;;
    FAIL) failed=$((failed + 1)) ;;
    SKIP) skipped=$((skipped + 1)) ;;
  esac
}

# The step functions append to this log; each starts with a header naming its step.
log="$out/run.log"

# Seconds a step may still take: its own LIMIT, or less when the run's budget is nearly spent
# (a step started just before the budget ends gets 40 s past it, so the run ends by about 8.7 min).
limit() {
  local left=$((budget + 40 - (SECONDS - started_at)))
  [ "$left" -lt 10 ] && left=10
  [ "$1" -lt "$left" ] && echo "$1" || echo "$left"
}

# step NAME FUNCTION: runs a GPU step. FUNCTION returns 0 (pass, detail in $detail), 77 (skipped,
# reason in $detail) or anything else (fail, reason in $detail). Without a GPU it is skipped unrun;
# without binaries, after the plugin failed to load, or past the budget, it fails unrun.
step() {
  local name="$1" fn="$2" t0=$SECONDS rc
  detail=""
  if [ "$gpu_count" -eq 0 ]; then
    report SKIP "$name" "skipped: no GPU" 0
    return
  fi
  if [ -n "${PP_GPU_STEPS:-}" ] && ! grep -q -E -- "$PP_GPU_STEPS" <<<"$name"; then
    report SKIP "$name" "not selected by PP_GPU_STEPS" 0
    expected_skips=$((expected_skips + 1))
    return
  fi
  if [ -z "$bin" ]; then
    report FAIL "$name" "not run: no binaries (see the bundle step)" 0
    return
  fi
  if [ "$plugin_ok" -eq 0 ] && [ "$fn" != check_plugin ] && [ "$fn" != check_libraries ]; then
    report FAIL "$name" "not run: the CUDA plugin step failed" 0
    return
  fi
  if [ $((SECONDS - started_at)) -gt "$budget" ]; then
    report FAIL "$name" "not run: past the ${budget}-second budget" 0
    return
  fi
  printf '\n==== %s ====\n' "$name" >>"$log"
  "$fn" >>"$log" 2>&1
  rc=$?
  if [ "$rc" -eq 0 ]; then
    report PASS "$name" "$detail" $((SECONDS - t0))
  elif [ "$rc" -eq 77 ] && [ "$fn" = check_mesh ] && [ "$gpu_count" -lt 2 ]; then
    # A second GPU is not there to be had: the one skip that does not fail the run.
    report SKIP "$name" "skipped: needs 2 GPUs, $gpu_count visible" $((SECONDS - t0))
    expected_skips=$((expected_skips + 1))
  elif [ "$rc" -eq 77 ]; then
    report FAIL "$name" "skipped with a GPU visible: $detail" $((SECONDS - t0))
  else
    report FAIL "$name" "$detail" $((SECONDS - t0))
  fi
}

# ---- where the binaries come from ---------------------------------------------------------------

# The visible GPUs: `nvidia-smi -L` lines "GPU 0: NVIDIA H200 (UUID: ...)".
find_gpus() {
  command -v nvidia-smi >/dev/null 2>&1 || return 0
  local listing
  listing="$(nvidia-smi -L 2>/dev/null)" || return 0
  gpu_count="$(grep -c '^GPU [0-9]*:' <<<"$listing")"
  gpu_name="$(sed -n 's/^GPU 0: \(.*\) (UUID.*/\1/p' <<<"$listing" | head -n 1)"
}

# gRPC's CMake config refuses to load without this plugin (TOOLCHAIN.md): a cheap probe for
# "the project's dependencies are installed".
have_deps() { [ -x /usr/bin/grpc_cpp_plugin ]; }

build_targets=(ppcoord ppworker ppctl gpu_ops_compare cuda_ops_test worker_nccl_transport_test
  gpu_mesh_test)

build_and_pack() {
  local stage="$build/bundle" b
  if [ "$gpu_count" -eq 0 ]; then bash "$root/scripts/setup.sh" || return 1; fi
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release || return 1
  cmake --build "$build" --target "${build_targets[@]}" pp_cuda -j "$(nproc)" || return 1
  rm -rf "$stage"
  local binaries=()
  for b in "${build_targets[@]}"; do binaries+=("$build/bin/$b"); done
  # The C and C++ runtimes and CUDA's libraries come from the machine that runs the bundle.
  bash "$root/deploy/docker/bundle-libs.sh" "$stage" "${binaries[@]}" \
    "$build/lib/libpp_cuda.so" || return 1
  strip --strip-unneeded "$stage"/bin/* "$stage"/lib/* || return 1
  mkdir -p "$(dirname "$tarball")"
  tar -C "$build" -cf - bundle | xz -9e -T0 >"$tarball.tmp" && mv "$tarball.tmp" "$tarball" ||
    return 1
  echo "packed $tarball: $(stat -c %s "$tarball") bytes; the biggest files:"
  biggest_files
  echo
}

# The bundle's biggest files, "name size-in-MB" comma-separated: what to trim when it is too big.
biggest_files() {
  find "$build/bundle" -type f -printf '%s %f\n' | sort -rn | head -n 6 |
    awk '{printf "%s%s %.1f MB", (NR > 1 ? ", " : ""), $2, $1 / 1e6}'
}

# Directories holding CUDA 13's libcudart, libcublas and NCCL on this machine (the toolkit's, or
# the pip wheels' under /usr/local/lib or /opt).
cuda_lib_path() {
  local dirs=() lib found
  for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
    found="$(ldconfig -p 2>/dev/null | awk -v l="$lib" '$1 == l {print $NF; exit}')"
    if [ -z "$found" ]; then
      found="$(find /usr/local/cuda/ /usr/local/cuda/lib64/ /usr/lib /usr/local/lib /opt \
        -name "$lib" 2>/dev/null | head -n 1 || true)"
    fi
    if [ -n "$found" ]; then dirs+=("$(dirname "$found")"); fi
  done
  local IFS=:
  echo "${dirs[*]:-}"
}

# use_bundle DIR: run the binaries of DIR/bin with the libraries of DIR/lib, then CUDA's.
use_bundle() {
  bin="$1/bin"
  export LD_LIBRARY_PATH="$1/lib:$(cuda_lib_path)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

unpack_bundle() {
  local dest
  dest="$(dirname "$tarball")"
  rm -rf "$dest/bundle"
  if command -v xz >/dev/null 2>&1; then
    xz -dc "$tarball" | tar -C "$dest" -xf - || return 1
  else  # python3's lzma reads it too
    python3 -m tarfile -e "$tarball" "$dest" || return 1
  fi
  use_bundle "$dest/bundle"
}

# The bundle's step line: its size, and a failure when it is 40 MiB or more (what is big, then).
report_bundle_size() {
  local size mib
  size="$(stat -c %s "$tarball")"
  mib="$(awk -v b="$size" 'BEGIN {printf "%.1f MiB (%d bytes)", b / 1048576, b}')"
  if [ "$size" -ge "$max_bundle_bytes" ]; then
    report FAIL bundle "$tarball is $mib, not under 40 MiB; biggest: $(biggest_files)" "$1"
    return 1
  fi
  report PASS bundle "built and packed $tarball: $mib, under 40 MiB" "$1"
}

# The first step: sets $bin. Not a GPU step: it runs (and can fail) on any machine.
prepare_binaries() {
  local t0=$SECONDS
  if [ -n "${PP_GPU_BIN:-}" ]; then
    if [ ! -x "$PP_GPU_BIN/ppctl" ]; then
      report FAIL bundle "no ppctl in PP_GPU_BIN=$PP_GPU_BIN" 0
      return 1
    fi
    bin="$PP_GPU_BIN"
    report PASS bundle "the binaries in $bin, not built" 0
  elif [ "${PP_GPU_SKIP_BUILD:-0}" != 1 ] && have_deps; then
    if ! build_and_pack >"$out/build.log" 2>&1; then
      report FAIL bundle "build or pack failed: $(tail -n 1 "$out/build.log") (log: \
$out/build.log)" $((SECONDS - t0))
      return 1
    fi
    use_bundle "$build/bundle"  # the bundle itself, as the GPU machine will run it
    report_bundle_size $((SECONDS - t0))
  elif [ -f "$tarball" ]; then
    unpack_bundle >>"$log" 2>&1 || { report FAIL bundle "cannot unpack $tarball" 0; return 1; }
    report PASS bundle "unpacked $tarball ($(stat -c %s "$tarball") bytes)" $((SECONDS - t0))
  else
    report FAIL bundle "cannot build here (no project dependencies) and no $tarball: run \
bash tests/gpu/run.sh on a developer machine first, then carry build-gpu/bundle.tar.xz" 0
    return 1
  fi
}

# ---- specs --------------------------------------------------------------------------------------

# write_spec FILE PARALLEL [STEPS]: the correctness job, small (8 steps of a 4-layer C=256 GPT,
# T=128, M=4 x B=4, generated bytes), with parallel section PARALLEL (the trainer ignores it).
write_spec() {
  cat >"$1" <<EOF
{"name": "gpu-proof",
 "model": {"vocabSize": 256, "seqLen": 128, "dModel": 256, "nHeads": 4, "nLayers": 4},
 "parallel": $2,
 "train": {"steps": ${3:-8}, "microbatches": 4, "microbatchSize": 4, "lr": 0.0003,
           "weightDecay": 0.1, "gradClip": 1.0, "seed": 1},
 "data": {"format": "generated", "generatedTokens": 262144}}
EOF
}

# The GPT-2 small shape (L12 C768 NH12 T1024, vocabulary 50304, untied head): 6 steps of M=2 x
# B=4 = 8192 tokens in PRECISION.
gpt2_layers=12 gpt2_channels=768 gpt2_seq=1024 gpt2_vocab=50304 gpt2_tokens_per_step=8192
write_gpt2_spec() {
  cat >"$1" <<EOF
{"name": "gpt2-small",
 "model": {"vocabSize": $gpt2_vocab, "seqLen": $gpt2_seq, "dModel": $gpt2_channels,
           "nHeads": 12, "nLayers": $gpt2_layers},
 "parallel": {"pipeline": 1, "schedule": "gpipe"},
 "train": {"steps": 6, "microbatches": 2, "microbatchSize": 4, "lr": 0.0006, "seed": 1,
           "precision": "$2"},
 "data": {"format": "generated", "generatedTokens": 262144}}
EOF
}

# ---- loss files ---------------------------------------------------------------------------------

# ppctl up's losses: its job store's table steps, as "STEP LOSS" lines (repr: the exact double).
db_losses() {
  python3 - "$1" "$2" <<'PY'
import sqlite3, sys
db = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
rows = db.execute("SELECT step, loss FROM steps ORDER BY step").fetchall()
with open(sys.argv[2], "w") as out:
    for step, loss in rows:
        out.write(f"{step} {loss!r}\n")
PY
}

# compare_losses TOLERANCE GOT WANT: every step's loss, bitwise (TOLERANCE 0) or within
# TOLERANCE relative. Prints both columns; the last line says what differs.
compare_losses() {
  python3 - "$@" <<'PY'
import sys
tolerance, got_path, want_path = float(sys.argv[1]), sys.argv[2], sys.argv[3]
def read(path):
    with open(path) as f:
        return {int(s): float(l) for s, l in (line.split() for line in f if line.strip())}
got, want = read(got_path), read(want_path)
if not want or sorted(got) != sorted(want):
    print(f"steps differ: {sorted(got)} vs {sorted(want)}")
    sys.exit(1)
worst = 0.0
for step in sorted(want):
    rel = abs(got[step] - want[step]) / max(abs(want[step]), 1e-300)
    worst = max(worst, rel)
    print(f"step {step}: {got[step]!r}  {want[step]!r}  rel {rel:.3e}")
ok = all(got[s] == want[s] for s in want) if tolerance == 0 else worst <= tolerance
what = "bitwise equal" if tolerance == 0 else f"within {tolerance:g}"
print(f"{len(want)} steps, max rel {worst:.3e}: {what if ok else 'NOT ' + what}")
sys.exit(0 if ok else 1)
PY
}

# ---- the GPU steps: tests/gpu/steps.sh ------------------------------------------------------
source "$root/tests/gpu/steps.sh"

# ---- the run ------------------------------------------------------------------------------------

main() {
  find_gpus
  echo "run.sh: $gpu_count GPU(s) visible${gpu_name:+ ($gpu_name)}; logs in $out" >>"$log"
  prepare_binaries
  step "GPU and CUDA libraries" check_libraries
  step "CUDA plugin loads" check_plugin
  step "ops vs CPU fp32" check_ops_fp32
  step "ops vs CPU bf16" check_ops_bf16
  step "compute-sanitizer memcheck" check_memcheck
  step "compute-sanitizer racecheck" check_racecheck
  step "compute-sanitizer initcheck" check_initcheck
  step "ppctl train --device=$device twice, bitwise" check_train_twice
  step "ppctl train --device=$device vs --device=cpu, 1e-4 relative" check_train_cpu
  step "ppctl up --workers=1 --device=$device, bitwise the trainer" check_up1
  step "ppctl up --workers=2 --device=$device 1f1b, bitwise the trainer" check_up2_1f1b
  step "ppctl up --workers=2 --device=$device zb-v, bitwise the trainer" check_up2_zbv
  step "NCCL transport test" check_nccl
  step "gpu_mesh_test" check_mesh
  step "throughput fp32" check_fp32
  step "throughput bf16" check_bf16
  local count="$passed passed, $failed failed, $skipped skipped"
  echo "$count" >>"$out/summary.txt"
  echo "$count"
  [ "$failed" -eq 0 ] || return 1
  # With a GPU, a skip means something did not run that should have.
  [ "$gpu_count" -eq 0 ] || [ "$skipped" -eq "$expected_skips" ]
}

main
