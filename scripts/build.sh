#!/usr/bin/env bash
# Configures and builds Kiln into ${KILN_BUILD_DIR:-build}. Extra arguments go to cmake.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${KILN_BUILD_DIR:-$root/build}
"$root/scripts/install-deps.sh"
if [[ ! -f $build/build.ninja ]]; then
  cmake -G Ninja -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit "$@"
fi
cmake --build "$build"
