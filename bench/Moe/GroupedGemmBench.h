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

// One registration function per variant: stages x tile tokens (x wgmma tiles a
// warpgroup), bench/Moe/CMakeLists.txt's list.
#define KILN_GROUPED_GEMM_VARIANTS(X)                                                         \
  X(S4T160W2) X(S4T160W2F0) X(S3T160W2F0) X(S4T192W1) X(P4T160W2) X(P4T160W2F0) X(P4T128W2)

#define KILN_DECLARE_VARIANT(name) kiln::bench::GroupedGemmVariant groupedGemm##name();
KILN_GROUPED_GEMM_VARIANTS(KILN_DECLARE_VARIANT)
#undef KILN_DECLARE_VARIANT

#endif
