/* Gated DeltaNet (Qwen3-Next linear attention), C ABI: the decode update, the chunked
 * prefill (kiln_gdn_chunk_prefill, below) and the operands' preparation from the layer's
 * inputs (kiln_gdn_prepare, last).
 *
 * Registry names: "gdn_update" (intermediate == NULL), "gdn_update_spec",
 * "gdn_update_replay" and "gdn_chunk_prefill".
 *
 * Per sequence b (slot s = state_indices[b]), value head h (key head kh = h / (v_heads /
 * k_heads)), for each of its num_tokens tokens t in order, with the recurrent state
 * S = state[s, h] of [k_dim, v_dim] fp32:
 *   if l2norm_qk: q = q / sqrt(sum(q^2) + 1e-6), k = k / sqrt(sum(k^2) + 1e-6)
 *   S    = exp(g[b,t,h]) * S
 *   mem  = S^T k                                  (v_dim)
 *   S    = S + k (beta[b,t,h] * (v[b,t,h] - mem))^T
 *   out[b,t,h] = scale * S^T q                    (scale 0: 1 / sqrt(k_dim))
 * which is transformers' torch_recurrent_gated_delta_rule (Qwen3NextGatedDeltaNet).
 *
 * Conventions (as the Mamba2 kernels, include/kiln/Kernels/Mamba.h):
 *  - state_indices[batch] (device int32) maps a sequence to its slot; a negative index
 *    or one >= num_slots marks padding: nothing of that sequence is read or written.
 *    NULL means slot = b.
 *  - intermediate == NULL: the slot's state is updated in place (after all tokens).
 *    Otherwise (rewind-mode speculation) the slot's state is only read, and the state
 *    after each token t is written to intermediate[s, t]; it is bit-identical to the
 *    slot's state after t + 1 tokens of in-place updates. A slot's intermediates hold
 *    intermediate_tokens states (0: num_tokens; else >= num_tokens), so a caller whose
 *    buffer is sized for its longest step (the runtime's 1 + max_draft_len) keeps one
 *    layout whatever this step's num_tokens; states t >= num_tokens are left as they are.
 *  - Tensors are packed: q, k [batch, num_tokens, k_heads, k_dim]; v, out [batch,
 *    num_tokens, v_heads, v_dim] in `dtype` (BF16 or F16); g, beta [batch, num_tokens,
 *    v_heads] fp32; state [num_slots, v_heads, k_dim, v_dim] fp32; intermediate
 *    [num_slots, intermediate_tokens, v_heads, k_dim, v_dim] fp32. All math is fp32.
 *  - Supported: k_dim and v_dim 64 or 128, num_tokens 1..64, v_heads a multiple of
 *    k_heads; pointers 16-byte aligned.
 *  - Every argument is validated before any CUDA call; errors name the argument
 *    (kiln_last_error()). */
#ifndef KILN_KERNELS_GATEDDELTANET_H
#define KILN_KERNELS_GATEDDELTANET_H

#include <stdint.h>

#include "kiln/Kernels/Status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_KERNEL_GDN_UPDATE "gdn_update"
#define KILN_KERNEL_GDN_UPDATE_SPEC "gdn_update_spec"
#define KILN_KERNEL_GDN_UPDATE_REPLAY "gdn_update_replay"
#define KILN_KERNEL_GDN_CHUNK_PREFILL "gdn_chunk_prefill"
#define KILN_GDN_MAX_TOKENS 64
#define KILN_GDN_CHUNK 64 /* tokens a chunk of gdn_chunk_prefill */

typedef struct kiln_gdn_update_params {
  void *state; /* [num_slots, v_heads, k_dim, v_dim] fp32 */
  int32_t num_slots;
  const int32_t *state_indices; /* [batch] or NULL */
  void *intermediate; /* NULL, or [num_slots, intermediate_tokens, v_heads, k_dim, v_dim] */
  int32_t batch, num_tokens;
  /* Tokens a slot's intermediates hold (>= num_tokens); 0: num_tokens. */
  int32_t intermediate_tokens;
  int32_t k_heads, v_heads, k_dim, v_dim;
  kiln_dtype_t dtype; /* of q, k, v, out */
  const void *q, *k, *v;
  const float *g, *beta;
  void *out;
  int32_t l2norm_qk;
  float scale;
  void *stream;
} kiln_gdn_update_params_t;

kiln_status_t kiln_gdn_update(const kiln_gdn_update_params_t *params);

/* ---- gdn_update_replay -----------------------------------------------------------------
 * Replay-mode speculation (docs/replay.md), the update above in the form of Mamba2's
 * ssm_update_replay. A speculative step does not keep the state after each of its tokens;
 * it keeps the tokens' inputs, and the state stays at the sequence's last committed token.
 * Each slot has two replay buffers (the step being folded is read from one while the
 * step running writes the other), packed, R = max_tokens:
 *   replay_k  [num_slots, 2, R, k_heads, k_dim]  (dtype: k as the update reads it, before
 *                                                 its l2 normalization)
 *   replay_v  [num_slots, 2, R, v_heads, v_dim]  (dtype)
 *   replay_gb [num_slots, 2, v_heads, R, 2]      (fp32: {g, beta})
 * q is not kept: it does not enter the state. replay [batch, 2] (int32, device) gives
 * each sequence {pending, buffer}: the first `pending` tokens (0..R; clamped) of its last
 * speculative step were accepted and are not yet in the state; they are in `buffer` (0 or
 * 1). Per sequence:
 *   1. the pending tokens go into the state with gdn_update's fp32 operations in its
 *      order, so the state is bitwise what that many in-place single-token calls leave;
 *   2. num_tokens > 1 (a verify step, num_tokens <= R): the state after step 1 is written
 *      (when pending > 0); the step's tokens run from it in registers, giving their
 *      outputs as gdn_update_spec, and their k, v, g and beta go to the other buffer
 *      (1 - buffer). The caller passes {accepted, 1 - buffer} at the sequence's next step;
 *      num_tokens == 1 (a committed token): applied, the state written after it (equal to
 *      gdn_update in place); nothing is kept;
 *      num_tokens == 0: the fold alone, its state written (before a prompt chunk that
 *      continues the sequence); q, k, v, g, beta and out may be NULL.
 * Layouts and the other fields as kiln_gdn_update_params_t (no intermediates); the replay
 * buffers 2-byte (replay_k, replay_v) and 4-byte (replay_gb, replay) aligned. */
typedef struct kiln_gdn_update_replay_params {
  void *state; /* [num_slots, v_heads, k_dim, v_dim] fp32, read and written */
  int32_t num_slots;
  const int32_t *state_indices; /* [batch] or NULL */
  const int32_t *replay;        /* [batch, 2]: {pending tokens, their buffer} */
  void *replay_k, *replay_v;    /* dtype */
  float *replay_gb;
  int32_t max_tokens; /* R: tokens a replay buffer holds (1 + max draft length) */
  int32_t batch, num_tokens;
  int32_t k_heads, v_heads, k_dim, v_dim;
  kiln_dtype_t dtype; /* of q, k, v, out and the replay_k, replay_v buffers */
  const void *q, *k, *v;
  const float *g, *beta;
  void *out;
  int32_t l2norm_qk;
  float scale;
  void *stream;
} kiln_gdn_update_replay_params_t;

kiln_status_t kiln_gdn_update_replay(const kiln_gdn_update_replay_params_t *params);

/* ---- gdn_chunk_prefill ----------------------------------------------------------------
 * A prompt (or a prompt's continuation) through one Gated DeltaNet layer in one launch:
 * the update above applied to every token of every sequence in order, computed chunk by
 * chunk (KILN_GDN_CHUNK tokens) in the WY / UT-transform form of transformers'
 * torch_chunk_gated_delta_rule. Sequence b is tokens cu_seqlens[b] .. cu_seqlens[b+1] - 1
 * (as ssm_chunk_scan in kiln/Kernels/Mamba.h; an empty or negative range is skipped); its
 * slot s = state_indices[b] (NULL: s = b; negative or >= num_slots: padding, nothing read
 * or written, outputs left as they are). state[s] is read as the initial state (zero it
 * first for a fresh prompt) and written once with the state after the sequence's last
 * token. Within a chunk, with gamma_t the running sum of g over the chunk's tokens:
 *   A[t,u]  = beta_t exp(gamma_t - gamma_u) (k_t . k_u)   (u < t)
 *   (I + A) U = diag(beta) (V - diag(exp(gamma)) K S)      (U: the corrected values)
 *   out_t   = scale (exp(gamma_t) S^T q_t + sum_{u<=t} exp(gamma_t - gamma_u) (q_t . k_u) U_u)
 *   S'      = exp(gamma_last) S + sum_u exp(gamma_last - gamma_u) k_u U_u^T
 * (q, k l2-normalized first when l2norm_qk), equal to the token-by-token recurrence up to
 * fp32 rounding.
 *
 * Layouts: tokens are packed rows, q, k [tokens, k_heads, k_dim]; v, out [tokens, v_heads,
 * v_dim] BF16; g, beta [tokens, v_heads] fp32; state [num_slots, v_heads, k_dim, v_dim]
 * fp32. With every sequence of T tokens (cu_seqlens[b] = b T) this is the update's
 * [batch, T, ...] layout. Supported: BF16, k_dim and v_dim 64 or 128, v_heads a multiple
 * of k_heads, batch <= 65535; q, k, v, out, state 16-byte aligned. The device needs the
 * shared memory of one block (about 148 KiB at k_dim 128, 106 KiB at 64: sm_80, sm_90,
 * sm_100; others return KILN_ERROR_UNSUPPORTED at launch). */
typedef struct kiln_gdn_chunk_prefill_params {
  void *state; /* [num_slots, v_heads, k_dim, v_dim] fp32, read and written */
  int32_t num_slots;
  const int32_t *state_indices; /* [batch] or NULL (slot = b), device */
  const int32_t *cu_seqlens;    /* [batch + 1], device */
  int32_t batch;
  int32_t k_heads, v_heads, k_dim, v_dim;
  kiln_dtype_t dtype; /* of q, k, v, out: BF16 */
  const void *q, *k, *v;
  const float *g, *beta;
  void *out;
  int32_t l2norm_qk;
  float scale; /* 0: 1 / sqrt(k_dim) */
  void *stream;
} kiln_gdn_chunk_prefill_params_t;

kiln_status_t kiln_gdn_chunk_prefill(const kiln_gdn_chunk_prefill_params_t *params);

/* ---- gdn_prepare ----------------------------------------------------------------------
 * A Qwen3-Next GDN layer's graph inputs turned into the packed operands of the kernels
 * above, as transformers' Qwen3NextGatedDeltaNet (its torch path) computes its gates. q
 * and k are only packed: transformers 5 L2-normalizes them in fp32 inside the gated delta
 * rule (use_qk_l2norm_in_kernel), as the kernels do with l2norm_qk = 1. For token t, key
 * head kh and value head h:
 *   q_out[t, kh] = q[t, kh], k_out[t, kh] = k[t, kh], v_out[t, h] = v[t, h]
 *   g[t, h]      = -exp(a_log[h]) softplus(a[t, h] + dt_bias[h])  (fp32; torch's softplus:
 *                  x for x > 20, else log1p(exp(x)))
 *   beta[t, h]   = bf16(sigmoid(b[t, h])), stored as fp32
 *
 * Layouts: q, k [tokens, k_heads, k_dim], v [tokens, v_heads, v_dim], a, b [tokens,
 * v_heads] bf16, a token's row *_stride elements after the previous one's (column slices
 * of a projection; heads dense within a row); a_log, dt_bias [v_heads] fp32. Outputs are
 * packed: q_out, k_out [tokens, k_heads, k_dim], v_out [tokens, v_heads, v_dim] bf16; g,
 * beta [tokens, v_heads] fp32. bf16 data 2-byte aligned, fp32 4-byte. One launch (none
 * for 0 tokens). */
typedef struct kiln_gdn_prepare_params {
  int32_t tokens;
  int32_t k_heads, v_heads, k_dim, v_dim;
  const void *q, *k, *v, *a, *b;                            /* bf16 */
  int64_t q_stride, k_stride, v_stride, a_stride, b_stride; /* elements between tokens */
  const float *a_log, *dt_bias;                             /* [v_heads] */
  void *q_out, *k_out, *v_out;                              /* bf16, packed */
  float *g, *beta;                                          /* [tokens, v_heads] */
  void *stream;
} kiln_gdn_prepare_params_t;

kiln_status_t kiln_gdn_prepare(const kiln_gdn_prepare_params_t *params);

#ifdef __cplusplus
}
#endif

#endif
