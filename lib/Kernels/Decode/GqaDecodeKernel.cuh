// gqa_decode kernel: one block = (split, kv head x row block, sequence). The q_len*group
// query rows of a kv head are processed in blocks of MT m16 tiles (one block for up to
// 32 rows, so each K/V byte is read from HBM once for q_len*group <= 32). K/V tiles of
// TILE_N keys stream through a STAGES-deep cp.async
// pipeline into swizzled smem; S = Q K^T and O += P V run on mma.sync m16n8k16 with an
// online (flash) softmax in fp32. Warps split rows (MT) x keys (WARPS_N); key-split
// warps are merged in smem at the end. With num_splits > 1 the block writes a
// normalized fp32 partial + log2-sum-exp to the workspace for splitCombineKernel.
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
// bytes), and each tile is widened once into an fp16 tile in smem that the unchanged
// mma.sync path reads. e4m3 -> fp16 is exact, so the math is fp16 x fp16 -> fp32: q is
// rounded to fp16 once (clamped to its range), P too. A block holds one KV head, so that
// head's scales are folded into the score scale (K) and the output (V).
#ifndef KILN_LIB_KERNELS_DECODE_GQADECODEKERNEL_CUH
#define KILN_LIB_KERNELS_DECODE_GQADECODEKERNEL_CUH

#include "DecodeArgs.h"
#include "DecodeDevice.cuh"

#include "Fp8Device.cuh"

#include <type_traits>

namespace kiln::decode {

template <int D, int MT, bool F8 = false> struct GqaConfig {
  static constexpr int TILE_N = D == 256 ? 32 : 64;
  static constexpr int WARPS_N = TILE_N / 16 < 4 ? TILE_N / 16 : 4; // independent of MT
  static constexpr int WARPS = MT * WARPS_N;
  static constexpr int THREADS = WARPS * 32;
  static constexpr int KW = TILE_N / WARPS_N; // keys per warp per tile, multiple of 16
  // FP8 tiles are half the bytes: more stages keep as many bytes in flight per SM as
  // the 16-bit kernel (what bounds a streaming kernel), within 96 KiB a block.
  static constexpr int STAGES = D == 64 ? (F8 ? 6 : 4) : D == 128 ? (F8 ? 4 : 3) : (F8 ? 3 : 2);
  // d <= 128: each warp keeps its Q fragments in registers (staged through the last
  // K/V slot), so the block fits 99 KiB parts; d = 256 keeps Q in smem.
  static constexpr bool Q_IN_REGS = D <= 128;
  static constexpr int ROWS = MT * 16;
  static constexpr int CH = D / 8; // 16-byte chunks per row
  static constexpr int Q_ELEMS = ROWS * D;
  static constexpr int STAGE_ELEMS = 2 * TILE_N * D;
  static constexpr int Q_SMEM_ELEMS = Q_IN_REGS ? 0 : Q_ELEMS;
  static constexpr int KV_BYTES = F8 ? 1 : 2;          // bytes per cached element
  static constexpr int WIDE_ELEMS = F8 ? STAGE_ELEMS : 0; // the widened fp16 K/V tile
  // [Q (d = 256)][widened tile (F8)][STAGES raw K/V tiles]
  static constexpr int REGION_BYTES = WIDE_ELEMS * 2 + STAGES * STAGE_ELEMS * KV_BYTES;
  static constexpr int SMEM_BYTES = Q_SMEM_ELEMS * 2 + REGION_BYTES;
  static_assert(!Q_IN_REGS || Q_ELEMS <= STAGE_ELEMS, "Q staging must fit one K/V slot");
  static_assert(KW % 16 == 0, "keys per warp must be a multiple of 16");
  static_assert(WARPS_N == 1 || WARPS_N * ROWS * D * 4 <= REGION_BYTES,
                "merge buffer must fit in the K/V stages");
};

// T: q and out; F8: the pool holds e4m3 (else T). CT, the mma operand type, is fp16
// over an FP8 pool.
template <typename T, int D, int MT, bool F8>
__global__ void __launch_bounds__(GqaConfig<D, MT, F8>::THREADS)
    gqaDecodeKernel(const GqaArgs args) {
  using C = GqaConfig<D, MT, F8>;
  using CT = std::conditional_t<F8, __half, T>;
  using KT = std::conditional_t<F8, uint8_t, T>; // a cached element
  extern __shared__ __align__(16) unsigned char smemRaw[];
  unsigned char *region = smemRaw + C::Q_SMEM_ELEMS * 2;
  CT *sWide = reinterpret_cast<CT *>(region);                    // F8 only
  KT *sKV = reinterpret_cast<KT *>(region + C::WIDE_ELEMS * 2); // raw K/V stages
  CT *sQ = !C::Q_IN_REGS ? reinterpret_cast<CT *>(smemRaw)
           : F8          ? sWide
                         : reinterpret_cast<CT *>(sKV + (C::STAGES - 1) * C::STAGE_ELEMS);

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
      *reinterpret_cast<uint4 *>(sQ + swz(r, ch, C::CH)) = kiln::kernels::bf16x8ToFp16(raw);
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
      cpAsync16(dst + at, src, valid);
      cpAsync16(dst + C::TILE_N * D + at, valid ? src + vOffset : kv, valid);
    }
  };
  // F8: raw tile -> the swizzled fp16 tile the mma path reads. Consecutive threads take
  // consecutive rows of one chunk column: the raw tile's XOR swizzle (rawAt) and the
  // fp16 tile's keep both the 16-byte reads and the stores free of bank conflicts.
  auto widenTile = [&](int tile) {
    const uint8_t *raw = reinterpret_cast<const uint8_t *>(sKV + (tile % C::STAGES) * C::STAGE_ELEMS);
#pragma unroll
    for (int c = tid; c < 2 * C::TILE_N * KV_CH; c += C::THREADS) {
      const int row = c % (2 * C::TILE_N), ch = c / (2 * C::TILE_N); // K rows, then V rows
      const int key = row % C::TILE_N;
      uint4 lo, hi;
      kiln::kernels::widenE4m3x16(*reinterpret_cast<const uint4 *>(raw + rawAt(row, ch)), lo, hi);
      CT *dst = sWide + (row / C::TILE_N) * C::TILE_N * D;
      *reinterpret_cast<uint4 *>(dst + swz(key, 2 * ch, C::CH)) = lo;
      *reinterpret_cast<uint4 *>(dst + swz(key, 2 * ch + 1, C::CH)) = hi;
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
  const float scaleLog2 = F8 && args.kScale ? args.scaleLog2 * args.kScale[kvh] : args.scaleLog2;
  const float vScale = F8 && args.vScale ? args.vScale[kvh] : 1.f;

  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i)
    o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float m0 = -1e30f, m1 = -1e30f, l0 = 0.f, l1 = 0.f;

  // Q fragments (row tile mt, k16 step kk); in registers when C::Q_IN_REGS.
  uint32_t qFrag[C::Q_IN_REGS ? D / 16 : 1][4];
  if constexpr (C::Q_IN_REGS) {
    cpAsyncWait<C::STAGES - 2>(); // the Q group (committed first) has landed
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      ldsmX4(qFrag[kk], sQ + swz(mt * 16 + (lane % 16), kk * 2 + lane / 16, C::CH));
    __syncthreads(); // the slot is reused by tile STAGES-1
  }

  for (int tile = 0; tile < numTiles; ++tile) {
    cpAsyncWait<C::STAGES - 2>();
    __syncthreads();
    if (tile + C::STAGES - 1 < numTiles)
      loadTile(tile + C::STAGES - 1);
    cpAsyncCommit();

    const CT *sK;
    if constexpr (F8) {
      widenTile(tile); // the barrier above: every warp is done with the last wide tile
      __syncthreads();
      sK = sWide;
    } else {
      sK = sKV + (tile % C::STAGES) * C::STAGE_ELEMS;
    }
    const CT *sV = sK + C::TILE_N * D;
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
        ldsmX4(a, sQ + swz(mt * 16 + (lane % 16), kk * 2 + lane / 16, C::CH));
      }
#pragma unroll
      for (int j = 0; j < C::KW / 16; ++j) {
        uint32_t bf[4];
        int key = kBase + j * 16 + (lane % 8) + (lane / 16) * 8;
        ldsmX4(bf, sK + swz(key, kk * 2 + (lane / 8) % 2, C::CH));
        mma16816<CT>(s[2 * j], a, bf[0], bf[1]);
        mma16816<CT>(s[2 * j + 1], a, bf[2], bf[3]);
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
#pragma unroll
      for (int np = 0; np < D / 16; ++np) {
        uint32_t bf[4];
        ldsmX4T(bf, sV + swz(key, np * 2 + lane / 16, C::CH));
        mma16816<CT>(o[2 * np], a, bf[0], bf[1]);
        mma16816<CT>(o[2 * np + 1], a, bf[2], bf[3]);
      }
    }
  }
  cpAsyncWait<0>();

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

  if constexpr (C::WARPS_N == 1) {
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      store(row0, i * 8 + 2 * t4, o[i][0], o[i][1], m0, l0);
      store(row1, i * 8 + 2 * t4, o[i][2], o[i][3], m1, l1);
    }
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
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      int col = i * 8 + 2 * t4;
      *reinterpret_cast<float2 *>(dst + row0 * D + col) = make_float2(o[i][0] * f0, o[i][1] * f0);
      *reinterpret_cast<float2 *>(dst + row1 * D + col) = make_float2(o[i][2] * f1, o[i][3] * f1);
    }
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
}

} // namespace kiln::decode

#endif
