#!/usr/bin/env bash
# On a GPU machine with CUDA + CMake (no LLVM/MLIR): build the kernels, runtime, tests
# and benchmarks; run every GPU test, the compiled models end to end, and (with
# --bench) the benchmarks. Logs go to ${OUT:-/tmp/kiln-gpu-out}. Run
# scripts/gpu-prepare.sh on the build machine first and bring .carry/ along.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp/kiln-gpu-out}
build=${KILN_GPU_BUILD:-/tmp/kiln-gpu-build}
mkdir -p "$out"
start=$(date +%s)
elapsed() { echo "$(( $(date +%s) - start )) s"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv > "$out/gpu.txt" 2>&1
date -u > "$out/date.txt"
{
  cmake -G Ninja -S "$root" -B "$build" -DKILN_BUILD_COMPILER=OFF \
    -DKILN_CUDA_ARCHITECTURES=90a-real -DKILN_GTEST_SOURCE_DIR="$root/.carry/googletest" &&
  ninja -C "$build" -j${KILN_GPU_JOBS:-16}
} > "$out/build.log" 2>&1 || { echo "build failed"; tail -40 "$out/build.log"; exit 1; }
echo "build done ($(elapsed))"
(cd "$build" && timeout 300 ctest -L GPU --output-on-failure) > "$out/gpu-tests.log" 2>&1
echo "GPU tests rc=$? ($(elapsed))"; grep -E "tests passed|Passed|Failed|\*\*\*" "$out/gpu-tests.log" | head -20
models=()
for kind in hybrid mla; do
  for spec in nospec spec; do
    so="$root/.carry/models/$kind-$spec.so"
    [ -f "$so" ] && models+=("$so" "$kind" "$spec")
  done
done
if ((${#models[@]})); then
  LD_LIBRARY_PATH="$build/lib/Runtime:${LD_LIBRARY_PATH:-}" timeout 120 \
    "$build/bin/kiln_e2e" "${models[@]}" > "$out/e2e-compiled.log" 2>&1
  echo "compiled models e2e rc=$? ($(elapsed))"; grep -E "FAIL|PASS: kiln_e2e|step" "$out/e2e-compiled.log" | head -20
fi
# --bench [families...]: decode, mamba, prefill (default: all three).
if [ "${1:-}" = "--bench" ]; then
  shift
  families=${*:-decode mamba prefill}
  for family in $families; do
    case $family in
    decode) KILN_DECODE_BUILD="$build" timeout 240 bash "$root/bench/Decode/run_device.sh" \
              "$out/decode" > "$out/bench-decode.log" 2>&1 ;;
    mamba) timeout 120 bash "$root/bench/Mamba/run.sh" "$build" "$out" > "$out/bench-mamba.log" 2>&1 ;;
    prefill) OUT="$out/prefill" timeout 200 bash "$root/bench/Prefill/device_run.sh" \
               > "$out/bench-prefill.log" 2>&1 ;;
    esac
    echo "$family bench rc=$? ($(elapsed))"
  done
fi
