/* Prefill attention (fused multi-head attention, FlashAttention-2 style) over a varlen
 * batch, C ABI.
 *
 * Layouts (element = bf16 or fp16, the last dimension contiguous):
 *   q    [total_q, q_heads,  head_dim]   token t of sequence b is row cu_seqlens_q[b] + t
 *   k, v [total_k, kv_heads, head_dim]   token t of sequence b is row cu_seqlens_k[b] + t
 *   out  [total_q, q_heads,  head_dim]
 *   cu_seqlens_q/k: int32 [batch + 1], device memory, non-decreasing, [0] == 0.
 * GQA: q head h reads kv head h / (q_heads / kv_heads).
 * Causal masks are aligned to the bottom-right: query t of a sequence with q_len queries
 * and k_len keys sees keys 0 .. t + (k_len - q_len). A query that sees no key (only when
 * q_len > k_len) gets an output of zeros. With a sliding window W (`window` > 0, causal
 * only) it sees keys t + (k_len - q_len) - W + 1 .. t + (k_len - q_len), and no key below
 * the first query's window is read (a paged cache may have recycled its page).
 * Attention sinks (gpt-oss, `sinks` non-NULL): head h's softmax gets one more logit,
 * sinks[h] (in the units of softmax_scale * q.k), that takes probability mass but has
 * no value: out = sum_j exp(s_j - m) v_j / (sum_j exp(s_j - m) + exp(sinks[h] - m)).
 *
 * Paged variant ("extend context"): K and V are read from a paged cache
 *   kv_cache    [num_pages, 2, page_size, kv_heads, head_dim]  (index 0: K, 1: V)
 *   block_table int32 [batch, max_pages_per_seq]: page of key j of sequence b is
 *               block_table[b * max_pages_per_seq + j / page_size], slot j % page_size
 *   seq_lens    int32 [batch]: key length of each sequence, new tokens included (the new
 *               tokens' K/V must already be in the cache); q_len comes from cu_seqlens_q.
 *
 * Every launcher validates its arguments before any CUDA call and returns
 * KILN_ERROR_INVALID_ARGUMENT / KILN_ERROR_UNSUPPORTED with a message (kiln_last_error())
 * naming the launcher and the argument. Launches are asynchronous on `stream`.
 */
#ifndef KILN_KERNELS_PREFILL_H
#define KILN_KERNELS_PREFILL_H

#include <stdint.h>

#include "kiln/Kernels/Status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_prefill_fmha_params {
  const void *q;   /* [total_q, q_heads, head_dim] */
  const void *k;   /* [total_k, kv_heads, head_dim] */
  const void *v;   /* [total_k, kv_heads, head_dim] */
  void *out;       /* [total_q, q_heads, head_dim] */
  const int32_t *cu_seqlens_q; /* device, [batch + 1] */
  const int32_t *cu_seqlens_k; /* device, [batch + 1] */
  /* Strides in elements; 0 selects the packed default (token: heads * head_dim,
   * head: head_dim). Must be multiples of 8 (16-byte rows). */
  int64_t q_token_stride, q_head_stride;
  int64_t k_token_stride, k_head_stride;
  int64_t v_token_stride, v_head_stride;
  int64_t out_token_stride, out_head_stride;
  int32_t batch;
  int32_t total_q;      /* rows of q/out (cu_seqlens_q[batch]) */
  int32_t total_k;      /* rows of k/v (cu_seqlens_k[batch]) */
  int32_t max_seqlen_q; /* >= every q_len: sizes the grid */
  int32_t q_heads;
  int32_t kv_heads;     /* divides q_heads */
  int32_t head_dim;     /* 64, 128 or 256; 192 with v_head_dim 128 */
  kiln_dtype_t dtype;   /* KILN_DTYPE_BF16 or KILN_DTYPE_F16 (q, k, v, out alike) */
  float softmax_scale;  /* usually 1 / sqrt(head_dim); must be finite and > 0 */
  int32_t causal;       /* 1: bottom-right causal mask; 0: none */
  void *stream;         /* cudaStream_t; NULL = default stream */
  int32_t window;       /* > 0: sliding window of that many keys (needs causal); 0: none */
  const float *sinks;   /* device [q_heads] attention-sink logits, or NULL (see above) */
  /* V's and out's head dim; 0: head_dim. head_dim 192 with v_head_dim 128 is DeepSeek
   * MLA's expanded prompt (q/k = nope 128 + rope 64, v 128; mma.sync kernel, dense only);
   * any other v_head_dim must equal head_dim. v and out strides default to v_head_dim. */
  int32_t v_head_dim;
} kiln_prefill_fmha_params_t;

typedef struct kiln_prefill_fmha_paged_params {
  const void *q;        /* [total_q, q_heads, head_dim] */
  const void *kv_cache; /* [num_pages, 2, page_size, kv_heads, head_dim] */
  void *out;            /* [total_q, q_heads, head_dim] */
  const int32_t *cu_seqlens_q; /* device, [batch + 1] */
  const int32_t *seq_lens;     /* device, [batch]: keys per sequence (prefix + new) */
  const int32_t *block_table;  /* device, [batch, max_pages_per_seq] */
  int64_t q_token_stride, q_head_stride;     /* 0 = packed */
  int64_t out_token_stride, out_head_stride; /* 0 = packed */
  int32_t batch;
  int32_t total_q;
  int32_t max_seqlen_q;
  int32_t num_pages;
  int32_t page_size;          /* >= 1, any value */
  int32_t max_pages_per_seq;  /* columns of block_table */
  int32_t q_heads;
  int32_t kv_heads;
  int32_t head_dim;           /* 64, 128 or 256 */
  kiln_dtype_t dtype;
  float softmax_scale;
  int32_t causal;
  void *stream;
  int32_t window; /* > 0: sliding window (needs causal); 0: none */
  const float *sinks; /* device [q_heads] attention-sink logits, or NULL */
  /* The cache's element type: dtype, KILN_DTYPE_FP8_E4M3 (BF16 q/out; value = e4m3 *
   * the KV head's scale, k_scale / v_scale device [kv_heads] or NULL = 1), or
   * KILN_DTYPE_F16 next to BF16 q/out (read as fp16 mma operands, q rounded to fp16; no
   * scales). Both run on the mma.sync variant (KILN_PREFILL_VARIANT_SM90 reads caches of
   * q's dtype only: it reports UNSUPPORTED, AUTO falls back). */
  kiln_dtype_t kv_dtype;
  const float *k_scale;
  const float *v_scale;
} kiln_prefill_fmha_paged_params_t;

/* Which implementation kiln_prefill_fmha picks (for benchmarks and tests). SM90 runs
 * head_dim 64, 128 and 256; SM90_OVERLAP 64 and 128 (UNSUPPORTED at 256); SM90_WS all
 * that SM90 runs. */
typedef enum kiln_prefill_variant {
  KILN_PREFILL_VARIANT_AUTO = 0,
  KILN_PREFILL_VARIANT_MMA_SM80 = 1, /* mma.sync + ldmatrix + cp.async, sm_80+ */
  KILN_PREFILL_VARIANT_SM90 = 2,     /* wgmma (sm_90a build, sm_90 device) */
  /* SM90 with the softmax of a key tile overlapping the previous tile's P V wgmma
   * (FlashAttention-3's intra-warpgroup pipelining); head_dim 64 and 128. Not AUTO's
   * choice until measured (docs/kernels-prefill.md). */
  KILN_PREFILL_VARIANT_SM90_OVERLAP = 3,
  /* Warp-specialized wgmma kernel (FlashAttention-3's structure): a TMA producer
   * warpgroup, two consumer warpgroups in ping-pong. Dense K/V at head_dim 64 and 128
   * without a sliding window; every other call runs the SM90 variant. Not AUTO's choice
   * until measured (docs/kernels-prefill.md). */
  KILN_PREFILL_VARIANT_SM90_WS = 4
} kiln_prefill_variant_t;

kiln_status_t kiln_prefill_fmha(const kiln_prefill_fmha_params_t *params);
kiln_status_t kiln_prefill_fmha_paged(const kiln_prefill_fmha_paged_params_t *params);

/* Same as kiln_prefill_fmha with an explicit variant; KILN_ERROR_UNSUPPORTED where the
 * variant cannot run (not built, or the device's SM is too old). */
kiln_status_t kiln_prefill_fmha_variant(const kiln_prefill_fmha_params_t *params,
                                        kiln_prefill_variant_t variant);
kiln_status_t kiln_prefill_fmha_paged_variant(const kiln_prefill_fmha_paged_params_t *params,
                                              kiln_prefill_variant_t variant);

#ifdef __cplusplus
}
#endif
#endif /* KILN_KERNELS_PREFILL_H */
