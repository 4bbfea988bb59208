// mla_decode_sm90 "seesaw" variant (KILN_MLA_SEESAW; the kernel is MlaDecodeSm90Seesaw.cu):
// the same math contract, grid, rows, splits and partials as mla_decode_sm90
// (MlaDecodeSm90.cuh), with the page loop scheduled as FlashMLA's sm90 kernel does.
//
// Why: in mla_decode_sm90 both consumer warpgroups compute S for half a page each and then
// meet twice a page (row maxima, P), so their softmax phases run at the same time and the
// tensor cores idle through them; S as m64n32 also reads Q from shared memory once per 32
// keys. Here the pages of a split go in pairs (A = tile 2i, B = tile 2i + 1):
//   - warpgroup 0 computes S for all 64 keys of A, warpgroup 1 for all 64 keys of B
//     (m64n64k16: Q read once per 64 keys, a third less shared-memory traffic per flop);
//   - warpgroup 0 settles A's row maxima first and hands them on; warpgroup 1 folds them
//     into B's, so the running max stays one shared value without a second meeting;
//   - each warpgroup owns 256 of the 512 output columns (as before) and accumulates both
//     pages into them: warpgroup 0 runs P_A V_A[L] while warpgroup 1 is still in its
//     softmax, then P_B V_B[L]; warpgroup 1 runs P_A V_A[R], then P_B V_B[R];
//   - P_A and P_B (bf16) are written into the rope block (values 512..575) of their own
//     page's stage once its S is done: only S reads that block, so P needs no buffer of
//     its own and the shared memory holds Q + 2 stages + 1 KiB (the old layout's P buffer
//     is gone, which leaves 9 KiB unused).
// The hand-offs are mbarriers, so that a warpgroup waits only for what it reads:
// pReady[0] (P_A and A's row max m_A, from warpgroup 0) and pReady[1] (P_B and m_B, from
// warpgroup 1). Each K/V block has its own full barrier, so S starts on the first 64
// columns of a page while the other eight are still landing.
//
// Online softmax bookkeeping (log2 domain, per row): m is the running max before the
// pair, m_A = max(m, max S_A), m_B = max(m_A, max S_B). O_L (warpgroup 0) becomes
// (O_L 2^(m - m_A) + P_A V_A[L]) 2^(m_A - m_B) + P_B V_B[L]; O_R (warpgroup 1) the same
// with V[R]. Each warpgroup keeps the row sum of the P it computed, in units of m_B at
// the end of each pair; the two sums are added at the end.
#ifndef KILN_LIB_KERNELS_DECODE_MLADECODESM90SEESAW_CUH
#define KILN_LIB_KERNELS_DECODE_MLADECODESM90SEESAW_CUH

#include "MlaDecodeSm90.cuh"

namespace kiln::decode::mla_sm90_seesaw {

namespace sm90 = kiln::kernels::sm90;
using mla_sm90::kBlockBytes;
using mla_sm90::kColBlocks;
using mla_sm90::kConsumers;
using mla_sm90::kConsumerWarps;
using mla_sm90::kDqk;
using mla_sm90::kDv;
using mla_sm90::kPage;
using mla_sm90::kRows;
using mla_sm90::kThreads;
using mla_sm90::kTile;
using mla_sm90::kTileBytes;

constexpr int kStages = 2;                 // one pair of pages
constexpr int kRopeBlock = kColBlocks - 1; // the stage block P overwrites once S is done
// Barriers: a full barrier per (stage, 64-column block), an empty one per stage, and the
// two P hand-offs.
constexpr int kFullBars = kStages * kColBlocks;
constexpr int kNumBars = kFullBars + kStages + 2;
constexpr int kSmemBytes = 1024 /* alignment slack */ + (1 + kStages) * kTileBytes +
                           2 * 2 * kRows * 4 /* row max, row sum a warpgroup */ + kNumBars * 8;
static_assert(kSmemBytes <= 227 * 1024, "sm_90's opt-in shared memory per block");

// Barrier of one consumer warpgroup's 128 threads (id 2; id 1 is both warpgroups').
__device__ __forceinline__ void warpgroupSync() {
#ifdef KILN_CTA_EMULATION
  ::kiln::test::emu::CtaEmulator::current().namedBarrier(2, 128);
#else
  asm volatile("bar.sync 2, 128;\n" ::: "memory");
#endif
}

// S (64 x 64, fp32: 32 registers a thread) = Q K^T over one stage, waiting for each
// 64-column block of the page only before the four k16 steps that read it.
__device__ __forceinline__ void computeS(float (&s)[32], uint32_t sQAddr, uint32_t tile,
                                         uint32_t fullBase, uint32_t parity) {
#pragma unroll
  for (int cb = 0; cb < kColBlocks; ++cb) {
    sm90::mbarrierWait(fullBase + cb * 8, parity);
    // A fence after each wait: the wait is a loop, and ptxas serializes wgmmas whose
    // accumulators stay in flight across a branch it cannot see fenced (C7520).
    sm90::pinAccumulators(s);
    sm90::wgmmaFence();
    sm90::pinAccumulators(s);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint64_t da = sm90::swizzledDescriptor(sQAddr + cb * kBlockBytes, k);
      const uint64_t db = sm90::swizzledDescriptor(tile + cb * kBlockBytes, k);
      sm90::wgmmaBf16<64>(s, da, db, cb > 0 || k > 0);
    }
  }
  sm90::wgmmaCommit();
  sm90::wgmmaWait<0>();
  sm90::pinAccumulators(s);
}

// Scales S to the log2 domain and masks keys at or past each row's limit (accumulator
// j*4 + e: row r = e / 2, key tileStart + 8 j + 2 t4 + e % 2); returns the row maxima
// over the warpgroup's quad (the whole page).
__device__ __forceinline__ void maskAndMax(float (&s)[32], int tileStart, const int (&lim)[2],
                                           float scaleLog2, float (&mx)[2]) {
  const int t4 = threadIdx.x % 4;
  mx[0] = mx[1] = -INFINITY;
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = e / 2;
      const int key = tileStart + j * 8 + 2 * t4 + e % 2;
      const float v = key < lim[r] ? s[j * 4 + e] * scaleLog2 : -INFINITY;
      s[j * 4 + e] = v;
      mx[r] = fmaxf(mx[r], v);
    }
#pragma unroll
  for (int r = 0; r < 2; ++r)
    mx[r] = mla_sm90::quadMaxOf(mx[r]);
}

// P = 2^(S - m) as bf16 into the stage's rope block (K-major, 64 keys a 128-byte row, the
// layout the wgmma A descriptor reads); returns this thread's fp32 row sums.
__device__ __forceinline__ void writeP(const float (&s)[32], const float (&m)[2],
                                       const int (&rowLocal)[2], unsigned char *pBlock,
                                       float (&sum)[2]) {
  using T = __nv_bfloat16;
  const int t4 = threadIdx.x % 4;
  sum[0] = sum[1] = 0.f;
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float p0 = exp2f(s[j * 4 + 2 * r] - m[r]);
      const float p1 = exp2f(s[j * 4 + 2 * r + 1] - m[r]);
      sum[r] += p0 + p1;
      const int key = j * 8 + 2 * t4;
      *reinterpret_cast<uint32_t *>(pBlock + sm90::swizzledOffset(rowLocal[r], key / 8) +
                                    (key % 8) * 2) = pack2<T>(p0, p1);
    }
}

// Zeroes the V rows [validRows, 64) of this warpgroup's 256 columns of a stage: an
// unwritten slot past the sequence end may hold NaN, and 0 * NaN is not 0.
__device__ __forceinline__ void zeroTailRows(unsigned char *stage, int wg, int validRows) {
  for (int i = threadIdx.x % 128; i < (kTile - validRows) * 32; i += 128) {
    const int row = validRows + i / 32, cb = wg * 4 + (i % 32) / 8, ch = i % 8;
    *reinterpret_cast<uint4 *>(stage + cb * kBlockBytes + sm90::swizzledOffset(row, ch)) =
        make_uint4(0, 0, 0, 0);
  }
}

// O[:, 256 wg ..] *= factor (per row), skipped warp-uniformly when every factor of the
// warp's rows is exactly 1 (the common case once the maxima settle; same bits).
__device__ __forceinline__ void rescaleO(float (&o)[128], const float (&factor)[2]) {
  if (mla_sm90::warpAny(factor[0] != 1.f || factor[1] != 1.f)) {
#pragma unroll
    for (int i = 0; i < 128; ++i)
      o[i] *= factor[(i >> 1) & 1];
  }
}

// Issues O[:, 256 wg ..] += P V (P: the 64 x 64 block at pAddr, V: this warpgroup's 256
// columns of the stage at `tile`, MN-major) as one committed group.
__device__ __forceinline__ void issuePV(float (&o)[128], uint32_t pAddr, uint32_t tile, int wg) {
  sm90::pinAccumulators(o);
  sm90::wgmmaFence();
  sm90::pinAccumulators(o);
#pragma unroll
  for (int kp = 0; kp < kTile / 16; ++kp) {
    const uint64_t da = sm90::swizzledDescriptor(pAddr, kp);
    const uint64_t db =
        sm90::swizzle128Descriptor(tile + wg * 4 * kBlockBytes + kp * 2048, kBlockBytes, 1024);
    mla_sm90::wgmmaPV(o, da, db);
  }
  sm90::wgmmaCommit();
}

__device__ __forceinline__ void waitPV(float (&o)[128]) {
  sm90::wgmmaWait<0>();
  sm90::pinAccumulators(o);
}

// One block's work; `smemRaw` is kSmemBytes of dynamic shared memory, `cacheMap` the
// pool's tensor map (as for mla_decode_sm90).
__device__ __forceinline__ void mlaDecodeSm90SeesawCta(const MlaArgs &args,
                                                       const sm90::TensorMap *cacheMap,
                                                       unsigned char *smemRaw) {
  using T = __nv_bfloat16;
  const uint32_t rawAddr = mla_sm90::sharedAddr(smemRaw);
  unsigned char *base = smemRaw + (((rawAddr + 1023u) & ~1023u) - rawAddr);
  unsigned char *sQ = base;
  unsigned char *sKV = sQ + kTileBytes;
  float *sMax = reinterpret_cast<float *>(sKV + kStages * kTileBytes); // [warpgroup][row]
  float *sSum = sMax + 2 * kRows;                                      // [warpgroup][row]
  uint64_t *bars = reinterpret_cast<uint64_t *>(sSum + 2 * kRows);
  const uint32_t sQAddr = mla_sm90::sharedAddr(sQ), sKVAddr = mla_sm90::sharedAddr(sKV);
  const uint32_t barAddr = mla_sm90::sharedAddr(bars);
  auto fullBar = [&](int s, int cb) { return barAddr + (s * kColBlocks + cb) * 8; };
  auto emptyBar = [&](int s) { return barAddr + (kFullBars + s) * 8; };
  auto pReadyBar = [&](int w) { return barAddr + (kFullBars + kStages + w) * 8; };

  const int split = blockIdx.y, b = blockIdx.z;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int rows = args.qLen * args.heads;
  const int rowBase = blockIdx.x * kRows;
  const bool perToken = args.tokenRows != nullptr;
  const int seqLen = perToken ? args.tokenPos[b] + 1 : args.seqLens[b];
  const int start = split * args.splitTiles * kTile;
  const int end = min(seqLen, start + args.splitTiles * kTile);
  const int numTiles = end > start ? (end - start + kTile - 1) / kTile : 0;

  if (tid == 0) {
    for (int i = 0; i < kFullBars; ++i)
      sm90::mbarrierInit(barAddr + i * 8, 1); // the producer's expect-tx arrival
    for (int s = 0; s < kStages; ++s)
      sm90::mbarrierInit(emptyBar(s), kConsumerWarps); // one arrival a consumer warp
    for (int w = 0; w < 2; ++w)
      sm90::mbarrierInit(pReadyBar(w), 128); // every thread of the writing warpgroup
#ifndef KILN_CTA_EMULATION
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
  }
  __syncthreads();

  if (warp >= kConsumerWarps) {
    sm90::shrinkRegisters<mla_sm90::kProducerRegs>();
    if (warp > kConsumerWarps)
      return;
    // Producer: tile t into stage t % 2, one TMA box and one full barrier per 64 columns.
    if (lane == 0) {
      const int32_t *table =
          args.blockTable + static_cast<size_t>(perToken ? args.tokenRows[b] : b) * args.maxPages;
      for (int t = 0; t < numTiles; ++t) {
        const int s = t % kStages;
        if (t >= kStages)
          sm90::mbarrierWait(emptyBar(s), static_cast<uint32_t>(t / kStages - 1) & 1);
        const int page = table[start / kPage + t];
        const uint32_t dst = sKVAddr + s * kTileBytes;
#pragma unroll
        for (int cb = 0; cb < kColBlocks; ++cb) {
          sm90::mbarrierArriveExpectTx(fullBar(s, cb), kBlockBytes);
          sm90::tmaLoad2d(dst + cb * kBlockBytes, cacheMap, cb * 64, page * kPage, fullBar(s, cb));
        }
      }
    }
    return;
  }

  sm90::growRegisters<mla_sm90::kConsumerRegs>();
  // Q rows (zero past the sequence's rows), swizzled as the K blocks.
  const T *q = static_cast<const T *>(args.q);
  for (int c = tid; c < kRows * (kDqk / 8); c += kConsumers) {
    const int r = c / (kDqk / 8), ch = c % (kDqk / 8);
    const int gr = rowBase + r;
    const bool valid = gr < rows;
    const T *src = valid ? q + (static_cast<size_t>(b) * rows + gr) * kDqk + ch * 8 : q;
    cpAsync16(sQ + (ch / 8) * kBlockBytes + sm90::swizzledOffset(r, ch % 8), src, valid);
  }
  cpAsyncCommit();
  cpAsyncWait<0>();
  sm90::fenceProxyAsyncShared();
  mla_sm90::consumerSync();

  const int wg = warp / 4;
  const int g = lane / 4, t4 = lane % 4;
  const int rowLocal[2] = {(warp % 4) * 16 + g, (warp % 4) * 16 + g + 8};
  int lim[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int grow = rowBase + rowLocal[r];
    lim[r] = grow < rows ? min(end, seqLen - args.qLen + 1 + grow / args.heads) : end;
  }

  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i)
    o[i] = 0.f;
  float sc[32];
#pragma unroll
  for (int i = 0; i < 32; ++i)
    sc[i] = 0.f;
  float m[2] = {-1e30f, -1e30f}, l[2] = {0.f, 0.f};
  const uint32_t stageA = sKVAddr, stageB = sKVAddr + kTileBytes;
  unsigned char *const pA = sKV + kRopeBlock * kBlockBytes;
  unsigned char *const pB = sKV + kTileBytes + kRopeBlock * kBlockBytes;
  const uint32_t pAAddr = stageA + kRopeBlock * kBlockBytes;
  const uint32_t pBAddr = stageB + kRopeBlock * kBlockBytes;

  for (int pair = 0; 2 * pair < numTiles; ++pair) {
    const uint32_t parity = static_cast<uint32_t>(pair) & 1;
    const bool hasB = 2 * pair + 1 < numTiles;
    const int startA = start + 2 * pair * kTile, startB = startA + kTile;
    // Only the split's last tile can be partial (splits hold whole tiles).
    const int validA = min(kTile, end - startA), validB = hasB ? min(kTile, end - startB) : 0;
    if (wg == 0) {
      computeS(sc, sQAddr, stageA, fullBar(0, 0), parity);
      float mx[2], mA[2], alpha[2], sum[2];
      maskAndMax(sc, startA, lim, args.scaleLog2, mx);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        mA[r] = fmaxf(m[r], mx[r]);
        alpha[r] = exp2f(m[r] - mA[r]);
      }
      writeP(sc, mA, rowLocal, pA, sum);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        l[r] = l[r] * alpha[r] + sum[r];
        if (t4 == 0)
          sMax[rowLocal[r]] = mA[r];
      }
      if (validA < kTile)
        zeroTailRows(sKV, 0, validA);
      // Hand P_A and m_A to warpgroup 1; the wait makes the whole warpgroup's P_A writes
      // visible to this warpgroup's own P V as well.
      sm90::fenceProxyAsyncShared();
      sm90::mbarrierArrive(pReadyBar(0));
      sm90::mbarrierWait(pReadyBar(0), parity);
      rescaleO(o, alpha);
      issuePV(o, pAAddr, stageA, 0);
      // Warpgroup 1's m_B and P_B, while P_A V_A[L] runs.
      sm90::mbarrierWait(pReadyBar(1), parity);
      float beta[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float mB = sMax[kRows + rowLocal[r]];
        beta[r] = exp2f(mA[r] - mB);
        m[r] = mB;
        l[r] *= beta[r];
      }
      waitPV(o);
      if (lane == 0)
        sm90::mbarrierArrive(emptyBar(0));
      if (hasB) {
        if (validB < kTile) {
          // Warpgroup 1's S over B has completed (it handed P_B on after it).
          zeroTailRows(sKV + kTileBytes, 0, validB);
          sm90::fenceProxyAsyncShared();
          warpgroupSync();
        }
        rescaleO(o, beta);
        issuePV(o, pBAddr, stageB, 0);
        waitPV(o);
        if (lane == 0)
          sm90::mbarrierArrive(emptyBar(1));
      }
    } else {
      float mx[2] = {-INFINITY, -INFINITY};
      if (hasB) {
        computeS(sc, sQAddr, stageB, fullBar(1, 0), parity);
        maskAndMax(sc, startB, lim, args.scaleLog2, mx);
      }
      sm90::mbarrierWait(pReadyBar(0), parity);
      float alpha[2], beta[2], mB[2], sum[2] = {0.f, 0.f};
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float mA = sMax[rowLocal[r]];
        mB[r] = fmaxf(mA, mx[r]);
        alpha[r] = exp2f(m[r] - mA);
        beta[r] = exp2f(mA - mB[r]);
      }
      if (hasB)
        writeP(sc, mB, rowLocal, pB, sum);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        l[r] = l[r] * alpha[r] * beta[r] + sum[r];
        m[r] = mB[r];
        if (t4 == 0)
          sMax[kRows + rowLocal[r]] = mB[r];
      }
      if (validA < kTile)
        zeroTailRows(sKV, 1, validA); // warpgroup 0's S over A is done (P_A is ready)
      if (hasB && validB < kTile)
        zeroTailRows(sKV + kTileBytes, 1, validB);
      sm90::fenceProxyAsyncShared();
      sm90::mbarrierArrive(pReadyBar(1));
      sm90::mbarrierWait(pReadyBar(1), parity);
      rescaleO(o, alpha);
      issuePV(o, pAAddr, stageA, 1);
      waitPV(o);
      if (lane == 0)
        sm90::mbarrierArrive(emptyBar(0));
      if (hasB) {
        rescaleO(o, beta);
        issuePV(o, pBAddr, stageB, 1);
        waitPV(o);
        if (lane == 0)
          sm90::mbarrierArrive(emptyBar(1));
      }
    }
  }

  // Both warpgroups hold the same m (m_B of the last pair); their row sums add.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] = mla_sm90::quadSumOf(l[r]);
    if (t4 == 0)
      sSum[wg * kRows + rowLocal[r]] = l[r];
  }
  mla_sm90::consumerSync();

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int grow = rowBase + rowLocal[r];
    if (grow >= rows)
      continue;
    const float rowSum = sSum[rowLocal[r]] + sSum[kRows + rowLocal[r]];
    const float inv = rowSum > 0.f ? 1.f / rowSum : 0.f;
    const size_t fr = static_cast<size_t>(b) * rows + grow;
#pragma unroll
    for (int dn = 0; dn < 32; ++dn) {
      const int col = wg * 256 + dn * 8 + 2 * t4;
      const float v0 = o[dn * 4 + 2 * r] * inv, v1 = o[dn * 4 + 2 * r + 1] * inv;
      if (args.numSplits == 1) {
        *reinterpret_cast<uint32_t *>(static_cast<T *>(args.out) + fr * kDv + col) =
            pack2<T>(v0, v1);
      } else {
        const size_t idx = fr * args.numSplits + split;
        *reinterpret_cast<float2 *>(args.partO + idx * kDv + col) = make_float2(v0, v1);
        if (col == 0)
          args.partLse[idx] = rowSum > 0.f ? m[r] + log2f(rowSum) : -INFINITY;
      }
    }
  }
}

} // namespace kiln::decode::mla_sm90_seesaw

#endif
