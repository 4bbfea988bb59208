// gdn_chunk_prefill: the launches of GdnChunkPrefill.cuh's kernel, one instantiation a
// k_dim (64, 128); the value dimension is split over CTAs of 32 columns.
#include "GdnChunkPrefill.cuh"

#include "StatusInternal.h"

#include <cuda_runtime.h>

namespace kiln::kernels::gdn {
namespace {

template <int KD>
kiln_status_t launchKd(const GdnChunkArgs &a, int batch, cudaStream_t stream) {
  constexpr int bytes = ChunkSmem<KD>::bytes;
  int device = 0, optin = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e == cudaSuccess)
    e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  if (e != cudaSuccess)
    return fail(KILN_ERROR_CUDA, "gdn_chunk_prefill: device query failed: %s",
                cudaGetErrorString(e));
  if (optin < bytes)
    return fail(KILN_ERROR_UNSUPPORTED,
                "gdn_chunk_prefill: k_dim %d needs %d bytes of shared memory a block; the "
                "device allows %d",
                KD, bytes, optin);
  e = cudaFuncSetAttribute(gdnChunkPrefillKernel<KD>,
                           cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e != cudaSuccess)
    return fail(KILN_ERROR_CUDA, "gdn_chunk_prefill: cudaFuncSetAttribute failed: %s",
                cudaGetErrorString(e));
  const dim3 grid(static_cast<unsigned>(a.vHeads), static_cast<unsigned>(batch),
                  static_cast<unsigned>(a.vDim / kSlice));
  gdnChunkPrefillKernel<KD><<<grid, kThreads, bytes, stream>>>(a);
  e = cudaGetLastError();
  if (e != cudaSuccess)
    return fail(KILN_ERROR_CUDA, "gdn_chunk_prefill: kernel launch failed: %s",
                cudaGetErrorString(e));
  return ok();
}

} // namespace

kiln_status_t launchGdnChunkPrefill(const GdnChunkArgs &a, int batch, int kDim, void *stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  return kDim == 64 ? launchKd<64>(a, batch, s) : launchKd<128>(a, batch, s);
}

} // namespace kiln::kernels::gdn
