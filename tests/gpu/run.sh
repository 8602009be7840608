#!/usr/bin/env bash
# GPU check of the CUDA plugin: compares every CUDA op with the CPU op on random data and prints
# a table (max relative error per output), then cuBLAS sgemm throughput and the tokens/s of a
# GPT-2 small shaped forward + backward made of the ops; then the NCCL transport test (one rank
# per visible GPU, two at most) and, with two GPUs, the mesh test (DP2 and TP2 tasks over NCCL
# groups against the single-GPU trainer). Exit status 0 when every op is within tolerance and the
# NCCL and mesh tests passed (or were skipped). Extra arguments go to gpu_ops_compare (see its
# --help).
#
#   bash tests/gpu/run.sh
#
# Two machines, one command:
# - Where the project's Debian dependencies are installed (a developer machine), it builds
#   build-gpu/ (Release), then packs build-gpu/bundle/ with deploy/docker/bundle-libs.sh: bin/ with
#   the test binaries, lib/ with the CUDA plugin libpp_cuda.so (which they dlopen from bin/../lib)
#   and the non-system libraries all of them load, except CUDA's own. Without a GPU the checks
#   report "skipped".
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
  cmake --build "$build" --target gpu_ops_compare worker_nccl_transport_test gpu_mesh_test pp_cuda \
    -j "$(nproc)"
  rm -rf "$bundle"
  # the C and C++ runtimes and CUDA's libraries come from the machine that runs the bundle
  bash "$root/deploy/docker/bundle-libs.sh" "$bundle" "$build/bin/gpu_ops_compare" \
    "$build/bin/worker_nccl_transport_test" "$build/bin/gpu_mesh_test" "$build/lib/libpp_cuda.so"
  echo "run.sh: packed $bundle ($(du -sh "$bundle" | cut -f1))"
}

# Directories holding CUDA 13's libcudart, libcublas and NCCL on this machine (the toolkit's, or
# the pip wheels' under /usr/local/lib).
cuda_lib_path() {
  local dirs=() lib
  for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
    local found
    found="$(ldconfig -p 2>/dev/null | awk -v l="$lib" '$1 == l {print $NF; exit}')"
    if [ -z "$found" ]; then
      found="$(find /usr/local/cuda/ /usr/local/cuda/lib64/ /usr/lib /usr/local/lib /opt \
               -name "$lib" 2>/dev/null |
               head -n 1 || true)"
    fi
    if [ -n "$found" ]; then dirs+=("$(dirname "$found")"); fi
  done
  local IFS=:
  echo "${dirs[*]:-}"
}

if have_deps; then
  build_and_pack
  bin="$build/bin"
elif [ -x "$bundle/bin/gpu_ops_compare" ]; then
  echo "run.sh: no build dependencies here; running the bundle built elsewhere"
  bin="$bundle/bin"
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
"$bin/gpu_ops_compare" --bench "$@" || status=$?
nccl=0
"$bin/worker_nccl_transport_test" || nccl=$?
mesh=0
"$bin/gpu_mesh_test" || mesh=$?
if [ "$status" -eq 77 ]; then
  echo "run.sh: no GPU here; the checks were skipped. $bundle is ready to carry to a GPU machine."
  exit 0
fi
if [ "$nccl" -ne 0 ]; then
  echo "run.sh: the NCCL transport test failed (exit $nccl)" >&2
  [ "$status" -ne 0 ] || status="$nccl"
fi
if [ "$mesh" -ne 0 ] && [ "$mesh" -ne 77 ]; then
  echo "run.sh: the GPU mesh test (DP2, TP2 over NCCL) failed (exit $mesh)" >&2
  [ "$status" -ne 0 ] || status="$mesh"
fi
exit "$status"
