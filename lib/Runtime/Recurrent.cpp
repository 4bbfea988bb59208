// The recurrent layers compiled code calls in place (kiln_rt_causal_conv, kiln_rt_mamba_ssm):
// a Mamba2 layer's conv and selective scan on the step's tokens, with their per-slot
// states in the cache region.
//
//   DECODE, one token a sequence   the update kernel, in place on the slots' states (one
//                                  launch for the batch; CUDA-graph capturable)
//   DECODE, 1 + drafts            rewind: the spec kernel: the state after each token goes
//                                  to the rewind intermediates, the main state is only
//                                  read; the next step copies the accepted one back
//                                  first (commitPending, one launch a layer). replay (docs/replay.md): ssm_update_replay folds
//                                  the accepted tokens of the last step into the state
//                                  from their kept inputs, then keeps this step's inputs;
//                                  one token a sequence commits it in place
//   PREFILL                        the step's slots start from zeros, then
//   PREFILL, EXTEND                the sequence's tokens in order, one launch per token
//                                  (the decode kernel's math: exact, not fast; the chunked
//                                  scan replaces it)
// Operands come from the compiled graph: x, dt, B and C may be column slices of one
// projection, so each takes its own row stride.
#include "Context.h"
#include "GraphOpCommon.h"
#include "Legacy.h"
#include "Recurrent.h"
#include "RuntimeKernels.h"

#include "kiln/Kernels/Mamba.h"

#include <cmath>
#include <string>

using namespace kiln::rt;
using kiln::rt::legacy::dtypeBytes;

namespace {

// Records the state (and the intermediates, when the layer has them) as the layer's
// resources, so that two layers cannot overlap and kiln_rt_resource answers.
kiln_status_t useStates(const Call &c, kiln_rt_context *ctx, const char *stateKind,
                        const char *interKind, uint64_t stateOffset, int64_t interOffset,
                        uint64_t slotBytes) {
  const uint64_t slots = static_cast<uint64_t>(ctx->config.max_batch);
  if (kiln_status_t s = useResource(c, ctx, stateKind, stateOffset, slotBytes * slots);
      s != KILN_OK)
    return s;
  if (interOffset < 0)
    return KILN_OK;
  const uint64_t tokens = 1 + static_cast<uint64_t>(ctx->config.max_draft_len);
  return useResource(c, ctx, interKind, static_cast<uint64_t>(interOffset),
                     slotBytes * tokens * slots);
}

// PREFILL and EXTEND: each sequence's tokens in order, one single-token launch each, on
// that sequence's slot (PREFILL zeroes the step's slots first). `pointAtRow(p, row)`
// points the params' activations at token `row` of the packed step.
template <typename Params, typename PointAtRow>
kiln_status_t runSequential(const Call &c, kiln_rt_context *ctx, uint64_t stateOffset,
                            uint64_t slotBytes, Params &p,
                            kiln_status_t (*launch)(const Params *), const char *launchName,
                            PointAtRow pointAtRow) {
  if (ctx->phase == KILN_RT_PHASE_PREFILL)
    if (kiln_status_t s = legacy::zeroSlots(c, ctx, stateOffset, slotBytes); s != KILN_OK)
      return s;
  char *stateBase = at(ctx->base[kCaches], stateOffset);
  for (int seq = 0; seq < ctx->batch; ++seq) {
    void *state;
    const int32_t *indices;
    int32_t numSlots;
    legacy::slotFor(ctx, stateBase, slotBytes, seq, &state, &indices, &numSlots);
    p.state = state;
    p.state_indices = indices;
    p.num_slots = numSlots;
    p.batch = 1;
    for (int row = ctx->cuHost[seq]; row < ctx->cuHost[seq + 1]; ++row) {
      pointAtRow(p, row);
      kiln_status_t s = launch(&p);
      ++ctx->launches;
      if (s != KILN_OK)
        return c.launcher(s, launchName);
    }
  }
  return KILN_OK;
}

// A step's launches refuse a capture when they depend on the step's prompt lengths.
kiln_status_t refuseSequentialCapture(kiln_rt_context *ctx, const char *fn) {
  return ctx->phase == KILN_RT_PHASE_DECODE ? KILN_OK : refuseCapture(ctx, fn);
}

// The rewind commit of a decode or extend step: each sequence with pending accepted
// tokens (the step's pending pairs) gets the state after the last of them from the
// layer's intermediates, before the step's own update reads it. One launch a layer,
// inside the forward (a replayed CUDA graph holds it); a no-op for sequences with none.
kiln_status_t commitPending(const Call &c, kiln_rt_context *ctx, uint64_t stateOffset,
                            int64_t interOffset, uint64_t slotBytes) {
  if (interOffset < 0 || ctx->phase == KILN_RT_PHASE_PREFILL)
    return KILN_OK;
  const int32_t tokens = static_cast<int32_t>(1 + ctx->config.max_draft_len);
  char *caches = ctx->base[kCaches];
  cudaError_t e = kiln::runtime::launchCommitSlots(
      at(caches, stateOffset), slotBytes, at(caches, static_cast<uint64_t>(interOffset)),
      slotBytes * tokens, slotBytes, slotBytes, ctx->legacy.slot_indices,
      ioPtr<int32_t>(ctx, ctx->io.pending), 2, tokens, ctx->batch, ctx->legacy.num_slots,
      ctx->stream);
  ++ctx->launches;
  return e == cudaSuccess ? KILN_OK : c.cuda(e, "the commit of the accepted states");
}

bool stateDtypeOk(int32_t dtype) { return dtype == KILN_DTYPE_F32 || dtype == KILN_DTYPE_BF16; }

// "a or b" of two kernels' names, or one name when they are one kernel.
std::string kernelChoice(int32_t a, int32_t b) {
  std::string text = kiln_rt_kernel_name(a);
  if (b != a)
    text += std::string(" or ") + kiln_rt_kernel_name(b);
  return text;
}

} // namespace

namespace kiln::rt::recurrent {

kiln_status_t checkPhase(const Call &c, const kiln_rt_context *ctx, StateKernels want,
                         int32_t decodeKernel, int32_t prefillKernel, int32_t specDecMode,
                         int64_t interOffset, bool *spec) {
  *spec = false;
  if (ctx->phase != KILN_RT_PHASE_DECODE) {
    if (prefillKernel != want.prefill && prefillKernel != want.parallelPrefill)
      return c.error(KILN_ERROR_INVALID_ARGUMENT, "prefill_kernel %d (%s) cannot run a %s step "
                     "(%s)", prefillKernel, kiln_rt_kernel_name(prefillKernel),
                     kiln_rt_phase_name(ctx->phase),
                     kernelChoice(want.prefill, want.parallelPrefill).c_str());
    return KILN_OK;
  }
  if (ctx->qLen == 1) {
    if (decodeKernel != want.update && decodeKernel != want.spec)
      return c.error(KILN_ERROR_INVALID_ARGUMENT, "decode_kernel %d (%s) cannot run a decode "
                     "step (%s or %s)", decodeKernel, kiln_rt_kernel_name(decodeKernel),
                     kiln_rt_kernel_name(want.update), kiln_rt_kernel_name(want.spec));
    return KILN_OK;
  }
  (void)specDecMode; // the recurrent kernels have one multi-token form
  if (decodeKernel != want.spec)
    return c.error(KILN_ERROR_INVALID_ARGUMENT,
                   "a decode step of %d tokens a sequence needs %s (a model compiled with "
                   "speculation), got decode_kernel %s",
                   ctx->qLen, kiln_rt_kernel_name(want.spec), kiln_rt_kernel_name(decodeKernel));
  if (interOffset < 0)
    return c.error(KILN_ERROR_INVALID_ARGUMENT,
                   "%s needs the layer's %s (offset < 0)", kiln_rt_kernel_name(want.spec),
                   want.spec == KILN_RT_KERNEL_SSM_UPDATE_REPLAY ? "replay buffers"
                                                                 : "rewind intermediates");
  if (ctx->qLen > 1 + ctx->config.max_draft_len)
    return c.error(KILN_ERROR_INVALID_ARGUMENT,
                   "q_len %d exceeds 1 + max_draft_len %lld (the intermediates' tokens)",
                   ctx->qLen, static_cast<long long>(ctx->config.max_draft_len));
  *spec = true;
  return KILN_OK;
}

kiln_status_t checkStep(const Call &c, const kiln_rt_context *ctx, int64_t tokens) {
  if (!ctx->hasBatch)
    return c.error(KILN_ERROR_INVALID_ARGUMENT, "no step set (call kiln_rt_set_batch first)");
  if (tokens != ctx->tokens)
    return c.error(KILN_ERROR_INVALID_ARGUMENT, "tokens %lld != the step's %d",
                   static_cast<long long>(tokens), ctx->tokens);
  return KILN_OK;
}

kiln_status_t claimStates(const Call &c, kiln_rt_context *ctx, const char *stateKind,
                          const char *interKind, uint64_t stateOffset, int64_t interOffset,
                          uint64_t slotBytes, bool *launch) {
  *launch = false;
  ctx->recurrentLayers = true;
  if (kiln_status_t s =
          useStates(c, ctx, stateKind, interKind, stateOffset, interOffset, slotBytes);
      s != KILN_OK)
    return s;
  if (kiln_status_t s = refuseSequentialCapture(ctx, c.fn); s != KILN_OK)
    return s;
  if (ctx->dry)
    return KILN_OK;
  if (kiln_status_t s = selectDevice(c, ctx); s != KILN_OK)
    return s;
  if (kiln_status_t s = commitPending(c, ctx, stateOffset, interOffset, slotBytes);
      s != KILN_OK)
    return s;
  *launch = true;
  return KILN_OK;
}

int32_t finish(const Call &c, kiln_rt_context *ctx, kiln_status_t s, const void *out,
               int64_t rows, int64_t cols) {
  if (s == KILN_OK && !ctx->dry)
    s = checkLaunch(c, ctx);
  if (s == KILN_OK && !ctx->dry)
    s = traceOutput(c, ctx, out, rows, cols);
  return record(ctx, s);
}

} // namespace kiln::rt::recurrent

using namespace kiln::rt::recurrent;

// ---- causal conv1d -----------------------------------------------------------------------

namespace {
// A prefill or extend step's conv in one call (conv_prefill) from the decode params `p`
// already filled for the step.
kiln_status_t runConvPrefill(const Call &c, kiln_rt_context *ctx, uint64_t stateOffset,
                             uint64_t slotBytes, const kiln_conv_update_params_t &p,
                             int64_t xStride) {
  if (ctx->phase == KILN_RT_PHASE_PREFILL)
    if (kiln_status_t s = legacy::zeroSlots(c, ctx, stateOffset, slotBytes); s != KILN_OK)
      return s;
  kiln_conv_prefill_params_t q{};
  q.state = p.state;
  q.state_dtype = p.state_dtype;
  q.state_stride_slot = p.state_stride_slot;
  q.num_slots = p.num_slots;
  q.state_indices = p.state_indices;
  q.cu_seqlens = ctx->legacy.cu_seqlens_q;
  q.batch = p.batch;
  q.conv_dim = p.conv_dim;
  q.width = p.width;
  q.max_tokens = ctx->tokens;
  q.dtype = p.dtype;
  q.x = p.x;
  q.x_stride_token = xStride;
  q.weight = p.weight;
  q.bias = p.bias;
  q.out = p.out;
  q.out_stride_token = p.conv_dim;
  q.silu = p.silu;
  q.stream = p.stream;
  kiln_status_t s = kiln_conv_prefill(&q);
  ctx->launches += 2;
  return s == KILN_OK ? KILN_OK : c.launcher(s, "kiln_conv_prefill");
}

kiln_status_t causalConv(const Call &c, kiln_rt_context *ctx, uint64_t stateOffset,
                         int64_t interOffset, const void *x, const void *weight,
                         const void *bias, void *out, int64_t tokens, int64_t convDim,
                         int32_t width, int64_t xStride, int32_t silu, int32_t stateDtype,
                         int32_t decodeKernel, int32_t prefillKernel, int32_t specDecMode) {
  if (kiln_status_t s = checkStep(c, ctx, tokens); s != KILN_OK)
    return s;
  if (kiln_status_t s = positive(c, {{"tokens", tokens}, {"conv_dim", convDim}}); s != KILN_OK)
    return s;
  if (width < 2 || width > 4)
    return c.error(KILN_ERROR_UNSUPPORTED, "width %d unsupported (2 to 4)", width);
  if (!stateDtypeOk(stateDtype))
    return c.error(KILN_ERROR_UNSUPPORTED, "state_dtype %d (%s) unsupported (f32 or bf16)",
                   stateDtype, kiln_rt_dtype_name(stateDtype));
  if (kiln_status_t s = checkStride(c, "x", xStride, convDim); s != KILN_OK)
    return s;
  bool spec = false;
  if (kiln_status_t s = checkPhase(c, ctx,
                                   {KILN_RT_KERNEL_CONV_UPDATE, KILN_RT_KERNEL_CONV_UPDATE_SPEC,
                                    KILN_RT_KERNEL_CONV_PREFILL_SEQUENTIAL,
                                    KILN_RT_KERNEL_CONV_PREFILL},
                                   decodeKernel, prefillKernel, specDecMode, interOffset, &spec);
      s != KILN_OK)
    return s;
  if (kiln_status_t s = checkRanges(c, ctx,
                                    {stridedBf16("x", x, tokens, convDim, xStride),
                                     bf16("weight", weight, convDim, width),
                                     bf16("out", out, tokens, convDim, true)});
      s != KILN_OK)
    return s;
  // Qwen3-Next's conv has no bias.
  if (bias)
    if (kiln_status_t s = checkRange(c, ctx, "bias", bias, bytesOf({convDim, 2}), 2, false);
        s != KILN_OK)
      return s;
  const uint64_t slotBytes =
      bytesOf({convDim, width - 1, static_cast<int64_t>(dtypeBytes(stateDtype))});
  bool launch = false;
  if (kiln_status_t s = claimStates(c, ctx, "conv_state", "intermediate_conv_state",
                                    stateOffset, interOffset, slotBytes, &launch);
      s != KILN_OK || !launch)
    return s;
  char *caches = ctx->base[kCaches];
  const LegacyBatch &b = ctx->legacy;
  if (spec) {
    const int32_t T = ctx->qLen;
    kiln_conv_update_spec_params_t p{};
    p.state = at(caches, stateOffset);
    p.state_dtype = static_cast<kiln_dtype_t>(stateDtype);
    p.state_stride_slot = convDim * (width - 1);
    p.num_slots = b.num_slots;
    p.state_indices = b.slot_indices;
    p.intermediate = at(caches, static_cast<uint64_t>(interOffset));
    p.inter_stride_token = convDim * (width - 1);
    p.inter_stride_slot = p.inter_stride_token * (1 + ctx->config.max_draft_len);
    p.batch = ctx->batch;
    p.num_tokens = T;
    p.conv_dim = static_cast<int32_t>(convDim);
    p.width = width;
    p.dtype = KILN_DTYPE_BF16;
    p.x = x;
    p.x_stride_batch = xStride * T;
    p.x_stride_token = xStride;
    p.weight = weight;
    p.bias = bias;
    p.out = out;
    p.out_stride_batch = convDim * T;
    p.out_stride_token = convDim;
    p.silu = silu ? 1 : 0;
    p.stream = ctx->stream;
    kiln_status_t s = kiln_conv_update_spec(&p);
    ++ctx->launches;
    return s == KILN_OK ? KILN_OK : c.launcher(s, "kiln_conv_update_spec");
  }
  kiln_conv_update_params_t p{};
  p.state = at(caches, stateOffset);
  p.state_dtype = static_cast<kiln_dtype_t>(stateDtype);
  p.state_stride_slot = convDim * (width - 1);
  p.num_slots = b.num_slots;
  p.state_indices = b.slot_indices;
  p.batch = ctx->batch;
  p.conv_dim = static_cast<int32_t>(convDim);
  p.width = width;
  p.dtype = KILN_DTYPE_BF16;
  p.x = x;
  p.x_stride_batch = xStride;
  p.weight = weight;
  p.bias = bias;
  p.out = out;
  p.out_stride_batch = convDim;
  p.silu = silu ? 1 : 0;
  p.stream = ctx->stream;
  if (ctx->phase == KILN_RT_PHASE_DECODE) {
    kiln_status_t s = kiln_conv_update(&p);
    ++ctx->launches;
    return s == KILN_OK ? KILN_OK : c.launcher(s, "kiln_conv_update");
  }
  if (prefillKernel == KILN_RT_KERNEL_CONV_PREFILL)
    return runConvPrefill(c, ctx, stateOffset, slotBytes, p, xStride);
  return runSequential(c, ctx, stateOffset, slotBytes, p, kiln_conv_update,
                       "kiln_conv_update (sequential prefill)",
                       [&](kiln_conv_update_params_t &q, int row) {
                         q.x = static_cast<const char *>(x) + row * xStride * kBf16;
                         q.out = static_cast<char *>(out) + row * convDim * kBf16;
                       });
}
} // namespace

extern "C" int32_t kiln_rt_causal_conv(kiln_rt_context_t *ctx, int32_t layer,
                                       uint64_t state_offset, int64_t intermediate_offset,
                                       const void *x, const void *weight, const void *bias,
                                       void *out, int64_t tokens, int64_t conv_dim, int32_t width,
                                       int64_t x_stride, int32_t silu, int32_t state_dtype,
                                       int32_t decode_kernel, int32_t prefill_kernel,
                                       int32_t spec_dec_mode) {
  if (!ctx)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_rt_causal_conv: layer %d: context is null",
                layer);
  if (ctx->status != KILN_OK)
    return replay(ctx);
  ++ctx->opIndex;
  const bool decode = ctx->hasBatch && ctx->phase == KILN_RT_PHASE_DECODE;
  Call c{"kiln_rt_causal_conv", kiln_rt_kernel_name(decode ? decode_kernel : prefill_kernel),
         layer, ctx};
  kiln_status_t s = causalConv(c, ctx, state_offset, intermediate_offset, x, weight, bias, out,
                               tokens, conv_dim, width, x_stride, silu, state_dtype,
                               decode_kernel, prefill_kernel, spec_dec_mode);
  return finish(c, ctx, s, out, tokens, conv_dim);
}

// ---- Mamba2 selective scan ----------------------------------------------------------------

namespace {
struct ScanShape {
  int64_t tokens, heads, headDim, stateSize, groups, xStride, dtStride, bcStride;
};

// The fields the single-token and the speculative params share (the same member names);
// `T` tokens a sequence (1: the single-token kernel).
template <typename Params>
void fillScan(Params &p, const ScanShape &s, int32_t T, const void *x, const void *dt,
              const void *B, const void *C, const void *aLog, const void *d,
              const void *dtBias, void *out, float dtMin, float dtMax, int32_t stateDtype) {
  const int64_t PN = s.headDim * s.stateSize;
  p.state_dtype = static_cast<kiln_dtype_t>(stateDtype);
  p.state_stride_slot = s.heads * PN;
  p.state_stride_head = PN;
  p.state_stride_dim = s.stateSize;
  p.heads = static_cast<int32_t>(s.heads);
  p.head_dim = static_cast<int32_t>(s.headDim);
  p.state_size = static_cast<int32_t>(s.stateSize);
  p.n_groups = static_cast<int32_t>(s.groups);
  p.dtype = KILN_DTYPE_BF16;
  p.x = x;
  p.x_stride_batch = s.xStride * T;
  p.x_stride_head = s.headDim;
  p.dt = dt;
  p.dt_stride_batch = s.dtStride * T;
  p.dt_bias = static_cast<const float *>(dtBias);
  p.A = static_cast<const float *>(aLog);
  p.a_is_log = 1;
  p.B = B;
  p.B_stride_batch = s.bcStride * T;
  p.B_stride_group = s.stateSize;
  p.C = C;
  p.C_stride_batch = s.bcStride * T;
  p.C_stride_group = s.stateSize;
  p.D = static_cast<const float *>(d);
  p.z = nullptr;
  p.out = out;
  p.out_stride_batch = s.heads * s.headDim * T;
  p.out_stride_head = s.headDim;
  p.dt_softplus = 1;
  p.dt_min = dtMin;
  p.dt_max = dtMax;
}

// A prefill or extend step's SSM in one launch (ssm_chunk_scan) from the decode params
// `p` already filled for the step: a prefill starts from zeroed slots, an extend from the
// sequences' states.
kiln_status_t runChunkScan(const Call &c, kiln_rt_context *ctx, uint64_t stateOffset,
                           uint64_t slotBytes, const kiln_ssm_update_params_t &p,
                           const ScanShape &sh) {
  if (ctx->phase == KILN_RT_PHASE_PREFILL)
    if (kiln_status_t s = legacy::zeroSlots(c, ctx, stateOffset, slotBytes); s != KILN_OK)
      return s;
  kiln_ssm_chunk_scan_params_t q{};
  q.state = p.state;
  q.state_dtype = p.state_dtype;
  q.state_stride_slot = p.state_stride_slot;
  q.state_stride_head = p.state_stride_head;
  q.state_stride_dim = p.state_stride_dim;
  q.num_slots = p.num_slots;
  q.state_indices = p.state_indices;
  q.cu_seqlens = ctx->legacy.cu_seqlens_q;
  q.batch = p.batch;
  q.heads = p.heads;
  q.head_dim = p.head_dim;
  q.state_size = p.state_size;
  q.n_groups = p.n_groups;
  q.dtype = p.dtype;
  q.x = p.x;
  q.x_stride_token = sh.xStride;
  q.dt = p.dt;
  q.dt_stride_token = sh.dtStride;
  q.dt_bias = p.dt_bias;
  q.A = p.A;
  q.B = p.B;
  q.B_stride_token = sh.bcStride;
  q.C = p.C;
  q.C_stride_token = sh.bcStride;
  q.D = p.D;
  q.out = p.out;
  q.out_stride_token = sh.heads * sh.headDim;
  q.dt_softplus = p.dt_softplus;
  q.a_is_log = p.a_is_log;
  q.dt_min = p.dt_min;
  q.dt_max = p.dt_max;
  q.stream = p.stream;
  kiln_status_t s = kiln_ssm_chunk_scan(&q);
  ++ctx->launches;
  return s == KILN_OK ? KILN_OK : c.launcher(s, "kiln_ssm_chunk_scan");
}

// The planned offsets of a replay-mode layer's buffers (-1: rewind mode, or no
// speculation).
struct ReplayOffsets {
  int64_t x, b, dt;
  bool any() const { return x >= 0 || b >= 0 || dt >= 0; }
  bool all() const { return x >= 0 && b >= 0 && dt >= 0; }
};

// Claims a replay layer's three buffers (x, B, dt' of two steps of 1 + max_draft_len
// tokens a slot) as the layer's resources.
kiln_status_t useReplayBuffers(const Call &c, kiln_rt_context *ctx, const ScanShape &sh,
                               const ReplayOffsets &r) {
  const int64_t slots = ctx->config.max_batch, steps = 2 * (1 + ctx->config.max_draft_len);
  const struct {
    const char *kind;
    int64_t offset;
    uint64_t bytes;
  } buffers[] = {
      {"replay_x", r.x, bytesOf({slots, steps, sh.heads, sh.headDim, 2})},
      {"replay_b", r.b, bytesOf({slots, steps, sh.groups, sh.stateSize, 2})},
      {"replay_dt", r.dt, bytesOf({slots, steps, sh.heads, 4})}};
  for (const auto &buffer : buffers)
    if (kiln_status_t s = useResource(c, ctx, buffer.kind, static_cast<uint64_t>(buffer.offset),
                                      buffer.bytes);
        s != KILN_OK)
      return s;
  return KILN_OK;
}

// Replay mode's launch: a decode step's tokens (speculative, or committed when one a
// sequence), or with `tokens` 0 the fold of the pending prefixes alone (before a chunk
// that continues the sequences).
kiln_status_t runReplay(const Call &c, kiln_rt_context *ctx, uint64_t stateOffset,
                        const ReplayOffsets &r, const ScanShape &sh, int32_t tokens,
                        const void *x, const void *dt, const void *B, const void *C,
                        const void *aLog, const void *d, const void *dtBias, void *out,
                        float dtMin, float dtMax, int32_t stateDtype) {
  char *caches = ctx->base[kCaches];
  kiln_ssm_update_replay_params_t p{};
  fillScan(p, sh, tokens, x, dt, B, C, aLog, d, dtBias, out, dtMin, dtMax, stateDtype);
  p.state = at(caches, stateOffset);
  p.num_slots = ctx->legacy.num_slots;
  p.state_indices = ctx->legacy.slot_indices;
  p.replay = ioPtr<int32_t>(ctx, ctx->io.pending);
  p.replay_x = at(caches, static_cast<uint64_t>(r.x));
  p.replay_B = at(caches, static_cast<uint64_t>(r.b));
  p.replay_dt = reinterpret_cast<float *>(at(caches, static_cast<uint64_t>(r.dt)));
  p.max_tokens = static_cast<int32_t>(1 + ctx->config.max_draft_len);
  p.commit = tokens <= 1 ? 1 : 0;
  p.batch = ctx->batch;
  p.num_tokens = tokens;
  p.x_stride_token = sh.xStride;
  p.dt_stride_token = sh.dtStride;
  p.B_stride_token = sh.bcStride;
  p.C_stride_token = sh.bcStride;
  p.out_stride_token = sh.heads * sh.headDim;
  p.stream = ctx->stream;
  kiln_status_t s = kiln_ssm_update_replay(&p);
  ++ctx->launches;
  return s == KILN_OK ? KILN_OK : c.launcher(s, "kiln_ssm_update_replay");
}

kiln_status_t mambaScan(const Call &c, kiln_rt_context *ctx, uint64_t stateOffset,
                        int64_t interOffset, const ReplayOffsets &replayAt, const void *x, const void *dt, const void *B,
                        const void *C, const void *aLog, const void *d, const void *dtBias,
                        void *out, const ScanShape &sh, float dtMin, float dtMax,
                        int32_t stateDtype, int32_t decodeKernel, int32_t prefillKernel,
                        int32_t specDecMode) {
  if (kiln_status_t s = checkStep(c, ctx, sh.tokens); s != KILN_OK)
    return s;
  if (kiln_status_t s = positive(c, {{"tokens", sh.tokens},
                                     {"heads", sh.heads},
                                     {"head_dim", sh.headDim},
                                     {"n_groups", sh.groups}});
      s != KILN_OK)
    return s;
  if (sh.heads % sh.groups != 0 || sh.heads > 65535)
    return c.error(KILN_ERROR_INVALID_ARGUMENT,
                   "heads %lld must be a multiple of n_groups %lld and at most 65535",
                   static_cast<long long>(sh.heads), static_cast<long long>(sh.groups));
  if (sh.stateSize != 64 && sh.stateSize != 128 && sh.stateSize != 256)
    return c.error(KILN_ERROR_UNSUPPORTED, "state_size %lld unsupported (64, 128, 256)",
                   static_cast<long long>(sh.stateSize));
  if (!stateDtypeOk(stateDtype))
    return c.error(KILN_ERROR_UNSUPPORTED, "state_dtype %d (%s) unsupported (f32 or bf16)",
                   stateDtype, kiln_rt_dtype_name(stateDtype));
  if (!(dtMin >= 0.0f) || !(dtMax >= 0.0f) || std::isinf(dtMin) ||
      (dtMax > 0.0f && dtMax < dtMin))
    return c.error(KILN_ERROR_INVALID_ARGUMENT, "dt clamp [%g, %g] invalid", dtMin, dtMax);
  if (!aLog)
    return c.error(KILN_ERROR_INVALID_ARGUMENT, "a_log is null (the layer's A_log)");
  const int64_t HP = sh.heads * sh.headDim, GN = sh.groups * sh.stateSize;
  if (kiln_status_t s = checkStride(c, "x", sh.xStride, HP); s != KILN_OK)
    return s;
  if (kiln_status_t s = checkStride(c, "dt", sh.dtStride, sh.heads); s != KILN_OK)
    return s;
  if (kiln_status_t s = checkStride(c, "B/C", sh.bcStride, GN); s != KILN_OK)
    return s;
  if (replayAt.any() && (!replayAt.all() || interOffset >= 0))
    return c.error(KILN_ERROR_INVALID_ARGUMENT,
                   "replay offsets {x %lld, b %lld, dt %lld} with intermediate_offset %lld: "
                   "replay mode needs all three buffers and no rewind intermediates",
                   static_cast<long long>(replayAt.x), static_cast<long long>(replayAt.b),
                   static_cast<long long>(replayAt.dt), static_cast<long long>(interOffset));
  const bool replayMode = replayAt.all();
  if (replayMode && ctx->phase == KILN_RT_PHASE_DECODE &&
      decodeKernel != KILN_RT_KERNEL_SSM_UPDATE_REPLAY)
    return c.error(KILN_ERROR_INVALID_ARGUMENT,
                   "decode_kernel %d (%s) cannot run a replay-mode layer (ssm_update_replay)",
                   decodeKernel, kiln_rt_kernel_name(decodeKernel));
  bool spec = false;
  if (kiln_status_t s = checkPhase(c, ctx,
                                   {KILN_RT_KERNEL_SSM_UPDATE,
                                    replayMode ? KILN_RT_KERNEL_SSM_UPDATE_REPLAY
                                               : KILN_RT_KERNEL_SSM_UPDATE_SPEC,
                                    KILN_RT_KERNEL_SSM_PREFILL_SEQUENTIAL,
                                    KILN_RT_KERNEL_SSM_CHUNK_SCAN},
                                   decodeKernel, prefillKernel, specDecMode,
                                   replayMode ? replayAt.x : interOffset, &spec);
      s != KILN_OK)
    return s;
  auto f32 = [&](const char *what, const void *p) {
    return Range{what, p, p ? bytesOf({sh.heads, 4}) : 0, 4, false};
  };
  if (kiln_status_t s = checkRanges(c, ctx,
                                    {stridedBf16("x", x, sh.tokens, HP, sh.xStride),
                                     stridedBf16("dt", dt, sh.tokens, sh.heads, sh.dtStride),
                                     stridedBf16("B", B, sh.tokens, GN, sh.bcStride),
                                     stridedBf16("C", C, sh.tokens, GN, sh.bcStride),
                                     f32("a_log", aLog), f32("d", d), f32("dt_bias", dtBias),
                                     bf16("out", out, sh.tokens, HP, true)});
      s != KILN_OK)
    return s;
  const uint64_t slotBytes = bytesOf({sh.heads, sh.headDim, sh.stateSize,
                                      static_cast<int64_t>(dtypeBytes(stateDtype))});
  if (replayMode)
    if (kiln_status_t s = useReplayBuffers(c, ctx, sh, replayAt); s != KILN_OK)
      return s;
  bool launch = false;
  if (kiln_status_t s = claimStates(c, ctx, "ssm_state", "intermediate_ssm_state", stateOffset,
                                    interOffset, slotBytes, &launch);
      s != KILN_OK || !launch)
    return s;
  if (replayMode && ctx->phase == KILN_RT_PHASE_DECODE)
    return runReplay(c, ctx, stateOffset, replayAt, sh, ctx->qLen, x, dt, B, C, aLog, d,
                     dtBias, out, dtMin, dtMax, stateDtype);
  if (replayMode && ctx->phase == KILN_RT_PHASE_EXTEND)
    if (kiln_status_t s = runReplay(c, ctx, stateOffset, replayAt, sh, 0, nullptr, nullptr,
                                    nullptr, nullptr, aLog, d, dtBias, nullptr, dtMin, dtMax,
                                    stateDtype);
        s != KILN_OK)
      return s;
  char *caches = ctx->base[kCaches];
  const LegacyBatch &b = ctx->legacy;
  if (spec) {
    const int32_t T = ctx->qLen;
    kiln_ssm_update_spec_params_t p{};
    fillScan(p, sh, T, x, dt, B, C, aLog, d, dtBias, out, dtMin, dtMax, stateDtype);
    p.state = at(caches, stateOffset);
    p.num_slots = b.num_slots;
    p.state_indices = b.slot_indices;
    p.batch = ctx->batch;
    p.num_tokens = T;
    const int64_t HPN = p.state_stride_slot;
    p.intermediate = at(caches, static_cast<uint64_t>(interOffset));
    p.inter_stride_token = HPN;
    p.inter_stride_slot = HPN * (1 + ctx->config.max_draft_len);
    p.inter_stride_head = p.state_stride_head;
    p.inter_stride_dim = p.state_stride_dim;
    p.x_stride_token = sh.xStride;
    p.dt_stride_token = sh.dtStride;
    p.B_stride_token = sh.bcStride;
    p.C_stride_token = sh.bcStride;
    p.out_stride_token = HP;
    p.stream = ctx->stream;
    kiln_status_t s = kiln_ssm_update_spec(&p);
    ++ctx->launches;
    return s == KILN_OK ? KILN_OK : c.launcher(s, "kiln_ssm_update_spec");
  }
  kiln_ssm_update_params_t p{};
  fillScan(p, sh, 1, x, dt, B, C, aLog, d, dtBias, out, dtMin, dtMax, stateDtype);
  p.state = at(caches, stateOffset);
  p.num_slots = b.num_slots;
  p.state_indices = b.slot_indices;
  p.batch = ctx->batch;
  p.stream = ctx->stream;
  if (ctx->phase == KILN_RT_PHASE_DECODE) {
    kiln_status_t s = kiln_ssm_update(&p);
    ++ctx->launches;
    return s == KILN_OK ? KILN_OK : c.launcher(s, "kiln_ssm_update");
  }
  if (prefillKernel == KILN_RT_KERNEL_SSM_CHUNK_SCAN)
    return runChunkScan(c, ctx, stateOffset, slotBytes, p, sh);
  return runSequential(c, ctx, stateOffset, slotBytes, p, kiln_ssm_update,
                       "kiln_ssm_update (sequential prefill)",
                       [&](kiln_ssm_update_params_t &q, int row) {
                         q.x = static_cast<const char *>(x) + row * sh.xStride * kBf16;
                         q.dt = static_cast<const char *>(dt) + row * sh.dtStride * kBf16;
                         q.B = static_cast<const char *>(B) + row * sh.bcStride * kBf16;
                         q.C = static_cast<const char *>(C) + row * sh.bcStride * kBf16;
                         q.out = static_cast<char *>(out) + row * HP * kBf16;
                       });
}
} // namespace

extern "C" int32_t kiln_rt_mamba_ssm(kiln_rt_context_t *ctx, int32_t layer, uint64_t state_offset,
                                     int64_t intermediate_offset, int64_t replay_x_offset,
                                     int64_t replay_b_offset, int64_t replay_dt_offset,
                                     const void *x, const void *dt,
                                     const void *b, const void *c_, const void *a_log,
                                     const void *d, const void *dt_bias, void *out,
                                     int64_t tokens, int64_t heads, int64_t head_dim,
                                     int64_t state_size, int64_t n_groups, int64_t x_stride,
                                     int64_t dt_stride, int64_t bc_stride, float dt_min,
                                     float dt_max, int32_t state_dtype, int32_t decode_kernel,
                                     int32_t prefill_kernel, int32_t spec_dec_mode) {
  if (!ctx)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_rt_mamba_ssm: layer %d: context is null",
                layer);
  if (ctx->status != KILN_OK)
    return replay(ctx);
  ++ctx->opIndex;
  const bool decode = ctx->hasBatch && ctx->phase == KILN_RT_PHASE_DECODE;
  Call c{"kiln_rt_mamba_ssm", kiln_rt_kernel_name(decode ? decode_kernel : prefill_kernel),
         layer, ctx};
  const ScanShape shape{tokens, heads, head_dim, state_size, n_groups, x_stride, dt_stride,
                        bc_stride};
  const ReplayOffsets replayAt{replay_x_offset, replay_b_offset, replay_dt_offset};
  kiln_status_t s = mambaScan(c, ctx, state_offset, intermediate_offset, replayAt, x, dt, b, c_,
                              a_log, d,
                              dt_bias, out, shape, dt_min, dt_max, state_dtype, decode_kernel,
                              prefill_kernel, spec_dec_mode);
  return finish(c, ctx, s, out, tokens, heads * head_dim);
}
