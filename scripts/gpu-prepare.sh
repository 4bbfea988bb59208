#!/usr/bin/env bash
# On the build machine (has LLVM/MLIR): put what a GPU machine needs into .carry/
# (git-ignored): GoogleTest sources and the e2e models compiled to shared objects.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${KILN_BUILD_DIR:-$root/build}
mkdir -p "$root/.carry/models"
rm -rf "$root/.carry/googletest" && cp -r /usr/src/googletest "$root/.carry/googletest"
for kind in hybrid mla; do
  "$build/bin/kiln-compile" "$root/examples/e2e/$kind.mlir" --spec none --emit=so \
    -o "$root/.carry/models/$kind-nospec.so"
  "$build/bin/kiln-compile" "$root/examples/e2e/$kind.mlir" --spec mtp:3 --emit=so \
    -o "$root/.carry/models/$kind-spec.so"
done
ls -la "$root/.carry/models"
