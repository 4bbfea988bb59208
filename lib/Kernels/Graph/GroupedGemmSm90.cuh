// The device code of the MoE layer's grouped expert GEMM on Hopper (sm_90a, wgmma): for
// every token tile of an expert's rows, out[rows, n] = in[rows, k] . W_e^T, W_e the
// expert's [n, k] weights, bf16 in and out, fp32 accumulate. GroupedGemmSm90.cu launches
// it; docs/kernels-graph.md ("MoE") has the design and the measurements.
//
// The operands are swapped: the weights are wgmma's A operand (64 output features a
// warpgroup) and the tokens its B operand (N = the tile's tokens rounded up to 32). An
// expert at prefill has tens to a few hundred rows, and the B side takes any multiple of
// 8 where the A side only whole 64-row tiles, so the padding is at most 31 token columns
// a tile instead of up to 63 rows, and each weight byte is read from memory once.
//
// A persistent CTA (two consumer warpgroups, 256 features) walks its tiles' K blocks as
// one flat sequence of items through a ring of kStages shared-memory stages, across tile
// boundaries, so the next tile's loads overlap this tile's epilogue; one wgmma group
// stays in flight while the next is issued. Two ways to fill the ring:
// - the library's (KILN_GROUPED_GEMM_TMA 1): a producer warpgroup whose one thread issues
//   tensor-map (TMA) loads, handed over through mbarriers;
// - cp.async by every consumer thread, kAhead items ahead, with a CTA barrier a K block
//   (the previous version, which bench/Moe keeps as the baseline: 77% of the read
//   ceiling against 86% for TMA at DeepSeek-V3's shapes on an H100).
//
// A header so that the same code also runs on the host under the CTA emulator
// (test/Kernels/Common/CtaEmulator.h), which checks its layouts, barriers and masking in
// CI, where there is no GPU.
#ifndef KILN_LIB_KERNELS_GRAPH_GROUPEDGEMMSM90_CUH
#define KILN_LIB_KERNELS_GRAPH_GROUPEDGEMMSM90_CUH

#if defined(__CUDACC__)
#include "../Decode/DecodeDevice.cuh"
#elif !defined(KILN_CTA_EMULATION)
#error "device code: compile with nvcc, or include test/Kernels/Common/CtaEmulator.h first"
#endif
#include "../Common/Mbarrier.cuh"
#include "../Common/Wgmma.cuh"
#include "../Common/Tma.cuh"
#ifndef KILN_CTA_EMULATION
#include "../Common/TensorMap.h"
#endif
#include "GroupedGemm.h"
#include "Swiglu.cuh"

#include <cuda_bf16.h>
#include <stdint.h>

namespace kiln::graph {

namespace grouped {
// Internal linkage: the emulation's host instantiations never meet the .cu's.
namespace {

// The tunables, which bench/Moe's kernel benchmark overrides per translation unit to
// compare variants (the library always compiles the defaults).
#ifndef KILN_GROUPED_GEMM_TMA // 1: the TMA ring; 0: cp.async by every thread (below)
#define KILN_GROUPED_GEMM_TMA 1
#endif
#ifndef KILN_GROUPED_GEMM_STAGES
#define KILN_GROUPED_GEMM_STAGES (KILN_GROUPED_GEMM_TMA ? 3 : 4)
#endif
#ifndef KILN_GROUPED_GEMM_WGMMA_IN_FLIGHT // wgmma groups left running across an item
#define KILN_GROUPED_GEMM_WGMMA_IN_FLIGHT 1
#endif
#ifndef KILN_GROUPED_GEMM_MAX_TILE_TOKENS
#define KILN_GROUPED_GEMM_MAX_TILE_TOKENS kGroupedGemmMaxTileTokens
#endif
#ifndef KILN_GROUPED_GEMM_WARPGROUP_TILES // 64-feature wgmma tiles a warpgroup
#define KILN_GROUPED_GEMM_WARPGROUP_TILES (kGroupedGemmFeatureTile / 128)
#endif

constexpr int kWarpgroupTiles = KILN_GROUPED_GEMM_WARPGROUP_TILES;
constexpr int kFeatureTile = 2 * 64 * kWarpgroupTiles; // two warpgroups of 64-feature tiles
constexpr int kThreads = 2 * kernels::sm90::kWarpgroupThreads;
constexpr int kTokenStep = 32; // token columns are padded to this
constexpr int kMaxTileTokens = KILN_GROUPED_GEMM_MAX_TILE_TOKENS; // B's rows a stage holds
static_assert(kGroupedGemmKBlock == kernels::sm90::kKBlock && kMaxTileTokens % kTokenStep == 0 &&
                  kMaxTileTokens <= 256,
              "the tile shapes GroupedGemm.h promises; wgmma's N is at most 256");
constexpr int kRowBytes = kernels::sm90::kSwizzleRowBytes;
constexpr int kStageA = kFeatureTile * kRowBytes;   // weights: 16 KiB a 128 features
constexpr int kStageB = kMaxTileTokens * kRowBytes; // tokens: 24 KiB
constexpr int kStageBytes = kStageA + kStageB;
constexpr int kStages = KILN_GROUPED_GEMM_STAGES;
constexpr int kWgmmaInFlight = KILN_GROUPED_GEMM_WGMMA_IN_FLIGHT;
// Items loaded ahead of the one the wgmmas read: the ring less that stage and the
// stages wgmmas may still be reading.
constexpr int kAhead = kStages - 1 - kWgmmaInFlight;
// The ring, and the slack that lets it start on a 1024-byte boundary.
constexpr int kSharedBytes = kStages * kStageBytes + kernels::sm90::kSwizzleAtomBytes;
static_assert(kSharedBytes <= 227 * 1024, "the ring fits sm_90's opt-in shared memory");
static_assert(kStageA % kernels::sm90::kSwizzleAtomBytes == 0 &&
                  kStageB % kernels::sm90::kSwizzleAtomBytes == 0,
              "every tile of the ring starts on a swizzle atom");
static_assert((kWgmmaInFlight == 0 || kWgmmaInFlight == 1) &&
                  (KILN_GROUPED_GEMM_TMA || kAhead >= 1),
              "a stage in the wgmma, the one still draining, at least one loading");

using decode::cpAsync16;
using decode::cpAsyncCommit;
using decode::cpAsyncWait;

// The loads of one item into its stage: the weights' 128 feature rows and the tile's
// token rows (rows past the tile's end are zero-filled, never read).
__device__ __forceinline__ void loadItem(const GroupedGemmArgs &a, const GroupedGemmTile &t,
                                         int featureTile, int kBlock, char *stage,
                                         int thread = threadIdx.x, int threads = kThreads) {
  using namespace kernels::sm90;
  const int64_t k0 = static_cast<int64_t>(kBlock) * kKBlock;
  const uint16_t *w =
      a.weights + (static_cast<int64_t>(t.expert) * a.n + featureTile * kFeatureTile) * a.k + k0;
  for (int c = thread; c < kFeatureTile * 8; c += threads) {
    const int row = c >> 3, chunk = c & 7;
    cpAsync16(stage + swizzledOffset(row, chunk), w + row * a.k + chunk * 8, true);
  }
  const int tokens = (t.rows + kTokenStep - 1) / kTokenStep * kTokenStep;
  const uint16_t *x = a.in + static_cast<int64_t>(t.first) * a.k + k0;
  for (int c = thread; c < tokens * 8; c += threads) {
    const int row = c >> 3, chunk = c & 7;
    const bool valid = row < t.rows;
    cpAsync16(stage + kStageA + swizzledOffset(row, chunk),
              valid ? x + static_cast<int64_t>(row) * a.k + chunk * 8 : a.in, valid);
  }
}

// Calls put(i, token, column) for each of this thread's accumulators acc[i] of a wgmma
// tile (64 features of rows, tokens of columns) that holds one of the tile's rows: thread
// (warp w, lane l) holds features 16w + l/4 (+ column 8) of token pairs 8j + 2(l%4).
// Columns past the tile hold zero-filled rows' sums and are skipped.
template <int Tokens, class Put>
__device__ __forceinline__ void forEachAccumulator(const GroupedGemmTile &t, Put put) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int j = 0; j < Tokens / 8; ++j) {
    const int token = 8 * j + 2 * (lane & 3);
    if (token >= t.rows)
      break;
#pragma unroll
    for (int r = 0; r < 4; ++r)
      if (token + (r & 1) < t.rows)
        put(4 * j + r, token + (r & 1), (r >> 1) * 8);
  }
}

__device__ __forceinline__ uint16_t bf16Bits(float v) {
  const __nv_bfloat16 h = __float2bfloat16_rn(v);
  uint16_t bits;
  __builtin_memcpy(&bits, &h, 2);
  return bits;
}

// This thread's first output feature of a wgmma tile whose first feature is `feature`.
__device__ __forceinline__ int64_t threadFeature(int64_t feature) {
  return feature + ((threadIdx.x >> 5) & 3) * 16 + ((threadIdx.x & 31) >> 2);
}

// A wgmma tile's accumulators as bf16 rows of out; `feature` the tile's first.
template <int Tokens>
__device__ __forceinline__ void storeTile(const GroupedGemmArgs &a, const GroupedGemmTile &t,
                                          const float (&acc)[Tokens / 2], int64_t feature) {
  uint16_t *out = a.out + static_cast<int64_t>(t.first) * a.n + threadFeature(feature);
  forEachAccumulator<Tokens>(t, [&](int i, int token, int column) {
    out[static_cast<int64_t>(token) * a.n + column] = bf16Bits(acc[i]);
  });
}

// The gated form's epilogue: the gate's and the up's accumulators of the same 64
// features, each rounded to bf16, through SwiGLU into out.
template <int Tokens>
__device__ __forceinline__ void storeGatedTile(const GroupedGemmArgs &a, const GroupedGemmTile &t,
                                               const float (&gate)[Tokens / 2],
                                               const float (&up)[Tokens / 2], int64_t feature) {
  uint16_t *out = a.out + static_cast<int64_t>(t.first) * a.n + threadFeature(feature);
  forEachAccumulator<Tokens>(t, [&](int i, int token, int column) {
    const float g = __bfloat162float(__float2bfloat16_rn(gate[i]));
    const float u = __bfloat162float(__float2bfloat16_rn(up[i]));
    out[static_cast<int64_t>(token) * a.n + column] = bf16Bits(swigluOfBf16(g, u));
  });
}

// What a persistent CTA, `cta` of `ctas`, works on: tiles cta, cta + ctas, ... of the
// (token tile, feature tile) grid, feature tiles fastest, so the CTAs running at one time
// share token tiles (their rows stay in L2) and each weight row is read once; as items,
// item i being K block i % kBlocks of the CTA's tile i / kBlocks; and its ring of
// kStages stages on a 1024-byte boundary of the shared window (the swizzle is on
// addresses).
struct CtaWork {
  const GroupedGemmArgs &a;
  char *ring;
  uint32_t ringAddress;
  int cta, ctas, featureTiles, kBlocks;
  int64_t items; // 0: a CTA past the tiles in use

  __device__ __forceinline__ CtaWork(const GroupedGemmArgs &args, char *shared, int cta, int ctas)
      : a(args), cta(cta), ctas(ctas),
        featureTiles(static_cast<int>(args.n / (args.up ? kFeatureTile / 2 : kFeatureTile))),
        kBlocks(static_cast<int>(args.k / kernels::sm90::kKBlock)) {
    using kernels::sm90::kSwizzleAtomBytes;
    const uint32_t raw = kernels::sm90::smemAddress(shared);
    ringAddress = (raw + kSwizzleAtomBytes - 1) & ~(kSwizzleAtomBytes - 1u);
    ring = shared + (ringAddress - raw);
    const int64_t tokenTiles = args.denseTiles > 0 ? args.denseTiles : *args.tileCount;
    const int64_t tiles = tokenTiles * featureTiles;
    items = cta < tiles ? (tiles - cta + ctas - 1) / ctas * kBlocks : 0;
  }
  // The (token tile, feature tile) pair of `item`.
  __device__ __forceinline__ int64_t tileOf(int64_t item) const {
    return cta + item / kBlocks * ctas;
  }
  // The token tile of a pair (its entry in the table, or the dense GEMM's equal split).
  __device__ __forceinline__ GroupedGemmTile tokenTile(int64_t tile) const {
    const int64_t index = tile / featureTiles;
    if (a.denseTiles <= 0)
      return a.tiles[index];
    const int32_t each = static_cast<int32_t>((a.rows + a.denseTiles - 1) / a.denseTiles);
    const int32_t first = static_cast<int32_t>(index) * each;
    return {0, first, static_cast<int32_t>(a.rows - first < each ? a.rows - first : each)};
  }
  __device__ __forceinline__ int featureTileOf(int64_t tile) const {
    return static_cast<int>(tile % featureTiles);
  }
  __device__ __forceinline__ char *stage(int64_t item) const {
    return ring + (item % kStages) * kStageBytes;
  }
  __device__ __forceinline__ uint32_t stageAddress(int64_t item) const {
    return ringAddress + static_cast<uint32_t>((item % kStages) * kStageBytes);
  }
  // Item `item`'s loads, by `threads` threads of which this is `thread`.
  __device__ __forceinline__ void loadItem(int64_t item, int thread, int threads) const {
    const int64_t tile = tileOf(item);
    grouped::loadItem(a, tokenTile(tile), featureTileOf(tile), static_cast<int>(item % kBlocks),
                      stage(item), thread, threads);
  }
};

// The ring filled by every thread, kAhead items ahead, with a CTA barrier a K block.
struct Pipeline : CtaWork {
  using CtaWork::CtaWork;
  __device__ __forceinline__ void load(int64_t item) const {
    if (item < items)
      loadItem(item, threadIdx.x, kThreads);
    cpAsyncCommit(); // an empty group past the end keeps the wait count uniform
  }
  // Waits for item `item`'s stage and starts the load kAhead items ahead; returns
  // the stage's shared address.
  __device__ __forceinline__ uint32_t acquire(int64_t item) const {
    cpAsyncWait<kAhead - 1>(); // this item's stage has landed (this thread's part)
    kernels::sm90::fenceProxyAsyncShared();
    // Every part of the stage has landed, and every warpgroup is done with the stage the
    // next load overwrites (its wgmmas were waited for in the previous iteration).
    __syncthreads();
    load(item + kAhead);
    return stageAddress(item);
  }
  // The stage of `item` is no longer read (the barrier in acquire covers it).
  __device__ __forceinline__ void release(int64_t) const {}
};

// One tile's K blocks (items first .. first + kBlocks - 1) into the warpgroup's 64
// features x Tokens accumulators, then its rows of out. An instruction width is fixed for
// the whole tile, so no accumulator register changes hands while a wgmma is in flight.
template <int Tokens, class Ring>
__device__ __forceinline__ void runTile(const Ring &p, int64_t first, const GroupedGemmTile &t,
                                        int featureTile, int wg) {
  using namespace kernels::sm90;
  // Defined before the first wgmma reads them (it ignores them: accumulate is off), so
  // that each width's registers are live only inside its tile, not across the kernel.
  float acc[kWarpgroupTiles][Tokens / 2];
#pragma unroll
  for (int m = 0; m < kWarpgroupTiles; ++m)
#pragma unroll
    for (int i = 0; i < Tokens / 2; ++i)
      acc[m][i] = 0.0f;
  // The weight rows of the warpgroup's tile m in the stage: 64 a tile, consecutive; in the
  // gated form tile 0 the gate's and tile 1 the up's rows of the same 64 features (the
  // stage holds the CTA's gate rows, then its up rows).
  const bool gated = p.a.up != nullptr;
  const int firstFeature = wg * 64 * (gated ? 1 : kWarpgroupTiles); // within the CTA's
  const int tileStride = gated ? kFeatureTile / 2 : 64;
  for (int kb = 0; kb < p.kBlocks; ++kb) {
    const uint32_t stage = p.acquire(first + kb);
    const uint32_t a = stage + firstFeature * kRowBytes, b = stage + kStageA;
    wgmmaFence();
#pragma unroll
    for (int s = 0; s < kKBlock / kWgmmaK; ++s)
#pragma unroll
      for (int m = 0; m < kWarpgroupTiles; ++m)
        wgmmaBf16<Tokens>(acc[m], swizzledDescriptor(a + m * tileStride * kRowBytes, s),
                          swizzledDescriptor(b, s), kb > 0 || s > 0);
    wgmmaCommit();
    wgmmaWait<kWgmmaInFlight>();
    if (kWgmmaInFlight == 0 || kb > 0)
      p.release(first + kb - kWgmmaInFlight);
  }
  wgmmaWait<0>();
  if (kWgmmaInFlight > 0)
    p.release(first + p.kBlocks - 1);
#pragma unroll
  for (int m = 0; m < kWarpgroupTiles; ++m)
    pinAccumulators(acc[m]);
  if constexpr (kWarpgroupTiles == 2) {
    if (gated) {
      storeGatedTile<Tokens>(p.a, t, acc[0], acc[1],
                             int64_t(featureTile) * (kFeatureTile / 2) + firstFeature);
      return;
    }
  }
  const int64_t feature = int64_t(featureTile) * kFeatureTile + firstFeature;
#pragma unroll
  for (int m = 0; m < kWarpgroupTiles; ++m)
    storeTile<Tokens>(p.a, t, acc[m], feature + m * 64);
}

// The tile with the narrowest instruction that covers its rows (Tokens, Tokens + 32, ...).
template <int Tokens, class Ring>
__device__ __forceinline__ void runWidth(const Ring &p, int64_t first, const GroupedGemmTile &t,
                                         int featureTile, int wg) {
  if constexpr (Tokens < kMaxTileTokens)
    if (t.rows > Tokens)
      return runWidth<Tokens + kTokenStep>(p, first, t, featureTile, wg);
  runTile<Tokens>(p, first, t, featureTile, wg);
}

// The consumer side: the CTA's tiles, each with the narrowest instruction for its rows.
template <class Ring> __device__ __forceinline__ void consumeTiles(const Ring &p) {
  const int wg = threadIdx.x / kernels::sm90::kWarpgroupThreads;
  for (int64_t first = 0; first < p.items; first += p.kBlocks) {
    const int64_t tile = p.tileOf(first);
    runWidth<kTokenStep>(p, first, p.tokenTile(tile), p.featureTileOf(tile), wg);
  }
}

// One persistent CTA, `cta` of `ctas` (CtaWork). `shared`: kSharedBytes.
__device__ __forceinline__ void groupedGemmCta(const GroupedGemmArgs &a, char *shared, int cta,
                                               int ctas) {
  const Pipeline p(a, shared, cta, ctas);
  if (p.items == 0)
    return;
  for (int s = 0; s < kAhead; ++s)
    p.load(s);
  consumeTiles(p);
  cpAsyncWait<0>(); // the empty groups past the last item
}

#if KILN_GROUPED_GEMM_TMA
// The TMA ring (the library's): a third warpgroup produces, the two others only
// consume, and the stages hand over through mbarriers instead of a CTA barrier a K block.
// One producer thread issues each item as tensor-map loads (Common/Tma.cuh): the
// weights' kFeatureTile x 64 box in one instruction, the tokens in boxes of kTokenBox
// rows (a box past the input's last row reads zeros). With gathered input (rowTokens)
// the producer warpgroup's 128 threads copy the token rows with cp.async instead (TMA
// has no row gather on sm_90) and hand them to the barrier. full[s] completes when the
// item's bytes (and copies) have landed; empty[s] when both consumer warpgroups' wgmmas
// are done reading it.
using kernels::sm90::mbarrierArrive;
using kernels::sm90::mbarrierArriveExpectTx;
using kernels::sm90::mbarrierArriveOnCopies;
using kernels::sm90::mbarrierInit;
using kernels::sm90::mbarrierWait;
using kernels::sm90::tmaLoad2d;

constexpr int kProducerThreads = kernels::sm90::kWarpgroupThreads;
constexpr int kTmaThreads = kThreads + kProducerThreads;
constexpr int kTmaSharedBytes = kSharedBytes + 2 * kStages * 8;
constexpr int kTokenBox = kTokenStep;

// The maps the host encodes per call (Common/TensorMap.h): weights as [experts x n, k] in
// boxes of kFeatureTile rows (gated: the gate's and the up's in boxes of half that), the
// input as [rows, k] in boxes of kTokenBox rows.
struct GroupedGemmMaps {
  kernels::sm90::TensorMap weights, tokens, up;
};

struct TmaRing : CtaWork {
  const GroupedGemmMaps &maps;
  uint32_t bars; // full[kStages] then empty[kStages], after the ring

  __device__ __forceinline__ TmaRing(const GroupedGemmArgs &args, const GroupedGemmMaps &m,
                                     char *shared, int cta, int ctas)
      : CtaWork(args, shared, cta, ctas), maps(m), bars(ringAddress + kStages * kStageBytes) {}
  __device__ __forceinline__ uint32_t full(int64_t item) const {
    return bars + static_cast<uint32_t>(item % kStages) * 8;
  }
  __device__ __forceinline__ uint32_t empty(int64_t item) const {
    return bars + static_cast<uint32_t>(kStages + item % kStages) * 8;
  }
  __device__ __forceinline__ uint32_t acquire(int64_t item) const {
    mbarrierWait(full(item), static_cast<uint32_t>(item / kStages) & 1);
    // Gathered token rows came by cp.async (the generic proxy); wgmma reads through the
    // async proxy.
    if (a.rowTokens)
      kernels::sm90::fenceProxyAsyncShared();
    return stageAddress(item);
  }
  __device__ __forceinline__ void release(int64_t item) const {
    if (threadIdx.x % kernels::sm90::kWarpgroupThreads == 0)
      mbarrierArrive(empty(item));
  }
  // The arrivals full[s] expects a phase: the TMA issuer's, and with gathered input every
  // producer thread's hand-over of its copies.
  __device__ __forceinline__ static unsigned fullArrivals(const GroupedGemmArgs &a) {
    return a.rowTokens ? 1 + kProducerThreads : 1;
  }
  // The producer warpgroup's `thread`: every item, once the consumers have released its
  // stage. Thread 0 issues the TMA loads; with gathered input all copy the token rows.
  __device__ __forceinline__ void produce(int thread) const {
    const bool gather = a.rowTokens != nullptr;
    if (!gather && thread != 0)
      return;
    GroupedGemmTile t{};
    int featureTile = 0, tokens = 0;
    for (int64_t item = 0; item < items; ++item) {
      const int kBlock = static_cast<int>(item % kBlocks);
      if (kBlock == 0) { // a new tile: its descriptor once
        const int64_t tile = tileOf(item);
        t = tokenTile(tile);
        featureTile = featureTileOf(tile);
        tokens = (t.rows + kTokenStep - 1) / kTokenStep * kTokenStep;
      }
      if (item >= kStages)
        mbarrierWait(empty(item), static_cast<uint32_t>(item / kStages - 1) & 1);
      const uint32_t bar = full(item), stageAt = stageAddress(item);
      const int k0 = kBlock * kernels::sm90::kKBlock;
      if (gather) {
        gatherTokens(t, tokens, k0, stage(item) + kStageA, thread);
        mbarrierArriveOnCopies(bar);
        if (thread != 0)
          continue;
      }
      const int tmaTokens = gather ? 0 : tokens; // gathered rows come by cp.async
      mbarrierArriveExpectTx(bar, static_cast<uint32_t>(kStageA + tmaTokens * kRowBytes));
      if (a.up) { // the gate's rows of the CTA's features, then the up's
        const int32_t row =
            static_cast<int32_t>(t.expert * a.n + featureTile * (kFeatureTile / 2));
        tmaLoad2d(stageAt, &maps.weights, k0, row, bar);
        tmaLoad2d(stageAt + (kFeatureTile / 2) * kRowBytes, &maps.up, k0, row, bar);
      } else {
        tmaLoad2d(stageAt, &maps.weights, k0,
                  static_cast<int32_t>(t.expert * a.n + featureTile * kFeatureTile), bar);
      }
      if (!gather)
        for (int r = 0; r < tokens; r += kTokenBox)
          tmaLoad2d(stageAt + kStageA + r * kRowBytes, &maps.tokens, k0, t.first + r, bar);
    }
    if (gather)
      kernels::sm90::cpAsyncWaitAll(); // no copy outlives its thread
  }
  // The tile's token rows of K block k0 (in[rowTokens[first + r]]), 16 bytes a copy, into
  // the swizzled stage; rows past the tile up to `tokens` are zero-filled.
  __device__ __forceinline__ void gatherTokens(const GroupedGemmTile &t, int tokens, int k0,
                                               char *stageB, int thread) const {
    using kernels::sm90::swizzledOffset;
    for (int c = thread; c < tokens * 8; c += kProducerThreads) {
      const int row = c >> 3, chunk = c & 7;
      const bool valid = row < t.rows;
      const uint16_t *src =
          valid ? a.in + static_cast<int64_t>(a.rowTokens[t.first + row]) * a.k + k0 + chunk * 8
                : a.in;
      cpAsync16(stageB + swizzledOffset(row, chunk), src, valid);
    }
  }
};

// One persistent CTA of kTmaThreads, `cta` of `ctas` (CtaWork). `shared`: kTmaSharedBytes.
__device__ __forceinline__ void groupedGemmCtaTma(const GroupedGemmArgs &a,
                                                  const GroupedGemmMaps &maps, char *shared,
                                                  int cta, int ctas) {
  const TmaRing p(a, maps, shared, cta, ctas);
  if (p.items == 0)
    return;
  if (threadIdx.x == 0)
    for (int s = 0; s < kStages; ++s) {
      mbarrierInit(p.full(s), TmaRing::fullArrivals(a));
      mbarrierInit(p.empty(s), 2);
    }
  __syncthreads();
  if (threadIdx.x >= kThreads) {
    kernels::sm90::shrinkRegisters<40>();
    p.produce(threadIdx.x - kThreads);
    return;
  }
  kernels::sm90::growRegisters<232>();
  consumeTiles(p);
}

#ifndef KILN_CTA_EMULATION
// The tensor maps of one call, on the host (launchGroupedGemm and the benchmark's TMA
// variants): the weights' (the gate's when gated), the up's when gated, the input's.
inline cudaError_t encodeMaps(const GroupedGemmArgs &a, GroupedGemmMaps &maps) {
  using kernels::sm90::encodeBf16SwizzledMap;
  const uint32_t weightBox = a.up ? kFeatureTile / 2 : kFeatureTile;
  cudaError_t e = encodeBf16SwizzledMap(&maps.weights, a.weights, a.experts * a.n, a.k, weightBox);
  if (e == cudaSuccess && a.up)
    e = encodeBf16SwizzledMap(&maps.up, a.up, a.experts * a.n, a.k, weightBox);
  if (e == cudaSuccess)
    e = encodeBf16SwizzledMap(&maps.tokens, a.in, a.rows, a.k, kTokenBox);
  return e;
}
#endif
#endif // KILN_GROUPED_GEMM_TMA

} // namespace
} // namespace grouped

} // namespace kiln::graph

#endif
