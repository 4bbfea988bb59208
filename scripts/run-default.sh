#!/usr/bin/env bash
# The main job: build Kiln and compile the bundled default model, printing its report.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${KILN_BUILD_DIR:-$root/build}
"$root/scripts/build.sh" >&2
if [[ -x $build/bin/kiln-compile ]]; then
  exec "$build/bin/kiln-compile" "$@"
fi
exec "$build/bin/kiln-opt" "$root/examples/hybrid.mlir" "$@"
