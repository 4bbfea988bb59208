// One variant of the MoE grouped expert GEMM for kiln_bench_grouped_gemm: this file is
// compiled once per row of bench/Moe/CMakeLists.txt's table, with the tunables
// (KILN_GROUPED_GEMM_TMA, _STAGES, _MAX_TILE_TOKENS, ...) and KILN_GROUPED_GEMM_VARIANT
// (the registration function's name) defined there.
#include "GroupedGemmBench.h"
#include "GroupedGemmSm90.cuh"

namespace {

namespace grouped = kiln::graph::grouped;
#if KILN_GROUPED_GEMM_TMA
constexpr int kVariantThreads = grouped::kTmaThreads, kVariantShared = grouped::kTmaSharedBytes;
#else
constexpr int kVariantThreads = grouped::kThreads, kVariantShared = grouped::kSharedBytes;
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KILN_SM90A 1
#endif

#if KILN_GROUPED_GEMM_TMA
__global__ void __launch_bounds__(kVariantThreads, 1)
    variantKernel(kiln::graph::GroupedGemmArgs a,
                  const __grid_constant__ grouped::GroupedGemmMaps maps) {
#ifdef KILN_SM90A
  extern __shared__ __align__(16) char shared[];
  grouped::groupedGemmCtaTma(a, maps, shared, static_cast<int>(blockIdx.x),
                             static_cast<int>(gridDim.x));
#endif
}
#else
__global__ void __launch_bounds__(kVariantThreads, 1)
    variantKernel(kiln::graph::GroupedGemmArgs a) {
#ifdef KILN_SM90A
  extern __shared__ __align__(16) char shared[];
  grouped::groupedGemmCta(a, shared, static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x));
#endif
}
#endif

cudaError_t launch(const kiln::graph::GroupedGemmArgs &a, int ctas, cudaStream_t stream) {
  cudaError_t e = cudaFuncSetAttribute(variantKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       kVariantShared);
  if (e != cudaSuccess)
    return e;
#if KILN_GROUPED_GEMM_TMA
  // Encoded per call, as launchGroupedGemm does (its cost is in the timing).
  grouped::GroupedGemmMaps maps{};
  if ((e = grouped::encodeMaps(a, maps)) != cudaSuccess)
    return e;
  variantKernel<<<ctas, kVariantThreads, kVariantShared, stream>>>(a, maps);
#else
  variantKernel<<<ctas, kVariantThreads, kVariantShared, stream>>>(a);
#endif
  return cudaGetLastError();
}

} // namespace

kiln::bench::GroupedGemmVariant KILN_GROUPED_GEMM_VARIANT() {
  return {grouped::kStages, grouped::kMaxTileTokens, grouped::kFeatureTile, kVariantShared, launch};
}
