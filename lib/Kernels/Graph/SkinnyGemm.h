// The skinny GEMM: out[m, n] = x[m, k] . w[n, k]^T (+ bias) for the few rows of a
// batch-1 decode or verify step, one launch, no split of K over CTAs. Rows go in groups
// of up to kSkinnyGemmRowGroup (a CTA's accumulators); a step of more rows reads the
// weights once a group, so it suits steps of one group.
//
// Why: at one row a 4096 x 4096 projection is 32 MB of weights and ~11 us of reads, and
// every GEMM kernel (cuBLASLt's, the TMA dense GEMM, the split-K attempt of 2026-12-06)
// spends 4-5 us more on ramp-up and tail. This one is launched with programmatic
// dependent launch: its CTAs become resident while the kernel before it still runs, pull
// their weights into the L2 (weights are never written by a step, so this is safe before
// the wait), and only then wait for the previous kernel's output (x).
//
// Rows stay invariant: a thread owns the same 16-byte K chunks of every row and feature
// whatever m, the row group, the CTA's feature count or the batch are, and sums them in
// one fixed order
// (a chunk's 8 products in order, chunks in order, a fixed shuffle tree, warps in order),
// so a row's bits never depend on the other rows (lossless speculation).
#ifndef KILN_LIB_KERNELS_GRAPH_SKINNYGEMM_H
#define KILN_LIB_KERNELS_GRAPH_SKINNYGEMM_H

#include <cuda_runtime.h>

#include <cstdint>

namespace kiln::graph {

constexpr int64_t kSkinnyGemmRowGroup = 16;

// One (possibly strided-batched) skinny GEMM. Pointers 16-byte aligned; k, the leading
// dimensions and the batch strides multiples of 8 elements (x's batch stride may be 0:
// every entry reads the same x, as kiln_rt_linear_pair's does); w in nn.Linear's [n, k]
// layout. bias (nullable, [n]) is added in fp32 before the one rounding to bf16.
struct SkinnyGemmArgs {
  const uint16_t *x;
  int64_t ldx, xBatchStride;
  const uint16_t *w;
  int64_t ldw, wBatchStride;
  const uint16_t *bias;
  uint16_t *out;
  int64_t ldo, outBatchStride;
  int64_t batch, m, n, k;
};

// Whether the arguments are of the form the kernel takes (alignment, multiples of 8,
// sizes within the grid's and int32's limits).
bool skinnyGemmFits(const SkinnyGemmArgs &args);

// Launches it (programmatic dependent launch where the device and driver have it).
cudaError_t launchSkinnyGemm(const SkinnyGemmArgs &args, cudaStream_t stream);

} // namespace kiln::graph

#endif // KILN_LIB_KERNELS_GRAPH_SKINNYGEMM_H
