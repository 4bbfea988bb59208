#!/usr/bin/env bash
# On the build machine: compile the benchmark's Llama-3.1-8B-shaped model for the H200
# into .carry/models (git-ignored; it travels to the GPU machine). Batch 1 (what a batch-1
# deployment compiles: its GEMMs take the skinny GEMM by default); batch up to 64 and
# 4608 positions: a 4096-token prefill, and 64 decode sequences of 128 + 128 tokens;
# batch 256 with 256 positions (256 x 4608 positions would plan 144 GiB of KV); each
# without speculation and with ngram:4 (bench_model.py's speculative rows).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${KILN_BUILD_DIR:-$root/build}
mkdir -p "$root/.carry/models"
bench_model() { # spec suffix max-batch max-seq-len [flags]
  "$build/bin/kiln-compile" "$root/examples/models/llama-3.1-8b-instruct.json" --target h200 \
    --max-batch "$3" --max-seq-len "$4" --spec "$1" "${@:5}" --emit=so \
    -o "$root/.carry/models/llama-3.1-8b-bench$2.so"
}
for pair in "" "--pair-linears=false" "--pair-ropes"; do
  # -unpaired: each layer's k/v and gate/up projections as two GEMMs each, as before
  # kiln-pair-linears was on by default (bench_model.py --second unpaired runs them
  # beside the default). -ropes: q and k rotated in one launch (kiln-pair-ropes, off by
  # default until measured; bench_model.py --second ropes).
  case "$pair" in
    --pair-linears=false) suffix=-unpaired ;;
    --pair-ropes) suffix=-ropes ;;
    *) suffix= ;;
  esac
  bench_model none "-b1$suffix" 1 4608 $pair
  bench_model ngram:4 "-ngram-b1$suffix" 1 4608 $pair
  bench_model none "$suffix" 64 4608 $pair
  bench_model none "-b256$suffix" 256 256 $pair
  bench_model ngram:4 "-ngram$suffix" 64 4608 $pair
  bench_model ngram:4 "-ngram-b256$suffix" 256 256 $pair
done
# -glu: each gated MLP's gate/up pair and SwiGLU in one launch (kiln-fuse-pair-swiglu; the
# skinny GEMM's epilogue at batch 1, off by default until measured;
# bench_model.py --second glu --batches 1).
bench_model none "-b1-glu" 1 4608 --fuse-pair-swiglu
bench_model ngram:4 "-ngram-b1-glu" 1 4608 --fuse-pair-swiglu
# bench_ssm_modes.py: the seed scenario's Nemotron-Nano-9B-v2-shaped hybrid at batch 128
# (H200) and 64 (H100), without speculation and with ngram:3 in each SSM mode.
seed="$root/test/Tools/Inputs/nemotron-nano-9b-v2-seed.json"
for batch in 128 64; do
  for mode in nospec rewind replay; do
    spec=ngram:3
    [ "$mode" = nospec ] && spec=none
    extra=()
    [ "$mode" != nospec ] && extra=(--ssm-mode "$mode")
    "$build/bin/kiln-compile" "$seed" --target h200 --max-batch "$batch" --max-seq-len 256 \
      --spec "$spec" "${extra[@]}" --emit=so -o "$root/.carry/models/seed-b$batch-$mode.so"
  done
done
