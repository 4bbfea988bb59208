/* A hand-written stand-in for a model compiled by `kiln-compile --emit=so`: a tiny
 * Qwen2-style decoder (embedding, RMSNorm, q/k/v projections with bias, default RoPE,
 * paged GQA attention, o_proj, SwiGLU MLP, final norm, lm_head over the logit rows)
 * that exports kiln_model_manifest() and kiln_model_forward() and calls the runtime the
 * way the lowering does (docs/abi.md): straight-line kiln_rt_* calls at planned offsets,
 * no status checks (the context is sticky).
 *
 * Built by CMake in variants: TINY_LAYERS (default 2), TINY_DRAFT (max_draft_len,
 * default 4; 0 = speculation off, SINGLE_TOKEN attention), TINY_NAME, TINY_BUG.
 * Sizes: vocab 512, hidden 256, 4 heads x 64 (2 KV heads), MLP 512; max_batch 8,
 * max_seq_len 256, page 16, 48 KV pages (fewer than 8 x 16: page exhaustion is
 * testable), max_step_tokens 128 (a 200-token prompt is prefilled in two chunks),
 * max_logit_rows 40.
 * The activation arena is padded so that the plan's total is a multiple of 2 MiB
 * (cudaMalloc's granularity), so the measured device memory equals the plan. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kiln/Runtime/Layout.h"
#include "kiln/Runtime/Runtime.h"

#ifndef TINY_LAYERS
#define TINY_LAYERS 2
#endif
#ifndef TINY_DRAFT
#define TINY_DRAFT 4
#endif
#ifndef TINY_BUG /* 1: layer 1 passes a negative attention window (a failing forward) */
#define TINY_BUG 0
#endif
#ifndef TINY_NAME
#define TINY_NAME "tiny-qwen2"
#endif

#define V 512
#define H 256
#define NH 4
#define KVH 2
#define D 64
#define I 512
#define MAX_BATCH 8
#define MAX_SEQ 256
#define PAGE 16
#define KV_PAGES 48
#define MAX_STEP 128
#define MAX_ROWS 40
#define EPS 1e-6f
#define THETA 10000.0f

/* An upper bound of one step's launches, for the CUDA graphs' reserve (a decode step of
 * the two-layer model is 38 kernels, input copy and argmax included). */
#define TINY_LAUNCHES_PER_STEP (20 * TINY_LAYERS + 8)
#define A256(x) ((((uint64_t)(x)) + 255u) / 256u * 256u)

enum { W_EMBED, W_NORM, W_HEAD, W_LAYER0 };
enum { L_LN1, L_QW, L_QB, L_KW, L_KB, L_VW, L_VB, L_OW, L_LN2, L_GW, L_UW, L_DW, L_COUNT };
#define NUM_WEIGHTS (W_LAYER0 + TINY_LAYERS * L_COUNT)

static char names[NUM_WEIGHTS][80];
static int64_t dims[NUM_WEIGHTS][2]; /* rows, cols (cols 0: a vector) */
static uint64_t offsets[NUM_WEIGHTS];
static uint64_t weightBytes, cacheBytes, actBytes, workspaceBytes, ioBytes, poolBytes;
static char manifest[16384];
static int built;

/* Activation buffers (offsets in the arena). */
enum { A_X0, A_X1, A_HN, A_Q, A_K, A_V, A_QR, A_KR, A_ATT, A_O, A_G, A_U, A_ACT, A_DN, A_SEL,
       A_LOGITS, A_COUNT };
static uint64_t act[A_COUNT];

static void setWeight(int i, const char *name, int64_t rows, int64_t cols) {
  snprintf(names[i], sizeof(names[i]), "%s", name);
  dims[i][0] = rows;
  dims[i][1] = cols;
}

static uint64_t bytesOf(int i) { return (uint64_t)dims[i][0] * (dims[i][1] ? dims[i][1] : 1) * 2u; }

static void build(void) {
  if (built)
    return;
  setWeight(W_EMBED, "model.embed_tokens.weight", V, H);
  setWeight(W_NORM, "model.norm.weight", H, 0);
  setWeight(W_HEAD, "lm_head.weight", V, H);
  static const char *suffix[L_COUNT] = {
      "input_layernorm.weight",  "self_attn.q_proj.weight", "self_attn.q_proj.bias",
      "self_attn.k_proj.weight", "self_attn.k_proj.bias",   "self_attn.v_proj.weight",
      "self_attn.v_proj.bias",   "self_attn.o_proj.weight", "post_attention_layernorm.weight",
      "mlp.gate_proj.weight",    "mlp.up_proj.weight",      "mlp.down_proj.weight"};
  const int64_t shape[L_COUNT][2] = {{H, 0},       {NH * D, H}, {NH * D, 0}, {KVH * D, H},
                                     {KVH * D, 0}, {KVH * D, H}, {KVH * D, 0}, {H, NH * D},
                                     {H, 0},       {I, H},      {I, H},      {H, I}};
  for (int l = 0; l < TINY_LAYERS; ++l)
    for (int j = 0; j < L_COUNT; ++j) {
      char name[80];
      snprintf(name, sizeof(name), "model.layers.%d.%s", l, suffix[j]);
      setWeight(W_LAYER0 + l * L_COUNT + j, name, shape[j][0], shape[j][1]);
    }
  uint64_t at = 0;
  for (int i = 0; i < NUM_WEIGHTS; ++i) {
    offsets[i] = at;
    at += A256(bytesOf(i));
  }
  weightBytes = at;
  poolBytes = A256((uint64_t)KV_PAGES * 2 * PAGE * KVH * D * 2);
  cacheBytes = poolBytes * TINY_LAYERS;
  const uint64_t actSize[A_COUNT] = {
      MAX_STEP * H,      MAX_STEP * H,      MAX_STEP * H,      MAX_STEP * NH * D,
      MAX_STEP * KVH * D, MAX_STEP * KVH * D, MAX_STEP * NH * D, MAX_STEP * KVH * D,
      MAX_STEP * NH * D, MAX_STEP * H,      MAX_STEP * I,      MAX_STEP * I,
      MAX_STEP * I,      MAX_STEP * H,      MAX_ROWS * H,      MAX_ROWS * V};
  at = 0;
  for (int i = 0; i < A_COUNT; ++i) {
    act[i] = at;
    at += A256(actSize[i] * 2u);
  }
  actBytes = at;
  workspaceBytes = kiln_rt_workspace_bytes(MAX_BATCH * (1 + TINY_DRAFT), NH, D);
  ioBytes = kiln_rt_io_bytes(MAX_BATCH, MAX_STEP, MAX_ROWS,
                             kiln_rt_max_pages_per_seq(MAX_SEQ, PAGE), 0);
  actBytes += kiln_rt_granule_padding(weightBytes + cacheBytes + actBytes + workspaceBytes +
                                      ioBytes);
  int n = snprintf(manifest, sizeof(manifest),
                   "kiln-model 2\nname %s\nvocab_size %d\nhidden_size %d\nnum_layers %d\n"
                   "max_batch %d\nmax_seq_len %d\npage_size %d\nkv_pages %d\n"
                   "max_step_tokens %d\nmax_logit_rows %d\nmax_draft_len %d\n"
                   "weight_bytes %llu\ncache_bytes %llu\nspeculative_bytes 0\n"
                   "activation_bytes %llu\nworkspace_bytes %llu\nio_bytes %llu\n"
                   "cuda_graphs %d\ncuda_graph_bytes %llu\ncuda_graph_batches all\n",
                   TINY_NAME, V, H, TINY_LAYERS, MAX_BATCH, MAX_SEQ, PAGE, KV_PAGES, MAX_STEP,
                   MAX_ROWS, TINY_DRAFT, (unsigned long long)weightBytes,
                   (unsigned long long)cacheBytes, (unsigned long long)actBytes,
                   (unsigned long long)workspaceBytes, (unsigned long long)ioBytes,
                   KILN_RT_DEFAULT_MAX_GRAPHS,
                   (unsigned long long)kiln_rt_graph_reserve_bytes(KILN_RT_DEFAULT_MAX_GRAPHS,
                                                                   TINY_LAUNCHES_PER_STEP));
  for (int i = 0; i < NUM_WEIGHTS; ++i) {
    char shape[48];
    if (dims[i][1])
      snprintf(shape, sizeof(shape), "%lldx%lld", (long long)dims[i][0], (long long)dims[i][1]);
    else
      snprintf(shape, sizeof(shape), "%lld", (long long)dims[i][0]);
    n += snprintf(manifest + n, sizeof(manifest) - (size_t)n, "weight %s bf16 %s %llu %llu\n",
                  names[i], shape, (unsigned long long)offsets[i],
                  (unsigned long long)bytesOf(i));
  }
  snprintf(manifest + n, sizeof(manifest) - (size_t)n, "end\n");
  built = 1;
}

const char *kiln_model_manifest(void) {
  build();
  return manifest;
}

void kiln_model_forward(kiln_rt_context_t *ctx) {
  build();
  char *W = (char *)kiln_rt_weights(ctx);
  char *A = (char *)kiln_rt_activations(ctx);
  const void *ids = kiln_rt_input(ctx, KILN_RT_INPUT_TOKEN_IDS);
  const void *pos = kiln_rt_input(ctx, KILN_RT_INPUT_POSITIONS);
  const void *rows = kiln_rt_input(ctx, KILN_RT_INPUT_LOGIT_ROWS);
  const int64_t T = kiln_rt_input_size(ctx, KILN_RT_INPUT_TOKEN_IDS);
  const int64_t R = kiln_rt_input_size(ctx, KILN_RT_INPUT_LOGIT_ROWS);
  const int32_t spec = TINY_DRAFT > 0 ? KILN_RT_MULTI_TOKEN : KILN_RT_SINGLE_TOKEN;
  char *x = A + act[A_X0], *y = A + act[A_X1];

  kiln_rt_embedding(ctx, ids, W + offsets[W_EMBED], x, T, V, H);
  for (int l = 0; l < TINY_LAYERS; ++l) {
    const uint64_t *w = offsets + W_LAYER0 + l * L_COUNT;
    kiln_rt_rms_norm(ctx, x, W + w[L_LN1], A + act[A_HN], T, H, EPS);
    kiln_rt_linear(ctx, A + act[A_HN], W + w[L_QW], W + w[L_QB], A + act[A_Q], T, NH * D, H);
    kiln_rt_linear(ctx, A + act[A_HN], W + w[L_KW], W + w[L_KB], A + act[A_K], T, KVH * D, H);
    kiln_rt_linear(ctx, A + act[A_HN], W + w[L_VW], W + w[L_VB], A + act[A_V], T, KVH * D, H);
    kiln_rt_rope(ctx, A + act[A_Q], pos, A + act[A_QR], T, NH, D, 0, KILN_RT_ROPE_DEFAULT, THETA,
                 1.0f, 0.0f, 0.0f, 0, 1.0f);
    kiln_rt_rope(ctx, A + act[A_K], pos, A + act[A_KR], T, KVH, D, 0, KILN_RT_ROPE_DEFAULT, THETA,
                 1.0f, 0.0f, 0.0f, 0, 1.0f);
    kiln_rt_attention(ctx, l, (uint64_t)l * poolBytes, A + act[A_QR], A + act[A_KR],
                      A + act[A_V], NULL, A + act[A_ATT], T, NH, KVH, D, PAGE,
                      TINY_BUG && l == 1 ? -1 : 0,
                      KILN_RT_KERNEL_GQA_DECODE, KILN_RT_KERNEL_PREFILL_FMHA, spec, 0.0f,
                      KILN_RT_DTYPE_BF16);
    kiln_rt_linear(ctx, A + act[A_ATT], W + w[L_OW], NULL, A + act[A_O], T, H, NH * D);
    kiln_rt_add(ctx, x, A + act[A_O], y, T * H);
    kiln_rt_rms_norm(ctx, y, W + w[L_LN2], A + act[A_HN], T, H, EPS);
    kiln_rt_linear(ctx, A + act[A_HN], W + w[L_GW], NULL, A + act[A_G], T, I, H);
    kiln_rt_linear(ctx, A + act[A_HN], W + w[L_UW], NULL, A + act[A_U], T, I, H);
    kiln_rt_swiglu(ctx, A + act[A_G], A + act[A_U], A + act[A_ACT], T * I);
    kiln_rt_linear(ctx, A + act[A_ACT], W + w[L_DW], NULL, A + act[A_DN], T, H, I);
    kiln_rt_add(ctx, y, A + act[A_DN], x, T * H);
  }
  kiln_rt_rms_norm(ctx, x, W + offsets[W_NORM], A + act[A_HN], T, H, EPS);
  kiln_rt_gather_rows(ctx, A + act[A_HN], rows, A + act[A_SEL], R, H, T);
  kiln_rt_linear(ctx, A + act[A_SEL], W + offsets[W_HEAD], NULL, A + act[A_LOGITS], R, V, H);
  kiln_rt_output(ctx, KILN_RT_OUTPUT_LOGITS, A + act[A_LOGITS], R, V);
}
