#!/usr/bin/env bash
# One device call that checks what only a GPU can: the GPU-labelled tests (kernels,
# the runtime's memory == plan test) and the parity of the compiled tiny models with
# transformers (scripts/gpu-parity.sh). Runs prebuilt binaries from .carry/gpu (bin/kiln-run, lib/libkiln_runtime.so)
# when they are there (built here with -DKILN_BUILD_COMPILER=OFF
# -DKILN_CUDA_ARCHITECTURES=90a-real, saving the device minutes a build costs), else
# builds. Logs go to ${OUT:-/tmp/kiln-gpu-out}.
#   scripts/gpu-session.sh [tests|parity|diagnose|bench|all|STEP,STEP...] [parity.py options]
# all = tests,parity; diagnose (test/Parity/diagnose.py: where logit error comes from)
# needs the parity models, so it follows parity; bench = the whole-model benchmark
# (bench/Model/bench_model.py, .carry/models/llama-3.1-8b-bench.so); kernels = the kernels
# against PyTorch on identical inputs (test/Parity/kernel_parity.py) and the GEMM
# benchmark (bench/Gemm/bench_gemm.py); order = test/Parity/order_check.py (does a prompt's
# logits depend on its place in the packed batch), after parity; trace =
# test/Parity/trace_compare.py (Kiln's prefill op by op against transformers bf16 and
# fp32, through kiln-run --trace), building the parity models if parity did not run;
# graphdiag = the CUDA graph of the replay test: cudaGraphLaunch time and node types.
# profile = bench/Model/kernel_profile.py: ncu's time and DRAM bytes of each
# kernel of the 8B decode step (KILN_PROFILE_BATCHES, default "1 64").
# decode = bench/Decode's kernel benchmark (bf16 and FP8 pools) with its PyTorch peers.
# seed = test/Parity/seed_memory.py: the Nemotron-Nano-9B-v2-shaped model compiled for an
# L40S, device memory against the plan with and without speculation.
# moebench = bench/Moe: the grouped expert GEMM's variants (prebuilt
# kiln_bench_grouped_gemm), then the whole MoE layer against PyTorch (bench_moe.py).
# mambabench = bench/Mamba's decode-kernel benchmark (prebuilt kiln_bench_mamba) with its
# PyTorch/Triton peers, replay vs rewind step included (KILN_BENCH_ONLY=ssm: no conv).
# ssmmodes = bench/Model/bench_ssm_modes.py: replay vs rewind speculative decode of the
# seed-shaped hybrid at batch 128 (H200) / 64 (H100).
# launchbench = bench/Runtime/graph_launch.cu alone (nvcc here, ~20 s): graph launch cost
# by size and by node kind (plain, cluster, PDL, distinct functions, cuBLASLt GEMMs).
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp/kiln-gpu-out}
what=${1:-all}; shift || true
[ "$what" = all ] && what=tests,parity
has() { case ",$what," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
build=${KILN_GPU_PREBUILT:-$root/.carry/gpu}
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
# Prebuilt binaries from elsewhere: ModelGpuTest finds the tiny models and kiln-run in
# $build/tiny (copies of the build's test/EndToEnd/libkiln_tiny*.so and bin/kiln-run).
[ -d "$build/tiny" ] && export KILN_TINY_DIR="$build/tiny"
export CUDA_MODULE_LOADING=EAGER

if has tests; then
  for test in "$build"/bin/*GpuTest "$build"/test/*/*GpuTest "$build"/test/*/*/*GpuTest; do
    [ -x "$test" ] || continue
    name=$(basename "$test")
    timeout 120 "$test" > "$out/$name.log" 2>&1
    echo "$name rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$out/$name.log" | tr '\n' ' ')"
  done
  echo "GPU tests done ($(elapsed))"
fi
if has parity; then
  KILN_GPU_BUILD="$build" OUT="$out" bash "$root/scripts/gpu-parity.sh" "$@"
  echo "parity rc=$? ($(elapsed))"
fi
if has seed; then
  python3 "$root/test/Parity/seed_memory.py" --kiln-run "$build/bin/kiln-run" \
    --so-dir "$root/.carry/models" --out "$out/seed" > "$out/seed.log" 2>&1
  echo "seed rc=$? ($(elapsed))"; tail -5 "$out/seed.log"
fi
if has mambabench; then
  mkdir -p "$out/mamba"
  { KILN_BENCH_ONLY=${KILN_BENCH_ONLY:-ssm} "$build/bin/kiln_bench_mamba" "$out/mamba/mamba_kiln.json" &&
    python3 "$root/bench/Mamba/peer_torch.py" "$out/mamba/mamba_kiln.json" \
      "$out/mamba/mamba_bench.json"; } > "$out/mambabench.log" 2>&1
  echo "mambabench rc=$? ($(elapsed))"; grep -E "replay|ssm_step|ceiling" "$out/mambabench.log"
fi
if has moebench; then
  # The grouped expert GEMM's variants alone (KILN_BENCH_MODEL / KILN_BENCH_VARIANT narrow
  # it), then the whole MoE layer against PyTorch (KILN_MOE_MODELS, default DeepSeek-V3).
  mkdir -p "$out/moe"
  { timeout 150 "$build/bin/kiln_bench_grouped_gemm" "$out/moe/grouped-gemm.json" &&
    timeout 300 python3 "$root/bench/Moe/bench_moe.py" --lib "$build/lib/libkiln_runtime.so" \
      --out "$out/moe" --models ${KILN_MOE_MODELS:-deepseek-v3}; } > "$out/moebench.log" 2>&1
  echo "moebench rc=$? ($(elapsed))"; grep -E "of dense|ceiling|target" "$out/moebench.log"
fi
if has ssmmodes; then
  OUT="$out/ssmmodes" timeout 540 python3 "$root/bench/Model/bench_ssm_modes.py" \
    --kiln-run "$build/bin/kiln-run" --so-dir "$root/.carry/models" \
    --lib-dir "$build/lib" --lib-dir "$build/lib/Runtime" > "$out/ssmmodes.log" 2>&1
  echo "ssmmodes rc=$? ($(elapsed))"; tail -8 "$out/ssmmodes.log"
fi
if has diagnose; then
  (cd "$root/test/Parity" && timeout 300 python3 diagnose.py \
     --models "${KILN_PARITY_MODELS:-/tmp/kiln-parity-models}" \
     --so-dir "$root/.carry/models" --kiln-run "$build/bin/kiln-run" \
     --lib-dir "$build/lib" --lib-dir "$build/lib/Runtime" --out "$out") \
    > "$out/diagnose.log" 2>&1
  echo "diagnose rc=$? ($(elapsed))"; cat "$out/diagnose.log"
fi
if has order; then
  # Does a prompt's result depend on its place in the packed prefill batch?
  for family in llama qwen3; do
    (cd "$root/test/Parity" && timeout 150 python3 order_check.py --family "$family" \
       --models "${KILN_PARITY_MODELS:-/tmp/kiln-parity-models}" \
       --so-dir "$root/.carry/models" --kiln-run "$build/bin/kiln-run" \
       --lib-dir "$build/lib" --lib-dir "$build/lib/Runtime" --out "$out") \
      > "$out/order-$family.log" 2>&1
    echo "order check $family rc=$? ($(elapsed))"; tail -12 "$out/order-$family.log"
  done
fi
if has trace; then
  models=${KILN_PARITY_MODELS:-/tmp/kiln-parity-models}
  [ -d "$models/llama" ] || python3 "$root/test/Parity/make_models.py" \
    --configs "$root/test/Parity/configs" --out "$models" > "$out/parity-models.log" 2>&1
  for family in ${KILN_TRACE_FAMILIES:-llama mistral qwen2 qwen3}; do
    (cd "$root/test/Parity" && timeout 120 python3 trace_compare.py --family "$family" \
       --models "$models" --so-dir "$root/.carry/models" --kiln-run "$build/bin/kiln-run" \
       --lib-dir "$build/lib" --lib-dir "$build/lib/Runtime" --out "$out") \
      > "$out/trace-$family.log" 2>&1
    echo "trace compare $family rc=$? ($(elapsed))"; cat "$out/trace-$family.log"
  done
fi
if has kernels; then
  timeout 200 python3 "$root/test/Parity/kernel_parity.py" --lib "$build/lib/libkiln_runtime.so" \
    --out "$out" > "$out/kernel-parity.log" 2>&1
  echo "kernel parity rc=$? ($(elapsed))"; cat "$out/kernel-parity.log"
  OUT="$out" timeout 240 python3 "$root/bench/Gemm/bench_gemm.py" \
    --lib "$build/lib/libkiln_runtime.so" > "$out/bench-gemm.log" 2>&1
  echo "gemm bench rc=$? ($(elapsed))"; cat "$out/bench-gemm.log"
fi
if has decode; then
  # The decode kernels' benchmark (bench/Decode: gqa bf16 and FP8 pools, MLA) and its
  # PyTorch peers; KILN_DECODE_BENCH_ARGS=--quick for the short grid.
  timeout 200 "$build/bin/kiln_decode_bench" ${KILN_DECODE_BENCH_ARGS:-} > "$out/decode-kiln.jsonl" \
    2> "$out/decode-bench.err"
  echo "decode bench rc=$? ($(elapsed))"; tail -3 "$out/decode-bench.err"
  timeout 240 python3 "$root/bench/Decode/peers.py" "$out/decode-kiln.jsonl" "$out" \
    > "$out/decode-peers.log" 2>&1
  echo "decode peers rc=$? ($(elapsed))"; cat "$out/results.md" 2>/dev/null || tail -20 "$out/decode-peers.log"
fi
if has sanitize; then
  # compute-sanitizer (issue 13): memcheck, racecheck, initcheck and synccheck on every
  # GPU test binary, kiln-run's subprocesses included. One lane per tool, the lanes in
  # parallel (the tools are slow and leave the GPU mostly idle). Left out of the lanes:
  # the death test that faults on purpose, and the memory == plan test, which measures
  # the whole device's free memory and so runs alone afterwards under each tool.
  cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  sanitize_one() { # tool binary filter
    local log="$out/sanitize-$1-$2-${4:-all}.log"
    timeout "${KILN_SANITIZE_TIMEOUT:-300}" "$cs" --tool "$1" --error-exitcode 9 \
      --target-processes all "$build/bin/$2" --gtest_filter="$3" > "$log" 2>&1
    echo "compute-sanitizer $1 $2 ($3): rc=$? $(grep -E 'ERROR SUMMARY|PASSED|FAILED  \]' "$log" | sort -u | tr '\n' ' ')"
  }
  lane() {
    KILN_GPU_SHARED=1 sanitize_one "$1" ModelGpuTest \
      '*:-ModelGpu.KernelFaultNamesTheLayerAndRetiresTheContext:ModelGpu.ForwardMatchesReferenceAndPlan'
    sanitize_one "$1" DecodeGpuTest '*'
    sanitize_one "$1" GraphGpuTest '*:-GraphGpu.GemmRowsDoNotDependOnM'
    sanitize_one "$1" MambaGpuTest '*'
    sanitize_one "$1" PrefillFmhaGpuTest '*'
    sanitize_one "$1" GdnGpuTest '*'
  }
  for tool in memcheck racecheck initcheck synccheck; do
    lane "$tool" > "$out/sanitize-lane-$tool.txt" 2>&1 &
  done
  wait
  cat "$out"/sanitize-lane-*.txt
  for tool in memcheck racecheck initcheck synccheck; do
    sanitize_one "$tool" ModelGpuTest ModelGpu.ForwardMatchesReferenceAndPlan plan
  done
  # The GEMM row sweep (m = 1 ... 1024 on 8 shapes, ~8 s bare): last, bounded.
  for tool in memcheck initcheck; do
    KILN_SANITIZE_TIMEOUT=200 sanitize_one "$tool" GraphGpuTest GraphGpu.GemmRowsDoNotDependOnM rows &
  done
  wait
  echo "sanitize done ($(elapsed))"
fi
if has sanitize-model; then
  # The slow end-to-end cases one by one, all in parallel, each with the whole call's
  # time: racecheck of the two-thread and trace tests, kiln-run's speculation
  # subprocesses under initcheck and synccheck, and the GEMM row sweep.
  cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  solo() { # tool binary filter tag
    local log="$out/sanitize-$1-$2-$4.log"
    timeout "${KILN_SANITIZE_TIMEOUT:-500}" "$cs" --tool "$1" --error-exitcode 9 \
      --target-processes all "$build/bin/$2" --gtest_filter="$3" > "$log" 2>&1
    echo "compute-sanitizer $1 $2 ($3): rc=$? $(grep -E 'ERROR SUMMARY|PASSED|FAILED  \]' "$log" | sort -u | tr '\n' ' ')"
  }
  (
    export KILN_GPU_SHARED=1 # several processes on the GPU: no whole-device memory checks
    solo racecheck ModelGpuTest ModelGpu.TwoContextsOnTwoThreads twothreads &
    solo racecheck ModelGpuTest ModelGpu.TraceListsEveryOpAndMatchesTheLogits trace &
    for tool in initcheck synccheck; do
      solo "$tool" ModelGpuTest ModelGpu.KilnRunSpeculationIsLossless kilnrun &
    done
    # Not racecheck of the kiln-run subprocesses: with cuBLASLt's GEMMs it outlasts a call
    # (470 s), and with them excluded (--kernel-name-exclude kns=nvjet) the sanitizer
    # fails on their hardware exceptions. Their Kiln kernels are racechecked in process.
    for tool in initcheck racecheck synccheck; do
      solo "$tool" GraphGpuTest GraphGpu.GemmRowsDoNotDependOnM rows &
    done
    wait
  ) > "$out/sanitize-model.txt" 2>&1
  cat "$out/sanitize-model.txt"
  echo "sanitize-model done ($(elapsed))"
fi
if has graphdiag; then
  # Why a replayed decode step costs ~100 us of host time when a bare graph of its size
  # launches in ~5 (bench/Runtime/NOTES.md): the graph replay test with its cudaGraphLaunch
  # time, and the captured graphs' node types (KILN_GRAPH_DOT).
  mkdir -p "$out/graphs"
  KILN_GRAPH_DOT="$out/graphs/step" timeout 120 "$build/bin/ModelGpuTest" \
    --gtest_filter='ModelGpu.GraphReplayEqualsEager' > "$out/graphdiag.log" 2>&1
  echo "graph replay test rc=$? ($(elapsed))"; grep -E "host per|replayed step|graphs:|OK|FAILED" "$out/graphdiag.log"
  for dot in "$out"/graphs/*.dot; do
    [ -e "$dot" ] || continue
    echo "$(basename "$dot"): $(grep -oE '\b(KERNEL|MEMSET|MEMCPY|EVENT_RECORD|EVENT_WAIT|HOST|EMPTY|CHILD_GRAPH|MEM_ALLOC|MEM_FREE|CONDITIONAL)\b' "$dot" | sort | uniq -c | tr '\n' ' ')"
  done
fi
if has launchbench; then
  nvcc -O2 -arch=sm_90a -rdc=true "$root/bench/Runtime/graph_launch.cu" -lcudadevrt -lcublasLt \
    -o "$out/graph_launch" > "$out/launchbench.log" 2>&1 &&
    timeout 200 "$out/graph_launch" >> "$out/launchbench.log" 2>&1
  echo "graph launch bench rc=$? ($(elapsed))"; tail -25 "$out/launchbench.log"
  rm -f "$out/graph_launch"
fi
if has bench; then
  mkdir -p "$out/bench/graphs"
  KILN_BENCH_GRAPH_DOT="$out/bench/graphs" OUT="$out/bench" timeout "${KILN_BENCH_TIMEOUT:-600}" python3 \
    "$root/bench/Model/bench_model.py" --kiln-run "$build/bin/kiln-run" \
    --kiln-dir "$root/.carry/models" \
    --lib-dir "$build/lib" --lib-dir "$build/lib/Runtime" \
    --second "${KILN_BENCH_SECOND:-eager}" > "$out/bench-model.log" 2>&1
  echo "bench rc=$? ($(elapsed))"; tail -20 "$out/bench-model.log"
  for dot in "$out"/bench/graphs/*-0.dot; do
    [ -e "$dot" ] || continue
    echo "$(basename "$dot"): $(grep -oE '\b(KERNEL|MEMSET|MEMCPY|EVENT_RECORD|EVENT_WAIT|HOST|EMPTY|CHILD_GRAPH|MEM_ALLOC|MEM_FREE|CONDITIONAL)\b' "$dot" | sort | uniq -c | tr '\n' ' ')"
  done
  tar -czf "$out/bench-graphs.tgz" -C "$out/bench" graphs && rm -rf "$out/bench/graphs"
fi
if has profile; then
  # Where the 8B decode step's GPU time goes, kernel by kernel (ncu).
  for batch in ${KILN_PROFILE_BATCHES:-1 64}; do
    # Batch 1 on the model of max_batch 1 (bench_model.py's), as a batch-1 deployment runs.
    size=; [ "$batch" = 1 ] && size=-b1
    timeout 300 python3 "$root/bench/Model/kernel_profile.py" --kiln-run "$build/bin/kiln-run" \
      --kiln-so "$root/.carry/models/llama-3.1-8b-bench$size.so" --lib-dir "$build/lib" \
      --lib-dir "$build/lib/Runtime" --batch "$batch" --ceiling-tbs "${KILN_CEILING_TBS:-4.25}" \
      --raw "$out/profile-b$batch.csv" > "$out/profile-b$batch.log" 2>&1
    echo "profile b$batch rc=$? ($(elapsed))"; head -30 "$out/profile-b$batch.log"
  done
fi
