// A Qwen3-Next Gated DeltaNet layer's recurrence as compiled code calls it in place
// (kiln_rt_gated_delta_net): the layer's q, k, v and gate inputs become the packed
// operands in the call's scratch (kiln_gdn_prepare: q, k and v packed, g and beta), then the GDN
// kernel the step needs runs on the per-slot states in the cache region:
//
//   DECODE, one token a sequence   gdn_update in place (one launch for the batch;
//                                  CUDA-graph capturable)
//   DECODE, 1 + drafts            rewind: gdn_update_spec writes the state after each token
//                                  to the intermediates (1 + max_draft_len a slot) and
//                                  only reads the main state; the sequence's next step
//                                  copies the accepted one back first (claimStates)
//   DECODE, replay mode            gdn_update_replay (docs/replay.md): folds the accepted
//                                  tokens of the sequence's last verify step into the state
//                                  from their kept k, v, g and beta, then keeps this step's
//                                  (1 + drafts tokens) or commits its one token in place
//   PREFILL                        the step's slots start from zeros, then
//   PREFILL, EXTEND                gdn_chunk_prefill over the step's packed sequences (one
//                                  launch a layer); in replay mode an EXTEND step folds the
//                                  pending tokens first (gdn_update_replay without tokens)
// The phases, the resources and the rewind commit are the Mamba2 layers' (Recurrent.h),
// and replay mode is kiln_rt_mamba_ssm's (Recurrent.cpp).
#include "Context.h"
#include "GraphOpCommon.h"
#include "Legacy.h"
#include "Recurrent.h"

#include "kiln/Kernels/GatedDeltaNet.h"

#include <utility>

using namespace kiln::rt;
using namespace kiln::rt::recurrent;

namespace {

struct GdnShape {
  int64_t tokens, kHeads, vHeads, kDim, vDim;
  int64_t qStride, kStride, vStride, aStride, bStride; // elements between tokens
  int64_t keyWidth() const { return kHeads * kDim; }
  int64_t valueWidth() const { return vHeads * vDim; }
};

// The layer's inputs: bf16 q, k, v, a, b (column slices, strides in GdnShape); f32 a_log,
// dt_bias.
struct GdnInputs {
  const void *q, *k, *v, *a, *b, *aLog, *dtBias;
};

// The packed operands kiln_gdn_prepare leaves in the scratch.
struct Operands {
  const void *q, *k, *v;
  const float *g, *beta;
};

// The planned offsets of a replay-mode layer's buffers (-1: rewind mode, or no
// speculation).
struct ReplayOffsets {
  int64_t k, v, gb;
  bool any() const { return k >= 0 || v >= 0 || gb >= 0; }
  bool all() const { return k >= 0 && v >= 0 && gb >= 0; }
};

// The kernels of a layer in rewind mode (or without speculation) and in replay mode: the
// multi-token kernel differs.
StateKernels gdnKernels(bool replayMode) {
  return {KILN_RT_KERNEL_GDN_UPDATE,
          replayMode ? KILN_RT_KERNEL_GDN_UPDATE_REPLAY : KILN_RT_KERNEL_GDN_UPDATE_SPEC,
          KILN_RT_KERNEL_GDN_CHUNK_PREFILL, KILN_RT_KERNEL_GDN_CHUNK_PREFILL};
}

// Replay mode is all three buffers and no rewind intermediates; a decode step of a replay
// layer runs gdn_update_replay whatever its tokens (one token a sequence commits it).
kiln_status_t checkReplayMode(const Call &c, const kiln_rt_context *ctx, const ReplayOffsets &r,
                              int64_t interOffset, int32_t decodeKernel) {
  if (r.any() && (!r.all() || interOffset >= 0))
    return c.error(KILN_ERROR_INVALID_ARGUMENT,
                   "replay offsets {k %lld, v %lld, gb %lld} with intermediate_offset %lld: "
                   "replay mode needs all three buffers and no rewind intermediates",
                   static_cast<long long>(r.k), static_cast<long long>(r.v),
                   static_cast<long long>(r.gb), static_cast<long long>(interOffset));
  if (r.all() && ctx->phase == KILN_RT_PHASE_DECODE &&
      decodeKernel != KILN_RT_KERNEL_GDN_UPDATE_REPLAY)
    return c.error(KILN_ERROR_INVALID_ARGUMENT,
                   "decode_kernel %d (%s) cannot run a replay-mode layer (gdn_update_replay)",
                   decodeKernel, kiln_rt_kernel_name(decodeKernel));
  return KILN_OK;
}

// Claims a replay layer's three buffers (k, v and {g, beta} of two steps of 1 +
// max_draft_len tokens a slot, as the compiler plans them) as the layer's resources.
kiln_status_t useReplayBuffers(const Call &c, kiln_rt_context *ctx, const GdnShape &sh,
                               const ReplayOffsets &r) {
  const int64_t slots = ctx->config.max_batch, steps = 2 * (1 + ctx->config.max_draft_len);
  const struct {
    const char *kind;
    int64_t offset;
    uint64_t bytes;
  } buffers[] = {{"gdn_replay_k", r.k, bytesOf({slots, steps, sh.kHeads, sh.kDim, 2})},
                 {"gdn_replay_v", r.v, bytesOf({slots, steps, sh.vHeads, sh.vDim, 2})},
                 {"gdn_replay_gb", r.gb, bytesOf({slots, steps, sh.vHeads, 2, 4})}};
  for (const auto &buffer : buffers)
    if (kiln_status_t s =
            useResource(c, ctx, buffer.kind, static_cast<uint64_t>(buffer.offset), buffer.bytes);
        s != KILN_OK)
      return s;
  return KILN_OK;
}

kiln_status_t checkShape(const Call &c, const kiln_rt_context *ctx, const GdnShape &sh) {
  if (kiln_status_t s = positive(c, {{"tokens", sh.tokens},
                                     {"k_heads", sh.kHeads},
                                     {"v_heads", sh.vHeads},
                                     {"k_dim", sh.kDim},
                                     {"v_dim", sh.vDim}});
      s != KILN_OK)
    return s;
  if (sh.vHeads % sh.kHeads != 0 || sh.vHeads > 65535)
    return c.error(KILN_ERROR_INVALID_ARGUMENT,
                   "v_heads %lld must be a multiple of k_heads %lld and at most 65535",
                   static_cast<long long>(sh.vHeads), static_cast<long long>(sh.kHeads));
  for (auto [name, dim] : {std::pair{"k_dim", sh.kDim}, {"v_dim", sh.vDim}})
    if (dim != 64 && dim != 128)
      return c.error(KILN_ERROR_UNSUPPORTED, "%s %lld unsupported (64 or 128)", name,
                     static_cast<long long>(dim));
  const struct {
    const char *name;
    int64_t stride, width;
  } rows[] = {{"q", sh.qStride, sh.keyWidth()},
              {"k", sh.kStride, sh.keyWidth()},
              {"v", sh.vStride, sh.valueWidth()},
              {"a", sh.aStride, sh.vHeads},
              {"b", sh.bStride, sh.vHeads}};
  for (const auto &r : rows)
    if (kiln_status_t s = checkStride(c, r.name, r.stride, r.width); s != KILN_OK)
      return s;
  return KILN_OK;
}

kiln_status_t checkBuffers(const Call &c, const kiln_rt_context *ctx, const GdnShape &sh,
                           const GdnInputs &in, const void *scratch, const void *out) {
  const int64_t perToken =
      kiln_rt_gdn_scratch_bytes_per_token(sh.kHeads, sh.vHeads, sh.kDim, sh.vDim);
  auto f32 = [&](const char *what, const void *p) {
    return Range{what, p, bytesOf({sh.vHeads, 4}), 4, false};
  };
  return checkRanges(c, ctx,
                     {stridedBf16("q", in.q, sh.tokens, sh.keyWidth(), sh.qStride),
                      stridedBf16("k", in.k, sh.tokens, sh.keyWidth(), sh.kStride),
                      stridedBf16("v", in.v, sh.tokens, sh.valueWidth(), sh.vStride),
                      stridedBf16("a", in.a, sh.tokens, sh.vHeads, sh.aStride),
                      stridedBf16("b", in.b, sh.tokens, sh.vHeads, sh.bStride),
                      f32("a_log", in.aLog),
                      f32("dt_bias", in.dtBias),
                      {"scratch", scratch, bytesOf({sh.tokens, perToken}), 16, true},
                      // The GDN kernels store out with 16-byte accesses.
                      {"out", out, bytesOf({sh.tokens, sh.valueWidth(), 2}), 16, true}});
}

// The step's operands into the scratch (Layout.h's regions), one launch.
kiln_status_t prepare(const Call &c, kiln_rt_context *ctx, const GdnShape &sh, const GdnInputs &in,
                      void *scratch, Operands *ops) {
  char *base = static_cast<char *>(scratch);
  const kiln_rt_gdn_scratch_t l = kiln_rt_gdn_scratch_layout(
      reinterpret_cast<uintptr_t>(scratch), sh.tokens, sh.kHeads, sh.vHeads, sh.kDim, sh.vDim);
  kiln_gdn_prepare_params_t p{};
  p.tokens = static_cast<int32_t>(sh.tokens);
  p.k_heads = static_cast<int32_t>(sh.kHeads);
  p.v_heads = static_cast<int32_t>(sh.vHeads);
  p.k_dim = static_cast<int32_t>(sh.kDim);
  p.v_dim = static_cast<int32_t>(sh.vDim);
  p.q = in.q;
  p.k = in.k;
  p.v = in.v;
  p.a = in.a;
  p.b = in.b;
  p.q_stride = sh.qStride;
  p.k_stride = sh.kStride;
  p.v_stride = sh.vStride;
  p.a_stride = sh.aStride;
  p.b_stride = sh.bStride;
  p.a_log = static_cast<const float *>(in.aLog);
  p.dt_bias = static_cast<const float *>(in.dtBias);
  p.q_out = base + l.qn;
  p.k_out = base + l.kn;
  p.v_out = base + l.v;
  p.g = reinterpret_cast<float *>(base + l.g);
  p.beta = reinterpret_cast<float *>(base + l.beta);
  p.stream = ctx->stream;
  kiln_status_t s = kiln_gdn_prepare(&p);
  ++ctx->launches;
  if (s != KILN_OK)
    return c.launcher(s, "kiln_gdn_prepare");
  *ops = {p.q_out, p.k_out, p.v_out, p.g, p.beta};
  return KILN_OK;
}

// The fields the update's and the chunked prefill's params share (the same names): the
// step's slots of the state, the packed operands, out. transformers 5 L2-normalizes q and k
// in fp32 inside the rule (use_qk_l2norm_in_kernel), as the kernels do with l2norm_qk.
template <typename Params>
void fillCommon(Params &p, const kiln_rt_context *ctx, uint64_t stateOffset, const GdnShape &sh,
                const Operands &ops, void *out) {
  p.state = at(ctx->base[kCaches], stateOffset);
  p.num_slots = ctx->legacy.num_slots;
  p.state_indices = ctx->legacy.slot_indices;
  p.k_heads = static_cast<int32_t>(sh.kHeads);
  p.v_heads = static_cast<int32_t>(sh.vHeads);
  p.k_dim = static_cast<int32_t>(sh.kDim);
  p.v_dim = static_cast<int32_t>(sh.vDim);
  p.dtype = KILN_DTYPE_BF16;
  p.q = ops.q;
  p.k = ops.k;
  p.v = ops.v;
  p.g = ops.g;
  p.beta = ops.beta;
  p.out = out;
  p.l2norm_qk = 1;
  p.scale = 0.0f; // 1 / sqrt(k_dim)
  p.stream = ctx->stream;
}

// A decode step: its qLen tokens a sequence in one launch, in place, or (spec) into the
// intermediates at the layout the commit reads, 1 + max_draft_len states a slot.
kiln_status_t runDecode(const Call &c, kiln_rt_context *ctx, uint64_t stateOffset,
                        int64_t interOffset, bool spec, const GdnShape &sh, const Operands &ops,
                        void *out) {
  kiln_gdn_update_params_t p{};
  fillCommon(p, ctx, stateOffset, sh, ops, out);
  p.batch = ctx->batch;
  p.num_tokens = ctx->qLen;
  if (spec) {
    p.intermediate = at(ctx->base[kCaches], static_cast<uint64_t>(interOffset));
    p.intermediate_tokens = static_cast<int32_t>(1 + ctx->config.max_draft_len);
  }
  kiln_status_t s = kiln_gdn_update(&p);
  ++ctx->launches;
  return s == KILN_OK ? KILN_OK
                      : c.launcher(s, spec ? "kiln_gdn_update (spec)" : "kiln_gdn_update");
}

// Replay mode's launch: a decode step's qLen tokens a sequence (a verify step, or one
// committed token), or with `tokens` 0 the fold of the pending prefixes alone (before an
// extend step's chunk; no operands). The pairs are the step's io array `pending`.
kiln_status_t runReplay(const Call &c, kiln_rt_context *ctx, uint64_t stateOffset,
                        const ReplayOffsets &r, const GdnShape &sh, int32_t tokens,
                        const Operands &ops, void *out) {
  char *caches = ctx->base[kCaches];
  kiln_gdn_update_replay_params_t p{};
  fillCommon(p, ctx, stateOffset, sh, ops, out);
  p.replay = ioPtr<int32_t>(ctx, ctx->io.pending);
  p.replay_k = at(caches, static_cast<uint64_t>(r.k));
  p.replay_v = at(caches, static_cast<uint64_t>(r.v));
  p.replay_gb = reinterpret_cast<float *>(at(caches, static_cast<uint64_t>(r.gb)));
  p.max_tokens = static_cast<int32_t>(1 + ctx->config.max_draft_len);
  p.batch = ctx->batch;
  p.num_tokens = tokens;
  kiln_status_t s = kiln_gdn_update_replay(&p);
  ++ctx->launches;
  return s == KILN_OK ? KILN_OK : c.launcher(s, "kiln_gdn_update_replay");
}

// A prefill or extend step: every sequence's tokens in one launch, from zeroed slots
// (prefill) or the sequences' states (extend, committed by claimStates).
kiln_status_t runChunkPrefill(const Call &c, kiln_rt_context *ctx, uint64_t stateOffset,
                              uint64_t slotBytes, const GdnShape &sh, const Operands &ops,
                              void *out) {
  if (ctx->phase == KILN_RT_PHASE_PREFILL)
    if (kiln_status_t s = legacy::zeroSlots(c, ctx, stateOffset, slotBytes); s != KILN_OK)
      return s;
  kiln_gdn_chunk_prefill_params_t p{};
  fillCommon(p, ctx, stateOffset, sh, ops, out);
  p.cu_seqlens = ctx->legacy.cu_seqlens_q;
  p.batch = ctx->batch;
  kiln_status_t s = kiln_gdn_chunk_prefill(&p);
  ++ctx->launches;
  return s == KILN_OK ? KILN_OK : c.launcher(s, "kiln_gdn_chunk_prefill");
}

kiln_status_t gatedDeltaNet(const Call &c, kiln_rt_context *ctx, uint64_t stateOffset,
                            int64_t interOffset, const ReplayOffsets &replayAt, const GdnInputs &in,
                            void *scratch, void *out, const GdnShape &sh, int32_t stateDtype,
                            int32_t decodeKernel, int32_t prefillKernel, int32_t specDecMode) {
  if (kiln_status_t s = checkStep(c, ctx, sh.tokens); s != KILN_OK)
    return s;
  if (kiln_status_t s = checkShape(c, ctx, sh); s != KILN_OK)
    return s;
  if (stateDtype != KILN_DTYPE_F32)
    return c.error(KILN_ERROR_UNSUPPORTED,
                   "state_dtype %d (%s) unsupported (f32: the GDN kernels keep fp32 states)",
                   stateDtype, kiln_rt_dtype_name(stateDtype));
  if (kiln_status_t s = checkReplayMode(c, ctx, replayAt, interOffset, decodeKernel); s != KILN_OK)
    return s;
  const bool replayMode = replayAt.all();
  bool spec = false;
  if (kiln_status_t s = checkPhase(c, ctx, gdnKernels(replayMode), decodeKernel, prefillKernel,
                                   specDecMode, replayMode ? replayAt.k : interOffset, &spec);
      s != KILN_OK)
    return s;
  if (spec && ctx->qLen > KILN_GDN_MAX_TOKENS)
    return c.error(KILN_ERROR_UNSUPPORTED, "q_len %d exceeds %s's %d tokens", ctx->qLen,
                   kiln_rt_kernel_name(decodeKernel), KILN_GDN_MAX_TOKENS);
  if (kiln_status_t s = checkBuffers(c, ctx, sh, in, scratch, out); s != KILN_OK)
    return s;
  const uint64_t slotBytes = bytesOf({sh.vHeads, sh.kDim, sh.vDim, 4});
  if (replayMode)
    if (kiln_status_t s = useReplayBuffers(c, ctx, sh, replayAt); s != KILN_OK)
      return s;
  bool launch = false;
  if (kiln_status_t s = claimStates(c, ctx, "gdn_state", "intermediate_gdn_state", stateOffset,
                                    interOffset, slotBytes, &launch);
      s != KILN_OK || !launch)
    return s;
  Operands ops{};
  if (kiln_status_t s = prepare(c, ctx, sh, in, scratch, &ops); s != KILN_OK)
    return s;
  if (replayMode && ctx->phase == KILN_RT_PHASE_DECODE)
    return runReplay(c, ctx, stateOffset, replayAt, sh, ctx->qLen, ops, out);
  if (ctx->phase == KILN_RT_PHASE_DECODE)
    return runDecode(c, ctx, stateOffset, interOffset, spec, sh, ops, out);
  if (replayMode && ctx->phase == KILN_RT_PHASE_EXTEND)
    if (kiln_status_t s = runReplay(c, ctx, stateOffset, replayAt, sh, 0, Operands{}, nullptr);
        s != KILN_OK)
      return s;
  return runChunkPrefill(c, ctx, stateOffset, slotBytes, sh, ops, out);
}

} // namespace

extern "C" int32_t kiln_rt_gated_delta_net(
    kiln_rt_context_t *ctx, int32_t layer, uint64_t state_offset, int64_t intermediate_offset,
    int64_t replay_k_offset, int64_t replay_v_offset, int64_t replay_gb_offset, const void *q,
    const void *k, const void *v, const void *a, const void *b, const void *a_log,
    const void *dt_bias, void *scratch, void *out, int64_t tokens, int64_t k_heads, int64_t v_heads,
    int64_t k_dim, int64_t v_dim, int64_t q_stride, int64_t k_stride, int64_t v_stride,
    int64_t a_stride, int64_t b_stride, int32_t state_dtype, int32_t decode_kernel,
    int32_t prefill_kernel, int32_t spec_dec_mode) {
  if (!ctx)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_rt_gated_delta_net: layer %d: context is null",
                layer);
  if (ctx->status != KILN_OK)
    return replay(ctx);
  ++ctx->opIndex;
  const bool decode = ctx->hasBatch && ctx->phase == KILN_RT_PHASE_DECODE;
  Call c{"kiln_rt_gated_delta_net", kiln_rt_kernel_name(decode ? decode_kernel : prefill_kernel),
         layer, ctx};
  const GdnShape shape{tokens,   k_heads,  v_heads,  k_dim,    v_dim,
                       q_stride, k_stride, v_stride, a_stride, b_stride};
  const GdnInputs inputs{q, k, v, a, b, a_log, dt_bias};
  const ReplayOffsets replayAt{replay_k_offset, replay_v_offset, replay_gb_offset};
  kiln_status_t s =
      gatedDeltaNet(c, ctx, state_offset, intermediate_offset, replayAt, inputs, scratch, out,
                    shape, state_dtype, decode_kernel, prefill_kernel, spec_dec_mode);
  return finish(c, ctx, s, out, tokens, v_heads * v_dim);
}
