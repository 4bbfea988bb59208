// Host API of the prefill FMHA kernels: argument validation (no CUDA call before it
// passes) and the C entry points.
#include "PrefillInternal.h"
#include "StatusInternal.h"

#include <cmath>
#include <cstdint>

using namespace kiln::kernels;

namespace kiln::kernels::prefill {
namespace {

constexpr int32_t kMaxGridZ = 65535;
constexpr int32_t kBlockM = 128; // query rows per block of every instantiation
// DeepSeek MLA's expanded prompts: q/k (nope + rope) and v head dims.
constexpr int32_t kMlaQkDim = 192, kMlaVDim = 128;

bool aligned16(const void *p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Shared checks of the fields common to both launchers.
kiln_status_t validateCommon(const char *name, const void *q, const void *out,
                             const int32_t *cuQ, int32_t batch, int32_t totalQ,
                             int32_t maxSeqlenQ, int32_t qHeads, int32_t kvHeads,
                             int32_t headDim, kiln_dtype_t dtype, float scale, int32_t causal,
                             int32_t window) {
  if (!q)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: q is null", name);
  if (!out)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: out is null", name);
  if (!cuQ)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: cu_seqlens_q is null", name);
  if (!aligned16(q))
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: q is not 16-byte aligned", name);
  if (!aligned16(out))
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: out is not 16-byte aligned", name);
  if (batch < 1 || batch > kMaxGridZ)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: batch = %d must be in [1, %d]", name, batch,
                kMaxGridZ);
  if (totalQ < 0)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: total_q = %d is negative", name, totalQ);
  if (maxSeqlenQ < 0 || maxSeqlenQ > totalQ)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: max_seqlen_q = %d must be in [0, total_q = %d]",
                name, maxSeqlenQ, totalQ);
  if (totalQ > 0 && maxSeqlenQ == 0)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: max_seqlen_q = 0 with total_q = %d", name,
                totalQ);
  if ((static_cast<int64_t>(maxSeqlenQ) + kBlockM - 1) / kBlockM > kMaxGridZ)
    return fail(KILN_ERROR_UNSUPPORTED, "%s: max_seqlen_q = %d exceeds %d", name, maxSeqlenQ,
                kMaxGridZ * kBlockM);
  if (qHeads < 1 || qHeads > kMaxGridZ)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: q_heads = %d must be in [1, %d]", name, qHeads,
                kMaxGridZ);
  if (kvHeads < 1)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: kv_heads = %d must be >= 1", name, kvHeads);
  if (qHeads % kvHeads != 0)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: q_heads = %d is not a multiple of kv_heads = %d",
                name, qHeads, kvHeads);
  if (headDim < 1)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: head_dim = %d must be positive", name, headDim);
  if (headDim != 64 && headDim != 128 && headDim != 256 && headDim != kMlaQkDim)
    return fail(KILN_ERROR_UNSUPPORTED,
                "%s: head_dim = %d not supported (64, 128, 256; 192 with v_head_dim 128)", name,
                headDim);
  if (dtype != KILN_DTYPE_BF16 && dtype != KILN_DTYPE_F16)
    return fail(KILN_ERROR_UNSUPPORTED, "%s: dtype = %d not supported (bf16, f16)", name,
                static_cast<int>(dtype));
  if (!std::isfinite(scale) || !(scale > 0.f))
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: softmax_scale = %g must be finite and > 0",
                name, static_cast<double>(scale));
  if (causal != 0 && causal != 1)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: causal = %d must be 0 or 1", name, causal);
  if (window < 0)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: window = %d is negative", name, window);
  if (window > 0 && !causal)
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "%s: a sliding window (window = %d) needs causal = 1", name, window);
  return KILN_OK;
}

kiln_status_t checkStrides(const char *name, const char *what, long long tok, long long head,
                           int32_t heads, int32_t headDim) {
  if (tok % 8 != 0 || head % 8 != 0)
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "%s: %s strides (token %lld, head %lld) must be multiples of 8 elements", name,
                what, tok, head);
  if (head < headDim || tok < static_cast<long long>(heads - 1) * head + headDim)
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "%s: %s strides (token %lld, head %lld) overlap rows of head_dim %d x %d heads",
                name, what, tok, head, headDim, heads);
  return KILN_OK;
}

} // namespace

static int32_t vHeadDim(const kiln_prefill_fmha_params_t &p) {
  return p.v_head_dim ? p.v_head_dim : p.head_dim;
}

ResolvedStrides resolveStrides(const kiln_prefill_fmha_params_t &p) {
  const long long d = p.head_dim, dv = vHeadDim(p);
  ResolvedStrides s;
  s.q_head = p.q_head_stride ? p.q_head_stride : d;
  s.q_tok = p.q_token_stride ? p.q_token_stride : d * p.q_heads;
  s.k_head = p.k_head_stride ? p.k_head_stride : d;
  s.k_tok = p.k_token_stride ? p.k_token_stride : d * p.kv_heads;
  s.v_head = p.v_head_stride ? p.v_head_stride : dv;
  s.v_tok = p.v_token_stride ? p.v_token_stride : dv * p.kv_heads;
  s.o_head = p.out_head_stride ? p.out_head_stride : dv;
  s.o_tok = p.out_token_stride ? p.out_token_stride : dv * p.q_heads;
  return s;
}

ResolvedStrides resolveStrides(const kiln_prefill_fmha_paged_params_t &p) {
  const long long d = p.head_dim;
  ResolvedStrides s;
  s.q_head = p.q_head_stride ? p.q_head_stride : d;
  s.q_tok = p.q_token_stride ? p.q_token_stride : d * p.q_heads;
  s.k_head = s.v_head = d; // the cache is always packed
  s.k_tok = s.v_tok = d * p.kv_heads;
  s.o_head = p.out_head_stride ? p.out_head_stride : d;
  s.o_tok = p.out_token_stride ? p.out_token_stride : d * p.q_heads;
  return s;
}

kiln_status_t validateDense(const kiln_prefill_fmha_params_t &p, const char *name) {
  kiln_status_t st =
      validateCommon(name, p.q, p.out, p.cu_seqlens_q, p.batch, p.total_q, p.max_seqlen_q,
                     p.q_heads, p.kv_heads, p.head_dim, p.dtype, p.softmax_scale, p.causal,
                     p.window);
  if (st != KILN_OK)
    return st;
  if (!p.k)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: k is null", name);
  if (!p.v)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: v is null", name);
  if (!p.cu_seqlens_k)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: cu_seqlens_k is null", name);
  if (!aligned16(p.k))
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: k is not 16-byte aligned", name);
  if (!aligned16(p.v))
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: v is not 16-byte aligned", name);
  if (p.total_k < 0)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: total_k = %d is negative", name, p.total_k);
  const int32_t dv = vHeadDim(p);
  if (dv < 0 || (dv != p.head_dim && !(p.head_dim == kMlaQkDim && dv == kMlaVDim)) ||
      (p.head_dim == kMlaQkDim && dv != kMlaVDim))
    return fail(KILN_ERROR_UNSUPPORTED,
                "%s: v_head_dim = %d with head_dim = %d not supported (equal, or 128 under "
                "192: DeepSeek MLA)", name, p.v_head_dim, p.head_dim);
  if (p.head_dim == kMlaQkDim && (p.window > 0 || p.sinks))
    return fail(KILN_ERROR_UNSUPPORTED,
                "%s: head_dim 192 (MLA prompts) has no sliding window or sinks", name);
  if (p.q_token_stride < 0 || p.q_head_stride < 0 || p.k_token_stride < 0 ||
      p.k_head_stride < 0 || p.v_token_stride < 0 || p.v_head_stride < 0 ||
      p.out_token_stride < 0 || p.out_head_stride < 0)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: negative stride", name);
  const ResolvedStrides s = resolveStrides(p);
  if ((st = checkStrides(name, "q", s.q_tok, s.q_head, p.q_heads, p.head_dim)) != KILN_OK ||
      (st = checkStrides(name, "k", s.k_tok, s.k_head, p.kv_heads, p.head_dim)) != KILN_OK ||
      (st = checkStrides(name, "v", s.v_tok, s.v_head, p.kv_heads, dv)) != KILN_OK ||
      (st = checkStrides(name, "out", s.o_tok, s.o_head, p.q_heads, dv)) != KILN_OK)
    return st;
  return KILN_OK;
}

kiln_status_t validatePaged(const kiln_prefill_fmha_paged_params_t &p, const char *name) {
  kiln_status_t st =
      validateCommon(name, p.q, p.out, p.cu_seqlens_q, p.batch, p.total_q, p.max_seqlen_q,
                     p.q_heads, p.kv_heads, p.head_dim, p.dtype, p.softmax_scale, p.causal,
                     p.window);
  if (st != KILN_OK)
    return st;
  if (p.head_dim == kMlaQkDim)
    return fail(KILN_ERROR_UNSUPPORTED,
                "%s: head_dim 192 (DeepSeek MLA prompts) reads dense K/V only", name);
  if (!p.kv_cache)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: kv_cache is null", name);
  if (!p.seq_lens)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: seq_lens is null", name);
  if (!p.block_table)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: block_table is null", name);
  if (!aligned16(p.kv_cache))
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: kv_cache is not 16-byte aligned", name);
  if ((st = checkCacheDtype(name, p.dtype, p.kv_dtype, p.k_scale, p.v_scale)) != KILN_OK)
    return st;
  if (p.num_pages < 1)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: num_pages = %d must be >= 1", name,
                p.num_pages);
  if (p.page_size < 1)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: page_size = %d must be >= 1", name,
                p.page_size);
  if (p.max_pages_per_seq < 1)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: max_pages_per_seq = %d must be >= 1", name,
                p.max_pages_per_seq);
  if (p.q_token_stride < 0 || p.q_head_stride < 0 || p.out_token_stride < 0 ||
      p.out_head_stride < 0)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: negative stride", name);
  const ResolvedStrides s = resolveStrides(p);
  if ((st = checkStrides(name, "q", s.q_tok, s.q_head, p.q_heads, p.head_dim)) != KILN_OK ||
      (st = checkStrides(name, "out", s.o_tok, s.o_head, p.q_heads, p.head_dim)) != KILN_OK)
    return st;
  return KILN_OK;
}

} // namespace kiln::kernels::prefill

using namespace kiln::kernels::prefill;

namespace {
// AUTO picks the warp-specialized wgmma variant where it can run (sm_90a build on an sm_90
// device; it hands head_dim 256, windows and paged caches to the SM90 kernel itself):
// 1.02-1.08x cuDNN at d128 and 1.2-1.5x the SM90 kernel on an H200 (docs/performance.md).
constexpr bool kAutoPrefersSm90 = true;

template <typename Params, typename Sm80, typename Sm90, typename Sm90Overlap, typename Sm90Ws>
kiln_status_t launchVariant(const Params &p, kiln_prefill_variant_t variant, const char *name,
                            Sm80 sm80, Sm90 sm90, Sm90Overlap sm90Overlap, Sm90Ws sm90Ws) {
  switch (variant) {
  case KILN_PREFILL_VARIANT_AUTO: {
    if (p.total_q == 0)
      return ok();
    if (kAutoPrefersSm90) {
      kiln_status_t st = sm90Ws(p, name);
      if (st != KILN_ERROR_UNSUPPORTED)
        return st;
    }
    return sm80(p, name);
  }
  case KILN_PREFILL_VARIANT_MMA_SM80:
    return p.total_q == 0 ? ok() : sm80(p, name);
  case KILN_PREFILL_VARIANT_SM90:
    return p.total_q == 0 ? ok() : sm90(p, name);
  case KILN_PREFILL_VARIANT_SM90_OVERLAP:
    return p.total_q == 0 ? ok() : sm90Overlap(p, name);
  case KILN_PREFILL_VARIANT_SM90_WS:
    return p.total_q == 0 ? ok() : sm90Ws(p, name);
  }
  return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: variant = %d unknown", name,
              static_cast<int>(variant));
}
} // namespace

extern "C" kiln_status_t kiln_prefill_fmha_variant(const kiln_prefill_fmha_params_t *params,
                                                   kiln_prefill_variant_t variant) {
  const char *name = "kiln_prefill_fmha";
  if (!params)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: params is null", name);
  kiln_status_t st = validateDense(*params, name);
  if (st != KILN_OK)
    return st;
  return launchVariant(*params, variant, name, launchDenseSm80, launchDenseSm90,
                       launchDenseSm90Overlap, launchDenseSm90Ws);
}

extern "C" kiln_status_t kiln_prefill_fmha(const kiln_prefill_fmha_params_t *params) {
  return kiln_prefill_fmha_variant(params, KILN_PREFILL_VARIANT_AUTO);
}

extern "C" kiln_status_t
kiln_prefill_fmha_paged_variant(const kiln_prefill_fmha_paged_params_t *params,
                                kiln_prefill_variant_t variant) {
  const char *name = "kiln_prefill_fmha_paged";
  if (!params)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: params is null", name);
  kiln_status_t st = validatePaged(*params, name);
  if (st != KILN_OK)
    return st;
  return launchVariant(*params, variant, name, launchPagedSm80, launchPagedSm90,
                       launchPagedSm90Overlap, launchPagedSm90Ws);
}

extern "C" kiln_status_t kiln_prefill_fmha_paged(const kiln_prefill_fmha_paged_params_t *params) {
  return kiln_prefill_fmha_paged_variant(params, KILN_PREFILL_VARIANT_AUTO);
}
