#!/usr/bin/env bash
# Copies binaries and the shared libraries they load into a self-contained tree, so a runtime image
# needs no build packages: DEST/bin/<binary>, DEST/lib/<soname>. An argument ending in .so is a
# plugin (the CUDA plugin libpp_cuda.so): it goes to DEST/lib, where the binaries look for it
# (<bin>/../lib), with the libraries it loads.
# Left out, because every runtime base image brings its own (and a copy would shadow it): the C
# library and loader, libstdc++/libgcc_s, and anything resolved under /usr/local/cuda or libcuda
# itself (the CUDA runtime image ships CUDA, cuBLAS and NCCL; the node's driver provides libcuda).
# Usage: bundle-libs.sh DEST BINARY|PLUGIN.so...
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 DEST BINARY|PLUGIN.so..." >&2
  exit 2
fi
dest="$1"
shift
mkdir -p "$dest/bin" "$dest/lib"
system='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libresolv|libutil'
system+='|libstdc\+\+|libgcc_s|libcuda)\.so'
for bin in "$@"; do
  if [[ "$bin" == *.so ]]; then
    [ -f "$bin" ] || { echo "bundle-libs: $bin does not exist" >&2; exit 1; }
    install -m 0755 "$bin" "$dest/lib/"
  else
    [ -x "$bin" ] || { echo "bundle-libs: $bin is not an executable" >&2; exit 1; }
    install -m 0755 "$bin" "$dest/bin/"
  fi
  # ldd prints "soname => /path (addr)"; "not found" means the build itself is broken.
  if ldd "$bin" | grep -q 'not found'; then
    echo "bundle-libs: $bin has unresolved libraries:" >&2
    ldd "$bin" | grep 'not found' >&2
    exit 1
  fi
  ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | while read -r soname path; do
    if [[ "$soname" =~ $system ]] || [[ "$(readlink -f "$path")" == /usr/local/cuda* ]]; then
      continue
    fi
    cp -L "$path" "$dest/lib/$soname"
  done
done
