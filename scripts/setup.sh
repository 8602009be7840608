#!/usr/bin/env bash
# Installs the Debian packages the project builds and tests with. Idempotent: a no-op when all
# are present. Runs as root (CI, containers) or through sudo.
set -euo pipefail
PACKAGES=(
  # ocl-icd-opencl-dev: only Recommended by libdnnl-dev, but dnnl-config.cmake requires OpenCL, so
  # without it (--no-install-recommends) configuring fails on a fresh machine.
  cmake ninja-build pkg-config g++
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler grpc-proto
  libabsl-dev prometheus-cpp-dev libgtest-dev libgmock-dev libbenchmark-dev
  libgloo-dev libopenblas-dev libdnnl-dev ocl-icd-opencl-dev libsqlite3-dev
  libssl-dev openssl prometheus python3-venv iproute2
  clang libclang-rt-14-dev
  # `ppctl report`'s test renders the page in headless Chromium (tests/client/report_chromium_test.py).
  chromium fonts-dejavu-core
)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "setup: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
