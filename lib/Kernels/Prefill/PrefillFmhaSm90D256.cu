// Head dim 256 instantiations of the Hopper wgmma prefill kernel (dense and paged,
// bf16/fp16). The tiles: 2 warpgroups x 64 query rows, 64-key tiles, 2 stages. A
// warpgroup's O accumulator (64 x 256 fp32) is 128 registers a thread and S (64 x 64)
// 32 more, which leaves the rest of the 255 a thread may have (256 threads a block) for
// P, the softmax state and addresses without spilling. Shared memory: Q 128 x 256 (64
// KiB) + 2 stages x (K + V) 64 x 256 (128 KiB) = 192 KiB (+ 1 KiB alignment), under the
// 227 KiB a block may opt into. A 3-stage ring (256 KiB) does not fit; 128-key tiles
// would need 64 more S registers and spill.
#include "PrefillFmhaSm90.cuh"

namespace kiln::kernels::prefill {

namespace {
constexpr int kD256BN = 64, kD256Stages = 2;
static_assert(fmhaSm90SmemBytes<256, kD256BN, kD256Stages, 2>() <= 227 * 1024,
              "the d256 tiles must fit a block's opt-in shared memory");
} // namespace

template <bool PAGED>
cudaError_t launchPrefillFmhaSm90D256(const FmhaArgs &args, bool bf16, int batch, int maxSeqlenQ,
                                      int qHeads, cudaStream_t stream) {
  if (bf16)
    return launchPrefillFmhaSm90<__nv_bfloat16, 256, kD256BN, kD256Stages, PAGED>(
        args, batch, maxSeqlenQ, qHeads, stream);
  return launchPrefillFmhaSm90<__half, 256, kD256BN, kD256Stages, PAGED>(args, batch, maxSeqlenQ,
                                                                         qHeads, stream);
}

template cudaError_t launchPrefillFmhaSm90D256<false>(const FmhaArgs &, bool, int, int, int,
                                                      cudaStream_t);
template cudaError_t launchPrefillFmhaSm90D256<true>(const FmhaArgs &, bool, int, int, int,
                                                     cudaStream_t);

} // namespace kiln::kernels::prefill
