#!/bin/bash
# One GPU command: builds the benchmark (if needed) and prints kiln vs ceilings vs the
# PyTorch peers.
# usage: [KILN_BENCH_DECODE_ONLY=1] bench/Gdn/run.sh [build-dir] [out-dir]
set -eo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$SRC/build-bench-gdn}
OUT=${2:-.}
if [ ! -x "$BUILD/bin/kiln_bench_gdn" ]; then
  cmake -G Ninja -S "$SRC" -B "$BUILD" -DKILN_BUILD_COMPILER=OFF -DKILN_BUILD_TESTS=OFF \
    -DKILN_CUDA_ARCHITECTURES=90a-real >/dev/null
  ninja -C "$BUILD" kiln_bench_gdn
fi
"$BUILD/bin/kiln_bench_gdn" "$OUT/gdn_kiln.json"
# KILN_BENCH_DECODE_ONLY=1: the decode update's variants only (no prefill, no JSON, no peers).
if [ -z "$KILN_BENCH_DECODE_ONLY" ]; then
  python3 "$SRC/bench/Gdn/peer_torch.py" "$OUT/gdn_kiln.json" "$OUT/gdn_bench.json"
fi
