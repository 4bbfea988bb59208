// Warp-specialized Hopper prefill (KILN_PREFILL_VARIANT_SM90_WS; FlashAttention-3's
// structure, written for this library): a block of 3 warpgroups owns 128 query rows of one
// (sequence, q head).
//
// - Warpgroup 2 produces. It gives its registers to the consumers (setmaxnreg 40), and one
//   warp of it issues the tensor-map (TMA) loads: Q once, then the K and V tiles of 128
//   keys into a STAGES-deep ring, each stage's K and V with their own full / empty
//   mbarriers, so that K of tile j + 1 streams in while V of tile j is still in use. A
//   sequence's last, partial key tile is copied by the warp's 32 lanes with zero-filling
//   cp.async instead (a TMA box would read the next sequence's first keys, whose V rows
//   are multiplied by P = 0: zero, unless one of them is not finite).
// - Warpgroups 0 and 1 consume (setmaxnreg 232), 64 query rows each, as the SM90 kernel's
//   warpgroups do (S = Q K^T an SS wgmma, O += P V an RS wgmma, the same softmax). Their
//   matrix products take turns (ping-pong, named barriers 1 and 2): in its turn a
//   warpgroup issues S_j = Q K_j^T and O += P_{j-1} V_{j-1}, then hands the turn over, so
//   the tensor cores run one warpgroup's products while the other computes its softmax.
//   Within a warpgroup the softmax of S_j starts as soon as S_j is done, while
//   P_{j-1} V_{j-1} still runs (the SM90_OVERLAP schedule's intra-warpgroup overlap; the
//   ping-pong without it measured 0.88-0.99x of this on an H200, docs/performance.md).
//
// Both warpgroups walk the block's key tiles (the causal end of the block's last row);
// a tile that none of a warpgroup's rows sees is computed masked (it changes no row's
// state), which keeps the turns paired and keeps every wgmma out of a branch that ptxas
// cannot prove warpgroup-uniform (C7518). With 128-row blocks and 128-key tiles that is
// no tile at all where q_len == k_len.
//
// Dense K/V only, no sliding window (the dispatch sends those to the SM90 kernel);
// attention sinks, GQA, varlen batches and q_len != k_len are supported.
#ifndef KILN_LIB_KERNELS_PREFILL_PREFILLFMHASM90WS_CUH
#define KILN_LIB_KERNELS_PREFILL_PREFILLFMHASM90WS_CUH

#include "Mbarrier.cuh"
#include "PrefillFmhaSm90.cuh"
#include "Tma.cuh"

namespace kiln::kernels::prefill {

// The tensor maps of one call: [tokens, heads, head_dim] tensors, boxes of 64 columns x
// one head x 128 rows (Q: the block's rows; K, V: a key tile).
struct WsMaps {
  sm90::TensorMap q, k, v;
};

namespace ws {
constexpr int kBM = 128; // query rows a block: 2 consumer warpgroups x 64
constexpr int kConsumerThreads = 256;
constexpr int kThreads = kConsumerThreads + 128;
constexpr int kConsumerWarps = kConsumerThreads / 32;
constexpr int kProducerRegs = 40, kConsumerRegs = 232; // 128 x 40 + 256 x 232 <= 64 Ki
static_assert(kProducerRegs * 128 + kConsumerRegs * kConsumerThreads <= 65536,
              "the reallocated registers must fit the SM's register file");

// Barriers: qFull, then kFull, kEmpty, vFull, vEmpty of each stage.
template <int STAGES> constexpr int barrierBytes() { return (1 + 4 * STAGES) * 8; }
} // namespace ws

template <int D, int BN, int STAGES> constexpr int fmhaSm90WsSmemBytes() {
  return fmhaSm90SmemBytes<D, BN, STAGES, 2>() + ws::barrierBytes<STAGES>();
}

#ifdef KILN_PREFILL_HAS_WGMMA
namespace ws {
// Named barrier `id` over both consumer warpgroups: a warpgroup syncs on its own to wait
// for its turn, and arrives on the other's to hand the turn over.
__device__ __forceinline__ void turnSync(int id) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "n"(kConsumerThreads) : "memory");
}
__device__ __forceinline__ void turnArrive(int id) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "n"(kConsumerThreads) : "memory");
}
} // namespace ws
#endif

template <typename T, int D, int BN, int STAGES>
__global__ void __launch_bounds__(ws::kThreads, 1)
    prefillFmhaSm90WsKernel(const __grid_constant__ FmhaArgs a,
                            const __grid_constant__ WsMaps maps) {
#ifdef KILN_PREFILL_HAS_WGMMA
  constexpr int BM = ws::kBM;
  constexpr int CHUNKS = D / 8;
  constexpr bool BF16 = std::is_same<T, __nv_bfloat16>::value;
  constexpr uint32_t TILE_BYTES = BN * D * 2;
  using MmaS = wgmma::Mma<BN, BF16>;
  using MmaO = wgmma::Mma<D, BF16>;
  using namespace sm90;
  const float NEG_INF = -INFINITY;

  extern __shared__ unsigned char smemRaw[];
  const uint32_t rawAddr = smemAddr(smemRaw);
  unsigned char *smemAligned = smemRaw + (((rawAddr + 1023u) & ~1023u) - rawAddr);
  T *sQ = reinterpret_cast<T *>(smemAligned);
  T *sK = sQ + BM * D;
  T *sV = sK + STAGES * BN * D;
  const uint32_t sQAddr = smemAddr(sQ), sKAddr = smemAddr(sK), sVAddr = smemAddr(sV);
  const uint32_t bars = smemAddr(sV + STAGES * BN * D);
  const uint32_t qFull = bars;
  auto kFull = [&](int s) { return bars + 8u * (1 + s); };
  auto kEmpty = [&](int s) { return bars + 8u * (1 + STAGES + s); };
  auto vFull = [&](int s) { return bars + 8u * (1 + 2 * STAGES + s); };
  auto vEmpty = [&](int s) { return bars + 8u * (1 + 3 * STAGES + s); };

  const int tid = threadIdx.x;
  const int warp = tid >> 5;
  const int lane = tid & 31;
  const int head = blockIdx.x;
  const int b = blockIdx.y;

  const int qStart = a.cu_q[b];
  const int qLen = a.cu_q[b + 1] - qStart;
  const int numMBlocks = (qLen + BM - 1) / BM;
  if (static_cast<int>(blockIdx.z) >= numMBlocks)
    return;
  const int m0 = (numMBlocks - 1 - static_cast<int>(blockIdx.z)) * BM;
  const int kStart = a.cu_k[b];
  const int kLen = a.cu_k[b + 1] - kStart;
  const int diag = kLen - qLen;
  const int nEnd = a.causal ? min(kLen, m0 + BM + diag) : kLen;
  const int nTiles = nEnd > 0 ? (nEnd + BN - 1) / BN : 0;
  const int kvHead = head / a.group;

  if (tid == 0) {
    mbarrierInit(qFull, 1);
    for (int s = 0; s < STAGES; ++s) {
      mbarrierInit(kFull(s), 1); // the producer's expect-tx arrival (or its tail hand-over)
      mbarrierInit(vFull(s), 1);
      mbarrierInit(kEmpty(s), ws::kConsumerWarps); // one arrival a consumer warp
      mbarrierInit(vEmpty(s), ws::kConsumerWarps);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (warp >= ws::kConsumerWarps) {
    // ---------------------------------------------------------------- producer warpgroup
    shrinkRegisters<ws::kProducerRegs>();
    if (warp == ws::kConsumerWarps) {
      if (lane == 0) {
        mbarrierArriveExpectTx(qFull, BM * D * 2);
#pragma unroll
        for (int c = 0; c < D / 64; ++c)
          tmaLoad3d(sQAddr + c * (BM * 128), &maps.q, c * 64, head, qStart + m0, qFull);
      }
      const T *kBase = static_cast<const T *>(a.k) + static_cast<int64_t>(kStart) * a.k_tok +
                       static_cast<int64_t>(kvHead) * a.k_head;
      const T *vBase = static_cast<const T *>(a.v) + static_cast<int64_t>(kStart) * a.v_tok +
                       static_cast<int64_t>(kvHead) * a.v_head;
      for (int i = 0; i < nTiles; ++i) {
        const int stage = i % STAGES;
        // A fresh barrier's phase "before the first" counts as complete: the first round
        // through the ring does not wait.
        const uint32_t emptyParity = ((i / STAGES) & 1) ^ 1;
        const int n0 = i * BN;
        const uint32_t dK = sKAddr + stage * TILE_BYTES, dV = sVAddr + stage * TILE_BYTES;
        if (n0 + BN <= kLen) {
          if (lane == 0) {
            mbarrierWait(kEmpty(stage), emptyParity);
            mbarrierArriveExpectTx(kFull(stage), TILE_BYTES);
#pragma unroll
            for (int c = 0; c < D / 64; ++c)
              tmaLoad3d(dK + c * (BN * 128), &maps.k, c * 64, kvHead, kStart + n0, kFull(stage));
            mbarrierWait(vEmpty(stage), emptyParity);
            mbarrierArriveExpectTx(vFull(stage), TILE_BYTES);
#pragma unroll
            for (int c = 0; c < D / 64; ++c)
              tmaLoad3d(dV + c * (BN * 128), &maps.v, c * 64, kvHead, kStart + n0, vFull(stage));
          }
          __syncwarp();
        } else {
          // The sequence's last, partial tile: keys past kLen zero-filled, by every lane;
          // written through the generic proxy, so fenced before the hand-over.
          mbarrierWait(kEmpty(stage), emptyParity);
          mbarrierWait(vEmpty(stage), emptyParity);
          for (int it = lane; it < BN * CHUNKS; it += 32) {
            const int row = it / CHUNKS, ch = it % CHUNKS;
            const bool valid = n0 + row < kLen;
            const int64_t key = valid ? n0 + row : 0;
            const uint32_t o = gmmaOff<BN>(row, ch * 8) * 2;
            cpAsync16(dK + o, kBase + key * a.k_tok + ch * 8, valid ? 16 : 0);
            cpAsync16(dV + o, vBase + key * a.v_tok + ch * 8, valid ? 16 : 0);
          }
          cpAsyncWaitAll();
          fenceProxyAsyncShared();
          __syncwarp();
          if (lane == 0) {
            mbarrierArrive(kFull(stage));
            mbarrierArrive(vFull(stage));
          }
        }
      }
    }
  } else {
    // --------------------------------------------------------------- consumer warpgroups
    growRegisters<ws::kConsumerRegs>();
    const int wg = warp >> 2; // 0 or 1
    // Turns: warpgroup w waits on barrier 1 + w and hands over on the other's. Warpgroup 0
    // goes first: warpgroup 1's arrival opens its barrier once.
    const int myTurn = 1 + wg, otherTurn = 2 - wg;
    if (wg == 1)
      ws::turnArrive(otherTurn);

    float o[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i)
      o[i] = 0.f;
    float s[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i)
      s[i] = 0.f;
    uint32_t pa[BN / 16][4];
#pragma unroll
    for (int kp = 0; kp < BN / 16; ++kp)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        pa[kp][i] = 0u;
    float rowMax[2] = {NEG_INF, NEG_INF};
    float rowSum[2] = {0.f, 0.f};

    const int g = lane >> 2;
    const int t = lane & 3;
    const int warpRow0 = m0 + warp * 16;

    // S = Q K^T (A = this warpgroup's Q rows, B = the K tile, both K-major), committed.
    // The accumulators are pinned before the fence as well as after (PrefillFmhaSm90.cuh).
    auto issueS = [&](uint32_t tK) {
      pinAccumulators(s);
      wgmmaFence();
      pinAccumulators(s);
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        const uint64_t da = swizzle128Descriptor(
            sQAddr + (kk >> 2) * (BM * 128) + wg * (64 * 128) + (kk & 3) * 32, 16, 1024);
        const uint64_t db =
            swizzle128Descriptor(tK + (kk >> 2) * (BN * 128) + (kk & 3) * 32, 16, 1024);
        MmaS::template ss<0>(s, da, db, kk > 0 ? 1 : 0);
      }
      wgmmaCommit();
    };
    auto pinP = [&]() {
#pragma unroll
      for (int kp = 0; kp < BN / 16; ++kp)
#pragma unroll
        for (int i = 0; i < 4; ++i)
          asm volatile("" : "+r"(pa[kp][i])::"memory");
    };
    // O += P V (B = the V tile, MN-major: LBO the next 64-column block, SBO 8 keys).
    auto issuePV = [&](uint32_t tV) {
      pinAccumulators(o);
      pinP();
      wgmmaFence();
      pinAccumulators(o);
#pragma unroll
      for (int kp = 0; kp < BN / 16; ++kp) {
        const uint64_t db = swizzle128Descriptor(tV + kp * (16 * 128), BN * 128, 1024);
        MmaO::template rs<1>(o, pa[kp], db, 1);
      }
      wgmmaCommit();
    };
    auto packP = [&]() {
#pragma unroll
      for (int kp = 0; kp < BN / 16; ++kp) {
        pa[kp][0] = MmaType<T>::pack(s[8 * kp + 0], s[8 * kp + 1]);
        pa[kp][1] = MmaType<T>::pack(s[8 * kp + 2], s[8 * kp + 3]);
        pa[kp][2] = MmaType<T>::pack(s[8 * kp + 4], s[8 * kp + 5]);
        pa[kp][3] = MmaType<T>::pack(s[8 * kp + 6], s[8 * kp + 7]);
      }
    };
    auto rescaleO = [&](const float(&alpha)[2]) {
#pragma unroll
      for (int i = 0; i < D / 2; ++i)
        o[i] *= alpha[(i >> 1) & 1];
    };
    // The online softmax of the tile at key n0 (masked, exponentiated in place); alpha
    // gets the factor O must be scaled by before this tile's P V is added.
    auto softmaxTile = [&](int n0, float(&alpha)[2]) {
      const bool needMask = (n0 + BN > kLen) || (a.causal && n0 + BN - 1 > warpRow0 + diag);
      if (needMask) {
#pragma unroll
        for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = n0 + nt * 8 + 2 * t + (e & 1);
            const int qrow = warpRow0 + g + (e >> 1) * 8;
            const bool visible = key < kLen && (!a.causal || key <= qrow + diag);
            if (!visible)
              s[nt * 4 + e] = NEG_INF;
          }
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = NEG_INF;
#pragma unroll
        for (int nt = 0; nt < BN / 8; ++nt)
          mx = fmaxf(mx, fmaxf(s[nt * 4 + 2 * r], s[nt * 4 + 2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float mNew = fmaxf(rowMax[r], mx);
        const float mUse = mNew == NEG_INF ? 0.f : mNew;
        alpha[r] = fastExp2((rowMax[r] - mUse) * a.scale_log2);
        rowMax[r] = mNew;
        rowSum[r] *= alpha[r];
        const float ms = mUse * a.scale_log2;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < BN / 8; ++nt) {
          const float p0 = fastExp2(fmaf(s[nt * 4 + 2 * r], a.scale_log2, -ms));
          const float p1 = fastExp2(fmaf(s[nt * 4 + 2 * r + 1], a.scale_log2, -ms));
          s[nt * 4 + 2 * r] = p0;
          s[nt * 4 + 2 * r + 1] = p1;
          sum += p0 + p1;
        }
        rowSum[r] += sum;
      }
    };
    // A stage's tile is handed back once every consumer warp's wgmmas reading it are done.
    auto release = [&](uint32_t bar) {
      if (lane == 0)
        mbarrierArrive(bar);
    };
    auto tileK = [&](int i) { return sKAddr + (i % STAGES) * TILE_BYTES; };
    auto tileV = [&](int i) { return sVAddr + (i % STAGES) * TILE_BYTES; };
    auto parity = [&](int i) { return static_cast<uint32_t>(i / STAGES) & 1; };

    mbarrierWait(qFull, 0);
    if (nTiles > 0) {
      // Tile 0: S only (no P V before it).
      mbarrierWait(kFull(0), 0);
      ws::turnSync(myTurn);
      issueS(tileK(0));
      ws::turnArrive(otherTurn);
      wgmmaWait<0>();
      pinAccumulators(s);
      release(kEmpty(0));
      {
        float alpha[2];
        softmaxTile(0, alpha); // O is still zero: alpha has nothing to scale
      }
      packP();
      for (int i = 1; i < nTiles; ++i) {
        mbarrierWait(kFull(i % STAGES), parity(i));
        mbarrierWait(vFull((i - 1) % STAGES), parity(i - 1));
        ws::turnSync(myTurn);
        issueS(tileK(i));
        issuePV(tileV(i - 1));
        ws::turnArrive(otherTurn);
        float alpha[2];
        wgmmaWait<1>(); // S_i done; P_{i-1} V_{i-1} may still run
        pinAccumulators(s);
        softmaxTile(i * BN, alpha);
        wgmmaWait<0>();
        pinAccumulators(o);
        pinP();
        release(kEmpty(i % STAGES));
        release(vEmpty((i - 1) % STAGES));
        // O (up to tile i - 1) to tile i's maxima, before P_i V_i is added next turn.
        rescaleO(alpha);
        packP();
      }
      const int last = nTiles - 1;
      mbarrierWait(vFull(last % STAGES), parity(last));
      ws::turnSync(myTurn);
      issuePV(tileV(last));
      ws::turnArrive(otherTurn);
      wgmmaWait<0>();
      pinAccumulators(o);
      pinP();
      release(vEmpty(last % STAGES));
    }
    // Warpgroup 1's last hand-over (or its opening one, without tiles) is still pending on
    // barrier 1: taken here, so that no named barrier outlives the block half-arrived.
    if (wg == 0)
      ws::turnSync(myTurn);

    // Epilogue: each warp stages its 16 rows through its own rows of the Q tile (no other
    // warpgroup's wgmma reads them, and this one's are done) for 16-byte stores.
    storeWarpRows<T, D, BM>(o, rowSum, rowMax, a, head, sQ, warp * 16, lane, m0, qStart, qLen);
  }
#endif // KILN_PREFILL_HAS_WGMMA
}

template <typename T, int D, int BN, int STAGES>
cudaError_t launchPrefillFmhaSm90Ws(const FmhaArgs &args, const WsMaps &maps, int batch,
                                    int maxSeqlenQ, int qHeads, cudaStream_t stream) {
  constexpr int smem = fmhaSm90WsSmemBytes<D, BN, STAGES>();
  static_assert(smem <= 227 * 1024, "a block may opt into 227 KiB of shared memory");
  auto kernel = prefillFmhaSm90WsKernel<T, D, BN, STAGES>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (err != cudaSuccess)
    return err;
  const dim3 grid(qHeads, batch, (maxSeqlenQ + ws::kBM - 1) / ws::kBM);
  kernel<<<grid, ws::kThreads, smem, stream>>>(args, maps);
  return cudaGetLastError();
}

} // namespace kiln::kernels::prefill

#endif
