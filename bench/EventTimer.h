// The benchmarks' event timer (bench/Decode, bench/Moe): mean milliseconds a call of
// fn(i), i = 0 .. reps - 1 (a benchmark may rotate buffers by it), over `reps` calls on
// the default stream, after `warmups` calls of fn(0). A CUDA error ends the benchmark
// with its message: there is no number to print after it.
#ifndef KILN_BENCH_EVENTTIMER_H
#define KILN_BENCH_EVENTTIMER_H

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

namespace kiln::bench {

inline void exitOnCudaError(cudaError_t e, const char *what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "event timer: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

template <typename Fn> float eventMs(Fn &&fn, int warmups, int reps) {
  cudaEvent_t start, stop;
  exitOnCudaError(cudaEventCreate(&start), "cudaEventCreate");
  exitOnCudaError(cudaEventCreate(&stop), "cudaEventCreate");
  for (int w = 0; w < warmups; ++w)
    fn(0);
  exitOnCudaError(cudaEventRecord(start), "cudaEventRecord");
  for (int i = 0; i < reps; ++i)
    fn(i);
  exitOnCudaError(cudaEventRecord(stop), "cudaEventRecord");
  exitOnCudaError(cudaEventSynchronize(stop), "cudaEventSynchronize");
  float ms = 0;
  exitOnCudaError(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / reps;
}

} // namespace kiln::bench

#endif
