// Device helpers the kernel benchmarks share: deterministic fill values, and the copy
// kernel whose read + write bandwidth is the ceiling the state-update benchmarks (Mamba,
// Gated DeltaNet) report against.
#ifndef KILN_BENCH_BENCHDEVICE_CUH
#define KILN_BENCH_BENCHDEVICE_CUH

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace kiln::bench {

// A hash of (i, seed) in [0, 1): the fill kernels' values, the same on every run.
__device__ __forceinline__ float hashUnit(size_t i, uint32_t seed) {
  uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
  h ^= h >> 13;
  h *= 0x5bd1e995u;
  h ^= h >> 15;
  return (h & 0xffffff) / 16777216.0f;
}

namespace { // each benchmark is one translation unit; no two definitions meet
// dst = src, 16 bytes a thread and step (grid-stride).
__global__ void copyKernel(const uint4 *__restrict__ src, uint4 *__restrict__ dst, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}
} // namespace

} // namespace kiln::bench

#endif
