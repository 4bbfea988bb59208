// One variant of the MoE grouped expert GEMM for kiln_bench_grouped_gemm: this file is
// compiled once per (stages, tile tokens) pair, with KILN_GROUPED_GEMM_STAGES,
// KILN_GROUPED_GEMM_MAX_TILE_TOKENS and KILN_GROUPED_GEMM_VARIANT (the registration
// function's name) defined by bench/Moe/CMakeLists.txt.
#include "GroupedGemmBench.h"
#include "GroupedGemmSm90.cuh"

namespace {

namespace grouped = kiln::graph::grouped;
#if KILN_GROUPED_GEMM_PRODUCER
constexpr int kVariantThreads = grouped::kSpecializedThreads;
constexpr int kVariantShared = grouped::kSpecializedSharedBytes;
#else
constexpr int kVariantThreads = grouped::kThreads, kVariantShared = grouped::kSharedBytes;
#endif

__global__ void __launch_bounds__(kVariantThreads, 1)
    variantKernel(kiln::graph::GroupedGemmArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(16) char shared[];
#if KILN_GROUPED_GEMM_PRODUCER
  grouped::groupedGemmCtaSpecialized(a, shared, static_cast<int>(blockIdx.x),
                                     static_cast<int>(gridDim.x));
#else
  grouped::groupedGemmCta(a, shared, static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x));
#endif
#endif
}

cudaError_t launch(const kiln::graph::GroupedGemmArgs &a, int ctas, cudaStream_t stream) {
  cudaError_t e = cudaFuncSetAttribute(variantKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       kVariantShared);
  if (e != cudaSuccess)
    return e;
  variantKernel<<<ctas, kVariantThreads, kVariantShared, stream>>>(a);
  return cudaGetLastError();
}

} // namespace

kiln::bench::GroupedGemmVariant KILN_GROUPED_GEMM_VARIANT() {
  return {grouped::kStages, grouped::kMaxTileTokens, grouped::kFeatureTile, kVariantShared, launch};
}
