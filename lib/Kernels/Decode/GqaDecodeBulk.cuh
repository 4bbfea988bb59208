// gqa_decode with a producer warp (sm_90, tuning variants with GqaTuning::bulk): the
// same block, rows, splits, arithmetic and epilogue as gqaDecodeKernel, but K/V rows
// reach shared memory through the bulk copy engine (cp.async.bulk, one 256-byte bf16 or
// 128-byte FP8 key row of the block's kv head a copy) into an mbarrier ring, issued by one
// extra warp. Why:
//  - bytes in flight: gqaDecodeKernel refills a stage only after the block-wide barrier of
//    the tile before it, so between its wait and its issue only STAGES - 2 tiles are in
//    flight. Here a stage is refilled as soon as the 4 consumer warps have released it
//    (one mbarrier arrival each), so STAGES - 1 tiles stay in flight, and all STAGES at
//    the start (the Q tile no longer borrows a stage: each warp loads its Q fragments
//    straight from global memory);
//  - issue work: the consumer warps no longer compute 16 table reads, 64-bit addresses
//    and cp.asyncs a thread a tile; the producer's lanes issue 2 copies per key (K, V)
//    and read the block table one tile ahead, so its latency never stalls a copy.
// Shared memory: each key row padded by 16 bytes (272 / 144 bytes), so ldmatrix over 8
// consecutive keys and FP8's 32-bit K reads are free of bank conflicts without a swizzle
// (a bulk copy writes its bytes in order). Keys outside the block's range are not copied;
// their V rows are zeroed (P is 0 there, but a stale NaN would still poison P V) and their
// K scores are masked to -inf as in gqaDecodeKernel, so the bits are gqaDecodeKernel's.
//
// FP8 fast widening (GqaTuning::fastF8): instead of cvt (e4m3x2 -> f16x2, the conversion
// pipe) each 32-bit word of 4 bytes becomes two fp16 pairs with 3 integer ops a pair: an
// e4m3 byte s.eeee.mmm is the fp16 s.0eeee.mmm0000000 scaled by 2^-8 (exact, subnormals
// included). The pairs come out as bytes (0, 2) and (1, 3): for P V exactly the even/odd
// split the byte permute made; for Q K^T the k order within a step is permuted once more
// (Q's fragments the same way). The 2^8 goes into the K and V scales (exact powers of 2).
#ifndef KILN_LIB_KERNELS_DECODE_GQADECODEBULK_CUH
#define KILN_LIB_KERNELS_DECODE_GQADECODEBULK_CUH

#include "GqaDecodeKernel.cuh"

namespace kiln::decode {

namespace bulk {
__device__ __forceinline__ void mbarInit(uint64_t *bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smemAddr(bar)), "r"(count)
               : "memory");
}
__device__ __forceinline__ void mbarArriveExpectTx(uint64_t *bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smemAddr(bar)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbarArrive(uint64_t *bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smemAddr(bar)) : "memory");
}
__device__ __forceinline__ void mbarWait(uint64_t *bar, unsigned parity) {
  asm volatile("{\n .reg .pred done;\n"
               "GQA_BULK_WAIT_%=:\n"
               " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
               " @!done bra GQA_BULK_WAIT_%=;\n}\n" ::"r"(smemAddr(bar)),
               "r"(parity)
               : "memory");
}
// `bytes` (a multiple of 16) global -> shared, counted on `bar`'s transaction count.
__device__ __forceinline__ void copyRow(void *dst, const void *src, unsigned bytes, uint64_t *bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], "
               "%2, [%3];\n" ::"r"(smemAddr(dst)),
               "l"(src), "r"(bytes), "r"(smemAddr(bar))
               : "memory");
}
// Generic-proxy stores (zeroed rows) before later bulk copies into the same bytes.
__device__ __forceinline__ void fenceProxyAsync() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

} // namespace bulk

template <int D, int MT, bool F8, int V> struct GqaBulkConfig {
  using Base = GqaConfig<D, MT, F8, V>;
  static constexpr int CONSUMERS = Base::WARPS;
  static constexpr int THREADS = (CONSUMERS + 1) * 32; // + the producer warp
  static constexpr int STAGES = Base::STAGES;
  static constexpr int TILE_N = Base::TILE_N;
  static constexpr int COPY_BYTES = D * Base::KV_BYTES; // one key row of one kv head
  static constexpr int ROW_BYTES = COPY_BYTES + 16;     // padded: conflict-free reads
  static constexpr int HALF_BYTES = TILE_N * ROW_BYTES; // K (or V) of a stage
  static constexpr int STAGE_BYTES = 2 * HALF_BYTES;
  static constexpr int SMEM_BYTES = STAGES * STAGE_BYTES;
  static constexpr bool FAST_F8 = F8 && Base::TUNE.fastF8;
  static_assert(TILE_N % 32 == 0, "the producer's lanes take keys lane + 32i");
  static_assert(Base::WARPS_N * Base::ROWS * D * 4 <= SMEM_BYTES, "merge buffer");
  static_assert(Base::ROWS * KILN_DECODE_MAX_SPLITS * 4 <= SMEM_BYTES, "combine weights");
};

template <typename T, int D, int MT, typename KT, int V>
__global__ void __launch_bounds__(GqaBulkConfig<D, MT, sizeof(KT) == 1, V>::THREADS,
                                  GqaConfig<D, MT, sizeof(KT) == 1, V>::MIN_BLOCKS)
    gqaDecodeBulkKernel(const GqaArgs args) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr bool F8 = sizeof(KT) == 1;
  static_assert(std::is_same_v<KT, T> || (std::is_same_v<T, __nv_bfloat16> && F8),
                "a pool of T, or FP8 e4m3 next to bf16");
  using C = GqaBulkConfig<D, MT, F8, V>;
  using B = typename C::Base;
  using CT = std::conditional_t<F8, __half, KT>;
  constexpr bool FAST = C::FAST_F8;
  extern __shared__ __align__(128) unsigned char smemRaw[];
  __shared__ uint64_t fullBar[C::STAGES], emptyBar[C::STAGES];

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  if (tid == 0) {
    for (int s = 0; s < C::STAGES; ++s) {
      bulk::mbarInit(&fullBar[s], 1);             // the producer's expect-tx arrival
      bulk::mbarInit(&emptyBar[s], C::CONSUMERS); // one arrival a consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  // Everything below may read what the previous kernel wrote (q, pages, tables).
  pdlWait();
  const int split = blockIdx.x, b = blockIdx.z;
  const int kvh = blockIdx.y / args.rowBlocks, rowBase = (blockIdx.y % args.rowBlocks) * B::ROWS;
  const int seqLen = args.seqLens[b];
  const int allRows = args.qLen * args.group;
  const int rows = min(B::ROWS, allRows - rowBase);
  const int splitStart = split * args.splitTiles * C::TILE_N;
  const int end = min(seqLen, splitStart + args.splitTiles * C::TILE_N);
  const int keyFloor =
      args.window > 0 ? max(0, seqLen - args.qLen + rowBase / args.group - args.window + 1) : 0;
  const int start = keyFloor > splitStart
                        ? splitStart + (keyFloor - splitStart) / C::TILE_N * C::TILE_N
                        : splitStart;
  const int numTiles = end > start ? (end - start + C::TILE_N - 1) / C::TILE_N : 0;
  const T *q = static_cast<const T *>(args.q);
  const KT *kv = static_cast<const KT *>(args.kv);
  const int32_t *table = args.blockTable + static_cast<size_t>(b) * args.maxPages;

  const int mt = warp % MT, wn = warp / MT;
  const int g = lane / 4, t4 = lane % 4;
  const int row0 = mt * 16 + g, row1 = row0 + 8;
  const bool consumer = warp < C::CONSUMERS;

  // FP8: this KV head's dequantization scales (K's in the scores, V's in the output;
  // every thread stores outputs in the merge below, the producer warp's too).
  float scaleLog2 = F8 && args.kScale ? args.scaleLog2 * args.kScale[kvh] : args.scaleLog2;
  float vScale = F8 && args.vScale ? args.vScale[kvh] : 1.f;
  if constexpr (FAST) {
    scaleLog2 *= 256.f; // the fast widening's 2^-8, exactly
    vScale *= 256.f;
  }

  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i)
    o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float m0 = -1e30f, m1 = -1e30f, l0 = 0.f, l1 = 0.f;

  if (!consumer) {
    // ---- producer warp: lane l copies keys l, l + 32, ... of each tile.
    constexpr int KEYS = C::TILE_N / 32;
    const size_t tokenStride = static_cast<size_t>(args.kvHeads) * D;
    const size_t vOffset = static_cast<size_t>(args.pageSize) * tokenStride;
    const KT *headBase = kv + static_cast<size_t>(kvh) * D;
    // Page ids of the next tile, read a tile ahead (-1: key outside the block's range).
    auto pagesOf = [&](int tile, int(&pg)[KEYS]) {
      const int base = start + tile * C::TILE_N;
#pragma unroll
      for (int i = 0; i < KEYS; ++i) {
        const int pos = base + lane + 32 * i;
        pg[i] = tile < numTiles && pos < end && pos >= keyFloor ? table[pos >> args.pageShift] : -1;
      }
    };
    int pg[KEYS];
    pagesOf(0, pg);
    for (int tile = 0; tile < numTiles; ++tile) {
      const int st = tile % C::STAGES;
      // Round r of a stage waits for the consumers' release of round r - 1 (a fresh
      // barrier's "previous phase", parity 1, counts as complete).
      bulk::mbarWait(&emptyBar[st], ((tile / C::STAGES) & 1) ^ 1);
      unsigned char *dstK = smemRaw + st * C::STAGE_BYTES, *dstV = dstK + C::HALF_BYTES;
      const int base = start + tile * C::TILE_N;
      const int lo = max(base, keyFloor), hi = min(base + C::TILE_N, end);
      bool zeroed = false;
#pragma unroll
      for (int i = 0; i < KEYS; ++i)
        if (pg[i] < 0) {
          uint4 *row = reinterpret_cast<uint4 *>(dstV + (lane + 32 * i) * C::ROW_BYTES);
#pragma unroll
          for (int c = 0; c < C::COPY_BYTES / 16; ++c)
            row[c] = make_uint4(0, 0, 0, 0);
          zeroed = true;
        }
      if (zeroed)
        bulk::fenceProxyAsync();
      __syncwarp();
      if (lane == 0)
        bulk::mbarArriveExpectTx(&fullBar[st],
                                 static_cast<unsigned>(max(hi - lo, 0)) * 2 * C::COPY_BYTES);
      __syncwarp();
#pragma unroll
      for (int i = 0; i < KEYS; ++i)
        if (pg[i] >= 0) {
          const int key = lane + 32 * i, pos = base + key;
          const KT *src = headBase + (static_cast<size_t>(pg[i]) * 2 * args.pageSize +
                                      (pos & (args.pageSize - 1))) *
                                         tokenStride;
          bulk::copyRow(dstK + key * C::ROW_BYTES, src, C::COPY_BYTES, &fullBar[st]);
          bulk::copyRow(dstV + key * C::ROW_BYTES, src + vOffset, C::COPY_BYTES, &fullBar[st]);
        }
      pagesOf(tile + 1, pg);
    }
  } else {
    // ---- consumer warps: gqaDecodeKernel's loop over the ring's stages.
    const int past0 = seqLen - args.qLen + 1 + (rowBase + row0) / args.group;
    const int past1 = seqLen - args.qLen + 1 + (rowBase + row1) / args.group;
    const int lim0 = row0 < rows ? min(end, past0) : end;
    const int lim1 = row1 < rows ? min(end, past1) : end;
    const int lo0 = args.window > 0 && row0 < rows ? past0 - args.window : 0;
    const int lo1 = args.window > 0 && row1 < rows ? past1 - args.window : 0;

    // Q fragments straight from global memory (rows past `rows` are 0), in the order
    // gqaDecodeKernel's ldmatrix / FP8 loads put them in registers.
    auto qRow = [&](int r) {
      const int token = (rowBase + r) / args.group,
                head = kvh * args.group + (rowBase + r) % args.group;
      return q + ((static_cast<size_t>(b) * args.qLen + token) * args.qHeads + head) * D;
    };
    const T *qr0 = qRow(row0), *qr1 = qRow(row1);
    const bool v0 = row0 < rows, v1 = row1 < rows;
    uint32_t qFrag[D / 16][4];
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      if constexpr (F8) {
        // d 4t .. 4t+3 of this k step, rounded to fp16 as gqaDecodeKernel stages them.
        const int d = kk * 16 + 4 * t4;
        uint2 r0 = v0 ? *reinterpret_cast<const uint2 *>(qr0 + d) : make_uint2(0, 0);
        uint2 r1 = v1 ? *reinterpret_cast<const uint2 *>(qr1 + d) : make_uint2(0, 0);
        const uint4 h0 = kiln::kernels::bf16x8ToFp16(make_uint4(r0.x, r0.y, 0, 0));
        const uint4 h1 = kiln::kernels::bf16x8ToFp16(make_uint4(r1.x, r1.y, 0, 0));
        if constexpr (FAST) {
          // k (2t, 2t+1) <- d (4t, 4t+2); k (2t+8, 2t+9) <- d (4t+1, 4t+3).
          qFrag[kk][0] = __byte_perm(h0.x, h0.y, 0x5410);
          qFrag[kk][1] = __byte_perm(h1.x, h1.y, 0x5410);
          qFrag[kk][2] = __byte_perm(h0.x, h0.y, 0x7632);
          qFrag[kk][3] = __byte_perm(h1.x, h1.y, 0x7632);
        } else {
          qFrag[kk][0] = h0.x;
          qFrag[kk][1] = h1.x;
          qFrag[kk][2] = h0.y;
          qFrag[kk][3] = h1.y;
        }
      } else {
        const int d = kk * 16 + 2 * t4;
        qFrag[kk][0] = v0 ? *reinterpret_cast<const uint32_t *>(qr0 + d) : 0u;
        qFrag[kk][1] = v1 ? *reinterpret_cast<const uint32_t *>(qr1 + d) : 0u;
        qFrag[kk][2] = v0 ? *reinterpret_cast<const uint32_t *>(qr0 + d + 8) : 0u;
        qFrag[kk][3] = v1 ? *reinterpret_cast<const uint32_t *>(qr1 + d + 8) : 0u;
      }
    }

    for (int tile = 0; tile < numTiles; ++tile) {
      const int st = tile % C::STAGES;
      bulk::mbarWait(&fullBar[st], (tile / C::STAGES) & 1);
      const unsigned char *sK = smemRaw + st * C::STAGE_BYTES;
      const unsigned char *sV = sK + C::HALF_BYTES;
      const int kBase = wn * B::KW;

      float s[B::KW / 8][4];
#pragma unroll
      for (int j = 0; j < B::KW / 8; ++j)
        s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
        for (int j = 0; j < B::KW / 16; ++j) {
          if constexpr (F8) {
#pragma unroll
            for (int jj = 0; jj < 2; ++jj) {
              const int key = kBase + j * 16 + jj * 8 + g;
              const uint32_t w =
                  *reinterpret_cast<const uint32_t *>(sK + key * C::ROW_BYTES + kk * 16 + 4 * t4);
              if constexpr (FAST) {
                uint32_t even, odd;
                e4m3x4ToHalf2x2Scaled(w, even, odd);
                mma16816<CT>(s[2 * j + jj], qFrag[kk], even, odd);
              } else {
                mma16816<CT>(s[2 * j + jj], qFrag[kk], kiln::kernels::e4m3x2ToHalf2(w),
                             kiln::kernels::e4m3x2ToHalf2(w >> 16));
              }
            }
          } else {
            uint32_t bf[4];
            const int key = kBase + j * 16 + (lane % 8) + (lane / 16) * 8;
            ldsmX4(bf, sK + key * C::ROW_BYTES + (kk * 2 + (lane / 8) % 2) * 16);
            mma16816<CT>(s[2 * j], qFrag[kk], bf[0], bf[1]);
            mma16816<CT>(s[2 * j + 1], qFrag[kk], bf[2], bf[3]);
          }
        }
      }

      const int posBase = start + tile * C::TILE_N + kBase + 2 * t4;
      float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
      for (int j = 0; j < B::KW / 8; ++j) {
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
      for (int j = 0; j < B::KW / 8; ++j) {
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
      for (int kk = 0; kk < B::KW / 16; ++kk) {
        uint32_t a[4];
        a[0] = pack2<CT>(s[2 * kk][0], s[2 * kk][1]);
        a[1] = pack2<CT>(s[2 * kk][2], s[2 * kk][3]);
        a[2] = pack2<CT>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        a[3] = pack2<CT>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
        const int key = kBase + kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8;
        if constexpr (F8) {
#pragma unroll
          for (int cp = 0; cp < D / 32; ++cp) {
            uint32_t v[4];
            ldsmX4T(v, sV + key * C::ROW_BYTES + (2 * cp + lane / 16) * 16);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int c = 2 * cp + h;
              if constexpr (FAST) {
                uint32_t e0, o0, e1, o1;
                e4m3x4ToHalf2x2Scaled(v[2 * h], e0, o0);
                e4m3x4ToHalf2x2Scaled(v[2 * h + 1], e1, o1);
                mma16816<CT>(o[2 * c], a, e0, e1);
                mma16816<CT>(o[2 * c + 1], a, o0, o1);
              } else {
                mma16816<CT>(o[2 * c], a,
                             kiln::kernels::e4m3x2ToHalf2(__byte_perm(v[2 * h], 0, 0x20)),
                             kiln::kernels::e4m3x2ToHalf2(__byte_perm(v[2 * h + 1], 0, 0x20)));
                mma16816<CT>(o[2 * c + 1], a,
                             kiln::kernels::e4m3x2ToHalf2(__byte_perm(v[2 * h], 0, 0x31)),
                             kiln::kernels::e4m3x2ToHalf2(__byte_perm(v[2 * h + 1], 0, 0x31)));
              }
            }
          }
        } else {
#pragma unroll
          for (int np = 0; np < D / 16; ++np) {
            uint32_t bf[4];
            ldsmX4T(bf, sV + key * C::ROW_BYTES + (np * 2 + lane / 16) * 16);
            mma16816<CT>(o[2 * np], a, bf[0], bf[1]);
            mma16816<CT>(o[2 * np + 1], a, bf[2], bf[3]);
          }
        }
      }
      // This warp's reads of the stage are done (their values are in registers).
      __syncwarp();
      if (lane == 0)
        bulk::mbarArrive(&emptyBar[st]);
    }
  }
  // No more K/V reads: the next kernel's blocks may start launching (they wait for this
  // grid to finish before reading anything).
  pdlLaunchDependents();
  l0 = quadSum(l0);
  l1 = quadSum(l1);
  // ---- epilogue: gqaDecodeKernel's (same arithmetic, same bits); the producer warp
  // holds no rows but takes part in the barriers and the shared loops.
  auto flatRow = [&](int r) {
    int token = (rowBase + r) / args.group, head = kvh * args.group + (rowBase + r) % args.group;
    return (static_cast<size_t>(b) * args.qLen + token) * args.qHeads + head;
  };
  auto store = [&](int r, int col, float x0, float x1, float rowMax, float rowSum) {
    if (r >= rows)
      return;
    float inv = rowSum > 0.f ? 1.f / rowSum : 0.f;
    if constexpr (F8)
      inv *= vScale;
    size_t fr = flatRow(r);
    if (args.numSplits == 1 && args.sinks) {
      const float lse = rowSum > 0.f ? rowMax + log2f(rowSum) : -INFINITY;
      const float sinkLse =
          args.sinks[kvh * args.group + (rowBase + r) % args.group] * 1.4426950408889634f;
      const float maxLse = fmaxf(sinkLse, lse);
      const float w = exp2f(lse - maxLse);
      const float total = w + exp2f(sinkLse - maxLse);
      const float invTotal = total > 0.f ? 1.f / total : 0.f;
      *reinterpret_cast<uint32_t *>(static_cast<T *>(args.out) + fr * D + col) =
          pack2<T>(w * (x0 * inv) * invTotal, w * (x1 * inv) * invTotal);
    } else if (args.numSplits == 1) {
      *reinterpret_cast<uint32_t *>(static_cast<T *>(args.out) + fr * D + col) =
          pack2<T>(x0 * inv, x1 * inv);
    } else {
      size_t idx = fr * args.numSplits + split;
      *reinterpret_cast<float2 *>(args.partO + idx * D + col) = make_float2(x0 * inv, x1 * inv);
      if (col == 0)
        args.partLse[idx] = rowSum > 0.f ? rowMax + log2f(rowSum) : -INFINITY;
    }
  };
  // A lane's adjacent output column pairs (F8: a 16-wide chunk's even and odd columns
  // in two n8 tiles, as gqaDecodeKernel's outPairs; the fast widening keeps that split).
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

  if constexpr (B::WARPS_N == 1) {
    if (consumer)
      outPairs([&](int col, float a0, float a1, float b0, float b1) {
        store(row0, col, a0, a1, m0, l0);
        store(row1, col, b0, b1, m1, l1);
      });
  } else {
    // Every stage has been consumed (each consumer waited on every tile's full barrier),
    // so no copy is in flight: the ring is free for the merge.
    __syncthreads();
    float *sO = reinterpret_cast<float *>(smemRaw); // [WARPS_N][ROWS][D]
    __shared__ float sM[B::WARPS_N][B::ROWS], sL[B::WARPS_N][B::ROWS];
    if (consumer && t4 == 0) {
      sM[wn][row0] = m0;
      sM[wn][row1] = m1;
      sL[wn][row0] = l0;
      sL[wn][row1] = l1;
    }
    __syncthreads();
    if (consumer) {
      float gm0 = -1e30f, gm1 = -1e30f;
#pragma unroll
      for (int w = 0; w < B::WARPS_N; ++w) {
        gm0 = fmaxf(gm0, sM[w][row0]);
        gm1 = fmaxf(gm1, sM[w][row1]);
      }
      float f0 = exp2f(m0 - gm0), f1 = exp2f(m1 - gm1);
      float *dst = sO + wn * B::ROWS * D;
      outPairs([&](int col, float a0, float a1, float b0, float b1) {
        *reinterpret_cast<float2 *>(dst + row0 * D + col) = make_float2(a0 * f0, a1 * f0);
        *reinterpret_cast<float2 *>(dst + row1 * D + col) = make_float2(b0 * f1, b1 * f1);
      });
    }
    __syncthreads();
    for (int idx = tid; idx < rows * (D / 2); idx += C::THREADS) {
      int r = idx / (D / 2), col = (idx % (D / 2)) * 2;
      float gm = -1e30f;
#pragma unroll
      for (int w = 0; w < B::WARPS_N; ++w)
        gm = fmaxf(gm, sM[w][r]);
      float sum = 0.f, x0 = 0.f, x1 = 0.f;
#pragma unroll
      for (int w = 0; w < B::WARPS_N; ++w) {
        sum += sL[w][r] * exp2f(sM[w][r] - gm);
        float2 v = *reinterpret_cast<const float2 *>(sO + (w * B::ROWS + r) * D + col);
        x0 += v.x;
        x1 += v.y;
      }
      store(r, col, x0, x1, gm, sum);
    }
  }

  if (args.numSplits > 1 && args.counters) {
    // Fused combine, as gqaDecodeKernel's (release, count, acquire, combine, reset).
    __threadfence();
    __syncthreads();
    __shared__ bool sLast;
    if (tid == 0) {
      unsigned *counter = args.counters + blockIdx.z * gridDim.y + blockIdx.y;
      sLast = atomicAdd(counter, 1u) + 1 == static_cast<unsigned>(args.numSplits);
      if (sLast)
        atomicExch(counter, 0u);
    }
    __syncthreads();
    if (!sLast)
      return;
    __threadfence();
    const int splits = args.numSplits;
    float *sW = reinterpret_cast<float *>(smemRaw);
    __shared__ float sInv[B::ROWS];
    for (int i = tid; i < rows * splits; i += C::THREADS)
      sW[i] = __ldcg(args.partLse + flatRow(i / splits) * splits + i % splits);
    __syncthreads();
    if (tid < rows) {
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
#else
  __trap(); // sm_90 only: the launcher offers bulk variants on sm_90 devices
#endif
}

} // namespace kiln::decode

#endif
