// The variants kiln_bench_grouped_gemm compares (GroupedGemmVariant.cu, one object per
// variant).
#ifndef KILN_BENCH_MOE_GROUPEDGEMMBENCH_H
#define KILN_BENCH_MOE_GROUPEDGEMMBENCH_H

#include "GroupedGemm.h"

namespace kiln::bench {
struct GroupedGemmVariant {
  int stages, maxTileTokens, featureTile, sharedBytes;
  cudaError_t (*launch)(const graph::GroupedGemmArgs &, int ctas, cudaStream_t);
};
} // namespace kiln::bench

// One registration function per variant: KILN_GROUPED_GEMM_VARIANTS(X), generated from
// bench/Moe/CMakeLists.txt's table.
#include "GroupedGemmVariants.inc"

#define KILN_DECLARE_VARIANT(name) kiln::bench::GroupedGemmVariant groupedGemm##name();
KILN_GROUPED_GEMM_VARIANTS(KILN_DECLARE_VARIANT)
#undef KILN_DECLARE_VARIANT

#endif
