#!/bin/bash
# One device call for the Mamba kernels (run from the repo root, needs $OUT and
# GoogleTest sources in .carry/googletest): direct nvcc build (independent of the other
# kernel families' files), CPU + GPU tests, benchmark vs copy ceiling, rows-per-thread
# variants 2/8 of ssm_update, eager PyTorch + Triton peers. About 2-3 minutes on an H200.
#   device run: command "bash bench/Mamba/device_check.sh", carry [".carry"]
set -o pipefail
OUT=${OUT:-/tmp/mamba_out}; mkdir -p $OUT
export PYTHONUNBUFFERED=1
B=/tmp/mb; mkdir -p $B
I="-Iinclude -Ilib/Kernels/Common -Ilib/Kernels/Mamba -Itest/Kernels -Itest/Kernels/Mamba"
F="-O3 -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -lineinfo"
GT=.carry/googletest/googletest
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/env.txt 2>&1
date >> $OUT/env.txt
t0=$(date +%s)
build_variant() { # $1 = rows, $2 = dir
  mkdir -p $2
  nvcc $F $I -DKILN_MAMBA_SSM_ROWS=$1 -c lib/Kernels/Mamba/SsmUpdate.cu -o $2/SsmUpdate.o &
  nvcc $F $I -DKILN_MAMBA_SSM_ROWS=$1 -c lib/Kernels/Mamba/SsmUpdateSpec.cu -o $2/SsmUpdateSpec.o &
  wait
}
(
for f in ConvUpdate; do nvcc $F $I -c lib/Kernels/Mamba/$f.cu -o $B/$f.o & done
for f in Launchers MambaReference; do nvcc $F $I -x c++ -c lib/Kernels/Mamba/$f.cpp -o $B/$f.o & done
for f in Status HostNumeric; do nvcc $F $I -x c++ -c lib/Kernels/Common/$f.cpp -o $B/$f.o & done
nvcc $F $I -I$GT/include -I$GT -x c++ -c $GT/src/gtest-all.cc -o $B/gtest-all.o &
nvcc $F $I -I$GT/include -x c++ -c $GT/src/gtest_main.cc -o $B/gtest_main.o &
nvcc $F $I -I$GT/include -x c++ -c test/Kernels/Mamba/MambaGpuTest.cpp -o $B/gpu.o &
nvcc $F $I -I$GT/include -x c++ -c test/Kernels/Mamba/MambaCpuTest.cpp -o $B/cpu.o &
nvcc $F $I -c bench/Mamba/MambaBench.cu -o $B/bench.o &
build_variant 4 $B/r4 &
build_variant 2 $B/r2 &
build_variant 8 $B/r8 &
wait
) > $OUT/build.log 2>&1
COMMON="$B/ConvUpdate.o $B/Launchers.o $B/Status.o $B/HostNumeric.o"
nvcc -arch=sm_90a -o $B/gputest $B/gpu.o $B/r4/*.o $COMMON $B/MambaReference.o $B/gtest-all.o $B/gtest_main.o -lpthread >> $OUT/build.log 2>&1
nvcc -arch=sm_90a -o $B/cputest $B/cpu.o $B/r4/*.o $COMMON $B/MambaReference.o $B/gtest-all.o $B/gtest_main.o -lpthread >> $OUT/build.log 2>&1
for r in 2 4 8; do nvcc -arch=sm_90a -o $B/bench$r $B/bench.o $B/r$r/*.o $COMMON >> $OUT/build.log 2>&1; done
echo "build $(( $(date +%s) - t0 ))s" | tee -a $OUT/build.log
tail -5 $OUT/build.log
$B/cputest 2>&1 | tail -3
timeout 40 $B/gputest > $OUT/gputest.log 2>&1; echo "gputest rc=$?"; grep -E "OK|FAILED|PASSED|Failure|got" $OUT/gputest.log | head -40
echo "t=$(( $(date +%s) - t0 ))s"
$B/bench4 $OUT/mamba_kiln.json 2>&1 | tee $OUT/bench.log
echo "t=$(( $(date +%s) - t0 ))s"
for r in 2 8; do echo "== rows per thread $r"; KILN_BENCH_ONLY=ssm $B/bench$r $B/v$r.json 2>&1 | grep -v -E "device|ceiling"; done | tee $OUT/variants.log
echo "t=$(( $(date +%s) - t0 ))s"
timeout 60 python3 bench/Mamba/peer_torch.py $OUT/mamba_kiln.json $OUT/mamba_bench.json 2>&1 | tee $OUT/peers.log
echo "t=$(( $(date +%s) - t0 ))s"
