#!/usr/bin/env bash
# Trains the trainer_bench model (6 layers, C=256, T=128, 4 heads, byte vocabulary) on the bytes of
# a text file and prints the loss curve (every 10th step) and a summary line. On tinyshakespeare
# the loss starts near ln 256 = 5.55 and should end below 2.5.
# Usage: bench/trainer/shakespeare.sh FILE [STEPS=300]   (BUILD=<build dir>, default ./build)
set -euo pipefail
file=${1:?usage: shakespeare.sh FILE [STEPS]}
steps=${2:-300}
build=${BUILD:-$(cd "$(dirname "$0")/../.." && pwd)/build}
"$build/bin/trainer_bench" --curve --data="$file" --steps="$steps" --batch=8 --microbatches=2 \
  --lr=1e-3 |
  awk '/^step / { split($2, s, "/"); if (s[1] == 1 || s[1] % 10 == 0) print; next } { print }'
