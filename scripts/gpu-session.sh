#!/usr/bin/env bash
# One device call that checks what only a GPU can: the GPU-labelled tests (kernels,
# the runtime's memory == plan test) and the parity of the compiled tiny models with
# transformers (scripts/gpu-parity.sh). Runs prebuilt binaries from .carry/gpu (bin/kiln-run, lib/libkiln_runtime.so)
# when they are there (built here with -DKILN_BUILD_COMPILER=OFF
# -DKILN_CUDA_ARCHITECTURES=90a-real, saving the device minutes a build costs), else
# builds. Logs go to ${OUT:-/tmp/kiln-gpu-out}.
#   scripts/gpu-session.sh [tests|parity|all] [parity.py options]
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp/kiln-gpu-out}
what=${1:-all}; shift || true
build=$root/.carry/gpu
mkdir -p "$out"
start=$(date +%s)
elapsed() { echo "$(( $(date +%s) - start )) s"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt" 2>&1
date -u > "$out/date.txt"

if [ ! -x "$build/bin/kiln-run" ]; then
  build=/tmp/kiln-gpu-build
  { cmake -G Ninja -S "$root" -B "$build" -DKILN_BUILD_COMPILER=OFF -DKILN_BUILD_BENCH=OFF \
      -DKILN_CUDA_ARCHITECTURES=90a-real -DKILN_GTEST_SOURCE_DIR="$root/.carry/googletest" &&
    ninja -C "$build" -j16; } > "$out/build.log" 2>&1 ||
    { echo "build failed"; tail -30 "$out/build.log"; exit 1; }
  echo "built on the device ($(elapsed))"
fi
export LD_LIBRARY_PATH="$build/lib:$build/lib/Runtime:${LD_LIBRARY_PATH:-}"
export CUDA_MODULE_LOADING=EAGER

if [ "$what" = tests ] || [ "$what" = all ]; then
  for test in "$build"/bin/*GpuTest "$build"/test/*/*GpuTest "$build"/test/*/*/*GpuTest; do
    [ -x "$test" ] || continue
    name=$(basename "$test")
    timeout 120 "$test" > "$out/$name.log" 2>&1
    echo "$name rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$out/$name.log" | tr '\n' ' ')"
  done
  echo "GPU tests done ($(elapsed))"
fi
if [ "$what" = parity ] || [ "$what" = all ]; then
  KILN_GPU_BUILD="$build" OUT="$out" bash "$root/scripts/gpu-parity.sh" "$@"
  echo "parity rc=$? ($(elapsed))"
fi
