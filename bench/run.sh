#!/usr/bin/env bash
# The one entry point of Kiln's benchmarks (GPU machine, repository root):
#   bench/run.sh [FAMILY...]      FAMILY: decode, prefill, mamba, gdn, gemm, moe, model,
#                                 ssmmodes, runtime (default: all)
# Builds the CUDA half once (-DKILN_BUILD_COMPILER=OFF, sm_90a) into
# ${KILN_BENCH_BUILD:-/tmp/kiln-bench-build} and runs each family's benchmark with its
# peers in the same run; logs and JSON go to ${OUT:-/tmp/kiln-bench-out}/<family>.
# `model` and `ssmmodes` also need .carry/models/llama-3.1-8b-bench.so and
# seed-b{128,64}-{nospec,rewind,replay}.so (bench/Model/compile.sh on the build machine). Results and their notes: docs/performance.md, bench/<Family>/NOTES.md.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build=${KILN_BENCH_BUILD:-/tmp/kiln-bench-build}
out=${OUT:-/tmp/kiln-bench-out}
families=${*:-decode prefill mamba gdn gemm moe model ssmmodes runtime}
mkdir -p "$out"
start=$(date +%s)
elapsed() { echo "$(( $(date +%s) - start )) s"; }

{
  cmake -G Ninja -S "$root" -B "$build" -DKILN_BUILD_COMPILER=OFF \
    -DKILN_CUDA_ARCHITECTURES=90a-real -DKILN_GTEST_SOURCE_DIR="$root/.carry/googletest" &&
  ninja -C "$build" -j"${KILN_BENCH_JOBS:-16}" kiln_decode_bench kiln_prefill_bench \
    kiln_bench_mamba kiln_bench_gdn kiln_bench_grouped_gemm kiln_bench_set_batch kiln-run kiln_runtime
} > "$out/build.log" 2>&1 || { echo "build failed"; tail -40 "$out/build.log"; exit 1; }
echo "build done ($(elapsed))"

status=0
for family in $families; do
  mkdir -p "$out/$family"
  case $family in
  decode) KILN_DECODE_BUILD="$build" bash "$root/bench/Decode/run_device.sh" "$out/$family" ;;
  prefill) OUT="$out/$family" bash "$root/bench/Prefill/device_run.sh" ;;
  mamba) bash "$root/bench/Mamba/run.sh" "$build" "$out/$family" ;;
  gdn) bash "$root/bench/Gdn/run.sh" "$build" "$out/$family" ;;
  gemm) OUT="$out/$family" python3 "$root/bench/Gemm/bench_gemm.py" \
      --lib "$build/lib/libkiln_runtime.so" ;;
  moe)
    # The grouped expert GEMM's variants alone, then the whole layer against PyTorch.
    "$build/bin/kiln_bench_grouped_gemm" "$out/$family/grouped-gemm.json" &&
      OUT="$out/$family" python3 "$root/bench/Moe/bench_moe.py" \
        --lib "$build/lib/libkiln_runtime.so" ;;
  model)
    OUT="$out/$family" python3 "$root/bench/Model/bench_model.py" \
      --kiln-run "$build/bin/kiln-run" --kiln-dir "$root/.carry/models" \
      --lib-dir "$build/lib" --lib-dir "$build/lib/Runtime" ;;
  ssmmodes)
    # Replay against rewind speculation on a Mamba2 hybrid (docs/replay.md).
    OUT="$out/$family" python3 "$root/bench/Model/bench_ssm_modes.py" \
      --kiln-run "$build/bin/kiln-run" --so-dir "$root/.carry/models" \
      --lib-dir "$build/lib" --lib-dir "$build/lib/Runtime" ;;
  runtime)
    # kiln_rt_set_batch's host time (no GPU needed), then the CUDA graph launch cost
    # against PyTorch's graph replay (bench/Runtime/NOTES.md).
    "$build/bin/kiln_bench_set_batch" "$out/$family/set-batch.json" &&
    nvcc -O2 -arch=sm_90a -rdc=true "$root/bench/Runtime/graph_launch.cu" -lcudadevrt -lcublasLt \
      -o "$build/graph_launch" && "$build/graph_launch" &&
      python3 "$root/bench/Runtime/graph_launch_peer.py" ;;
  *) echo "unknown family '$family' (decode, prefill, mamba, gdn, gemm, moe, model, ssmmodes, runtime)"
     status=1; continue ;;
  esac > "$out/$family.log" 2>&1
  rc=$?
  [ "$rc" -eq 0 ] || status=1
  echo "$family rc=$rc ($(elapsed))"; tail -15 "$out/$family.log"
done
exit "$status"
