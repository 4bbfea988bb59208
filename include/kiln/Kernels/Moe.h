/* Mixture-of-experts layer (C ABI): top-k routing, the routed experts' MLPs on
 * cuBLASLt, and the weighted combine. See docs/kernels-graph.md, "MoE".
 *
 * The router's logits are an input (a plain linear the graph runs before: bf16, or fp32
 * with KILN_MOE_F32_LOGITS, DeepSeek's F.linear(x.float(), w.float())), so this call
 * starts at the scores. Per token t:
 *   s = softmax(float(logits[t]))  or, with SIGMOID, s = sigmoid(float(logits[t]))
 *   c = s + score_bias            (the choice keys; score_bias fp32 [experts] or none:
 *                                  DeepSeek-V3's e_score_correction_bias)
 *   groups > 1: the experts split into `groups` equal groups; each group's key is the
 *     sum of its two largest c (DeepSeek-V3), or with GROUP_MAX its largest c
 *     (DeepSeek-V2's group_limited_greedy); the top_groups best groups stay, every other
 *     expert's c becomes -FLT_MAX (never chosen, as transformers' masked_fill(-inf))
 *   top_k experts by c (ties: the lower index), weights w = their s
 *   NORMALIZE_TOP_K: w /= sum(w);  w *= scale (routed_scaling_factor; 1 = none);
 *   ROUND_WEIGHTS: w = bf16(w)
 *   each chosen expert e's MLP, every GEMM output rounded to bf16 (nn.Linear), then its
 *   bias added where one is given, as a second bf16 op (fp32 sum, rounded):
 *     g = bf16(gate_e . x), g = bf16(g + gate_bias[e]);  u likewise with up, up_bias
 *   gated experts (gate given):  a = bf16(bf16(silu(g)) * u)
 *   CLAMPED_SWIGLU (gpt-oss's GptOssExperts; gated only), each step one bf16 op (fp32
 *   math, rounded; the clamps are exact where glu_limit is a bf16 value):
 *     g = min(g, glu_limit),  u = clamp(u, -glu_limit, glu_limit)
 *     a = bf16(bf16(u + 1) * bf16(g * bf16(sigmoid(bf16(g * glu_alpha)))))
 *   plain experts (gate NULL):   a = bf16(act(u)), act = activation
 *                                (Kernels/Graph.h's kiln_activation_bf16 kinds)
 *   y_j = bf16(down_e . a), y_j = bf16(y_j + down_bias[e]) where given
 *   out[t] = sum over j in ascending expert order of the weighted y_j:
 *     default: bf16(float(y_j) * w_j) added with every partial sum rounded to bf16
 *              (transformers' Qwen-MoE/Mixtral loop: index_add_ into a bf16 tensor);
 *     F32_COMBINE: fp32 products float(y_j) * w_j added in fp32, rounded once
 *              (Nemotron-H's loop: index_add_ into an fp32 tensor; transformers 5.17's
 *              DeepSeek experts add into a bf16 one, the default).
 * The expert GEMMs run batched through device arrays of pointers
 * (kiln_gemm_bf16_batched), so the host never learns the routing and the call is
 * captured in CUDA graphs, in one of two modes:
 *  - pairs (default): one one-row GEMM per (token, chosen expert) pair. Nothing is read
 *    for unchosen experts, and a token's result does not depend on the other tokens of
 *    the call (what lossless speculation needs), but an expert chosen by n tokens is
 *    read n times: right for decode, wasteful when tokens share experts.
 *  - grouped (KILN_MOE_GROUPED, when tokens x top_k >= 4 x experts): the pairs are
 *    sorted by expert on the device (stable: by token within an expert), each expert's
 *    rows padded to a multiple of M = min(256, the power of two <= tokens x top_k /
 *    experts), and every M-row tile is one GEMM entry: an expert's weights are read
 *    once per tile. A token's bits may then depend on the batch (the runtime uses it
 *    for prefill and extend steps, not for decode and verify). On sm_90 (the sm_90a
 *    image) with hidden and inter multiples of 256 and at most 160 pairs an expert on
 *    average, the expert GEMMs are instead Kiln's own grouped GEMM (wgmma), which reads
 *    the per-expert row counts on the device: the rows are not padded, and each
 *    expert's weights are read once per 160-row tile.
 *  - row-invariant (KILN_MOE_ROW_INVARIANT, whatever GROUPED says): a token's bits do
 *    not depend on the other tokens of the call, as in the pairs mode, yet each expert
 *    is read once per call where the own grouped GEMM runs: its rows do not depend on
 *    their tile (GroupedGemmGpuTest). It runs wherever hidden and inter are multiples of
 *    256 and the device has the sm_90a image (for any number of tokens, so every call of
 *    a layer picks the same GEMM), else the pairs mode. The runtime's decode and verify
 *    steps use it (lossless speculation at DeepSeek scale without reading an expert once
 *    per token).
 *
 * Shapes: x [tokens, hidden], logits [tokens, experts], gate/up [experts, inter, hidden],
 * down [experts, hidden, inter], out [tokens, hidden]; bf16 (logits bf16 or fp32), dense;
 * the optional biases gate_bias/up_bias [experts, inter] and down_bias [experts, hidden]
 * bf16 (gate_bias only with a gate); logits element-aligned, the rest 16-byte (score_bias
 * element-aligned); hidden and inter multiples of 8;
 * 1 <= top_k <= min(experts, KILN_MOE_MAX_TOP_K); experts <= KILN_MOE_MAX_EXPERTS;
 * groups divides experts into groups of at least 2, 1 <= top_groups <= groups and
 * top_groups x experts / groups >= top_k. scratch: kiln_moe_scratch_bytes(tokens, ...),
 * 256-byte aligned. out must not alias x. */
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
/* Execution (not routing): expert-grouped tiles when the batch is large enough. */
#define KILN_MOE_GROUPED 4
#define KILN_MOE_SIGMOID 8      /* scores sigmoid(logit) instead of the softmax */
#define KILN_MOE_F32_LOGITS 16  /* the logits are fp32 */
#define KILN_MOE_F32_COMBINE 32 /* the weighted sum in fp32, rounded once */
#define KILN_MOE_GROUP_MAX 64   /* a group's key is its largest c (DeepSeek-V2) */
/* Execution: the grouped mode's GEMMs on cuBLASLt even where Kiln's own grouped GEMM
 * runs (benchmarks and tests compare the two). */
#define KILN_MOE_LIBRARY_GEMM 128
/* Execution: a token's bits independent of the batch (the row-invariant mode above). */
#define KILN_MOE_ROW_INVARIANT 256
/* Expert form: gated experts run gpt-oss's clamped SwiGLU (glu_alpha, glu_limit) instead
 * of SwiGLU; needs a gate. */
#define KILN_MOE_CLAMPED_SWIGLU 512
#define KILN_MOE_KNOWN_FLAGS 1023

typedef struct kiln_moe_params {
  const void *x, *logits;
  const void *gate, *up, *down; /* gate NULL: plain (non-gated) experts */
  const float *score_bias;      /* [experts] or NULL */
  /* The expert GEMMs' biases (bf16), each NULL or given on its own: gate_bias and up_bias
   * [experts, inter] (gate_bias needs a gate), down_bias [experts, hidden]. */
  const void *gate_bias, *up_bias, *down_bias;
  void *out;
  void *scratch;
  int64_t tokens, hidden, inter, experts;
  int32_t top_k;
  int32_t flags;
  int32_t groups, top_groups; /* 0 reads as 1 */
  float scale;                /* 0 reads as 1 */
  int32_t activation;         /* plain experts' activation (kiln_activation_bf16 kind);
                                 gated experts run SwiGLU or its clamped form */
  float glu_alpha, glu_limit; /* CLAMPED_SWIGLU only (gpt-oss: 1.702, 7): finite, limit > 0 */
  kiln_gemm_t *gemm;     /* the expert GEMMs' handle */
  void *gemm_workspace;  /* cuBLASLt workspace (may be NULL with 0 bytes) */
  size_t gemm_workspace_bytes;
  void *stream;
} kiln_moe_params_t;

/* The scratch's sections, in order, in bytes per token (each a multiple of 16; a
 * section of the scratch is tokens times its entry): chosen ids (int32), weights (fp32),
 * each pair's row in the expert-sorted order (int32), the grouped mode's expert table
 * (padded offsets and tile bases), the three GEMMs' pointer arrays (w, x, out for each),
 * then rows for twice the pairs (the grouped mode's padding): gathered inputs, gate
 * (overwritten by the activation), up, down outputs. The compiler sizes the
 * scratch with this too. */
enum { KILN_MOE_SCRATCH_SECTIONS = 9 };
static inline uint64_t kiln_moe_scratch_section_bytes(int64_t hidden, int64_t inter,
                                                      int32_t top_k, int section) {
  const uint64_t k = (uint64_t)top_k;
  switch (section) {
  case 0:
  case 1:
  case 2:
  case 3:
    return (4 * k + 15) / 16 * 16;
  case 4:
    return (9 * 8 * k + 15) / 16 * 16;
  case 5:
  case 8:
    return 2 * 2 * k * (uint64_t)hidden;
  default:
    return 2 * 2 * k * (uint64_t)inter;
  }
}

/* Their sum: the scratch's bytes per token. */
static inline uint64_t kiln_moe_scratch_per_token(int64_t hidden, int64_t inter, int32_t top_k) {
  uint64_t total = 0;
  for (int section = 0; section < KILN_MOE_SCRATCH_SECTIONS; ++section)
    total += kiln_moe_scratch_section_bytes(hidden, inter, top_k, section);
  return total;
}

/* kiln_moe_scratch_per_token after checking the sizes (the whole scratch is tokens
 * times this): the chosen ids and
 * weights, the three GEMMs' pointer arrays and the gate/up/down rows of every chosen
 * expert. */
kiln_status_t kiln_moe_scratch_bytes_per_token(int64_t hidden, int64_t inter, int32_t top_k,
                                               uint64_t *bytes);

kiln_status_t kiln_moe(const kiln_moe_params_t *params);

/* Finds out, once per device, which GEMM kiln_moe's grouped and row-invariant modes run
 * (a synchronous read of the loaded image: not allowed in a stream being captured).
 * kiln_moe does it at its first call outside a capture; a caller that captures first
 * calls this before. A row-invariant call captured on a device not yet probed fails
 * (KILN_ERROR_INVALID_ARGUMENT) rather than pick a GEMM later calls would not. */
kiln_status_t kiln_moe_prepare(void);

#ifdef __cplusplus
}
#endif
#endif /* KILN_KERNELS_MOE_H */
