#!/usr/bin/env bash
# Fails (exit 1, naming file:line and the rule) on an #include "..." that points up the layering,
# and on code that reads pipeline actions past the program module.
# Layers, lowest first: program/ (the pipeline program: actions, their rules, messages, the
# schedule table) < common/ (what every daemon and tool shares) < kernels/ < worker/<module>/
# (ppworker) and coordinator/plan/ (the planner) < coordinator/ (ppcoord) < client/ (ppctl).
# Code may only use what sits below it, so each part builds, tests and reads without the parts
# above or beside it: the two daemons meet only in program/, common/ and the generated pp/v1/
# protos, and ppctl enters the planner by its front door (coordinator/plan/plan.h) alone (and of
# the worker, uses only the reference trainer and the data reader, for local runs). tests/
# and bench/ may include anything.
# One contract for actions: outside program/ (and tests/, bench/), no code names the pp.v1 action
# kinds (FORWARD, SEND_GRAD, ...); it converts with program/proto.h and asks program/rules.h and
# program/message.h, so the planner and the worker cannot grow their own copies of the rules.
# Usage: check-includes.sh [tree root, default: this script's repository]
set -euo pipefail
root="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
cd "$root"

mapfile -t sources < <(find . \( -path './build*' -o -path ./.git \) -prune -o -type f \
  \( -name '*.h' -o -name '*.cc' -o -name '*.cu' -o -name '*.cuh' \) -print | sed 's|^\./||' | sort)

[ ${#sources[@]} -gt 0 ] || exit 0

awk '
  # The rule `file` breaks by including `inc`; "" when none.
  function broken(file, inc,    top) {
    if (inc ~ /^pp\/v1\//) return ""  # generated protos: allowed everywhere
    top = inc; sub(/\/.*/, "", top)
    if (top !~ /^(program|common|kernels|worker|coordinator|client|tests|bench)$/) return ""  # not ours
    if (file ~ /^program\//) {
      if (top != "program") return "program/ may include only program/"
    }
    if (top == "program") return ""  # the lowest layer: everyone may use it
    if (file ~ /^common\//) {
      if (top != "common") return "common/ may include only common/ and program/"
    } else if (file ~ /^kernels\//) {
      if (top != "kernels" && top != "common")
        return "kernels/ may include only kernels/ and common/"
    } else if (file ~ /^coordinator\/plan\//) {
      if (inc !~ /^coordinator\/plan\// && top != "common")
        return "coordinator/plan/ may include only coordinator/plan/ and common/"
    } else if (file ~ /^worker\//) {
      if (top != "worker" && top != "kernels" && top != "common")
        return "worker/ may include only worker/, kernels/ and common/"
    } else if (file ~ /^coordinator\//) {
      if (top != "coordinator" && top != "common")
        return "coordinator/ may include only coordinator/ and common/"
    } else if (file ~ /^client\//) {
      if (inc ~ /^coordinator\//) {
        if (inc != "coordinator/plan/plan.h")
          return "client/ may include from coordinator/ only coordinator/plan/plan.h"
      } else if (top != "client" && top != "common" && inc !~ /^worker\/(trainer|data)\//) {
        return "client/ may include only client/, common/, worker/trainer/, worker/data/, coordinator/plan/plan.h"
      }
    }
    return ""
  }
  # Lines (outside comments) naming a pp.v1 action kind, outside program/, tests/ and bench/.
  FILENAME !~ /^(program|tests|bench)\// && $0 !~ /^[ \t]*\/\// &&
  $0 ~ /pp::v1::(FORWARD|BACKWARD|BACKWARD_INPUT|BACKWARD_WEIGHT|SEND_ACTIVATION|RECV_ACTIVATION|SEND_GRAD|RECV_GRAD)([^A-Z_]|$)/ {
    printf "%s:%d: names a pp.v1 action kind: read actions with program/proto.h and program/rules.h\n", FILENAME, FNR
    ++bad
  }
  /^[ \t]*#[ \t]*include[ \t]*"/ {
    inc = $0; sub(/^[^"]*"/, "", inc); sub(/".*/, "", inc)
    rule = broken(FILENAME, inc)
    if (rule != "") { printf "%s:%d: #include \"%s\": %s\n", FILENAME, FNR, inc, rule; ++bad }
  }
  END {
    if (bad > 0) { printf "%d line(s) break the layering\n", bad; exit 1 }
  }' "${sources[@]}"
