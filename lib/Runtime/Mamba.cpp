// kiln_rt_ssm and kiln_rt_conv (legacy, bind-based): Mamba2 selective state update and
// causal conv1d, decode (plain and speculative) and the sequential prefill.
#include "Legacy.h"

#include "kiln/Kernels/Mamba.h"

using namespace kiln::rt;
using namespace kiln::rt::legacy;

namespace {
// Sequential prefill of a per-slot state (SSM, conv): the step's slots start from zeros
// (new prompts), then one single-sequence, single-token launch per prompt token, in
// order. Exact (the decode kernel's math) but total_tokens launches per layer.
// `pointAtRow(p, row)` points the params' activations at token `row` of the packed batch.
template <typename Params, typename PointAtRow>
kiln_status_t runSequentialPrefill(const Call &c, kiln_rt_context *ctx, uint64_t stateOffset,
                                   uint64_t slotBytes, Params &p,
                                   kiln_status_t (*launch)(const Params *),
                                   const char *launchName, PointAtRow pointAtRow) {
  if (kiln_status_t s = zeroSlots(c, ctx, stateOffset, slotBytes); s != KILN_OK)
    return s;
  char *stateBase = at(ctx->base[kCaches], stateOffset);
  for (int seq = 0; seq < ctx->legacy.batch; ++seq) {
    void *state;
    const int32_t *indices;
    int32_t numSlots;
    slotFor(ctx, stateBase, slotBytes, seq, &state, &indices, &numSlots);
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
  return kiln::kernels::ok();
}

// The single-token state update of a step: a decode step launches `launch` once for the
// batch (and forgets the layer's last speculative commit), a prefill runs it token by
// token (runSequentialPrefill). Shared by the SSM and the conv layers.
template <typename Params, typename PointAtRow>
kiln_status_t runStateUpdate(const Call &c, kiln_rt_context *ctx, int32_t phase, int32_t layer,
                             const char *commitKey, uint64_t stateOffset, uint64_t slotBytes,
                             Params &p, kiln_status_t (*launch)(const Params *),
                             const char *launchName, const char *prefillName,
                             PointAtRow pointAtRow) {
  if (phase == KILN_RT_PHASE_DECODE)
    ctx->commits.erase({layer, commitKey});
  if (ctx->dry)
    return kiln::kernels::ok();
  if (phase != KILN_RT_PHASE_DECODE)
    return runSequentialPrefill(c, ctx, stateOffset, slotBytes, p, launch, prefillName,
                                pointAtRow);
  kiln_status_t s = launch(&p);
  ++ctx->launches;
  if (s != KILN_OK)
    return c.launcher(s, launchName);
  return kiln::kernels::ok();
}
// An SSM call's device operands (bound by name, or the state in the cache region).
struct SsmOperands {
  void *state, *x, *dt, *B, *C, *out, *z;
  const float *A, *D, *dtBias;
};

// The fields the single-token and the speculative SSM params share, for `tokens` tokens
// per sequence (1: the single-token kernel; its params have no token strides).
template <typename Params>
void fillSsmParams(Params &p, const SsmOperands &o, const LegacyBatch &b, int32_t tokens,
                   int32_t numHeads, int32_t headDim, int32_t stateSize, int32_t nGroups,
                   int32_t stateDtype, cudaStream_t stream) {
  const int64_t HP = static_cast<int64_t>(numHeads) * headDim;
  const int64_t GN = static_cast<int64_t>(nGroups) * stateSize;
  const int64_t PN = static_cast<int64_t>(headDim) * stateSize;
  p.state = o.state;
  p.state_dtype = static_cast<kiln_dtype_t>(stateDtype);
  p.state_stride_slot = numHeads * PN;
  p.state_stride_head = PN;
  p.state_stride_dim = stateSize;
  p.num_slots = b.num_slots;
  p.state_indices = b.slot_indices;
  p.batch = b.batch;
  p.heads = numHeads;
  p.head_dim = headDim;
  p.state_size = stateSize;
  p.n_groups = nGroups;
  p.dtype = KILN_DTYPE_BF16;
  p.x = o.x;
  p.x_stride_batch = HP * tokens;
  p.x_stride_head = headDim;
  p.dt = o.dt;
  p.dt_stride_batch = static_cast<int64_t>(numHeads) * tokens;
  p.dt_bias = o.dtBias;
  p.A = o.A;
  p.B = o.B;
  p.B_stride_batch = GN * tokens;
  p.B_stride_group = stateSize;
  p.C = o.C;
  p.C_stride_batch = GN * tokens;
  p.C_stride_group = stateSize;
  p.D = o.D;
  p.z = o.z;
  p.z_stride_batch = HP * tokens;
  p.z_stride_head = headDim;
  p.out = o.out;
  p.out_stride_batch = HP * tokens;
  p.out_stride_head = headDim;
  p.dt_softplus = 1;
  p.stream = stream;
}
} // namespace

// ---- Mamba2 SSM --------------------------------------------------------------------------

extern "C" kiln_status_t kiln_rt_ssm(kiln_rt_context_t *ctx, int32_t phase, int32_t layer,
                                     uint64_t state_offset, int64_t intermediate_offset,
                                     int32_t num_heads, int32_t head_dim, int32_t state_size,
                                     int32_t n_groups, int32_t state_dtype, int32_t kernel) {
  Call c{"kiln_rt_ssm", kiln_rt_kernel_name(kernel), layer};
  if (kiln_status_t s = refuseCapture(ctx, c.fn); s != KILN_OK)
    return s;
  if (kiln_status_t s = checkCall(c, ctx, phase); s != KILN_OK)
    return s;
  const LegacyBatch &b = ctx->legacy;
  bool spec = kernel == KILN_RT_KERNEL_SSM_UPDATE_SPEC;
  if (phase == KILN_RT_PHASE_DECODE && kernel != KILN_RT_KERNEL_SSM_UPDATE && !spec)
    return c.error(KILN_ERROR_INVALID_ARGUMENT,
                   "kernel %d (%s) cannot run an SSM decode (ssm_update or ssm_update_spec)",
                   kernel, kiln_rt_kernel_name(kernel));
  if (phase == KILN_RT_PHASE_PREFILL && kernel != KILN_RT_KERNEL_SSM_PREFILL_SEQUENTIAL)
    return c.error(KILN_ERROR_INVALID_ARGUMENT,
                   "kernel %d (%s) cannot run an SSM prefill (ssm_prefill_sequential)", kernel,
                   kiln_rt_kernel_name(kernel));
  if (num_heads < 1 || head_dim < 1 || n_groups < 1 || num_heads % n_groups != 0)
    return c.error(KILN_ERROR_INVALID_ARGUMENT,
                   "num_heads %d, head_dim %d, n_groups %d: need positive sizes and n_groups "
                   "dividing num_heads", num_heads, head_dim, n_groups);
  if (state_size != 64 && state_size != 128 && state_size != 256)
    return c.error(KILN_ERROR_UNSUPPORTED, "state_size %d unsupported (64, 128, 256)", state_size);
  if (state_dtype != KILN_DTYPE_F32 && state_dtype != KILN_DTYPE_BF16)
    return c.error(KILN_ERROR_UNSUPPORTED, "state_dtype %d unsupported (F32 or BF16)",
                   state_dtype);
  if (kiln_status_t s = checkSlots(c, ctx); s != KILN_OK)
    return s;
  uint64_t slotBytes = static_cast<uint64_t>(num_heads) * head_dim * state_size *
                       dtypeBytes(state_dtype);
  if (kiln_status_t s = useResource(c, ctx, "ssm_state", state_offset, slotBytes * b.num_slots);
      s != KILN_OK)
    return s;
  int32_t T = b.q_len;
  if (phase == KILN_RT_PHASE_DECODE && !spec && T != 1)
    return c.error(KILN_ERROR_INVALID_ARGUMENT,
                   "batch.q_len %d > 1 needs ssm_update_spec (speculation on)", T);
  if (phase == KILN_RT_PHASE_DECODE && spec) {
    if (intermediate_offset < 0)
      return c.error(KILN_ERROR_INVALID_ARGUMENT,
                     "ssm_update_spec needs intermediate states (intermediate_offset < 0)");
    if (kiln_status_t s = useResource(c, ctx, "intermediate_ssm_state",
                                      static_cast<uint64_t>(intermediate_offset),
                                      slotBytes * T * b.num_slots);
        s != KILN_OK)
      return s;
  }
  void *x, *dt, *B, *C, *out, *A;
  if (kiln_status_t s = requireAll(c, ctx, {{"x", &x}, {"dt", &dt}, {"b", &B}, {"c", &C}, {"out", &out}, {"A", &A}}); s != KILN_OK)
    return s;
  void *z = lookup(ctx, layer, "z");
  void *D = lookup(ctx, layer, "D");
  void *dtBias = lookup(ctx, layer, "dt_bias");
  if (kiln_status_t s = selectDevice(c, ctx); s != KILN_OK)
    return s;

  const int64_t HP = static_cast<int64_t>(num_heads) * head_dim;
  const int64_t GN = static_cast<int64_t>(n_groups) * state_size;
  const int64_t PN = static_cast<int64_t>(head_dim) * state_size;
  const int64_t HPN = num_heads * PN;
  const SsmOperands operands{ctx->dry ? nullptr : at(ctx->base[kCaches], state_offset),
                             x, dt, B, C, out, z, static_cast<const float *>(A),
                             static_cast<const float *>(D), static_cast<const float *>(dtBias)};

  if (phase == KILN_RT_PHASE_DECODE && spec) {
    kiln_ssm_update_spec_params_t p{};
    fillSsmParams(p, operands, b, T, num_heads, head_dim, state_size, n_groups, state_dtype,
                  ctx->stream);
    p.num_tokens = T;
    p.intermediate = ctx->dry ? nullptr
                              : at(ctx->base[kCaches], static_cast<uint64_t>(intermediate_offset));
    p.inter_stride_slot = HPN * T;
    p.inter_stride_token = HPN;
    p.inter_stride_head = PN;
    p.inter_stride_dim = state_size;
    p.x_stride_token = HP;
    p.dt_stride_token = num_heads;
    p.B_stride_token = GN;
    p.C_stride_token = GN;
    p.z_stride_token = HP;
    p.out_stride_token = HP;
    ctx->commits[{layer, "ssm"}] =
        CommitEntry{state_offset, static_cast<uint64_t>(intermediate_offset), slotBytes, T};
    if (ctx->dry)
      return kiln::kernels::ok();
    kiln_status_t s = kiln_ssm_update_spec(&p);
    ++ctx->launches;
    if (s != KILN_OK)
      return c.launcher(s, "kiln_ssm_update_spec");
    return kiln::kernels::ok();
  }

  kiln_ssm_update_params_t p{};
  fillSsmParams(p, operands, b, 1, num_heads, head_dim, state_size, n_groups, state_dtype,
                ctx->stream);
  return runStateUpdate(
      c, ctx, phase, layer, "ssm", state_offset, slotBytes, p, kiln_ssm_update,
      "kiln_ssm_update", "kiln_ssm_update (sequential prefill)",
      [&](kiln_ssm_update_params_t &q, int row) {
        q.x = static_cast<const char *>(x) + row * HP * kBf16;
        q.dt = static_cast<const char *>(dt) + static_cast<int64_t>(row) * num_heads * kBf16;
        q.B = static_cast<const char *>(B) + row * GN * kBf16;
        q.C = static_cast<const char *>(C) + row * GN * kBf16;
        q.z = z ? static_cast<const char *>(z) + row * HP * kBf16 : nullptr;
        q.out = static_cast<char *>(out) + row * HP * kBf16;
      });
}

// ---- causal conv1d -----------------------------------------------------------------------

extern "C" kiln_status_t kiln_rt_conv(kiln_rt_context_t *ctx, int32_t phase, int32_t layer,
                                      uint64_t state_offset, int64_t intermediate_offset,
                                      int32_t conv_dim, int32_t kernel_size, int32_t silu,
                                      int32_t kernel) {
  Call c{"kiln_rt_conv", kiln_rt_kernel_name(kernel), layer};
  if (kiln_status_t s = refuseCapture(ctx, c.fn); s != KILN_OK)
    return s;
  if (kiln_status_t s = checkCall(c, ctx, phase); s != KILN_OK)
    return s;
  const LegacyBatch &b = ctx->legacy;
  bool spec = kernel == KILN_RT_KERNEL_CONV_UPDATE_SPEC;
  if (phase == KILN_RT_PHASE_DECODE && kernel != KILN_RT_KERNEL_CONV_UPDATE && !spec)
    return c.error(KILN_ERROR_INVALID_ARGUMENT,
                   "kernel %d (%s) cannot run a conv decode (conv_update or conv_update_spec)",
                   kernel, kiln_rt_kernel_name(kernel));
  if (phase == KILN_RT_PHASE_PREFILL && kernel != KILN_RT_KERNEL_CONV_PREFILL_SEQUENTIAL)
    return c.error(KILN_ERROR_INVALID_ARGUMENT,
                   "kernel %d (%s) cannot run a conv prefill (conv_prefill_sequential)", kernel,
                   kiln_rt_kernel_name(kernel));
  if (conv_dim < 8 || conv_dim % 8 != 0)
    return c.error(KILN_ERROR_UNSUPPORTED, "conv_dim %d unsupported (a positive multiple of 8)",
                   conv_dim);
  if (kernel_size < 2 || kernel_size > 4)
    return c.error(KILN_ERROR_UNSUPPORTED, "kernel_size %d unsupported (2..4)", kernel_size);
  if (kiln_status_t s = checkSlots(c, ctx); s != KILN_OK)
    return s;
  const int W = kernel_size;
  uint64_t slotBytes = static_cast<uint64_t>(conv_dim) * (W - 1) * kBf16;
  if (kiln_status_t s = useResource(c, ctx, "conv_state", state_offset, slotBytes * b.num_slots);
      s != KILN_OK)
    return s;
  int32_t T = b.q_len;
  if (phase == KILN_RT_PHASE_DECODE && !spec && T != 1)
    return c.error(KILN_ERROR_INVALID_ARGUMENT,
                   "batch.q_len %d > 1 needs conv_update_spec (speculation on)", T);
  if (phase == KILN_RT_PHASE_DECODE && spec) {
    if (intermediate_offset < 0)
      return c.error(KILN_ERROR_INVALID_ARGUMENT,
                     "conv_update_spec needs intermediate states (intermediate_offset < 0)");
    if (kiln_status_t s = useResource(c, ctx, "intermediate_conv_state",
                                      static_cast<uint64_t>(intermediate_offset),
                                      slotBytes * T * b.num_slots);
        s != KILN_OK)
      return s;
  }
  void *x, *out, *weight;
  if (kiln_status_t s = requireAllConv(c, ctx, {{"x", &x}, {"out", &out}, {"weight", &weight}}); s != KILN_OK)
    return s;
  void *bias = lookupConv(ctx, layer, "bias");
  if (kiln_status_t s = selectDevice(c, ctx); s != KILN_OK)
    return s;
  const int64_t slotElems = static_cast<int64_t>(conv_dim) * (W - 1);

  if (phase == KILN_RT_PHASE_DECODE && spec) {
    kiln_conv_update_spec_params_t p{};
    p.state = ctx->dry ? nullptr : at(ctx->base[kCaches], state_offset);
    p.state_dtype = KILN_DTYPE_BF16;
    p.state_stride_slot = slotElems;
    p.num_slots = b.num_slots;
    p.state_indices = b.slot_indices;
    p.intermediate = ctx->dry ? nullptr : at(ctx->base[kCaches], static_cast<uint64_t>(intermediate_offset));
    p.inter_stride_slot = slotElems * T;
    p.inter_stride_token = slotElems;
    p.batch = b.batch;
    p.num_tokens = T;
    p.conv_dim = conv_dim;
    p.width = W;
    p.dtype = KILN_DTYPE_BF16;
    p.x = x;
    p.x_stride_batch = static_cast<int64_t>(conv_dim) * T;
    p.x_stride_token = conv_dim;
    p.weight = weight;
    p.bias = bias;
    p.out = out;
    p.out_stride_batch = static_cast<int64_t>(conv_dim) * T;
    p.out_stride_token = conv_dim;
    p.silu = silu ? 1 : 0;
    p.stream = ctx->stream;
    ctx->commits[{layer, "conv"}] =
        CommitEntry{state_offset, static_cast<uint64_t>(intermediate_offset), slotBytes, T};
    if (ctx->dry)
      return kiln::kernels::ok();
    kiln_status_t s = kiln_conv_update_spec(&p);
    ++ctx->launches;
    if (s != KILN_OK)
      return c.launcher(s, "kiln_conv_update_spec");
    return kiln::kernels::ok();
  }

  kiln_conv_update_params_t p{};
  p.state = ctx->dry ? nullptr : at(ctx->base[kCaches], state_offset);
  p.state_dtype = KILN_DTYPE_BF16;
  p.state_stride_slot = slotElems;
  p.num_slots = b.num_slots;
  p.state_indices = b.slot_indices;
  p.batch = b.batch;
  p.conv_dim = conv_dim;
  p.width = W;
  p.dtype = KILN_DTYPE_BF16;
  p.x = x;
  p.x_stride_batch = conv_dim;
  p.weight = weight;
  p.bias = bias;
  p.out = out;
  p.out_stride_batch = conv_dim;
  p.silu = silu ? 1 : 0;
  p.stream = ctx->stream;
  return runStateUpdate(
      c, ctx, phase, layer, "conv", state_offset, slotBytes, p, kiln_conv_update,
      "kiln_conv_update", "kiln_conv_update (sequential prefill)",
      [&](kiln_conv_update_params_t &q, int row) {
        q.x = static_cast<const char *>(x) + static_cast<int64_t>(row) * conv_dim * kBf16;
        q.out = static_cast<char *>(out) + static_cast<int64_t>(row) * conv_dim * kBf16;
      });
}
