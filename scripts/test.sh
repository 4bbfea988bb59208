#!/usr/bin/env bash
# Builds Kiln and runs every test: lit (IR, diagnostics, tools), gtest unit and kernel
# tests through ctest (GPU tests skip visibly without a CUDA device), and a consumer
# project built against the installed tree. Ends with "N passed, N failed, N skipped".
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${KILN_BUILD_DIR:-$root/build}
results=$build/test-results
"$root/scripts/build.sh" || { echo "0 passed, 1 failed"; exit 1; }
rm -rf "$results" && mkdir -p "$results"

echo "== lit =="
/usr/lib/llvm-22/bin/lit -sv --xunit-xml-output "$results/lit.xml" "$build/test"

echo "== ctest =="
# Each gtest binary also writes its cases to $results/gtest/<binary>.xml, so the summary
# counts individual gtest cases.
mkdir -p "$results/gtest"
(cd "$build" && GTEST_OUTPUT="xml:$results/gtest/" \
   ctest --output-on-failure --output-junit "$results/ctest.xml")

echo "== install + consumer project =="
install_dir=$build/install
consumer_build=$build/consumer
rm -rf "$install_dir" "$consumer_build"
consumer_ok=0
if cmake --install "$build" --prefix "$install_dir" >"$results/install.log" 2>&1 &&
   cmake -G Ninja -S "$root/examples/consumer" -B "$consumer_build" \
     -DCMAKE_PREFIX_PATH="$install_dir" >"$results/consumer.log" 2>&1 &&
   cmake --build "$consumer_build" >>"$results/consumer.log" 2>&1 &&
   "$consumer_build/kiln-consumer" >>"$results/consumer.log" 2>&1; then
  consumer_ok=1
  echo "consumer project: PASS"
else
  echo "consumer project: FAIL"; tail -n 30 "$results/install.log" "$results/consumer.log"
fi

python3 "$root/scripts/summarize-tests.py" --lit "$results/lit.xml" --ctest "$results/ctest.xml" \
  --gtest-dir "$results/gtest" --extra-passed "$consumer_ok" --extra-failed "$((1 - consumer_ok))"
