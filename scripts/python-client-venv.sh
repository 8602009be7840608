#!/usr/bin/env bash
# Makes a fresh virtual environment and installs the Python client into it as a user would:
# `pip install ./client/python[tensorboard,pandas]`, the build's own grpcio-tools (stubs generated
# from proto/) and every dependency pinned by a constraints file. Prints the venv's path.
# Idempotent and safe to run concurrently: a stamp holds the pins and a hash of client/python and
# proto/; while both match, the venv is kept; otherwise it is made anew (never upgraded in place).
# Network: PyPI through pip, only when the venv is (re)made.
# Usage: scripts/python-client-venv.sh [VENV_DIR]   (default: <repo>/build/venv-client)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
venv="${1:-$repo/build/venv-client}"

# The client's runtime, build and extras' dependencies, pinned (grpcio, grpcio-tools and protobuf
# as in scripts/test-venv.sh).
PINS=(
  grpcio==1.85.1
  grpcio-tools==1.85.1
  protobuf==7.36.2
  setuptools==84.2.1
  tensorboard==2.21.0
  tensorboard-data-server==0.7.2
  absl-py==2.5.1
  Markdown==3.11.3
  numpy==2.4.6
  packaging==26.4
  pillow==13.0.0
  Werkzeug==3.1.9
  MarkupSafe==3.0.4
  pandas==3.1.1
  python-dateutil==4.0.0
  tzdata==2026.6
  typing_extensions==4.16.0
)
wanted="$(printf '%s\n' "${PINS[@]}")"
# What the install is made from: the package's sources (not what building it leaves there) and
# the protos its stubs come from.
sources="$(cd "$repo" && find client/python proto -type f \
  -not -path 'client/python/build/*' -not -path 'client/python/src/pipeline_client/_pb/*' \
  -not -path '*/__pycache__/*' -not -path '*.egg-info/*' -not -path 'client/python/tests/*' \
  -not -path 'client/python/examples/*' -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-64)"
stamp_text="$(printf '%s\nsources %s\n' "$wanted" "$sources")"

mkdir -p "$(dirname "$venv")"
venv="$(cd "$(dirname "$venv")" && pwd)/$(basename "$venv")"
stamp="$venv/.pipeline-client"
# The lock lives outside the venv (rebuilt whole) and outside the repo (no untracked files); the
# in-tree build of client/python is shared, so every venv of this script takes the same lock.
exec 9>"${TMPDIR:-/tmp}/pp-python-client-venv.lock"
flock 9
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$stamp_text" ] && [ -x "$venv/bin/python" ]; then
  echo "$venv"
  exit 0
fi
python=/usr/bin/python3
[ -x "$python" ] || python="$(command -v python3)"
rm -rf "$venv"
"$python" -m venv "$venv" >&2
constraints="$venv/constraints.txt"
printf '%s\n' "${PINS[@]}" >"$constraints"
# PIP_CONSTRAINT (not -c) so that the isolated build environment (setuptools, grpcio-tools) is
# pinned as well.
PIP_CONSTRAINT="$constraints" "$venv/bin/pip" install --quiet --disable-pip-version-check \
  --only-binary=:all: "$repo/client/python[tensorboard,pandas]" >&2
printf '%s\n' "$stamp_text" >"$stamp"
echo "$venv"
