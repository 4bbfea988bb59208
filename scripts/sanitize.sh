#!/usr/bin/env bash
# Builds the compiler half of Kiln (no CUDA) with Debian's clang-22, AddressSanitizer and
# UndefinedBehaviorSanitizer into ${KILN_SANITIZE_BUILD_DIR:-build-sanitize}, then runs
# every lit test and the CPU gtests under them. Installs clang-22 and its runtimes if
# missing. Results go to <build>/test-results (lit.xml, ctest.xml, gtest/*.xml); ends
# with "N passed, N failed, N skipped" for this run. docs/reliability.md explains the
# runtime options and the suppressions (scripts/sanitizer-common.sh sets them).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/sanitizer-common.sh"
build=$kiln_sanitize_build
results=$build/test-results

echo "== sanitizer build (clang-22, ASan + UBSan, no CUDA) in $build =="
if ! kiln_configure_sanitize_build || ! cmake --build "$build" -j "$kiln_jobs"; then
  echo "sanitizer build failed"
  echo "0 passed, 1 failed, 0 skipped"
  exit 1
fi
rm -rf "$results" && mkdir -p "$results/gtest"

echo "== lit (ASan + UBSan) =="
/usr/lib/llvm-22/bin/lit -sv --xunit-xml-output "$results/lit.xml" "$build/test"

echo "== ctest (ASan + UBSan) =="
(cd "$build" && GTEST_OUTPUT="xml:$results/gtest/" \
   ctest --output-on-failure --output-junit "$results/ctest.xml")

python3 "$root/scripts/summarize-tests.py" --lit "$results/lit.xml" --ctest "$results/ctest.xml" \
  --gtest-dir "$results/gtest"
