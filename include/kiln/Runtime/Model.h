/* The Kiln serving API (C ABI): load a compiled model (`kiln-compile --emit=so`) and its
 * safetensors weights, manage sequences (slots and KV pages), and run prefill, decode
 * (plain or multi-token verify) and extend steps that return greedy tokens and,
 * optionally, float logits. Built on the runtime context (Runtime.h); docs/runtime.md.
 *
 * Memory: the model's device memory is exactly its manifest's plan (weight + cache +
 * activation + workspace + io bytes), one allocation made at load; no step allocates
 * device memory. Host staging (pinned) is allocated at load too.
 *
 * Sequences: kiln_model_add_sequence takes one of max_batch slots; KV pages (kv_pages
 * of page_size tokens, shared by all layers) are taken from a free list as a sequence
 * grows and returned by truncate/remove. A step that needs a page when none is free
 * fails before anything runs, naming the sequence and the counts.
 *
 * Every function returns a status; kiln_last_error() names the function, the sequence,
 * the step or the tensor and file involved. A failed step leaves sequence lengths and
 * pages as they were before the call (the KV it may have written is overwritten later).
 * Not thread-safe: one model per thread at a time. */
#ifndef KILN_RUNTIME_MODEL_H
#define KILN_RUNTIME_MODEL_H

#include <stdint.h>

#include "kiln/Kernels/Status.h"
#include "kiln/Runtime/Runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_model kiln_model_t;

/* dlopen(so_path), parse its manifest, create the context on `device` (the one
 * allocation of the plan), then read every manifest weight from the safetensors
 * checkpoint at weights_path (a directory with model.safetensors or an index + shards,
 * or one file) into the weight allocation at its offset. All or nothing: on any error
 * everything is freed and *out stays NULL; a weight error names the tensor and file
 * (missing, wrong dtype or shape). */
kiln_status_t kiln_model_load(const char *so_path, const char *weights_path, int32_t device,
                              kiln_model_t **out);
/* One tensor-parallel rank of a model compiled with --tp N (docs/tensor-parallel.md): as
 * kiln_model_load, but the context first joins the communicator of `ranks` ranks made from
 * `id` (kiln_rt_nccl_unique_id on rank 0, shared by the caller; it blocks until every rank
 * has joined), and each sharded weight loads as this rank's block of the checkpoint
 * tensor. `ranks` must be the manifest's tp_ranks (1 for a whole model: a one-rank
 * communicator, whose all-reduce is the identity). */
kiln_status_t kiln_model_load_rank(const char *so_path, const char *weights_path,
                                   int32_t device, int32_t rank, int32_t ranks,
                                   const kiln_rt_nccl_id_t *id, kiln_model_t **out);
/* Validation only: no device, no weights. Steps run the model's forward on a dry
 * context (every call validated, nothing launched); greedy tokens come back as 0. */
kiln_status_t kiln_model_load_dry(const char *so_path, kiln_model_t **out);
void kiln_model_unload(kiln_model_t *model);

typedef struct kiln_model_info {
  int64_t vocab_size, hidden_size, num_layers;
  int64_t max_batch, max_seq_len, page_size, kv_pages;
  int64_t max_step_tokens, max_logit_rows, max_draft_len;
  uint64_t weight_bytes, cache_bytes, speculative_bytes, activation_bytes, workspace_bytes,
      io_bytes;
  int32_t dry;
} kiln_model_info_t;
kiln_status_t kiln_model_get_info(const kiln_model_t *model, kiln_model_info_t *info);
const char *kiln_model_manifest_text(const kiln_model_t *model);
/* The manifest's name line ("" if none). */
const char *kiln_model_name(const kiln_model_t *model);
/* The plan: weight + cache + activation + workspace + io bytes (each rounded to 256). */
uint64_t kiln_model_planned_bytes(const kiln_model_t *model);
/* The plan's reserve for a tensor-parallel rank's NCCL communicator (the manifest's
 * collective_bytes; 0 without collectives), beside the allocation above: loading refused
 * a communicator that took more (kiln_rt_collective_bytes is what it took). */
uint64_t kiln_model_planned_collective_bytes(const kiln_model_t *model);
/* Measured: cudaMemGetInfo's free-memory drop from just before the model's allocation
 * (context, stream, cuBLASLt handle already created) to the end of kiln_model_load.
 * CUDA loads kernel modules lazily by default, which allocates device memory at a
 * kernel's first launch: set CUDA_MODULE_LOADING=EAGER before the first CUDA call (as
 * kiln-run does) so that module memory is taken before the baseline. 0 when dry. */
uint64_t kiln_model_device_bytes_used(const kiln_model_t *model);
/* The same drop measured now (after steps have run). */
uint64_t kiln_model_device_bytes_now(const kiln_model_t *model);
/* The model's runtime context (tests, tools). */
kiln_rt_context_t *kiln_model_context(kiln_model_t *model);

/* ---- sequences --------------------------------------------------------------------- */
/* Takes a free slot; *seq_id is a new id (never reused). Error when max_batch sequences
 * are live. */
kiln_status_t kiln_model_add_sequence(kiln_model_t *model, int32_t *seq_id);
/* Frees the slot and the sequence's pages. */
kiln_status_t kiln_model_remove_sequence(kiln_model_t *model, int32_t seq_id);
/* Drops the tokens from new_len on (0 <= new_len <= length), e.g. rejected drafts; pages
 * no longer needed return to the free list. */
kiln_status_t kiln_model_truncate(kiln_model_t *model, int32_t seq_id, int32_t new_len);
/* Cached tokens of a sequence, or -1 if seq_id is not live. */
int32_t kiln_model_seq_len(const kiln_model_t *model, int32_t seq_id);
/* Pages held by a sequence (-1 if not live), and free pages / live sequences overall. */
int32_t kiln_model_seq_pages(const kiln_model_t *model, int32_t seq_id);
int32_t kiln_model_free_pages(const kiln_model_t *model);
int32_t kiln_model_live_sequences(const kiln_model_t *model);

/* ---- steps --------------------------------------------------------------------------
 * logits_host: optional (NULL) float output, row-major, vocab_size columns. */

/* Prefills n EMPTY sequences with their prompts (prompts[i]: prompt_lens[i] >= 1 ids).
 * next_tokens [n]: the greedy token after each prompt; logits_host [n, vocab]: the
 * logits of each prompt's last token. Prompts are packed into as few forward calls as
 * max_step_tokens / max_logit_rows allow; a prompt longer than max_step_tokens is
 * prefilled in chunks of max_step_tokens, the first with the PREFILL phase and the rest
 * with the EXTEND phase. */
kiln_status_t kiln_model_prefill(kiln_model_t *model, const int32_t *seq_ids, int32_t n,
                                 const int32_t *const *prompts, const int32_t *prompt_lens,
                                 int32_t *next_tokens, float *logits_host);
/* Appends q_len tokens to each of n sequences (tokens [n, q_len], row i for seq_ids[i])
 * in DECODE steps; argmax [n, q_len]: the greedy token after each appended token;
 * logits_host [n * q_len, vocab]. q_len > 1 verifies 1 + drafts in one multi-token step
 * (needs max_draft_len >= q_len - 1). Sequences are split over several steps when
 * n * q_len exceeds max_step_tokens or max_logit_rows. */
kiln_status_t kiln_model_decode(kiln_model_t *model, const int32_t *seq_ids, int32_t n,
                                const int32_t *tokens, int32_t q_len, int32_t *argmax,
                                float *logits_host);
/* Appends lens[i] >= 1 tokens to each sequence in EXTEND steps (varlen chunks continuing
 * the cached sequences, e.g. a draft model's catch-up; chunked like a prefill).
 * last_argmax [n]: the greedy token after each sequence's last token; logits_host
 * [n, vocab] of that token. */
kiln_status_t kiln_model_extend(kiln_model_t *model, const int32_t *seq_ids, int32_t n,
                                const int32_t *const *tokens, const int32_t *lens,
                                int32_t *last_argmax, float *logits_host);

/* The MTP drafts of the last prefill, decode or extend call (a model compiled with
 * --spec mtp:1, docs/mtp.md), in the layout of its greedy tokens ([n], or [n, q_len] for
 * decode): at each position, the module's greedy guess of the token after the greedy
 * token. -1 where the model hands back none. count must be that call's result count. */
kiln_status_t kiln_model_last_drafts(const kiln_model_t *model, int32_t *drafts,
                                     int32_t count);
/* Forward calls made so far, and kernel launches of the context. */
uint64_t kiln_model_steps(const kiln_model_t *model);

#ifdef __cplusplus
}
#endif
#endif /* KILN_RUNTIME_MODEL_H */
