#!/usr/bin/env bash
# One device call: build (sm_90a), run the decode tests, then the benchmark + peers.
# usage (repository root, on the GPU machine): bench/Decode/run_device.sh OUT_DIR [--quick]
# Needs GoogleTest sources in .carry/googletest (see lib/Kernels/README.md).
set -u
OUT=${1:-/tmp/decode-out}
mkdir -p "$OUT"
ROOT=$(pwd)
BUILD=${KILN_DECODE_BUILD:-/tmp/kiln-decode-build}
START=$(date +%s)
{
  cmake -G Ninja -S "$ROOT" -B "$BUILD" -DKILN_BUILD_COMPILER=OFF \
    -DKILN_CUDA_ARCHITECTURES=90a-real -DKILN_GTEST_SOURCE_DIR="$ROOT/.carry/googletest" &&
  ninja -C "$BUILD" -j16 DecodeApiTest DecodeReferenceTest DecodeGpuTest kiln_decode_bench
} > "$OUT/build.log" 2>&1 || { tail -50 "$OUT/build.log"; exit 1; }
echo "build done in $(( $(date +%s) - START )) s"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv > "$OUT/gpu.txt" 2>&1
date -u > "$OUT/date.txt"
for t in DecodeReferenceTest DecodeApiTest; do
  "$BUILD/bin/$t" > "$OUT/$t.log" 2>&1; echo "$t rc=$?"; tail -1 "$OUT/$t.log"
done
timeout ${KILN_DECODE_TEST_TIMEOUT:-240} "$BUILD/bin/DecodeGpuTest" > "$OUT/DecodeGpuTest.log" 2>&1
echo "DecodeGpuTest rc=$? ($(( $(date +%s) - START )) s)"
grep -E "^\[  (PASSED|FAILED|  OK) |Failure|FAILED" "$OUT/DecodeGpuTest.log" | head -40
timeout ${KILN_DECODE_BENCH_TIMEOUT:-200} "$BUILD/bin/kiln_decode_bench" ${2:-} > "$OUT/kiln.jsonl" 2> "$OUT/bench.err"
echo "bench rc=$? ($(( $(date +%s) - START )) s)"
cat "$OUT/kiln.jsonl"; tail -5 "$OUT/bench.err"
if [ -z "${KILN_DECODE_NO_PEERS:-}" ]; then
  timeout ${KILN_DECODE_PEER_TIMEOUT:-150} python3 bench/Decode/peers.py "$OUT/kiln.jsonl" "$OUT" > "$OUT/peers.log" 2>&1
  echo "peers rc=$? ($(( $(date +%s) - START )) s)"
  cat "$OUT/results.md" 2>/dev/null || tail -20 "$OUT/peers.log"
fi
