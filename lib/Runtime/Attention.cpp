// kiln_rt_attention: paged GQA attention of one layer for the step's phase.
//   DECODE  kv_append of the step's K/V at the sequences' positions, then gqa_decode
//           (q_len = 1 + drafts under MULTI_TOKEN); EXTEND_CONTEXT with q_len > 1 runs
//           the paged prefill kernel instead.
//   PREFILL kv_append, then prefill_fmha on the packed prompts (positions from 0).
//   EXTEND  kv_append, then prefill_fmha_paged (chunks continuing cached sequences).
// An f8E4M3FN pool (kv_dtype) is quantized by kv_append with scale 1 (saturating), an f16
// pool rounded to fp16 (saturating at +-65504); both are read by gqa_decode and the
// mma.sync paged prefill (prefill_fmha; prefill_fmha_sm90 and prefill_fmha_sm90_d256, the
// wgmma prefill at head dims 64/128 and at 256, read bf16 pools only). A
// prompt's own attention in PREFILL reads the step's bf16 K/V, as it is computed.
// A sliding window (window > 0) is honoured by every kernel: a query sees its last
// `window` keys (Hugging Face's sliding_window convention, the query's own key included).
// Attention sinks (gpt-oss; sinks non-null, [num_heads] f32) join every kernel's softmax.
// Everything the host can check is checked before the first launch; for decode the
// launcher's own validation (its workspace query) runs before the cache is written.
#include "Context.h"

#include "kiln/Kernels/Decode.h"
#include "kiln/Kernels/Prefill.h"

#include <cmath>

using namespace kiln::rt;

namespace {

bool supportedPage(int32_t p) { return p == 16 || p == 32 || p == 64 || p == 128; }

// Whether gqa_decode combines a step's split_keys chunks itself (split_counters) or leaves
// them to its combine kernel. Both give the same bits, so the rule may use any shape; it
// uses the step's chunk count (key bound / split_keys) and the chunk size only. Measured
// on H100 (2026-12-06, bench/Decode/NOTES.md, fused vs separate TB/s): 16 chunks of 256
// or 512 keys gain from the fused combine (B=1 L=4k 1.246 vs 1.039, L=8k 1.684 vs 1.491;
// B=128 L=8k 2.673 vs 2.665), 4 chunks lose (B=1 L=1k 0.337 vs 0.345, B=16 L=1k 1.659
// vs 1.788), and so do long chunks (B=1 L=32k, 2048 keys: 1.869 vs 2.124; not profiled).
// The rule picks the faster of the two at all six measured shapes.
bool fusedSplitCombine(int64_t keyBound, int64_t splitKeys) {
  const int64_t chunks = (keyBound + splitKeys - 1) / splitKeys;
  return chunks >= 8 && splitKeys <= 512;
}

kiln_status_t attention(const Call &c, kiln_rt_context *ctx, int32_t layer, uint64_t kv_offset,
                        const void *q, const void *k, const void *v, const float *sinks, void *out,
                        int64_t tokens, int32_t num_heads, int32_t num_kv_heads, int32_t head_dim,
                        int32_t page_size, int32_t window, int32_t decode_kernel,
                        int32_t prefill_kernel, int32_t spec_dec_mode, float softmax_scale,
                        int32_t kv_dtype, bool paged) {
  const kiln_rt_config_t &cfg = ctx->config;
  if (layer < 0)
    return c.error(KILN_ERROR_INVALID_ARGUMENT, "negative layer index");
  if (!ctx->hasBatch)
    return c.error(KILN_ERROR_INVALID_ARGUMENT, "no step set (call kiln_rt_set_batch first)");
  const int32_t phase = ctx->phase;
  if (spec_dec_mode < KILN_RT_SINGLE_TOKEN || spec_dec_mode > KILN_RT_EXTEND_CONTEXT)
    return c.error(KILN_ERROR_INVALID_ARGUMENT, "spec_dec_mode %d unknown", spec_dec_mode);
  const bool decode = phase == KILN_RT_PHASE_DECODE && !paged;
  if (decode && decode_kernel != KILN_RT_KERNEL_GQA_DECODE)
    return c.error(KILN_ERROR_INVALID_ARGUMENT,
                   "decode_kernel %d (%s) cannot run attention in decode (gqa_decode)",
                   decode_kernel, kiln_rt_kernel_name(decode_kernel));
  // The wgmma prefill (variant SM90 of the launchers) under either of its registry names.
  const bool wgmma = prefill_kernel == KILN_RT_KERNEL_PREFILL_FMHA_SM90 ||
                     prefill_kernel == KILN_RT_KERNEL_PREFILL_FMHA_SM90_D256;
  if (!decode && prefill_kernel != KILN_RT_KERNEL_PREFILL_FMHA && !wgmma)
    return c.error(KILN_ERROR_INVALID_ARGUMENT,
                   "prefill_kernel %d (%s) cannot run attention in %s (prefill_fmha, "
                   "prefill_fmha_sm90 or prefill_fmha_sm90_d256)",
                   prefill_kernel, kiln_rt_kernel_name(prefill_kernel), kiln_rt_phase_name(phase));
  if (window < 0)
    return c.error(KILN_ERROR_INVALID_ARGUMENT, "window %d < 0", window);
  if (kv_dtype != KILN_RT_DTYPE_BF16 && kv_dtype != KILN_RT_DTYPE_F16 &&
      kv_dtype != KILN_RT_DTYPE_F8E4M3FN)
    return c.error(KILN_ERROR_UNSUPPORTED, "kv_dtype %d (%s) unsupported (bf16, f16 or f8E4M3FN)",
                   kv_dtype, kiln_rt_dtype_name(kv_dtype));
  const bool fp8 = kv_dtype == KILN_RT_DTYPE_F8E4M3FN;
  const kiln_dtype_t poolDtype = fp8                             ? KILN_DTYPE_FP8_E4M3
                                 : kv_dtype == KILN_RT_DTYPE_F16 ? KILN_DTYPE_F16
                                                                 : KILN_DTYPE_BF16;
  // The wgmma prefill reads a pool of the activations' dtype (bf16) only; the phase's
  // kernel is one for PREFILL and EXTEND alike, so any other pool needs prefill_fmha.
  if (kv_dtype != KILN_RT_DTYPE_BF16 && !decode && wgmma)
    return c.error(KILN_ERROR_UNSUPPORTED,
                   "%s reads bf16 caches only (the activations' dtype); an %s pool needs "
                   "prefill_fmha",
                   kiln_rt_kernel_name(prefill_kernel), kiln_rt_dtype_name(kv_dtype));
  if (num_heads < 1 || num_kv_heads < 1 || num_heads % num_kv_heads != 0)
    return c.error(KILN_ERROR_INVALID_ARGUMENT,
                   "num_heads %d must be a positive multiple of num_kv_heads %d", num_heads,
                   num_kv_heads);
  if (decode && num_heads / num_kv_heads > 16)
    return c.error(KILN_ERROR_UNSUPPORTED,
                   "gqa_decode supports 1..16 query heads per KV head (got %d)",
                   num_heads / num_kv_heads);
  if (head_dim != 64 && head_dim != 128 && head_dim != 256)
    return c.error(KILN_ERROR_UNSUPPORTED, "head_dim %d unsupported (64, 128, 256)", head_dim);
  // The registry lists the wgmma prefill as two variants, head dims 64/128 and 256
  // (Qwen3-Next), each with its own tiles; a kernel id names the head dims it was
  // selected for, so the other one's are refused.
  const char *phaseName =
      paged && phase == KILN_RT_PHASE_DECODE ? "EXTEND_CONTEXT" : kiln_rt_phase_name(phase);
  if (!decode && head_dim == 256 && prefill_kernel == KILN_RT_KERNEL_PREFILL_FMHA_SM90)
    return c.error(KILN_ERROR_UNSUPPORTED,
                   "prefill_fmha_sm90 supports head_dim 64/128 in %s (got 256; "
                   "prefill_fmha_sm90_d256 and prefill_fmha run 256)",
                   phaseName);
  if (!decode && head_dim != 256 && prefill_kernel == KILN_RT_KERNEL_PREFILL_FMHA_SM90_D256)
    return c.error(KILN_ERROR_UNSUPPORTED,
                   "prefill_fmha_sm90_d256 supports head_dim 256 in %s (got %d; "
                   "prefill_fmha_sm90 runs 64/128)",
                   phaseName, head_dim);
  if (!supportedPage(page_size))
    return c.error(KILN_ERROR_UNSUPPORTED, "page_size %d unsupported (16, 32, 64, 128)",
                   page_size);
  if (page_size != cfg.page_size)
    return c.error(KILN_ERROR_INVALID_ARGUMENT,
                   "page_size %d != the model's page_size %lld (one block table for all layers)",
                   page_size, static_cast<long long>(cfg.page_size));
  if (tokens != ctx->tokens)
    return c.error(KILN_ERROR_INVALID_ARGUMENT, "tokens %lld != the step's %d tokens",
                   static_cast<long long>(tokens), ctx->tokens);
  if (phase == KILN_RT_PHASE_DECODE) {
    if (spec_dec_mode == KILN_RT_SINGLE_TOKEN && ctx->qLen != 1)
      return c.error(KILN_ERROR_INVALID_ARGUMENT,
                     "q_len %d > 1 but spec_dec_mode is SINGLE_TOKEN (speculation off)",
                     ctx->qLen);
    if (decode && ctx->qLen > 8)
      return c.error(KILN_ERROR_UNSUPPORTED, "q_len %d > 8 unsupported by gqa_decode",
                     ctx->qLen);
  }
  if (!(softmax_scale >= 0) || std::isinf(softmax_scale))
    return c.error(KILN_ERROR_INVALID_ARGUMENT,
                   "softmax_scale %g must be finite and >= 0 (0 = 1/sqrt(head_dim))",
                   softmax_scale);
  // A layer whose window is the model's ring window keeps its KV in the ring pools:
  // ringPages pages a slot, addressed through the ring table (Layout.h).
  const bool ring = window > 0 && window == cfg.kv_ring_window && ctx->ringPages > 0;
  const int64_t poolPages = ring ? cfg.max_batch * ctx->ringPages : cfg.kv_pages;
  uint64_t qBytes, kvBytes, poolBytes;
  if (!product(&qBytes, {tokens, num_heads, head_dim, 2}) ||
      !product(&kvBytes, {tokens, num_kv_heads, head_dim, 2}) ||
      !product(&poolBytes, {poolPages, 2, page_size, num_kv_heads, head_dim, fp8 ? 1 : 2}))
    return c.error(KILN_ERROR_INVALID_ARGUMENT, "sizes overflow");
  if (kiln_status_t s = checkRange(c, ctx, "q", q, qBytes, 16, false); s != KILN_OK)
    return s;
  if (kiln_status_t s = checkRange(c, ctx, "k", k, kvBytes, 16, false); s != KILN_OK)
    return s;
  if (kiln_status_t s = checkRange(c, ctx, "v", v, kvBytes, 16, false); s != KILN_OK)
    return s;
  if (kiln_status_t s = checkRange(c, ctx, "out", out, qBytes, 16, true); s != KILN_OK)
    return s;
  if (sinks)
    if (kiln_status_t s =
            checkRange(c, ctx, "sinks", sinks, 4 * static_cast<uint64_t>(num_heads), 4, false);
        s != KILN_OK)
      return s;
  if (kiln_status_t s = useResource(c, ctx, "kv", kv_offset, poolBytes); s != KILN_OK)
    return s;
  if (ctx->dry)
    return KILN_OK;
  if (kiln_status_t s = selectDevice(c, ctx); s != KILN_OK)
    return s;

  const float scale = softmax_scale > 0
                          ? softmax_scale
                          : static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
  void *pool = at(ctx->base[kCaches], kv_offset);
  const int32_t *table = ioPtr<int32_t>(ctx, ring ? ctx->io.ring_table : ctx->io.block_table);
  const int32_t *seqLens = ioPtr<int32_t>(ctx, ctx->io.seq_lens);
  const int32_t *cu = ioPtr<int32_t>(ctx, ctx->io.cu_seqlens);
  const int32_t P = ctx->maxPagesPerSeq;

  kiln_gqa_decode_params_t gp{};
  if (decode) {
    gp.q = q;
    gp.kv_cache = pool;
    gp.block_table = table;
    gp.seq_lens = seqLens;
    gp.out = out;
    gp.workspace = ctx->splitBytes ? ctx->base[kWorkspace] + ctx->splitOffset : nullptr;
    gp.workspace_bytes = ctx->splitBytes;
    gp.batch = ctx->batch;
    gp.q_len = ctx->qLen;
    gp.q_heads = num_heads;
    gp.kv_heads = num_kv_heads;
    gp.head_dim = head_dim;
    gp.page_size = page_size;
    gp.num_pages = static_cast<int>(poolPages);
    gp.max_pages_per_seq = P;
    gp.max_seq_len = ctx->keyBound; // the split grid, and so a CUDA graph's key
    gp.softmax_scale = scale;
    gp.dtype = KILN_DTYPE_BF16;
    gp.num_splits = 0;
    // Fixed key chunks (Layout.h): a query's bits do not depend on the step's batch or
    // q_len, so a verify step reproduces plain decode exactly.
    gp.split_keys = static_cast<int>(kiln_rt_decode_split_keys(cfg.max_seq_len));
    // The fused combine where it measured faster (fusedSplitCombine; same bits as the
    // combine kernel). Its counters sit where no partial goes, so a launch of any shape
    // finds them at 0: the last block of a group resets its counter. Only a kernel cut
    // short leaves one non-zero, and that is a device fault, which retires the context
    // (Faults.cpp) with the process's CUDA context; a failed launch runs no block; a
    // graph capture runs nothing.
    if (ctx->counterBytes && fusedSplitCombine(ctx->keyBound, gp.split_keys)) {
      gp.split_counters = ctx->base[kWorkspace] + ctx->counterOffset;
      gp.split_counter_bytes = ctx->counterBytes;
    }
    gp.window = window;
    gp.sinks = sinks;
    gp.kv_dtype = poolDtype;
    gp.stream = ctx->stream;
    size_t wsBytes = 0; // validates the decode launch before the cache is written
    if (kiln_status_t s = kiln_gqa_decode_workspace_bytes(&gp, &wsBytes); s != KILN_OK)
      return c.launcher(s, "kiln_gqa_decode_workspace_bytes");
  }

  kiln_kv_append_params_t ap{};
  ap.k = k;
  ap.v = v;
  ap.kv_cache = pool;
  ap.block_table = table;
  ap.token_batch = ioPtr<int32_t>(ctx, ctx->io.token_batch);
  ap.token_pos = ioPtr<int32_t>(ctx, ctx->io.positions);
  ap.num_tokens = ctx->tokens;
  ap.batch = ctx->batch;
  ap.kv_heads = num_kv_heads;
  ap.head_dim = head_dim;
  ap.page_size = page_size;
  ap.num_pages = static_cast<int>(poolPages);
  ap.max_pages_per_seq = P;
  ap.dtype = KILN_DTYPE_BF16;
  ap.kv_dtype = poolDtype;
  ap.stream = ctx->stream;
  kiln_status_t s = kiln_kv_append(&ap);
  ++ctx->launches;
  if (s != KILN_OK)
    return c.launcher(s, "kiln_kv_append");

  if (decode) {
    s = kiln_gqa_decode(&gp);
    ++ctx->launches;
    return s == KILN_OK ? KILN_OK : c.launcher(s, "kiln_gqa_decode");
  }
  const kiln_prefill_variant_t variant =
      wgmma ? KILN_PREFILL_VARIANT_SM90 : KILN_PREFILL_VARIANT_AUTO;
  if (phase == KILN_RT_PHASE_PREFILL) {
    kiln_prefill_fmha_params_t fp{};
    fp.q = q;
    fp.k = k;
    fp.v = v;
    fp.out = out;
    fp.cu_seqlens_q = cu;
    fp.cu_seqlens_k = cu;
    fp.batch = ctx->batch;
    fp.total_q = ctx->tokens;
    fp.total_k = ctx->tokens;
    fp.max_seqlen_q = ctx->maxQLen;
    fp.q_heads = num_heads;
    fp.kv_heads = num_kv_heads;
    fp.head_dim = head_dim;
    fp.dtype = KILN_DTYPE_BF16;
    fp.softmax_scale = scale;
    fp.causal = 1;
    fp.window = window;
    fp.sinks = sinks;
    fp.stream = ctx->stream;
    s = kiln_prefill_fmha_variant(&fp, variant);
    ++ctx->launches;
    return s == KILN_OK ? KILN_OK : c.launcher(s, "kiln_prefill_fmha");
  }
  // EXTEND phase, or a decode step's EXTEND_CONTEXT: causal over the paged cache.
  kiln_prefill_fmha_paged_params_t pp{};
  pp.q = q;
  pp.kv_cache = pool;
  pp.out = out;
  pp.cu_seqlens_q = cu;
  pp.seq_lens = seqLens;
  pp.block_table = table;
  pp.batch = ctx->batch;
  pp.total_q = ctx->tokens;
  pp.max_seqlen_q = ctx->maxQLen;
  pp.num_pages = static_cast<int32_t>(poolPages);
  pp.page_size = page_size;
  pp.max_pages_per_seq = P;
  pp.q_heads = num_heads;
  pp.kv_heads = num_kv_heads;
  pp.head_dim = head_dim;
  pp.dtype = KILN_DTYPE_BF16;
  pp.kv_dtype = poolDtype;
  pp.softmax_scale = scale;
  pp.causal = 1;
  pp.window = window;
  pp.sinks = sinks;
  pp.stream = ctx->stream;
  s = kiln_prefill_fmha_paged_variant(&pp, variant);
  ++ctx->launches;
  return s == KILN_OK ? KILN_OK : c.launcher(s, "kiln_prefill_fmha_paged");
}

} // namespace

extern "C" int32_t kiln_rt_attention(kiln_rt_context_t *ctx, int32_t layer, uint64_t kv_offset,
                                     const void *q, const void *k, const void *v,
                                     const float *sinks, void *out, int64_t tokens,
                                     int32_t num_heads, int32_t num_kv_heads, int32_t head_dim,
                                     int32_t page_size, int32_t window, int32_t decode_kernel,
                                     int32_t prefill_kernel, int32_t spec_dec_mode,
                                     float softmax_scale, int32_t kv_dtype) {
  if (!ctx)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_rt_attention: layer %d: context is null",
                layer);
  if (ctx->status != KILN_OK)
    return replay(ctx);
  ++ctx->opIndex;
  // The kernel that runs names the call: the decode kernel, or the (paged) prefill one.
  bool paged = ctx->hasBatch && ctx->phase == KILN_RT_PHASE_DECODE &&
               spec_dec_mode == KILN_RT_EXTEND_CONTEXT && ctx->qLen > 1;
  const char *kernel = "prefill_fmha_paged";
  if (ctx->hasBatch && ctx->phase == KILN_RT_PHASE_DECODE && !paged)
    kernel = kiln_rt_kernel_name(decode_kernel);
  else if (ctx->hasBatch && ctx->phase == KILN_RT_PHASE_PREFILL)
    kernel = kiln_rt_kernel_name(prefill_kernel);
  Call c{"kiln_rt_attention", kernel, layer, ctx};
  kiln_status_t s = attention(c, ctx, layer, kv_offset, q, k, v, sinks, out, tokens, num_heads,
                              num_kv_heads, head_dim, page_size, window, decode_kernel,
                              prefill_kernel, spec_dec_mode, softmax_scale, kv_dtype, paged);
  if (s == KILN_OK)
    s = checkLaunch(c, ctx);
  if (s == KILN_OK)
    s = traceOutput(c, ctx, out, tokens, static_cast<int64_t>(num_heads) * head_dim);
  if (s == KILN_OK)
    ctx->lastAttention = layer;
  return record(ctx, s);
}
