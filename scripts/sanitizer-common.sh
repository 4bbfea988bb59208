# Sourced by scripts/sanitize.sh and scripts/fuzz.sh (which set $root): the one
# sanitizer build both use, and the runtime options of its binaries. docs/reliability.md
# explains every option and suppression.
#
# The build (${KILN_SANITIZE_BUILD_DIR:-build-sanitize}) is the compiler half only (no
# CUDA), compiled by Debian's clang-22 at -O1 with ASan + UBSan and libFuzzer's coverage
# instrumentation, so the same objects serve the lit/gtest run and the fuzzers.
kiln_sanitize_build=${KILN_SANITIZE_BUILD_DIR:-$root/build-sanitize}
kiln_jobs=${KILN_JOBS:-$(nproc)}

kiln_configure_sanitize_build() {
  "$root/scripts/install-deps.sh" --sanitizers || return 1
  [[ -f $kiln_sanitize_build/build.ninja ]] && return 0
  local flags="-O1 -gline-tables-only -DNDEBUG"
  cmake -G Ninja -S "$root" -B "$kiln_sanitize_build" \
    -DCMAKE_C_COMPILER=clang-22 -DCMAKE_CXX_COMPILER=clang++-22 \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="$flags" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$flags" \
    -DKILN_BUILD_KERNELS=OFF -DKILN_BUILD_BENCH=OFF \
    -DKILN_SANITIZE=address,undefined,vptr -DKILN_BUILD_FUZZERS=ON \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit
}

kiln_symbolizer=/usr/lib/llvm-22/bin/llvm-symbolizer
export ASAN_SYMBOLIZER_PATH=$kiln_symbolizer
# abort_on_error: a report ends in SIGABRT, not exit(1), so lit's `not tool ...` sees a
# crash instead of an expected failure.
export ASAN_OPTIONS=${KILN_ASAN_OPTIONS:-allow_user_poisoning=0:use_sigaltstack=0:abort_on_error=1:external_symbolizer_path=$kiln_symbolizer}
export UBSAN_OPTIONS=${KILN_UBSAN_OPTIONS:-halt_on_error=1:abort_on_error=1:print_stacktrace=1:suppressions=$root/test/Sanitizers/ubsan.supp:external_symbolizer_path=$kiln_symbolizer}
