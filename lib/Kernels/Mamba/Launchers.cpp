// C ABI launchers of the Mamba2 decode kernels: argument validation (before any CUDA
// call, so it also runs on machines without a GPU), stride defaults, dispatch.
#include "kiln/Kernels/Mamba.h"

#include "MambaInternal.h"
#include "ArgChecker.h"
#include "StatusInternal.h"

#include <cstdint>

using namespace kiln::kernels;
using namespace kiln::kernels::mamba;

namespace {

int elemSize(kiln_dtype_t t) { return t == KILN_DTYPE_F32 ? 4 : 2; }

// The Mamba launchers' checks: the shared ones and the activation dtypes.
struct Checker : ArgChecker {
  using ArgChecker::ArgChecker;
  bool activationDtype(kiln_dtype_t t, const char *arg) {
    if (t == KILN_DTYPE_BF16 || t == KILN_DTYPE_F16)
      return true;
    status = fail(KILN_ERROR_UNSUPPORTED, "%s: %s must be BF16 or F16 (got %d)", kernel, arg,
                  static_cast<int>(t));
    return false;
  }
};

constexpr int64_t kMaxGridYZ = 65535;
constexpr int32_t kMaxTokens = 64;

// Shared part of the ssm checks; `T` is 1 for the single-token kernel.
struct SsmCommon {
  const void *state;
  kiln_dtype_t stateDtype;
  int32_t numSlots;
  const int32_t *indices;
  int32_t batch, T, heads, headDim, stateSize, nGroups;
  kiln_dtype_t dtype;
  const void *x, *dt;
  const float *A;
  const void *B, *C, *out;
  bool hasTokens = true; // false: a replay fold with no tokens of its own
};

bool checkSsmCommon(Checker &c, const SsmCommon &p) {
  if (!c.notNull(p.state, "state") || !c.notNull(p.A, "A"))
    return false;
  if (p.hasTokens && (!c.notNull(p.x, "x") || !c.notNull(p.dt, "dt") || !c.notNull(p.B, "B") ||
                      !c.notNull(p.C, "C") || !c.notNull(p.out, "out")))
    return false;
  if (p.stateDtype != KILN_DTYPE_F32 && p.stateDtype != KILN_DTYPE_BF16) {
    c.status = fail(KILN_ERROR_UNSUPPORTED, "%s: state_dtype must be F32 or BF16 (got %d)",
                    c.kernel, static_cast<int>(p.stateDtype));
    return false;
  }
  if (!c.activationDtype(p.dtype, "dtype"))
    return false;
  if (p.batch < 0) {
    c.status = fail(KILN_ERROR_INVALID_ARGUMENT, "%s: batch is negative (%d)", c.kernel, p.batch);
    return false;
  }
  if (!c.atMost(p.batch, kMaxGridYZ, "batch") || !c.positive(p.numSlots, "num_slots") ||
      !c.positive(p.heads, "heads") || !c.atMost(p.heads, kMaxGridYZ, "heads") ||
      !c.positive(p.headDim, "head_dim") || !c.positive(p.stateSize, "state_size") ||
      !c.positive(p.nGroups, "n_groups") ||
      (p.hasTokens && !c.positive(p.T, "num_tokens")) ||
      !c.atMost(p.T, kMaxTokens, "num_tokens"))
    return false;
  if (p.stateSize != 64 && p.stateSize != 128 && p.stateSize != 256) {
    c.status = fail(KILN_ERROR_UNSUPPORTED, "%s: state_size %d not supported (64, 128, 256)",
                    c.kernel, p.stateSize);
    return false;
  }
  if (p.heads % p.nGroups != 0) {
    c.status = fail(KILN_ERROR_INVALID_ARGUMENT,
                    "%s: heads (%d) is not divisible by n_groups (%d)", c.kernel, p.heads,
                    p.nGroups);
    return false;
  }
  if (!p.indices && p.batch > p.numSlots) {
    c.status = fail(KILN_ERROR_INVALID_ARGUMENT,
                    "%s: state_indices is null and batch (%d) > num_slots (%d)", c.kernel,
                    p.batch, p.numSlots);
    return false;
  }
  return c.aligned16(p.state, "state");
}

// The launch fields the single-token and the speculative ssm launchers take from their
// params alike (the params structs share these member names).
template <typename Params>
void fillSsmOperands(SsmArgs &a, const Params &p, int32_t numTokens) {
  a.numSlots = p.num_slots;
  a.indices = p.state_indices;
  a.batch = p.batch;
  a.numTokens = numTokens;
  a.heads = p.heads;
  a.headDim = p.head_dim;
  a.headsPerGroup = p.heads / p.n_groups;
  a.x = p.x;
  a.dt = p.dt;
  a.dtBias = p.dt_bias;
  a.A = p.A;
  a.D = p.D;
  a.B = p.B;
  a.C = p.C;
  a.z = p.z;
  a.out = p.out;
  a.dtSoftplus = p.dt_softplus;
  a.aIsLog = p.a_is_log;
  a.dtMin = p.dt_min;
  a.dtMax = p.dt_max;
}


// The state is written where it is read (ssm_update, ssm_update_replay).
void updateInPlace(SsmArgs &a, void *state) {
  a.stateIn = state;
  a.stateOut = state;
  a.outSlot = a.inSlot;
  a.outHead = a.inHead;
  a.outDim = a.inDim;
  a.outToken = 0;
}

// The state's strides (defaults filled in): 16-byte rows, and rows of at least
// state_size values. `a.in*` take them.
template <typename Params>
bool takeStateStrides(Checker &c, SsmArgs &a, const Params &p) {
  const int64_t H = p.heads, P = p.head_dim, N = p.state_size;
  const int se = elemSize(p.state_dtype);
  a.inDim = p.state_stride_dim;
  a.inHead = p.state_stride_head;
  a.inSlot = p.state_stride_slot;
  if (!c.vecStride(a.inDim, N, se, "state_stride_dim") ||
      !c.vecStride(a.inHead, P * a.inDim, se, "state_stride_head") ||
      !c.vecStride(a.inSlot, H * a.inHead, se, "state_stride_slot"))
    return false;
  if (a.inDim < N) {
    c.status = fail(KILN_ERROR_INVALID_ARGUMENT, "%s: state_stride_dim (%lld) < state_size (%lld)",
                    c.kernel, static_cast<long long>(a.inDim), static_cast<long long>(N));
    return false;
  }
  return true;
}

// The activation strides of a multi-token launcher (spec, replay): defaults filled in,
// each checked against its packed value for T tokens a sequence.
template <typename Params>
bool takeTokenStrides(Checker &c, SsmArgs &a, const Params &p, int64_t T) {
  const int64_t H = p.heads, P = p.head_dim, N = p.state_size, G = p.n_groups;
  a.xBatch = p.x_stride_batch;
  a.xToken = p.x_stride_token;
  a.xHead = p.x_stride_head;
  a.dtBatch = p.dt_stride_batch;
  a.dtToken = p.dt_stride_token;
  a.bBatch = p.B_stride_batch;
  a.bToken = p.B_stride_token;
  a.bGroup = p.B_stride_group;
  a.cBatch = p.C_stride_batch;
  a.cToken = p.C_stride_token;
  a.cGroup = p.C_stride_group;
  a.zBatch = p.z_stride_batch;
  a.zToken = p.z_stride_token;
  a.zHead = p.z_stride_head;
  a.yBatch = p.out_stride_batch;
  a.yToken = p.out_stride_token;
  a.yHead = p.out_stride_head;
  if (!c.stride(a.xHead, P, "x_stride_head") || !c.stride(a.xToken, H * P, "x_stride_token") ||
      !c.stride(a.xBatch, T * H * P, "x_stride_batch") ||
      !c.stride(a.dtToken, H, "dt_stride_token") ||
      !c.stride(a.dtBatch, T * H, "dt_stride_batch") ||
      !c.stride(a.bGroup, N, "B_stride_group") || !c.stride(a.bToken, G * N, "B_stride_token") ||
      !c.stride(a.bBatch, T * G * N, "B_stride_batch") ||
      !c.stride(a.cGroup, N, "C_stride_group") || !c.stride(a.cToken, G * N, "C_stride_token") ||
      !c.stride(a.cBatch, T * G * N, "C_stride_batch") ||
      !c.stride(a.zHead, P, "z_stride_head") || !c.stride(a.zToken, H * P, "z_stride_token") ||
      !c.stride(a.zBatch, T * H * P, "z_stride_batch") ||
      !c.stride(a.yHead, P, "out_stride_head") ||
      !c.stride(a.yToken, H * P, "out_stride_token") ||
      !c.stride(a.yBatch, T * H * P, "out_stride_batch"))
    return false;
  return true;
}
} // namespace

extern "C" kiln_status_t kiln_ssm_update(const kiln_ssm_update_params_t *params) {
  Checker c{"ssm_update"};
  if (!c.notNull(params, "params"))
    return c.status;
  const kiln_ssm_update_params_t &p = *params;
  SsmCommon common{p.state, p.state_dtype, p.num_slots, p.state_indices, p.batch, 1,
                   p.heads, p.head_dim, p.state_size, p.n_groups, p.dtype, p.x, p.dt, p.A,
                   p.B, p.C, p.out};
  if (!checkSsmCommon(c, common))
    return c.status;
  const int64_t H = p.heads, P = p.head_dim, N = p.state_size, G = p.n_groups;
  SsmArgs a{};
  if (!takeStateStrides(c, a, p))
    return c.status;
  a.xBatch = p.x_stride_batch;
  a.xHead = p.x_stride_head;
  a.dtBatch = p.dt_stride_batch;
  a.bBatch = p.B_stride_batch;
  a.bGroup = p.B_stride_group;
  a.cBatch = p.C_stride_batch;
  a.cGroup = p.C_stride_group;
  a.zBatch = p.z_stride_batch;
  a.zHead = p.z_stride_head;
  a.yBatch = p.out_stride_batch;
  a.yHead = p.out_stride_head;
  if (!c.stride(a.xHead, P, "x_stride_head") || !c.stride(a.xBatch, H * P, "x_stride_batch") ||
      !c.stride(a.dtBatch, H, "dt_stride_batch") ||
      !c.stride(a.bGroup, N, "B_stride_group") || !c.stride(a.bBatch, G * N, "B_stride_batch") ||
      !c.stride(a.cGroup, N, "C_stride_group") || !c.stride(a.cBatch, G * N, "C_stride_batch") ||
      !c.stride(a.zHead, P, "z_stride_head") || !c.stride(a.zBatch, H * P, "z_stride_batch") ||
      !c.stride(a.yHead, P, "out_stride_head") || !c.stride(a.yBatch, H * P, "out_stride_batch"))
    return c.status;
  if (p.batch == 0)
    return ok();
  updateInPlace(a, p.state);
  fillSsmOperands(a, p, 1);
  return launchSsmUpdate(a, p.state_dtype, p.dtype, p.state_size, p.stream);
}

extern "C" kiln_status_t kiln_ssm_update_spec(const kiln_ssm_update_spec_params_t *params) {
  Checker c{"ssm_update_spec"};
  if (!c.notNull(params, "params"))
    return c.status;
  const kiln_ssm_update_spec_params_t &p = *params;
  SsmCommon common{p.state, p.state_dtype, p.num_slots, p.state_indices, p.batch,
                   p.num_tokens, p.heads, p.head_dim, p.state_size, p.n_groups, p.dtype,
                   p.x, p.dt, p.A, p.B, p.C, p.out};
  if (!checkSsmCommon(c, common))
    return c.status;
  if (!c.notNull(p.intermediate, "intermediate") || !c.aligned16(p.intermediate, "intermediate"))
    return c.status;
  const int64_t T = p.num_tokens, H = p.heads, P = p.head_dim, N = p.state_size;
  const int se = elemSize(p.state_dtype);
  SsmArgs a{};
  if (!takeStateStrides(c, a, p))
    return c.status;
  a.outDim = p.inter_stride_dim;
  a.outHead = p.inter_stride_head;
  a.outToken = p.inter_stride_token;
  a.outSlot = p.inter_stride_slot;
  if (!c.vecStride(a.outDim, N, se, "inter_stride_dim") ||
      !c.vecStride(a.outHead, P * a.outDim, se, "inter_stride_head") ||
      !c.vecStride(a.outToken, H * a.outHead, se, "inter_stride_token") ||
      !c.vecStride(a.outSlot, T * a.outToken, se, "inter_stride_slot"))
    return c.status;
  if (a.outDim < N)
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "ssm_update_spec: inter_stride_dim (%lld) < state_size (%lld)",
                static_cast<long long>(a.outDim), static_cast<long long>(N));
  if (!takeTokenStrides(c, a, p, T))
    return c.status;
  if (p.batch == 0)
    return ok();
  a.stateIn = p.state;
  a.stateOut = p.intermediate;
  fillSsmOperands(a, p, p.num_tokens);
  return launchSsmUpdateSpec(a, p.state_dtype, p.dtype, p.state_size, p.stream);
}

namespace {

struct ConvCommon {
  const void *state;
  kiln_dtype_t stateDtype;
  int32_t numSlots;
  const int32_t *indices;
  int32_t batch, T, convDim, width;
  kiln_dtype_t dtype;
  const void *x, *weight, *bias, *out;
};

bool checkConvCommon(Checker &c, const ConvCommon &p) {
  if (!c.notNull(p.state, "state") || !c.notNull(p.x, "x") ||
      !c.notNull(p.weight, "weight") || !c.notNull(p.out, "out"))
    return false;
  if (!c.activationDtype(p.dtype, "dtype"))
    return false;
  if (p.stateDtype != p.dtype && p.stateDtype != KILN_DTYPE_F32) {
    c.status = fail(KILN_ERROR_UNSUPPORTED,
                    "%s: state_dtype must equal dtype or be F32 (got %d, dtype %d)", c.kernel,
                    static_cast<int>(p.stateDtype), static_cast<int>(p.dtype));
    return false;
  }
  if (p.batch < 0) {
    c.status = fail(KILN_ERROR_INVALID_ARGUMENT, "%s: batch is negative (%d)", c.kernel, p.batch);
    return false;
  }
  if (!c.atMost(p.batch, kMaxGridYZ, "batch") || !c.positive(p.numSlots, "num_slots") ||
      !c.positive(p.convDim, "conv_dim") || !c.positive(p.T, "num_tokens") ||
      !c.atMost(p.T, kMaxTokens, "num_tokens"))
    return false;
  if (p.width < 2 || p.width > 4) {
    c.status = fail(KILN_ERROR_UNSUPPORTED, "%s: width %d not supported (2..4)", c.kernel,
                    p.width);
    return false;
  }
  if (p.convDim % 8 != 0) {
    c.status = fail(KILN_ERROR_UNSUPPORTED, "%s: conv_dim %d is not a multiple of 8", c.kernel,
                    p.convDim);
    return false;
  }
  if (!p.indices && p.batch > p.numSlots) {
    c.status = fail(KILN_ERROR_INVALID_ARGUMENT,
                    "%s: state_indices is null and batch (%d) > num_slots (%d)", c.kernel,
                    p.batch, p.numSlots);
    return false;
  }
  return c.aligned16(p.state, "state") && c.aligned16(p.x, "x") &&
         c.aligned16(p.weight, "weight") && (!p.bias || c.aligned16(p.bias, "bias")) &&
         c.aligned16(p.out, "out");
}

// The launch fields both conv launchers take from their params alike.
template <typename Params>
void fillConvOperands(ConvArgs &a, const Params &p, int32_t numTokens) {
  a.numSlots = p.num_slots;
  a.indices = p.state_indices;
  a.batch = p.batch;
  a.numTokens = numTokens;
  a.convDim = p.conv_dim;
  a.x = p.x;
  a.weight = p.weight;
  a.bias = p.bias;
  a.out = p.out;
  a.silu = p.silu;
}

} // namespace

extern "C" kiln_status_t kiln_conv_update(const kiln_conv_update_params_t *params) {
  Checker c{"conv_update"};
  if (!c.notNull(params, "params"))
    return c.status;
  const kiln_conv_update_params_t &p = *params;
  ConvCommon common{p.state, p.state_dtype, p.num_slots, p.state_indices, p.batch, 1,
                    p.conv_dim, p.width, p.dtype, p.x, p.weight, p.bias, p.out};
  if (!checkConvCommon(c, common))
    return c.status;
  const int64_t D = p.conv_dim, K = p.width - 1;
  ConvArgs a{};
  a.inSlot = p.state_stride_slot;
  a.xBatch = p.x_stride_batch;
  a.yBatch = p.out_stride_batch;
  if (!c.vecStride(a.inSlot, D * K, elemSize(p.state_dtype), "state_stride_slot") ||
      !c.vecStride(a.xBatch, D, 2, "x_stride_batch") ||
      !c.vecStride(a.yBatch, D, 2, "out_stride_batch"))
    return c.status;
  if (p.batch == 0)
    return ok();
  a.stateIn = p.state;
  a.stateOut = p.state;
  a.outSlot = a.inSlot;
  a.outToken = 0;
  fillConvOperands(a, p, 1);
  return launchConvUpdate(a, p.state_dtype, p.dtype, p.width, false, p.stream);
}

extern "C" kiln_status_t kiln_conv_update_spec(const kiln_conv_update_spec_params_t *params) {
  Checker c{"conv_update_spec"};
  if (!c.notNull(params, "params"))
    return c.status;
  const kiln_conv_update_spec_params_t &p = *params;
  ConvCommon common{p.state, p.state_dtype, p.num_slots, p.state_indices, p.batch,
                    p.num_tokens, p.conv_dim, p.width, p.dtype, p.x, p.weight, p.bias, p.out};
  if (!checkConvCommon(c, common))
    return c.status;
  if (!c.notNull(p.intermediate, "intermediate") || !c.aligned16(p.intermediate, "intermediate"))
    return c.status;
  const int64_t D = p.conv_dim, K = p.width - 1, T = p.num_tokens;
  const int se = elemSize(p.state_dtype);
  ConvArgs a{};
  a.inSlot = p.state_stride_slot;
  a.outToken = p.inter_stride_token;
  a.outSlot = p.inter_stride_slot;
  a.xToken = p.x_stride_token;
  a.xBatch = p.x_stride_batch;
  a.yToken = p.out_stride_token;
  a.yBatch = p.out_stride_batch;
  if (!c.vecStride(a.inSlot, D * K, se, "state_stride_slot") ||
      !c.vecStride(a.outToken, D * K, se, "inter_stride_token") ||
      !c.vecStride(a.outSlot, T * a.outToken, se, "inter_stride_slot") ||
      !c.vecStride(a.xToken, D, 2, "x_stride_token") ||
      !c.vecStride(a.xBatch, T * D, 2, "x_stride_batch") ||
      !c.vecStride(a.yToken, D, 2, "out_stride_token") ||
      !c.vecStride(a.yBatch, T * D, 2, "out_stride_batch"))
    return c.status;
  if (p.batch == 0)
    return ok();
  a.stateIn = p.state;
  a.stateOut = p.intermediate;
  fillConvOperands(a, p, p.num_tokens);
  return launchConvUpdate(a, p.state_dtype, p.dtype, p.width, true, p.stream);
}

extern "C" kiln_status_t kiln_ssm_chunk_scan(const kiln_ssm_chunk_scan_params_t *params) {
  Checker c{"ssm_chunk_scan"};
  if (!c.notNull(params, "params"))
    return c.status;
  const kiln_ssm_chunk_scan_params_t &p = *params;
  SsmCommon common{p.state, p.state_dtype, p.num_slots, p.state_indices, p.batch, 1,
                   p.heads, p.head_dim, p.state_size, p.n_groups, p.dtype, p.x, p.dt, p.A,
                   p.B, p.C, p.out};
  if (!checkSsmCommon(c, common) || !c.notNull(p.cu_seqlens, "cu_seqlens") ||
      !c.elementAligned(p.cu_seqlens, 4, "cu_seqlens"))
    return c.status;
  const int64_t H = p.heads, P = p.head_dim, N = p.state_size, G = p.n_groups;
  ChunkScanArgs a{};
  a.stDim = p.state_stride_dim;
  a.stHead = p.state_stride_head;
  a.stSlot = p.state_stride_slot;
  a.xToken = p.x_stride_token;
  a.dtToken = p.dt_stride_token;
  a.bToken = p.B_stride_token;
  a.cToken = p.C_stride_token;
  a.yToken = p.out_stride_token;
  if (!c.stride(a.stDim, N, "state_stride_dim") ||
      !c.stride(a.stHead, P * a.stDim, "state_stride_head") ||
      !c.stride(a.stSlot, H * a.stHead, "state_stride_slot") ||
      !c.stride(a.xToken, H * P, "x_stride_token") || !c.stride(a.dtToken, H, "dt_stride_token") ||
      !c.stride(a.bToken, G * N, "B_stride_token") || !c.stride(a.cToken, G * N, "C_stride_token") ||
      !c.stride(a.yToken, H * P, "out_stride_token"))
    return c.status;
  if (a.stDim < N || a.stHead < P * a.stDim || a.stSlot < H * a.stHead)
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "ssm_chunk_scan: the state strides (%lld, %lld, %lld) overlap a [%lld, %lld, "
                "%lld] slot",
                static_cast<long long>(a.stSlot), static_cast<long long>(a.stHead),
                static_cast<long long>(a.stDim), static_cast<long long>(H),
                static_cast<long long>(P), static_cast<long long>(N));
  if (p.batch == 0)
    return ok();
  a.state = p.state;
  a.numSlots = p.num_slots;
  a.indices = p.state_indices;
  a.cuSeqlens = p.cu_seqlens;
  a.batch = p.batch;
  a.heads = p.heads;
  a.headDim = p.head_dim;
  a.stateSize = p.state_size;
  a.headsPerGroup = p.heads / p.n_groups;
  a.half = p.dtype == KILN_DTYPE_F16;
  a.x = p.x;
  a.dt = p.dt;
  a.B = p.B;
  a.C = p.C;
  a.dtBias = p.dt_bias;
  a.A = p.A;
  a.D = p.D;
  a.out = p.out;
  a.dtSoftplus = p.dt_softplus;
  a.aIsLog = p.a_is_log;
  a.dtMin = p.dt_min;
  a.dtMax = p.dt_max;
  return launchSsmChunkScan(a, p.state_dtype, p.stream);
}

extern "C" kiln_status_t kiln_conv_prefill(const kiln_conv_prefill_params_t *params) {
  Checker c{"conv_prefill"};
  if (!c.notNull(params, "params"))
    return c.status;
  const kiln_conv_prefill_params_t &p = *params;
  ConvCommon common{p.state, p.state_dtype, p.num_slots, p.state_indices, p.batch, 1,
                    p.conv_dim, p.width, p.dtype, p.x, p.weight, p.bias, p.out};
  if (!checkConvCommon(c, common) || !c.notNull(p.cu_seqlens, "cu_seqlens") ||
      !c.elementAligned(p.cu_seqlens, 4, "cu_seqlens") ||
      !c.atMost(p.max_tokens, int64_t{1} << 31, "max_tokens"))
    return c.status;
  if (p.max_tokens < 0)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "conv_prefill: max_tokens is negative (%lld)",
                static_cast<long long>(p.max_tokens));
  const int64_t D = p.conv_dim, K = p.width - 1;
  ConvPrefillArgs a{};
  a.stSlot = p.state_stride_slot;
  a.xToken = p.x_stride_token;
  a.yToken = p.out_stride_token;
  if (!c.stride(a.stSlot, D * K, "state_stride_slot") ||
      !c.stride(a.xToken, D, "x_stride_token") || !c.stride(a.yToken, D, "out_stride_token"))
    return c.status;
  if (p.batch == 0 || p.max_tokens == 0)
    return ok();
  a.state = p.state;
  a.numSlots = p.num_slots;
  a.indices = p.state_indices;
  a.cuSeqlens = p.cu_seqlens;
  a.batch = p.batch;
  a.convDim = p.conv_dim;
  a.width = p.width;
  a.maxTokens = p.max_tokens;
  a.x = p.x;
  a.weight = p.weight;
  a.bias = p.bias;
  a.out = p.out;
  a.silu = p.silu;
  return launchConvPrefill(a, p.state_dtype, p.dtype, p.stream);
}

extern "C" kiln_status_t kiln_ssm_update_replay(const kiln_ssm_update_replay_params_t *params) {
  Checker c{"ssm_update_replay"};
  if (!c.notNull(params, "params"))
    return c.status;
  const kiln_ssm_update_replay_params_t &p = *params;
  if (p.num_tokens < 0 || (p.num_tokens == 0 && !p.commit))
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "ssm_update_replay: num_tokens %d: a speculative step has at least one token "
                "(0 only folds the pending prefix, with commit set)", p.num_tokens);
  SsmCommon common{p.state, p.state_dtype, p.num_slots, p.state_indices, p.batch,
                   p.num_tokens, p.heads, p.head_dim, p.state_size, p.n_groups, p.dtype,
                   p.x, p.dt, p.A, p.B, p.C, p.out, p.num_tokens > 0};
  if (!checkSsmCommon(c, common))
    return c.status;
  if (!c.notNull(p.replay, "replay") || !c.notNull(p.replay_x, "replay_x") ||
      !c.notNull(p.replay_B, "replay_B") || !c.notNull(p.replay_dt, "replay_dt") ||
      !c.elementAligned(p.replay, 4, "replay") || !c.elementAligned(p.replay_x, 2, "replay_x") ||
      !c.elementAligned(p.replay_B, 2, "replay_B") ||
      !c.elementAligned(p.replay_dt, 4, "replay_dt") ||
      !c.positive(p.max_tokens, "max_tokens") || !c.atMost(p.max_tokens, kMaxTokens, "max_tokens"))
    return c.status;
  if (!p.commit && p.num_tokens > p.max_tokens)
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "ssm_update_replay: num_tokens %d > max_tokens %d: a speculative step's "
                "inputs must fit a replay buffer", p.num_tokens, p.max_tokens);
  const int64_t T = p.num_tokens, H = p.heads, P = p.head_dim, N = p.state_size,
                G = p.n_groups, R = p.max_tokens;
  SsmArgs a{};
  if (!takeStateStrides(c, a, p))
    return c.status;
  if (T > 0 && !takeTokenStrides(c, a, p, T))
    return c.status;
  if (p.batch == 0)
    return ok();
  updateInPlace(a, p.state);
  a.replay = p.replay;
  a.replayX = p.replay_x;
  a.replayB = p.replay_B;
  a.replayDt = p.replay_dt;
  a.rxToken = H * P;
  a.rxBuffer = R * a.rxToken;
  a.rxSlot = 2 * a.rxBuffer;
  a.rbToken = G * N;
  a.rbBuffer = R * a.rbToken;
  a.rbSlot = 2 * a.rbBuffer;
  a.rdHead = R;
  a.rdBuffer = H * R;
  a.rdSlot = 2 * a.rdBuffer;
  a.replayTokens = p.max_tokens;
  a.commit = p.commit ? 1 : 0;
  fillSsmOperands(a, p, p.num_tokens);
  return launchSsmUpdateReplay(a, p.state_dtype, p.dtype, p.state_size, p.stream);
}
