#include "kiln/Kernels/Device.h"
#include "StatusInternal.h"

#include <cuda_runtime.h>

using namespace kiln::kernels;

extern "C" kiln_status_t kiln_get_device_info(int device, kiln_device_info_t *info) {
  if (!info)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_get_device_info: info is null");
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    return fail(KILN_ERROR_NO_DEVICE, "kiln_get_device_info: no CUDA device visible");
  }
  if (device < 0 || device >= count)
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "kiln_get_device_info: device %d out of range [0, %d)", device, count);
  cudaDeviceProp props;
  cudaError_t error = cudaGetDeviceProperties(&props, device);
  if (error != cudaSuccess)
    return fail(KILN_ERROR_CUDA, "kiln_get_device_info: cudaGetDeviceProperties: %s",
                cudaGetErrorString(error));
  info->sm = props.major * 10 + props.minor;
  info->multiprocessors = props.multiProcessorCount;
  info->max_smem_per_block_optin = static_cast<int>(props.sharedMemPerBlockOptin);
  info->memory_bytes = props.totalGlobalMem;
  return ok();
}
