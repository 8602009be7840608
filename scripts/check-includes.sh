#!/usr/bin/env bash
# Fails (exit 1, naming file:line and the rule) on an #include "..." that points up the layering.
# Layers, lowest first: common/ (what every daemon and tool shares) < kernels/ < worker/<module>/
# (ppworker) and coordinator/plan/ (the planner) < coordinator/ (ppcoord) < client/ (ppctl).
# Code may only use what sits below it, so each part builds, tests and reads without the parts
# above or beside it: the two daemons meet only in common/ and the generated pp/v1/ protos, and
# ppctl enters the planner by its front door (coordinator/plan/plan.h) alone. tests/ and bench/
# may include anything.
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
    if (top !~ /^(common|kernels|worker|coordinator|client|tests|bench)$/) return ""  # not ours
    if (file ~ /^common\//) {
      if (top != "common") return "common/ may include only common/"
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
      } else if (top != "client" && top != "common" && inc !~ /^worker\/trainer\//) {
        return "client/ may include only client/, common/, worker/trainer/, coordinator/plan/plan.h"
      }
    }
    return ""
  }
  /^[ \t]*#[ \t]*include[ \t]*"/ {
    inc = $0; sub(/^[^"]*"/, "", inc); sub(/".*/, "", inc)
    rule = broken(FILENAME, inc)
    if (rule != "") { printf "%s:%d: #include \"%s\": %s\n", FILENAME, FNR, inc, rule; ++bad }
  }
  END {
    if (bad > 0) { printf "%d include(s) point up the layering\n", bad; exit 1 }
  }' "${sources[@]}"
