#!/usr/bin/env bash
# Per-step overhead of compiled models: launches and host time of each prefill/decode
# step, as measured by kiln_e2e (test/EndToEnd/KilnE2E.cpp) on the kiln-compile outputs.
# usage (GPU machine, after scripts/gpu-run.sh built into $KILN_GPU_BUILD and
# scripts/gpu-prepare.sh put the models in .carry/models):
#   bench/Runtime/step_overhead.sh [build-dir]
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-${KILN_GPU_BUILD:-/tmp/kiln-gpu-build}}
args=()
for kind in hybrid mla; do
  for spec in nospec spec; do
    args+=("$root/.carry/models/$kind-$spec.so" "$kind" "$spec")
  done
done
LD_LIBRARY_PATH="$build/lib/Runtime:${LD_LIBRARY_PATH:-}" "$build/bin/kiln_e2e" "${args[@]}" |
  grep -E "^== |step ran" |
  sed -E 's/^PASS: //'
