#!/usr/bin/env bash
# promtool on deploy/prometheus: the local config, both rule files, and the rule unit tests.
# Usage: promtool_checks.sh REPO
set -euo pipefail
dir="$1/deploy/prometheus"
if ! command -v promtool >/dev/null; then
  echo "promtool_checks: promtool not found: run scripts/setup.sh (Debian package prometheus)" >&2
  exit 1
fi
cd "$dir"
promtool check config prometheus.yml
promtool check rules recording-rules.yml alert-rules.yml
promtool test rules rules-test.yml
