#include "ProgrammaticLaunch.h"

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

bool chainSmallKernels() {
  static const bool chain = [] {
    const char *v = std::getenv("KILN_PDL");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  return chain;
}

} // namespace kiln::kernels
