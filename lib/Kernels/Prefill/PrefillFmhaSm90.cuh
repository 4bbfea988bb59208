// Hopper (sm_90a) variant of the prefill kernel: the two matrix products run on wgmma
// (warpgroup MMA) instead of mma.sync. A block = 2 warpgroups x 64 query rows. Q and the
// K/V tiles sit in shared memory in the 128-byte-swizzled GMMA layout (filled by cp.async
// through the same multi-stage ring as the sm_80 kernel); S = Q K^T is an SS wgmma
// (both operands K-major in shared memory), O += P V an RS wgmma (P from the S
// accumulators in registers, V MN-major in shared memory). The softmax code is the same
// as the sm_80 kernel's: the wgmma accumulator layout of each warp equals the mma.sync
// m16n8 C layout. Everything that needs sm_90a is compiled only for that target; on
// other targets the kernel body is empty and the launcher never selects it.
#ifndef KILN_LIB_KERNELS_PREFILL_PREFILLFMHASM90_CUH
#define KILN_LIB_KERNELS_PREFILL_PREFILLFMHASM90_CUH

#include "PrefillFmhaKernel.cuh"
#include "PrefillWgmma.cuh"
#include "Wgmma.cuh"

#include <type_traits>

namespace kiln::kernels::prefill {

// Element offset of (row, col) in a [ROWS, D] tile stored as D/64 column blocks of
// [ROWS][64], each 128-byte row swizzled (16-byte chunk c of row r at c ^ (r % 8)):
// the GMMA SWIZZLE_128B canonical layout (blocks 1024-byte aligned).
template <int ROWS> __device__ __forceinline__ int gmmaOff(int row, int col) {
  return (col >> 6) * (ROWS * 64) + row * 64 + ((((col >> 3) & 7) ^ (row & 7)) << 3) + (col & 7);
}

template <int D, int BN, int STAGES, int NWG> constexpr int fmhaSm90SmemBytes() {
  return (64 * NWG * D + 2 * STAGES * BN * D) * 2 + 1024; // + alignment slack
}

// The epilogue of one consumer warp of a wgmma prefill kernel: its 16 rows of O (the m64
// accumulator fragment, D / 2 floats a thread) divided by the row sums (with the sinks'
// terms), staged through the warp's own rows of the Q tile `sQ` ([BM, D] in the GMMA
// layout; no other warp reads them any more) and stored with 16-byte writes; rows past
// the sequence's qLen are not written.
template <typename T, int D, int BM>
__device__ __forceinline__ void storeWarpRows(const float *o, const float rowSum[2],
                                              const float rowMax[2], const FmhaArgs &a,
                                              int head, T *sQ, int rowBase, int lane, int m0,
                                              int qStart, int qLen) {
  constexpr int CHUNKS = D / 8;
  const int g = lane >> 2, t = lane & 3;
  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float sum = rowSum[r];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    sum += sinkTerm(a.sinks, head, rowMax[r] == -INFINITY ? 0.f : rowMax[r] * a.scale_log2);
    inv[r] = sum > 0.f ? 1.f / sum : 0.f;
  }
#pragma unroll
  for (int dn = 0; dn < D / 8; ++dn)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const uint32_t packed =
          MmaType<T>::pack(o[dn * 4 + 2 * r] * inv[r], o[dn * 4 + 2 * r + 1] * inv[r]);
      *reinterpret_cast<uint32_t *>(sQ + gmmaOff<BM>(rowBase + g + 8 * r, dn * 8 + 2 * t)) =
          packed;
    }
  __syncwarp();
  T *oBase = static_cast<T *>(a.out) + static_cast<int64_t>(qStart) * a.o_tok +
             static_cast<int64_t>(head) * a.o_head;
#pragma unroll
  for (int it = 0; it < 16 * CHUNKS / 32; ++it) {
    const int i = lane + it * 32;
    const int row = i / CHUNKS, ch = i % CHUNKS;
    const int qrow = m0 + rowBase + row;
    if (qrow < qLen) {
      const uint4 val = *reinterpret_cast<const uint4 *>(sQ + gmmaOff<BM>(rowBase + row, ch * 8));
      *reinterpret_cast<uint4 *>(oBase + static_cast<int64_t>(qrow) * a.o_tok + ch * 8) = val;
    }
  }
}

// NWG warpgroups per block, 64 query rows each. LAZY_RESCALE: a warp skips rescaling its
// O accumulators on a key tile that raises none of its 16 rows' maxima (the factor
// would be exactly 1); D / 4 multiplies a thread a tile against a vote. A tuning
// option (bench/Prefill/PrefillFmhaTuning.cu) until measured. MIN_BLOCKS: blocks a SM
// must be able to hold, which caps the registers (2 x 256 threads: 128 a thread); a d64
// kernel a few registers over 128 runs one block of 8 warps a SM instead of 16 warps.
// OVERLAP: the softmax of key tile j runs while the wgmma of P_{j-1} V_{j-1} does
// (FlashAttention-3's intra-warpgroup pipelining; STAGES >= 3, below);
// KILN_PREFILL_VARIANT_SM90_OVERLAP runs it.
template <typename T, int D, int BN, int STAGES, bool PAGED, int NWG, bool LAZY_RESCALE = false,
          int MIN_BLOCKS = 1, bool OVERLAP = false>
__global__ void __launch_bounds__(128 * NWG, MIN_BLOCKS) prefillFmhaSm90Kernel(const FmhaArgs a) {
#ifdef KILN_PREFILL_HAS_WGMMA
  constexpr int BM = 64 * NWG;
  constexpr int NTHREADS = 128 * NWG;
  constexpr int CHUNKS = D / 8;
  constexpr bool BF16 = std::is_same<T, __nv_bfloat16>::value;
  using MmaS = wgmma::Mma<BN, BF16>;
  using MmaO = wgmma::Mma<D, BF16>;
  const float NEG_INF = -INFINITY;

  extern __shared__ unsigned char smemRaw[];
  const uint32_t rawAddr = smemAddr(smemRaw);
  unsigned char *smemAligned = smemRaw + (((rawAddr + 1023u) & ~1023u) - rawAddr);
  T *sQ = reinterpret_cast<T *>(smemAligned);
  T *sK = sQ + BM * D;
  T *sV = sK + STAGES * BN * D;
  const uint32_t sQAddr = smemAddr(sQ), sKAddr = smemAddr(sK), sVAddr = smemAddr(sV);

  const int tid = threadIdx.x;
  const int warp = tid >> 5;
  const int lane = tid & 31;
  const int wg = warp >> 2;
  const int head = blockIdx.x;
  const int b = blockIdx.y;

  const int qStart = a.cu_q[b];
  const int qLen = a.cu_q[b + 1] - qStart;
  const int numMBlocks = (qLen + BM - 1) / BM;
  if (static_cast<int>(blockIdx.z) >= numMBlocks)
    return;
  const int m0 = (numMBlocks - 1 - static_cast<int>(blockIdx.z)) * BM;

  int kStart = 0, kLen;
  if constexpr (PAGED) {
    kLen = a.seq_lens[b];
  } else {
    kStart = a.cu_k[b];
    kLen = a.cu_k[b + 1] - kStart;
  }
  const int diag = kLen - qLen;
  int nEnd = kLen;
  if (a.causal)
    nEnd = min(kLen, m0 + BM + diag);
  const int nTiles = nEnd > 0 ? (nEnd + BN - 1) / BN : 0;
  // Sliding window (as in PrefillFmhaKernel.cuh): first visible key and its tile.
  const int keyFloor = a.window > 0 ? max(0, m0 + diag - a.window + 1) : 0;
  const int jFirst = keyFloor / BN;
  const int kvHead = head / a.group;

  const T *qBase = static_cast<const T *>(a.q) + static_cast<int64_t>(qStart) * a.q_tok +
                   static_cast<int64_t>(head) * a.q_head;
  const T *kBase;
  const T *vBase;
  const int32_t *pageRow = nullptr;
  if constexpr (PAGED) {
    kBase = static_cast<const T *>(a.k) + static_cast<int64_t>(kvHead) * a.k_head;
    vBase = kBase + static_cast<int64_t>(a.page_size) * a.k_tok;
    pageRow = a.block_table + static_cast<int64_t>(b) * a.max_pages;
  } else {
    kBase = static_cast<const T *>(a.k) + static_cast<int64_t>(kStart) * a.k_tok +
            static_cast<int64_t>(kvHead) * a.k_head;
    vBase = static_cast<const T *>(a.v) + static_cast<int64_t>(kStart) * a.v_tok +
            static_cast<int64_t>(kvHead) * a.v_head;
  }

#pragma unroll
  for (int it = 0; it < BM * CHUNKS / NTHREADS; ++it) {
    const int i = tid + it * NTHREADS;
    const int row = i / CHUNKS, ch = i % CHUNKS;
    const bool valid = m0 + row < qLen;
    const T *src = valid ? qBase + static_cast<int64_t>(m0 + row) * a.q_tok + ch * 8 : qBase;
    cpAsync16(sQAddr + gmmaOff<BM>(row, ch * 8) * 2, src, valid ? 16 : 0);
  }
  auto loadKV = [&](int tile, int stage) {
    const uint32_t dstK = sKAddr + stage * BN * D * 2;
    const uint32_t dstV = sVAddr + stage * BN * D * 2;
    const int n0 = tile * BN;
    // A thread copies chunk `ch` of rows row0, row0 + ROWS_STEP, ...: the dense sources
    // are walked as one pointer each. Per-row 64-bit products get hoisted out of the tile
    // loop, one register pair per unrolled row, next to the live O accumulators (d128:
    // 240 registers instead of 204; d256: spills).
    constexpr int ROWS_STEP = NTHREADS / CHUNKS;
    static_assert(NTHREADS % CHUNKS == 0, "a thread's chunk column is fixed");
    const int row0 = tid / CHUNKS, ch = tid % CHUNKS;
    const T *rowK = kBase + static_cast<int64_t>(n0 + row0) * a.k_tok + ch * 8;
    const T *rowV = vBase + static_cast<int64_t>(n0 + row0) * a.v_tok + ch * 8;
#pragma unroll
    for (int it = 0; it < BN / ROWS_STEP; ++it) {
      const int row = row0 + it * ROWS_STEP;
      const int key = n0 + row;
      const bool valid = key < kLen && key >= keyFloor;
      const T *srcK = kBase;
      const T *srcV = vBase;
      if (valid) {
        if constexpr (PAGED) {
          const int page = __ldg(pageRow + key / a.page_size);
          const int slot = key % a.page_size;
          const int64_t off = (static_cast<int64_t>(page) * 2 * a.page_size + slot) * a.k_tok;
          srcK = kBase + off + ch * 8;
          srcV = vBase + off + ch * 8;
        } else {
          srcK = rowK;
          srcV = rowV;
        }
      }
      if constexpr (!PAGED) {
        rowK += ROWS_STEP * a.k_tok;
        rowV += ROWS_STEP * a.v_tok;
      }
      const int o = gmmaOff<BN>(row, ch * 8) * 2;
      cpAsync16(dstK + o, srcK, valid ? 16 : 0);
      cpAsync16(dstV + o, srcV, valid ? 16 : 0);
    }
  };
  // Tiles loaded ahead of the one being computed. The overlapped schedule keeps the V
  // tile of the previous key tile in use while the current one's S is computed, so one
  // stage of the ring is busy for longer and the prefetch distance drops by one.
  constexpr int AHEAD = OVERLAP ? STAGES - 2 : STAGES - 1;
  static_assert(AHEAD >= 1, "the overlapped schedule needs a ring of 3 stages or more");
#pragma unroll
  for (int s = 0; s < AHEAD; ++s) {
    if (jFirst + s < nTiles)
      loadKV(jFirst + s, s);
    cpAsyncCommit();
  }

  float o[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i)
    o[i] = 0.f;
  float s[BN / 2];
#pragma unroll
  for (int i = 0; i < BN / 2; ++i)
    s[i] = 0.f;
  float rowMax[2] = {NEG_INF, NEG_INF};
  float rowSum[2] = {0.f, 0.f};

  const int g = lane >> 2;
  const int t = lane & 3;
  const int wgRow0 = m0 + wg * 64;
  const int warpRow0 = wgRow0 + (warp & 3) * 16;
  const int wgNEnd = a.causal ? min(kLen, wgRow0 + 64 + diag) : kLen;
  const int wgNBegin = a.window > 0 ? wgRow0 + diag - a.window + 1 : 0;
  const int windowMaskEnd = a.window > 0 ? warpRow0 + 15 + diag - a.window + 1 : 0;

  // S = Q K^T into s, issued and committed, not waited for: A = Q rows of this
  // warpgroup (K-major), B = K tile (K-major).
  // The accumulators are pinned before the fence as well as after: the pin is what keeps
  // the compiler from sinking a write of them (the O rescale) below the fence, where
  // ptxas would have to wait for any wgmma in flight before the write (C7517).
  auto issueS = [&](uint32_t tK) {
    sm90::pinAccumulators(s);
    sm90::wgmmaFence();
    sm90::pinAccumulators(s);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint64_t da = sm90::swizzle128Descriptor(
          sQAddr + (kk >> 2) * (BM * 128) + wg * (64 * 128) + (kk & 3) * 32, 16, 1024);
      const uint64_t db =
          sm90::swizzle128Descriptor(tK + (kk >> 2) * (BN * 128) + (kk & 3) * 32, 16, 1024);
      MmaS::template ss<0>(s, da, db, kk > 0 ? 1 : 0);
    }
    sm90::wgmmaCommit();
  };
  // O += P V, issued and committed, not waited for: B = V tile, MN-major (d contiguous):
  // LBO = next 64-column block, SBO = next 8 keys.
  uint32_t pa[BN / 16][4];
  // The wgmma reads P from registers asynchronously: a use after the wait keeps their
  // values (and registers) alive until the instructions that read them have completed.
  auto pinP = [&]() {
#pragma unroll
    for (int kp = 0; kp < BN / 16; ++kp)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        asm volatile("" : "+r"(pa[kp][i])::"memory");
  };
  auto issuePV = [&](uint32_t tV) {
    sm90::pinAccumulators(o);
    pinP();
    sm90::wgmmaFence();
    sm90::pinAccumulators(o);
#pragma unroll
    for (int kp = 0; kp < BN / 16; ++kp) {
      const uint64_t db = sm90::swizzle128Descriptor(tV + kp * (16 * 128), BN * 128, 1024);
      MmaO::template rs<1>(o, pa[kp], db, 1);
    }
    sm90::wgmmaCommit();
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
  // The online softmax of the tile at key n0 over s (masked, then exponentiated in
  // place): the row maxima and sums move on, alpha gets the factor O must be scaled by
  // before this tile's P V is added, grew whether any row of the warp raised its maximum.
  // The default schedule scales O right here; the others later.
  constexpr bool RESCALE_INLINE = !OVERLAP && !LAZY_RESCALE;
  auto softmaxTile = [&](int n0, float(&alpha)[2], bool &grew) {
    const bool needMask = (n0 + BN > kLen) || (a.causal && n0 + BN - 1 > warpRow0 + diag) ||
                          n0 < windowMaskEnd;
    if (needMask) {
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = n0 + nt * 8 + 2 * t + (e & 1);
          const int qrow = warpRow0 + g + (e >> 1) * 8;
          const bool visible = key < kLen && (!a.causal || key <= qrow + diag) &&
                               (a.window <= 0 || key > qrow + diag - a.window);
          if (!visible)
            s[nt * 4 + e] = NEG_INF;
        }
    }
    bool rowGrew = false;
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
      if constexpr (LAZY_RESCALE) {
        rowGrew |= mNew != rowMax[r];
        alpha[r] = mNew == rowMax[r] ? 1.f : fastExp2((rowMax[r] - mUse) * a.scale_log2);
      } else {
        alpha[r] = fastExp2((rowMax[r] - mUse) * a.scale_log2);
        if constexpr (RESCALE_INLINE) {
#pragma unroll
          for (int dn = 0; dn < D / 8; ++dn) {
            o[dn * 4 + 2 * r] *= alpha[r];
            o[dn * 4 + 2 * r + 1] *= alpha[r];
          }
        }
      }
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
    grew = LAZY_RESCALE ? __any_sync(0xffffffffu, rowGrew) : true;
  };

  // Overlapped schedule (FlashAttention-3's intra-warpgroup pipelining): the P V product
  // of key tile j - 1 is issued right after S_j = Q K_j^T and runs while this warpgroup
  // computes the softmax of S_j, instead of the two products and the softmax taking
  // turns. hasP: a P of the V tile at pV is waiting to be multiplied in (O already scaled
  // to its maxima). The first tile issues a P V of zeros (against its own V tile: loaded,
  // finite) rather than branch around it.
  bool hasP = false;
  uint32_t pV = 0;
  if constexpr (OVERLAP) {
    static_assert(!LAZY_RESCALE, "the overlapped schedule scales O on every tile");
#pragma unroll
    for (int kp = 0; kp < BN / 16; ++kp)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        pa[kp][i] = 0u;
  }

  for (int j = jFirst; j < nTiles; ++j) {
    cpAsyncWait<AHEAD - 1>();
    // cp.async (generic proxy) writes -> wgmma (async proxy) reads. The barrier also
    // tells the loads below that every warpgroup is done with the stage they refill
    // (the overlapped schedule waits for its P V of tile j - 2 in iteration j - 1).
    sm90::fenceProxyAsyncShared();
    __syncthreads();
    {
      const int next = j + AHEAD;
      if (next < nTiles)
        loadKV(next, (next - jFirst) % STAGES);
      cpAsyncCommit();
    }
    const int n0 = j * BN;
    // Warpgroup-uniform: no key of this tile is visible to its 64 rows. The overlapped
    // schedule computes such a tile all the same (masked: it changes no row's state):
    // ptxas cannot tell this branch apart from a divergent one, and serializes every
    // wgmma of the kernel (C7518) where one is left in flight across it. What it costs
    // is the tiles of the block that only the other warpgroup sees: one of 64 keys a
    // block at d64 past the causal diagonal, none at d128 (128-key tiles), and a tile
    // or two of a window's lower edge.
    if (!OVERLAP && (n0 >= wgNEnd || n0 + BN <= wgNBegin))
      continue;
    const int stage = (j - jFirst) % STAGES;
    const uint32_t tK = sKAddr + stage * BN * D * 2;
    const uint32_t tV = sVAddr + stage * BN * D * 2;

    if constexpr (OVERLAP) {
      issueS(tK);
      issuePV(hasP ? pV : tV);
      sm90::wgmmaWait<1>(); // S_j done; P_{j-1} V_{j-1} may still run
      sm90::pinAccumulators(s);
      float alpha[2];
      bool grew;
      softmaxTile(n0, alpha, grew);
      sm90::wgmmaWait<0>();
      sm90::pinAccumulators(o);
      pinP();
      // O (up to tile j - 1) to tile j's maxima, before P_j V_j is added next time. Not
      // while S_j runs: ptxas then waits for S_j before the first write of O (C7517),
      // though O is in no wgmma in flight.
      rescaleO(alpha);
      packP();
      hasP = true;
      pV = tV;
    } else {
      issueS(tK);
      sm90::wgmmaWait<0>();
      sm90::pinAccumulators(s);
      float alpha[2];
      bool grew;
      softmaxTile(n0, alpha, grew);
      if constexpr (LAZY_RESCALE) {
        if (grew)
          rescaleO(alpha);
      }
      packP();
      issuePV(tV);
      sm90::wgmmaWait<0>();
      sm90::pinAccumulators(o);
    }
  }
  if constexpr (OVERLAP) {
    if (hasP) { // the last tile's P V
      issuePV(pV);
      sm90::wgmmaWait<0>();
      sm90::pinAccumulators(o);
      pinP();
    }
  }

  cpAsyncWait<0>();
  __syncthreads();
  // rowBase: this warp's rows within the block.
  storeWarpRows<T, D, BM>(o, rowSum, rowMax, a, head, sQ, warp * 16, lane, m0, qStart, qLen);
#endif // KILN_PREFILL_HAS_WGMMA
}

template <typename T, int D, int BN, int STAGES, bool PAGED, int NWG = 2, bool LAZY_RESCALE = false,
          int MIN_BLOCKS = 1, bool OVERLAP = false>
cudaError_t launchPrefillFmhaSm90(const FmhaArgs &args, int batch, int maxSeqlenQ, int qHeads,
                                  cudaStream_t stream) {
  constexpr int smem = fmhaSm90SmemBytes<D, BN, STAGES, NWG>();
  // A SM has 228 KiB of shared memory, 1 KiB of it reserved per block.
  static_assert(MIN_BLOCKS * (smem + 1024) <= 228 * 1024, "MIN_BLOCKS blocks must fit a SM");
  auto kernel =
      prefillFmhaSm90Kernel<T, D, BN, STAGES, PAGED, NWG, LAZY_RESCALE, MIN_BLOCKS, OVERLAP>;
  cudaError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (err != cudaSuccess)
    return err;
  const dim3 grid(qHeads, batch, (maxSeqlenQ + 64 * NWG - 1) / (64 * NWG));
  kernel<<<grid, 128 * NWG, smem, stream>>>(args);
  return cudaGetLastError();
}

// Head dim 256 (Qwen3-Next's gated full attention): the bf16 or fp16 instantiations,
// dense or paged, of PrefillFmhaSm90D256.cu. They live in a file of their own because
// their 128-register O accumulators make them the slowest to compile, and a -j2 build
// then compiles them next to the d64/d128 ones.
template <bool PAGED>
cudaError_t launchPrefillFmhaSm90D256(const FmhaArgs &args, bool bf16, int batch, int maxSeqlenQ,
                                      int qHeads, cudaStream_t stream);

// The overlapped schedule (PrefillFmhaSm90Overlap.cu) at head_dim 64 or 128 (any other
// is taken for 128: the caller checks).
template <bool PAGED>
cudaError_t launchPrefillFmhaSm90Overlap(const FmhaArgs &args, bool bf16, int headDim, int batch,
                                         int maxSeqlenQ, int qHeads, cudaStream_t stream);

} // namespace kiln::kernels::prefill

#endif
