#include "SlowProducer.h"

namespace {

__global__ void slowProducerKernel(const uint16_t *values, uint16_t *out, int64_t n,
                                   long long spinCycles) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
  const long long start = clock64();
  while (clock64() - start < spinCycles) {
  }
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = values[i];
}

} // namespace

cudaError_t launchSlowProducer(const uint16_t *values, uint16_t *out, int64_t n,
                               long long spinCycles, cudaStream_t stream) {
  slowProducerKernel<<<4, 256, 0, stream>>>(values, out, n, spinCycles);
  return cudaGetLastError();
}
