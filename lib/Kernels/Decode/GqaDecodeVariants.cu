// Tuning variants of gqa_decode (bf16 q/out over a bf16 pool, head_dim 128, one row tile:
// q_len * group <= 16) for the benchmark's side-by-side runs (KILN_GQA_VARIANT, see
// kGqaVariants). Their own translation unit, so they build in parallel with the rest.
#include "GqaDecodeKernel.cuh"

#include "DecodeKernels.h"

#include <utility>

namespace kiln::decode {

namespace {
template <int V> KernelInfo variantInfo() {
  using C = GqaConfig<128, 1, false, V>;
  return KernelInfo{
      reinterpret_cast<const void *>(&gqaDecodeKernel<__nv_bfloat16, 128, 1, __nv_bfloat16, V>),
      C::THREADS, C::SMEM_BYTES, C::TILE_N};
}

// Variants 1 .. N-1 (Vs + 1): variant 0 is GqaDecodeBf16.cu's default kernel.
template <int... Vs> KernelInfo pick(int variant, std::integer_sequence<int, Vs...>) {
  KernelInfo info;
  ((variant == Vs + 1 ? (info = variantInfo<Vs + 1>(), 0) : 0), ...);
  return info;
}
} // namespace

int gqaNumVariants() { return kGqaNumVariants; }

KernelInfo gqaKernelInfoBf16Variant(int variant) {
  if (variant < 1 || variant >= kGqaNumVariants)
    return KernelInfo{};
  return pick(variant, std::make_integer_sequence<int, kGqaNumVariants - 1>{});
}

} // namespace kiln::decode
