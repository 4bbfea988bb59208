/* Mixture-of-experts layer (C ABI): top-k routing, the routed experts' SwiGLU MLPs on
 * cuBLASLt, and the weighted combine. See docs/kernels-graph.md, "MoE".
 *
 * The router's logits are an input (a plain linear the graph runs before), so this
 * call starts at the softmax. Per token t:
 *   p = softmax(float(logits[t]))                       (fp32, over the experts)
 *   top_k experts by p (ties: the lower index), weights w = their p
 *   NORMALIZE_TOP_K: w /= sum(w);  ROUND_WEIGHTS: w = bf16(w)
 *   y_j = down_e(bf16(silu(gate_e(x))) * up_e(x))      (bf16 GEMM outputs, as nn.Linear)
 *   out[t] = sum over j in ascending expert order of bf16(float(y_j) * w_j), each
 *            partial sum rounded to bf16 (transformers' eager experts loop: one
 *            index_add_ per expert, in expert order, into a bf16 zero tensor).
 * The expert GEMMs run as one-row GEMMs batched through device arrays of pointers
 * (kiln_gemm_bf16_rows_batched): each (token, chosen expert) pair reads that expert's
 * weights, nothing is read for unchosen experts, the host never learns the routing,
 * and the call is captured in CUDA graphs. A token's result does not depend on the
 * other tokens of the call (what lossless speculation needs).
 *
 * Shapes: x [tokens, hidden], logits [tokens, experts], gate/up [experts, inter, hidden],
 * down [experts, hidden, inter], out [tokens, hidden]; bf16, dense;
 * logits 2-byte aligned, the rest 16-byte; hidden and inter multiples of 8; 1 <= top_k <= min(experts, KILN_MOE_MAX_TOP_K);
 * experts <= KILN_MOE_MAX_EXPERTS. scratch: kiln_moe_scratch_bytes(tokens, ...), 256-byte
 * aligned. out must not alias x. */
#ifndef KILN_KERNELS_MOE_H
#define KILN_KERNELS_MOE_H

#include <stddef.h>
#include <stdint.h>

#include "kiln/Kernels/Gemm.h"
#include "kiln/Kernels/Status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_MOE_MAX_EXPERTS 1024
#define KILN_MOE_MAX_TOP_K 32

/* Routing flags (the lowering passes them as they are). */
#define KILN_MOE_NORMALIZE_TOP_K 1 /* the chosen weights divided by their sum */
#define KILN_MOE_ROUND_WEIGHTS 2   /* the weights rounded to bf16 before the multiply */

typedef struct kiln_moe_params {
  const void *x, *logits;
  const void *gate, *up, *down;
  void *out;
  void *scratch;
  int64_t tokens, hidden, inter, experts;
  int32_t top_k;
  int32_t flags;
  kiln_gemm_t *gemm;     /* the expert GEMMs' handle */
  void *gemm_workspace;  /* cuBLASLt workspace (may be NULL with 0 bytes) */
  size_t gemm_workspace_bytes;
  void *stream;
} kiln_moe_params_t;

/* The scratch's sections, in order, in bytes per token (each a multiple of 16; a
 * section of the scratch is tokens times its entry): chosen ids (int32), weights (fp32),
 * the gate/up/down GEMMs' pointer arrays (w, x, out for each), gate rows (overwritten
 * by the SwiGLU activation), up rows, down rows. The compiler sizes the scratch with
 * this too. */
enum { KILN_MOE_SCRATCH_SECTIONS = 6 };
static inline uint64_t kiln_moe_scratch_section_bytes(int64_t hidden, int64_t inter,
                                                      int32_t top_k, int section) {
  const uint64_t k = (uint64_t)top_k;
  switch (section) {
  case 0:
  case 1:
    return (4 * k + 15) / 16 * 16;
  case 2:
    return (9 * 8 * k + 15) / 16 * 16;
  case 3:
  case 4:
    return 2 * k * (uint64_t)inter;
  default:
    return 2 * k * (uint64_t)hidden;
  }
}

/* Scratch bytes per token (the whole scratch is tokens times this): the chosen ids and
 * weights, the three GEMMs' pointer arrays and the gate/up/down rows of every chosen
 * expert. */
kiln_status_t kiln_moe_scratch_bytes_per_token(int64_t hidden, int64_t inter, int32_t top_k,
                                               uint64_t *bytes);

kiln_status_t kiln_moe(const kiln_moe_params_t *params);

#ifdef __cplusplus
}
#endif
#endif /* KILN_KERNELS_MOE_H */
