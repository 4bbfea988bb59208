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
# The fp8 pair (--kv-dtype fp8) is the same target over an e4m3 KV cache.
tiny() { "$build/bin/kiln-compile" "$1" --target h200 --max-batch 8 --max-seq-len 512 \
           --spec "$2" --emit=so -o "$root/.carry/models/$3.so" "${@:4}" ||
         { echo "kiln-compile failed: $1 --spec $2 ${*:4}"; parity_failed=1; }; }
for config in "$root"/test/Parity/configs/*-tiny.json; do
  family=$(basename "$config" -tiny.json)
  tiny "$config" none "$family-nospec"
  tiny "$config" ngram:4 "$family-ngram"
  tiny "$config" draft:4 "$family-draft"
  tiny "${config%.json}-draft.json" none "$family-draftmodel"
  tiny "$config" none "$family-fp8nospec" --kv-dtype fp8
  tiny "$config" ngram:4 "$family-fp8ngram" --kv-dtype fp8
done
ls -la "$root/.carry/models"
exit "$parity_failed"
