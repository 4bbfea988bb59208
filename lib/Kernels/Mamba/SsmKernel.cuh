// Mamba2 selective state update kernel (decode): single-token, spec (T tokens, the state
// after each into the rewind intermediates) and replay (docs/replay.md: the pending
// accepted prefix of the last speculative step folded in first, then T tokens whose
// inputs are kept instead of their states).
//
// Work split: one block of kThreads threads per (row chunk, head, sequence). A state row
// (state_size values of one head_dim index p) is owned by kTpr consecutive lanes, each
// holding kNv 16-byte vectors of it; each thread owns kRows rows, whose loads are all
// issued before any math so that kRows * kNv * 16 bytes per thread are in flight.
// The state stays in registers across the T tokens of the spec variant.
#ifndef KILN_LIB_KERNELS_MAMBA_SSMKERNEL_CUH
#define KILN_LIB_KERNELS_MAMBA_SSMKERNEL_CUH

#include "MambaCommon.cuh"
#include "MambaInternal.h"
#include "StatusInternal.h"

namespace kiln::kernels::mamba {

constexpr int kSsmThreads = 128;
// Rows of the state each thread owns (loads in flight per thread = rows * 16 bytes per
// vector). Overridable at build time for tuning runs only.
#ifndef KILN_MAMBA_SSM_ROWS
#define KILN_MAMBA_SSM_ROWS 4
#endif

template <typename ST, int N> struct SsmConfig {
  static constexpr int kVec = Vec16<ST>::kElems;            // state values per 16 bytes
  static constexpr int kTpr = (N / kVec) < 32 ? (N / kVec) : 32; // threads per row
  static constexpr int kNv = N / (kVec * kTpr);              // vectors per thread per row
  static constexpr int kRowsPerIter = kSsmThreads / kTpr;
  static constexpr int kRows = KILN_MAMBA_SSM_ROWS;          // rows per thread
  static constexpr int kRowsPerBlock = kRowsPerIter * kRows;
  static_assert(kNv * kVec * kTpr == N, "state_size must be a multiple of the vector");
};

enum class SsmMode { single, spec, replay };

// Writes the rows of the state a thread owns (kRows rows of kNv 16-byte vectors each).
template <typename ST, typename Cfg>
__device__ __forceinline__ void storeRows(const float (&s)[Cfg::kRows][Cfg::kNv][Cfg::kVec],
                                          ST *base, int64_t rowStride, int rowBase, int lane,
                                          int headDim) {
#pragma unroll
  for (int r = 0; r < Cfg::kRows; ++r) {
    const int row = rowBase + r * Cfg::kRowsPerIter;
    if (row < headDim)
#pragma unroll
      for (int v = 0; v < Cfg::kNv; ++v)
        store16(base + row * rowStride + (v * Cfg::kTpr + lane) * Cfg::kVec,
                pack16<ST>(s[r][v]));
  }
}

// A speculative replay step keeps token t's inputs in the slot's other replay buffer:
// x by the lane-0 thread of each row, dt by the head's first thread, B by the first
// row's lanes of the group's first head. The copies are exact (the activation dtype,
// and dt as the f32 the update used).
template <typename AT, typename Cfg>
__device__ __forceinline__ void keepReplayInputs(const SsmArgs &a, int slot, int buffer, int t,
                                                 int h, int g, float dt, const AT *Bp,
                                                 const AT *xp, int rowBase, int lane) {
  AT *rx = static_cast<AT *>(a.replayX) + slot * a.rxSlot + buffer * a.rxBuffer +
           t * a.rxToken + h * a.headDim;
  if (lane == 0)
#pragma unroll
    for (int r = 0; r < Cfg::kRows; ++r) {
      const int row = rowBase + r * Cfg::kRowsPerIter;
      if (row < a.headDim)
        rx[row] = xp[row];
    }
  if (blockIdx.x != 0)
    return;
  if (threadIdx.x == 0)
    a.replayDt[slot * a.rdSlot + buffer * a.rdBuffer + h * a.rdHead + t] = dt;
  if (h % a.headsPerGroup == 0 && threadIdx.x < Cfg::kTpr) {
    AT *rb = static_cast<AT *>(a.replayB) + slot * a.rbSlot + buffer * a.rbBuffer +
             t * a.rbToken + g * (Cfg::kNv * Cfg::kTpr * Cfg::kVec);
#pragma unroll
    for (int v = 0; v < Cfg::kNv; ++v)
#pragma unroll
      for (int e = 0; e < Cfg::kVec; ++e)
        rb[(v * Cfg::kTpr + lane) * Cfg::kVec + e] = Bp[(v * Cfg::kTpr + lane) * Cfg::kVec + e];
  }
}

template <typename ST, typename AT, int N, SsmMode kMode>
__global__ void __launch_bounds__(kSsmThreads) ssmUpdateKernel(const SsmArgs a) {
  constexpr bool kReplay = kMode == SsmMode::replay;
  using Cfg = SsmConfig<ST, N>;
  constexpr int kVec = Cfg::kVec, kTpr = Cfg::kTpr, kNv = Cfg::kNv, kRows = Cfg::kRows;
  const int b = blockIdx.z, h = blockIdx.y;
  const int slot = a.indices ? a.indices[b] : b;
  if (slot < 0 || slot >= a.numSlots)
    return; // padding sequence: nothing is read or written
  const int lane = threadIdx.x % kTpr;
  const int rowBase = blockIdx.x * Cfg::kRowsPerBlock + threadIdx.x / kTpr;
  const int g = h / a.headsPerGroup;
  const float A = a.aIsLog ? -expf(a.A[h]) : a.A[h];
  const float dtBias = a.dtBias ? a.dtBias[h] : 0.0f;
  const float Dh = a.D ? a.D[h] : 0.0f;

  const ST *stIn = static_cast<const ST *>(a.stateIn) + slot * a.inSlot + h * a.inHead;
  float s[kRows][kNv][kVec];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int row = rowBase + r * Cfg::kRowsPerIter;
#pragma unroll
    for (int v = 0; v < kNv; ++v) {
      if (row < a.headDim) {
        uint4 u = load16(stIn + row * a.inDim + (v * kTpr + lane) * kVec);
        unpack16<ST>(u, s[r][v]);
      } else {
#pragma unroll
        for (int e = 0; e < kVec; ++e)
          s[r][v][e] = 0.0f;
      }
    }
  }

  // Replay: the tokens of the sequence's last speculative step that were accepted go into
  // the state first, with ssm_update's arithmetic on the same inputs (dt kept after
  // softplus and clamp), so the state is bitwise what single-token steps leave.
  int readBuffer = 0;
  if constexpr (kReplay) {
    const int pending = min(max(a.replay[2 * b], 0), a.replayTokens);
    readBuffer = a.replay[2 * b + 1] & 1;
    for (int t = 0; t < pending; ++t) {
      const float dt = a.replayDt[slot * a.rdSlot + readBuffer * a.rdBuffer + h * a.rdHead + t];
      const float dA = expf(dt * A);
      const AT *Bp = static_cast<const AT *>(a.replayB) + slot * a.rbSlot +
                     readBuffer * a.rbBuffer + t * a.rbToken + g * N;
      const AT *xp = static_cast<const AT *>(a.replayX) + slot * a.rxSlot +
                     readBuffer * a.rxBuffer + t * a.rxToken + h * a.headDim;
      float Bv[kNv][kVec];
#pragma unroll
      for (int v = 0; v < kNv; ++v)
#pragma unroll
        for (int e = 0; e < kVec; ++e)
          Bv[v][e] = toFloat(Bp[(v * kTpr + lane) * kVec + e]);
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const int row = rowBase + r * Cfg::kRowsPerIter;
        const float dtx = dt * (row < a.headDim ? toFloat(xp[row]) : 0.0f);
#pragma unroll
        for (int v = 0; v < kNv; ++v)
#pragma unroll
          for (int e = 0; e < kVec; ++e)
            s[r][v][e] = roundTo<ST>(fmaf(s[r][v][e], dA, dtx * Bv[v][e]));
      }
    }
    // A committing step writes the state after its last token instead.
    if (pending > 0 && (!a.commit || a.numTokens == 0))
      storeRows<ST, Cfg>(s, static_cast<ST *>(a.stateOut) + slot * a.outSlot + h * a.outHead,
                         a.outDim, rowBase, lane, a.headDim);
  }

  const int numTokens = kMode == SsmMode::single ? 1 : a.numTokens;
  for (int t = 0; t < numTokens; ++t) {
    const float dt =
        stepSize(toFloat(static_cast<const AT *>(a.dt)[b * a.dtBatch + t * a.dtToken + h]),
                 dtBias, a.dtSoftplus, a.dtMin, a.dtMax);
    const float dA = expf(dt * A);
    const AT *Bp = static_cast<const AT *>(a.B) + b * a.bBatch + t * a.bToken + g * a.bGroup;
    const AT *Cp = static_cast<const AT *>(a.C) + b * a.cBatch + t * a.cToken + g * a.cGroup;
    float Bv[kNv][kVec], Cv[kNv][kVec];
#pragma unroll
    for (int v = 0; v < kNv; ++v)
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        Bv[v][e] = toFloat(Bp[(v * kTpr + lane) * kVec + e]);
        Cv[v][e] = toFloat(Cp[(v * kTpr + lane) * kVec + e]);
      }
    const AT *xp = static_cast<const AT *>(a.x) + b * a.xBatch + t * a.xToken + h * a.xHead;
    if constexpr (kReplay)
      if (!a.commit)
        keepReplayInputs<AT, Cfg>(a, slot, 1 - readBuffer, t, h, g, dt, Bp, xp, rowBase, lane);
    // single: the state in place; spec: intermediate t; replay: the state, after the
    // last token of a committing step only.
    const bool storeState = !kReplay || (a.commit && t == numTokens - 1);
    ST *stOut = static_cast<ST *>(a.stateOut) + slot * a.outSlot + t * a.outToken + h * a.outHead;
    float xv[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int row = rowBase + r * Cfg::kRowsPerIter;
      xv[r] = row < a.headDim ? toFloat(xp[row]) : 0.0f;
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int row = rowBase + r * Cfg::kRowsPerIter;
      const float dtx = dt * xv[r];
      float acc = 0.0f;
#pragma unroll
      for (int v = 0; v < kNv; ++v)
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          const float val = roundTo<ST>(fmaf(s[r][v][e], dA, dtx * Bv[v][e]));
          s[r][v][e] = val;
          acc = fmaf(val, Cv[v][e], acc);
        }
#pragma unroll
      for (int off = kTpr / 2; off > 0; off >>= 1)
        acc += __shfl_xor_sync(0xffffffffu, acc, off);
      if (row < a.headDim) {
        if (storeState)
#pragma unroll
          for (int v = 0; v < kNv; ++v)
            store16(stOut + row * a.outDim + (v * kTpr + lane) * kVec, pack16<ST>(s[r][v]));
        if (lane == 0) {
          float y = fmaf(Dh, xv[r], acc);
          if (a.z) {
            const float zv = toFloat(static_cast<const AT *>(
                a.z)[b * a.zBatch + t * a.zToken + h * a.zHead + row]);
            y *= siluf(zv);
          }
          static_cast<AT *>(a.out)[b * a.yBatch + t * a.yToken + h * a.yHead + row] =
              fromFloat<AT>(y);
        }
      }
    }
  }
}

template <SsmMode kMode>
kiln_status_t launchSsm(const SsmArgs &a, kiln_dtype_t stateDtype, kiln_dtype_t dtype,
                        int stateSize, void *stream, const char *name) {
  auto go = [&](auto stTag, auto atTag, auto nTag) -> kiln_status_t {
    using ST = decltype(stTag);
    using AT = decltype(atTag);
    constexpr int N = decltype(nTag)::value;
    using Cfg = SsmConfig<ST, N>;
    dim3 grid((a.headDim + Cfg::kRowsPerBlock - 1) / Cfg::kRowsPerBlock, a.heads, a.batch);
    ssmUpdateKernel<ST, AT, N, kMode>
        <<<grid, kSsmThreads, 0, static_cast<cudaStream_t>(stream)>>>(a);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess)
      return fail(KILN_ERROR_CUDA, "%s: kernel launch failed: %s", name,
                  cudaGetErrorString(err));
    return ok();
  };
  auto byN = [&](auto stTag, auto atTag) -> kiln_status_t {
    switch (stateSize) {
    case 64:
      return go(stTag, atTag, std::integral_constant<int, 64>());
    case 128:
      return go(stTag, atTag, std::integral_constant<int, 128>());
    case 256:
      return go(stTag, atTag, std::integral_constant<int, 256>());
    }
    return fail(KILN_ERROR_UNSUPPORTED, "%s: state_size %d not instantiated", name, stateSize);
  };
  auto byAt = [&](auto stTag) -> kiln_status_t {
    if (dtype == KILN_DTYPE_BF16)
      return byN(stTag, __nv_bfloat16());
    if (dtype == KILN_DTYPE_F16)
      return byN(stTag, __half());
    return fail(KILN_ERROR_UNSUPPORTED, "%s: dtype not instantiated", name);
  };
  if (stateDtype == KILN_DTYPE_F32)
    return byAt(float());
  if (stateDtype == KILN_DTYPE_BF16)
    return byAt(__nv_bfloat16());
  return fail(KILN_ERROR_UNSUPPORTED, "%s: state_dtype not instantiated", name);
}

} // namespace kiln::kernels::mamba

#endif
