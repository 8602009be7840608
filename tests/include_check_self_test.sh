#!/usr/bin/env bash
# Checks scripts/check-includes.sh on small trees it builds: each rule fires where it should and
# nowhere else. Usage: include_check_self_test.sh PATH_TO_check-includes.sh
set -euo pipefail
check="$1"
tree="$(mktemp -d)"
trap 'rm -rf "$tree"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

mkdir -p "$tree"/{program,common,worker/executor,coordinator/plan,client}
echo '#include "program/ir.h"' > "$tree/common/ok.h"
echo '#include "program/ir.h"' > "$tree/worker/executor/ok.cc"
printf '%s\n' '// pp::v1::SEND_GRAD in a comment is fine' > "$tree/worker/executor/comment.cc"
printf '%s\n' 'int k = pp::v1::FORWARD;' > "$tree/program/proto.cc"
bash "$check" "$tree" > "$tree/out" || fail "a clean tree was refused: $(cat "$tree/out")"

echo '#include "common/job_spec.h"' > "$tree/program/up.h"
printf '%s\n' 'if (kind == pp::v1::RECV_GRAD) {}' > "$tree/worker/executor/copy.cc"
printf '%s\n' 'x = pp::v1::BACKWARD_INPUT;' > "$tree/coordinator/plan/copy.cc"
if bash "$check" "$tree" > "$tree/out"; then fail "a tree breaking the rules passed"; fi
grep -q 'program/up.h:1: #include "common/job_spec.h": program/ may include only program/' \
  "$tree/out" || fail "program/ including common/ not named: $(cat "$tree/out")"
grep -q 'worker/executor/copy.cc:1: names a pp.v1 action kind' "$tree/out" ||
  fail "the executor naming an action kind not named: $(cat "$tree/out")"
grep -q 'coordinator/plan/copy.cc:1: names a pp.v1 action kind' "$tree/out" ||
  fail "the planner naming an action kind not named: $(cat "$tree/out")"
grep -q '3 line(s) break the layering' "$tree/out" || fail "wrong count: $(cat "$tree/out")"
echo "include_check_self_test: ok"
