// Prefill FMHA kernel (FlashAttention-2 style), sm_80+: mma.sync m16n8k16 (bf16/fp16 in,
// fp32 accumulate), ldmatrix from XOR-swizzled shared memory, cp.async multi-stage
// pipelining of K/V tiles, online softmax in registers.
//
// One thread block = BM query rows of one (sequence, q head); each warp owns 16 rows.
// Q fragments stay in registers for the whole key loop (QREG; at head_dim 256 the O
// accumulators leave no room, and each tile re-reads Q from shared memory); S = Q K^T and
// O += P V run on tensor cores; P is re-packed from the S accumulators into A fragments
// without shared memory. K/V tiles of BN keys are gathered either from a dense varlen
// tensor or from a paged cache (PAGED), the only difference being the row address.
//
// An FP8 e4m3 paged cache (F8): the K/V tiles' bytes stream through the same ring, and
// each tile is widened once into fp16 tiles the unchanged mma path reads (e4m3 -> fp16 is
// exact); q is rounded to fp16 once (clamped to its range). One block is one q head, so
// its KV head's scales fold into the score scale (K) and the output (V).
//
// An f16 paged cache next to bf16 q/out (KT = __half): the tiles are 16-bit and the mma
// path reads them as they are, in fp16 (q rounded to fp16 once, exact for bf16 values in
// fp16's normal range; P rounded to fp16): the fp16 kernel's arithmetic, with the output
// rounded to bf16.
#ifndef KILN_LIB_KERNELS_PREFILL_PREFILLFMHAKERNEL_CUH
#define KILN_LIB_KERNELS_PREFILL_PREFILLFMHAKERNEL_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "Fp8Device.cuh"
#include "Mma.cuh"

namespace kiln::kernels::prefill {

// Arguments shared by the dense and paged kernels (element strides).
struct FmhaArgs {
  const void *q;
  void *out;
  const void *k;            // dense: k base; paged: kv_cache base
  const void *v;            // dense: v base; paged: unused
  const int32_t *cu_q;      // [batch + 1]
  const int32_t *cu_k;      // dense: [batch + 1]
  const int32_t *seq_lens;  // paged: [batch]
  const int32_t *block_table; // paged: [batch, max_pages]
  int64_t q_tok, q_head, k_tok, k_head, v_tok, v_head, o_tok, o_head;
  int32_t page_size, max_pages;
  int32_t group;            // q_heads / kv_heads
  float scale_log2;         // softmax_scale * log2(e)
  int32_t causal;
  int32_t window;           // > 0: sliding window (keys per query, causal); 0: none
  const float *sinks;       // [q_heads] attention-sink logits (scaled-score units) or null
  const float *k_scale;     // FP8 cache: [kv_heads] dequantization scales, or null (1)
  const float *v_scale;
};

// The softmax denominator's share of a head's attention sink (gpt-oss): exp(sink - max)
// in the kernels' base-2 domain, with rowMaxLog2 the row's running max times log2(e).
__device__ __forceinline__ float sinkTerm(const float *sinks, int head, float rowMaxLog2) {
  return sinks ? exp2f(sinks[head] * 1.4426950408889634f - rowMaxLog2) : 0.f;
}

template <typename T> struct MmaType;
template <> struct MmaType<__nv_bfloat16> {
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
  }
  static __device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    kiln::kernels::mma16816<__nv_bfloat16>(d, a, b0, b1);
  }
};
template <> struct MmaType<__half> {
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
  }
  static __device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    kiln::kernels::mma16816<__half>(d, a, b0, b1);
  }
};

__device__ __forceinline__ uint32_t smemAddr(const void *p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte async copy; bytes beyond src_bytes (0 or 16) are zero-filled.
__device__ __forceinline__ void cpAsync16(uint32_t dst, const void *src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes));
}
__device__ __forceinline__ void cpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrixX4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrixX4Trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ float fastExp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Element offset of (row, col) in a [rows, D] tile whose 16-byte chunks are XOR-swizzled
// by row % 8: ldmatrix (8 rows, same logical chunk) and the cp.async fills are
// bank-conflict free. Needs D >= 64.
template <int D> __device__ __forceinline__ int swz(int row, int col) {
  return row * D + ((((col >> 3) ^ (row & 7))) << 3) + (col & 7);
}

// [Q][K ring][V ring], plus the widened fp16 K and V tiles over an FP8 cache (whose
// rings hold bytes). DV: V's and the output's head dim (MLA's 128 under q/k's 192).
template <int D, int BM, int BN, int STAGES, bool F8 = false, int DV = D>
constexpr int fmhaSmemBytes() {
  return F8 ? (BM * D + 2 * BN * D) * 2 + 2 * STAGES * BN * D
            : (BM * D + STAGES * BN * (D + DV)) * 2;
}

// MT: 16-row m-tiles per warp (1: Q fragments in registers; 2: K/V fragments shared by
// two m-tiles, halving shared-memory reads per FLOP, Q re-read from shared memory).
// T: q and out; KT: a cached element: T, or (PAGED only, bf16 T) e4m3 bytes (uint8_t: F8)
// or __half (an f16 cache). CT, the mma operand type, is fp16 over both. DV < D (dense
// only): V and the output have DV columns a head, q and k D (DeepSeek MLA's expanded
// prompts: 192 and 128).
template <typename T, int D, int BM, int BN, int STAGES, bool PAGED, int MT, bool QREG,
          typename KT = T, int DV = D>
__global__ void __launch_bounds__(BM / (16 * MT) * 32, 1) prefillFmhaKernel(const FmhaArgs a) {
  constexpr bool F8 = sizeof(KT) == 1;
  static_assert(D % 64 == 0 && BN % 16 == 0 && BM % (16 * MT) == 0 && STAGES >= 2, "tile");
  static_assert(std::is_same_v<KT, T> ||
                    (PAGED && std::is_same_v<T, __nv_bfloat16> &&
                     (std::is_same_v<KT, uint8_t> || std::is_same_v<KT, __half>)),
                "FP8 and f16 (next to bf16) are paged caches' formats");
  static_assert(DV % 64 == 0 && DV <= D && (DV == D || (!PAGED && !F8)),
                "a narrower V is a dense-K/V shape");
  using CT = std::conditional_t<F8, __half, KT>;
  constexpr int WROWS = 16 * MT;
  constexpr int NWARPS = BM / WROWS;
  constexpr int NTHREADS = NWARPS * 32;
  constexpr int CHUNKS = D / 8; // 16-byte chunks per row
  static_assert((BM * CHUNKS) % NTHREADS == 0 && (BN * CHUNKS) % NTHREADS == 0, "loads");
  const float NEG_INF = -INFINITY;

  extern __shared__ __align__(128) unsigned char smemRaw[];
  CT *sQ = reinterpret_cast<CT *>(smemRaw);
  CT *sWideK = sQ + BM * D; // F8 only
  CT *sWideV = sWideK + BN * D;
  KT *sK = reinterpret_cast<KT *>(F8 ? sWideV + BN * D : sQ + BM * D);
  KT *sV = sK + STAGES * BN * D; // STAGES tiles of BN x DV

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
  // Longest (last) query blocks are launched first: blockIdx.z == 0 is the last block.
  const int m0 = (numMBlocks - 1 - static_cast<int>(blockIdx.z)) * BM;

  int kStart = 0, kLen;
  if constexpr (PAGED) {
    kLen = a.seq_lens[b];
  } else {
    kStart = a.cu_k[b];
    kLen = a.cu_k[b + 1] - kStart;
  }
  const int diag = kLen - qLen; // bottom-right alignment: query t sees keys <= t + diag
  int nEnd = kLen;
  if (a.causal)
    nEnd = min(kLen, m0 + BM + diag);
  const int nTiles = nEnd > 0 ? (nEnd + BN - 1) / BN : 0;
  // Sliding window: the block's lowest visible key (its first row's window) and the
  // first tile holding it. Keys below are never read: a paged cache may recycle them.
  const int keyFloor = a.window > 0 ? max(0, m0 + diag - a.window + 1) : 0;
  const int jFirst = keyFloor / BN;
  const int kvHead = head / a.group;

  const T *qBase = static_cast<const T *>(a.q) + static_cast<int64_t>(qStart) * a.q_tok +
                   static_cast<int64_t>(head) * a.q_head;
  const KT *kBase;
  const KT *vBase;
  const int32_t *pageRow = nullptr;
  if constexpr (PAGED) {
    kBase = static_cast<const KT *>(a.k) + static_cast<int64_t>(kvHead) * a.k_head;
    vBase = kBase + static_cast<int64_t>(a.page_size) * a.k_tok;
    pageRow = a.block_table + static_cast<int64_t>(b) * a.max_pages;
  } else {
    kBase = static_cast<const KT *>(a.k) + static_cast<int64_t>(kStart) * a.k_tok +
            static_cast<int64_t>(kvHead) * a.k_head;
    vBase = static_cast<const KT *>(a.v) + static_cast<int64_t>(kStart) * a.v_tok +
            static_cast<int64_t>(kvHead) * a.v_head;
  }
  // FP8: this KV head's scales (K's in the scores, V's in the output).
  const float scaleLog2 = F8 && a.k_scale ? a.scale_log2 * a.k_scale[kvHead] : a.scale_log2;
  const float vScale = F8 && a.v_scale ? a.v_scale[kvHead] : 1.f;

  // ---- async loads ----------------------------------------------------------------
  {
    const uint32_t dst = smemAddr(sQ);
#pragma unroll
    for (int it = 0; it < BM * CHUNKS / NTHREADS; ++it) {
      const int i = tid + it * NTHREADS;
      const int row = i / CHUNKS, ch = i % CHUNKS;
      const bool valid = m0 + row < qLen;
      const T *src = valid ? qBase + static_cast<int64_t>(m0 + row) * a.q_tok + ch * 8 : qBase;
      if constexpr (std::is_same_v<CT, T>) {
        cpAsync16(dst + swz<D>(row, ch * 8) * 2, src, valid ? 16 : 0);
      } else {
        const uint4 raw = valid ? *reinterpret_cast<const uint4 *>(src) : make_uint4(0, 0, 0, 0);
        // An f16 cache keeps a NaN query NaN, as the bf16 cache's kernel does.
        *reinterpret_cast<uint4 *>(sQ + swz<D>(row, ch * 8)) =
            F8 ? bf16x8ToFp16(raw) : bf16x8ToFp16Sat(raw);
      }
    }
  }
  // 16-byte chunks of a key row: 8 16-bit values, or 16 FP8 ones (unswizzled: the
  // widening pass reads them in order).
  constexpr int KV_CHUNKS = F8 ? D / 16 : CHUNKS;
  constexpr int PER_CHUNK = F8 ? 16 : 8;
  static_assert((BN * KV_CHUNKS) % NTHREADS == 0, "K/V loads");
  auto loadKV = [&](int tile, int stage) {
    const uint32_t dstK = smemAddr(sK + stage * BN * D);
    const uint32_t dstV = smemAddr(sV + stage * BN * DV);
    const int n0 = tile * BN;
#pragma unroll
    for (int it = 0; it < BN * KV_CHUNKS / NTHREADS; ++it) {
      const int i = tid + it * NTHREADS;
      const int row = i / KV_CHUNKS, ch = i % KV_CHUNKS;
      const int key = n0 + row;
      const bool valid = key < kLen && key >= keyFloor;
      const KT *srcK = kBase;
      const KT *srcV = vBase;
      if (valid) {
        if constexpr (PAGED) {
          const int page = __ldg(pageRow + key / a.page_size);
          const int slot = key % a.page_size;
          const int64_t off = (static_cast<int64_t>(page) * 2 * a.page_size + slot) * a.k_tok;
          srcK = kBase + off + ch * PER_CHUNK;
          srcV = vBase + off + ch * PER_CHUNK;
        } else {
          srcK = kBase + static_cast<int64_t>(key) * a.k_tok + ch * 8;
          srcV = vBase + static_cast<int64_t>(key) * a.v_tok + ch * 8;
        }
      }
      const int o = F8 ? row * D + ch * 16 : swz<D>(row, ch * 8) * 2;
      cpAsync16(dstK + o, srcK, valid ? 16 : 0);
      if constexpr (DV == D)
        cpAsync16(dstV + o, srcV, valid ? 16 : 0);
    }
    if constexpr (DV != D) { // dense only: V's rows of DV columns
      constexpr int V_CHUNKS = DV / 8;
      static_assert((BN * V_CHUNKS) % NTHREADS == 0, "V loads");
#pragma unroll
      for (int it = 0; it < BN * V_CHUNKS / NTHREADS; ++it) {
        const int i = tid + it * NTHREADS;
        const int row = i / V_CHUNKS, ch = i % V_CHUNKS;
        const int key = n0 + row;
        const bool valid = key < kLen && key >= keyFloor;
        const KT *srcV = valid ? vBase + static_cast<int64_t>(key) * a.v_tok + ch * 8 : vBase;
        cpAsync16(dstV + swz<DV>(row, ch * 8) * 2, srcV, valid ? 16 : 0);
      }
    }
  };
  // F8: a stage's raw K and V tiles -> the swizzled fp16 tiles the mma path reads.
  auto widenKV = [&](int stage) {
    for (int i = tid; i < 2 * BN * (D / 16); i += NTHREADS) {
      const int half = i / (BN * (D / 16)), rem = i % (BN * (D / 16));
      const int row = rem / (D / 16), ch = rem % (D / 16);
      const uint8_t *raw = reinterpret_cast<const uint8_t *>((half ? sV : sK) + stage * BN * D);
      uint4 lo, hi;
      widenE4m3x16(*reinterpret_cast<const uint4 *>(raw + row * D + ch * 16), lo, hi);
      CT *dst = half ? sWideV : sWideK;
      *reinterpret_cast<uint4 *>(dst + swz<D>(row, ch * 16)) = lo;
      *reinterpret_cast<uint4 *>(dst + swz<D>(row, ch * 16 + 8)) = hi;
    }
  };

  // Prologue: group 0 = Q (+ tile jFirst), groups 1..STAGES-2 = the next tiles; iteration
  // j commits the group of tile j + STAGES - 1, so tile j is always group j - jFirst.
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (jFirst + s < nTiles)
      loadKV(jFirst + s, s);
    cpAsyncCommit();
  }

  uint32_t qf[QREG ? MT : 1][QREG ? D / 16 : 1][4];
  float o[MT][DV / 8][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int i = 0; i < DV / 8; ++i)
      o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.f;
  float rowMax[MT][2], rowSum[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
    rowMax[mt][0] = rowMax[mt][1] = NEG_INF, rowSum[mt][0] = rowSum[mt][1] = 0.f;

  const int g = lane >> 2; // row within the 8-row group
  const int t = lane & 3;  // column pair
  const int warpRow0 = m0 + warp * WROWS; // first query row (in the sequence) of this warp
  // Keys this warp can see: [0, warpNEnd).
  const int warpNEnd = a.causal ? min(kLen, warpRow0 + WROWS + diag) : kLen;
  // With a window: keys below this are masked for all of this warp's rows, and keys below
  // windowMaskEnd for some of them.
  const int warpNBegin = a.window > 0 ? warpRow0 + diag - a.window + 1 : 0;
  const int windowMaskEnd = a.window > 0 ? warpRow0 + WROWS - 1 + diag - a.window + 1 : 0;
  // ldmatrix address of this lane's Q A-fragment row/col (add mt * 16 rows, kk * 16 cols).
  const int qRowL = warp * WROWS + (lane & 15), qColL = (lane >> 4) * 8;

  for (int j = jFirst; j < nTiles; ++j) {
    cpAsyncWait<STAGES - 2>();
    __syncthreads();
    if constexpr (QREG) {
      if (j == jFirst) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int kk = 0; kk < D / 16; ++kk)
            ldmatrixX4(qf[mt][kk], smemAddr(sQ + swz<D>(qRowL + mt * 16, kk * 16 + qColL)));
      }
    }
    {
      const int next = j + STAGES - 1;
      if (next < nTiles)
        loadKV(next, (next - jFirst) % STAGES);
      cpAsyncCommit();
    }
    const int n0 = j * BN;
    const int stage = (j - jFirst) % STAGES;
    if constexpr (F8) {
      widenKV(stage); // the barrier above: every warp is done with the last wide tiles
      __syncthreads();
    }
    if (n0 >= warpNEnd || n0 + BN <= warpNBegin)
      continue; // every key of this tile is masked for this warp's rows
    const CT *tK = F8 ? sWideK : reinterpret_cast<const CT *>(sK) + stage * BN * D;
    const CT *tV = F8 ? sWideV : reinterpret_cast<const CT *>(sV) + stage * BN * DV;

    // S = Q K^T
    float s[MT][BN / 8][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int i = 0; i < BN / 8; ++i)
        s[mt][i][0] = s[mt][i][1] = s[mt][i][2] = s[mt][i][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t qa[QREG ? 1 : MT][4];
      if constexpr (!QREG) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
          ldmatrixX4(qa[mt], smemAddr(sQ + swz<D>(qRowL + mt * 16, kk * 16 + qColL)));
      }
#pragma unroll
      for (int np = 0; np < BN / 16; ++np) {
        uint32_t bk[4];
        const int row = np * 16 + (lane >> 4) * 8 + (lane & 7);
        const int col = kk * 16 + ((lane >> 3) & 1) * 8;
        ldmatrixX4(bk, smemAddr(tK + swz<D>(row, col)));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          const uint32_t(&af)[4] = QREG ? qf[QREG ? mt : 0][QREG ? kk : 0] : qa[QREG ? 0 : mt];
          MmaType<CT>::mma(s[mt][2 * np], af, bk[0], bk[1]);
          MmaType<CT>::mma(s[mt][2 * np + 1], af, bk[2], bk[3]);
        }
      }
    }

    // Mask (tail of the key sequence, causal diagonal) only where needed.
    const bool needMask = (n0 + BN > kLen) || (a.causal && n0 + BN - 1 > warpRow0 + diag) ||
                          n0 < windowMaskEnd;
    if (needMask) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = n0 + nt * 8 + 2 * t + (e & 1);
            const int qrow = warpRow0 + mt * 16 + g + (e >> 1) * 8;
            const bool visible = key < kLen && (!a.causal || key <= qrow + diag) &&
                                 (a.window <= 0 || key > qrow + diag - a.window);
            if (!visible)
              s[mt][nt][e] = NEG_INF;
          }
    }

    // Online softmax (scores kept unscaled; exp2 with the scale folded in).
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = NEG_INF;
#pragma unroll
        for (int nt = 0; nt < BN / 8; ++nt)
          mx = fmaxf(mx, fmaxf(s[mt][nt][2 * r], s[mt][nt][2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float mNew = fmaxf(rowMax[mt][r], mx);
        const float mUse = mNew == NEG_INF ? 0.f : mNew;
        const float alpha = fastExp2((rowMax[mt][r] - mUse) * scaleLog2);
        rowMax[mt][r] = mNew;
        rowSum[mt][r] *= alpha;
#pragma unroll
        for (int dn = 0; dn < DV / 8; ++dn) {
          o[mt][dn][2 * r] *= alpha;
          o[mt][dn][2 * r + 1] *= alpha;
        }
        const float ms = mUse * scaleLog2;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < BN / 8; ++nt) {
          const float p0 = fastExp2(fmaf(s[mt][nt][2 * r], scaleLog2, -ms));
          const float p1 = fastExp2(fmaf(s[mt][nt][2 * r + 1], scaleLog2, -ms));
          s[mt][nt][2 * r] = p0;
          s[mt][nt][2 * r + 1] = p1;
          sum += p0 + p1;
        }
        rowSum[mt][r] += sum;
      }

    // O += P V
#pragma unroll
    for (int kp = 0; kp < BN / 16; ++kp) {
      uint32_t pa[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        pa[mt][0] = MmaType<CT>::pack(s[mt][2 * kp][0], s[mt][2 * kp][1]);
        pa[mt][1] = MmaType<CT>::pack(s[mt][2 * kp][2], s[mt][2 * kp][3]);
        pa[mt][2] = MmaType<CT>::pack(s[mt][2 * kp + 1][0], s[mt][2 * kp + 1][1]);
        pa[mt][3] = MmaType<CT>::pack(s[mt][2 * kp + 1][2], s[mt][2 * kp + 1][3]);
      }
#pragma unroll
      for (int dp = 0; dp < DV / 16; ++dp) {
        uint32_t bv[4];
        const int row = kp * 16 + ((lane >> 3) & 1) * 8 + (lane & 7);
        const int col = dp * 16 + (lane >> 4) * 8;
        ldmatrixX4Trans(bv, smemAddr(tV + swz<DV>(row, col)));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          MmaType<CT>::mma(o[mt][2 * dp], pa[mt], bv[0], bv[1]);
          MmaType<CT>::mma(o[mt][2 * dp + 1], pa[mt], bv[2], bv[3]);
        }
      }
    }
  }

  // ---- epilogue: normalise, stage through this warp's rows of sQ, 16-byte stores ----
  cpAsyncWait<0>();
  __syncthreads();
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float sum = rowSum[mt][r];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      sum += sinkTerm(a.sinks, head,
                      rowMax[mt][r] == NEG_INF ? 0.f : rowMax[mt][r] * scaleLog2);
      inv[r] = sum > 0.f ? vScale / sum : 0.f;
    }
#pragma unroll
    for (int dn = 0; dn < DV / 8; ++dn) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = warp * WROWS + mt * 16 + g + 8 * r;
        const uint32_t packed =
            MmaType<T>::pack(o[mt][dn][2 * r] * inv[r], o[mt][dn][2 * r + 1] * inv[r]);
        *reinterpret_cast<uint32_t *>(sQ + swz<DV>(row, dn * 8 + 2 * t)) = packed;
      }
    }
  }
  __syncwarp();
  T *oBase = static_cast<T *>(a.out) + static_cast<int64_t>(qStart) * a.o_tok +
             static_cast<int64_t>(head) * a.o_head;
  constexpr int OUT_CHUNKS = DV / 8;
#pragma unroll
  for (int it = 0; it < WROWS * OUT_CHUNKS / 32; ++it) {
    const int i = lane + it * 32;
    const int row = i / OUT_CHUNKS, ch = i % OUT_CHUNKS;
    const int qrow = warpRow0 + row;
    if (qrow < qLen) {
      const uint4 val =
          *reinterpret_cast<const uint4 *>(sQ + swz<DV>(warp * WROWS + row, ch * 8));
      *reinterpret_cast<uint4 *>(oBase + static_cast<int64_t>(qrow) * a.o_tok + ch * 8) = val;
    }
  }
}

// Launches one instantiation; grid = (q_heads, batch, query blocks of the longest
// sequence), blockIdx.z == 0 being the last (longest causal) block of each sequence.
template <typename T, int D, int BM, int BN, int STAGES, bool PAGED, int MT = 1, bool QREG = true,
          typename KT = T, int DV = D>
cudaError_t launchPrefillFmha(const FmhaArgs &args, int batch, int maxSeqlenQ, int qHeads,
                              cudaStream_t stream) {
  constexpr int smem = fmhaSmemBytes<D, BM, BN, STAGES, sizeof(KT) == 1, DV>();
  auto kernel = prefillFmhaKernel<T, D, BM, BN, STAGES, PAGED, MT, QREG, KT, DV>;
  cudaError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (err != cudaSuccess)
    return err;
  const dim3 grid(qHeads, batch, (maxSeqlenQ + BM - 1) / BM);
  kernel<<<grid, BM / (16 * MT) * 32, smem, stream>>>(args);
  return cudaGetLastError();
}

} // namespace kiln::kernels::prefill

#endif
