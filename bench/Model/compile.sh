#!/usr/bin/env bash
# On the build machine: compile the benchmark's Llama-3.1-8B-shaped model for the H200
# into .carry/models (git-ignored; it travels to the GPU machine). Batch up to 64 and
# 4608 positions: a 4096-token prefill, and 64 decode sequences of 128 + 128 tokens.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${KILN_BUILD_DIR:-$root/build}
mkdir -p "$root/.carry/models"
"$build/bin/kiln-compile" "$root/examples/models/llama-3.1-8b-instruct.json" --target h200 \
  --max-batch 64 --max-seq-len 4608 --spec none --emit=so \
  -o "$root/.carry/models/llama-3.1-8b-bench.so"
