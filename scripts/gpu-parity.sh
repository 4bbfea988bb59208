#!/usr/bin/env bash
# On the GPU machine: the truth test. transformers builds the tiny random-weight models
# of test/Parity/configs (make_models.py), and parity.py checks that Kiln's compiled
# models (.carry/models/<family>-*.so, from scripts/gpu-prepare.sh) generate the same
# greedy tokens, losslessly under speculation, in the memory they planned.
# Builds kiln-run first if the runtime build dir lacks it (same flags as gpu-run.sh).
# Logs and parity.json go to ${OUT:-/tmp/kiln-gpu-out}; exit 1 if any case failed.
# Usage: scripts/gpu-parity.sh [parity.py options, e.g. --families llama --modes nospec]
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp/kiln-gpu-out}
build=${KILN_GPU_BUILD:-/tmp/kiln-gpu-build}
models=${KILN_PARITY_MODELS:-/tmp/kiln-parity-models}
so_dir=${KILN_PARITY_SO:-$root/.carry/models}
mkdir -p "$out"
start=$(date +%s)
elapsed() { echo "$(( $(date +%s) - start )) s"; }

if [ ! -x "$build/bin/kiln-run" ]; then
  {
    cmake -G Ninja -S "$root" -B "$build" -DKILN_BUILD_COMPILER=OFF \
      -DKILN_CUDA_ARCHITECTURES=90a-real -DKILN_GTEST_SOURCE_DIR="$root/.carry/googletest" &&
    ninja -C "$build" -j${KILN_GPU_JOBS:-16} kiln-run
  } > "$out/parity-build.log" 2>&1 || { echo "kiln-run build failed"; tail -40 "$out/parity-build.log"; exit 1; }
  echo "kiln-run built ($(elapsed))"
fi

# Fresh weights every run: seconds for these sizes, and never stale against the configs.
rm -rf "$models"
python3 "$root/test/Parity/make_models.py" --configs "$root/test/Parity/configs" \
  --out "$models" > "$out/parity-models.log" 2>&1 ||
  { echo "make_models.py failed"; tail -30 "$out/parity-models.log"; exit 1; }
echo "tiny models built ($(elapsed))"; cat "$out/parity-models.log"

PYTHONUNBUFFERED=1 OUT="$out" python3 "$root/test/Parity/parity.py" --models "$models" \
  --so-dir "$so_dir" --kiln-run "$build/bin/kiln-run" \
  --lib-dir "$build/lib" --lib-dir "$build/lib/Runtime" --out "$out" "$@" 2>&1 |
  tee "$out/parity.log"
rc=${PIPESTATUS[0]}
echo "parity rc=$rc ($(elapsed)); per-run kiln-run logs under $out/parity/<family>/"
exit "$rc"
