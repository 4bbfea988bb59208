// Instantiations of the Hopper wgmma prefill kernel on its overlapped schedule
// (KILN_PREFILL_VARIANT_SM90_OVERLAP; OVERLAP in PrefillFmhaSm90.cuh): head_dim 64 and
// 128, bf16/fp16, dense and paged. A file of their own so that a -j2 build compiles them
// next to the default schedule's.
//
// The schedule keeps the V tile of key tile j - 1 in use while tile j is computed, so the
// ring needs one stage more than the default's for the same prefetch distance:
//   d128: 128 x 128 tiles, 3 stages: Q 32 KiB + 3 x (K + V) 64 KiB = 224 KiB (+ 1 KiB
//         alignment), one block a SM, as the default's 2 stages already are.
//   d64:  128 x 64 tiles, 3 stages: Q 16 KiB + 3 x 16 KiB = 64 KiB (+ 1). One block a
//         SM: P stays live through the softmax here, which takes d64 to 143 registers
//         (under a 128 cap, as the default schedule's 2 blocks a SM need, it spills 32 B).
// ptxas (CUDA 13, sm_90a), registers, no spills: d128 227 (dense and paged), d64 143.
#include "PrefillFmhaSm90.cuh"

namespace kiln::kernels::prefill {

namespace {
template <int D> struct OverlapConfig;
template <> struct OverlapConfig<64> { static constexpr int BN = 64, STAGES = 3, MIN_BLOCKS = 1; };
template <> struct OverlapConfig<128> {
  static constexpr int BN = 128, STAGES = 3, MIN_BLOCKS = 1;
};

template <typename T, int D, bool PAGED>
cudaError_t launchOverlap(const FmhaArgs &args, int batch, int maxSeqlenQ, int qHeads,
                          cudaStream_t stream) {
  using C = OverlapConfig<D>;
  return launchPrefillFmhaSm90<T, D, C::BN, C::STAGES, PAGED, 2, false, C::MIN_BLOCKS, true>(
      args, batch, maxSeqlenQ, qHeads, stream);
}
} // namespace

template <bool PAGED>
cudaError_t launchPrefillFmhaSm90Overlap(const FmhaArgs &args, bool bf16, int headDim, int batch,
                                         int maxSeqlenQ, int qHeads, cudaStream_t stream) {
  if (headDim == 64)
    return bf16 ? launchOverlap<__nv_bfloat16, 64, PAGED>(args, batch, maxSeqlenQ, qHeads, stream)
                : launchOverlap<__half, 64, PAGED>(args, batch, maxSeqlenQ, qHeads, stream);
  return bf16 ? launchOverlap<__nv_bfloat16, 128, PAGED>(args, batch, maxSeqlenQ, qHeads, stream)
              : launchOverlap<__half, 128, PAGED>(args, batch, maxSeqlenQ, qHeads, stream);
}

template cudaError_t launchPrefillFmhaSm90Overlap<false>(const FmhaArgs &, bool, int, int, int, int,
                                                         cudaStream_t);
template cudaError_t launchPrefillFmhaSm90Overlap<true>(const FmhaArgs &, bool, int, int, int, int,
                                                        cudaStream_t);

} // namespace kiln::kernels::prefill
