#!/usr/bin/env bash
# Builds Kiln and runs every test: lit (IR, diagnostics, tools), gtest unit and kernel
# tests through ctest (GPU tests skip visibly without a CUDA device), and a consumer
# project built against the installed tree; then the compiler half again with ASan +
# UBSan (scripts/sanitize.sh: lit and the CPU gtests under the sanitizers) and a fuzz
# smoke run of every libFuzzer target (scripts/fuzz.sh, ${KILN_FUZZ_SECONDS:-30} s each).
# KILN_SANITIZERS=0 skips those two. Ends with "N passed, N failed, N skipped" over all
# of it, after a line per part.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${KILN_BUILD_DIR:-$root/build}
results=$build/test-results
sanitize_build=${KILN_SANITIZE_BUILD_DIR:-$root/build-sanitize}
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

more=()
if [[ ${KILN_SANITIZERS:-1} != 0 ]]; then
  # Both write into $sanitize_build/test-results (sanitize.sh clears it first). The
  # total at the end counts their cases; sanitize.sh's own total is relabelled so that
  # only the last line reads "N passed, ...".
  KILN_SANITIZE_BUILD_DIR=$sanitize_build "$root/scripts/sanitize.sh" 2>&1 |
    sed -u 's/^\([0-9]* passed, \)/ASan + UBSan run: \1/'
  KILN_SANITIZE_BUILD_DIR=$sanitize_build "$root/scripts/fuzz.sh" "${KILN_FUZZ_SECONDS:-30}"
  sanitize_results=$sanitize_build/test-results
  more+=(--also "ASan + UBSan" "$sanitize_results/lit.xml" "$sanitize_results/ctest.xml"
         "$sanitize_results/gtest"
         --junit "fuzz smoke" "$sanitize_results/fuzz/fuzz.xml")
fi

echo "== summary =="
python3 "$root/scripts/summarize-tests.py" --lit "$results/lit.xml" --ctest "$results/ctest.xml" \
  --gtest-dir "$results/gtest" --extra-passed "$consumer_ok" --extra-failed "$((1 - consumer_ok))" \
  "${more[@]}"
