// mla_decode_sm90's kernel (the device code is MlaDecodeSm90.cuh). Compiled only for
// sm_90a; elsewhere the body is empty and the launcher never selects it.
#include "DecodeKernels.h"
#include "MlaDecodeSm90.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KILN_MLA_HAS_WGMMA 1
#endif

namespace kiln::decode {
namespace {

__global__ void __launch_bounds__(mla_sm90::kThreads, 1)
    mlaDecodeSm90Kernel(const __grid_constant__ MlaSm90Args params) {
#ifdef KILN_MLA_HAS_WGMMA
  // The 128-byte swizzle needs 1024-byte aligned operands; the CTA code aligns the base.
  extern __shared__ __align__(1024) unsigned char smemRaw[];
  mla_sm90::mlaDecodeSm90Cta(params.base, &params.cache, smemRaw);
#endif
}

} // namespace

KernelInfo mlaSm90KernelInfo() {
  return KernelInfo{reinterpret_cast<const void *>(&mlaDecodeSm90Kernel), mla_sm90::kThreads,
                    mla_sm90::kSmemBytes, mla_sm90::kTile};
}

} // namespace kiln::decode
