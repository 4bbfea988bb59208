// The Gated DeltaNet decode update (include/kiln/Kernels/GatedDeltaNet.h).
//
// Two kernels, one arithmetic. Thread (half, c) of a block owns state column c in the
// rows of its half (KD / 2 floats in registers), so reading and writing the state is
// coalesced along c; per token the two halves' partial sums of S^T k and S^T q meet in
// shared memory. Every output and intermediate state is computed by the same
// instructions in both modes, so the speculative intermediates equal the in-place states
// bit for bit, and both kernels compute the same fp32 operations in the same order, so
// they give the same bits too.
//
// - gdnUpdateBaselineKernel: one block of 2 v_dim threads per (value head, sequence). It
//   needs 215 registers a thread at k_dim 128 (ptxas, sm_90a), so one block fits an SM:
//   the SM's only 64 KiB state is loaded, computed on and stored in turn, with nothing
//   else in flight (72-78% of the copy ceiling on an H100, docs/kernels-gdn.md). Kept
//   for the benchmark's comparison.
// - gdnUpdateSplitKernel: a (head, sequence)'s columns split over v_dim / kCols blocks of
//   2 kCols threads, with __launch_bounds__ asking for kMinBlocks blocks an SM, so that
//   several states are in flight an SM and one block's compute overlaps the others'
//   loads and stores. Its access forms (GdnAccess) move the same bytes at other times:
//   evict-first state accesses, and the last wave's states prefetched into the L2 by the
//   wave before, for launches of few waves (issue 17's TP 4 at batch 64).
//
// Replay mode (gdn_update_replay, docs/replay.md) is the split kernel with GdnMode::replay:
// before the step's tokens it folds the sequence's pending accepted tokens from their kept
// inputs through the same per-token function (applyToken) the step's tokens take, so the
// folded state is the in-place update's bit for bit; a verify step keeps its tokens'
// inputs instead of their states.
#include "GdnInternal.h"

#include "StatusInternal.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <type_traits>

namespace kiln::kernels::gdn {
namespace {

constexpr int kHalves = 2; // row halves: blockDim.x = 2 * v_dim

struct GdnArgs {
  float *state;
  float *intermediate;
  const int32_t *indices;
  int32_t numSlots, numTokens, kHeads, vHeads, vDim;
  int32_t interTokens; // token states a slot's intermediates hold (>= numTokens)
  const void *q, *k, *v;
  const float *g, *beta;
  void *out;
  int32_t l2norm;
  float scale;
  // Replay mode: the sequences' {pending, buffer} pairs and the slots' two buffers of kept
  // inputs (GatedDeltaNet.h's layouts), replayTokens tokens a buffer.
  const int32_t *replay;
  void *replayK, *replayV;
  float *replayGb;
  int32_t replayTokens;
  // Prefetching variants (kPrefetch): block b (in launch order) prefetches into the L2 the
  // state of block b + prefetchAhead, the block that will run in its place, when that
  // block is >= prefetchFirst; prefetchAhead 0: none.
  int32_t prefetchAhead, prefetchFirst;
};

template <typename T> __device__ float toFloat(T x);
template <> __device__ float toFloat(__nv_bfloat16 x) { return __bfloat162float(x); }
template <> __device__ float toFloat(__half x) { return __half2float(x); }
template <typename T> __device__ T fromFloat(float x);
template <> __device__ __nv_bfloat16 fromFloat(float x) { return __float2bfloat16(x); }
template <> __device__ __half fromFloat(float x) { return __float2half(x); }

// 1 / sqrt(sum(x^2) + 1e-6) over `n` values in shared memory (every thread computes it:
// n is at most 128 and the values are hot in shared memory).
__device__ float inverseNorm(const float *x, int n) {
  float sum = 0.0f;
  for (int i = 0; i < n; ++i)
    sum += x[i] * x[i];
  return rsqrtf(sum + 1e-6f);
}

template <typename T, int KD>
__global__ void __launch_bounds__(256) gdnUpdateBaselineKernel(GdnArgs a) {
  constexpr int kRows = KD / kHalves;
  const int head = blockIdx.x, seq = blockIdx.y;
  const int vd = a.vDim;
  const int c = threadIdx.x % vd, half = threadIdx.x / vd;
  const int slot = a.indices ? a.indices[seq] : seq;
  if (slot < 0 || slot >= a.numSlots)
    return; // padding: nothing read or written
  const int keyHead = head / (a.vHeads / a.kHeads);
  const size_t headState = static_cast<size_t>(KD) * vd;
  float *state = a.state + (static_cast<size_t>(slot) * a.vHeads + head) * headState;

  __shared__ float qs[KD], ks[KD], partial[kHalves][128];
  float s[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
    s[r] = state[(half * kRows + r) * vd + c];

  for (int t = 0; t < a.numTokens; ++t) {
    const size_t token = static_cast<size_t>(seq) * a.numTokens + t;
    const T *q = static_cast<const T *>(a.q) + (token * a.kHeads + keyHead) * KD;
    const T *k = static_cast<const T *>(a.k) + (token * a.kHeads + keyHead) * KD;
    for (int i = threadIdx.x; i < KD; i += blockDim.x) {
      qs[i] = toFloat(q[i]);
      ks[i] = toFloat(k[i]);
    }
    __syncthreads();
    const float qScale = (a.l2norm ? inverseNorm(qs, KD) : 1.0f) * a.scale;
    const float kScale = a.l2norm ? inverseNorm(ks, KD) : 1.0f;
    const size_t headToken = token * a.vHeads + head;
    const float decay = expf(a.g[headToken]);
    const float beta = a.beta[headToken];
    const float v = toFloat(static_cast<const T *>(a.v)[headToken * vd + c]);

    float mem = 0.0f;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      s[r] *= decay;
      mem += s[r] * (ks[half * kRows + r] * kScale);
    }
    partial[half][c] = mem;
    __syncthreads();
    const float delta = (v - (partial[0][c] + partial[1][c])) * beta;
    float o = 0.0f;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      s[r] += (ks[half * kRows + r] * kScale) * delta;
      o += s[r] * (qs[half * kRows + r] * qScale);
    }
    __syncthreads(); // every thread has read partial
    partial[half][c] = o;
    __syncthreads();
    if (half == 0)
      static_cast<T *>(a.out)[headToken * vd + c] = fromFloat<T>(partial[0][c] + partial[1][c]);
    if (a.intermediate) {
      float *inter =
          a.intermediate +
          ((static_cast<size_t>(slot) * a.interTokens + t) * a.vHeads + head) * headState;
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        inter[(half * kRows + r) * vd + c] = s[r];
    }
    __syncthreads(); // qs, ks and partial are reused by the next token
  }
  if (!a.intermediate) {
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      state[(half * kRows + r) * vd + c] = s[r];
  }
}

// ---- The split kernel

// The per-token values a block's threads share.
template <int KD, int kCols> struct TokenShared {
  __align__(16) float q[KD]; // the token's q and k in fp32, before scaling
  __align__(16) float k[KD];
  float qScale, kScale;
  float mem[kHalves][kCols], out[kHalves][kCols]; // the halves' partial sums a column
};

// Four consecutive floats of shared memory (16-byte aligned): one access for four rows.
struct Four {
  float x[4];
};
__device__ Four loadFour(const float *p) {
  const float4 v = *reinterpret_cast<const float4 *>(p);
  return {{v.x, v.y, v.z, v.w}};
}

// How the split kernel accesses the state (a template parameter: 0 leaves the first
// variants' code as it was).
enum GdnAccess : int {
  // The state's loads and stores evict-first in the L2 (ld/st.global.cs): a state is read
  // and written once a launch, so its lines need not push out the prefetched ones.
  kStreamState = 1,
  // Prefetch the state of a later block into the L2 (prefetchSuccessor).
  kPrefetch = 2,
};

// The state's rows of a thread: `rows` points at its first (its column), one row every
// kStride floats.
template <int kStride, int kAccess, int kRows>
__device__ void loadRows(float (&s)[kRows], const float *rows) {
#pragma unroll
  for (int r = 0; r < kRows; ++r)
    s[r] = kAccess & kStreamState ? __ldcs(rows + r * kStride) : rows[r * kStride];
}
template <int kStride, int kAccess, int kRows>
__device__ void storeRows(const float (&s)[kRows], float *rows) {
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    if constexpr (kAccess & kStreamState)
      __stcs(rows + r * kStride, s[r]);
    else
      rows[r * kStride] = s[r];
  }
}

// Asks the L2 for `bytes` (a multiple of 16) at `p` (16-byte aligned) without waiting;
// every lane of the warp calls it with the same arguments.
__device__ void prefetchL2(const float *p, int bytes) {
#if __CUDA_ARCH__ >= 900
  // One bulk prefetch from one lane (TMA): the operands stay uniform, so ptxas does not
  // loop over the lanes' addresses.
  if (threadIdx.x % 32 == 0)
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(__cvta_generic_to_global(p)),
                 "r"(bytes));
#else
  for (int i = threadIdx.x % 32 * 128; i < bytes; i += 32 * 128)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(__cvta_generic_to_global(p) + i));
#endif
}

// The tail of a launch of few waves: a block of the last wave starts when one of the
// wave before ends, loads its state from DRAM and computes while the rest of the machine
// idles. So a block prefetches into the L2 the state of the block prefetchAhead (the
// blocks resident at once) on in launch order, the one that will take its place (a hint:
// any SM may run it; the L2 serves every SM), and that block's loads hit the L2. The
// first block of a state prefetches all of it (64 KiB contiguous at 128 x 128), a slice
// a warp.
template <int KD, int VD, int kCols> __device__ void prefetchSuccessor(const GdnArgs &a) {
  constexpr int parts = VD / kCols, kWarps = kHalves * kCols / 32;
  constexpr int kSlice = KD * VD / kWarps; // floats a warp: a multiple of 16 bytes
  const int target = blockIdx.y * gridDim.x + blockIdx.x + a.prefetchAhead;
  if (a.prefetchAhead <= 0 || target < a.prefetchFirst ||
      target >= static_cast<int>(gridDim.x * gridDim.y) || target % parts != 0)
    return;
  const int seq = target / gridDim.x, head = target % gridDim.x / parts;
  const int slot = a.indices ? a.indices[seq] : seq;
  if (slot < 0 || slot >= a.numSlots)
    return; // padding: its blocks read nothing
  const float *state = a.state + (static_cast<size_t>(slot) * a.vHeads + head) * KD * VD;
  prefetchL2(state + threadIdx.x / 32 * kSlice, kSlice * sizeof(float));
}

// s *= decay, then sum_r s[r] (k[r] kScale) as one fmaf chain from 0 in row order (the
// baseline's sum, bit for bit). `k`: the thread's rows of the key, 16-byte aligned.
template <int kRows>
__device__ float decayAndRecall(float (&s)[kRows], float decay, const float *k, float kScale) {
  float mem = 0.0f;
#pragma unroll
  for (int r = 0; r < kRows; r += 4) {
    const Four k4 = loadFour(k + r);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      s[r + j] *= decay;
      mem = fmaf(s[r + j], k4.x[j] * kScale, mem);
    }
  }
  return mem;
}

// s += (k[r] kScale) delta, then sum_r s[r] (q[r] qScale) as one fmaf chain from 0 in row
// order (the baseline's, bit for bit).
template <int kRows>
__device__ float writeAndRead(float (&s)[kRows], const float *k, float kScale, float delta,
                              const float *q, float qScale) {
  float o = 0.0f;
#pragma unroll
  for (int r = 0; r < kRows; r += 4) {
    const Four k4 = loadFour(k + r), q4 = loadFour(q + r);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      s[r + j] = fmaf(k4.x[j] * kScale, delta, s[r + j]);
      o = fmaf(s[r + j], q4.x[j] * qScale, o);
    }
  }
  return o;
}

// s += (k[r] kScale) delta alone: writeAndRead's update of s, for a folded token (no
// output).
template <int kRows>
__device__ void writeOnly(float (&s)[kRows], const float *k, float kScale, float delta) {
#pragma unroll
  for (int r = 0; r < kRows; r += 4) {
    const Four k4 = loadFour(k + r);
#pragma unroll
    for (int j = 0; j < 4; ++j)
      s[r + j] = fmaf(k4.x[j] * kScale, delta, s[r + j]);
  }
}

// The token's q (when kWithQ) and k into shared memory as fp32, every thread a share.
template <typename T, int KD, bool kWithQ>
__device__ void stageKeys(float *qs, float *ks, const T *q, const T *k) {
  for (int i = threadIdx.x; i < KD; i += blockDim.x) {
    if constexpr (kWithQ)
      qs[i] = toFloat(q[i]);
    ks[i] = toFloat(k[i]);
  }
}

// Where one token's operands are: the step's packed inputs, or (replay) a slot's buffer of
// kept inputs, which has no q. k: the key head's k_dim values; v: the value head's v_dim.
template <typename T> struct TokenRef {
  const T *q, *k, *v;
  const float *g, *beta;
};

// Token t of sequence `seq` in the step's packed inputs.
template <typename T, int KD, int VD>
__device__ TokenRef<T> stepToken(const GdnArgs &a, int seq, int t, int keyHead, int head) {
  const size_t token = static_cast<size_t>(seq) * a.numTokens + t;
  const size_t keys = (token * a.kHeads + keyHead) * KD, headToken = token * a.vHeads + head;
  return {static_cast<const T *>(a.q) + keys, static_cast<const T *>(a.k) + keys,
          static_cast<const T *>(a.v) + headToken * VD, a.g + headToken, a.beta + headToken};
}

// Where token t of a slot's replay buffer is kept: its [slot, buffer, token] row of
// replay_k and replay_v, and the offset of the value head's {g, beta} in replay_gb.
struct KeptAt {
  size_t row, gb;
};
__device__ KeptAt keptAt(const GdnArgs &a, int slot, int buffer, int t, int head) {
  const size_t step = static_cast<size_t>(slot) * 2 + buffer;
  return {step * a.replayTokens + t, ((step * a.vHeads + head) * a.replayTokens + t) * 2};
}

// Token t kept in a slot's replay buffer (a folded token: no q).
template <typename T, int KD, int VD>
__device__ TokenRef<T> keptToken(const GdnArgs &a, int slot, int buffer, int t, int keyHead,
                                 int head) {
  const KeptAt at = keptAt(a, slot, buffer, t, head);
  return {nullptr, static_cast<const T *>(a.replayK) + (at.row * a.kHeads + keyHead) * KD,
          static_cast<const T *>(a.replayV) + (at.row * a.vHeads + head) * VD, a.replayGb + at.gb,
          a.replayGb + at.gb + 1};
}

// A verify step keeps token t's inputs in the slot's buffer `buffer`, exact copies: the
// key head's k by the first block of the group's first value head, the block's columns of
// v by its first half, {g, beta} by the head's first block's first thread.
template <typename T, int KD, int VD, int kCols>
__device__ void keepToken(const GdnArgs &a, const TokenRef<T> &tok, int slot, int buffer, int t,
                          int keyHead, int head, int col, int half) {
  const KeptAt at = keptAt(a, slot, buffer, t, head);
  const bool firstBlock = blockIdx.x % (VD / kCols) == 0;
  if (firstBlock && head % (a.vHeads / a.kHeads) == 0) {
    T *k = static_cast<T *>(a.replayK) + (at.row * a.kHeads + keyHead) * KD;
    for (int i = threadIdx.x; i < KD; i += blockDim.x)
      k[i] = tok.k[i];
  }
  if (half == 0)
    static_cast<T *>(a.replayV)[(at.row * a.vHeads + head) * VD + col] = tok.v[col];
  if (firstBlock && threadIdx.x == 0) {
    a.replayGb[at.gb] = *tok.g;
    a.replayGb[at.gb + 1] = *tok.beta;
  }
}

// One token through a block's columns of the state `s` (the thread's rows, in registers),
// as every mode computes it: the same fp32 operations in the same order whether the token
// is the step's or a folded one, so a fold leaves the in-place update's state bit for bit.
// kOutput: the token's output is computed and returned (to every thread of the column);
// a folded token has none. Leaves sh free for the next token (its reads are behind a
// barrier that every thread passes before the next token's writes).
template <bool kOutput, typename T, int KD, int kCols>
__device__ float applyToken(TokenShared<KD, kCols> &sh, float (&s)[KD / kHalves],
                            const TokenRef<T> &tok, const GdnArgs &a, int half, int c, int col) {
  constexpr int kRows = KD / kHalves;
  stageKeys<T, KD, kOutput>(sh.q, sh.k, tok.q, tok.k);
  __syncthreads();
  // One thread a norm (its KD-term chain is the baseline's), in different warps; the
  // baseline ran both chains in every thread, 2 KD shared loads each.
  if (kOutput && threadIdx.x == 0)
    sh.qScale = (a.l2norm ? inverseNorm(sh.q, KD) : 1.0f) * a.scale;
  if (threadIdx.x == kCols)
    sh.kScale = a.l2norm ? inverseNorm(sh.k, KD) : 1.0f;
  const float decay = expf(*tok.g);
  const float beta = *tok.beta;
  const float v = toFloat(tok.v[col]);
  __syncthreads();
  const float kScale = sh.kScale;
  const float *k = sh.k + half * kRows;
  sh.mem[half][c] = decayAndRecall(s, decay, k, kScale);
  __syncthreads();
  const float delta = (v - (sh.mem[0][c] + sh.mem[1][c])) * beta;
  if constexpr (kOutput)
    sh.out[half][c] = writeAndRead(s, k, kScale, delta, sh.q + half * kRows, sh.qScale);
  else
    writeOnly(s, k, kScale, delta);
  __syncthreads();
  // The next token's writes to sh come after its first barrier, which every thread
  // reaches only after its reads here: no barrier at the end of the token.
  return kOutput ? sh.out[0][c] + sh.out[1][c] : 0.0f;
}

// What the split kernel does with the state: update (gdn_update in place, or
// gdn_update_spec into the intermediates) or replay (gdn_update_replay).
enum class GdnMode { update, replay };

// VD is a template parameter here (the baseline reads a.vDim): a row's address is then the
// column's plus an immediate offset. With the runtime stride, ptxas gave this kernel 197
// registers at k_dim 128 (a 64-bit address a row, it seems, kept from the loads to the
// stores); with VD, 122 unbounded and 96 under the 5-blocks bound, without spills.
template <typename T, int KD, int VD, int kCols, int kMinBlocks, GdnMode kMode, int kAccess>
__global__ void __launch_bounds__(kHalves *kCols, kMinBlocks) gdnUpdateSplitKernel(GdnArgs a) {
  constexpr bool kReplay = kMode == GdnMode::replay;
  constexpr int kRows = KD / kHalves, parts = VD / kCols;
  const int head = blockIdx.x / parts, seq = blockIdx.y;
  const int c = threadIdx.x % kCols, half = threadIdx.x / kCols;
  const int col = blockIdx.x % parts * kCols + c;
  const int slot = a.indices ? a.indices[seq] : seq;
  if (slot < 0 || slot >= a.numSlots)
    return; // padding: nothing read or written
  const int keyHead = head / (a.vHeads / a.kHeads);
  const size_t headState = static_cast<size_t>(KD) * VD, firstRow = size_t(half) * kRows * VD;
  float *state = a.state + (static_cast<size_t>(slot) * a.vHeads + head) * headState;

  __shared__ TokenShared<KD, kCols> sh;
  // All the state's loads are issued here; the first token's keys and norms are staged
  // while they are in flight.
  float s[kRows];
  loadRows<VD, kAccess>(s, state + firstRow + col);
  // Behind the state's loads, so that they go to the memory first.
  if constexpr ((kAccess & kPrefetch) != 0)
    prefetchSuccessor<KD, VD, kCols>(a);

  // Replay: the accepted prefix of the sequence's last verify step goes in first. A
  // committed token's state is written after it instead; otherwise the folded state is
  // the sequence's committed one.
  int keepBuffer = 0;
  if constexpr (kReplay) {
    const int pending = min(max(a.replay[2 * seq], 0), a.replayTokens);
    const int buffer = a.replay[2 * seq + 1] & 1;
    for (int t = 0; t < pending; ++t)
      applyToken<false>(sh, s, keptToken<T, KD, VD>(a, slot, buffer, t, keyHead, head), a, half, c,
                        col);
    if (pending > 0 && a.numTokens != 1)
      storeRows<VD, kAccess>(s, state + firstRow + col);
    keepBuffer = 1 - buffer;
  }

  for (int t = 0; t < a.numTokens; ++t) {
    const TokenRef<T> tok = stepToken<T, KD, VD>(a, seq, t, keyHead, head);
    if constexpr (kReplay)
      if (a.numTokens > 1)
        keepToken<T, KD, VD, kCols>(a, tok, slot, keepBuffer, t, keyHead, head, col, half);
    const float o = applyToken<true>(sh, s, tok, a, half, c, col);
    const size_t headToken = (static_cast<size_t>(seq) * a.numTokens + t) * a.vHeads + head;
    if (half == 0)
      static_cast<T *>(a.out)[headToken * VD + col] = fromFloat<T>(o);
    if (!kReplay && a.intermediate)
      storeRows<VD, kAccess>(
          s, a.intermediate +
                 ((static_cast<size_t>(slot) * a.interTokens + t) * a.vHeads + head) * headState +
                 firstRow + col);
  }
  // The state after the step's last token: in place (update), or a committed token's.
  if (kReplay ? a.numTokens == 1 : !a.intermediate)
    storeRows<VD, kAccess>(s, state + firstRow + col);
}

constexpr int kMaxDevices = 64;

// The blocks of `kernel` (`threads` a block, no dynamic shared memory) resident at once on
// the current device: its SMs times the blocks an SM. Queried once a device and kept in
// `cache` (0: not yet); 0 when the query fails (then nothing is prefetched).
template <class Kernel>
int residentBlocks(Kernel kernel, int threads, std::atomic<int> (&cache)[kMaxDevices]) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError(); // not this launch's error
    return 0;
  }
  if (device < kMaxDevices)
    if (const int known = cache[device].load(std::memory_order_relaxed))
      return known;
  int sms = 0, perSm = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, kernel, threads, 0) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  const int resident = sms * perSm;
  if (device < kMaxDevices)
    cache[device].store(resident, std::memory_order_relaxed);
  return resident;
}

// The launch of one kernel of the update for dtype T, k_dim KD and v_dim VD, in mode kMode.
template <typename T, int KD, int VD, GdnMode kMode> struct Launch {
  const GdnArgs &a;
  int vHeads, batch;
  cudaStream_t stream;

  // The baseline has no replay form: false, nothing launched.
  bool baseline() const {
    if constexpr (kMode == GdnMode::replay) {
      return false;
    } else {
      gdnUpdateBaselineKernel<T, KD><<<dim3(vHeads, batch), kHalves * a.vDim, 0, stream>>>(a);
      return true;
    }
  }
  // kCols columns a block, at most v_dim (a v_dim of 64 takes the 64-column kernel).
  // kAccess & kPrefetch: the last wave's states are prefetched (every wave's but the
  // first's when everyWave).
  template <int kColsWanted, int kMinBlocks, int kAccess = 0>
  bool split(bool everyWave = false) const {
    constexpr int kCols = kColsWanted < VD ? kColsWanted : VD;
    const dim3 grid(vHeads * (VD / kCols), batch);
    const auto kernel = gdnUpdateSplitKernel<T, KD, VD, kCols, kMinBlocks, kMode, kAccess>;
    GdnArgs args = a;
    if constexpr ((kAccess & kPrefetch) != 0) {
      // The blocks resident at once depend only on the kernel and the device, and the
      // blocks of the launch on the shapes: a captured graph replays the same arguments.
      static std::atomic<int> residentByDevice[kMaxDevices];
      const int resident = residentBlocks(kernel, kHalves * kCols, residentByDevice);
      const int blocks = static_cast<int>(grid.x * grid.y);
      args.prefetchAhead = resident;
      args.prefetchFirst = everyWave ? 0 : std::max(blocks - resident, 0);
    }
    kernel<<<grid, kHalves * kCols, 0, stream>>>(args);
    return true;
  }
  // Whether variant v has a kernel in this mode (launched).
  bool run(GdnUpdateVariant v) const {
    switch (v) {
    case GdnUpdateVariant::Baseline:
      return baseline();
    case GdnUpdateVariant::Cols128Occ2:
      return split<128, 2>();
    case GdnUpdateVariant::Cols128Occ3:
      return split<128, 3>();
    case GdnUpdateVariant::Cols64Occ4:
      return split<64, 4>();
    case GdnUpdateVariant::Cols64Occ5:
      return split<64, 5>();
    case GdnUpdateVariant::Cols64Occ6:
      return split<64, 6>();
    case GdnUpdateVariant::Cols32Occ10:
      return split<32, 10>();
    case GdnUpdateVariant::Cols64Occ5Cs:
      return split<64, 5, kStreamState>();
    case GdnUpdateVariant::Cols64Occ5Pf:
      return split<64, 5, kPrefetch>();
    case GdnUpdateVariant::Cols64Occ5CsPf:
      return split<64, 5, kStreamState | kPrefetch>();
    case GdnUpdateVariant::Cols64Occ5CsPfAll:
      return split<64, 5, kStreamState | kPrefetch>(true);
    case GdnUpdateVariant::Count:
      break;
    }
    return false;
  }
};

// Launches `variant` of mode kMode for the params' dtype and head dims; the status of the
// launch (`kernel` names it in messages).
template <GdnMode kMode>
kiln_status_t launchMode(const GdnArgs &a, kiln_dtype_t dtype, int kDim, int vDim, int vHeads,
                         int batch, void *stream, GdnUpdateVariant variant, const char *kernel) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  auto go = [&](auto typeTag, auto kd, auto vd) {
    return Launch<decltype(typeTag), decltype(kd)::value, decltype(vd)::value, kMode>{a, vHeads,
                                                                                      batch, s}
        .run(variant);
  };
  using D64 = std::integral_constant<int, 64>;
  using D128 = std::integral_constant<int, 128>;
  auto forDims = [&](auto typeTag) {
    if (kDim == 64)
      return vDim == 64 ? go(typeTag, D64{}, D64{}) : go(typeTag, D64{}, D128{});
    return vDim == 64 ? go(typeTag, D128{}, D64{}) : go(typeTag, D128{}, D128{});
  };
  const bool launched = dtype == KILN_DTYPE_BF16 ? forDims(__nv_bfloat16{}) : forDims(__half{});
  if (!launched)
    return fail(KILN_ERROR_UNSUPPORTED, "%s: kernel variant %s has no %s form", kernel,
                gdnUpdateVariantName(variant), kernel);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    return fail(KILN_ERROR_CUDA, "%s: kernel launch failed: %s", kernel, cudaGetErrorString(err));
  return ok();
}

} // namespace

const char *gdnUpdateVariantName(GdnUpdateVariant v) {
  static const char *const names[] = {"baseline",         "cols128-occ2",        "cols128-occ3",
                                      "cols64-occ4",      "cols64-occ5",         "cols64-occ6",
                                      "cols32-occ10",     "cols64-occ5-cs",      "cols64-occ5-pf",
                                      "cols64-occ5-cspf", "cols64-occ5-cspf-all"};
  static_assert(sizeof names / sizeof *names == static_cast<size_t>(GdnUpdateVariant::Count));
  const int i = static_cast<int>(v);
  return i >= 0 && i < static_cast<int>(GdnUpdateVariant::Count) ? names[i] : "?";
}

kiln_status_t launchGdnUpdate(const kiln_gdn_update_params_t &p, float scale,
                              GdnUpdateVariant variant) {
  const char *kernel = p.intermediate ? "gdn_update_spec" : "gdn_update";
  if (variant < GdnUpdateVariant::Baseline || variant >= GdnUpdateVariant::Count)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: no kernel variant %d", kernel,
                static_cast<int>(variant));
  GdnArgs a{};
  fillCommonArgs(a, p, scale);
  a.intermediate = static_cast<float *>(p.intermediate);
  a.numTokens = p.num_tokens;
  a.interTokens = p.intermediate_tokens > 0 ? p.intermediate_tokens : p.num_tokens;
  return launchMode<GdnMode::update>(a, p.dtype, p.k_dim, p.v_dim, p.v_heads, p.batch, p.stream,
                                     variant, kernel);
}

kiln_status_t launchGdnUpdateReplay(const kiln_gdn_update_replay_params_t &p, float scale,
                                    GdnUpdateVariant variant) {
  const char *kernel = "gdn_update_replay";
  if (variant < GdnUpdateVariant::Baseline || variant >= GdnUpdateVariant::Count)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: no kernel variant %d", kernel,
                static_cast<int>(variant));
  GdnArgs a{};
  fillCommonArgs(a, p, scale);
  a.numTokens = p.num_tokens;
  a.replay = p.replay;
  a.replayK = p.replay_k;
  a.replayV = p.replay_v;
  a.replayGb = p.replay_gb;
  a.replayTokens = p.max_tokens;
  return launchMode<GdnMode::replay>(a, p.dtype, p.k_dim, p.v_dim, p.v_heads, p.batch, p.stream,
                                     variant, kernel);
}

} // namespace kiln::kernels::gdn
