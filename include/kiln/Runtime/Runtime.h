/* The Kiln runtime (C ABI): what a model compiled by Kiln calls, and what a serving
 * process uses to drive it.
 *
 * A compiled model (a shared object made by `kiln-compile --emit=so`) exports
 *     uint64_t    kiln_model_arena_bytes(void);        planned cache bytes (kiln.plan)
 *     uint64_t    kiln_model_speculative_bytes(void);  of which speculative-only
 *     int32_t     kiln_model_kv_pages(void);           pages per KV pool (batch.num_pages)
 *     int32_t     kiln_model_decode_step(kiln_rt_context_t *ctx);
 *     int32_t     kiln_model_prefill_step(kiln_rt_context_t *ctx);
 * Each step is a fixed sequence of kiln_rt_<family>() calls, one per cached layer op,
 * with the op's planned arena offsets, shapes and selected kernel as constants; it
 * returns the first non-KILN_OK status (the message names kernel, layer and call).
 *
 * Serving loop: kiln_rt_create(device, kiln_model_arena_bytes(), &ctx) allocates the
 * one cache arena (nothing else is allocated for caches); kiln_rt_bind() attaches each
 * layer op's activations, outputs and parameters by name; kiln_rt_set_batch()
 * describes the step's sequences (device pointers); then a step function runs on the
 * context's stream.
 *
 * Tensor names bound per layer (device pointers, layouts as in the kernel headers):
 *   attention  q [tokens, heads, d], k, v [tokens, kv_heads, d], out [tokens, heads, d]
 *   mla        q [tokens, heads, 576], latent [tokens, 576], out [tokens, heads, 512]
 *   ssm        x [tokens, heads, p], dt [tokens, heads], b, c [tokens, groups, n],
 *              z (optional) [tokens, heads, p], out [tokens, heads, p];
 *              parameters A, D (optional), dt_bias (optional): fp32 [heads]
 *   conv       x [tokens, conv_dim], out [tokens, conv_dim];
 *              parameters weight [conv_dim, width], bias (optional) [conv_dim]
 * "tokens" is batch * q_len in decode, total_tokens in prefill (packed by cu_seqlens).
 * Activations are bf16, and so are the KV/MLA caches, the conv state and the conv
 * weight and bias (the ABI carries no cache dtype); the SSM state dtype is the
 * state_dtype argument of kiln_rt_ssm (F32 or BF16).
 * A layer holding both a conv and an ssm op (a Mamba2 mixer) binds the conv's tensors
 * as "conv.x", "conv.out", "conv.weight", "conv.bias": kiln_rt_conv looks up "conv.<name>"
 * first and falls back to "<name>" (fine for a layer without an ssm).
 * Details, the prefill semantics and the limits: docs/runtime.md.
 */
#ifndef KILN_RUNTIME_RUNTIME_H
#define KILN_RUNTIME_RUNTIME_H

#include <stdint.h>

#include "kiln/Kernels/Status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_rt_context kiln_rt_context_t;

/* Kernels a lowered model names (stable numbers: they are baked into compiled code). */
typedef enum kiln_rt_kernel {
  KILN_RT_KERNEL_NONE = 0,
  KILN_RT_KERNEL_GQA_DECODE = 1,
  KILN_RT_KERNEL_PREFILL_FMHA = 2,
  KILN_RT_KERNEL_MLA_DECODE = 3,
  KILN_RT_KERNEL_MLA_DECODE_SMALL_SMEM = 4,
  KILN_RT_KERNEL_SSM_UPDATE = 5,
  KILN_RT_KERNEL_SSM_UPDATE_SPEC = 6,
  KILN_RT_KERNEL_CONV_UPDATE = 7,
  KILN_RT_KERNEL_CONV_UPDATE_SPEC = 8,
  KILN_RT_KERNEL_SSM_PREFILL_SEQUENTIAL = 9,  /* prefill as token-by-token updates */
  KILN_RT_KERNEL_CONV_PREFILL_SEQUENTIAL = 10,
  KILN_RT_KERNEL_MLA_PREFILL_DECODE = 11      /* MLA prefill via the decode kernel */
} kiln_rt_kernel_t;

typedef enum kiln_rt_phase { KILN_RT_DECODE = 0, KILN_RT_PREFILL = 1 } kiln_rt_phase_t;

/* Matches the kiln dialect's SpecDecMode. */
typedef enum kiln_rt_spec_dec_mode {
  KILN_RT_SINGLE_TOKEN = 0,
  KILN_RT_MULTI_TOKEN = 1,
  KILN_RT_EXTEND_CONTEXT = 2
} kiln_rt_spec_dec_mode_t;

/* ---- context ---------------------------------------------------------------------- */
/* One cache arena of arena_bytes on `device` (zero-filled) and a stream. */
kiln_status_t kiln_rt_create(int32_t device, uint64_t arena_bytes, kiln_rt_context_t **out);
void kiln_rt_destroy(kiln_rt_context_t *ctx);
/* Device pointer of the arena; caches live at their planned offsets inside it. */
void *kiln_rt_arena(kiln_rt_context_t *ctx);
/* Bytes of the cache arena, and bytes of everything else the runtime allocated
 * (split-KV workspaces), separately. */
uint64_t kiln_rt_arena_bytes(const kiln_rt_context_t *ctx);
uint64_t kiln_rt_workspace_bytes(const kiln_rt_context_t *ctx);
/* cudaStream_t of the context. */
void *kiln_rt_stream(kiln_rt_context_t *ctx);
kiln_status_t kiln_rt_synchronize(kiln_rt_context_t *ctx);

/* ---- step inputs ------------------------------------------------------------------ */
typedef struct kiln_rt_batch {
  int32_t batch;                /* sequences this step */
  int32_t q_len;                /* decode: tokens per sequence (1 + drafts, or 1) */
  const int32_t *seq_lens;      /* [batch] length incl. this step's tokens (device) */
  const int32_t *block_table;   /* [batch, max_pages] KV page ids (device) */
  int32_t max_pages;
  int32_t num_pages;            /* pages in every KV pool (plan's kv_pages) */
  const int32_t *slot_indices;  /* [batch] state slots (device); NULL: slot = b */
  int32_t num_slots;            /* state slots (runtime max_batch) */
  /* prefill only: packed varlen batch */
  const int32_t *cu_seqlens_q;  /* [batch + 1] (device) */
  const int32_t *cu_seqlens_k;  /* [batch + 1] (device) */
  const int32_t *cu_seqlens_q_host; /* [batch + 1] (host copy, for token loops) */
  int32_t total_tokens;
  int32_t max_q_len;
  float softmax_scale;          /* 0: 1/sqrt(head_dim) */
} kiln_rt_batch_t;
kiln_status_t kiln_rt_set_batch(kiln_rt_context_t *ctx, const kiln_rt_batch_t *batch);

/* Attaches a device tensor to (layer, name); NULL unbinds. */
kiln_status_t kiln_rt_bind(kiln_rt_context_t *ctx, int32_t layer, const char *name,
                           void *device_ptr);

/* ---- launches (called by compiled models) ----------------------------------------- */
/* Decode: append the step's K/V into pages, then decode attention (multi-token when
 * spec_dec_mode is MULTI_TOKEN). Prefill: append all tokens, then causal FMHA. */
kiln_status_t kiln_rt_attention(kiln_rt_context_t *ctx, int32_t phase, int32_t layer,
                                uint64_t kv_offset, int32_t num_heads, int32_t num_kv_heads,
                                int32_t head_dim, int32_t page_size, int32_t window,
                                int32_t kernel, int32_t spec_dec_mode);
kiln_status_t kiln_rt_mla(kiln_rt_context_t *ctx, int32_t phase, int32_t layer,
                          uint64_t cache_offset, int32_t num_heads, int32_t kv_lora_rank,
                          int32_t rope_dim, int32_t page_size, int32_t kernel,
                          int32_t spec_dec_mode);
/* intermediate_offset < 0: no intermediate states (speculation off). */
kiln_status_t kiln_rt_ssm(kiln_rt_context_t *ctx, int32_t phase, int32_t layer,
                          uint64_t state_offset, int64_t intermediate_offset,
                          int32_t num_heads, int32_t head_dim, int32_t state_size,
                          int32_t n_groups, int32_t state_dtype, int32_t kernel);
kiln_status_t kiln_rt_conv(kiln_rt_context_t *ctx, int32_t phase, int32_t layer,
                           uint64_t state_offset, int64_t intermediate_offset,
                           int32_t conv_dim, int32_t kernel_size, int32_t silu,
                           int32_t kernel);

/* ---- additions for serving stacks, tests and tools ---------------------------------- */
/* A validation-only context (no device needed): every kiln_rt_* call validates its
 * arguments, bindings and arena bounds and records the resources exactly as on a real
 * context, but nothing is allocated or launched (kiln_rt_arena() is NULL; any non-null
 * pointer is accepted as a binding). Lets CI run a compiled model's steps without a GPU. */
kiln_status_t kiln_rt_create_dry(uint64_t arena_bytes, kiln_rt_context_t **out);

/* The cache resource a launch call of `layer` used, as recorded by the runtime: kind is
 * "kv", "mla_latent", "ssm_state", "conv_state", "intermediate_ssm_state" or
 * "intermediate_conv_state"; offset into the arena and bytes (from the call's shapes and
 * the batch's num_pages / num_slots / q_len). KILN_ERROR_INVALID_ARGUMENT if no call of
 * that layer used that kind yet. The runtime also rejects a call whose resource overlaps
 * a different recorded resource or leaves the arena. */
kiln_status_t kiln_rt_resource(const kiln_rt_context_t *ctx, int32_t layer, const char *kind,
                               uint64_t *offset, uint64_t *bytes);

/* Rewind-mode commit after a multi-token (speculative) decode step: for every layer
 * whose last decode call wrote intermediate SSM/conv states, copies intermediate[slot,
 * accepted[b] - 1] into the main state of sequence b's slot (slots from the current
 * batch). accepted: host array [batch] with values in 1..q_len (0 leaves the slot
 * untouched). Asynchronous on the context's stream. */
kiln_status_t kiln_rt_commit_accepted(kiln_rt_context_t *ctx, const int32_t *accepted);

/* Launches the context has issued so far: kernel launcher calls (a split-KV decode adds
 * a combine kernel, not counted separately) and the runtime's own index/zero/commit
 * kernels; for measuring the per-step overhead. */
uint64_t kiln_rt_launch_count(const kiln_rt_context_t *ctx);

#ifdef __cplusplus
}
#endif
#endif
