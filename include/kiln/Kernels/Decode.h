/* Kiln decode kernels: paged GQA decode (single- and multi-token), KV-cache append,
 * DeepSeek-style absorbed MLA decode. C ABI; see docs/kernels-decode.md.
 *
 * Layouts (all tensors dense, row-major, innermost dimension last):
 *   KV pool       [num_pages, 2, page_size, kv_heads, head_dim]   (K then V per page)
 *   MLA pool      [num_pages, 64, 576]  (512 latent values then 64 rope values per token)
 *   MLA FP8 pool  [num_pages, 64, 656 bytes]: per token 512 e4m3 latent values (bytes
 *                 0..511), 4 fp32 dequantization scales, one per 128-value group of the
 *                 latent (bytes 512..527), then the 64 rope values in bf16 (528..655);
 *                 every part 16-byte aligned. Value = e4m3 * scale of its group.
 *   block table   [batch, max_pages_per_seq] int32 (page ids into the pool)
 *   seq_lens      [batch] int32: tokens in the cache for each sequence, INCLUDING the
 *                 q_len new tokens of this step (their K/V must already be appended).
 *   q / out       [batch, q_len, q_heads, head_dim] (GQA); MLA: q [batch, q_len, heads, 576],
 *                 out [batch, q_len, heads, 512].
 * Token i (0-based) of the q_len new tokens of sequence b attends to cache positions
 * p < seq_lens[b] - q_len + 1 + i (causal among the new tokens), and with a sliding
 * window W (gqa_decode's `window`) p >= seq_lens[b] - q_len + 1 + i - W.
 *
 * Every launcher validates its arguments before touching CUDA and returns
 * KILN_ERROR_INVALID_ARGUMENT / KILN_ERROR_UNSUPPORTED with a message (kiln_last_error())
 * naming the kernel and the argument. Launches are asynchronous on `stream`
 * (a cudaStream_t, NULL = default stream); nothing is allocated inside. */
#ifndef KILN_KERNELS_DECODE_H
#define KILN_KERNELS_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "kiln/Kernels/Status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_MLA_KV_LORA_RANK 512
#define KILN_MLA_ROPE_DIM 64
#define KILN_MLA_HEAD_DIM 576 /* KILN_MLA_KV_LORA_RANK + KILN_MLA_ROPE_DIM */
#define KILN_MLA_PAGE_SIZE 64
/* The FP8 latent token (kv_dtype KILN_DTYPE_FP8_E4M3): 512 + 4 * 4 + 64 * 2 bytes, 0.57x
 * the bf16 token's 1152. kv_append writes power-of-two scales (the smallest with
 * |value| / scale <= 448 over the group), so a widened value is exact in bf16. */
#define KILN_MLA_FP8_GROUP 128
#define KILN_MLA_FP8_SCALE_OFFSET 512
#define KILN_MLA_FP8_ROPE_OFFSET 528
#define KILN_MLA_FP8_TOKEN_BYTES 656
/* kiln_mla_decode's tiling follows the query rows of a sequence: q_len * num_heads above
 * this runs the large-tile configuration, which rounds differently from the small one. */
#define KILN_MLA_SMALL_TILE_ROWS 16
/* The per-token mode (token_rows) launches a block row per token: at most this many. */
#define KILN_MLA_MAX_PER_TOKEN_QUERIES 65535
#define KILN_DECODE_MAX_SPLITS 128

/* ---- gqa_decode ------------------------------------------------------------------
 * head_dim 64/128/256; page_size 16/32/64/128; group = q_heads / kv_heads in 1..16;
 * q_len 1..8; dtype BF16 or F16 (q and out); the pool holds dtype, FP8 e4m3 with
 * per-KV-head dequantization scales (kv_dtype KILN_DTYPE_FP8_E4M3, BF16 q only), or F16
 * next to BF16 q/out (kv_dtype KILN_DTYPE_F16: fp16 mma, q rounded to fp16 once; the F16
 * kernel's arithmetic, output rounded to bf16); sm_80 or newer.
 * Split-KV: the launcher splits each sequence's keys into num_splits chunks (0 = choose
 * from batch, kv heads, max_seq_len and the SM count) and combines the partial results:
 * inside the kernel (the last split block of a group combines) in num_splits mode, and
 * with split_keys when split_counters is given; otherwise (split_keys without it) in a
 * second kernel. Both give the same bits. Partials live in the caller's workspace: query
 * its size with kiln_gqa_decode_workspace_bytes(); with a smaller workspace the launcher
 * uses fewer splits (workspace NULL/0 = no split-KV). Zero the workspace once after
 * allocating it: in num_splits mode without split_counters its last bytes are arrival
 * counters that must start at 0; every launch leaves them at 0 (so CUDA-graph replays
 * need no memset) and treats the rest as scratch. Do not share those bytes with other
 * writers between launches. Those counters sit right after the partials of the launch's
 * shape, so a workspace reused for another shape may hold old partials there: zero it
 * again, or pass split_counters (a place no partial ever overlaps). */
typedef struct kiln_gqa_decode_params {
  const void *q;              /* [batch, q_len, q_heads, head_dim] */
  const void *kv_cache;       /* [num_pages, 2, page_size, kv_heads, head_dim] */
  const int32_t *block_table; /* [batch, max_pages_per_seq] */
  const int32_t *seq_lens;    /* [batch], each in [q_len, max_seq_len] */
  void *out;                  /* [batch, q_len, q_heads, head_dim] */
  void *workspace;            /* device memory, 16-byte aligned, or NULL */
  size_t workspace_bytes;
  int batch;
  int q_len;
  int q_heads;
  int kv_heads;
  int head_dim;
  int page_size;
  int num_pages;         /* pages in the pool */
  int max_pages_per_seq; /* columns of the block table */
  int max_seq_len;       /* host-known upper bound of seq_lens (<= max_pages_per_seq*page_size) */
  float softmax_scale;   /* e.g. 1/sqrt(head_dim) */
  kiln_dtype_t dtype;
  int num_splits;        /* 0 = automatic; else 1..KILN_DECODE_MAX_SPLITS */
  /* > 0 (a multiple of 64, num_splits 0): batch-invariant split-KV. Split s covers keys
   * [s*split_keys, (s+1)*split_keys) of every sequence whatever the batch, q_len or
   * max_seq_len, so a query's result is bitwise the same in any step that holds it
   * (what lossless greedy speculation needs). ceil(max_seq_len / split_keys) must not
   * exceed KILN_DECODE_MAX_SPLITS, and the workspace must hold that many splits: the
   * launcher never falls back to fewer splits in this mode. */
  int split_keys;
  void *stream;          /* cudaStream_t */
  /* > 0: sliding window. Token i of sequence b (position p = seq_lens[b] - q_len + i)
   * sees keys p - window + 1 .. p only, and no key below seq_lens[b] - q_len - window + 1
   * is read (its page may be recycled). 0: every key up to p. */
  int window;
  /* Device [q_heads] attention-sink logits (gpt-oss), in the units of softmax_scale * q.k,
   * or NULL: head h's softmax gets the extra term exp(sinks[h] - max) in its
   * denominator (a logit that takes probability mass and has no value). */
  const float *sinks;
  /* The pool's element type: dtype, KILN_DTYPE_FP8_E4M3 (then k_scale / v_scale are
   * device [kv_heads] dequantization scales, value = e4m3 * scale; NULL = 1), or
   * KILN_DTYPE_F16 with BF16 dtype (no scales). */
  kiln_dtype_t kv_dtype;
  const float *k_scale;
  const float *v_scale;
  /* NULL, or device memory (4-byte aligned, zeroed once by the caller, disjoint from the
   * workspace) of split_counter_bytes >= 4 * batch * kv_heads * ceil(q_len * group /
   * (q_len * group > 16 ? 32 : 16)) bytes: the fused combine's arrival counters, one a
   * (sequence, kv head, block of query rows). Every launch leaves them at 0. With it,
   * split_keys mode combines in the kernel as num_splits mode does (the same bits as
   * the separate combine kernel), and num_splits mode keeps its counters here instead of
   * after the partials. A smaller split_counter_bytes is an INVALID_ARGUMENT. */
  void *split_counters;
  size_t split_counter_bytes;
} kiln_gqa_decode_params_t;

/* Workspace bytes kiln_gqa_decode needs for these params on the current device (0 when
 * no split is chosen). Validates like the launcher. */
kiln_status_t kiln_gqa_decode_workspace_bytes(const kiln_gqa_decode_params_t *params,
                                              size_t *bytes);
kiln_status_t kiln_gqa_decode(const kiln_gqa_decode_params_t *params);

/* ---- kv_append --------------------------------------------------------------------
 * Writes token t's K and V ([kv_heads, head_dim] each) into the pool at position
 * token_pos[t] of sequence token_batch[t]: page block_table[b][pos / page_size], slot
 * pos % page_size. Ragged: tokens of different sequences in any order. k/v are BF16/F16
 * (dtype); the pool holds dtype (the bytes are copied) or FP8 e4m3 (kv_dtype
 * KILN_DTYPE_FP8_E4M3, BF16 k/v: each value is divided by its KV head's scale and
 * rounded to nearest, saturating at +-448). Token strides in elements, multiples of 8 (0 =
 * kv_heads*head_dim). An F16 pool next to BF16 k/v (kv_dtype KILN_DTYPE_F16): each
 * value is rounded to fp16 (nearest even; exact for bf16 values in fp16's normal range,
 * fp16's subnormals round below it), values beyond +-65504 and infinities saturate to
 * +-65504 rather than become infinite, NaN stays NaN. Entries whose batch/position/page
 * fall outside the tables are skipped by the kernel (the host cannot see device-side
 * indices). */
typedef struct kiln_kv_append_params {
  const void *k; /* [num_tokens, kv_heads, head_dim] (token stride k_token_stride) */
  const void *v;
  long long k_token_stride;
  long long v_token_stride;
  void *kv_cache; /* [num_pages, 2, page_size, kv_heads, head_dim] */
  const int32_t *block_table; /* [batch, max_pages_per_seq] */
  const int32_t *token_batch; /* [num_tokens] */
  const int32_t *token_pos;   /* [num_tokens] */
  int num_tokens;
  int batch;
  int kv_heads;
  int head_dim; /* 64, 128, 256 */
  int page_size; /* 16, 32, 64, 128 */
  int num_pages;
  int max_pages_per_seq;
  kiln_dtype_t dtype;
  void *stream;
  kiln_dtype_t kv_dtype;  /* the pool's element type: dtype, KILN_DTYPE_FP8_E4M3 or F16 */
  const float *k_scale;   /* FP8: device [kv_heads] scales, or NULL = 1 */
  const float *v_scale;
} kiln_kv_append_params_t;

kiln_status_t kiln_kv_append(const kiln_kv_append_params_t *params);

/* MLA variant: token t's latent (512 values of kv_c) and rope key (64 values of k_pe)
 * go to latent_cache[page][slot][0:512] and [512:576]. Page size 64. An FP8 pool
 * (kv_dtype KILN_DTYPE_FP8_E4M3, the 656-byte token above): each 128-value group of the
 * latent gets the scale 2^ceil(log2(amax / 448)) (1 for an all-zero group) and its values
 * are divided by it and rounded to nearest e4m3, saturating at +-448; k_pe is copied. */
typedef struct kiln_mla_kv_append_params {
  const void *kv_c; /* [num_tokens, 512] (token stride kv_c_token_stride, 0 = 512) */
  const void *k_pe; /* [num_tokens, 64] (token stride k_pe_token_stride, 0 = 64) */
  long long kv_c_token_stride;
  long long k_pe_token_stride;
  void *latent_cache; /* [num_pages, 64, 576] */
  const int32_t *block_table;
  const int32_t *token_batch;
  const int32_t *token_pos;
  int num_tokens;
  int batch;
  int num_pages;
  int max_pages_per_seq;
  kiln_dtype_t dtype;
  void *stream;
  kiln_dtype_t kv_dtype; /* the pool: BF16 ([.., 576] bf16) or FP8_E4M3 (656-byte tokens) */
} kiln_mla_kv_append_params_t;

kiln_status_t kiln_mla_kv_append(const kiln_mla_kv_append_params_t *params);

/* The expanded MLA keys of a prompt (the FMHA path): for token t and head h,
 *   k[t, h, 0:nope]         = kv[t, h * (nope + v_dim) + 0 : nope]  (kv_b_proj's key rows)
 *   k[t, h, nope:nope+rope] = k_pe[t, 0:rope]                      (the rotated shared key)
 * kv [num_tokens, heads * (nope + v_dim)], k_pe [num_tokens, rope], k [num_tokens, heads,
 * nope + rope], dense bf16; nope, rope and v_dim multiples of 8; 16-byte aligned. */
typedef struct kiln_mla_expand_keys_params {
  const void *kv;
  const void *k_pe;
  void *k;
  int num_tokens, heads, nope, rope, v_dim;
  void *stream;
} kiln_mla_expand_keys_params_t;

kiln_status_t kiln_mla_expand_keys(const kiln_mla_expand_keys_params_t *params);

/* ---- mla_decode -------------------------------------------------------------------
 * Absorbed MLA (DeepSeek-V2/V3): K = the 576 cached values, V = their first 512.
 * BF16 q/out, page size 64, num_heads 1..128; the pool BF16 or FP8 (kv_dtype). FP8 pools
 * run the mma.sync kernels on every target (16 rows: 96.9 KiB of shared memory; 64 rows:
 * 176 KiB, 32-key tiles), widening each tile to bf16 in shared memory; the sm_90 wgmma
 * kernel reads bf16 pools only.
 *  kiln_mla_decode:            q_len 1..4, 226.5 KiB shared memory per block when
 *                              q_len*num_heads > 16 (sm_90 / sm_100 class).
 *  kiln_mla_decode_small_smem: q_len 1 only, 91.5 KiB shared memory (sm_80..sm_120).
 * Split-KV + combine as for gqa_decode; workspace from kiln_mla_decode_workspace_bytes
 * (enough for either variant). */
typedef struct kiln_mla_decode_params {
  const void *q;              /* [batch, q_len, num_heads, 576] */
  const void *latent_cache;   /* [num_pages, 64, 576] */
  const int32_t *block_table; /* [batch, max_pages_per_seq] */
  const int32_t *seq_lens;    /* [batch] */
  void *out;                  /* [batch, q_len, num_heads, 512] */
  void *workspace;
  size_t workspace_bytes;
  int batch;
  int q_len;
  int num_heads;
  int num_pages;
  int max_pages_per_seq;
  int max_seq_len;
  float softmax_scale; /* DeepSeek-V3: 1/sqrt(192) (times its yarn mscale^2) */
  kiln_dtype_t dtype;  /* BF16 */
  int num_splits;      /* 0 = automatic */
  void *stream;
  /* Per-token mode (a prompt's causal attention through this kernel): both non-NULL,
   * q_len 1, batch = tokens; entry b is a token of sequence token_rows[b] (its
   * block_table row) at position token_pos[b], attending keys 0..token_pos[b]
   * (seq_lens unused, may be NULL). Its keys must already be in the cache. */
  const int32_t *token_rows;
  const int32_t *token_pos;
  /* The pool: KILN_DTYPE_BF16 (0: [num_pages, 64, 576] bf16) or KILN_DTYPE_FP8_E4M3
   * ([num_pages, 64, KILN_MLA_FP8_TOKEN_BYTES] bytes, the layout above). */
  kiln_dtype_t kv_dtype;
} kiln_mla_decode_params_t;

kiln_status_t kiln_mla_decode_workspace_bytes(const kiln_mla_decode_params_t *params,
                                              size_t *bytes);
kiln_status_t kiln_mla_decode(const kiln_mla_decode_params_t *params);
kiln_status_t kiln_mla_decode_small_smem(const kiln_mla_decode_params_t *params);

#ifdef __cplusplus
}
#endif
#endif /* KILN_KERNELS_DECODE_H */
