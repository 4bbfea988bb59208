// gqa_decode over an FP8 e4m3 pool (bf16 q/out) with the integer widening of the bytes
// (gqaDecodeKernel's FAST), which the launcher runs where the split plan has more than
// one split (gqaFastFp8 in DecodeApi.cpp). Head dim 128 with one row tile only, the shape
// it was measured at. Its own translation unit, so a -j2 build compiles it next to the
// others.
#include "GqaDecodeKernel.cuh"

#include "DecodeKernels.h"

namespace kiln::decode {

KernelInfo gqaKernelInfoBf16Fp8Fast(int headDim, int mTiles) {
  if (headDim != 128 || mTiles != 1)
    return KernelInfo{};
  using C = GqaConfig<128, 1, true>;
  return KernelInfo{
      reinterpret_cast<const void *>(&gqaDecodeKernel<__nv_bfloat16, 128, 1, uint8_t, 0, true>),
      C::THREADS, C::SMEM_BYTES, C::TILE_N};
}

} // namespace kiln::decode
