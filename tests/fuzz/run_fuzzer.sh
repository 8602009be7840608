#!/usr/bin/env bash
# Runs one libFuzzer harness of tests/fuzz for a bounded time on a scratch copy of its seed corpus
# and prints one line: harness, executions, coverage, crashes. Exit 0: no crash; 1: a crash (its
# input is kept in tests/fuzz/artifacts/ and printed as base64); 77: no harness binary (clang or
# libFuzzer absent, build-fuzz not built): skipped.
#   run_fuzzer.sh NAME SECONDS [BIN_DIR]
# BIN_DIR defaults to $PP_FUZZ_BIN_DIR, then $PP_FUZZ_DEFAULT_BIN_DIR (ctest: <source>/build-fuzz/bin).
set -uo pipefail
name=$1
seconds=$2
bin_dir=${3:-${PP_FUZZ_BIN_DIR:-${PP_FUZZ_DEFAULT_BIN_DIR:-build-fuzz/bin}}}
here=$(cd "$(dirname "$0")" && pwd)
bin="$bin_dir/${name}_fuzzer"
if [ ! -x "$bin" ]; then
  echo "fuzz $name: skipped (no $bin; make fuzz builds it with clang++ and libFuzzer)"
  exit 77
fi
case $name in
  job_spec) max_len=16384 ;;
  checkpoint) max_len=8192 ;;
  *) max_len=4096 ;;
esac
dict=()
[ -f "$here/$name.dict" ] && dict=(-dict="$here/$name.dict")
scratch=$(mktemp -d "${TMPDIR:-/tmp}/pp-fuzz-$name.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/corpus" "$scratch/artifacts"
log="$scratch/log"
"$bin" -max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=2048 -timeout=10 -error_exitcode=1 \
  -max_len=$max_len -use_value_profile=1 "${dict[@]}" -print_final_stats=1 \
  -artifact_prefix="$scratch/artifacts/" "$scratch/corpus" "$here/corpus/$name" >"$log" 2>&1
rc=$?
execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | tail -1 | grep -o '[0-9]*$')
cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$')
ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$')
corpus=$(ls "$scratch/corpus" | wc -l)
crashes=$(ls "$scratch/artifacts" | wc -l)
echo "fuzz $name: ${seconds}s, ${execs:-?} executions, cov ${cov:-?}, ft ${ft:-?}," \
  "$corpus new inputs, $crashes crashes (exit $rc)"
if [ $rc -ne 0 ] || [ "$crashes" -ne 0 ]; then
  tail -60 "$log"
  mkdir -p "$here/artifacts"
  for f in "$scratch"/artifacts/*; do
    [ -f "$f" ] || continue
    cp "$f" "$here/artifacts/$name-$(basename "$f")"
    echo "input $here/artifacts/$name-$(basename "$f") (base64):"
    base64 -w0 "$f"
    echo
  done
  exit 1
fi
exit 0
