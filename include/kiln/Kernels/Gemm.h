/* bf16 GEMM of nn.Linear layers on cuBLASLt (C ABI). See docs/kernels-graph.md.
 *
 * A kiln_gemm_t owns a cuBLASLt handle and a cache of per-shape plans (matmul
 * descriptor, matrix layouts and the algorithm the heuristic picked), keyed by
 * (m, n, k, bias or not, workspace size, pointer alignments): after the first call of a
 * shape no heuristic query runs again. The handle is safe to share between threads
 * (the cache is locked), but the usual use is one handle per stream. */
#ifndef KILN_KERNELS_GEMM_H
#define KILN_KERNELS_GEMM_H

#include <stddef.h>
#include <stdint.h>

#include "kiln/Kernels/Status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The workspace size the runtime gives kiln_gemm_bf16 (the HEURISTIC policy's split-K
 * algorithms use it). */
#define KILN_GEMM_WORKSPACE_BYTES (32ull << 20)

/* The ROW_INVARIANT policy's default invariant rows, and the m its algorithms are
 * chosen for unless kiln_gemm_set_pin_rows says otherwise. */
#define KILN_GEMM_INVARIANT_ROWS 64
/* Largest invariant rows kiln_gemm_set_invariant_rows accepts. */
#define KILN_GEMM_MAX_INVARIANT_ROWS (1 << 20)

typedef enum kiln_gemm_policy {
  /* Default. A row of out has the same bits for every m up to the invariant rows
   * (what lossless greedy speculation needs: a decode step and a verify step compute
   * the same rows at other m). Every such m runs one algorithm per shape, chosen for
   * m = KILN_GEMM_INVARIANT_ROWS (or the pin rows, kiln_gemm_set_pin_rows): split-K only with fp32 partials reduced in a
   * separate fixed-order pass (the split count is the algorithm's, not m's). Larger m
   * (prefill) runs the heuristic's best split-K-free algorithm. On sm_90a, shapes
   * whose output features fill the SMs (an lm_head; no bias) run Kiln's own wgmma GEMM
   * instead for those m, by the same rule: one kernel per shape, rows invariant. */
  KILN_GEMM_ROW_INVARIANT = 0,
  /* cuBLASLt's heuristic per (m, n, k), split-K included: fastest for small m, but a
   * row's bits may change with m. */
  KILN_GEMM_HEURISTIC = 1
} kiln_gemm_policy_t;

typedef struct kiln_gemm kiln_gemm_t; /* a cuBLASLt handle + per-shape plan cache */

kiln_status_t kiln_gemm_create(kiln_gemm_t **out);
void kiln_gemm_destroy(kiln_gemm_t *gemm);
/* Selects the algorithm policy (drops the plans chosen under the previous one). */
kiln_status_t kiln_gemm_set_policy(kiln_gemm_t *gemm, kiln_gemm_policy_t policy);

/* Rows up to which the ROW_INVARIANT policy keeps rows invariant (default
 * KILN_GEMM_INVARIANT_ROWS; the runtime sets its largest decode or verify step,
 * max_batch * (1 + max_draft_len)). 1..KILN_GEMM_MAX_INVARIANT_ROWS; drops the plans. */
kiln_status_t kiln_gemm_set_invariant_rows(kiln_gemm_t *gemm, int64_t rows);

/* Calls of at most the invariant rows (decode steps, which CUDA graphs capture) prefer
 * the algorithms whose launch is kernels only (a trial capture when the plan is made):
 * a memset or copy node takes a whole graph off the driver's fast launch path.
 * KILN_GEMM_KERNELS_ONLY=0 in the environment turns the preference off at
 * kiln_gemm_create. */

/* The m the ROW_INVARIANT policy asks cuBLASLt's heuristic about when it picks a plain
 * or strided-batch shape's one algorithm (unset: KILN_GEMM_INVARIANT_ROWS; set: used
 * clamped to the invariant rows). Pointer-array batched GEMMs and the own sm_90a GEMM
 * (an lm_head) are unaffected. Rows stay invariant whatever it is; what changes is which
 * m the algorithm suits: one picked for few rows streams the weights well at batch 1 and
 * can be compute-bound far below the matmul rate at 256 rows (the runtime sets max_batch
 * when it is above 64). KILN_GEMM_PIN_ROWS in the environment sets it for every handle at
 * kiln_gemm_create (a tuning experiment on a whole model; the runtime then leaves it),
 * which fails (INVALID_ARGUMENT) on a value that is not a count in range.
 * 1..KILN_GEMM_MAX_INVARIANT_ROWS; drops the plans. */
kiln_status_t kiln_gemm_set_pin_rows(kiln_gemm_t *gemm, int64_t rows);

/* Whether the ROW_INVARIANT policy runs every plain and strided-batch call of at most the
 * invariant rows on the skinny GEMM instead of cuBLASLt: one launch that streams the
 * weights, overlapping the kernel before it through programmatic dependent launch, rows
 * in groups (8 and 16 rows on tensor cores, 1 to 16 on CUDA cores). Rows stay invariant
 * either way (a fixed summation order); the form is the handle's, never m's. For batch-1
 * steps (the runtime sets TENSOR_CORES when max_batch is 1): a step of more rows than a
 * group re-reads the weights once per group. KILN_GEMM_SKINNY in the environment
 * overrides it for every handle: "0" off, "fma" CUDA cores, anything else tensor cores.
 * Default OFF. */
typedef enum kiln_gemm_skinny {
  KILN_GEMM_SKINNY_OFF = 0,
  KILN_GEMM_SKINNY_TENSOR_CORES = 1, /* mma.sync, the weights as A: rows cost no extra work */
  KILN_GEMM_SKINNY_CUDA_CORES = 2,   /* fp32 FMAs: fastest at one row, slower from 2 rows */
} kiln_gemm_skinny_t;
kiln_status_t kiln_gemm_set_skinny(kiln_gemm_t *gemm, kiln_gemm_skinny_t form);
/* The form the handle's calls run: KILN_GEMM_SKINNY's when set, else the set one (OFF
 * for a null handle). */
kiln_gemm_skinny_t kiln_gemm_skinny_form(const kiln_gemm_t *gemm);

/* out[m,n] = x[m,k] * w[n,k]^T (+ bias[n]); bf16 in and out, fp32 accumulate; bias
 * (bf16, may be NULL) added in fp32 before the one rounding (cuBLASLt BIAS epilogue).
 * workspace: device memory of workspace_bytes (may be 0). m == 0 is a no-op. */
kiln_status_t kiln_gemm_bf16(kiln_gemm_t *gemm, const void *x, const void *w,
                             const void *bias, void *out, int64_t m, int64_t n, int64_t k,
                             void *workspace, size_t workspace_bytes, void *stream);

/* kiln_gemm_bf16 with fp32 out and no bias: a router's logits as DeepSeek's
 * F.linear(x.float(), w.float()) computes them (a bf16 product is exact in fp32, so the
 * only difference is the order of the fp32 sums). out 4-byte aligned. */
kiln_status_t kiln_gemm_bf16_f32out(kiln_gemm_t *gemm, const void *x, const void *w,
                                    void *out, int64_t m, int64_t n, int64_t k,
                                    void *workspace, size_t workspace_bytes, void *stream);

/* A batch of GEMMs whose matrices come from device arrays of pointers (a MoE layer's
 * experts: entry i is out_ptrs[i][rows,n] = x_ptrs[i][rows,k] * w_ptrs[i][n,k]^T;
 * cuBLASLt's pointer-array batch mode, so the expert an entry reads is chosen on the
 * device and the call is captured in CUDA graphs). bf16 in and out, fp32 accumulate;
 * every matrix 16-byte aligned, n and k multiples of 8. rows == 1: one algorithm per
 * (n, k) under either policy, chosen for KILN_GEMM_INVARIANT_ROWS entries, split-K only
 * with fp32 partials reduced in a separate pass, so an entry's bits do not depend on
 * count (lossless speculation). rows > 1: the heuristic's split-K-free algorithm for
 * (count, rows). count == 0 is a no-op. */
kiln_status_t kiln_gemm_bf16_batched(kiln_gemm_t *gemm, const void *const *w_ptrs,
                                     const void *const *x_ptrs, void *const *out_ptrs,
                                     int64_t count, int64_t rows, int64_t n, int64_t k,
                                     void *workspace, size_t workspace_bytes, void *stream);

/* GEMMs over strided views of one batch of matrices (MLA's per-head projections, which
 * read and write columns of wider rows): for b in [0, batch),
 *   out_b[m, n] = x_b[m, k] * W_b,  W_b = w_b[n, k]^T (w_kn == 0: nn.Linear's layout)
 *                                   or w_b[k, n]      (w_kn != 0),
 * where x_b = x + b * x_batch_stride has its rows ldx elements apart, and likewise w_b
 * (ldw) and out_b (ldo). bf16 in and out, fp32 accumulate; pointers 16-byte aligned,
 * sizes, leading dimensions and strides positive multiples of 8 (elements), except
 * x_batch_stride, which may be 0 (every entry reads the same x: kiln_rt_linear_pair). The policy
 * is kiln_gemm_bf16's: under ROW_INVARIANT a row's bits do not depend on m up to the
 * invariant rows. batch == 0 or m == 0 is a no-op. */
typedef struct kiln_gemm_strided_batch {
  const void *x;
  int64_t ldx, x_batch_stride;
  const void *w;
  int64_t ldw, w_batch_stride;
  int32_t w_kn;
  void *out;
  int64_t ldo, out_batch_stride;
  int64_t batch, m, n, k;
} kiln_gemm_strided_batch_t;
kiln_status_t kiln_gemm_bf16_strided_batched(kiln_gemm_t *gemm,
                                             const kiln_gemm_strided_batch_t *params,
                                             void *workspace, size_t workspace_bytes,
                                             void *stream);

/* h = swiglu(out_0, out_1) (kiln_swiglu_bf16's rounding) of a strided batch of two GEMMs
 * of one x (batch 2, x_batch_stride 0, w_kn 0: a gated MLP's gate and up projections), in
 * one launch where kiln_gemm_bf16_strided_batched(gemm, pair, ...) would run the
 * tensor-core skinny GEMM (kiln_gemm_set_skinny): the SwiGLU is then the GEMM's epilogue,
 * h has the bits of the two launches, and the pair's outputs are not written. h is dense
 * [m, n] bf16 and overlaps neither x nor the weights (the launch reads them while it
 * writes h). Anywhere else it launches nothing and returns KILN_ERROR_UNSUPPORTED: the
 * caller runs the two. m == 0 is a no-op. */
kiln_status_t kiln_gemm_bf16_pair_swiglu(kiln_gemm_t *gemm, const kiln_gemm_strided_batch_t *pair,
                                         void *h, void *stream);

#ifdef __cplusplus
}
#endif
#endif /* KILN_KERNELS_GEMM_H */
