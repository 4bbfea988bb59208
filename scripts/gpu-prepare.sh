#!/usr/bin/env bash
# On the build machine (has LLVM/MLIR): put what a GPU machine needs into .carry/
# (git-ignored): GoogleTest sources and the parity models compiled to shared objects.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${KILN_BUILD_DIR:-$root/build}
mkdir -p "$root/.carry/models"
rm -rf "$root/.carry/googletest" && cp -r /usr/src/googletest "$root/.carry/googletest"
# The parity test's tiny dense models (test/Parity; scripts/gpu-parity.sh runs them):
# per family the target without speculation, with n-gram drafts, as the verifier of a
# two-model setup (--spec draft:4 alone: the draft model is a .so of its own, loaded
# by kiln-run --draft-model), and the 1-layer draft model. A failure is reported and
# the loop goes on; the script exits 1 at the end.
parity_failed=0
# The fp8 pair (--kv-dtype fp8) is the same target over an e4m3 KV cache, the f16 pair
# (--kv-dtype f16) over an f16 one.
tiny() { "$build/bin/kiln-compile" "$1" --target h200 --max-batch 8 --max-seq-len 512 \
           --spec "$2" --emit=so -o "$root/.carry/models/$3.so" "${@:4}" ||
         { echo "kiln-compile failed: $1 --spec $2 ${*:4}"; parity_failed=1; }; }
for config in "$root"/test/Parity/configs/*-tiny.json; do
  family=$(basename "$config" -tiny.json)
  tiny "$config" none "$family-nospec"
  tiny "$config" ngram:4 "$family-ngram"
  tiny "$config" draft:4 "$family-draft"
  tiny "${config%.json}-draft.json" none "$family-draftmodel"
  # DeepSeek with an MTP module (docs/mtp.md): the target plus its module, --spec mtp:1.
  mtp="${config%.json}-mtp.json"
  [ -f "$mtp" ] && tiny "$mtp" mtp:1 "$family-mtp"
  # Mamba2 and Gated DeltaNet families: the same speculation in replay mode
  # (docs/replay.md).
  if grep -q '"hybrid_override_pattern"\|"linear_attention"' "$config"; then
    tiny "$config" ngram:4 "$family-replayngram" --ssm-mode replay
    tiny "$config" draft:4 "$family-replaydraft" --ssm-mode replay
  fi
  # Sliding-window families: the windowed layers' KV in rings (docs/overview.md,
  # "Sliding windows"), pages of 16 and steps of 64 so the longer prompts wrap a ring.
  window=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1])).get('sliding_window') or 0)" "$config")
  if [ "$window" -gt 0 ]; then
    ring=(--kv-ring-window "$window" --max-step-tokens 64 --page-size 16)
    tiny "$config" none "$family-ringnospec" "${ring[@]}"
    tiny "$config" ngram:4 "$family-ringngram" "${ring[@]}"
  fi
  # The per-rank form at one rank (kiln.all_reduce after each row-parallel projection
  # and MoE block; parity.py's nccl mode runs it as a one-rank NCCL communicator): every
  # family with a per-rank graph (docs/tensor-parallel.md), not Qwen3-Next or gpt-oss.
  if ! grep -q '"linear_attention"\|"gpt_oss"' "$config"; then
    tiny "$config" none "$family-collectives" --tp-collectives
    # Two ranks (parity.py's tp2 mode, on a machine with 2 GPUs), where 2 divides the
    # heads (qwen2's 7 heads do not).
    heads=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['num_attention_heads'])" "$config")
    if [ $((heads % 2)) -eq 0 ]; then
      tiny "$config" none "$family-tp2" --tp 2
    fi
  fi
  # Each gated MLP's gate/up pair and SwiGLU in one launch (parity.py's glu modes), where
  # the model has a kiln.swiglu for the pass to merge (not mixtral's or gpt-oss's experts
  # alone, or nemotron-h's squared ReLU).
  # A compile that fails here is reported, not taken for a family without one.
  if lowered=$("$build/bin/kiln-compile" "$config" --target h200 --max-batch 8 \
                 --max-seq-len 512 --fuse-pair-swiglu --emit lowered); then
    if grep -q kiln_rt_linear_pair_swiglu <<<"$lowered"; then
      tiny "$config" none "$family-glunospec" --fuse-pair-swiglu
      tiny "$config" ngram:4 "$family-glungram" --fuse-pair-swiglu
    fi
  else
    echo "kiln-compile failed: $config --fuse-pair-swiglu --emit lowered"
    parity_failed=1
  fi
  # q and k rotated in one launch (parity.py's ropes modes), where the attention layers
  # have kiln.rope: not the MLA families (their rope is inside kiln.mla_attention) or
  # nemotron-h (no RoPE).
  if ! grep -q '"kv_lora_rank"\|"hybrid_override_pattern"' "$config"; then
    tiny "$config" none "$family-ropesnospec" --pair-ropes
    tiny "$config" ngram:4 "$family-ropesngram" --pair-ropes
  fi
  # The MLA families have an FP8 latent cache (656-byte tokens) and no f16 one (parity.py
  # skips their f16 modes).
  tiny "$config" none "$family-fp8nospec" --kv-dtype fp8
  tiny "$config" ngram:4 "$family-fp8ngram" --kv-dtype fp8
  grep -q '"kv_lora_rank"' "$config" && continue
  tiny "$config" none "$family-f16nospec" --kv-dtype f16
  tiny "$config" ngram:4 "$family-f16ngram" --kv-dtype f16
done
# The seed scenario (test/Parity/seed_memory.py, test/Tools/seed-nano-l40s.test): a
# Nemotron-Nano-9B-v2-shaped model compiled for an L40S, without and with speculation.
seed="$root/test/Tools/Inputs/nemotron-nano-9b-v2-seed.json"
"$build/bin/kiln-compile" "$seed" --target l40s --max-batch 64 --max-seq-len 8192 --spec none \
  --emit=so -o "$root/.carry/models/seed-nospec.so" || { echo "kiln-compile failed: seed"; parity_failed=1; }
"$build/bin/kiln-compile" "$seed" --target l40s --max-batch 32 --max-seq-len 8192 --spec ngram:3 \
  --emit=so -o "$root/.carry/models/seed-ngram.so" || { echo "kiln-compile failed: seed ngram"; parity_failed=1; }
"$build/bin/kiln-compile" "$seed" --target l40s --max-batch 64 --max-seq-len 8192 --spec ngram:3 \
  --ssm-mode replay --emit=so -o "$root/.carry/models/seed-replay.so" ||
  { echo "kiln-compile failed: seed replay"; parity_failed=1; }
ls -la "$root/.carry/models"
exit "$parity_failed"
