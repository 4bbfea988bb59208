// mla_decode_sm90 (device code; the kernel is MlaDecodeSm90.cu): the absorbed MLA decode (same math
// contract as MlaDecode.cu) on Hopper's warpgroup MMA and tensor-memory loads. One block = 64 query
// rows of one sequence ((token, head) pairs, padded to 64) x one split of its keys:
//   - warpgroup 2's first warp (the producer) walks the split's 64-token tiles (one page each), and
//   its
//     lane 0 issues nine TMA box loads a tile (64 tokens x 64 values, 128-byte swizzle:
//     the wgmma K-major layout) into a 2-stage ring, handed over through mbarriers;
//   - warpgroups 0 and 1 (the consumers) each compute S = Q K^T for 32 of the tile's 64
//     tokens over the full 576 depth (36 k16 steps, both operands in shared memory),
//     exchange the row maxima, write P (bf16) to shared memory, and then each does
//     O += P V for 256 of the 512 output columns (64 x 256 fp32: 128 registers a
//     thread), V being the tile's first 512 values read MN-major in place.
// Softmax in the log2 domain with fp32 state, bf16 out, or fp32 partials + lse for the
// split combine, exactly as mla_decode. The CTA emulator (test/Kernels/Common/
// CtaEmulator.h) runs this code on the host.
#ifndef KILN_LIB_KERNELS_DECODE_MLADECODESM90_CUH
#define KILN_LIB_KERNELS_DECODE_MLADECODESM90_CUH

#if defined(__CUDACC__)
#include "../Prefill/PrefillWgmma.cuh"
#include "DecodeDevice.cuh"
#elif !defined(KILN_CTA_EMULATION)
#error "device code: compile with nvcc, or include test/Kernels/Common/CtaEmulator.h first"
#endif
#include "../Common/Mbarrier.cuh"
#include "../Common/Tma.cuh"
#include "../Common/Wgmma.cuh"
#include "DecodeArgs.h"

#include <cuda_bf16.h>
#include <stdint.h>

namespace kiln::decode::mla_sm90 {

namespace sm90 = kiln::kernels::sm90;

constexpr int kDqk = 576, kDv = 512, kPage = 64;
constexpr int kRows = 64; // query rows a block (one wgmma M)
constexpr int kTile = 64; // tokens a tile: one page
constexpr int kStages = 2;
constexpr int kColBlocks = kDqk / 64;                // 64-value column blocks of a row
constexpr int kBlockBytes = 64 * 128;                // one [64 rows][64 values] block
constexpr int kTileBytes = kColBlocks * kBlockBytes; // 72 KiB: Q, and a K/V stage
constexpr int kPBytes = kRows * kTile * 2;           // P: one [64 rows][64 keys] block
constexpr int kConsumers = 256;                      // two warpgroups
// + a producer warpgroup, of which one thread works: a whole warpgroup so that it can
// hand its registers to the consumers (setmaxnreg). With 9 warps and no reallocation,
// a sub-partition holding 3 warps caps a thread at 168 registers, and O (128) + S (16)
// then spill and serialize the wgmmas.
constexpr int kThreads = kConsumers + 128;
constexpr int kConsumerWarps = kConsumers / 32;
constexpr int kProducerRegs = 40, kConsumerRegs = 232; // 128 x 40 + 256 x 232 <= 64 Ki
constexpr int kSmemBytes = 1024 /* alignment slack */ + (1 + kStages) * kTileBytes + kPBytes +
                           2 * 2 * kRows * 4 /* row max, row sum a warpgroup */ +
                           2 * kStages * 8 /* full, empty barriers */;
static_assert(kTile == kPage, "a tile is one page: one block-table entry, contiguous rows");

// Consumer-only barrier (the producer warpgroup has left): id 1, both warpgroups.
__device__ __forceinline__ void consumerSync() {
#ifdef KILN_CTA_EMULATION
  ::kiln::test::emu::CtaEmulator::current().namedBarrier(1, kConsumers);
#else
  asm volatile("bar.sync 1, %0;\n" ::"n"(kConsumers) : "memory");
#endif
}

// Quad (4-lane) reductions through indexed shuffles, which the emulator also has.
__device__ __forceinline__ float quadMaxOf(float v) {
  const int lane = threadIdx.x % 32;
  v = fmaxf(v, __shfl_sync(0xffffffffu, v, lane ^ 1));
  return fmaxf(v, __shfl_sync(0xffffffffu, v, lane ^ 2));
}
__device__ __forceinline__ float quadSumOf(float v) {
  const int lane = threadIdx.x % 32;
  v += __shfl_sync(0xffffffffu, v, lane ^ 1);
  return v + __shfl_sync(0xffffffffu, v, lane ^ 2);
}

// Whether `pred` holds in any lane of the warp (a butterfly of indexed shuffles, which
// the emulator also has; once a tile, so their cost does not matter).
__device__ __forceinline__ bool warpAny(bool pred) {
  const int lane = threadIdx.x % 32;
  float v = pred ? 1.f : 0.f;
#pragma unroll
  for (int d = 1; d < 32; d *= 2)
    v = fmaxf(v, __shfl_sync(0xffffffffu, v, lane ^ d));
  return v != 0.f;
}

// O (64 x 256, fp32) += P (64 x 16, K-major) . V (16 x 256, MN-major: the columns
// contiguous), both from shared memory.
__device__ __forceinline__ void wgmmaPV(float (&o)[128], uint64_t a, uint64_t b) {
#ifdef KILN_CTA_EMULATION
  ::kiln::test::emu::CtaEmulator::current().wgmma(256, o, a, b, true, true);
#else
  kernels::prefill::wgmma::Mma<256, true>::ss<1>(o, a, b, 1);
#endif
}

__device__ __forceinline__ uint32_t sharedAddr(const void *p) { return sm90::smemAddress(p); }

// One block's work: `smemRaw` is its dynamic shared memory (kSmemBytes), `cacheMap` the
// pool's tensor map ([num_pages * 64, 576], 64 x 64 boxes).
__device__ __forceinline__ void
mlaDecodeSm90Cta(const MlaArgs &args, const sm90::TensorMap *cacheMap, unsigned char *smemRaw) {
  using T = __nv_bfloat16;
  // The 128-byte swizzle is applied to address bits: every operand block must start on
  // a 1024-byte boundary, which the dynamic smem base does not promise.
  const uint32_t rawAddr = sharedAddr(smemRaw);
  unsigned char *base = smemRaw + (((rawAddr + 1023u) & ~1023u) - rawAddr);
  unsigned char *sQ = base;
  unsigned char *sKV = sQ + kTileBytes;
  unsigned char *sP = sKV + kStages * kTileBytes;
  float *sMax = reinterpret_cast<float *>(sP + kPBytes); // [warpgroup][row]
  float *sSum = sMax + 2 * kRows;                        // [warpgroup][row]
  uint64_t *bars = reinterpret_cast<uint64_t *>(sSum + 2 * kRows);
  const uint32_t sQAddr = sharedAddr(sQ), sKVAddr = sharedAddr(sKV), sPAddr = sharedAddr(sP);
  auto fullBar = [&](int s) { return sharedAddr(bars + s); };
  auto emptyBar = [&](int s) { return sharedAddr(bars + kStages + s); };

  const int rb = blockIdx.x, split = blockIdx.y, b = blockIdx.z;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int rows = args.qLen * args.heads;
  const int rowBase = rb * kRows;
  const bool perToken = args.tokenRows != nullptr;
  const int seqLen = perToken ? args.tokenPos[b] + 1 : args.seqLens[b];
  const int start = split * args.splitTiles * kTile;
  const int end = min(seqLen, start + args.splitTiles * kTile);
  const int numTiles = end > start ? (end - start + kTile - 1) / kTile : 0;

  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      sm90::mbarrierInit(fullBar(s), 1);               // the producer's expect-tx arrival
      sm90::mbarrierInit(emptyBar(s), kConsumerWarps); // one arrival a consumer warp
    }
#ifndef KILN_CTA_EMULATION
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
  }
  __syncthreads();

  if (warp >= kConsumerWarps) {
    sm90::shrinkRegisters<kProducerRegs>();
    if (warp > kConsumerWarps)
      return;
    // Producer: tile t of the split is page table[start / 64 + t], all 576 values of its
    // 64 tokens. Partial last pages load whole: the tokens past `end` are masked in S and
    // their V rows zeroed by the consumers before P V.
    if (lane == 0) {
      const int32_t *table =
          args.blockTable + static_cast<size_t>(perToken ? args.tokenRows[b] : b) * args.maxPages;
      for (int t = 0; t < numTiles; ++t) {
        const int s = t % kStages;
        if (t >= kStages)
          sm90::mbarrierWait(emptyBar(s), static_cast<uint32_t>(t / kStages - 1) & 1);
        const int page = table[start / kPage + t];
        sm90::mbarrierArriveExpectTx(fullBar(s), kTileBytes);
        const uint32_t dst = sKVAddr + s * kTileBytes;
#pragma unroll
        for (int cb = 0; cb < kColBlocks; ++cb)
          sm90::tmaLoad2d(dst + cb * kBlockBytes, cacheMap, cb * 64, page * kPage, fullBar(s));
      }
    }
    return;
  }

  sm90::growRegisters<kConsumerRegs>();
  // Consumers. Q rows (zero past the sequence's rows) in the same swizzled layout:
  // block cb holds values [64 cb, 64 cb + 64) of all 64 rows.
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
  sm90::fenceProxyAsyncShared(); // cp.async (generic proxy) writes -> wgmma reads
  consumerSync();

  const int wg = warp / 4;
  const int g = lane / 4, t4 = lane % 4;
  const int rowLocal[2] = {(warp % 4) * 16 + g, (warp % 4) * 16 + g + 8};
  int lim[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    // Causal limit of the row's draft token (token i of q_len sees keys < seqLen - qLen
    // + 1 + i); padding rows see the whole split (their results are never stored).
    const int grow = rowBase + rowLocal[r];
    lim[r] = grow < rows ? min(end, seqLen - args.qLen + 1 + grow / args.heads) : end;
  }

  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i)
    o[i] = 0.f;
  float sc[16];
#pragma unroll
  for (int i = 0; i < 16; ++i)
    sc[i] = 0.f;
  float m[2] = {-1e30f, -1e30f}, l[2] = {0.f, 0.f};

  for (int t = 0; t < numTiles; ++t) {
    const int s = t % kStages;
    const uint32_t tile = sKVAddr + s * kTileBytes;
    sm90::mbarrierWait(fullBar(s), static_cast<uint32_t>(t / kStages) & 1);

    // S = Q K^T for this warpgroup's 32 tokens (tile rows 32 wg ..): A = Q (64 x 576),
    // B = those K rows, both K-major; k16 step kk is slice kk % 4 of column block kk / 4.
    sm90::wgmmaFence();
    sm90::pinAccumulators(sc);
#pragma unroll
    for (int kk = 0; kk < kDqk / 16; ++kk) {
      const uint64_t da = sm90::swizzledDescriptor(sQAddr + (kk / 4) * kBlockBytes, kk % 4);
      const uint64_t db =
          sm90::swizzledDescriptor(tile + (kk / 4) * kBlockBytes + wg * 32 * 128, kk % 4);
      sm90::wgmmaBf16<32>(sc, da, db, kk > 0);
    }
    sm90::wgmmaCommit();
    sm90::wgmmaWait<0>();
    sm90::pinAccumulators(sc);

    // Scale and mask (accumulator j*4 + e: row rowLocal[e / 2], token 8 j + 2 t4 + e % 2
    // of this warpgroup's 32), then the row max over both warpgroups' tokens.
    const int tileStart = start + t * kTile;
    const int keyBase = tileStart + wg * 32 + 2 * t4;
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e / 2;
        const float v =
            keyBase + j * 8 + e % 2 < lim[r] ? sc[j * 4 + e] * args.scaleLog2 : -INFINITY;
        sc[j * 4 + e] = v;
        mx[r] = fmaxf(mx[r], v);
      }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = quadMaxOf(mx[r]);
      if (t4 == 0)
        sMax[wg * kRows + rowLocal[r]] = mx[r];
    }
    // Also orders this tile's sP writes after the other warpgroup's P V of the last tile.
    consumerSync();

    float alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      // fmaxf is exact and commutative: both warpgroups get the same running max.
      const float mn = fmaxf(m[r], fmaxf(mx[r], sMax[(1 - wg) * kRows + rowLocal[r]]));
      alpha[r] = exp2f(m[r] - mn);
      m[r] = mn;
    }
    float sum[2] = {0.f, 0.f};
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float p0 = exp2f(sc[j * 4 + 2 * r] - m[r]);
        const float p1 = exp2f(sc[j * 4 + 2 * r + 1] - m[r]);
        sum[r] += p0 + p1;
        // P[row][key] in the swizzled K-major layout (one 128-byte row of 64 keys).
        const int key = wg * 32 + j * 8 + 2 * t4;
        *reinterpret_cast<uint32_t *>(sP + sm90::swizzledOffset(rowLocal[r], key / 8) +
                                      (key % 8) * 2) = pack2<T>(p0, p1);
      }
#pragma unroll
    for (int r = 0; r < 2; ++r)
      l[r] = l[r] * alpha[r] + sum[r];

    // The last page of a sequence may hold tokens past `end` that are not finite (an
    // unwritten slot); P is 0 there but 0 * NaN is not, so their V rows become zeros.
    // Each warpgroup clears the 256 columns its own P V reads.
    const int validRows = end - tileStart;
    if (validRows < kTile) {
      const int ctid = tid % 128;
      for (int i = ctid; i < (kTile - validRows) * 32; i += 128) {
        const int row = validRows + i / 32, cb = wg * 4 + (i % 32) / 8, ch = i % 8;
        *reinterpret_cast<uint4 *>(sKV + s * kTileBytes + cb * kBlockBytes +
                                   sm90::swizzledOffset(row, ch)) = make_uint4(0, 0, 0, 0);
      }
    }
    sm90::fenceProxyAsyncShared(); // P and the cleared rows -> wgmma reads
    consumerSync();

    // Once the row maxima settle most tiles raise none of a warp's 16 rows: the factors
    // are then exactly 1 and the 128 multiplies a thread (~8% of a compute-bound tile's
    // issue slots) are skipped, warp-uniformly, with the same bits.
    if (warpAny(alpha[0] != 1.f || alpha[1] != 1.f)) {
#pragma unroll
      for (int i = 0; i < 128; ++i)
        o[i] *= alpha[(i >> 1) & 1];
    }
    // O[:, 256 wg ..] += P V: A = P (K-major, 64 keys), B = V rows of the tile, MN-major
    // (the columns contiguous): leading byte offset = the next 64-column block, stride
    // = the next 8 keys; k16 step kp starts 16 rows (2048 bytes) further.
    // Pinned before the fence too: the rescale must not sink below it (ptxas would then
    // insert a fence of its own).
    sm90::pinAccumulators(o);
    sm90::wgmmaFence();
    sm90::pinAccumulators(o);
#pragma unroll
    for (int kp = 0; kp < kTile / 16; ++kp) {
      const uint64_t da = sm90::swizzledDescriptor(sPAddr, kp);
      const uint64_t db =
          sm90::swizzle128Descriptor(tile + wg * 4 * kBlockBytes + kp * 2048, kBlockBytes, 1024);
      wgmmaPV(o, da, db);
    }
    sm90::wgmmaCommit();
    sm90::wgmmaWait<0>();
    sm90::pinAccumulators(o);
    // This warp is done with the stage (its S and P V reads have completed).
    if (lane == 0)
      sm90::mbarrierArrive(emptyBar(s));
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] = quadSumOf(l[r]);
    if (t4 == 0)
      sSum[wg * kRows + rowLocal[r]] = l[r];
  }
  consumerSync();

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

} // namespace kiln::decode::mla_sm90

#endif
