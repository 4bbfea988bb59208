// mla_decode: absorbed MLA decode (DeepSeek-V2/V3). K = the 576 cached latent+rope
// values of a token, V = the first 512 of them, shared by all heads (MQA over the
// latent). One block = (row block of ROWS query rows, split, sequence); rows are
// (token, head) pairs so all heads and draft tokens of a sequence reuse each K tile.
// Warps: RT = ROWS/16 row tiles x WARPS_C column warps. S = Q K^T: a column warp takes
// KW = TILE_N/WARPS_C keys with the full 576-deep reduction; the row max is exchanged
// through smem and P goes to smem, then O += P V: a column warp owns DV/WARPS_C output
// columns over all TILE_N keys. mma.sync m16n8k16 bf16, fp32 accumulate.
// FP8 latent pools (FP8 = true; token layout in kiln/Kernels/Decode.h): the cp.async ring
// holds the tokens' 656 bytes as stored; once a tile has landed, the block widens it into
// one bf16 tile in the layout the bf16 kernel reads (latent = e4m3 * its group's scale,
// exact in bf16 for the power-of-two scales kv_append writes; rope copied), then runs the
// same products on it.
#include "DecodeArgs.h"
#include "DecodeDevice.cuh"
#include "DecodeKernels.h"

#include "kiln/Kernels/Decode.h"

#include <cuda_fp8.h>

namespace kiln::decode {

constexpr int kMlaDqk = 576, kMlaDv = 512, kMlaCh = kMlaDqk / 8, kMlaPage = 64;

// PV_MT: m16 row tiles per warp in the PV product (2 halves the V fragments read from
// smem per mma; the warps then split the 512 columns four ways instead of two).
constexpr int kFp8Token = KILN_MLA_FP8_TOKEN_BYTES, kFp8Chunks = kFp8Token / 16;

template <int ROWS, int TILE_N, int WARPS_C, int STAGES, int PV_MT, bool FP8 = false>
struct MlaConfig {
  static constexpr int RT = ROWS / 16;
  static constexpr int WARPS = RT * WARPS_C;
  static constexpr int THREADS = WARPS * 32;
  static constexpr int KW = TILE_N / WARPS_C;
  static constexpr int PV_RG = RT / PV_MT;        // row groups in PV
  static constexpr int PV_CG = WARPS / PV_RG;     // column groups in PV
  static constexpr int DVW = kMlaDv / PV_CG;      // output columns per warp
  static constexpr int Q_ELEMS = ROWS * kMlaDqk;
  static constexpr int STAGE_ELEMS = TILE_N * kMlaDqk;
  static constexpr int P_STRIDE = TILE_N + 8;
  static constexpr int P_ELEMS = ROWS * P_STRIDE;
  // bf16 key tiles: the ring's STAGES, or the one tile an FP8 ring is widened into.
  static constexpr int K_TILES = FP8 ? 1 : STAGES;
  static constexpr int RAW_STAGE_BYTES = FP8 ? TILE_N * kFp8Token : 0;
  static constexpr int SMEM_BYTES = (Q_ELEMS + K_TILES * STAGE_ELEMS + P_ELEMS) * 2 +
                                    STAGES * RAW_STAGE_BYTES + (2 * WARPS_C + 2) * ROWS * 4;
  static_assert(KW == 8 || KW % 16 == 0, "keys per column warp");
  static_assert(DVW % 16 == 0, "columns per warp");
};

// Widens the FP8 tile `raw` (TILE_N tokens of kFp8Token bytes) into the bf16 tile sKt.
template <int TILE_N, int THREADS>
__device__ __forceinline__ void widenFp8Tile(__nv_bfloat16 *sKt, const unsigned char *raw,
                                             int tid) {
  constexpr int kLatentChunks = KILN_MLA_KV_LORA_RANK / 8;
  for (int c = tid; c < TILE_N * kMlaCh; c += THREADS) {
    const int key = c / kMlaCh, ch = c % kMlaCh;
    const unsigned char *token = raw + key * kFp8Token;
    uint4 out;
    if (ch < kLatentChunks) {
      const float scale = reinterpret_cast<const float *>(
          token + KILN_MLA_FP8_SCALE_OFFSET)[ch * 8 / KILN_MLA_FP8_GROUP];
      const uint2 bytes = *reinterpret_cast<const uint2 *>(token + ch * 8);
      const __nv_fp8x2_storage_t *pairs = reinterpret_cast<const __nv_fp8x2_storage_t *>(&bytes);
      uint32_t *words = reinterpret_cast<uint32_t *>(&out);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(pairs[i], __NV_E4M3);
        const float2 f = __half22float2(*reinterpret_cast<const __half2 *>(&h));
        words[i] = pack2<__nv_bfloat16>(f.x * scale, f.y * scale);
      }
    } else {
      out = *reinterpret_cast<const uint4 *>(token + KILN_MLA_FP8_ROPE_OFFSET +
                                             (ch - kLatentChunks) * 16);
    }
    *reinterpret_cast<uint4 *>(sKt + swz(key, ch, kMlaCh)) = out;
  }
}

template <int ROWS, int TILE_N, int WARPS_C, int STAGES, int PV_MT, bool FP8>
__global__ void __launch_bounds__(MlaConfig<ROWS, TILE_N, WARPS_C, STAGES, PV_MT, FP8>::THREADS, 1)
    mlaDecodeKernel(const MlaArgs args) {
  using C = MlaConfig<ROWS, TILE_N, WARPS_C, STAGES, PV_MT, FP8>;
  using T = __nv_bfloat16;
  extern __shared__ __align__(16) unsigned char smemRaw[];
  T *sQ = reinterpret_cast<T *>(smemRaw);
  T *sK = sQ + C::Q_ELEMS;
  unsigned char *sRaw = reinterpret_cast<unsigned char *>(sK + C::K_TILES * C::STAGE_ELEMS);
  T *sP = reinterpret_cast<T *>(sRaw + STAGES * C::RAW_STAGE_BYTES);
  float *sRed = reinterpret_cast<float *>(sP + C::P_ELEMS); // [ROWS][WARPS_C]
  float *sRedL = sRed + ROWS * WARPS_C;
  float *sAlpha = sRedL + ROWS * WARPS_C; // [ROWS] rescale of this tile
  float *sRowMax = sAlpha + ROWS;         // [ROWS] final running max

  const int rb = blockIdx.x, split = blockIdx.y, b = blockIdx.z;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int rows = args.qLen * args.heads;
  const int rowBase = rb * ROWS;
  const bool perToken = args.tokenRows != nullptr;
  const int seqLen = perToken ? args.tokenPos[b] + 1 : args.seqLens[b];
  const int start = split * args.splitTiles * TILE_N;
  const int end = min(seqLen, start + args.splitTiles * TILE_N);
  const int numTiles = end > start ? (end - start + TILE_N - 1) / TILE_N : 0;
  const T *q = static_cast<const T *>(args.q);
  const T *cache = static_cast<const T *>(args.cache);
  const int32_t *table =
      args.blockTable + static_cast<size_t>(perToken ? args.tokenRows[b] : b) * args.maxPages;

  for (int c = tid; c < ROWS * kMlaCh; c += C::THREADS) {
    int r = c / kMlaCh, ch = c % kMlaCh;
    int gr = rowBase + r;
    bool valid = gr < rows;
    const T *src = valid ? q + (static_cast<size_t>(b) * rows + gr) * kMlaDqk + ch * 8 : q;
    cpAsync16(sQ + swz(r, ch, kMlaCh), src, valid);
  }
  cpAsyncCommit();

  auto loadTile = [&](int tile) {
    if constexpr (FP8) {
      const unsigned char *bytes = static_cast<const unsigned char *>(args.cache);
      unsigned char *dst = sRaw + (tile % STAGES) * C::RAW_STAGE_BYTES;
      const int base = start + tile * TILE_N;
      for (int c = tid; c < TILE_N * kFp8Chunks; c += C::THREADS) {
        int key = c / kFp8Chunks, ch = c % kFp8Chunks;
        int pos = base + key;
        bool valid = pos < end;
        const unsigned char *src = bytes;
        if (valid) {
          size_t page = static_cast<size_t>(table[pos / kMlaPage]);
          src = bytes + (page * kMlaPage + (pos % kMlaPage)) * kFp8Token + ch * 16;
        }
        cpAsync16(dst + key * kFp8Token + ch * 16, src, valid);
      }
    } else {
      T *dst = sK + (tile % STAGES) * C::STAGE_ELEMS;
      const int base = start + tile * TILE_N;
      for (int c = tid; c < TILE_N * kMlaCh; c += C::THREADS) {
        int key = c / kMlaCh, ch = c % kMlaCh;
        int pos = base + key;
        bool valid = pos < end;
        const T *src = cache;
        if (valid) {
          size_t page = static_cast<size_t>(table[pos / kMlaPage]);
          src = cache + (page * kMlaPage + (pos % kMlaPage)) * kMlaDqk + ch * 8;
        }
        cpAsync16(dst + swz(key, ch, kMlaCh), src, valid);
      }
    }
  };
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < numTiles)
      loadTile(s);
    cpAsyncCommit();
  }

  const int rt = warp % C::RT, wc = warp / C::RT;
  const int g = lane / 4, t4 = lane % 4;
  const int row0 = rt * 16 + g, row1 = row0 + 8; // block-local
  const int grow0 = rowBase + row0, grow1 = rowBase + row1;
  const int lim0 = grow0 < rows ? min(end, seqLen - args.qLen + 1 + grow0 / args.heads) : end;
  const int lim1 = grow1 < rows ? min(end, seqLen - args.qLen + 1 + grow1 / args.heads) : end;

  // PV ownership: rows (pr*PV_MT + pm)*16 + {g, g+8}, columns pc*DVW + [0, DVW).
  const int pr = warp % C::PV_RG, pc = warp / C::PV_RG;
  float o[PV_MT][C::DVW / 8][4];
#pragma unroll
  for (int pm = 0; pm < PV_MT; ++pm)
#pragma unroll
    for (int i = 0; i < C::DVW / 8; ++i)
      o[pm][i][0] = o[pm][i][1] = o[pm][i][2] = o[pm][i][3] = 0.f;
  float m0 = -1e30f, m1 = -1e30f, l0 = 0.f, l1 = 0.f;

  for (int tile = 0; tile < numTiles; ++tile) {
    cpAsyncWait<STAGES - 2>();
    __syncthreads();
    if (tile + STAGES - 1 < numTiles)
      loadTile(tile + STAGES - 1);
    cpAsyncCommit();
    const T *sKt = sK + (FP8 ? 0 : tile % STAGES) * C::STAGE_ELEMS;
    if constexpr (FP8) {
      // Keys past `end` widen to zero (their bytes are cp.async's zero fill) and are
      // masked below as in the bf16 ring.
      widenFp8Tile<TILE_N, C::THREADS>(sK, sRaw + (tile % STAGES) * C::RAW_STAGE_BYTES, tid);
      __syncthreads();
    }
    const int kBase = wc * C::KW;

    float s[C::KW / 8][4];
#pragma unroll
    for (int j = 0; j < C::KW / 8; ++j)
      s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll 4
    for (int kk = 0; kk < kMlaDqk / 16; ++kk) {
      uint32_t a[4];
      ldsmX4(a, sQ + swz(rt * 16 + (lane % 16), kk * 2 + lane / 16, kMlaCh));
      if constexpr (C::KW % 16 == 0) {
#pragma unroll
        for (int j = 0; j < C::KW / 16; ++j) {
          uint32_t bf[4];
          int key = kBase + j * 16 + (lane % 8) + (lane / 16) * 8;
          ldsmX4(bf, sKt + swz(key, kk * 2 + (lane / 8) % 2, kMlaCh));
          mma16816<T>(s[2 * j], a, bf[0], bf[1]);
          mma16816<T>(s[2 * j + 1], a, bf[2], bf[3]);
        }
      } else {
        uint32_t bf[2];
        ldsmX2(bf, sKt + swz(kBase + (lane % 8), kk * 2 + (lane / 8) % 2, kMlaCh));
        mma16816<T>(s[0], a, bf[0], bf[1]);
      }
    }

    const int posBase = start + tile * TILE_N + kBase + 2 * t4;
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int j = 0; j < C::KW / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        int pos = posBase + j * 8 + e;
        s[j][e] = pos < lim0 ? s[j][e] * args.scaleLog2 : -INFINITY;
        s[j][2 + e] = pos < lim1 ? s[j][2 + e] * args.scaleLog2 : -INFINITY;
        mx0 = fmaxf(mx0, s[j][e]);
        mx1 = fmaxf(mx1, s[j][2 + e]);
      }
    }
    mx0 = quadMax(mx0);
    mx1 = quadMax(mx1);
    if (t4 == 0) {
      sRed[row0 * WARPS_C + wc] = mx0;
      sRed[row1 * WARPS_C + wc] = mx1;
    }
    __syncthreads();
    float mn0 = m0, mn1 = m1;
#pragma unroll
    for (int w = 0; w < WARPS_C; ++w) {
      mn0 = fmaxf(mn0, sRed[row0 * WARPS_C + w]);
      mn1 = fmaxf(mn1, sRed[row1 * WARPS_C + w]);
    }
    const float alpha0 = exp2f(m0 - mn0), alpha1 = exp2f(m1 - mn1);
    m0 = mn0;
    m1 = mn1;
    float sum0 = 0.f, sum1 = 0.f;
#pragma unroll
    for (int j = 0; j < C::KW / 8; ++j) {
      float p0 = exp2f(s[j][0] - mn0), p1 = exp2f(s[j][1] - mn0);
      float p2 = exp2f(s[j][2] - mn1), p3 = exp2f(s[j][3] - mn1);
      sum0 += p0 + p1;
      sum1 += p2 + p3;
      int col = kBase + j * 8 + 2 * t4;
      *reinterpret_cast<uint32_t *>(sP + row0 * C::P_STRIDE + col) = pack2<T>(p0, p1);
      *reinterpret_cast<uint32_t *>(sP + row1 * C::P_STRIDE + col) = pack2<T>(p2, p3);
    }
    l0 = l0 * alpha0 + sum0;
    l1 = l1 * alpha1 + sum1;
    if (wc == 0 && t4 == 0) {
      sAlpha[row0] = alpha0;
      sAlpha[row1] = alpha1;
    }
    __syncthreads();
#pragma unroll
    for (int pm = 0; pm < PV_MT; ++pm) {
      const float a0 = sAlpha[(pr * PV_MT + pm) * 16 + g], a1 = sAlpha[(pr * PV_MT + pm) * 16 + g + 8];
#pragma unroll
      for (int i = 0; i < C::DVW / 8; ++i) {
        o[pm][i][0] *= a0;
        o[pm][i][1] *= a0;
        o[pm][i][2] *= a1;
        o[pm][i][3] *= a1;
      }
    }
#pragma unroll
    for (int kk = 0; kk < TILE_N / 16; ++kk) {
      uint32_t a[PV_MT][4];
#pragma unroll
      for (int pm = 0; pm < PV_MT; ++pm)
        ldsmX4(a[pm], sP + ((pr * PV_MT + pm) * 16 + (lane % 16)) * C::P_STRIDE + kk * 16 +
                          (lane / 16) * 8);
      int key = kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8;
#pragma unroll
      for (int np = 0; np < C::DVW / 16; ++np) {
        uint32_t bf[4];
        ldsmX4T(bf, sKt + swz(key, pc * (C::DVW / 8) + np * 2 + lane / 16, kMlaCh));
#pragma unroll
        for (int pm = 0; pm < PV_MT; ++pm) {
          mma16816<T>(o[pm][2 * np], a[pm], bf[0], bf[1]);
          mma16816<T>(o[pm][2 * np + 1], a[pm], bf[2], bf[3]);
        }
      }
    }
  }
  cpAsyncWait<0>();

  l0 = quadSum(l0);
  l1 = quadSum(l1);
  if (t4 == 0) {
    sRedL[row0 * WARPS_C + wc] = l0;
    sRedL[row1 * WARPS_C + wc] = l1;
    if (wc == 0) {
      sRowMax[row0] = m0;
      sRowMax[row1] = m1;
    }
  }
  __syncthreads();

  auto store = [&](int grow, int col, float v0, float v1, float rowMax, float rowSum) {
    if (grow >= rows)
      return;
    float inv = rowSum > 0.f ? 1.f / rowSum : 0.f;
    size_t fr = static_cast<size_t>(b) * rows + grow;
    if (args.numSplits == 1) {
      *reinterpret_cast<uint32_t *>(static_cast<T *>(args.out) + fr * kMlaDv + col) =
          pack2<T>(v0 * inv, v1 * inv);
    } else {
      size_t idx = fr * args.numSplits + split;
      *reinterpret_cast<float2 *>(args.partO + idx * kMlaDv + col) =
          make_float2(v0 * inv, v1 * inv);
      if (col == 0)
        args.partLse[idx] = rowSum > 0.f ? rowMax + log2f(rowSum) : -INFINITY;
    }
  };
#pragma unroll
  for (int pm = 0; pm < PV_MT; ++pm) {
    const int r0 = (pr * PV_MT + pm) * 16 + g, r1 = r0 + 8;
    float L0 = 0.f, L1 = 0.f;
#pragma unroll
    for (int w = 0; w < WARPS_C; ++w) {
      L0 += sRedL[r0 * WARPS_C + w];
      L1 += sRedL[r1 * WARPS_C + w];
    }
#pragma unroll
    for (int i = 0; i < C::DVW / 8; ++i) {
      int col = pc * C::DVW + i * 8 + 2 * t4;
      store(rowBase + r0, col, o[pm][i][0], o[pm][i][1], sRowMax[r0], L0);
      store(rowBase + r1, col, o[pm][i][2], o[pm][i][3], sRowMax[r1], L1);
    }
  }
}

#define KILN_MLA_INFO(R, N, W, S, P, F)                                                            \
  KernelInfo {                                                                                     \
    reinterpret_cast<const void *>(&mlaDecodeKernel<R, N, W, S, P, F>),                            \
        MlaConfig<R, N, W, S, P, F>::THREADS, MlaConfig<R, N, W, S, P, F>::SMEM_BYTES, N           \
  }

KernelInfo mlaKernelInfo(int config) {
  switch (config) {
  case 0:
    return KILN_MLA_INFO(16, 32, 4, 2, 1, false);
  case 1:
    return KILN_MLA_INFO(64, 64, 2, 2, 2, false);
  default:
    return KILN_MLA_INFO(64, 64, 2, 2, 1, false);
  }
}

// FP8 pools: 16 rows x 32 keys (96.9 KiB: fits the ~99 KiB parts), and 64 rows x 32 keys
// with a 3-deep byte ring (176 KiB: one 64-key bf16 tile next to its ring would not fit).
KernelInfo mlaFp8KernelInfo(int config) {
  return config == 0 ? KILN_MLA_INFO(16, 32, 4, 2, 1, true) : KILN_MLA_INFO(64, 32, 2, 3, 2, true);
}

} // namespace kiln::decode
