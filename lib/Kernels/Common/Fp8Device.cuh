// Device conversions the kernels that read FP8 e4m3 caches share (gqa_decode, the paged
// prefill): the cache's bytes and bf16 queries, both widened to fp16 mma operands.
#ifndef KILN_LIB_KERNELS_COMMON_FP8DEVICE_CUH
#define KILN_LIB_KERNELS_COMMON_FP8DEVICE_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

namespace kiln::kernels {

// 16 e4m3 values -> 16 fp16 values (exact: e4m3's range and precision fit in fp16).
__device__ __forceinline__ void widenE4m3x16(const uint4 &in, uint4 &lo, uint4 &hi) {
  const __nv_fp8x2_storage_t *pairs = reinterpret_cast<const __nv_fp8x2_storage_t *>(&in);
  uint32_t *out[2] = {reinterpret_cast<uint32_t *>(&lo), reinterpret_cast<uint32_t *>(&hi)};
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(pairs[i], __NV_E4M3);
    out[i / 4][i % 4] = static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
  }
}

// Two e4m3 values (the low 16 bits) -> an fp16x2 mma operand (exact).
__device__ __forceinline__ uint32_t e4m3x2ToHalf2(uint32_t pair) {
  const __half2_raw h =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair), __NV_E4M3);
  return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
}

// 8 bf16 values -> 8 fp16 values, clamped to fp16's finite range (exact inside it for
// values in fp16's normal range).
__device__ __forceinline__ uint4 bf16x8ToFp16(const uint4 &in) {
  const __nv_bfloat162 *pairs = reinterpret_cast<const __nv_bfloat162 *>(&in);
  uint4 out;
  uint32_t *words = reinterpret_cast<uint32_t *>(&out);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(pairs[i]);
    __half2 h = __floats2half2_rn(fminf(fmaxf(f.x, -65504.f), 65504.f),
                                  fminf(fmaxf(f.y, -65504.f), 65504.f));
    words[i] = *reinterpret_cast<uint32_t *>(&h);
  }
  return out;
}

} // namespace kiln::kernels

#endif
