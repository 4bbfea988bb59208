// Tuning variants of gqa_decode over an FP8 e4m3 pool (bf16 q/out, head_dim 128, one row
// tile; KILN_GQA_VARIANT, the kGqaVariants rows with kGqaPoolFp8): the producer-warp
// bulk-copy kernel and the integer widening. Their own translation unit (-j2 builds).
#include "GqaDecodeBulk.cuh"

#include "DecodeKernels.h"

#include <utility>

namespace kiln::decode {

namespace {
template <int V> KernelInfo fp8VariantInfo() {
  constexpr GqaTuning tune = kGqaVariants[V];
  if constexpr (!gqaVariantHasPool(tune, kGqaPoolFp8)) {
    return KernelInfo{};
  } else if constexpr (tune.bulk) {
    using C = GqaBulkConfig<128, 1, true, V>;
    return KernelInfo{
        reinterpret_cast<const void *>(&gqaDecodeBulkKernel<__nv_bfloat16, 128, 1, uint8_t, V>),
        C::THREADS, C::SMEM_BYTES, C::TILE_N};
  } else {
    using C = GqaConfig<128, 1, true, V>;
    return KernelInfo{
        reinterpret_cast<const void *>(&gqaDecodeKernel<__nv_bfloat16, 128, 1, uint8_t, V>),
        C::THREADS, C::SMEM_BYTES, C::TILE_N};
  }
}

template <int... Vs> KernelInfo pickFp8(int variant, std::integer_sequence<int, Vs...>) {
  KernelInfo info;
  ((variant == Vs + 1 ? (info = fp8VariantInfo<Vs + 1>(), 0) : 0), ...);
  return info;
}
} // namespace

KernelInfo gqaKernelInfoBf16Fp8Variant(int variant) {
  if (variant < 1 || variant >= kGqaNumVariants)
    return KernelInfo{};
  return pickFp8(variant, std::make_integer_sequence<int, kGqaNumVariants - 1>{});
}

} // namespace kiln::decode
