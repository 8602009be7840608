# The GPU steps of tests/gpu/run.sh, sourced by it: one check_* function per step, setting
# $detail and returning 0 (pass), 77 (skip) or else (fail), its output going to run.log; run.sh's
# `step` reports them. They use run.sh's variables (bin, work, device, gpu_count, gpu_name,
# plugin_ok) and helpers (limit, write_spec, db_losses, compare_losses).
# shellcheck shell=bash
# ---- the GPU steps ------------------------------------------------------------------------------

# failure RC LOG: why a command failed, for a step's detail: its exit code or time-out, and the
# last line it wrote.
failure() {
  local last
  last="$(grep -v '^[[:space:]]*$' "$2" | tail -n 1)"
  case "$1" in
    124 | 137) echo "timed out${last:+; last: $last}" ;;
    *) echo "exited $1${last:+: $last}" ;;
  esac
}

check_libraries() {
  nvidia-smi -L
  local plugin="${PP_CUDA_PLUGIN:-$bin/../lib/libpp_cuda.so}" lib path found=()
  if [ ! -f "$plugin" ]; then
    detail="$gpu_count GPU(s), $gpu_name; no CUDA plugin at $plugin"
    return 1
  fi
  ldd "$plugin"
  for lib in libcudart libcublas libcublasLt libnccl; do
    path="$(ldd "$plugin" | awk -v l="$lib" 'index($1, l ".so") == 1 {print $1 " -> " $3}')"
    if [ -z "$path" ] || [[ "$path" == *"not found"* ]]; then
      detail="$gpu_name; $plugin: $lib not found (ldd)"
      return 1
    fi
    found+=("$path")
  done
  local IFS=,
  detail="$gpu_count GPU(s), $gpu_name; ${found[*]}"
}

check_plugin() {
  write_spec "$work/tiny.json" '{"pipeline": 1, "schedule": "gpipe"}' 1
  if timeout -k 5 "$(limit 60)" "$bin/ppctl" train "$work/tiny.json" --device="$device" \
    2>"$work/plugin.err"; then
    plugin_ok=1
    detail="ppctl train --device=$device ran a step"
    return 0
  fi
  cat "$work/plugin.err"
  detail="ppctl train --device=$device: $(grep -v '^pp:' "$work/plugin.err" | tail -n 1)"
  return 1
}

# One run of gpu_ops_compare --bench, read by both ops steps.
run_ops_compare() {
  [ -f "$work/ops.txt" ] && return 0
  timeout -k 5 "$(limit 240)" "$bin/gpu_ops_compare" --bench >"$work/ops.txt" 2>&1
  echo $? >"$work/ops.rc"
}

# check_ops PRECISION: the table's rows of that precision (bf16 rows start with "bf16 ").
check_ops() {
  run_ops_compare
  cat "$work/ops.txt"
  local rc
  rc="$(cat "$work/ops.rc")"
  if [ "$rc" -eq 77 ]; then detail="gpu_ops_compare exited 77 (no device)"; return 77; fi
  local rows n bad worst
  rows="$(awk -v p="$1" '/ (ok|FAIL)$/ && $1 != "op" {
    bf16 = ($1 == "bf16"); if ((p == "bf16") != bf16) next
    n++; if ($NF == "FAIL") bad++; if ($(NF-1) + 0 > worst) worst = $(NF-1) + 0 }
    END { printf "%d %d %.3e", n, bad, worst }' "$work/ops.txt")"
  read -r n bad worst <<<"$rows"
  if [ "$n" -eq 0 ]; then
    detail="gpu_ops_compare exited $rc with no $1 rows: $(tail -n 1 "$work/ops.txt")"
    return 1
  fi
  detail="$n outputs, max rel error $worst, $bad above 1e-4"
  if [ "$1" = bf16 ]; then
    detail+="; $(grep -o 'relative difference [^ ]* (must exceed 1e-4)' "$work/ops.txt")"
  fi
  [ "$bad" -eq 0 ] || return 1
  # Exit 1 with every row of this precision fine: the other precision's rows failed, not these.
  [ "$rc" -eq 0 ] || { [ "$rc" -eq 1 ] && grep -q ' FAIL$' "$work/ops.txt"; } && return 0
  detail+="; gpu_ops_compare $(failure "$rc" "$work/ops.txt")"
  return 1
}
check_ops_fp32() { check_ops fp32; }
check_ops_bf16() { check_ops bf16; }

find_sanitizer() {
  local s
  for s in "$(command -v compute-sanitizer 2>/dev/null)" /usr/local/cuda/bin/compute-sanitizer \
    /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
    if [ -n "$s" ] && [ -x "$s" ]; then echo "$s"; return 0; fi
  done
  return 1
}

# sanitize TOOL: cuda_ops_test (and gpu_ops_compare for memcheck, or all with
# PP_GPU_SANITIZE_ALL=1) under compute-sanitizer --tool TOOL; any report fails it.
sanitize() {
  local tool="$1" sanitizer programs=("$bin/cuda_ops_test") p rc
  if ! sanitizer="$(find_sanitizer)"; then
    detail="compute-sanitizer not found (PATH, /usr/local/cuda)"
    return 1
  fi
  if [ "$tool" = memcheck ] || [ "${PP_GPU_SANITIZE_ALL:-0}" = 1 ]; then
    programs+=("$bin/gpu_ops_compare")
  fi
  for p in "${programs[@]}"; do
    timeout -k 5 "$(limit 150)" "$sanitizer" --tool "$tool" --error-exitcode 86 "$p" \
      >"$work/sanitize.txt" 2>&1
    rc=$?
    cat "$work/sanitize.txt"
    if [ "$rc" -ne 0 ]; then
      detail="$(basename "$p") $(failure "$rc" "$work/sanitize.txt")$(sanitizer_finding)"
      return 1
    fi
  done
  # memcheck and initcheck end with "ERROR SUMMARY: 0 errors", racecheck with "RACECHECK SUMMARY:
  # 0 hazards displayed (0 errors, 0 warnings)".
  detail="$(for p in "${programs[@]}"; do basename "$p"; done | paste -sd, -): \
$(grep -m 1 -E '(ERROR|RACECHECK) SUMMARY' "$work/sanitize.txt" | sed 's/^=* *//')"
  return 0
}

# The first report in $work/sanitize.txt ("; first: Invalid __global__ read ..."), if any.
sanitizer_finding() {
  local first
  first="$(grep -E '^========= [A-Za-z]' "$work/sanitize.txt" |
    grep -v -E 'COMPUTE-SANITIZER|ERROR SUMMARY' | head -n 1 | sed 's/^=* *//')"
  [ -z "$first" ] || echo "; first: $first"
}
check_memcheck() { sanitize memcheck; }
check_racecheck() { sanitize racecheck; }
check_initcheck() { sanitize initcheck; }

# train_losses NAME DEVICE SPEC: ppctl train, its exact losses in $work/NAME.losses.
train_losses() {
  timeout -k 5 "$(limit 120)" "$bin/ppctl" train "$3" --device="$2" \
    --losses="$work/$1.losses" >"$work/$1.out" 2>&1
  local rc=$?
  cat "$work/$1.out"
  [ "$rc" -eq 0 ] || detail="ppctl train --device=$2 $(failure "$rc" "$work/$1.out")"
  return "$rc"
}

# compare NAME TOLERANCE GOT WANT: detail says how they compare.
compare() {
  compare_losses "$2" "$3" "$4" >"$work/$1.cmp" 2>&1
  local rc=$?
  cat "$work/$1.cmp"
  detail="$(tail -n 1 "$work/$1.cmp")"
  return "$rc"
}

check_train_twice() {
  write_spec "$work/spec.json" '{"pipeline": 1, "schedule": "gpipe"}'
  train_losses gpu1 "$device" "$work/spec.json" || return 1
  train_losses gpu2 "$device" "$work/spec.json" || return 1
  compare twice 0 "$work/gpu2.losses" "$work/gpu1.losses"
}

check_train_cpu() {
  if [ ! -f "$work/gpu1.losses" ]; then
    detail="no GPU trainer losses (the step before failed)"
    return 1
  fi
  train_losses cpu cpu "$work/spec.json" || return 1
  compare vs-cpu 1e-4 "$work/gpu1.losses" "$work/cpu.losses"
}

# up_vs_trainer NAME WORKERS PARALLEL: ppctl up on the GPU, its losses bitwise the GPU trainer's.
up_vs_trainer() {
  if [ ! -f "$work/gpu1.losses" ]; then
    detail="no GPU trainer losses (its step failed)"
    return 1
  fi
  write_spec "$work/$1.json" "$3"
  # 8 steps of this model take seconds; a run still going after the limit is hung: its processes'
  # stacks go to run.log before it is stopped.
  local rc lines=20
  # With two or more ranks NCCL says how each communicator came up (INFO; its WARN otherwise).
  local nccl_debug="$NCCL_DEBUG"
  [ "$2" -lt 2 ] || nccl_debug="${PP_GPU_NCCL_DEBUG:-INFO}"
  run_or_dump_stacks "$(limit 75)" "$work/$1" "$work/$1.out" env NCCL_DEBUG="$nccl_debug" \
    NCCL_DEBUG_SUBSYS="${NCCL_DEBUG_SUBSYS:-INIT,BOOTSTRAP,P2P}" "$bin/ppctl" up --workers="$2" --device="$device" --job="$work/$1.json" --data_dir="$work/$1"
  rc=$?
  cat "$work/$1.out"
  [ "$rc" -eq 0 ] || lines=150
  tail -n "$lines" "$work/$1"/ppctl-up/*.log 2>/dev/null
  # The daemons' whole logs come back with $OUT.
  mkdir -p "$out/$1" && cp "$work/$1"/ppctl-up/*.log "$out/$1/" 2>/dev/null
  if [ "$rc" -ne 0 ]; then
    detail="ppctl up $(failure "$rc" "$work/$1.out")"
    return 1
  fi
  if ! db_losses "$work/$1/ppcoord.db" "$work/$1.losses"; then
    detail="cannot read the losses from $work/$1/ppcoord.db"
    return 1
  fi
  compare "$1" 0 "$work/$1.losses" "$work/gpu1.losses"
}
# run_or_dump_stacks LIMIT DIR LOG COMMAND...: COMMAND (output to LOG), stopped with SIGTERM after
# LIMIT seconds (exit 124), but first the stacks of every ppworker whose command line names DIR
# (its workers) are written to stdout. Returns COMMAND's exit code.
run_or_dump_stacks() {
  local lim="$1" dir="$2" log="$3" pid waited=0
  shift 3
  "$@" >"$log" 2>&1 &
  pid=$!
  while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt "$lim" ]; do
    sleep 1
    waited=$((waited + 1))
  done
  if ! kill -0 "$pid" 2>/dev/null; then
    wait "$pid"
    return
  fi
  echo "---- still running after ${lim} s: the stacks of its processes"
  nvidia-smi 2>&1 | tail -n 12
  local p
  for p in $(pgrep -f -- "ppworker.*$dir/"); do dump_stacks "$p"; done
  kill -TERM "$pid"
  for waited in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15; do
    kill -0 "$pid" 2>/dev/null || break
    sleep 1
  done
  kill -KILL "$pid" 2>/dev/null
  wait "$pid"
  return 124
}

# dump_stacks PID: every thread's stack, with gdb or cuda-gdb when the machine has one (frames in
# our stripped binaries show as addresses: the process's maps of them follow, for addr2line on the
# unstripped build), and the kernel's view of each thread (wchan, and stack where readable).
dump_stacks() {
  local pid="$1" debugger="" t
  echo "---- pid $pid: $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c 1-200)"
  for debugger in gdb /usr/local/cuda/bin/cuda-gdb cuda-gdb ""; do
    [ -z "$debugger" ] || command -v "$debugger" >/dev/null 2>&1 && break
  done
  if [ -n "$debugger" ]; then
    timeout -k 5 40 "$debugger" -p "$pid" -batch -nx -ex 'set pagination off' \
      -ex 'thread apply all bt 25' 2>&1 | grep -E '^(Thread|#)' | head -n 400
    grep -E 'ppworker|ppcoord|libpp_cuda' "/proc/$pid/maps" 2>/dev/null | grep ' r-xp '
  else
    echo "(no gdb or cuda-gdb here)"
  fi
  for t in /proc/"$pid"/task/*; do
    echo "thread ${t##*/} $(cat "$t/comm" 2>/dev/null) wchan=$(cat "$t/wchan" 2>/dev/null) \
syscall=$(cut -d' ' -f1 "$t/syscall" 2>/dev/null)"
    head -n 8 "$t/stack" 2>/dev/null | sed 's/^/    /'
  done
}

check_up1() { up_vs_trainer up1 1 '{"pipeline": 1, "schedule": "1f1b"}'; }
check_up2_1f1b() { up_vs_trainer up2-1f1b 2 '{"pipeline": 2, "schedule": "1f1b"}'; }
check_up2_zbv() { up_vs_trainer up2-zbv 2 '{"pipeline": 2, "chunks": 2, "schedule": "zb-v"}'; }

# run_test BINARY LIMIT: a test binary; its exit code is the step's (77: skipped).
run_test() {
  timeout -k 5 "$(limit "$2")" "$bin/$1" >"$work/$1.out" 2>&1
  local rc=$?
  cat "$work/$1.out"
  detail="$(failure "$rc" "$work/$1.out")"
  [ "$rc" -eq 0 ] || [ "$rc" -eq 77 ] || return "$rc"
  detail="$(grep -v '^[[:space:]]*$' "$work/$1.out" | tail -n 1)"
  return "$rc"
}
check_nccl() { run_test worker_nccl_transport_test 120; }
check_mesh() { run_test gpu_mesh_test 180; }

# Dense peaks (TFLOP/s, no sparsity) from NVIDIA's datasheets: "fp32 bf16", by device name.
peak_tflops() {
  case "$gpu_name" in
    *H200*NVL* | *H100*NVL*) echo "60 835" ;;
    *H100*PCIe*) echo "51 756" ;;
    *H200* | *H100*) echo "67 989" ;;
    *A100*) echo "19.5 312" ;;
    *) echo "" ;;
  esac
}

# throughput PRECISION: tokens/s over steps 3..6 (1 and 2 warm up), model FLOPs per token
# 6 x (12 L C^2 + V C) + 12 L T C (matmul weights, the head included; attention's T x T counted
# whole), and MFU against the device's dense peak of that precision.
throughput() {
  write_gpt2_spec "$work/gpt2-$1.json" "$1"
  timeout -k 5 "$(limit 240)" "$bin/ppctl" train "$work/gpt2-$1.json" --device="$device" \
    >"$work/gpt2-$1.out" 2>&1
  local rc=$?
  cat "$work/gpt2-$1.out"
  if [ "$rc" -ne 0 ]; then
    detail="ppctl train --device=$device $(failure "$rc" "$work/gpt2-$1.out")"
    return 1
  fi
  local peaks peak
  peaks="$(peak_tflops)"
  peak="$( [ -n "$peaks" ] && { [ "$1" = bf16 ] && echo "${peaks#* }" || echo "${peaks% *}"; })"
  detail="$(awk -v L=$gpt2_layers -v C=$gpt2_channels -v T=$gpt2_seq -v V=$gpt2_vocab \
    -v tok=$gpt2_tokens_per_step -v peak="$peak" -v name="$gpu_name" -v p="$1" '
    $1 == "step" && split($2, s, "/") == 2 && s[1] >= 3 { for (i = 1; i < NF; i++)
      if ($(i + 1) == "s" && $i ~ /^[0-9.]+$/) { sec += $i; n++ } }
    END { if (n == 0 || sec <= 0) { print "no step times"; exit 1 }
      tps = n * tok / sec; flops = 6 * (12 * L * C * C + V * C) + 12 * L * T * C
      tf = tps * flops / 1e12
      mfu = peak == "" ? "unknown peak for " name \
                       : sprintf("MFU %.1f%% of %s TFLOP/s dense %s", 100 * tf / peak, peak, p)
      printf "GPT-2 small L12 C768 T1024 %s: %.0f tokens/s, %.1f TFLOP/s, %s", p, tps, tf, mfu }' \
    "$work/gpt2-$1.out")" || return 1
  if [ "$1" = fp32 ] && [ -f "$work/ops.txt" ]; then
    detail+="; ops stack (gpu_ops_compare --bench): $(grep -o '[0-9]* tokens/s' "$work/ops.txt")"
  fi
}
check_fp32() { throughput fp32; }
check_bf16() { throughput bf16; }
