#!/usr/bin/env bash
# Builds Kiln's libFuzzer targets (fuzz/, with clang-22, ASan and UBSan; installs them if
# missing) in the sanitizer build (${KILN_SANITIZE_BUILD_DIR:-build-sanitize}) and runs
# them.
#
#   scripts/fuzz.sh [SECONDS]                      smoke: every target SECONDS (default 30)
#                                                  from its seed corpus; what the test
#                                                  command runs
#   scripts/fuzz.sh --long [SECONDS] [TARGET...]   long run: every target (or the ones
#                                                  named) SECONDS (default 3600), with a
#                                                  corpus kept across runs
#
# Targets: deploy, hfconfig, safetensors, manifest (docs/reliability.md). Seeds are in
# test/Fuzz/corpus/<target>/. The smoke run writes its results to
# <build>/test-results/fuzz/ (fuzz.xml: one case per target; <target>.log; crash
# inputs as <target>/crash-*); the long run keeps its corpus in
# <build>/fuzz-long/corpus/<target>/ and its logs and crash inputs in
# <build>/fuzz-long/<target>/. KILN_FUZZ_FORK=N runs a long-run target in N processes
# (libFuzzer's -fork=N). A crash input replays with:
# <build>/bin/kiln-fuzz-<target> <crash file>.
# Exit status: non-zero when a target found something (or did not build).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/sanitizer-common.sh"
build=$kiln_sanitize_build
all_targets=(deploy hfconfig safetensors manifest)

mode=smoke
if [[ ${1:-} == --long ]]; then
  mode=long
  shift
fi
seconds=${1:-}
[[ -n $seconds ]] && shift
[[ -z $seconds ]] && { [[ $mode == smoke ]] && seconds=30 || seconds=3600; }
if ! [[ $seconds =~ ^[0-9]+$ ]] || ((seconds == 0)); then
  echo "usage: scripts/fuzz.sh [--long] [SECONDS] [TARGET...]" >&2
  exit 2
fi
targets=("$@")
((${#targets[@]})) || targets=("${all_targets[@]}")
for target in "${targets[@]}"; do
  [[ " ${all_targets[*]} " == *" $target "* ]] ||
    { echo "unknown fuzz target '$target' (${all_targets[*]})" >&2; exit 2; }
done

if [[ $mode == smoke ]]; then
  out=$build/test-results/fuzz
else
  out=$build/fuzz-long
fi
mkdir -p "$out"

echo "== fuzzers: build (clang-22, libFuzzer + ASan + UBSan) in $build =="
binaries=()
for target in "${targets[@]}"; do binaries+=("kiln-fuzz-$target"); done
if ! kiln_configure_sanitize_build || ! cmake --build "$build" -j "$kiln_jobs" --target "${binaries[@]}"; then
  echo "fuzzer build failed"
  if [[ $mode == smoke ]]; then
    printf '<?xml version="1.0" encoding="UTF-8"?>\n<testsuite name="fuzz" tests="1" failures="1">\n<testcase classname="fuzz" name="build"><failure message="fuzzer build failed"/></testcase>\n</testsuite>\n' \
      >"$out/fuzz.xml"
  fi
  exit 1
fi

# libFuzzer's knobs: the harnesses bound their own inputs (docs/reliability.md), so a
# 25 s input or 2 GiB of memory is a finding (a hang or a blow-up), not a slow input.
common=(-timeout=25 -rss_limit_mb=2048 -print_final_stats=1)
dict_of() { [[ -f $root/fuzz/$1.dict ]] && echo "-dict=$root/fuzz/$1.dict"; }

failed=0
cases=""
total_runs=0
for target in "${targets[@]}"; do
  binary=$build/bin/kiln-fuzz-$target
  seeds=$root/test/Fuzz/corpus/$target
  if [[ $mode == smoke ]]; then
    work=$out/$target
    rm -rf "$work" && mkdir -p "$work/corpus"
    corpus=$work/corpus
    log=$out/$target.log
    extra=()
  else
    work=$out/$target
    corpus=$build/fuzz-long/corpus/$target
    mkdir -p "$work" "$corpus"
    log=$work/$(date +%Y%m%d-%H%M%S).log
    extra=()
    [[ -n ${KILN_FUZZ_FORK:-} ]] && extra+=(-fork="$KILN_FUZZ_FORK" -ignore_crashes=1)
  fi
  echo "== fuzz $target: ${seconds} s =="
  start=$(date +%s)
  # New inputs go to the first directory; the committed seeds stay as they are.
  (cd "$work" && "$binary" "${common[@]}" $(dict_of "$target") "${extra[@]}" \
     -max_total_time="$seconds" -artifact_prefix="$work/" "$corpus" "$seeds") >"$log" 2>&1
  status=$?
  elapsed=$(($(date +%s) - start))
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  # Fork mode prints no final stats; its progress lines count the executions.
  [[ -z $runs ]] && runs=$(sed -n 's/^#\([0-9]*\).*/\1/p' "$log" | tail -n 1)
  runs=${runs:-0}
  total_runs=$((total_runs + runs))
  crashes=$(find "$work" -maxdepth 1 \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' \
              -o -name 'oom-*' \) | wc -l)
  if ((status == 0 && crashes == 0)); then
    echo "fuzz $target: PASS ($runs executions in ${elapsed} s, corpus $(ls "$corpus" | wc -l) new inputs)"
    cases+="<testcase classname=\"fuzz\" name=\"$target\" time=\"$elapsed\"/>"$'\n'
  else
    failed=1
    echo "fuzz $target: FAIL (exit $status, $crashes finding(s) in $work; log $log)"
    grep -m 1 -A 25 -E '^==[0-9]+==ERROR|runtime error:|^SUMMARY|deadly signal' "$log" | head -n 40
    cases+="<testcase classname=\"fuzz\" name=\"$target\" time=\"$elapsed\"><failure message=\"see $log\"/></testcase>"$'\n'
  fi
done
echo "fuzz: $total_runs executions in total"
if [[ $mode == smoke ]]; then
  {
    echo '<?xml version="1.0" encoding="UTF-8"?>'
    echo "<testsuite name=\"fuzz\" tests=\"${#targets[@]}\">"
    printf '%s' "$cases"
    echo '</testsuite>'
  } >"$out/fuzz.xml"
fi
exit $failed
