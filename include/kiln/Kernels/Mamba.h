/* Mamba2 decode kernels: selective state update and causal conv1d update (C ABI).
 *
 * Registry names (what the compiler's kernel registry calls these kernels):
 *   "ssm_update", "ssm_update_spec", "ssm_update_replay", "conv_update",
 *   "conv_update_spec".
 *
 * Conventions shared by all four launchers
 *  - Sizes are element counts; strides are in ELEMENTS of the tensor's own dtype. A
 *    stride given as 0 means "packed default" (the value a contiguous tensor of the
 *    documented shape has). The innermost dimension of every tensor is contiguous.
 *  - state_indices[batch] (int32, device memory) maps each sequence to its state slot.
 *    A negative index marks a padding sequence: it is skipped entirely (its outputs are
 *    NOT written, its state is untouched). An index >= num_slots is skipped the same
 *    way (it cannot be checked on the host). state_indices == NULL means slot = b.
 *  - Activations (x, dt, B, C, z, out) share one dtype, `dtype`: BF16 or F16.
 *    Per-head parameters A, D, dt_bias are fp32. All math is fp32.
 *  - Spec variants (rewind mode): the kernel starts from the slot's state, applies
 *    T = num_tokens tokens one after the other and writes the state AFTER EACH token t
 *    into intermediate[slot, t]. The slot's main state is NOT modified: once the
 *    verifier knows how many tokens k (1..T) were accepted, the serving stack commits
 *    by copying intermediate[slot, k-1] into the main state (or re-points the slot).
 *    The intermediate state of step t is bit-identical to what the single-token
 *    launcher leaves in the slot after t+1 successive single-token calls.
 *  - All pointers are device pointers; `stream` is a cudaStream_t (NULL = default).
 *  - Every launcher validates every argument before any CUDA call and returns
 *    KILN_ERROR_INVALID_ARGUMENT / KILN_ERROR_UNSUPPORTED with a message (read it with
 *    kiln_last_error()) naming the kernel and the argument.
 */
#ifndef KILN_KERNELS_MAMBA_H
#define KILN_KERNELS_MAMBA_H

#include <stdint.h>

#include "kiln/Kernels/Status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_KERNEL_SSM_UPDATE "ssm_update"
#define KILN_KERNEL_SSM_UPDATE_SPEC "ssm_update_spec"
#define KILN_KERNEL_CONV_UPDATE "conv_update"
#define KILN_KERNEL_CONV_UPDATE_SPEC "conv_update_spec"
#define KILN_KERNEL_SSM_CHUNK_SCAN "ssm_chunk_scan"
#define KILN_KERNEL_SSM_UPDATE_REPLAY "ssm_update_replay"

/* ---- ssm_update ---------------------------------------------------------------------
 * Per sequence b (slot s = state_indices[b]), head h (group g = h / (heads / n_groups)),
 * row p < head_dim, state column n < state_size:
 *   dt'  = dt[b,h] + (dt_bias ? dt_bias[h] : 0);  if dt_softplus: dt' = softplus(dt')
 *   if dt_min > 0: dt' = max(dt', dt_min);  if dt_max > 0: dt' = min(dt', dt_max)
 *   a    = a_is_log ? -exp(A[h]) : A[h]   (a_is_log: A holds a checkpoint's A_log)
 *   dA   = exp(dt' * a)
 *   st[s,h,p,n] = st[s,h,p,n] * dA + dt' * B[b,g,n] * x[b,h,p]    (stored in state dtype)
 *   out[b,h,p]  = sum_n st[s,h,p,n] * C[b,g,n] + (D ? D[h] : 0) * x[b,h,p]
 *   if z: out[b,h,p] *= silu(z[b,h,p])
 * (out is computed from the state as stored, i.e. after rounding to a bf16 state.)
 * Supported: state dtype F32 or BF16; activations BF16 or F16; state_size 64, 128 or
 * 256; any head_dim >= 1; heads divisible by n_groups. The state's slot/head/dim
 * strides must keep every row 16-byte aligned (state pointer 16-byte aligned, strides
 * multiples of 16 bytes). */
typedef struct kiln_ssm_update_params {
  /* state [num_slots, heads, head_dim, state_size], updated in place */
  void *state;
  kiln_dtype_t state_dtype;
  int64_t state_stride_slot, state_stride_head, state_stride_dim;
  int32_t num_slots;
  const int32_t *state_indices; /* [batch] or NULL */

  int32_t batch, heads, head_dim, state_size, n_groups;
  kiln_dtype_t dtype; /* activations */

  const void *x; /* [batch, heads, head_dim] */
  int64_t x_stride_batch, x_stride_head;
  const void *dt; /* [batch, heads] */
  int64_t dt_stride_batch;
  const float *dt_bias; /* [heads] or NULL */
  const float *A;       /* [heads], fp32, A < 0 (tied over head_dim and state) */
  const void *B;        /* [batch, n_groups, state_size] */
  int64_t B_stride_batch, B_stride_group;
  const void *C; /* [batch, n_groups, state_size] */
  int64_t C_stride_batch, C_stride_group;
  const float *D; /* [heads] or NULL */
  const void *z;  /* [batch, heads, head_dim] or NULL: out *= silu(z) */
  int64_t z_stride_batch, z_stride_head;
  void *out; /* [batch, heads, head_dim] */
  int64_t out_stride_batch, out_stride_head;

  int32_t dt_softplus; /* nonzero: dt = softplus(dt + dt_bias) */
  int32_t a_is_log;    /* nonzero: A holds A_log, the decay is -exp(A_log) */
  float dt_min, dt_max; /* clamp of dt' when > 0 (0: no bound) */
  void *stream;        /* cudaStream_t */
} kiln_ssm_update_params_t;

kiln_status_t kiln_ssm_update(const kiln_ssm_update_params_t *params);

/* ---- ssm_update_spec ----------------------------------------------------------------
 * The same math over T = num_tokens tokens per sequence (1 + max draft length), state
 * kept in registers between tokens. Token t of sequence b reads x[b,t], dt[b,t], B[b,t],
 * C[b,t], z[b,t] and writes out[b,t] and intermediate[slot, t]. The main state is only
 * read. intermediate has the same dtype as state. */
typedef struct kiln_ssm_update_spec_params {
  const void *state; /* [num_slots, heads, head_dim, state_size], read only */
  kiln_dtype_t state_dtype;
  int64_t state_stride_slot, state_stride_head, state_stride_dim;
  int32_t num_slots;
  const int32_t *state_indices; /* [batch] or NULL */

  /* [num_slots, >= num_tokens, heads, head_dim, state_size] */
  void *intermediate;
  int64_t inter_stride_slot, inter_stride_token, inter_stride_head, inter_stride_dim;

  int32_t batch, num_tokens, heads, head_dim, state_size, n_groups;
  kiln_dtype_t dtype;

  const void *x; /* [batch, T, heads, head_dim] */
  int64_t x_stride_batch, x_stride_token, x_stride_head;
  const void *dt; /* [batch, T, heads] */
  int64_t dt_stride_batch, dt_stride_token;
  const float *dt_bias;
  const float *A;
  const void *B; /* [batch, T, n_groups, state_size] */
  int64_t B_stride_batch, B_stride_token, B_stride_group;
  const void *C;
  int64_t C_stride_batch, C_stride_token, C_stride_group;
  const float *D;
  const void *z; /* [batch, T, heads, head_dim] or NULL */
  int64_t z_stride_batch, z_stride_token, z_stride_head;
  void *out; /* [batch, T, heads, head_dim] */
  int64_t out_stride_batch, out_stride_token, out_stride_head;

  int32_t dt_softplus;
  int32_t a_is_log;
  float dt_min, dt_max;
  void *stream;
} kiln_ssm_update_spec_params_t;

kiln_status_t kiln_ssm_update_spec(const kiln_ssm_update_spec_params_t *params);

/* ---- ssm_update_replay ----------------------------------------------------------------
 * Replay-mode speculation (docs/replay.md). A speculative step does not keep the state
 * after each of its tokens; it keeps the tokens' inputs, and the state stays at the
 * sequence's last committed token. Each slot has two replay buffers (the step being
 * folded is read from one while the step running writes the other), packed:
 *   replay_x  [num_slots, 2, max_tokens, heads, head_dim]       (dtype)
 *   replay_B  [num_slots, 2, max_tokens, n_groups, state_size]  (dtype)
 *   replay_dt [num_slots, 2, heads, max_tokens]                 (f32: dt' after bias,
 *                                                                 softplus and clamp)
 * replay [batch, 2] (int32, device) gives each sequence {pending, buffer}: the first
 * `pending` tokens (0..max_tokens) of its last speculative step were accepted and are
 * not yet in the state; they are in `buffer` (0 or 1). Per sequence:
 *   1. the pending tokens go into the state with ssm_update's arithmetic on the same
 *      inputs, so the state is bitwise what that many single-token calls leave;
 *   2. commit != 0: the step's T = num_tokens tokens are final: applied one after the
 *      other, outputs as ssm_update_spec, the state written after the last one (equal
 *      to T ssm_update calls). num_tokens == 0 folds the pending tokens only (before a
 *      prompt chunk that continues the sequence; activations may be NULL);
 *      commit == 0: the state after step 1 is written (when pending > 0); the T tokens
 *      (1 <= T <= max_tokens) run from it in registers, giving their outputs, and their
 *      x, B and dt' go to the other buffer (1 - buffer). The caller passes
 *      {accepted, 1 - buffer} at the sequence's next step.
 * A pending count outside 0..max_tokens is clamped (the caller validates it). */
typedef struct kiln_ssm_update_replay_params {
  void *state; /* [num_slots, heads, head_dim, state_size], read and written */
  kiln_dtype_t state_dtype;
  int64_t state_stride_slot, state_stride_head, state_stride_dim;
  int32_t num_slots;
  const int32_t *state_indices; /* [batch] or NULL */
  const int32_t *replay;        /* [batch, 2]: {pending tokens, their buffer} */
  void *replay_x;
  void *replay_B;
  float *replay_dt;
  int32_t max_tokens; /* tokens a replay buffer holds (1 + max draft length) */
  int32_t commit;     /* nonzero: the step's tokens are final (not speculative) */
  int32_t batch, num_tokens, heads, head_dim, state_size, n_groups;
  kiln_dtype_t dtype;
  const void *x; /* [batch, T, heads, head_dim] */
  int64_t x_stride_batch, x_stride_token, x_stride_head;
  const void *dt; /* [batch, T, heads] */
  int64_t dt_stride_batch, dt_stride_token;
  const float *dt_bias;
  const float *A;
  const void *B; /* [batch, T, n_groups, state_size] */
  int64_t B_stride_batch, B_stride_token, B_stride_group;
  const void *C;
  int64_t C_stride_batch, C_stride_token, C_stride_group;
  const float *D;
  const void *z; /* [batch, T, heads, head_dim] or NULL */
  int64_t z_stride_batch, z_stride_token, z_stride_head;
  void *out; /* [batch, T, heads, head_dim] */
  int64_t out_stride_batch, out_stride_token, out_stride_head;
  int32_t dt_softplus;
  int32_t a_is_log;
  float dt_min, dt_max;
  void *stream;
} kiln_ssm_update_replay_params_t;

kiln_status_t kiln_ssm_update_replay(const kiln_ssm_update_replay_params_t *params);

/* ---- conv_update ----------------------------------------------------------------------
 * Causal depthwise conv1d, one token. Per sequence b (slot s), channel c < conv_dim,
 * W = width (2..4), window = [state[s,c,0..W-2], x[b,c]]:
 *   y = sum_k weight[c,k] * window[k] + (bias ? bias[c] : 0);  if silu: y *= sigmoid(y)
 *   out[b,c] = y;  state[s,c,:] = window[1..W-1]   (shifted in place)
 * Layouts: state [num_slots, conv_dim, W-1] (inner [conv_dim, W-1] packed, slot stride
 * free), weight [conv_dim, W] packed, bias [conv_dim]; weight, bias, x, out in `dtype`
 * (BF16 or F16); state dtype equal to `dtype` or F32. Needs conv_dim % 8 == 0 and
 * 16-byte aligned pointers and batch/slot strides (8 channels per thread, 16-byte
 * accesses). */
typedef struct kiln_conv_update_params {
  void *state; /* [num_slots, conv_dim, width-1] */
  kiln_dtype_t state_dtype;
  int64_t state_stride_slot;
  int32_t num_slots;
  const int32_t *state_indices; /* [batch] or NULL */

  int32_t batch, conv_dim, width;
  kiln_dtype_t dtype;

  const void *x; /* [batch, conv_dim] */
  int64_t x_stride_batch;
  const void *weight; /* [conv_dim, width] */
  const void *bias;   /* [conv_dim] or NULL */
  void *out;          /* [batch, conv_dim] */
  int64_t out_stride_batch;

  int32_t silu; /* nonzero: apply SiLU */
  void *stream;
} kiln_conv_update_params_t;

kiln_status_t kiln_conv_update(const kiln_conv_update_params_t *params);

/* ---- conv_update_spec -----------------------------------------------------------------
 * T = num_tokens tokens per sequence; after token t the window state (W-1 values per
 * channel) is written to intermediate[slot, t]; the main state is only read. */
typedef struct kiln_conv_update_spec_params {
  const void *state; /* [num_slots, conv_dim, width-1], read only */
  kiln_dtype_t state_dtype;
  int64_t state_stride_slot;
  int32_t num_slots;
  const int32_t *state_indices;

  void *intermediate; /* [num_slots, >= num_tokens, conv_dim, width-1], state dtype */
  int64_t inter_stride_slot, inter_stride_token;

  int32_t batch, num_tokens, conv_dim, width;
  kiln_dtype_t dtype;

  const void *x; /* [batch, T, conv_dim] */
  int64_t x_stride_batch, x_stride_token;
  const void *weight;
  const void *bias;
  void *out; /* [batch, T, conv_dim] */
  int64_t out_stride_batch, out_stride_token;

  int32_t silu;
  void *stream;
} kiln_conv_update_spec_params_t;

kiln_status_t kiln_conv_update_spec(const kiln_conv_update_spec_params_t *params);

/* ---- ssm_chunk_scan ------------------------------------------------------------------
 * A prompt (or a prompt's continuation) through the SSM in one launch: the same math as
 * ssm_update applied to every token of every sequence in order, computed chunk by chunk
 * in the SSD (state space duality) form. Per sequence b (tokens cu_seqlens[b] ..
 * cu_seqlens[b+1] - 1, slot s = state_indices[b]) and head h, over chunks of L tokens:
 *   a_t   = dt'_t * A  (dt' and A as in ssm_update),  cum_t = a_0 + ... + a_t
 *   out_t = sum_{u <= t} exp(cum_t - cum_u) dt'_u (C_t . B_u) x_u
 *           + exp(cum_t) C_t . state_in + D x_t
 *   state_out = exp(cum_last) state_in + sum_u exp(cum_last - cum_u) dt'_u x_u (x) B_u
 * with the state starting from the slot (zero it first for a fresh prompt) and written
 * back once per sequence, after its last token. All math is fp32; the result equals the
 * token-by-token path to fp32 rounding (a bf16 state is rounded once per call instead of
 * once per token). No z (gate) input. Tokens are rows: x [tokens, heads, head_dim],
 * dt [tokens, heads], B/C [tokens, n_groups, state_size], out [tokens, heads, head_dim],
 * each with a token stride (elements; 0 = packed) and the inner dimensions packed.
 * cu_seqlens [batch + 1] and state_indices [batch] are int32 device arrays; a negative or
 * out-of-range slot skips the sequence (no output, no state). The chunk length is chosen
 * from the device's shared memory (64, 32 or 16 tokens). */
typedef struct kiln_ssm_chunk_scan_params {
  void *state; /* [num_slots, heads, head_dim, state_size], read and written */
  kiln_dtype_t state_dtype;
  int64_t state_stride_slot, state_stride_head, state_stride_dim;
  int32_t num_slots;
  const int32_t *state_indices; /* [batch] or NULL (slot = b) */
  const int32_t *cu_seqlens;    /* [batch + 1], device */
  int32_t batch, heads, head_dim, state_size, n_groups;
  kiln_dtype_t dtype; /* activations: BF16 or F16 */
  const void *x;
  int64_t x_stride_token;
  const void *dt;
  int64_t dt_stride_token;
  const float *dt_bias; /* [heads] or NULL */
  const float *A;       /* [heads] */
  const void *B;
  int64_t B_stride_token;
  const void *C;
  int64_t C_stride_token;
  const float *D; /* [heads] or NULL */
  void *out;
  int64_t out_stride_token;
  int32_t dt_softplus;
  int32_t a_is_log;
  float dt_min, dt_max;
  void *stream;
} kiln_ssm_chunk_scan_params_t;

kiln_status_t kiln_ssm_chunk_scan(const kiln_ssm_chunk_scan_params_t *params);

/* ---- conv_prefill ----------------------------------------------------------------------
 * conv_update over every token of every sequence in one launch. Each output reads only
 * inputs (the previous W-1 inputs of its sequence, or the slot's window before the
 * first), so every (token, channel) runs in parallel; then the slot's window becomes the
 * sequence's last W-1 inputs (its old window where the sequence is shorter). x and out
 * [tokens, conv_dim] with token strides (0 = packed); weight [conv_dim, width], bias
 * [conv_dim] or NULL; state [num_slots, conv_dim, width-1]. cu_seqlens / state_indices
 * as in ssm_chunk_scan. conv_dim % 8 == 0 and 16-byte aligned rows, as conv_update. */
typedef struct kiln_conv_prefill_params {
  void *state;
  kiln_dtype_t state_dtype;
  int64_t state_stride_slot;
  int32_t num_slots;
  const int32_t *state_indices; /* [batch] or NULL */
  const int32_t *cu_seqlens;    /* [batch + 1], device */
  int32_t batch, conv_dim, width;
  int64_t max_tokens; /* an upper bound of cu_seqlens[batch] (the grid covers it) */
  kiln_dtype_t dtype;
  const void *x;
  int64_t x_stride_token;
  const void *weight;
  const void *bias;
  void *out;
  int64_t out_stride_token;
  int32_t silu;
  void *stream;
} kiln_conv_prefill_params_t;

kiln_status_t kiln_conv_prefill(const kiln_conv_prefill_params_t *params);

#ifdef __cplusplus
}
#endif
#endif /* KILN_KERNELS_MAMBA_H */
