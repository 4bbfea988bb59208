// C ABI launchers of the Gated DeltaNet update, chunked prefill and operand preparation:
// argument validation (before any CUDA call, so it runs without a GPU too), then the CUDA
// dispatch.
#include "kiln/Kernels/GatedDeltaNet.h"

#include "ArgChecker.h"
#include "GdnInternal.h"
#include "StatusInternal.h"

#include <cmath>
#include <initializer_list>
#include <utility>

using namespace kiln::kernels;

namespace {

// The shapes both GDN kernels take: value heads in groups over the key heads, and head
// dims of 64 or 128.
kiln_status_t checkHeads(const char *kernel, int32_t kHeads, int32_t vHeads, int32_t kDim,
                         int32_t vDim) {
  if (vHeads % kHeads != 0)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: v_heads (%d) must be a multiple of k_heads (%d)",
                kernel, vHeads, kHeads);
  for (auto [dim, name] : {std::pair<int32_t, const char *>{kDim, "k_dim"}, {vDim, "v_dim"}})
    if (dim != 64 && dim != 128)
      return fail(KILN_ERROR_UNSUPPORTED, "%s: %s %d unsupported (64 or 128)", kernel, name, dim);
  return ok();
}

kiln_status_t checkScale(const char *kernel, float scale) {
  if (!(std::isfinite(scale) && scale >= 0.0f))
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "%s: scale %g must be finite and >= 0 (0: 1/sqrt(k_dim))", kernel,
                static_cast<double>(scale));
  return ok();
}

// The scale the kernels apply: the caller's, or 1/sqrt(k_dim) for 0.
template <class Params> float resolvedScale(const Params &p) {
  return p.scale > 0.0f ? p.scale : 1.0f / std::sqrt(static_cast<float>(p.k_dim));
}

} // namespace

namespace {

// The checks the update's params and the replay's share (the same field names); a call
// without tokens (a replay fold alone) takes no activations.
template <class Params> bool checkUpdateFields(ArgChecker &c, const Params &p, bool hasTokens) {
  if (!c.notNull(p.state, "state") ||
      (hasTokens &&
       (!c.notNull(p.q, "q") || !c.notNull(p.k, "k") || !c.notNull(p.v, "v") ||
        !c.notNull(p.g, "g") || !c.notNull(p.beta, "beta") || !c.notNull(p.out, "out"))))
    return false;
  if (!c.nonNegative(p.batch, "batch") ||
      !c.atMost(p.num_tokens, KILN_GDN_MAX_TOKENS, "num_tokens") ||
      !c.positive(p.num_slots, "num_slots") || !c.positive(p.k_heads, "k_heads") ||
      !c.positive(p.v_heads, "v_heads"))
    return false;
  if ((c.status = checkHeads(c.kernel, p.k_heads, p.v_heads, p.k_dim, p.v_dim)) != KILN_OK)
    return false;
  if (p.dtype != KILN_DTYPE_BF16 && p.dtype != KILN_DTYPE_F16) {
    c.status = fail(KILN_ERROR_UNSUPPORTED, "%s: dtype %d unsupported (BF16 or F16)", c.kernel,
                    static_cast<int>(p.dtype));
    return false;
  }
  if ((c.status = checkScale(c.kernel, p.scale)) != KILN_OK)
    return false;
  if (!p.state_indices && p.batch > p.num_slots) {
    c.status = fail(KILN_ERROR_INVALID_ARGUMENT,
                    "%s: state_indices is null and batch (%d) > num_slots (%d)", c.kernel, p.batch,
                    p.num_slots);
    return false;
  }
  return c.aligned16(p.state, "state") &&
         (!hasTokens || (c.aligned16(p.q, "q") && c.aligned16(p.k, "k") && c.aligned16(p.v, "v") &&
                         c.aligned16(p.out, "out")));
}

} // namespace

extern "C" kiln_status_t kiln_gdn_update(const kiln_gdn_update_params_t *params) {
  return gdn::gdnUpdateWithVariant(params, gdn::kGdnUpdateDefault);
}

kiln_status_t gdn::gdnUpdateWithVariant(const kiln_gdn_update_params_t *params,
                                        gdn::GdnUpdateVariant variant) {
  ArgChecker c{"gdn_update"};
  if (!c.notNull(params, "params"))
    return c.status;
  const kiln_gdn_update_params_t &p = *params;
  if (p.intermediate)
    c.kernel = "gdn_update_spec";
  if (!c.positive(p.num_tokens, "num_tokens") || !checkUpdateFields(c, p, true))
    return c.status;
  if (p.intermediate_tokens != 0 && p.intermediate_tokens < p.num_tokens)
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "%s: intermediate_tokens (%d) must be 0 (num_tokens) or >= num_tokens (%d)",
                c.kernel, p.intermediate_tokens, p.num_tokens);
  if (p.intermediate && !c.aligned16(p.intermediate, "intermediate"))
    return c.status;
  if (p.batch == 0)
    return ok();
  return gdn::launchGdnUpdate(p, resolvedScale(p), variant);
}

extern "C" kiln_status_t kiln_gdn_update_replay(const kiln_gdn_update_replay_params_t *params) {
  return gdn::gdnUpdateReplayWithVariant(params, gdn::kGdnUpdateReplayDefault);
}

kiln_status_t gdn::gdnUpdateReplayWithVariant(const kiln_gdn_update_replay_params_t *params,
                                              gdn::GdnUpdateVariant variant) {
  ArgChecker c{"gdn_update_replay"};
  if (!c.notNull(params, "params"))
    return c.status;
  const kiln_gdn_update_replay_params_t &p = *params;
  if (!c.nonNegative(p.num_tokens, "num_tokens") || !checkUpdateFields(c, p, p.num_tokens > 0))
    return c.status;
  if (!c.notNull(p.replay, "replay") || !c.notNull(p.replay_k, "replay_k") ||
      !c.notNull(p.replay_v, "replay_v") || !c.notNull(p.replay_gb, "replay_gb") ||
      !c.elementAligned(p.replay, 4, "replay") || !c.elementAligned(p.replay_k, 2, "replay_k") ||
      !c.elementAligned(p.replay_v, 2, "replay_v") ||
      !c.elementAligned(p.replay_gb, 4, "replay_gb") || !c.positive(p.max_tokens, "max_tokens") ||
      !c.atMost(p.max_tokens, KILN_GDN_MAX_TOKENS, "max_tokens"))
    return c.status;
  if (p.num_tokens > p.max_tokens)
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "%s: num_tokens %d > max_tokens %d: a verify step's inputs must fit a replay "
                "buffer",
                c.kernel, p.num_tokens, p.max_tokens);
  if (p.batch == 0)
    return ok();
  return gdn::launchGdnUpdateReplay(p, resolvedScale(p), variant);
}

extern "C" kiln_status_t kiln_gdn_chunk_prefill(const kiln_gdn_chunk_prefill_params_t *params) {
  ArgChecker c{"gdn_chunk_prefill"};
  if (!c.notNull(params, "params"))
    return c.status;
  const kiln_gdn_chunk_prefill_params_t &p = *params;
  if (!c.notNull(p.state, "state") || !c.notNull(p.cu_seqlens, "cu_seqlens") ||
      !c.notNull(p.q, "q") || !c.notNull(p.k, "k") || !c.notNull(p.v, "v") ||
      !c.notNull(p.g, "g") || !c.notNull(p.beta, "beta") || !c.notNull(p.out, "out"))
    return c.status;
  if (!c.nonNegative(p.batch, "batch") || !c.atMost(p.batch, 65535, "batch") ||
      !c.positive(p.num_slots, "num_slots") || !c.positive(p.k_heads, "k_heads") ||
      !c.positive(p.v_heads, "v_heads"))
    return c.status;
  if (kiln_status_t st = checkHeads(c.kernel, p.k_heads, p.v_heads, p.k_dim, p.v_dim);
      st != KILN_OK)
    return st;
  if (p.dtype != KILN_DTYPE_BF16)
    return fail(KILN_ERROR_UNSUPPORTED,
                "%s: dtype %d unsupported (BF16: q and k are exact tensor-core operands)",
                c.kernel, static_cast<int>(p.dtype));
  if (kiln_status_t st = checkScale(c.kernel, p.scale); st != KILN_OK)
    return st;
  if (!p.state_indices && p.batch > p.num_slots)
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "%s: state_indices is null and batch (%d) > num_slots (%d)", c.kernel, p.batch,
                p.num_slots);
  if (!c.aligned16(p.state, "state") || !c.aligned16(p.q, "q") || !c.aligned16(p.k, "k") ||
      !c.aligned16(p.v, "v") || !c.aligned16(p.out, "out") ||
      !c.elementAligned(p.g, 4, "g") || !c.elementAligned(p.beta, 4, "beta") ||
      !c.elementAligned(p.cu_seqlens, 4, "cu_seqlens") ||
      (p.state_indices && !c.elementAligned(p.state_indices, 4, "state_indices")))
    return c.status;
  if (p.batch == 0)
    return ok();
  gdn::GdnChunkArgs a{};
  gdn::fillCommonArgs(a, p, resolvedScale(p));
  a.cuSeqlens = p.cu_seqlens;
  return gdn::launchGdnChunkPrefill(a, p.batch, p.k_dim, p.stream);
}

extern "C" kiln_status_t kiln_gdn_prepare(const kiln_gdn_prepare_params_t *params) {
  ArgChecker c{"gdn_prepare"};
  if (!c.notNull(params, "params"))
    return c.status;
  const kiln_gdn_prepare_params_t &p = *params;
  if (!c.notNull(p.q, "q") || !c.notNull(p.k, "k") || !c.notNull(p.v, "v") ||
      !c.notNull(p.a, "a") || !c.notNull(p.b, "b") || !c.notNull(p.a_log, "a_log") ||
      !c.notNull(p.dt_bias, "dt_bias") || !c.notNull(p.q_out, "q_out") ||
      !c.notNull(p.k_out, "k_out") || !c.notNull(p.v_out, "v_out") || !c.notNull(p.g, "g") ||
      !c.notNull(p.beta, "beta"))
    return c.status;
  if (!c.nonNegative(p.tokens, "tokens") || !c.positive(p.k_heads, "k_heads") ||
      !c.positive(p.v_heads, "v_heads") || !c.positive(p.k_dim, "k_dim") ||
      !c.positive(p.v_dim, "v_dim"))
    return c.status;
  // A token's row of each input holds its heads densely; the next row starts `stride`
  // elements on.
  const int64_t keyRow = int64_t(p.k_heads) * p.k_dim, valueRow = int64_t(p.v_heads) * p.v_dim;
  const struct {
    const char *name;
    int64_t stride, width;
  } rows[] = {{"q_stride", p.q_stride, keyRow},
              {"k_stride", p.k_stride, keyRow},
              {"v_stride", p.v_stride, valueRow},
              {"a_stride", p.a_stride, p.v_heads},
              {"b_stride", p.b_stride, p.v_heads}};
  for (const auto &r : rows)
    if (r.stride < r.width)
      return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s %lld < the row's %lld elements", c.kernel,
                  r.name, static_cast<long long>(r.stride), static_cast<long long>(r.width));
  if (!c.elementAligned(p.q, 2, "q") || !c.elementAligned(p.k, 2, "k") ||
      !c.elementAligned(p.v, 2, "v") || !c.elementAligned(p.a, 2, "a") ||
      !c.elementAligned(p.b, 2, "b") || !c.elementAligned(p.a_log, 4, "a_log") ||
      !c.elementAligned(p.dt_bias, 4, "dt_bias") || !c.elementAligned(p.q_out, 2, "q_out") ||
      !c.elementAligned(p.k_out, 2, "k_out") || !c.elementAligned(p.v_out, 2, "v_out") ||
      !c.elementAligned(p.g, 4, "g") || !c.elementAligned(p.beta, 4, "beta"))
    return c.status;
  if (p.tokens == 0)
    return ok();
  return gdn::launchGdnPrepare(p);
}
