#!/usr/bin/env bash
# One device call over prebuilt binaries (no build there): the decode GPU tests, the
# runtime's end-to-end GPU test (decode through kiln_rt_attention: fused split_keys
# combine, graph replays, lossless speculation), the benchmark's default grid and its
# tuning variants, then the PyTorch peers.
# usage (repository root, on the GPU machine): bench/Decode/run_prebuilt.sh BIN_DIR OUT_DIR
# BIN_DIR holds DecodeGpuTest, ModelGpuTest, kiln_decode_bench, kiln-run,
# libkiln_runtime.so and the tiny models libkiln_tiny*.so (one flat folder).
set -u
BIN=$(cd "${1:?BIN_DIR}" && pwd)
OUT=${2:-/tmp/decode-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
START=$(date +%s)
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv > "$OUT/gpu.txt" 2>&1
date -u > "$OUT/date.txt"
timeout ${KILN_DECODE_TEST_TIMEOUT:-300} "$BIN/DecodeGpuTest" > "$OUT/DecodeGpuTest.log" 2>&1
echo "DecodeGpuTest rc=$? ($(( $(date +%s) - START )) s)"
grep -E "^\[  (PASSED|FAILED) |Failure|FAILED" "$OUT/DecodeGpuTest.log" | head -30
CUDA_MODULE_LOADING=EAGER KILN_TINY_DIR="$BIN" timeout 200 "$BIN/ModelGpuTest" > "$OUT/ModelGpuTest.log" 2>&1
echo "ModelGpuTest rc=$? ($(( $(date +%s) - START )) s)"
grep -E "^\[  (PASSED|FAILED) |Failure|FAILED" "$OUT/ModelGpuTest.log" | head -20
{ timeout 200 "$BIN/kiln_decode_bench" --quick; timeout 200 "$BIN/kiln_decode_bench" --variants | grep -v '"kind":"\(device\|ceiling\)"'; } > "$OUT/kiln.jsonl" 2> "$OUT/bench.err"
echo "bench rc=$? ($(( $(date +%s) - START )) s)"; tail -3 "$OUT/bench.err"
timeout ${KILN_DECODE_PEER_TIMEOUT:-240} python3 bench/Decode/peers.py "$OUT/kiln.jsonl" "$OUT" > "$OUT/peers.log" 2>&1
echo "peers rc=$? ($(( $(date +%s) - START )) s)"
cat "$OUT/results.md" 2>/dev/null || tail -20 "$OUT/peers.log"
