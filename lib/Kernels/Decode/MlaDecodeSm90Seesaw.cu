// mla_decode_sm90's seesaw variant (device code: MlaDecodeSm90Seesaw.cuh), selected by
// KILN_MLA_SEESAW. Compiled only for sm_90a; elsewhere the body is empty and the
// launcher never selects it.
#include "DecodeKernels.h"
#include "MlaDecodeSm90Seesaw.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KILN_MLA_SEESAW_HAS_WGMMA 1
#endif

namespace kiln::decode {
namespace {

__global__ void __launch_bounds__(mla_sm90_seesaw::kThreads, 1)
    mlaDecodeSm90SeesawKernel(const __grid_constant__ MlaSm90Args params) {
#ifdef KILN_MLA_SEESAW_HAS_WGMMA
  extern __shared__ __align__(1024) unsigned char smemRaw[];
  mla_sm90_seesaw::mlaDecodeSm90SeesawCta(params.base, &params.cache, smemRaw);
#endif
}

} // namespace

KernelInfo mlaSm90SeesawKernelInfo() {
  return KernelInfo{reinterpret_cast<const void *>(&mlaDecodeSm90SeesawKernel),
                    mla_sm90_seesaw::kThreads, mla_sm90_seesaw::kSmemBytes, mla_sm90_seesaw::kTile};
}

} // namespace kiln::decode
