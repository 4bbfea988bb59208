// kiln_rt_mla_attention: one DeepSeek MLA layer of the whole graph (kiln.mla_attention),
// from its projections to the per-head values that o_proj reads.
//
//   every phase  rope(k_pe) -> scratch; the latent and rope(k_pe) appended to the cache
//   absorbed     q_abs = [W_UK^T q_nope | rope(q_pe)]   (a strided per-head GEMM + rope)
//                o_lat = mla_decode(q_abs, cache)        (decode: the step's q_len;
//                                                          prompts: a token at a time)
//                out   = W_UV o_lat                      (a strided per-head GEMM)
//   expanded     kv = latent kv_b^T, q = [q_nope | rope(q_pe)], k = [k_nope | rope(k_pe)]
//   (mla_prefill, prefill_fmha over the prompts' own keys; PREFILL with
//    PREFILL phase) qk_nope + qk_rope == v_head_dim in {64, 128}, or DeepSeek's
//                  192 (128 + 64) over v_head_dim 128
//
// An f8E4M3FN pool (kv_dtype) holds KILN_MLA_FP8_TOKEN_BYTES a token (kiln/Kernels/Decode.h:
// 512 e4m3 latent values, a power-of-two scale per 128 of them, the rope key in bf16):
// the append quantizes, every read of the cache (decode, verify, prompts a token at a
// time) widens it in mla_decode; the expanded prompt path reads the prompt's own bf16
// latents, not the cache.
//
// Decode keeps a token's bits independent of the step (lossless speculation): the GEMMs
// run under the context's row-invariant policy and mla_decode runs one split a query.
#include "Context.h"
#include "GraphOpCommon.h"

#include "kiln/Kernels/Decode.h"
#include "kiln/Kernels/Gemm.h"
#include "kiln/Kernels/Graph.h"
#include "kiln/Kernels/Prefill.h"
#include "kiln/Runtime/Layout.h"

#include <cmath>

using namespace kiln::rt;

namespace {

/// The layer's sizes and rope as the lowering passes them.
struct MlaLayer {
  int64_t tokens;
  int32_t heads, rank, rope, nope, v;
  float softmaxScale;
  int32_t ropeStyle;
  kiln_rope_params_t ropeParams;
  kiln_dtype_t poolDtype; // KILN_DTYPE_BF16 or KILN_DTYPE_FP8_E4M3
  int64_t qRow() const { return static_cast<int64_t>(heads) * (nope + rope); }
  int64_t kvRow() const { return static_cast<int64_t>(heads) * (nope + v); }
  int64_t absRow() const { return static_cast<int64_t>(heads) * (rank + rope); }
};

/// Whether a verify step of q_len queries a sequence would run mla_decode's other tile
/// configuration than the single-token step of the same token (<= 16 heads): it then
/// runs a token at a time, so verify and decode give the same bits (lossless).
bool verifyChangesTiling(int32_t heads, int32_t qLen) {
  return heads <= KILN_MLA_SMALL_TILE_ROWS &&
         static_cast<int64_t>(heads) * qLen > KILN_MLA_SMALL_TILE_ROWS;
}

/// Whether a prompt runs expanded through the FMHA (its head dims fit prefill_fmha:
/// equal q/k and v dims of 64 or 128, or DeepSeek's 192 over 128).
bool expandedPrompt(const kiln_rt_context *ctx, const MlaLayer &l, int32_t prefillKernel) {
  const int32_t qk = l.nope + l.rope;
  const bool fits = (qk == l.v && (qk == 64 || qk == 128)) || (qk == 192 && l.v == 128);
  return ctx->phase == KILN_RT_PHASE_PREFILL && prefillKernel == KILN_RT_KERNEL_MLA_PREFILL &&
         fits;
}

kiln_status_t checkMlaShape(const Call &c, const kiln_rt_context *ctx, const MlaLayer &l,
                            int32_t pageSize, int32_t decodeKernel, int32_t prefillKernel,
                            int32_t specDecMode) {
  if (kiln_status_t s = positive(c, {{"tokens", l.tokens}}); s != KILN_OK)
    return s;
  if (l.rank != KILN_MLA_KV_LORA_RANK || l.rope != KILN_MLA_ROPE_DIM)
    return c.error(KILN_ERROR_UNSUPPORTED,
                   "kv_lora_rank %d / qk_rope_head_dim %d unsupported (the MLA kernels take "
                   "512 / 64)",
                   l.rank, l.rope);
  if (l.heads < 1 || l.heads > 128)
    return c.error(KILN_ERROR_UNSUPPORTED, "num_heads %d unsupported (1..128)", l.heads);
  if (l.nope < 8 || l.nope % 8 || l.v < 8 || l.v % 8)
    return c.error(KILN_ERROR_INVALID_ARGUMENT,
                   "qk_nope_head_dim %d / v_head_dim %d must be positive multiples of 8", l.nope,
                   l.v);
  if (pageSize != KILN_MLA_PAGE_SIZE || pageSize != ctx->config.page_size)
    return c.error(KILN_ERROR_UNSUPPORTED,
                   "page_size %d unsupported (MLA pages hold 64 tokens; the model's is %lld)",
                   pageSize, static_cast<long long>(ctx->config.page_size));
  if (l.tokens > KILN_MLA_MAX_PER_TOKEN_QUERIES)
    return c.error(KILN_ERROR_UNSUPPORTED,
                   "%lld tokens in one step; MLA runs at most %d (compile with a smaller "
                   "--max-step-tokens)",
                   static_cast<long long>(l.tokens), KILN_MLA_MAX_PER_TOKEN_QUERIES);
  if (l.tokens != ctx->tokens)
    return c.error(KILN_ERROR_INVALID_ARGUMENT, "tokens %lld != the step's %d tokens",
                   static_cast<long long>(l.tokens), ctx->tokens);
  if (!(l.softmaxScale > 0) || std::isinf(l.softmaxScale))
    return c.error(KILN_ERROR_INVALID_ARGUMENT, "softmax_scale %g must be finite and > 0",
                   l.softmaxScale);
  if (l.ropeStyle < KILN_ROPE_STYLE_ROTATE_HALF || l.ropeStyle > KILN_ROPE_STYLE_COMPLEX_PAIRS)
    return c.error(KILN_ERROR_INVALID_ARGUMENT, "rope_style %d unknown", l.ropeStyle);
  if (specDecMode < KILN_RT_SINGLE_TOKEN || specDecMode > KILN_RT_EXTEND_CONTEXT)
    return c.error(KILN_ERROR_INVALID_ARGUMENT, "spec_dec_mode %d unknown", specDecMode);
  if (ctx->phase == KILN_RT_PHASE_DECODE) {
    if (decodeKernel != KILN_RT_KERNEL_MLA_DECODE &&
        decodeKernel != KILN_RT_KERNEL_MLA_DECODE_SMALL_SMEM)
      return c.error(KILN_ERROR_INVALID_ARGUMENT,
                     "decode_kernel %d (%s) cannot run MLA decode (mla_decode or "
                     "mla_decode_small_smem)",
                     decodeKernel, kiln_rt_kernel_name(decodeKernel));
    if (ctx->qLen > 1 && specDecMode == KILN_RT_SINGLE_TOKEN)
      return c.error(KILN_ERROR_INVALID_ARGUMENT,
                     "q_len %d > 1 but spec_dec_mode is SINGLE_TOKEN (speculation off)",
                     ctx->qLen);
    if (ctx->qLen > 4 && specDecMode == KILN_RT_MULTI_TOKEN)
      return c.error(KILN_ERROR_UNSUPPORTED, "mla_decode verifies q_len 1..4 (got %d)",
                     ctx->qLen);
  } else if (prefillKernel != KILN_RT_KERNEL_MLA_PREFILL &&
             prefillKernel != KILN_RT_KERNEL_MLA_PREFILL_DECODE) {
    return c.error(KILN_ERROR_INVALID_ARGUMENT,
                   "prefill_kernel %d (%s) cannot run MLA in %s (mla_prefill or "
                   "mla_prefill_decode)",
                   prefillKernel, kiln_rt_kernel_name(prefillKernel),
                   kiln_rt_phase_name(ctx->phase));
  }
  return KILN_OK;
}

/// rope of `heads` rows of `dim` at x (strides in elements) into out, after copying the
/// `pass` elements before them.
kiln_status_t ropeRows(const Call &c, kiln_rt_context *ctx, const MlaLayer &l, const void *x,
                       int64_t xToken, int64_t xHead, void *out, int64_t outToken,
                       int64_t outHead, int64_t heads, int64_t pass, const void *positions) {
  kiln_rope_rows_t r{};
  r.x = x;
  r.x_token_stride = xToken;
  r.x_head_stride = xHead;
  r.out = out;
  r.out_token_stride = outToken;
  r.out_head_stride = outHead;
  r.positions = static_cast<const int32_t *>(positions);
  r.tokens = l.tokens;
  r.heads = heads;
  r.head_dim = l.rope;
  r.pass = pass;
  r.style = l.ropeStyle;
  r.rope = l.ropeParams;
  r.stream = ctx->stream;
  ++ctx->launches;
  kiln_status_t s = kiln_rope_rows_bf16(&r);
  return s == KILN_OK ? KILN_OK : c.launcher(s, "kiln_rope_rows_bf16");
}

/// One per-head GEMM of the absorbed form (kiln_gemm_bf16_strided_batched).
kiln_status_t headGemm(const Call &c, kiln_rt_context *ctx, const kiln_gemm_strided_batch_t &g) {
  ++ctx->launches;
  kiln_status_t s = kiln_gemm_bf16_strided_batched(ctx->gemm, &g, ctx->base[kWorkspace],
                                                   KILN_GEMM_WORKSPACE_BYTES, ctx->stream);
  return s == KILN_OK ? KILN_OK : c.launcher(s, "kiln_gemm_bf16_strided_batched");
}

/// The absorbed form: q_abs, the latent attention, then W_UV.
kiln_status_t absorbed(const Call &c, kiln_rt_context *ctx, const MlaLayer &l, const void *q,
                       const void *positions, const void *kvB, char *scratch, void *pool,
                       void *out, int32_t decodeKernel, int32_t specDecMode) {
  char *qAbs = scratch;
  char *oLat = qAbs + l.tokens * l.absRow() * 2;
  const int64_t qHead = l.nope + l.rope, absHead = l.rank + l.rope;
  // rope(q_pe) into the last rope columns of each q_abs head.
  if (kiln_status_t s = ropeRows(c, ctx, l, static_cast<const char *>(q) + l.nope * 2,
                                 l.qRow(), qHead, qAbs + l.rank * 2, l.absRow(), absHead,
                                 l.heads, 0, positions);
      s != KILN_OK)
    return s;
  // q_abs[:, h, 0:rank] = q_nope[:, h] @ W_UK[h], W_UK[h] = kv_b rows of head h's keys
  // ([nope, rank], used as stored).
  kiln_gemm_strided_batch_t absorb{};
  absorb.x = q;
  absorb.ldx = l.qRow();
  absorb.x_batch_stride = qHead;
  absorb.w = kvB;
  absorb.ldw = l.rank;
  absorb.w_batch_stride = static_cast<int64_t>(l.nope + l.v) * l.rank;
  absorb.w_kn = 1;
  absorb.out = qAbs;
  absorb.ldo = l.absRow();
  absorb.out_batch_stride = absHead;
  absorb.batch = l.heads;
  absorb.m = l.tokens;
  absorb.n = l.rank;
  absorb.k = l.nope;
  if (kiln_status_t s = headGemm(c, ctx, absorb); s != KILN_OK)
    return s;

  const kiln_rt_config_t &cfg = ctx->config;
  kiln_mla_decode_params_t dp{};
  dp.q = qAbs;
  dp.latent_cache = pool;
  dp.block_table = ioPtr<int32_t>(ctx, ctx->io.block_table);
  dp.out = oLat;
  dp.num_heads = l.heads;
  dp.num_pages = static_cast<int>(cfg.kv_pages);
  dp.max_pages_per_seq = ctx->maxPagesPerSeq;
  dp.max_seq_len = ctx->maxPagesPerSeq * KILN_MLA_PAGE_SIZE;
  dp.softmax_scale = l.softmaxScale;
  dp.dtype = KILN_DTYPE_BF16;
  dp.kv_dtype = l.poolDtype;
  dp.num_splits = 1; // a query's bits must not depend on the step's batch
  dp.stream = ctx->stream;
  const bool perToken = ctx->phase != KILN_RT_PHASE_DECODE ||
                        (ctx->qLen > 1 && (specDecMode == KILN_RT_EXTEND_CONTEXT ||
                                           verifyChangesTiling(l.heads, ctx->qLen)));
  bool small = decodeKernel == KILN_RT_KERNEL_MLA_DECODE_SMALL_SMEM;
  if (perToken) {
    // Prompts and extend-context drafts: every token a query of its own sequence's
    // prefix (the keys were appended above).
    dp.batch = static_cast<int>(l.tokens);
    dp.q_len = 1;
    dp.token_rows = ioPtr<int32_t>(ctx, ctx->io.token_batch);
    dp.token_pos = ioPtr<int32_t>(ctx, ctx->io.positions);
    small = ctx->phase != KILN_RT_PHASE_DECODE ? ctx->smemOptin < 231936 : small;
  } else {
    dp.batch = ctx->batch;
    dp.q_len = ctx->qLen;
    dp.seq_lens = ioPtr<int32_t>(ctx, ctx->io.seq_lens);
  }
  ++ctx->launches;
  kiln_status_t s = small ? kiln_mla_decode_small_smem(&dp) : kiln_mla_decode(&dp);
  if (s != KILN_OK)
    return c.launcher(s, small ? "kiln_mla_decode_small_smem" : "kiln_mla_decode");

  // out[:, h] = o_lat[:, h] @ W_UV[h]^T, W_UV[h] = kv_b rows of head h's values
  // ([v, rank], nn.Linear's layout).
  kiln_gemm_strided_batch_t values{};
  values.x = oLat;
  values.ldx = static_cast<int64_t>(l.heads) * l.rank;
  values.x_batch_stride = l.rank;
  values.w = static_cast<const char *>(kvB) + static_cast<int64_t>(l.nope) * l.rank * 2;
  values.ldw = l.rank;
  values.w_batch_stride = static_cast<int64_t>(l.nope + l.v) * l.rank;
  values.w_kn = 0;
  values.out = out;
  values.ldo = static_cast<int64_t>(l.heads) * l.v;
  values.out_batch_stride = l.v;
  values.batch = l.heads;
  values.m = l.tokens;
  values.n = l.v;
  values.k = l.rank;
  return headGemm(c, ctx, values);
}

/// The expanded form of a batch of prompts: kv_b_proj on the latent, then the FMHA over
/// the prompts' own keys.
kiln_status_t expanded(const Call &c, kiln_rt_context *ctx, const MlaLayer &l, const void *q,
                       const void *latent, const void *positions, const void *kvB,
                       char *scratch, const char *kPe, void *out) {
  char *qFull = scratch;
  char *kFull = qFull + l.tokens * l.qRow() * 2;
  char *kv = kFull + l.tokens * l.qRow() * 2;
  const int64_t qHead = l.nope + l.rope;
  ++ctx->launches;
  kiln_status_t s = kiln_gemm_bf16(ctx->gemm, latent, kvB, nullptr, kv, l.tokens, l.kvRow(),
                                   l.rank, ctx->base[kWorkspace], KILN_GEMM_WORKSPACE_BYTES,
                                   ctx->stream);
  if (s != KILN_OK)
    return c.launcher(s, "kiln_gemm_bf16");
  if ((s = ropeRows(c, ctx, l, q, l.qRow(), qHead, qFull, l.qRow(), qHead, l.heads, l.nope,
                    positions)) != KILN_OK)
    return s;
  kiln_mla_expand_keys_params_t ek{kv,     kPe,    kFull, static_cast<int>(l.tokens),
                                   l.heads, l.nope, l.rope, l.v, ctx->stream};
  ++ctx->launches;
  if ((s = kiln_mla_expand_keys(&ek)) != KILN_OK)
    return c.launcher(s, "kiln_mla_expand_keys");
  const int32_t *cu = ioPtr<int32_t>(ctx, ctx->io.cu_seqlens);
  kiln_prefill_fmha_params_t fp{};
  fp.q = qFull;
  fp.k = kFull;
  fp.v = kv + l.nope * 2;
  fp.out = out;
  fp.cu_seqlens_q = cu;
  fp.cu_seqlens_k = cu;
  fp.v_token_stride = l.kvRow();
  fp.v_head_stride = l.nope + l.v;
  fp.batch = ctx->batch;
  fp.total_q = ctx->tokens;
  fp.total_k = ctx->tokens;
  fp.max_seqlen_q = ctx->maxQLen;
  fp.q_heads = l.heads;
  fp.kv_heads = l.heads;
  fp.head_dim = static_cast<int32_t>(qHead);
  fp.v_head_dim = l.v;
  fp.dtype = KILN_DTYPE_BF16;
  fp.softmax_scale = l.softmaxScale;
  fp.causal = 1;
  fp.stream = ctx->stream;
  ++ctx->launches;
  s = kiln_prefill_fmha(&fp);
  return s == KILN_OK ? KILN_OK : c.launcher(s, "kiln_prefill_fmha");
}

kiln_status_t mlaAttention(const Call &c, kiln_rt_context *ctx, uint64_t cacheOffset,
                           const MlaLayer &l, const void *q, const void *latent,
                           const void *kPe, int64_t kPeStride, const void *positions,
                           const void *kvB, void *scratch, void *out, int32_t pageSize,
                           int32_t decodeKernel, int32_t prefillKernel, int32_t specDecMode) {
  if (kiln_status_t s =
          checkMlaShape(c, ctx, l, pageSize, decodeKernel, prefillKernel, specDecMode);
      s != KILN_OK)
    return s;
  if (kiln_status_t s = checkStride(c, "k_pe", kPeStride, l.rope); s != KILN_OK)
    return s;
  const int64_t perToken =
      kiln_rt_mla_scratch_bytes_per_token(l.heads, l.rank, l.rope, l.nope, l.v);
  uint64_t poolBytes = 0;
  const int64_t tokenBytes =
      l.poolDtype == KILN_DTYPE_FP8_E4M3 ? KILN_MLA_FP8_TOKEN_BYTES : KILN_MLA_HEAD_DIM * 2;
  if (!product(&poolBytes,
               {static_cast<int64_t>(ctx->config.kv_pages), KILN_MLA_PAGE_SIZE, tokenBytes}))
    return c.error(KILN_ERROR_INVALID_ARGUMENT, "sizes overflow");
  if (kiln_status_t s = checkRanges(
          c, ctx,
          {bf16("q", q, l.tokens, l.qRow()), bf16("latent", latent, l.tokens, l.rank),
           stridedBf16("k_pe", kPe, l.tokens, l.rope, kPeStride),
           {"positions", positions, bytesOf({l.tokens, 4}), 4, false},
           bf16("kv_b", kvB, l.kvRow(), l.rank),
           {"scratch", scratch, bytesOf({l.tokens, perToken}), 16, true},
           bf16("out", out, l.tokens, static_cast<int64_t>(l.heads) * l.v, true)});
      s != KILN_OK)
    return s;
  if (kiln_status_t s = useResource(c, ctx, "mla_latent", cacheOffset, poolBytes); s != KILN_OK)
    return s;
  if (ctx->dry)
    return KILN_OK;
  if (kiln_status_t s = selectDevice(c, ctx); s != KILN_OK)
    return s;

  const bool expand = expandedPrompt(ctx, l, prefillKernel);
  char *base = static_cast<char *>(scratch);
  // rope(k_pe) is the last region of the path's layout (Layout.h).
  const int64_t pathBytes =
      expand ? kiln_rt_mla_expanded_bytes_per_token(l.heads, l.rope, l.nope, l.v)
             : kiln_rt_mla_absorbed_bytes_per_token(l.heads, l.rank, l.rope);
  const int64_t kPeOffset = l.tokens * (pathBytes - 2 * l.rope);
  char *kPeRoped = base + kPeOffset;
  if (kiln_status_t s = ropeRows(c, ctx, l, kPe, kPeStride, l.rope, kPeRoped, l.rope, l.rope, 1,
                                 0, positions);
      s != KILN_OK)
    return s;
  void *pool = at(ctx->base[kCaches], cacheOffset);
  kiln_mla_kv_append_params_t ap{};
  ap.kv_c = latent;
  ap.k_pe = kPeRoped;
  ap.kv_c_token_stride = l.rank;
  ap.k_pe_token_stride = l.rope;
  ap.latent_cache = pool;
  ap.block_table = ioPtr<int32_t>(ctx, ctx->io.block_table);
  ap.token_batch = ioPtr<int32_t>(ctx, ctx->io.token_batch);
  ap.token_pos = ioPtr<int32_t>(ctx, ctx->io.positions);
  ap.num_tokens = static_cast<int>(l.tokens);
  ap.batch = ctx->batch;
  ap.num_pages = static_cast<int>(ctx->config.kv_pages);
  ap.max_pages_per_seq = ctx->maxPagesPerSeq;
  ap.dtype = KILN_DTYPE_BF16;
  ap.kv_dtype = l.poolDtype;
  ap.stream = ctx->stream;
  ++ctx->launches;
  if (kiln_status_t s = kiln_mla_kv_append(&ap); s != KILN_OK)
    return c.launcher(s, "kiln_mla_kv_append");
  if (expand)
    return expanded(c, ctx, l, q, latent, positions, kvB, base, kPeRoped, out);
  return absorbed(c, ctx, l, q, positions, kvB, base, pool, out, decodeKernel, specDecMode);
}

} // namespace

extern "C" int32_t kiln_rt_mla_attention(
    kiln_rt_context_t *ctx, int32_t layer, uint64_t cache_offset, const void *q, const void *latent,
    const void *k_pe, int64_t k_pe_stride, const void *positions, const void *kv_b, void *scratch,
    void *out, int64_t tokens, int32_t num_heads, int32_t kv_lora_rank, int32_t rope_dim,
    int32_t nope_dim, int32_t v_dim, int32_t page_size, int32_t decode_kernel,
    int32_t prefill_kernel, int32_t spec_dec_mode, float softmax_scale, int32_t rope_style,
    int32_t rope_type, float theta, float factor, float low, float high,
    int64_t original_max_position, float attention_factor, int32_t kv_dtype) {
  if (!ctx)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_rt_mla_attention: layer %d: context is null",
                layer);
  if (ctx->status != KILN_OK)
    return replay(ctx);
  ++ctx->opIndex;
  const bool decoding = ctx->hasBatch && ctx->phase == KILN_RT_PHASE_DECODE;
  Call c{"kiln_rt_mla_attention",
         kiln_rt_kernel_name(decoding ? decode_kernel : prefill_kernel), layer, ctx};
  if (!ctx->hasBatch)
    return record(ctx, c.error(KILN_ERROR_INVALID_ARGUMENT,
                               "no step set (call kiln_rt_set_batch first)"));
  if (layer < 0)
    return record(ctx, c.error(KILN_ERROR_INVALID_ARGUMENT, "negative layer index"));
  if (kv_dtype != KILN_RT_DTYPE_BF16 && kv_dtype != KILN_RT_DTYPE_F8E4M3FN)
    return record(ctx, c.error(KILN_ERROR_UNSUPPORTED,
                               "kv_dtype %d (%s) unsupported (the MLA kernels read bf16 or "
                               "f8E4M3FN latent pools)",
                               kv_dtype, kiln_rt_dtype_name(kv_dtype)));
  MlaLayer l{tokens,        num_heads,  kv_lora_rank,         rope_dim,       nope_dim, v_dim,
             softmax_scale, rope_style, kiln_rope_params_t{}, KILN_DTYPE_BF16};
  if (kv_dtype == KILN_RT_DTYPE_F8E4M3FN)
    l.poolDtype = KILN_DTYPE_FP8_E4M3;
  l.ropeParams.type = rope_type;
  l.ropeParams.theta = theta;
  l.ropeParams.factor = factor;
  l.ropeParams.low = low;
  l.ropeParams.high = high;
  l.ropeParams.original_max_position = original_max_position;
  l.ropeParams.attention_factor = attention_factor;
  kiln_status_t s = mlaAttention(c, ctx, cache_offset, l, q, latent, k_pe, k_pe_stride,
                                 positions, kv_b, scratch, out, page_size, decode_kernel,
                                 prefill_kernel, spec_dec_mode);
  if (s == KILN_OK && !ctx->dry)
    s = checkLaunch(c, ctx);
  if (s == KILN_OK && !ctx->dry)
    s = traceOutput(c, ctx, out, tokens, static_cast<int64_t>(num_heads) * v_dim);
  if (s == KILN_OK)
    ctx->lastAttention = layer;
  return record(ctx, s);
}
