#include "ProgrammaticLaunch.h"

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

} // namespace kiln::kernels
