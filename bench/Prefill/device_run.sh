#!/bin/bash
# One device call: build the Prefill family in isolation (other kernel families that are
# work in progress in the shared tree are left out), run its tests and the benchmark.
# Usage (repo root, GPU machine): bash bench/Prefill/device_run.sh [extra cmake args]
set -u
OUT=${OUT:-/tmp/prefill-out}
mkdir -p "$OUT"
SRC=/tmp/kiln-prefill-src
BUILD=/tmp/kiln-prefill-build
rm -rf "$SRC" && mkdir -p "$SRC"
tar --exclude=./.git --exclude=./.carry -cf - . | tar -C "$SRC" -xf -
for fam in Decode Mamba; do
  rm -rf "$SRC/lib/Kernels/$fam" "$SRC/test/Kernels/$fam" "$SRC/bench/$fam"
done
GTEST=${GTEST:-$PWD/.carry/googletest}
{
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv
  cmake -G Ninja -S "$SRC" -B "$BUILD" -DKILN_BUILD_COMPILER=OFF \
    -DKILN_CUDA_ARCHITECTURES=90a-real -DKILN_GTEST_SOURCE_DIR="$GTEST" \
    -DKILN_PREFILL_TUNING=${TUNING:-ON} "$@"
  time ninja -C "$BUILD" -j16 PrefillReferenceTest PrefillValidationTest PrefillFmhaGpuTest \
    kiln_prefill_bench
} > "$OUT/build.log" 2>&1
echo "build rc=$?"; tail -5 "$OUT/build.log"
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  (cd "$BUILD" && ctest -R Prefill --output-on-failure -V) > "$OUT/tests.log" 2>&1
  echo "tests rc=$?"; grep -E "max abs err|Failure|FAILED|PASSED|tests passed|Expected|got" "$OUT/tests.log" | head -60
fi
BENCH_BIN=$(find "$BUILD" -name kiln_prefill_bench -type f | head -1)
python3 bench/Prefill/bench_prefill.py --kiln-bench "$BENCH_BIN" \
  > "$OUT/bench.log" 2>&1
echo "bench rc=$?"; cat "$OUT/bench.log"
