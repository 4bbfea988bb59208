// The kernel benchmarks' error checks: a failed CUDA call (CHECK) or Kiln call (KCHECK)
// prints the call and its error and ends the benchmark, which has no result to give then.
#ifndef KILN_BENCH_BENCHCHECK_H
#define KILN_BENCH_BENCHCHECK_H

#include "kiln/Kernels/Status.h"

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CHECK(x)                                                                           \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)
#define KCHECK(x)                                                                          \
  do {                                                                                     \
    kiln_status_t s_ = (x);                                                                \
    if (s_ != KILN_OK) {                                                                   \
      std::fprintf(stderr, "%s: %s\n", #x, kiln_last_error());                             \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

#endif
