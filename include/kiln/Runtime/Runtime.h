/* The Kiln runtime (C ABI): the context a compiled model runs on, the calls its
 * kiln_model_forward() makes (docs/abi.md, the contract), and what the serving layer
 * (include/kiln/Runtime/Model.h) uses to describe a step and read its results.
 *
 * A context owns the model's device memory, exactly the plan of its manifest:
 *   weights | caches | activations | workspace | io
 * (weight_bytes + cache_bytes + activation_bytes + workspace_bytes + io_bytes, one
 * cudaMalloc at creation; nothing is allocated afterwards), a stream, a cuBLASLt handle
 * and pinned host staging for the step inputs and the results. Sizes of the io buffer
 * and workspace: include/kiln/Runtime/Layout.h. Details: docs/runtime.md.
 *
 * Errors: every call returns a status (kiln_status_t values as int32_t for the calls
 * compiled code makes) and leaves a message in kiln_last_error() naming the call, the
 * layer (attention) or the op's position in the step (graph ops), and what failed.
 * The context is STICKY: after the first failure of a step, every compiled-code call
 * returns that status at once (its message restored), so a straight-line forward needs
 * no checks; read the outcome with kiln_rt_status(). kiln_rt_set_batch() starts a new
 * step and clears it. Nothing aborts, nothing throws. */
#ifndef KILN_RUNTIME_RUNTIME_H
#define KILN_RUNTIME_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#include "kiln/Kernels/Gemm.h"
#include "kiln/Kernels/Status.h"
#include "kiln/Runtime/Layout.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_rt_context kiln_rt_context_t;

/* ---- codes (generated from ABI.def; numbers are baked into compiled models) -------- */
typedef enum kiln_rt_kernel {
#define KILN_RT_KERNEL(name, value, str) KILN_RT_KERNEL_##name = value,
#include "kiln/Runtime/ABI.def"
} kiln_rt_kernel_t;

typedef enum kiln_rt_dtype {
#define KILN_RT_DTYPE(name, value, str, bytes) KILN_RT_DTYPE_##name = value,
#include "kiln/Runtime/ABI.def"
} kiln_rt_dtype_t;

typedef enum kiln_rt_input {
#define KILN_RT_INPUT(name, value, str) KILN_RT_INPUT_##name = value,
#include "kiln/Runtime/ABI.def"
} kiln_rt_input_t;

typedef enum kiln_rt_output {
#define KILN_RT_OUTPUT(name, value, str) KILN_RT_OUTPUT_##name = value,
#include "kiln/Runtime/ABI.def"
} kiln_rt_output_t;

typedef enum kiln_rt_phase {
#define KILN_RT_PHASE(name, value, str) KILN_RT_PHASE_##name = value,
#include "kiln/Runtime/ABI.def"
} kiln_rt_phase_t;

typedef enum kiln_rt_rope {
#define KILN_RT_ROPE(name, value, str) KILN_RT_ROPE_##name = value,
#include "kiln/Runtime/ABI.def"
} kiln_rt_rope_t;

typedef enum kiln_rt_activation {
#define KILN_RT_ACTIVATION(name, value, str) KILN_RT_ACTIVATION_##name = value,
#include "kiln/Runtime/ABI.def"
} kiln_rt_activation_t;

/* The kiln dialect's SpecDecMode (argument of kiln_rt_attention / kiln_rt_mla). */
typedef enum kiln_rt_spec_dec_mode {
  KILN_RT_SINGLE_TOKEN = 0,
  KILN_RT_MULTI_TOKEN = 1,
  KILN_RT_EXTEND_CONTEXT = 2
} kiln_rt_spec_dec_mode_t;

/* Names from ABI.def ("gqa_decode", "extend", ...); "unknown" for other values. */
const char *kiln_rt_kernel_name(int32_t kernel);
const char *kiln_rt_phase_name(int32_t phase);
const char *kiln_rt_input_name(int32_t input);
const char *kiln_rt_output_name(int32_t output);
const char *kiln_rt_rope_name(int32_t rope);
const char *kiln_rt_dtype_name(int32_t dtype);

/* ---- context ---------------------------------------------------------------------- */
/* The plan of a compiled model (its manifest's numbers). */
typedef struct kiln_rt_config {
  int64_t vocab_size;      /* columns of the logits (0: not checked) */
  int64_t max_batch;       /* sequences per step, and state slots */
  int64_t max_seq_len;     /* tokens per sequence */
  int64_t page_size;       /* tokens per KV page */
  int64_t kv_pages;        /* pages in every KV pool */
  int64_t max_step_tokens; /* tokens per step */
  int64_t max_logit_rows;  /* logit rows per step */
  int64_t max_draft_len;   /* DECODE q_len <= 1 + max_draft_len */
  uint64_t weight_bytes;
  uint64_t cache_bytes;
  uint64_t activation_bytes;
  uint64_t workspace_bytes; /* >= KILN_GEMM_WORKSPACE_BYTES; the rest: split-KV partials */
  uint64_t io_bytes;        /* == kiln_rt_io_bytes(max_batch, max_step_tokens,
                               max_logit_rows, ceil(max_seq_len / page_size),
                               kv_ring_window > 0) */
  int64_t kv_ring_window;   /* the sliding window whose KV pools are rings of
                               kiln_rt_ring_pages pages per slot (0: none) */
} kiln_rt_config_t;

/* Sets `device`, creates the stream and the cuBLASLt handle, pinned host staging, then
 * makes ONE device allocation of the plan (zero-filled) and measures the device memory
 * it took (kiln_rt_device_bytes_used). */
kiln_status_t kiln_rt_create(int32_t device, const kiln_rt_config_t *config,
                             kiln_rt_context_t **out);
/* A validation-only context (no device, nothing allocated on one): every call validates
 * its arguments, the batch and the memory bounds exactly as on a real context, and
 * launches nothing. Its regions have fake, non-null, disjoint base addresses, so pointers
 * computed by compiled code are checked against them (never dereferenced). */
kiln_status_t kiln_rt_create_dry(const kiln_rt_config_t *config, kiln_rt_context_t **out);
void kiln_rt_destroy(kiln_rt_context_t *ctx);
int32_t kiln_rt_is_dry(const kiln_rt_context_t *ctx);
const kiln_rt_config_t *kiln_rt_config(const kiln_rt_context_t *ctx);

/* Base addresses of the regions (fake ones on a dry context). */
void *kiln_rt_caches(kiln_rt_context_t *ctx);
void *kiln_rt_workspace(kiln_rt_context_t *ctx);
void *kiln_rt_io(kiln_rt_context_t *ctx);
/* Bytes of the one device allocation (the plan, each category rounded up to 256). */
uint64_t kiln_rt_planned_bytes(const kiln_rt_context_t *ctx);
/* cudaMemGetInfo's free-memory drop from just before the context's allocation (stream,
 * cuBLASLt handle and module loading done) until now; 0 on a dry context. */
uint64_t kiln_rt_device_bytes_used(const kiln_rt_context_t *ctx);
/* cudaStream_t of the context (NULL on a dry context). */
void *kiln_rt_stream(kiln_rt_context_t *ctx);
kiln_status_t kiln_rt_synchronize(kiln_rt_context_t *ctx);

/* ---- tensor parallelism (docs/tensor-parallel.md) ----------------------------------- */
/* NCCL is loaded at run time (dlopen), never linked: the first of $KILN_NCCL_LIBRARY,
 * then "libnccl.so.2" on the loader's path (PyTorch's nvidia-nccl wheel ships it under
 * site-packages/nvidia/nccl/lib). A build or a machine without NCCL runs every one-rank
 * model; these calls then fail with KILN_ERROR_UNSUPPORTED naming what was tried. */
typedef struct kiln_rt_nccl_id {
  char bytes[128]; /* ncclUniqueId: rank 0 makes it, every rank's caller passes it on */
} kiln_rt_nccl_id_t;
kiln_status_t kiln_rt_nccl_unique_id(kiln_rt_nccl_id_t *out);
/* Joins the context to the communicator of `ranks` ranks as `rank` (ncclCommInitRank on
 * the context's device; it blocks until every rank has joined). Once per context. The
 * communicator's own device memory is measured and kept out of
 * kiln_rt_device_bytes_used (kiln_rt_collective_bytes). A dry context records rank and
 * ranks without NCCL, so compiled tensor-parallel code validates on a CPU. */
kiln_status_t kiln_rt_set_tensor_parallel(kiln_rt_context_t *ctx, int32_t rank, int32_t ranks,
                                          const kiln_rt_nccl_id_t *id);
/* 0 and 1 until kiln_rt_set_tensor_parallel. */
int32_t kiln_rt_tp_rank(const kiln_rt_context_t *ctx);
int32_t kiln_rt_tp_ranks(const kiln_rt_context_t *ctx);
/* Device bytes the communicator took when it was created (0 without one). */
uint64_t kiln_rt_collective_bytes(const kiln_rt_context_t *ctx);
/* kiln.all_reduce: out = the sum over the ranks of x (n bf16 elements; out may be x),
 * ncclAllReduce on the context's stream (CUDA-graph capturable). Without a
 * communicator it is the identity (a one-rank model). */
int32_t kiln_rt_all_reduce(kiln_rt_context_t *ctx, const void *x, void *out, int64_t n);
/* kiln.all_gather: out [rows, ranks * cols] = the ranks' x [rows, cols] side by side
 * (rank k's at columns [k * cols, (k + 1) * cols)). ncclAllGather fills blocks [ranks,
 * rows, cols] (one contiguous block a rank), then each block is copied into its columns
 * of out, all on the context's stream. `ranks` (the compiled graph's) must be the
 * context's; without a communicator (one rank) out = x. */
int32_t kiln_rt_all_gather(kiln_rt_context_t *ctx, const void *x, void *blocks, void *out,
                           int64_t rows, int64_t cols, int64_t ranks);

/* ---- the step ---------------------------------------------------------------------- */
/* Host arrays describing one step; kiln_rt_set_batch copies them (the caller may reuse
 * them at once). Tokens are packed in batch order: sequence b's q_lens[b] tokens are
 * contiguous, and token i of sequence b has position seq_lens[b] - q_lens[b] + i.
 *   DECODE:  q_lens all equal (q_len = 1, or 1 + drafts <= 1 + max_draft_len)
 *   PREFILL: seq_lens == q_lens (prompts from position 0)
 *   EXTEND:  any q_lens <= seq_lens (chunks continuing cached sequences) */
typedef struct kiln_rt_batch {
  int32_t phase;              /* KILN_RT_PHASE_* */
  int32_t batch;              /* sequences, 1..max_batch */
  const int32_t *q_lens;      /* [batch] this step's tokens per sequence (>= 1) */
  const int32_t *seq_lens;    /* [batch] cached tokens after the step, its own included */
  const int32_t *block_table; /* [batch, max_pages_per_seq] page ids; row b = sequence b;
                                 the first ceil(seq_lens[b] / page_size) entries are used */
  const int32_t *slots;       /* [batch] state slots (distinct, < max_batch) or NULL: b */
  const int32_t *token_ids;   /* [sum q_lens] */
  const int32_t *logit_rows;  /* [num_logit_rows] token indices whose logits are wanted */
  int32_t num_logit_rows;     /* 1..max_logit_rows */
  /* [batch, 2] or NULL (all {0, 0}): for a model with recurrent (Mamba2) layers, each
   * sequence's {pending, buffer}: the first `pending` tokens (0..1 + max_draft_len) of
   * its last speculative step were accepted and are not yet in its recurrent states.
   * The step's layers commit them first: rewind layers copy the state after token
   * pending - 1 from their intermediates, replay layers fold the tokens kept in replay
   * buffer `buffer` (0 or 1) and keep a speculative step's own in the other one
   * (docs/replay.md). 0 pending in a PREFILL step. */
  const int32_t *pending;
} kiln_rt_batch_t;

/* Validates the step against the plan, clears the sticky status, writes the io arrays
 * (token ids, positions, token->sequence index, logit rows, seq_lens, cu_seqlens, slots,
 * pending, ring and block tables) into pinned staging and uploads them with one small
 * copy kernel on the context's stream (it reads the staging through its device mapping). */
kiln_status_t kiln_rt_set_batch(kiln_rt_context_t *ctx, const kiln_rt_batch_t *batch);
/* KILN_OK, or the first failure since the last kiln_rt_set_batch (kiln_last_error() is
 * set to its message again). */
kiln_status_t kiln_rt_status(kiln_rt_context_t *ctx);
void kiln_rt_clear_status(kiln_rt_context_t *ctx);
/* Tokens of the current step (0 before the first kiln_rt_set_batch). */
int64_t kiln_rt_step_tokens(const kiln_rt_context_t *ctx);

/* After a forward that called kiln_rt_output(LOGITS): greedy token of every logit row
 * (out [rows]) and the logits as float (out [rows, vocab]). Both synchronize the stream.
 * On a dry context they write zeros. */
kiln_status_t kiln_rt_read_argmax(kiln_rt_context_t *ctx, int32_t *out, int64_t rows);
/* After a forward that called kiln_rt_output(DRAFT_TOKENS) (a model compiled with
 * --spec mtp:1, docs/mtp.md): the MTP module's greedy draft at every logit row, the token
 * after the row's own prediction. Synchronizes the stream; zeros on a dry context. */
kiln_status_t kiln_rt_read_draft_tokens(kiln_rt_context_t *ctx, int32_t *out, int64_t rows);
/* 1 when the current step handed back draft tokens. */
int32_t kiln_rt_has_draft_tokens(const kiln_rt_context_t *ctx);
kiln_status_t kiln_rt_read_logits(kiln_rt_context_t *ctx, float *out, int64_t rows,
                                  int64_t cols);

/* Runs one step's forward pass: `forward` is the compiled model's entry
 * (kiln_model_forward). DECODE steps go through CUDA graphs: a step shape (batch,
 * q_len, logit rows, the split-KV key bound) runs eagerly the first time it is seen,
 * is captured the second time and replayed from then on (one graph launch instead of
 * the forward's host calls). Replay gives the same bits as eager launches: the graph
 * holds the same launches, and their per-step inputs live in the io region, copied
 * from kiln_rt_set_batch's pinned staging (a graph starts with that copy, so a replay
 * is one cudaGraphLaunch). A step whose capture fails (a call that needs per-step host
 * work) or beyond the graph limit runs eagerly. Returns the step's status, like
 * kiln_rt_status. */
typedef void (*kiln_rt_forward_fn)(kiln_rt_context_t *ctx);
kiln_status_t kiln_rt_forward(kiln_rt_context_t *ctx, kiln_rt_forward_fn forward);
/* At most max_graphs step shapes are captured (0: no graphs, every step eager);
 * default KILN_RT_DEFAULT_MAX_GRAPHS. Lowering it drops the graphs captured so far. */
#define KILN_RT_DEFAULT_MAX_GRAPHS 64
kiln_status_t kiln_rt_set_max_graphs(kiln_rt_context_t *ctx, int32_t max_graphs);
/* Which decode steps may be captured, beyond max_graphs: only batches in `batches`
 * (ascending, each in [1, max_batch]; num_batches 0: every batch), and no shape once the
 * graphs took more than max_bytes of device memory (0: no graphs; UINT64_MAX: no
 * limit). kiln_model contexts start with the manifest's cuda_graph_batches and
 * cuda_graph_bytes (the plan's reserve). Drops the graphs captured so far. */
kiln_status_t kiln_rt_set_graph_limits(kiln_rt_context_t *ctx, const int32_t *batches,
                                       int32_t num_batches, uint64_t max_bytes);
/* How GEMMs pick their cuBLASLt algorithm (include/kiln/Kernels/Gemm.h;
 * docs/runtime.md, "Batch invariance"). KILN_GEMM_ROW_INVARIANT, the default: a row's
 * bits do not depend on the other rows of the step, up to max_batch * (1 +
 * max_draft_len) rows, so a sequence decodes the same in any batch and a verify step
 * reproduces decode steps (what lossless greedy speculation needs). KILN_GEMM_HEURISTIC:
 * cuBLASLt's best algorithm per shape (faster at small batch), a row's last bits may
 * change with the batch. Refused for a model compiled with speculation (max_draft_len >
 * 0). Drops the CUDA graphs captured so far (they hold the previous algorithms). */
kiln_status_t kiln_rt_set_gemm_policy(kiln_rt_context_t *ctx, kiln_gemm_policy_t policy);
/* Which GEMM the row-invariant policy runs for the steps (include/kiln/Kernels/Gemm.h,
 * kiln_gemm_set_skinny): KILN_GEMM_SKINNY_OFF (cuBLASLt), _TENSOR_CORES (the default for
 * max_batch 1) or _CUDA_CORES (the fastest at one row, slower at a speculative model's
 * verify steps of several rows). Rows stay invariant under each. A plain and a
 * speculative model agree bit for bit only when both run the same form, which the
 * default gives them. Drops the CUDA graphs captured so far. KILN_GEMM_SKINNY in the
 * environment overrides it. */
kiln_status_t kiln_rt_set_skinny_gemm(kiln_rt_context_t *ctx, kiln_gemm_skinny_t form);
/* The form the steps run, the environment's override included (a dry context, which runs
 * no GEMM: the form asked for; OFF for a null context). */
kiln_gemm_skinny_t kiln_rt_skinny_gemm(const kiln_rt_context_t *ctx);
typedef struct kiln_rt_graph_stats {
  int32_t max_graphs;   /* step shapes that may be captured (kiln_rt_set_max_graphs) */
  int32_t graphs;       /* step shapes captured */
  uint64_t shapes_seen; /* distinct decode step shapes run while graphs were on, since
                           they were last dropped (captured, or eager: seen once, an
                           unlisted batch, over a limit) */
  uint64_t replays;     /* steps that launched a graph captured by an earlier step */
  uint64_t graph_bytes; /* device memory the instantiated graphs took (cudaMemGetInfo) */
  uint64_t graph_byte_limit; /* kiln_model: the plan's reserve (manifest cuda_graph_bytes);
                                no shape is captured beyond it; UINT64_MAX otherwise */
  uint64_t decode_steps;       /* decode steps run through kiln_rt_forward */
  double decode_host_seconds;  /* host time kiln_rt_forward spent in them (issuing the
                                  launches or the graph launch; not waiting for the GPU),
                                  first eager steps and captures included */
  double replay_host_seconds;  /* the part of it spent in the `replays` steps */
  double capture_host_seconds; /* the part spent in the `graphs` steps that captured (and
                                  then launched) a graph: instantiation, upload */
  double graph_launch_seconds; /* the part of that spent in cudaGraphLaunch */
  uint64_t decode_batches;     /* kiln_rt_set_batch calls of decode steps */
  double decode_set_batch_seconds; /* host time those took (validation, the io region's
                                      upload) */
  double replay_step_us_p50; /* host microseconds of a replayed decode step, set_batch +
                                kiln_rt_forward: median and 99th percentile over the last */
  double replay_step_us_p99; /* 4,096 replays (0 before the first) */
} kiln_rt_graph_stats_t;
kiln_status_t kiln_rt_graph_stats(const kiln_rt_context_t *ctx, kiln_rt_graph_stats_t *out);

/* Device faults. A kernel fault (an illegal address, e.g. from a corrupt block table; a
 * launch failure) is a sticky CUDA error: the step that sees it fails with KILN_ERROR_CUDA
 * naming the step, and from then on every kiln_rt_set_batch, kiln_rt_forward and result
 * read of the context fails with that message (the process's CUDA context is lost; the
 * context must be destroyed). With checked launches on, every launch is waited for, so
 * the error names the op and layer that faulted (slow: for debugging; CUDA graphs are
 * not captured meanwhile). */
kiln_status_t kiln_rt_set_check_launches(kiln_rt_context_t *ctx, int32_t on);
int32_t kiln_rt_is_faulted(const kiln_rt_context_t *ctx);

/* The activation trace, for finding where a model's numbers part from a reference's:
 * with `dir` set, every graph op and attention call of every later step waits for its
 * kernel and writes its bf16 output to dir/s<step>-o<op>.bin, and appends a line to
 * dir/trace.tsv: step, op index, function, layer (-1 for graph ops), rows, cols, file.
 * `dir` is created, and must not exist or be empty (nothing of the user's is
 * overwritten). Slow, for debugging: steps run eagerly, never from CUDA graphs.
 * NULL or "" stops tracing. test/Parity/trace_compare.py reads it. */
kiln_status_t kiln_rt_set_trace(kiln_rt_context_t *ctx, const char *dir);

/* Kernel launches issued so far (launcher calls; a split-KV decode's combine is not
 * counted separately) and host->device uploads. */
uint64_t kiln_rt_launch_count(const kiln_rt_context_t *ctx);

/* ---- what compiled code calls (docs/abi.md; sticky) ---------------------------------- */
void *kiln_rt_input(kiln_rt_context_t *ctx, int32_t which);       /* KILN_RT_INPUT_* */
int64_t kiln_rt_input_size(kiln_rt_context_t *ctx, int32_t which);  /* elements */
void *kiln_rt_weights(kiln_rt_context_t *ctx);
void *kiln_rt_activations(kiln_rt_context_t *ctx);

int32_t kiln_rt_embedding(kiln_rt_context_t *ctx, const void *ids, const void *table, void *out,
                          int64_t tokens, int64_t vocab, int64_t hidden);
/* A vocabulary-parallel rank's embedding: table holds `rows` = vocab_size / ranks rows,
 * the vocabulary's [rank * rows, (rank + 1) * rows) for the context's rank
 * (kiln_rt_tp_rank); an id outside them gives a zero row (a kiln_rt_all_reduce follows). */
int32_t kiln_rt_embedding_rank(kiln_rt_context_t *ctx, const void *ids, const void *table,
                               void *out, int64_t tokens, int64_t rows, int64_t hidden);
int32_t kiln_rt_rms_norm(kiln_rt_context_t *ctx, const void *x, const void *weight, void *out,
                         int64_t rows, int64_t dim, float eps);
/* kiln_rt_rms_norm of rows x_stride elements apart (a column slice: MLA's compressed KV). */
int32_t kiln_rt_rms_norm_strided(kiln_rt_context_t *ctx, const void *x, int64_t x_stride,
                                 const void *weight, void *out, int64_t rows, int64_t dim,
                                 float eps);
/* The residual add and the norm of its result (kiln.add_rms_norm): sum = a + b [rows, dim],
 * out = rms_norm(sum); sum may be a or b, not out. */
int32_t kiln_rt_add_rms_norm(kiln_rt_context_t *ctx, const void *a, const void *b,
                             const void *weight, void *sum, void *out, int64_t rows,
                             int64_t dim, float eps);
int32_t kiln_rt_linear(kiln_rt_context_t *ctx, const void *x, const void *w, const void *bias,
                       void *out, int64_t m, int64_t n, int64_t k);
/* kiln.linear_pair: out0 = x w0^T and out1 = x w1^T (no bias), w0 and w1 [n, k], out0 and
 * out1 [m, n], as one strided-batched GEMM where the two weights and the two outputs lie
 * at positive distances that are multiples of 8 elements (the planned layouts), else (or
 * when cuBLASLt has no algorithm for the shared input) as two GEMMs. Traced as two
 * outputs. */
int32_t kiln_rt_linear_pair(kiln_rt_context_t *ctx, const void *x, const void *w0,
                            const void *w1, void *out0, void *out1, int64_t m, int64_t n,
                            int64_t k);
/* kiln.linear_pair_swiglu: h = swiglu(x w0^T, x w1^T) (kiln_rt_linear_pair into gate and
 * up, then kiln_rt_swiglu into h), gate, up and h [m, n]: one launch where the pair would
 * run the tensor-core skinny GEMM (kiln_gemm_bf16_pair_swiglu; gate and up are then not
 * written), else the pair and the SwiGLU. The same bits either way. h may be exactly gate
 * or up, and overlaps nothing else the call reads. Traced as h. */
int32_t kiln_rt_linear_pair_swiglu(kiln_rt_context_t *ctx, const void *x, const void *w0,
                                   const void *w1, void *gate, void *up, void *h, int64_t m,
                                   int64_t n, int64_t k);
/* kiln_rt_linear with fp32 out [m, n] and no bias (a DeepSeek-style fp32 router). Its
 * output is not traced (the trace holds bf16 outputs). */
int32_t kiln_rt_linear_f32out(kiln_rt_context_t *ctx, const void *x, const void *w, void *out,
                              int64_t m, int64_t n, int64_t k);
/* One DeepSeek MLA layer of the whole graph (kiln.mla_attention; docs/runtime.md, "MLA"):
 * q [tokens, heads, nope + rope] (before RoPE), latent [tokens, kv_lora_rank]
 * (kv_a_layernorm's output), k_pe [tokens, rope] rows k_pe_stride elements apart (before
 * RoPE), positions [tokens] i32, kv_b [heads * (nope + v), kv_lora_rank] (kv_b_proj's
 * weight), scratch [tokens, kiln_rt_mla_scratch_bytes_per_token] bytes in the
 * activations, out [tokens, heads, v]; the latent pool at cache_offset. Appends the
 * latent and rope(k_pe) to the cache; decode runs the absorbed form through
 * decode_kernel (mla_decode / mla_decode_small_smem), prompts the expanded form through
 * the FMHA (prefill_kernel mla_prefill, when nope + rope == v in {64, 128}, or 192 over
 * v 128) or the
 * absorbed form a token at a time. rope_style is KILN_ROPE_STYLE_*, the rope_* values
 * kiln_rt_rope's. kv_dtype is the pool's: BF16 ([kv_pages, 64, 576] bf16) or F8E4M3FN
 * ([kv_pages, 64, KILN_MLA_FP8_TOKEN_BYTES] bytes, kiln/Kernels/Decode.h's FP8 latent
 * token: the append quantizes, mla_decode widens). */
int32_t kiln_rt_mla_attention(kiln_rt_context_t *ctx, int32_t layer, uint64_t cache_offset,
                              const void *q, const void *latent, const void *k_pe,
                              int64_t k_pe_stride, const void *positions, const void *kv_b,
                              void *scratch, void *out, int64_t tokens, int32_t num_heads,
                              int32_t kv_lora_rank, int32_t rope_dim, int32_t nope_dim,
                              int32_t v_dim, int32_t page_size, int32_t decode_kernel,
                              int32_t prefill_kernel, int32_t spec_dec_mode, float softmax_scale,
                              int32_t rope_style, int32_t rope_type, float theta, float factor,
                              float low, float high, int64_t original_max_position,
                              float attention_factor, int32_t kv_dtype);
/* kiln.rope (kiln_rope_bf16): x, out [tokens, heads, head_dim]; rotary_dim 0 or head_dim
 * rotates whole heads, else (even, < head_dim) the first rotary_dim elements of each head
 * over frequencies of rotary_dim (partial_rotary_factor) and copies the rest. */
int32_t kiln_rt_rope(kiln_rt_context_t *ctx, const void *x, const void *positions, void *out,
                     int64_t tokens, int64_t heads, int64_t head_dim, int64_t rotary_dim,
                     int32_t rope_type, float theta, float factor, float low, float high,
                     int64_t original_max_position, float attention_factor);
/* kiln.rope_pair (kiln_rope_pair_bf16): kiln_rt_rope of x0 [tokens, heads0, head_dim]
 * into out0 and of x1 [tokens, heads1, head_dim] into out1 in one launch, the same
 * positions and parameters (a layer's q and k). Each output may be its own input, not the
 * other tensor's. Traced as two outputs. */
int32_t kiln_rt_rope_pair(kiln_rt_context_t *ctx, const void *x0, const void *x1,
                          const void *positions, void *out0, void *out1, int64_t tokens,
                          int64_t heads0, int64_t heads1, int64_t head_dim, int64_t rotary_dim,
                          int32_t rope_type, float theta, float factor, float low, float high,
                          int64_t original_max_position, float attention_factor);
int32_t kiln_rt_add(kiln_rt_context_t *ctx, const void *a, const void *b, void *out, int64_t n);
int32_t kiln_rt_swiglu(kiln_rt_context_t *ctx, const void *gate, const void *up, void *out,
                       int64_t n);
/* kiln.concat: out[r] = [a[r, 0:cols_a] | b[r, 0:cols_b]] (bf16). */
int32_t kiln_rt_concat(kiln_rt_context_t *ctx, const void *a, const void *b, void *out,
                       int64_t rows, int64_t cols_a, int64_t cols_b);
/* kiln.argmax: out[r] = argmax(logits[r, 0:cols]) (torch's ties), int32 [rows, 1]. */
int32_t kiln_rt_argmax(kiln_rt_context_t *ctx, const void *logits, void *out, int64_t rows,
                       int64_t cols);
/* kiln.next_tokens: out[t] = ids[t + 1], then out[rows[r]] = picks[r] (int32; tokens of
 * the step, num_rows logit rows). */
int32_t kiln_rt_next_tokens(kiln_rt_context_t *ctx, const void *ids, const void *picks,
                            const void *rows, void *out, int64_t tokens, int64_t num_rows);
int32_t kiln_rt_gather_rows(kiln_rt_context_t *ctx, const void *x, const void *rows, void *out,
                            int64_t num_rows, int64_t dim, int64_t num_source_rows);
/* A gated shared expert (kiln_sigmoid_gate_bf16): out[r, :] = bf16(sigmoid(bf16(x[r, :] .
 * w))) * value[r, :]; x [rows, dim], w [1, dim] (weights), value and out [rows, cols]. */
int32_t kiln_rt_sigmoid_gate(kiln_rt_context_t *ctx, const void *x, const void *w,
                             const void *value, void *out, int64_t rows, int64_t dim,
                             int64_t cols);
/* A MoE layer's routed experts (kiln_moe, Kernels/Moe.h): x [tokens, hidden], the
 * router's logits [tokens, experts] (fp32 with KILN_MOE_F32_LOGITS, else bf16),
 * gate/up [experts, inter, hidden] (gate NULL: plain experts running `activation`,
 * KILN_RT_ACTIVATION_*), down [experts, hidden, inter] (weights), score_bias fp32
 * [experts] or NULL, the expert GEMMs' biases (bf16 weights, each NULL or not on its
 * own; gate_bias only with a gate) gate_bias and up_bias [experts, inter] and down_bias
 * [experts, hidden], out [tokens, hidden]; scratch [tokens, scratch_per_token] bytes in
 * the activations (kiln_moe_scratch_bytes_per_token); flags KILN_MOE_*; groups /
 * top_groups the group-limited routing (1/1: none); scale the routed scaling factor;
 * glu_alpha / glu_limit gpt-oss's clamped SwiGLU (read under KILN_MOE_CLAMPED_SWIGLU). */
int32_t kiln_rt_moe(kiln_rt_context_t *ctx, const void *x, const void *logits, const void *gate,
                    const void *up, const void *down, const void *score_bias, const void *gate_bias,
                    const void *up_bias, const void *down_bias, void *out, void *scratch,
                    int64_t tokens, int64_t hidden, int64_t inter, int64_t experts, int32_t top_k,
                    int32_t flags, int32_t groups, int32_t top_groups, float scale,
                    int32_t activation, float glu_alpha, float glu_limit,
                    int64_t scratch_per_token);
/* Mamba2's output norm (kiln.gated_rms_norm): y = x * silu(gate) in fp32, then per row and
 * group of group_size columns out = weight * bf16(y / sqrt(mean(y^2) + eps)). x, out [rows,
 * width] dense, gate [rows, width] with row stride gate_stride (elements; a column slice
 * of a projection), weight [width]. */
int32_t kiln_rt_gated_rms_norm(kiln_rt_context_t *ctx, const void *x, const void *gate,
                               const void *weight, void *out, int64_t rows, int64_t width,
                               int64_t gate_stride, int64_t group_size, float eps);
/* Qwen3-Next's output norm (kiln_rms_norm_gate_bf16, Qwen3NextRMSNormGated): the norm
 * before the gate, per row and group of group_size columns out = bf16(bf16(weight *
 * bf16(x / sqrt(mean(x^2) + eps))) * silu(gate)). Shapes as kiln_rt_gated_rms_norm's but
 * weight [group_size] (shared by the groups). */
int32_t kiln_rt_rms_norm_gate(kiln_rt_context_t *ctx, const void *x, const void *gate,
                              const void *weight, void *out, int64_t rows, int64_t width,
                              int64_t gate_stride, int64_t group_size, float eps);
/* An RMSNorm whose weight multiplies the fp32 normalized value, rounded once
 * (kiln_rms_norm_offset_bf16): out = bf16(x / sqrt(mean(x^2) + eps) * (weight_offset +
 * weight)) in fp32, weight_offset finite: 1 for Qwen3-Next's zero-centered weight, -0.0 for
 * gpt-oss's (the weight exactly). Rows: the [tokens, heads] rows of dim at x + t *
 * x_token_stride + h * x_head_stride (elements; heads 1: the head stride is unused); out
 * dense [tokens, heads, dim], weight [dim]. Rows must not overlap (x_head_stride >= dim,
 * x_token_stride >= (heads - 1) * x_head_stride + dim); out may be x only with dense rows. */
int32_t kiln_rt_rms_norm_offset(kiln_rt_context_t *ctx, const void *x, int64_t x_token_stride,
                                int64_t x_head_stride, const void *weight, void *out,
                                int64_t tokens, int64_t heads, int64_t dim, float eps,
                                float weight_offset);
/* kiln_rt_add_rms_norm with kiln_rt_rms_norm_offset's norm (of the bf16 sum). */
int32_t kiln_rt_add_rms_norm_offset(kiln_rt_context_t *ctx, const void *a, const void *b,
                                    const void *weight, void *sum, void *out, int64_t rows,
                                    int64_t dim, float eps, float weight_offset);
/* Qwen3-Next's gated attention output (kiln_sigmoid_mul_bf16): out = bf16(x *
 * bf16(sigmoid(gate))); x, out [rows, dim] (out may be x), gate rows gate_stride elements
 * apart. */
int32_t kiln_rt_sigmoid_mul(kiln_rt_context_t *ctx, const void *x, const void *gate, void *out,
                            int64_t rows, int64_t dim, int64_t gate_stride);
/* out = f(x) elementwise (KILN_RT_ACTIVATION_*), n elements, bf16; out may be x. */
int32_t kiln_rt_activation(kiln_rt_context_t *ctx, const void *x, void *out, int64_t n,
                           int32_t kind);
/* A Mamba2 layer's causal conv1d over the step's tokens (kiln.cached_causal_conv).
 * x [tokens, conv_dim] with row stride x_stride (elements), out [tokens, conv_dim] dense,
 * weight [conv_dim, width] and bias [conv_dim] (or NULL), bf16. The state [max_batch
 * slots, conv_dim, width - 1] of state_dtype is at state_offset in the caches; rewind
 * intermediates [slots, 1 + max_draft_len, conv_dim, width - 1] at intermediate_offset
 * (-1: none). DECODE with one token a sequence: conv_update in place; with 1 + drafts
 * (MULTI_TOKEN): conv_update_spec into the intermediates, committed by the sequence's next
 * DECODE or EXTEND step (its kiln_rt_batch_t.pending pair). PREFILL: the slots start from zeros; PREFILL and EXTEND run the
 * sequence's tokens in order (conv_prefill_sequential). */
int32_t kiln_rt_causal_conv(kiln_rt_context_t *ctx, int32_t layer, uint64_t state_offset,
                            int64_t intermediate_offset, const void *x, const void *weight,
                            const void *bias, void *out, int64_t tokens, int64_t conv_dim,
                            int32_t width, int64_t x_stride, int32_t silu, int32_t state_dtype,
                            int32_t decode_kernel, int32_t prefill_kernel,
                            int32_t spec_dec_mode);
/* A Mamba2 layer's selective scan (kiln.cached_ssm): x [tokens, heads, head_dim], dt
 * [tokens, heads], B and C [tokens, n_groups, state_size], each with its own row stride
 * (elements; column slices of the conv output and the in_proj output), a_log, d, dt_bias
 * [heads] f32 (d, dt_bias may be NULL), out [tokens, heads, head_dim] dense bf16. dt' =
 * softplus(dt + dt_bias) clamped to [dt_min, dt_max] where those are > 0; the decay is
 * -exp(a_log). The state [max_batch slots, heads, head_dim, state_size] of state_dtype at
 * state_offset; phases and intermediates as kiln_rt_causal_conv. Replay mode (all three
 * replay offsets >= 0, intermediate_offset -1; docs/replay.md): the packed buffers
 * replay_x [slots, 2, 1 + max_draft_len, heads, head_dim] bf16, replay_b [slots, 2,
 * 1 + max_draft_len, n_groups, state_size] bf16 and replay_dt [slots, 2, heads,
 * 1 + max_draft_len] f32; every DECODE step runs ssm_update_replay, which first folds
 * each sequence's pending tokens (the step's pairs, kiln_rt_batch_t.pending) into
 * its state; one token a sequence is committed, 1 + drafts are kept as inputs. An
 * EXTEND step folds the pending tokens before its chunk. */
int32_t kiln_rt_mamba_ssm(kiln_rt_context_t *ctx, int32_t layer, uint64_t state_offset,
                          int64_t intermediate_offset, int64_t replay_x_offset,
                          int64_t replay_b_offset, int64_t replay_dt_offset,
                          const void *x, const void *dt,
                          const void *b, const void *c, const void *a_log, const void *d,
                          const void *dt_bias, void *out, int64_t tokens, int64_t heads,
                          int64_t head_dim, int64_t state_size, int64_t n_groups,
                          int64_t x_stride, int64_t dt_stride, int64_t bc_stride,
                          float dt_min, float dt_max, int32_t state_dtype,
                          int32_t decode_kernel, int32_t prefill_kernel,
                          int32_t spec_dec_mode);
/* A Qwen3-Next Gated DeltaNet layer's recurrence (kiln.cached_gated_delta_net): q, k
 * [tokens, k_heads, k_dim], v [tokens, v_heads, v_dim], a, b [tokens, v_heads] bf16, each
 * with its own row stride (elements; column slices of the projections), a_log, dt_bias
 * [v_heads] f32, out [tokens, v_heads, v_dim] dense bf16 (16-byte aligned). First
 * gdn_prepare turns the inputs into the packed operands in scratch ([tokens,
 * kiln_rt_gdn_scratch_bytes_per_token] bytes in the activations, Layout.h): q and k
 * l2-normalized, g = -exp(a_log) softplus(a + dt_bias) and beta = sigmoid(b) in
 * transformers' bf16 roundings; the kernels then apply scale 1 / sqrt(k_dim). The state
 * [max_batch slots, v_heads, k_dim, v_dim] is f32 (state_dtype must be F32: the GDN
 * kernels keep fp32 states) at state_offset; rewind intermediates [slots, 1 +
 * max_draft_len, v_heads, k_dim, v_dim] f32 at intermediate_offset (-1: none); both
 * 16-byte aligned. k_dim and v_dim 64 or 128, v_heads a multiple of k_heads.
 * Rewind mode (or no speculation) as kiln_rt_mamba_ssm's: DECODE with one token a
 * sequence: gdn_update in place; with 1 + drafts: gdn_update_spec into the intermediates,
 * committed by the sequence's next DECODE or EXTEND step; PREFILL: the slots start from
 * zeros; PREFILL and EXTEND: gdn_chunk_prefill over the step's sequences (prompts refuse a
 * CUDA-graph capture).
 * Replay mode (docs/replay.md): replay_k_offset, replay_v_offset, replay_gb_offset all >= 0
 * and intermediate_offset -1 (else an error; all -1: not replay mode), the buffers [slots,
 * 2, 1 + max_draft_len, k_heads, k_dim] bf16, [slots, 2, 1 + max_draft_len, v_heads, v_dim]
 * bf16 and [slots, 2, v_heads, 1 + max_draft_len, 2] f32 ({g, beta}). DECODE, any q_len:
 * gdn_update_replay (decode_kernel must name it) folds each sequence's pending accepted
 * tokens (the step's pending pairs) into the state, then keeps the step's 1 + drafts tokens
 * or commits its one token in place; EXTEND: the fold alone (gdn_update_replay without
 * tokens), then gdn_chunk_prefill; PREFILL as in rewind mode. */
int32_t kiln_rt_gated_delta_net(kiln_rt_context_t *ctx, int32_t layer, uint64_t state_offset,
                                int64_t intermediate_offset, int64_t replay_k_offset,
                                int64_t replay_v_offset, int64_t replay_gb_offset, const void *q,
                                const void *k, const void *v, const void *a, const void *b,
                                const void *a_log, const void *dt_bias, void *scratch, void *out,
                                int64_t tokens, int64_t k_heads, int64_t v_heads, int64_t k_dim,
                                int64_t v_dim, int64_t q_stride, int64_t k_stride,
                                int64_t v_stride, int64_t a_stride, int64_t b_stride,
                                int32_t state_dtype, int32_t decode_kernel,
                                int32_t prefill_kernel, int32_t spec_dec_mode);
/* Phase DECODE: kv_append, then decode_kernel (gqa_decode; MULTI_TOKEN: q_len 1+drafts;
 * EXTEND_CONTEXT with q_len > 1: the paged prefill kernel). PREFILL: kv_append, then
 * prefill_kernel on the packed prompts. EXTEND: kv_append, then the paged prefill kernel.
 * q, out [tokens, num_heads, head_dim], k, v [tokens, num_kv_heads, head_dim] bf16; the
 * KV pool [kv_pages, 2, page_size, num_kv_heads, head_dim] of kv_dtype (BF16; F16: fp16,
 * values beyond +-65504 saturate; or F8E4M3FN: e4m3 with scale 1, values beyond +-448
 * saturate) at kv_offset in the caches. F16 and FP8 pools are read by gqa_decode and the
 * mma.sync paged prefill (prefill_fmha; prefill_fmha_sm90 is refused with them).
 * sinks: NULL, or [num_heads] f32 attention-sink logits (gpt-oss; scaled-score units),
 * one more term in each head's softmax denominator, in every phase. */
int32_t kiln_rt_attention(kiln_rt_context_t *ctx, int32_t layer, uint64_t kv_offset, const void *q,
                          const void *k, const void *v, const float *sinks, void *out,
                          int64_t tokens, int32_t num_heads, int32_t num_kv_heads, int32_t head_dim,
                          int32_t page_size, int32_t window, int32_t decode_kernel,
                          int32_t prefill_kernel, int32_t spec_dec_mode, float softmax_scale,
                          int32_t kv_dtype);
int32_t kiln_rt_output(kiln_rt_context_t *ctx, int32_t which, const void *data, int64_t rows,
                       int64_t cols);

/* ---- Legacy bind-based families (MLA, Mamba2 SSM, causal conv) -------------------------
 * Kept as they were until their rewrite: tensors are attached with kiln_rt_bind() and
 * the calls read the current batch (`phase` must be the batch's phase, DECODE or
 * PREFILL). They are not sticky, and their token-expanded MLA tables, MLA split-KV
 * partials and commit counts live in a scratch buffer grown on demand (the only memory
 * the runtime allocates after creation; kiln_rt_scratch_bytes). State slots: the batch's
 * slots (num_slots = max_batch); caches at their offsets in the cache region. */
kiln_status_t kiln_rt_bind(kiln_rt_context_t *ctx, int32_t layer, const char *name,
                           void *device_ptr);
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
/* Rewind-mode commit after a multi-token decode step: copies intermediate[slot,
 * accepted[b] - 1] into the main state of sequence b's slot for every layer whose last
 * decode call wrote intermediate states (host array [batch], values 0..q_len). */
kiln_status_t kiln_rt_commit_accepted(kiln_rt_context_t *ctx, const int32_t *accepted);
uint64_t kiln_rt_scratch_bytes(const kiln_rt_context_t *ctx);

/* The cache resource a call of `layer` used: kind "kv" (kiln_rt_attention), "mla_latent",
 * "ssm_state", "conv_state", "gdn_state", "intermediate_ssm_state",
 * "intermediate_conv_state", "intermediate_gdn_state"; offset in the cache region and
 * bytes. Calls whose resources overlap another layer's or leave the cache region are
 * rejected. */
kiln_status_t kiln_rt_resource(const kiln_rt_context_t *ctx, int32_t layer, const char *kind,
                               uint64_t *offset, uint64_t *bytes);

#ifdef __cplusplus
}
#endif
#endif
