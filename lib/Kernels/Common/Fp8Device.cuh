// Device conversions the kernels that read FP8 e4m3 or f16 caches next to bf16
// activations share (gqa_decode, the paged prefill, kv_append): the cache's bytes and bf16
// queries, both made fp16 mma operands, and bf16 K/V stored into an f16 pool.
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

// 8 bf16 values -> 8 fp16 values, each pair of fp32 values passed through `limit` first,
// then rounded to nearest even.
template <typename Limit>
__device__ __forceinline__ uint4 bf16x8ToFp16Limited(const uint4 &in, Limit limit) {
  const __nv_bfloat162 *pairs = reinterpret_cast<const __nv_bfloat162 *>(&in);
  uint4 out;
  uint32_t *words = reinterpret_cast<uint32_t *>(&out);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(pairs[i]);
    __half2 h = __floats2half2_rn(limit(f.x), limit(f.y));
    words[i] = *reinterpret_cast<uint32_t *>(&h);
  }
  return out;
}

// 8 bf16 values -> 8 fp16 values, clamped to fp16's finite range (exact inside it for
// values in fp16's normal range).
__device__ __forceinline__ uint4 bf16x8ToFp16(const uint4 &in) {
  return bf16x8ToFp16Limited(in, [](float f) { return fminf(fmaxf(f, -65504.f), 65504.f); });
}

// fp16's saturation of a bf16 value (exact in fp32): finite values beyond +-65504 and
// infinities become +-65504 (the largest finite fp16); NaN stays NaN.
__device__ __forceinline__ float saturateToFp16Range(float f) {
  return fabsf(f) > 65504.f ? copysignf(65504.f, f) : f;
}

// 8 bf16 values -> 8 fp16 values, rounded to nearest even (exact for bf16 values in
// fp16's normal range; below it, fp16's subnormals round), saturating at +-65504 as
// saturateToFp16Range does, NaN kept: how kv_append fills an f16 pool, and the queries
// of the kernels that read one.
__device__ __forceinline__ uint4 bf16x8ToFp16Sat(const uint4 &in) {
  return bf16x8ToFp16Limited(in, [](float f) { return saturateToFp16Range(f); });
}

} // namespace kiln::kernels

#endif
