/* Sizes of the runtime-owned device buffers of a compiled model: the per-step io buffer
 * and the workspace. Header-only C (static inline), no CUDA: kiln-compile includes it to
 * write io_bytes and workspace_bytes into a model's manifest, and the runtime includes
 * it to lay those buffers out, so both sides always agree on the formulas.
 *
 * io_bytes (one buffer; int32 arrays, each rounded up to 256 bytes, in this order):
 *   token_ids   [max_step_tokens]      the step's token ids (KILN_RT_INPUT_TOKEN_IDS)
 *   positions   [max_step_tokens]      their positions (KILN_RT_INPUT_POSITIONS); also
 *                                      the cache position kv_append writes each token to
 *   token_batch [max_step_tokens]      the sequence (0..batch-1) of each token (kv_append)
 *   logit_rows  [max_logit_rows]       KILN_RT_INPUT_LOGIT_ROWS
 *   seq_lens    [max_batch]            cached tokens per sequence after the step
 *   cu_seqlens  [max_batch + 1]        token offsets of the sequences (varlen attention)
 *   slots       [max_batch]            state slot of each sequence
 *   ring_table  [max_batch * max_pages_per_seq]  with a KV ring window only: the pages
 *                                      of the window's ring pools (kiln_rt_ring_pages)
 *   block_table [max_batch * max_pages_per_seq]  page ids, one row per sequence
 * They are uploaded from pinned host memory in ONE copy per step (everything up to the
 * used part of block_table, which is last for that reason); the greedy tokens of the
 * logit rows go straight to mapped pinned host memory, not through this buffer.
 *
 * workspace_bytes = KILN_GEMM_WORKSPACE_BYTES (cuBLASLt) + the split-KV region:
 *   P = KILN_RT_DECODE_SPLITS * max_decode_tokens * max_q_heads * (max_head_dim + 1) * 4
 *   align256(P + P / 1023 + 32)
 * i.e. room for KILN_RT_DECODE_SPLITS splits of every query row of the largest decode
 * step (the partials), and at the region's end the fused combine's arrival counters:
 * kiln_rt_split_counter_bytes(region), about 1/1024 of it, whatever the heads (the
 * runtime knows the region's size, not the model's heads). That is at least one 4-byte
 * counter a query row of the largest step (a row's partials are 16 * 65 * 4 bytes or
 * more), and the partials still fit before it (kiln_rt_split_counter_bytes). The
 * counters never move and no partial is ever written over them, so zeroing them once
 * (the context's allocation is zero-filled) is enough: every decode launch leaves them
 * at 0. Any padding of the workspace widens the region. Attention decode splits each
 * sequence's keys into fixed chunks of kiln_rt_decode_split_keys(max_seq_len) keys
 * anchored at key 0, whatever the batch: a query's split boundaries, and so its bits,
 * are the same in a plain decode step and in a speculative verify step (greedy
 * speculation is lossless only then). At most KILN_RT_DECODE_SPLITS chunks cover
 * max_seq_len. max_decode_tokens is
 * max_batch * (1 + max_draft_len), max_q_heads / max_head_dim the largest attention
 * layer's. */
#ifndef KILN_RUNTIME_LAYOUT_H
#define KILN_RUNTIME_LAYOUT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_RT_ALIGNMENT 256ull
/* The same definition as include/kiln/Kernels/Gemm.h (identical redefinition). */
#ifndef KILN_GEMM_WORKSPACE_BYTES
#define KILN_GEMM_WORKSPACE_BYTES (32ull << 20)
#endif
#define KILN_RT_DECODE_SPLITS 16
/* Smallest split-KV chunk: 4 pipeline tiles of 64 keys, so that a split block does more
 * than fill its pipeline. */
#define KILN_RT_MIN_SPLIT_KEYS 256

static inline uint64_t kiln_rt_align(uint64_t bytes) {
  return (bytes + KILN_RT_ALIGNMENT - 1) / KILN_RT_ALIGNMENT * KILN_RT_ALIGNMENT;
}

static inline uint64_t kiln_rt_nonneg(int64_t v) { return v > 0 ? (uint64_t)v : 0u; }

/* Byte offsets of the io arrays inside the io buffer, and its total size. */
typedef struct kiln_rt_io_layout {
  uint64_t token_ids;
  uint64_t positions;
  uint64_t token_batch;
  uint64_t logit_rows;
  uint64_t seq_lens;
  uint64_t cu_seqlens;
  uint64_t slots;
  uint64_t pending; /* [max_batch, 2]: {accepted tokens to commit, their replay buffer} */
  uint64_t ring_table;  /* == block_table when the model has no KV ring window */
  uint64_t block_table; /* last: a step uploads the io buffer up to its own rows here */
  uint64_t bytes;
} kiln_rt_io_layout_t;

/* ring_tables: 1 when the model has a KV ring window (kv_ring_window > 0), else 0. */
static inline kiln_rt_io_layout_t kiln_rt_io_layout(int64_t max_batch, int64_t max_step_tokens,
                                                    int64_t max_logit_rows,
                                                    int64_t max_pages_per_seq,
                                                    int64_t ring_tables) {
  const uint64_t b = kiln_rt_nonneg(max_batch), t = kiln_rt_nonneg(max_step_tokens);
  const uint64_t r = kiln_rt_nonneg(max_logit_rows), p = kiln_rt_nonneg(max_pages_per_seq);
  kiln_rt_io_layout_t l;
  uint64_t at = 0;
  l.token_ids = at;
  at += kiln_rt_align(t * 4u);
  l.positions = at;
  at += kiln_rt_align(t * 4u);
  l.token_batch = at;
  at += kiln_rt_align(t * 4u);
  l.logit_rows = at;
  at += kiln_rt_align(r * 4u);
  l.seq_lens = at;
  at += kiln_rt_align(b * 4u);
  l.cu_seqlens = at;
  at += kiln_rt_align((b + 1u) * 4u);
  l.slots = at;
  at += kiln_rt_align(b * 4u);
  l.pending = at;
  at += kiln_rt_align(b * 8u);
  l.ring_table = at;
  at += ring_tables > 0 ? kiln_rt_align(b * p * 4u) : 0u;
  l.block_table = at;
  at += kiln_rt_align(b * p * 4u);
  l.bytes = at;
  return l;
}

/* Bytes of the io buffer (see the list above). */
static inline uint64_t kiln_rt_io_bytes(int64_t max_batch, int64_t max_step_tokens,
                                        int64_t max_logit_rows, int64_t max_pages_per_seq,
                                        int64_t ring_tables) {
  return kiln_rt_io_layout(max_batch, max_step_tokens, max_logit_rows, max_pages_per_seq,
                           ring_tables)
      .bytes;
}

/* Pages a KV ring pool keeps for each sequence slot: the pools of the layers whose
 * sliding window is the model's kv_ring_window hold a ring of this many pages a slot
 * instead of pages for max_seq_len. Logical page p of the sequence in slot s is physical
 * page s * R + p % R (the ring_table above). A step appends at most max_step_tokens keys
 * to a sequence and its queries read at most window - 1 keys before them: those
 * window + max_step_tokens - 1 consecutive positions touch at most
 * ceil((window + max_step_tokens - 1) / page_size) + 1 pages, so nothing a step reads
 * is overwritten in it, and rejected drafts (at most max_step_tokens keys) overwrite only
 * positions below every later window. Never more than a sequence's pages. */
static inline int64_t kiln_rt_ring_pages(int64_t window, int64_t page_size, int64_t max_step_tokens,
                                         int64_t max_seq_len) {
  if (window <= 0 || page_size <= 0 || max_step_tokens <= 0 || max_seq_len <= 0)
    return 0;
  const int64_t ring = (window + max_step_tokens - 1 + page_size - 1) / page_size + 1;
  const int64_t full = (max_seq_len + page_size - 1) / page_size;
  return ring < full ? ring : full;
}

/* Columns of the block table: ceil(max_seq_len / page_size). */
static inline int64_t kiln_rt_max_pages_per_seq(int64_t max_seq_len, int64_t page_size) {
  return page_size > 0 && max_seq_len > 0 ? (max_seq_len + page_size - 1) / page_size : 0;
}

/* Keys per split-KV chunk of attention decode (see above): a model constant, a multiple
 * of 64, at least KILN_RT_MIN_SPLIT_KEYS, and at most KILN_RT_DECODE_SPLITS chunks per
 * max_seq_len. */
static inline int64_t kiln_rt_decode_split_keys(int64_t max_seq_len) {
  const int64_t tokens = max_seq_len > 0 ? max_seq_len : 1;
  int64_t keys = (tokens + KILN_RT_DECODE_SPLITS - 1) / KILN_RT_DECODE_SPLITS;
  keys = (keys + 63) / 64 * 64;
  return keys < KILN_RT_MIN_SPLIT_KEYS ? KILN_RT_MIN_SPLIT_KEYS : keys;
}

/* Key chunks that cover max_seq_len: the values a decode step's key bound (its longest
 * sequence rounded up to a chunk) takes, one CUDA graph each. */
static inline int64_t kiln_rt_decode_key_chunks(int64_t max_seq_len) {
  const int64_t keys = kiln_rt_decode_split_keys(max_seq_len);
  return max_seq_len > 0 ? (max_seq_len + keys - 1) / keys : 1;
}

/* The split-KV region of the workspace (see above): partials, then counters. */
static inline uint64_t kiln_rt_split_workspace_bytes(int64_t max_decode_tokens,
                                                     int64_t max_q_heads,
                                                     int64_t max_head_dim) {
  const uint64_t partials = (uint64_t)KILN_RT_DECODE_SPLITS * kiln_rt_nonneg(max_decode_tokens) *
                            kiln_rt_nonneg(max_q_heads) * (kiln_rt_nonneg(max_head_dim) + 1u) * 4u;
  return kiln_rt_align(partials + partials / 1023u + 32u);
}

/* Bytes at the end of a split-KV region of `region_bytes` that hold the arrival counters:
 * floor(region / 1024) rounded up to 16 (0 for an empty region). With the region of
 * kiln_rt_split_workspace_bytes (or larger): counters >= floor(P / 1023) >= one a query
 * row (each row has >= 1040 * 4 bytes of partials, and a launch counts at most one a row),
 * and region - counters >= region * 1023 / 1024 - 16 >= P (region >= P + P / 1023 + 31). */
static inline uint64_t kiln_rt_split_counter_bytes(uint64_t region_bytes) {
  if (region_bytes < 1024u)
    return 0;
  const uint64_t bytes = (region_bytes / 1024u + 15u) / 16u * 16u;
  return bytes < region_bytes ? bytes : 0;
}

/* cudaMalloc hands out device memory in 2 MiB pages: a plan whose total
 * (weight + cache + activation + workspace + io bytes) is not a multiple of this costs up
 * to 2 MiB more than planned, which matters for small models. The compiler may add
 * kiln_rt_granule_padding(total) to workspace_bytes (the runtime gives any workspace
 * beyond the GEMM's to the split-KV partials) so that measured == planned. */
#define KILN_RT_DEVICE_GRANULE (2ull << 20)
static inline uint64_t kiln_rt_granule_padding(uint64_t total_bytes) {
  return (KILN_RT_DEVICE_GRANULE - total_bytes % KILN_RT_DEVICE_GRANULE) %
         KILN_RT_DEVICE_GRANULE;
}

/* CUDA graphs of decode steps: the driver memory an instantiated graph takes (its kernel
 * nodes' parameters and launch state) is outside the allocation, so the plan reserves
 * it: KILN_RT_GRAPH_NODE_BYTES a launch of the step (the largest classic kernel
 * parameter block, 4 KiB), rounded up to whole 2 MiB pages, per captured shape. The
 * runtime measures what each capture took and captures no further shape once the
 * reserve would be exceeded. At most KILN_RT_MAX_GRAPHS shapes. */
#define KILN_RT_GRAPH_NODE_BYTES 4096ull
#define KILN_RT_MAX_GRAPHS 4096
static inline uint64_t kiln_rt_graph_reserve_bytes(uint64_t graphs, uint64_t launches_per_step) {
  const uint64_t perGraph = launches_per_step * KILN_RT_GRAPH_NODE_BYTES;
  return graphs * (perGraph + kiln_rt_granule_padding(perGraph));
}

/* kiln.mla_attention's scratch (an activation buffer of [tokens, bytes_per_token]):
 * consecutive regions of tokens x (a token's part), for whichever path runs:
 *   absorbed (decode, and prompts through the decode kernel):
 *     q_abs  [heads, kv_lora_rank + rope] bf16   (W_UK^T q_nope | rope(q_pe))
 *     o_lat  [heads, kv_lora_rank] bf16          (attention over the latent)
 *     k_pe   [rope] bf16                         (rope(k_pe), appended to the cache)
 *   expanded (prompts through the FMHA):
 *     q      [heads, nope + rope] bf16           (q_nope | rope(q_pe))
 *     k      [heads, nope + rope] bf16           (k_nope | rope(k_pe))
 *     kv     [heads, nope + v] bf16              (kv_b_proj(latent))
 *     k_pe   [rope] bf16
 * A token's bytes are the larger of the two. With every size a multiple of 8 elements
 * each region stays 16-byte aligned. */
static inline int64_t kiln_rt_mla_absorbed_bytes_per_token(int64_t heads, int64_t rank,
                                                           int64_t rope) {
  return 2 * (heads * (rank + rope) + heads * rank + rope);
}
static inline int64_t kiln_rt_mla_expanded_bytes_per_token(int64_t heads, int64_t rope,
                                                           int64_t nope, int64_t v) {
  return 2 * (2 * heads * (nope + rope) + heads * (nope + v) + rope);
}
static inline int64_t kiln_rt_mla_scratch_bytes_per_token(int64_t heads, int64_t rank,
                                                          int64_t rope, int64_t nope,
                                                          int64_t v) {
  const int64_t absorbed = kiln_rt_mla_absorbed_bytes_per_token(heads, rank, rope);
  const int64_t expanded = kiln_rt_mla_expanded_bytes_per_token(heads, rope, nope, v);
  return absorbed > expanded ? absorbed : expanded;
}

/* kiln.gated_delta_net's scratch (an activation buffer of [tokens, bytes_per_token]): the
 * packed operands kiln_gdn_prepare writes for the GDN kernels, five planar regions in
 * this order, each starting at the first KILN_RT_ALIGNMENT (256) byte aligned address at
 * or after the end of the one before (the first: at or after the scratch pointer):
 *   qn    [tokens, k_heads, k_dim] bf16   (q packed)
 *   kn    [tokens, k_heads, k_dim] bf16   (k packed)
 *   v     [tokens, v_heads, v_dim] bf16
 *   g     [tokens, v_heads] f32           (log decay)
 *   beta  [tokens, v_heads] f32
 * A token's bytes are its part of the five regions plus KILN_RT_ALIGNMENT for each
 * region: the padding before a region is less than that, so tokens x this holds the
 * regions whatever tokens (>= 1) and wherever the scratch starts.
 * kiln_rt_gdn_scratch_layout gives the regions' byte offsets from the scratch at address
 * `scratch` (the runtime carves the scratch with it). */
#define KILN_RT_GDN_SCRATCH_REGIONS 5
static inline int64_t kiln_rt_gdn_scratch_bytes_per_token(int64_t k_heads, int64_t v_heads,
                                                          int64_t k_dim, int64_t v_dim) {
  return 2 * (2 * k_heads * k_dim + v_heads * v_dim) + 4 * (2 * v_heads) +
         KILN_RT_GDN_SCRATCH_REGIONS * (int64_t)KILN_RT_ALIGNMENT;
}
typedef struct kiln_rt_gdn_scratch {
  uint64_t qn, kn, v, g, beta;
  uint64_t end; /* the bytes the regions span from the scratch pointer */
} kiln_rt_gdn_scratch_t;
static inline kiln_rt_gdn_scratch_t kiln_rt_gdn_scratch_layout(uint64_t scratch, int64_t tokens,
                                                               int64_t k_heads, int64_t v_heads,
                                                               int64_t k_dim, int64_t v_dim) {
  const uint64_t t = kiln_rt_nonneg(tokens);
  const uint64_t keys = t * 2u * kiln_rt_nonneg(k_heads) * kiln_rt_nonneg(k_dim);
  const uint64_t values = t * 2u * kiln_rt_nonneg(v_heads) * kiln_rt_nonneg(v_dim);
  const uint64_t gates = t * 4u * kiln_rt_nonneg(v_heads);
  kiln_rt_gdn_scratch_t l;
  l.qn = kiln_rt_align(scratch) - scratch;
  l.kn = kiln_rt_align(scratch + l.qn + keys) - scratch;
  l.v = kiln_rt_align(scratch + l.kn + keys) - scratch;
  l.g = kiln_rt_align(scratch + l.v + values) - scratch;
  l.beta = kiln_rt_align(scratch + l.g + gates) - scratch;
  l.end = l.beta + gates;
  return l;
}

/* Bytes of the workspace: the GEMM workspace, then the split-KV partials. */
static inline uint64_t kiln_rt_workspace_bytes(int64_t max_decode_tokens, int64_t max_q_heads,
                                               int64_t max_head_dim) {
  return KILN_GEMM_WORKSPACE_BYTES +
         kiln_rt_split_workspace_bytes(max_decode_tokens, max_q_heads, max_head_dim);
}

#ifdef __cplusplus
}
#endif
#endif /* KILN_RUNTIME_LAYOUT_H */
