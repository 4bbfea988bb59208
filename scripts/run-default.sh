#!/usr/bin/env bash
# The main job: build Kiln, compile the bundled Llama-3.1-8B-Instruct config into a shared
# object (the whole decoder graph, lowered), print its deploy report, and run one
# validation-only step of it with kiln-run --dry (no GPU needed; on a GPU machine run
# kiln-run with --weights to generate). Extra arguments go to kiln-compile.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${KILN_BUILD_DIR:-$root/build}
"$root/scripts/build.sh" >&2
model=$root/examples/models/llama-3.1-8b-instruct.json
out=$build/models
mkdir -p "$out"
"$build/bin/kiln-compile" "$model" --max-batch 16 "$@"
"$build/bin/kiln-compile" "$model" --max-batch 16 "$@" --emit=so -o "$out/llama-3.1-8b.so"
echo "compiled: $out/llama-3.1-8b.so"
printf '128000 9906 11 1917 0\n128000 791 4062 14198\n' > "$out/prompts.txt"
if [[ -x $build/bin/kiln-run ]]; then
  "$build/bin/kiln-run" "$out/llama-3.1-8b.so" --prompts "$out/prompts.txt" \
    --max-new-tokens 4 --dry
fi
