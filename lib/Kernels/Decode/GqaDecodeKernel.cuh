// gqa_decode kernel: one block = (split, kv head x row block, sequence). The q_len*group
// query rows of a kv head are processed in blocks of MT m16 tiles (one block for up to
// 32 rows, so each K/V byte is read from HBM once for q_len*group <= 32). K/V tiles of
// TILE_N keys stream through a STAGES-deep cp.async
// pipeline into swizzled smem; S = Q K^T and O += P V run on mma.sync m16n8k16 with an
// online (flash) softmax in fp32. Warps split rows (MT) x keys (WARPS_N); key-split
// warps are merged in smem at the end. With num_splits > 1 the block writes a
// normalized fp32 partial + log2-sum-exp to the workspace; then either the last block
// of its (sequence, kv head x row block) group to arrive combines the group's partials
// (fused combine, args.counters), or splitCombineKernel does in a second launch. Both
// run the same arithmetic (splitWeights/combineFour), so they give the same bits.
//
// Programmatic dependent launch: the kernel waits (pdlWait) before its first global
// read, so its launch and block setup may overlap the previous kernel's tail, and lets
// the next kernel launch once its own key loop is done.
//
// Batch invariance: a query row's arithmetic must not depend on how many other rows
// share its block (decode q_len 1 and a speculative verify of q_len 5 must give the same
// bits for the same query, or greedy speculation is not lossless). So the key split
// between warps (WARPS_N) is fixed per head_dim, never chosen from MT, and the split-KV
// chunks are anchored at key 0 (num_splits/split_keys chosen by the caller).
//
// Sliding window (args.window > 0): query token i at position p = seq_len - q_len + i
// sees keys (p - window, p]. The block starts at the first tile that holds a key some
// row of it sees; the tiles it skips are masked for every row, and a masked tile leaves
// a row's running max, sum and output exactly as they were, so skipping changes no bit.
// Keys below the block's lowest visible key are never read (their pages may be recycled).
//
// Attention sinks (args.sinks, gpt-oss): a per-head logit in the softmax's denominator,
// added where the splits are combined (or in the same arithmetic when there is one).
//
// FP8 pools (F8): the tile's e4m3 bytes stream through the same pipeline (half the
// bytes, more stages) and are widened to fp16 in registers, as the mma fragments are
// built (e4m3 -> fp16 is exact, so the math is fp16 x fp16 -> fp32; q is rounded to fp16
// once, clamped to its range, P too):
//  - S = Q K^T: the head dimension is summed over, so its order is free. Within each
//    16-wide k step the mma's k (2t, 2t+1 | 2t+8, 2t+9) is read as d (4t, 4t+1 | 4t+2,
//    4t+3): a lane's K fragment is then 4 consecutive bytes of its key (one 32-bit
//    load), and its Q fragment 4 consecutive halves.
//  - O += P V: ldmatrix.trans over the bytes (pairs of d as 16-bit elements) gives a
//    lane V[key 2t, 2t+1][d 2g, 2g+1]; a byte permute splits that into the fragments of
//    two n8 output tiles, the even and the odd d of a 16-wide chunk, so the output's
//    columns come out interleaved (outPairs maps them back).
// The raw tiles are XOR-swizzled by 16-byte chunk (rawAt), so both access patterns are
// free of bank conflicts (2-way at d = 64). A block holds one KV head, so that head's
// scales are folded into the score scale (K) and the output (V).
// FAST widens the bytes with integer ops instead of cvt (e4m3x4ToHalf2x2Scaled: a byte
// is an fp16 bit pattern times 2^-8, the 2^8 going into both scales). It splits a K
// word into bytes (0, 2) and (1, 3), so Q K^T's k step reads d (4t, 4t+2 | 4t+1, 4t+3)
// instead: another order within the mma, possibly other bits. The launcher picks it
// (gqaFastFp8 in DecodeApi.cpp).
//
// f16 pools next to bf16 q/out (KT = __half, T = __nv_bfloat16): the tiles are 16-bit and
// take the plain path; the mma runs fp16 x fp16 -> fp32 on the cached values as they are
// and q rounded to fp16 once (exact for bf16 values in fp16's normal range), P rounded
// to fp16. This is the arithmetic of the fp16 kernel over the same pool: only the output
// is rounded to bf16 instead.
#ifndef KILN_LIB_KERNELS_DECODE_GQADECODEKERNEL_CUH
#define KILN_LIB_KERNELS_DECODE_GQADECODEKERNEL_CUH

#include "DecodeArgs.h"
#include "DecodeDevice.cuh"

#include "Fp8Device.cuh"

#include <type_traits>

namespace kiln::decode {

// Tuning variants of the bf16 d = 128 kernel for the benchmark (KILN_GQA_VARIANT; only
// variant 0 runs otherwise). Zero fields keep the default (variant 0's, which every other
// instance of the kernel uses too).
//  - tileN 32 halves the key split between warps (WARPS_N 2, blocks of 2 warps): another
//    summation order, so other bits than variant 0 (see gqaDefaultVariant before making
//    one a default). The other fields change no arithmetic: at the same split plan
//    (num_splits, split_keys) they give variant 0's bits. But stages and minBlocks change
//    the resident blocks an SM, which the automatic split count (num_splits 0: fill one
//    wave) follows: 1 and 3 (1 block/SM) pick half of variant 0's splits at B=1, so
//    other chunks and other bits there; 2 and 10 (3 blocks/SM) may pick more.
//  - l2Prefetch: cp.async's L2 prefetch hint in bytes (256: a key's 256-byte row slice
//    of a head in one request); -1: none. The default is kGqaDefaultL2Prefetch.
//  - hoistPage: with pages of >= tileN keys a tile lies in one page, so one block-table
//    read a tile instead of one a 16-byte chunk.
//  - minBlocks: __launch_bounds__'s resident blocks an SM (0: no bound, the default
//    kernel's codegen), so that registers do not cost the blocks/SM the smem allows
//    (page hoisting took 204 a thread without it; 3 blocks of 128 threads allow 170).
struct GqaTuning {
  int tileN, stages, l2Prefetch;
  bool hoistPage;
  int minBlocks;
};
// Every instance (all head dims, dtypes, pools, row tiles) issues its K/V cp.asyncs with
// a 128-byte L2 prefetch: as variant 12 it measured +3..8% over no hint at every
// benchmarked shape (H100, 2026-12-06, bench/Decode/NOTES.md), and a hint changes no
// arithmetic, so no bit. Variants 1-11 were measured when the default had no hint; their
// zero field now gives them this one (variant 13 is the old default).
inline constexpr int kGqaDefaultL2Prefetch = 128;
constexpr int gqaL2Prefetch(const GqaTuning &t) {
  return t.l2Prefetch < 0 ? 0 : t.l2Prefetch > 0 ? t.l2Prefetch : kGqaDefaultL2Prefetch;
}
inline constexpr GqaTuning kGqaVariants[] = {
    {0, 0, 0, false, 0},   // 0: default (64 keys, 3 stages: 96 KiB, 2 blocks/SM, 128 B)
    {64, 4, 0, false, 0},  // 1: 4 stages (128 KiB, 1 block/SM)
    {64, 2, 0, false, 3},  // 2: 2 stages (64 KiB, 3 blocks/SM)
    {64, 6, 0, false, 0},  // 3: 6 stages (192 KiB, 1 block/SM)
    {32, 6, 0, false, 0},  // 4: 32 keys, 6 stages (96 KiB, 2 blocks/SM) - other bits
    {32, 4, 0, false, 3},  // 5: 32 keys, 4 stages (64 KiB, 3 blocks/SM) - other bits
    {32, 3, 0, false, 4},  // 6: 32 keys, 3 stages (48 KiB, 4 blocks/SM) - other bits
    {0, 0, 256, false, 0}, // 7: L2 prefetch 256 B
    {0, 0, 0, true, 0},    // 8: one block-table read a tile
    {0, 0, 256, true, 0},  // 9: 7 + 8
    {64, 2, 256, true, 3}, // 10: 2 + 9 (3 blocks/SM)
    {32, 4, 256, true, 3}, // 11: 5 + 9 - other bits
    {0, 0, 128, false, 0}, // 12: L2 prefetch 128 B (now the default's; kept: the tables)
    {0, 0, -1, false, 0},  // 13: no L2 prefetch (the default before 2026-12-06)
};
inline constexpr int kGqaNumVariants = sizeof(kGqaVariants) / sizeof(kGqaVariants[0]);

template <int D, int MT, bool F8 = false, int V = 0> struct GqaConfig {
  static constexpr GqaTuning TUNE = kGqaVariants[V];
  static_assert(V == 0 || (D == 128 && !F8), "variants exist for 16-bit d = 128 only");
  static constexpr int TILE_N = TUNE.tileN ? TUNE.tileN : D == 256 ? 32 : 64;
  static constexpr int WARPS_N = TILE_N / 16 < 4 ? TILE_N / 16 : 4; // independent of MT
  static constexpr int WARPS = MT * WARPS_N;
  static constexpr int THREADS = WARPS * 32;
  static constexpr int KW = TILE_N / WARPS_N; // keys per warp per tile, multiple of 16
  // FP8 tiles are half the bytes: more stages keep as many bytes in flight per SM as
  // the 16-bit kernel (what bounds a streaming kernel), within 96 KiB a block.
  static constexpr int STAGES = TUNE.stages ? TUNE.stages
                                : D == 64   ? (F8 ? 8 : 4)
                                : D == 128  ? (F8 ? 5 : 3)
                                            : (F8 ? 4 : 2);
  static constexpr int L2_PREFETCH = gqaL2Prefetch(TUNE);
  static constexpr int MIN_BLOCKS = TUNE.minBlocks; // 0: no bound (as before variants)
  static constexpr bool HOIST_PAGE = TUNE.hoistPage;
  // d <= 128: each warp keeps its Q fragments in registers (staged through the last
  // K/V slot), so the block fits 99 KiB parts; d = 256 keeps Q in smem.
  static constexpr bool Q_IN_REGS = D <= 128;
  static constexpr int ROWS = MT * 16;
  static constexpr int CH = D / 8; // 16-byte chunks per row
  static constexpr int Q_ELEMS = ROWS * D;
  static constexpr int STAGE_ELEMS = 2 * TILE_N * D;
  static constexpr int Q_SMEM_ELEMS = Q_IN_REGS ? 0 : Q_ELEMS;
  static constexpr int KV_BYTES = F8 ? 1 : 2;          // bytes per cached element
  // [Q (d = 256)][STAGES K/V tiles]
  static constexpr int REGION_BYTES = STAGES * STAGE_ELEMS * KV_BYTES;
  static constexpr int SMEM_BYTES = Q_SMEM_ELEMS * 2 + REGION_BYTES;
  static_assert(!Q_IN_REGS || Q_ELEMS * 2 <= STAGE_ELEMS * KV_BYTES,
                "Q staging must fit one K/V slot");
  static_assert(KW % 16 == 0, "keys per warp must be a multiple of 16");
  static_assert(WARPS_N == 1 || WARPS_N * ROWS * D * 4 <= REGION_BYTES,
                "merge buffer must fit in the K/V stages");
  static_assert(ROWS * KILN_DECODE_MAX_SPLITS * 4 <= REGION_BYTES,
                "the fused combine's weights must fit in the K/V stages");
};

// Bytes b0..b3 of w (e4m3) -> fp16 pairs (b0, b2) and (b1, b3), each value times 2^-8:
// s.eeee.mmm is the fp16 s.0eeee.mmm0000000 scaled by 2^-8 (exact, subnormals too; the
// e4m3 NaN byte becomes 480 * 2^-8, which kv_append never writes). Three integer ops a
// pair, where cvt takes the conversion pipe (the FP8 kernel's suspected limit).
__device__ __forceinline__ void e4m3x4ToHalf2x2Scaled(uint32_t w, uint32_t &even, uint32_t &odd) {
  odd = (w & 0x80008000u) | ((w >> 1) & 0x3f803f80u);
  even = ((w << 8) & 0x80008000u) | ((w << 7) & 0x3f803f80u);
}

// T: q and out; KT: a cached element: T, e4m3 bytes (uint8_t, bf16 T) or __half (bf16
// T: an f16 pool). CT, the mma operand type, is fp16 over FP8 and f16 pools. FAST (FP8
// only): the integer widening (see the top).
template <typename T, int D, int MT, typename KT, int V = 0, bool FAST = false>
__global__ void __launch_bounds__(GqaConfig<D, MT, sizeof(KT) == 1, V>::THREADS,
                                  GqaConfig<D, MT, sizeof(KT) == 1, V>::MIN_BLOCKS)
    gqaDecodeKernel(const GqaArgs args) {
  constexpr bool F8 = sizeof(KT) == 1;
  static_assert(std::is_same_v<KT, T> ||
                    (std::is_same_v<T, __nv_bfloat16> &&
                     (std::is_same_v<KT, uint8_t> || std::is_same_v<KT, __half>)),
                "a pool holds T, or FP8 e4m3 / f16 next to bf16");
  static_assert(!FAST || F8, "the integer widening is of FP8 bytes");
  using C = GqaConfig<D, MT, F8, V>;
  using CT = std::conditional_t<F8, __half, KT>;
  extern __shared__ __align__(16) unsigned char smemRaw[];
  unsigned char *region = smemRaw + C::Q_SMEM_ELEMS * 2;
  KT *sKV = reinterpret_cast<KT *>(region); // K/V stages
  CT *sQ = C::Q_IN_REGS ? reinterpret_cast<CT *>(sKV + (C::STAGES - 1) * C::STAGE_ELEMS)
                        : reinterpret_cast<CT *>(smemRaw);

  // Everything below may read what the previous kernel wrote (q, pages, tables).
  pdlWait();
  const int split = blockIdx.x, b = blockIdx.z;
  const int kvh = blockIdx.y / args.rowBlocks, rowBase = (blockIdx.y % args.rowBlocks) * C::ROWS;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int seqLen = args.seqLens[b];
  const int allRows = args.qLen * args.group;
  const int rows = min(C::ROWS, allRows - rowBase); // this block's rows
  const int splitStart = split * args.splitTiles * C::TILE_N;
  const int end = min(seqLen, splitStart + args.splitTiles * C::TILE_N);
  // The block's lowest visible key (its first query token's window), 0 without window.
  const int keyFloor =
      args.window > 0 ? max(0, seqLen - args.qLen + rowBase / args.group - args.window + 1) : 0;
  const int start =
      keyFloor > splitStart ? splitStart + (keyFloor - splitStart) / C::TILE_N * C::TILE_N
                            : splitStart;
  const int numTiles = end > start ? (end - start + C::TILE_N - 1) / C::TILE_N : 0;
  const T *q = static_cast<const T *>(args.q);
  const KT *kv = static_cast<const KT *>(args.kv);
  const int32_t *table = args.blockTable + static_cast<size_t>(b) * args.maxPages;

  // Query rows rowBase + r = token * group + g  ->  q[b][token][kvh * group + g][:]
  for (int c = tid; c < C::ROWS * C::CH; c += C::THREADS) {
    int r = c / C::CH, ch = c % C::CH;
    bool valid = r < rows;
    int token = (rowBase + r) / args.group, head = kvh * args.group + (rowBase + r) % args.group;
    const T *src = valid ? q + ((static_cast<size_t>(b) * args.qLen + token) * args.qHeads + head) * D + ch * 8 : q;
    if constexpr (std::is_same_v<CT, T>) {
      cpAsync16(sQ + swz(r, ch, C::CH), src, valid);
    } else {
      const uint4 raw = valid ? *reinterpret_cast<const uint4 *>(src) : make_uint4(0, 0, 0, 0);
      // An f16 pool keeps a NaN query NaN, as the bf16 pool's kernel does.
      *reinterpret_cast<uint4 *>(sQ + swz(r, ch, C::CH)) =
          F8 ? kiln::kernels::bf16x8ToFp16(raw) : kiln::kernels::bf16x8ToFp16Sat(raw);
    }
  }
  cpAsyncCommit();

  const size_t tokenStride = static_cast<size_t>(args.kvHeads) * D;
  // One block-table lookup and address per (key, chunk) serves both K and V.
  const size_t vOffset = static_cast<size_t>(args.pageSize) * tokenStride;
  // 16-byte chunks of a key's row in the pool: 8 16-bit values, or 16 FP8 ones.
  constexpr int KV_CH = D * C::KV_BYTES / 16;
  constexpr int PER_CHUNK = 16 / C::KV_BYTES;
  // Byte offset of 16-byte chunk `ch` of raw FP8 row `row` (K rows, then V rows): XOR
  // swizzled within the row, so a column of chunks down 8 rows spreads over the banks.
  auto rawAt = [](int row, int ch) { return row * D + ((ch ^ row) & (KV_CH - 1)) * 16; };
  auto loadTile = [&](int tile) {
    KT *dst = sKV + (tile % C::STAGES) * C::STAGE_ELEMS;
    const int base = start + tile * C::TILE_N;
    if constexpr (C::HOIST_PAGE) {
      // Tiles start at multiples of TILE_N, so with pages of >= TILE_N keys the tile's
      // keys share one page: one table read (base < end: an entry of the sequence).
      if (args.pageSize >= C::TILE_N) {
        const size_t page = static_cast<size_t>(table[base >> args.pageShift]);
        const KT *pageK = kv +
                          (page * 2 * args.pageSize + (base & (args.pageSize - 1))) * tokenStride +
                          static_cast<size_t>(kvh) * D;
#pragma unroll
        for (int c = tid; c < C::TILE_N * KV_CH; c += C::THREADS) {
          const int key = c / KV_CH, ch = c % KV_CH;
          const int pos = base + key;
          const bool valid = pos < end && pos >= keyFloor;
          const KT *src = valid ? pageK + key * tokenStride + ch * PER_CHUNK : kv;
          const int at = swz(key, ch, C::CH);
          cpAsync16Pf<C::L2_PREFETCH>(dst + at, src, valid);
          cpAsync16Pf<C::L2_PREFETCH>(dst + C::TILE_N * D + at, valid ? src + vOffset : kv, valid);
        }
        return;
      }
    }
#pragma unroll
    for (int c = tid; c < C::TILE_N * KV_CH; c += C::THREADS) {
      int key = c / KV_CH, ch = c % KV_CH;
      int pos = base + key;
      bool valid = pos < end && pos >= keyFloor;
      const KT *src = kv;
      if (valid) {
        size_t page = static_cast<size_t>(table[pos >> args.pageShift]);
        int slot = pos & (args.pageSize - 1);
        src = kv + (page * 2 * args.pageSize + slot) * tokenStride + static_cast<size_t>(kvh) * D +
              ch * PER_CHUNK;
      }
      int at = F8 ? rawAt(key, ch) : swz(key, ch, C::CH);
      cpAsync16Pf<C::L2_PREFETCH>(dst + at, src, valid);
      cpAsync16Pf<C::L2_PREFETCH>(dst + C::TILE_N * D + at, valid ? src + vOffset : kv, valid);
    }
  };
  for (int s = 0; s < C::STAGES - 1; ++s) {
    if (s < numTiles)
      loadTile(s);
    cpAsyncCommit();
  }

  const int mt = warp % MT, wn = warp / MT;
  const int g = lane / 4, t4 = lane % 4;
  const int row0 = mt * 16 + g, row1 = row0 + 8;
  // Key limit per row: causal among the q_len new tokens; the window's first key.
  const int past0 = seqLen - args.qLen + 1 + (rowBase + row0) / args.group; // keys < this
  const int past1 = seqLen - args.qLen + 1 + (rowBase + row1) / args.group;
  const int lim0 = row0 < rows ? min(end, past0) : end;
  const int lim1 = row1 < rows ? min(end, past1) : end;
  const int lo0 = args.window > 0 && row0 < rows ? past0 - args.window : 0;
  const int lo1 = args.window > 0 && row1 < rows ? past1 - args.window : 0;
  // FP8: this KV head's dequantization scales (K's in the scores, V's in the output).
  const float scaleLog2 = (F8 && args.kScale ? args.scaleLog2 * args.kScale[kvh] : args.scaleLog2) *
                          (FAST ? 256.f : 1.f); // the fast widening's 2^-8, exactly
  const float vScale = (F8 && args.vScale ? args.vScale[kvh] : 1.f) * (FAST ? 256.f : 1.f);

  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i)
    o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float m0 = -1e30f, m1 = -1e30f, l0 = 0.f, l1 = 0.f;

  // Q fragment of row tile mt, k16 step kk; F8 reads k in the permuted order (see top).
  auto loadQFrag = [&](uint32_t(&a)[4], int kk) {
    if constexpr (F8) {
      const int ch = kk * 2 + (t4 >> 1), at = 4 * (t4 & 1);
      const uint2 lo = *reinterpret_cast<const uint2 *>(sQ + swz(mt * 16 + g, ch, C::CH) + at);
      const uint2 hi = *reinterpret_cast<const uint2 *>(sQ + swz(mt * 16 + g + 8, ch, C::CH) + at);
      if constexpr (FAST) {
        // k (2t, 2t+1) <- d (4t, 4t+2); k (2t+8, 2t+9) <- d (4t+1, 4t+3).
        a[0] = __byte_perm(lo.x, lo.y, 0x5410);
        a[1] = __byte_perm(hi.x, hi.y, 0x5410);
        a[2] = __byte_perm(lo.x, lo.y, 0x7632);
        a[3] = __byte_perm(hi.x, hi.y, 0x7632);
      } else {
        a[0] = lo.x;
        a[1] = hi.x;
        a[2] = lo.y;
        a[3] = hi.y;
      }
    } else {
      ldsmX4(a, sQ + swz(mt * 16 + (lane % 16), kk * 2 + lane / 16, C::CH));
    }
  };
  // Q fragments (row tile mt, k16 step kk); in registers when C::Q_IN_REGS.
  uint32_t qFrag[C::Q_IN_REGS ? D / 16 : 1][4];
  if constexpr (C::Q_IN_REGS) {
    cpAsyncWait<C::STAGES - 2>(); // the Q group (committed first) has landed
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      loadQFrag(qFrag[kk], kk);
    __syncthreads(); // the slot is reused by tile STAGES-1
  }

  for (int tile = 0; tile < numTiles; ++tile) {
    cpAsyncWait<C::STAGES - 2>();
    __syncthreads();
    if (tile + C::STAGES - 1 < numTiles)
      loadTile(tile + C::STAGES - 1);
    cpAsyncCommit();

    const KT *sK = sKV + (tile % C::STAGES) * C::STAGE_ELEMS;
    const KT *sV = sK + C::TILE_N * D;
    const int kBase = wn * C::KW;

    float s[C::KW / 8][4];
#pragma unroll
    for (int j = 0; j < C::KW / 8; ++j)
      s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t a[4];
      if constexpr (C::Q_IN_REGS) {
        a[0] = qFrag[kk][0];
        a[1] = qFrag[kk][1];
        a[2] = qFrag[kk][2];
        a[3] = qFrag[kk][3];
      } else {
        loadQFrag(a, kk);
      }
#pragma unroll
      for (int j = 0; j < C::KW / 16; ++j) {
        if constexpr (F8) {
          // 4 bytes of key kBase + 16j + 8jj + g: d 4t..4t+3 of this k step.
#pragma unroll
          for (int jj = 0; jj < 2; ++jj) {
            const int key = kBase + j * 16 + jj * 8 + g;
            const uint32_t w = *reinterpret_cast<const uint32_t *>(
                reinterpret_cast<const uint8_t *>(sK) + rawAt(key, kk) + 4 * t4);
            if constexpr (FAST) {
              uint32_t even, odd;
              e4m3x4ToHalf2x2Scaled(w, even, odd);
              mma16816<CT>(s[2 * j + jj], a, even, odd);
            } else {
              mma16816<CT>(s[2 * j + jj], a, kiln::kernels::e4m3x2ToHalf2(w),
                           kiln::kernels::e4m3x2ToHalf2(w >> 16));
            }
          }
        } else {
          uint32_t bf[4];
          int key = kBase + j * 16 + (lane % 8) + (lane / 16) * 8;
          ldsmX4(bf, sK + swz(key, kk * 2 + (lane / 8) % 2, C::CH));
          mma16816<CT>(s[2 * j], a, bf[0], bf[1]);
          mma16816<CT>(s[2 * j + 1], a, bf[2], bf[3]);
        }
      }
    }

    const int posBase = start + tile * C::TILE_N + kBase + 2 * t4;
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int j = 0; j < C::KW / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        int pos = posBase + j * 8 + e;
        s[j][e] = pos < lim0 && pos >= lo0 ? s[j][e] * scaleLog2 : -INFINITY;
        s[j][2 + e] = pos < lim1 && pos >= lo1 ? s[j][2 + e] * scaleLog2 : -INFINITY;
        mx0 = fmaxf(mx0, s[j][e]);
        mx1 = fmaxf(mx1, s[j][2 + e]);
      }
    }
    mx0 = quadMax(mx0);
    mx1 = quadMax(mx1);
    const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
    const float alpha0 = exp2f(m0 - mn0), alpha1 = exp2f(m1 - mn1);
    m0 = mn0;
    m1 = mn1;
    float sum0 = 0.f, sum1 = 0.f;
#pragma unroll
    for (int j = 0; j < C::KW / 8; ++j) {
      s[j][0] = exp2f(s[j][0] - mn0);
      s[j][1] = exp2f(s[j][1] - mn0);
      s[j][2] = exp2f(s[j][2] - mn1);
      s[j][3] = exp2f(s[j][3] - mn1);
      sum0 += s[j][0] + s[j][1];
      sum1 += s[j][2] + s[j][3];
    }
    l0 = l0 * alpha0 + sum0;
    l1 = l1 * alpha1 + sum1;
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      o[i][0] *= alpha0;
      o[i][1] *= alpha0;
      o[i][2] *= alpha1;
      o[i][3] *= alpha1;
    }
#pragma unroll
    for (int kk = 0; kk < C::KW / 16; ++kk) {
      uint32_t a[4];
      a[0] = pack2<CT>(s[2 * kk][0], s[2 * kk][1]);
      a[1] = pack2<CT>(s[2 * kk][2], s[2 * kk][3]);
      a[2] = pack2<CT>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      a[3] = pack2<CT>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
      int key = kBase + kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8;
      if constexpr (F8) {
        // Matrices: keys 0-7 / 8-15 of this k step x 16-byte chunks 2cp / 2cp+1. A lane's
        // register holds V[2t][2g], V[2t][2g+1], V[2t+1][2g], V[2t+1][2g+1] (bytes 0..3):
        // bytes 0, 2 feed the chunk's even-d tile, bytes 1, 3 its odd-d tile.
#pragma unroll
        for (int cp = 0; cp < D / 32; ++cp) {
          uint32_t v[4];
          ldsmX4T(v, reinterpret_cast<const uint8_t *>(sV) + rawAt(key, 2 * cp + lane / 16));
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int c = 2 * cp + h;
            if constexpr (FAST) {
              uint32_t e0, o0, e1, o1;
              e4m3x4ToHalf2x2Scaled(v[2 * h], e0, o0);
              e4m3x4ToHalf2x2Scaled(v[2 * h + 1], e1, o1);
              mma16816<CT>(o[2 * c], a, e0, e1);
              mma16816<CT>(o[2 * c + 1], a, o0, o1);
              continue;
            }
            mma16816<CT>(o[2 * c], a, kiln::kernels::e4m3x2ToHalf2(__byte_perm(v[2 * h], 0, 0x20)),
                         kiln::kernels::e4m3x2ToHalf2(__byte_perm(v[2 * h + 1], 0, 0x20)));
            mma16816<CT>(o[2 * c + 1], a, kiln::kernels::e4m3x2ToHalf2(__byte_perm(v[2 * h], 0, 0x31)),
                         kiln::kernels::e4m3x2ToHalf2(__byte_perm(v[2 * h + 1], 0, 0x31)));
          }
        }
      } else {
#pragma unroll
        for (int np = 0; np < D / 16; ++np) {
          uint32_t bf[4];
          ldsmX4T(bf, sV + swz(key, np * 2 + lane / 16, C::CH));
          mma16816<CT>(o[2 * np], a, bf[0], bf[1]);
          mma16816<CT>(o[2 * np + 1], a, bf[2], bf[3]);
        }
      }
    }
  }
  cpAsyncWait<0>();
  // No more K/V reads: the next kernel's blocks may start launching (they wait for this
  // grid to finish before reading anything).
  pdlLaunchDependents();

  l0 = quadSum(l0);
  l1 = quadSum(l1);

  // Output row rowBase + r -> flat row index ((b*qLen + token)*qHeads + head).
  auto flatRow = [&](int r) {
    int token = (rowBase + r) / args.group, head = kvh * args.group + (rowBase + r) % args.group;
    return (static_cast<size_t>(b) * args.qLen + token) * args.qHeads + head;
  };
  auto store = [&](int r, int col, float v0, float v1, float rowMax, float rowSum) {
    if (r >= rows)
      return;
    float inv = rowSum > 0.f ? 1.f / rowSum : 0.f;
    if constexpr (F8)
      inv *= vScale;
    size_t fr = flatRow(r);
    if (args.numSplits == 1 && args.sinks) {
      // The combine's arithmetic for one split plus the sink (splitCombineKernel), so a
      // step with and one without split-KV give the same bits.
      const float lse = rowSum > 0.f ? rowMax + log2f(rowSum) : -INFINITY;
      const float sinkLse = args.sinks[kvh * args.group + (rowBase + r) % args.group] *
                            1.4426950408889634f;
      const float maxLse = fmaxf(sinkLse, lse);
      const float w = exp2f(lse - maxLse);
      const float total = w + exp2f(sinkLse - maxLse);
      const float invTotal = total > 0.f ? 1.f / total : 0.f;
      *reinterpret_cast<uint32_t *>(static_cast<T *>(args.out) + fr * D + col) =
          pack2<T>(w * (v0 * inv) * invTotal, w * (v1 * inv) * invTotal);
    } else if (args.numSplits == 1) {
      *reinterpret_cast<uint32_t *>(static_cast<T *>(args.out) + fr * D + col) =
          pack2<T>(v0 * inv, v1 * inv);
    } else {
      size_t idx = fr * args.numSplits + split;
      *reinterpret_cast<float2 *>(args.partO + idx * D + col) = make_float2(v0 * inv, v1 * inv);
      if (col == 0)
        args.partLse[idx] = rowSum > 0.f ? rowMax + log2f(rowSum) : -INFINITY;
    }
  };

  // Each adjacent pair of output columns this lane holds: fn(col, row0's two values,
  // row1's two values). F8's PV interleaves a 16-wide chunk's even and odd columns over
  // two n8 tiles: the lane holds columns 16c + 4t .. 4t+3 of them.
  auto outPairs = [&](auto &&fn) {
    if constexpr (F8) {
#pragma unroll
      for (int c = 0; c < D / 16; ++c)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          fn(16 * c + 4 * t4 + 2 * e, o[2 * c][e], o[2 * c + 1][e], o[2 * c][2 + e],
             o[2 * c + 1][2 + e]);
    } else {
#pragma unroll
      for (int i = 0; i < D / 8; ++i)
        fn(i * 8 + 2 * t4, o[i][0], o[i][1], o[i][2], o[i][3]);
    }
  };

  if constexpr (C::WARPS_N == 1) {
    outPairs([&](int col, float a0, float a1, float b0, float b1) {
      store(row0, col, a0, a1, m0, l0);
      store(row1, col, b0, b1, m1, l1);
    });
  } else {
    // Merge key-split warps: stats then rescaled O through smem (K/V stages reused).
    __syncthreads();
    float *sO = reinterpret_cast<float *>(region);      // [WARPS_N][ROWS][D]
    __shared__ float sM[C::WARPS_N][C::ROWS], sL[C::WARPS_N][C::ROWS];
    if (t4 == 0) {
      sM[wn][row0] = m0;
      sM[wn][row1] = m1;
      sL[wn][row0] = l0;
      sL[wn][row1] = l1;
    }
    __syncthreads();
    float gm0 = -1e30f, gm1 = -1e30f;
#pragma unroll
    for (int w = 0; w < C::WARPS_N; ++w) {
      gm0 = fmaxf(gm0, sM[w][row0]);
      gm1 = fmaxf(gm1, sM[w][row1]);
    }
    float f0 = exp2f(m0 - gm0), f1 = exp2f(m1 - gm1);
    float *dst = sO + wn * C::ROWS * D;
    outPairs([&](int col, float a0, float a1, float b0, float b1) {
      *reinterpret_cast<float2 *>(dst + row0 * D + col) = make_float2(a0 * f0, a1 * f0);
      *reinterpret_cast<float2 *>(dst + row1 * D + col) = make_float2(b0 * f1, b1 * f1);
    });
    __syncthreads();
    for (int idx = tid; idx < rows * (D / 2); idx += C::THREADS) {
      int r = idx / (D / 2), col = (idx % (D / 2)) * 2;
      float gm = -1e30f;
#pragma unroll
      for (int w = 0; w < C::WARPS_N; ++w)
        gm = fmaxf(gm, sM[w][r]);
      float sum = 0.f, v0 = 0.f, v1 = 0.f;
#pragma unroll
      for (int w = 0; w < C::WARPS_N; ++w) {
        sum += sL[w][r] * exp2f(sM[w][r] - gm);
        float2 v = *reinterpret_cast<const float2 *>(sO + (w * C::ROWS + r) * D + col);
        v0 += v.x;
        v1 += v.y;
      }
      store(r, col, v0, v1, gm, sum);
    }
  }

  if (args.numSplits > 1 && args.counters) {
    // Fused combine. Release: this block's partials are visible GPU-wide before its
    // arrival is counted; the block that completes the count sees every partial.
    __threadfence();
    __syncthreads();
    __shared__ bool sLast;
    if (tid == 0) {
      unsigned *counter = args.counters + blockIdx.z * gridDim.y + blockIdx.y;
      sLast = atomicAdd(counter, 1u) + 1 == static_cast<unsigned>(args.numSplits);
      // Every split has arrived: back to 0 for the next launch (a CUDA graph replays
      // the same workspace), so no launch needs a memset.
      if (sLast)
        atomicExch(counter, 0u);
    }
    __syncthreads();
    if (!sLast)
      return;
    __threadfence(); // acquire: the other blocks' partials, not stale lines
    const int splits = args.numSplits;
    // The K/V stages are free now: [rows][splits] lse, then weights in place.
    float *sW = reinterpret_cast<float *>(region);
    __shared__ float sInv[C::ROWS];
    for (int i = tid; i < rows * splits; i += C::THREADS)
      sW[i] = __ldcg(args.partLse + flatRow(i / splits) * splits + i % splits);
    __syncthreads();
    if (tid < rows) {
      // The separate combine's sink: sinks[flat row % q_heads], the row's head.
      const float sinkLse =
          args.sinks
              ? args.sinks[kvh * args.group + (rowBase + tid) % args.group] * 1.4426950408889634f
              : -INFINITY;
      float *w = sW + tid * splits;
      sInv[tid] = splitWeights(w, splits, sinkLse, args.sinks != nullptr, w);
    }
    __syncthreads();
    for (int i = tid; i < rows * (D / 4); i += C::THREADS) {
      const int r = i / (D / 4), d = (i % (D / 4)) * 4;
      const size_t fr = flatRow(r);
      *reinterpret_cast<uint2 *>(static_cast<T *>(args.out) + fr * D + d) =
          combineFour<T>(args.partO + fr * splits * D, sW + r * splits, splits, D, d, sInv[r]);
    }
  }
}

} // namespace kiln::decode

#endif
