#!/usr/bin/env bash
# GPU check of the CUDA backend: compares every CUDA op with the CPU op on random data and prints
# a table (max relative error per output), then cuBLAS sgemm throughput and the tokens/s of a
# GPT-2 small shaped forward + backward made of the ops. Exit status 0 when every op is within
# tolerance. Extra arguments go to gpu_ops_compare (see its --help).
#
#   bash tests/gpu/run.sh
#
# Two machines, one command:
# - Where the project's Debian dependencies are installed (a developer machine), it builds
#   build-gpu/ (Release), then packs build-gpu/bundle/: gpu_ops_compare plus the non-system
#   libraries it loads, except CUDA's own. Without a GPU the comparison reports "skipped".
# - A lent GPU machine has CUDA but none of the project's dependencies and no network, so it
#   cannot build: there the script runs the bundle, which has to travel with the working tree
#   (the device tool's carry: ["build-gpu/bundle"]) after a run on the developer machine.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${PP_GPU_BUILD:-$root/build-gpu}"
bundle="$build/bundle"

have_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }
# gRPC's CMake config refuses to load without this plugin (TOOLCHAIN.md): a cheap probe for
# "the project's dependencies are installed".
have_deps() { [ -x /usr/bin/grpc_cpp_plugin ]; }

build_and_pack() {
  if ! have_gpu; then bash "$root/scripts/setup.sh"; fi
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$build" --target gpu_ops_compare -j "$(nproc)"
  rm -rf "$bundle"
  mkdir -p "$bundle/lib"
  cp "$build/bin/gpu_ops_compare" "$bundle/"
  # the C and C++ runtimes and CUDA's libraries come from the machine that runs the bundle
  local system='libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s'
  system+='|libcudart|libcublas|libcublasLt'
  ldd "$build/bin/gpu_ops_compare" | awk '/=> \// {print $3}' | grep -v -E "/($system)\.so" |
    while read -r lib; do cp -L "$lib" "$bundle/lib/"; done
  echo "run.sh: packed $bundle ($(du -sh "$bundle" | cut -f1))"
}

# Directories holding CUDA 13's libcudart and libcublas on this machine.
cuda_lib_path() {
  local dirs=() lib
  for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13; do
    local found
    found="$(ldconfig -p 2>/dev/null | awk -v l="$lib" '$1 == l {print $NF; exit}')"
    if [ -z "$found" ]; then
      found="$(find /usr/local/cuda/ /usr/local/cuda/lib64/ /usr/lib /opt -name "$lib" 2>/dev/null |
               head -n 1 || true)"
    fi
    if [ -n "$found" ]; then dirs+=("$(dirname "$found")"); fi
  done
  local IFS=:
  echo "${dirs[*]:-}"
}

if have_deps; then
  build_and_pack
  binary="$build/bin/gpu_ops_compare"
elif [ -x "$bundle/gpu_ops_compare" ]; then
  echo "run.sh: no build dependencies here; running the bundle built elsewhere"
  binary="$bundle/gpu_ops_compare"
  export LD_LIBRARY_PATH="$bundle/lib:$(cuda_lib_path)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
  echo "run.sh: this machine can neither build (no project dependencies) nor find $bundle." >&2
  echo "run.sh: run 'bash tests/gpu/run.sh' on a developer machine first," \
       "then carry build-gpu/bundle." >&2
  exit 2
fi

if have_gpu; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
fi
status=0
"$binary" --bench "$@" || status=$?
if [ "$status" -eq 77 ]; then
  echo "run.sh: no GPU here; the comparison was skipped." \
       "$bundle is ready to carry to a GPU machine."
  exit 0
fi
exit "$status"
