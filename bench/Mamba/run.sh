#!/bin/bash
# One GPU command: builds the benchmark (if needed) and prints kiln vs ceiling vs peers.
# usage: bench/Mamba/run.sh [build-dir] [out-dir]
set -eo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$SRC/build-bench-mamba}
OUT=${2:-.}
if [ ! -x "$BUILD/bin/kiln_bench_mamba" ]; then
  cmake -G Ninja -S "$SRC" -B "$BUILD" -DKILN_BUILD_COMPILER=OFF -DKILN_BUILD_TESTS=OFF \
    -DKILN_CUDA_ARCHITECTURES=90a-real >/dev/null
  ninja -C "$BUILD" kiln_bench_mamba
fi
"$BUILD/bin/kiln_bench_mamba" "$OUT/mamba_kiln.json"
python3 "$SRC/bench/Mamba/peer_torch.py" "$OUT/mamba_kiln.json" "$OUT/mamba_bench.json"
