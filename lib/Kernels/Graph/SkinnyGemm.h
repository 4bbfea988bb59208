// The skinny GEMM: out[m, n] = x[m, k] . w[n, k]^T (+ bias) for the few rows of a
// batch-1 decode or verify step, one launch, no split of K over CTAs. Rows go in groups
// (a CTA's accumulators); a step of more rows reads the weights once a group, so it
// suits steps of one group.
//
// Why: at one row a 4096 x 4096 projection is 32 MB of weights and ~11 us of reads, and
// cuBLASLt's algorithms picked to keep rows invariant read them at 47-66% of the read
// ceiling (docs/performance.md). It is launched with programmatic dependent launch: its
// CTAs become resident while the kernel before it still runs and wait only for its
// output (x). Optionally (KILN_SKINNY_GEMM_OVERLAP=prefetch) they first pull their weight
// rows into the L2, which weights allow (a step never writes them) but which measured
// slower.
//
// Two forms, one per handle (never chosen by m):
// - tensor cores: mma.sync m16n8k16 with the weights as A and x as B, 16 features a CTA,
//   groups of 8 or 16 rows; the rows ride along in the instruction's N;
// - CUDA cores: fp32 FMAs, 1-4 features a CTA, groups of 1 to 16 rows; the fastest at
//   one row, but its work grows with the rows.
// Rows stay invariant in both: a thread owns the same K chunks of every row and feature
// whatever m, the row group, the CTA's features or the batch entry are, and sums them in
// one fixed order (in-chunk order, chunks in order, a fixed shuffle tree or mma
// sequence, warps in order), so a row's bits never depend on the other rows (lossless
// speculation).
#ifndef KILN_LIB_KERNELS_GRAPH_SKINNYGEMM_H
#define KILN_LIB_KERNELS_GRAPH_SKINNYGEMM_H

#include <cuda_runtime.h>

#include <cstdint>

namespace kiln::graph {

// The largest row group of either form (a grid's rows beyond it are more groups).
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
  // A SwiGLU epilogue (nullable; tensor cores): the batch is a gated MLP's gate (entry
  // 0) and up (entry 1) projections of one x (xBatchStride 0, no bias), and the kernel
  // writes only glu[m, n] (rows ldGlu apart) = swiglu(gate, up) from the two bf16 sums,
  // rounded as kiln_swiglu_bf16 rounds it: the bits of the pair's GEMM and the SwiGLU's
  // launch, one launch and no gate or up in memory. out is then not written.
  uint16_t *glu = nullptr;
  int64_t ldGlu = 0;
};

// Whether the arguments are of the form the kernel takes (alignment, multiples of 8,
// sizes within the grid's and int32's limits).
bool skinnyGemmFits(const SkinnyGemmArgs &args);

// How the tensor-core form streams its weights: a batch of 4 K steps a warp at a time
// through registers (Registers), of 8 (RegistersDeep), or through a cp.async ring in
// shared memory (Staged). All compute the same bits. Fastest is the library's pick:
// Registers, measured fastest in a whole step; KILN_SKINNY_MMA_STAGED=1 or
// KILN_SKINNY_MMA_DEPTH=8 pick the others, for the A/B (where a CTA cannot hold the ring,
// Registers runs). Staged asked for by name fails with cudaErrorNotSupported there, and
// so does it with a SwiGLU epilogue, which only the register kernels take (as Fastest,
// Registers runs it). The epilogue on CUDA cores fails with cudaErrorNotSupported.
enum class SkinnyMmaPath { Fastest, Registers, RegistersDeep, Staged };

// Launches it on tensor cores or on CUDA cores (programmatic dependent launch where the
// device and driver have it). A row's bits depend on the form, never on m or the path.
cudaError_t launchSkinnyGemm(const SkinnyGemmArgs &args, bool tensorCores, cudaStream_t stream,
                             SkinnyMmaPath path = SkinnyMmaPath::Fastest);

} // namespace kiln::graph

#endif // KILN_LIB_KERNELS_GRAPH_SKINNYGEMM_H
