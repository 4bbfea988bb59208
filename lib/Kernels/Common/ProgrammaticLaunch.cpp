#include "ProgrammaticLaunch.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace kiln::kernels {

cudaError_t launchMaybeProgrammatic(const void *fn, dim3 grid, dim3 block, void **argv,
                                    size_t smem, cudaStream_t stream, bool programmatic) {
  // The legacy default stream's ordering with programmatic launches is not documented:
  // plain launches there.
  if (!programmatic || stream == nullptr || stream == cudaStreamLegacy)
    return cudaLaunchKernel(fn, grid, block, argv, smem, stream);
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  const cudaError_t error = cudaLaunchKernelExC(&config, fn, argv);
  if (error != cudaErrorNotSupported && error != cudaErrorInvalidValue)
    return error;
  cudaGetLastError();
  return cudaLaunchKernel(fn, grid, block, argv, smem, stream);
}

bool imageWaits(const void *kernel) {
  cudaFuncAttributes attributes{};
  if (cudaFuncGetAttributes(&attributes, kernel) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  // Both: an image JIT-compiled onto sm_90 from older PTX reports binaryVersion 90 but
  // has no griddepcontrol.wait.
  return attributes.ptxVersion >= 90 && attributes.binaryVersion >= 90;
}

namespace {
// -1 until KILN_PDL is read or the setter runs, then 0 or 1.
std::atomic<int> chainState{-1};
} // namespace

bool chainSmallKernels() {
  int state = chainState.load(std::memory_order_relaxed);
  if (state < 0) {
    const char *v = std::getenv("KILN_PDL");
    int expected = -1;
    chainState.compare_exchange_strong(expected, v && std::strcmp(v, "1") == 0 ? 1 : 0,
                                       std::memory_order_relaxed);
    state = chainState.load(std::memory_order_relaxed);
  }
  return state == 1;
}

void setChainSmallKernels(bool chain) {
  chainState.store(chain ? 1 : 0, std::memory_order_relaxed);
}

} // namespace kiln::kernels
