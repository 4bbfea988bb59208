// The device code of gdn_chunk_prefill (GdnChunkPrefill.cu launches it): a prompt through
// one Gated DeltaNet layer, chunk by chunk, every product over a chunk an mma.sync
// m16n8k16 (bf16 in, fp32 accumulate; sm_80+). Per chunk of L = 64 tokens, with gamma the
// running sum of the log decays g, nq / nk the 1/norms of q / k (1 without l2norm) and
// raw bf16 q, k (exact mma operands; the norms are applied in fp32 to the products):
//   G   = K K^T, P = Q K^T                       (the causal 16-token blocks only)
//   A   = beta_t nk_t nk_u exp(gamma_t - gamma_u) G   (u < t; the solve's matrix)
//   Aqk = scale nq_t nk_u exp(gamma_t - gamma_u) P    (u <= t)
//   R   = beta_t (v_t - exp(gamma_t) nk_t (K S)_t)    (the right-hand side)
//   U   = (I + A)^-1 R                           (blocked forward substitution, below)
//   out = scale nq_t exp(gamma_t) (Q S)_t + Aqk U
//   S'  = exp(gamma_last) S + K^T (exp(gamma_last - gamma_u) nk_u U_u)
// The solve: warp w owns tokens 16w..16w+15 and inverts its diagonal block D_w = I + A_ww
// (fp32 forward substitution, a lane a column), then in four steps separated by barriers
// U_w = D_w^-1 (R_w - sum_{j<w} A_wj U_j): after step s, warps w > s subtract A_ws U_s.
// Operands that are fp32 (the state, A, Aqk, D_w^-1, U and its weighted form) are split
// into a bf16 high part and a bf16 remainder and multiplied two or three times
// (hi.hi + hi.lo + lo.hi; a raw bf16 q or k needs only hi and lo of the other side), so a
// product carries about 2^-16 relative error instead of bf16's 2^-9; the state stays fp32
// in registers from the first chunk to the last. See docs/kernels-gdn.md.
//
// A CTA is (value head, sequence, 32 value columns): the columns of the state, v and out
// are independent, so the value dimension splits over CTAs (each recomputes G, P, A and
// the diagonal inverses of its head).
//
// A header so that the same code also runs on the host: test/Kernels/GatedDeltaNet/
// GdnChunkEmulationTest.cpp runs it a CTA at a time under the CTA emulator
// (test/Kernels/Common/CtaEmulator.h) against the fp64 reference, in CI without a GPU.
#ifndef KILN_LIB_KERNELS_GATEDDELTANET_GDNCHUNKPREFILL_CUH
#define KILN_LIB_KERNELS_GATEDDELTANET_GDNCHUNKPREFILL_CUH

#if defined(__CUDACC__)
#include "../Decode/DecodeDevice.cuh"
#elif !defined(KILN_CTA_EMULATION)
#error "device code: compile with nvcc, or include test/Kernels/Common/CtaEmulator.h first"
#endif
#include "../Common/LdmatrixLanes.cuh"
#include "../Common/WarpScan.cuh"
#include "GdnInternal.h"

#include <cuda_bf16.h>

namespace kiln::kernels::gdn {
// Internal linkage: the emulation test and the .cu each have their own copy.
namespace {

using decode::cpAsync16;
using decode::cpAsyncCommit;
using decode::cpAsyncWait;
using decode::ldsmX4;
using decode::ldsmX4T;
using decode::mma16816;
using bf16 = __nv_bfloat16;

constexpr int kChunk = KILN_GDN_CHUNK; // tokens a chunk
constexpr int kWarps = 4;              // warp w owns tokens 16w..16w+15 of a chunk
constexpr int kThreads = kWarps * 32;
constexpr int kSlice = 32;             // value columns a CTA
constexpr int kColTiles = kSlice / 8;  // n8 tiles of the slice
static_assert(kChunk == 16 * kWarps, "a 16-token block a warp");

// Shared memory of one CTA, in bytes. bf16 rows are padded by 8 elements (16 bytes) so
// that ldmatrix's 8 row addresses fall in 8 distinct 16-byte bank groups.
template <int KD> struct ChunkSmem {
  static constexpr int kRow = KD + 8;      // q, k: [token][dim]
  static constexpr int vRow = kSlice + 8;  // v, U, W: [token][col]; S: [dim][col]
  static constexpr int aRow = kChunk + 8;  // -A: [token][token]
  static constexpr int tRow = 16 + 8;      // a warp's D^-1: [16][16]
  static constexpr int dRow = 16 + 1;      // a warp's A_ww in fp32: [16][16]
  // One of two stages: q, k, v (cp.async) and the raw g and beta of a chunk.
  static constexpr int stQ = 0, stK = stQ + kChunk * kRow * 2, stV = stK + kChunk * kRow * 2,
                       stG = stV + kChunk * vRow * 2, stBeta = stG + kChunk * 4,
                       stageBytes = stBeta + kChunk * 4;
  // The state's bf16 parts (B operand of K S and Q S).
  static constexpr int sHi = 2 * stageBytes, sLo = sHi + KD * vRow * 2;
  static constexpr int aHi = sLo + KD * vRow * 2, aLo = aHi + kChunk * aRow * 2;
  // U (the corrected values) and W = exp(gamma_last - gamma_u) nk_u U_u.
  static constexpr int uHi = aLo + kChunk * aRow * 2, uLo = uHi + kChunk * vRow * 2;
  static constexpr int wHi = uLo + kChunk * vRow * 2, wLo = wHi + kChunk * vRow * 2;
  static constexpr int tHi = wLo + kChunk * vRow * 2, tLo = tHi + kWarps * 16 * tRow * 2;
  static constexpr int diag = tLo + kWarps * 16 * tRow * 2;
  // Per token of the chunk (fp32): gamma, exp(gamma), 1/|q|, 1/|k|.
  static constexpr int gam = diag + kWarps * 16 * dRow * 4, eg = gam + kChunk * 4,
                       nq = eg + kChunk * 4, nk = nq + kChunk * 4;
  static constexpr int bytes = nk + kChunk * 4;
  static_assert(stageBytes % 16 == 0 && sHi % 16 == 0 && aHi % 16 == 0 && uHi % 16 == 0 &&
                    wHi % 16 == 0 && tHi % 16 == 0 && tLo % 16 == 0 && diag % 16 == 0,
                "16-byte aligned tiles (cp.async, ldmatrix)");
};

__device__ __forceinline__ uint32_t packBf16(float lo, float hi) {
  return decode::pack2<bf16>(lo, hi);
}
__device__ __forceinline__ float bf16Round(float v) {
  return __bfloat162float(__float2bfloat16_rn(v));
}
// Two adjacent values as their bf16 high parts at hi and their remainders at lo.
__device__ __forceinline__ void storeSplit(bf16 *hi, bf16 *lo, float v0, float v1) {
  const float h0 = bf16Round(v0), h1 = bf16Round(v1);
  *reinterpret_cast<uint32_t *>(hi) = packBf16(h0, h1);
  *reinterpret_cast<uint32_t *>(lo) = packBf16(v0 - h0, v1 - h1);
}

__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  mma16816<bf16>(c, a, b0, b1);
}
// c[2p], c[2p+1] += a . (the two n8 tiles of b).
__device__ __forceinline__ void mmaPair(float (&c0)[4], float (&c1)[4], const uint32_t (&a)[4],
                                        const uint32_t (&b)[4]) {
  mma(c0, a, b[0], b[1]);
  mma(c1, a, b[2], b[3]);
}
// a . (bHi + bLo): an exact bf16 A against B split into its high part and remainder.
__device__ __forceinline__ void mmaSplitB(float (&c0)[4], float (&c1)[4], const uint32_t (&a)[4],
                                          const uint32_t (&bHi)[4], const uint32_t (&bLo)[4]) {
  mmaPair(c0, c1, a, bHi);
  mmaPair(c0, c1, a, bLo);
}
// (aHi + aLo) . (bHi + bLo) as hi.hi + hi.lo + lo.hi, in that order (lo.lo: see the
// file comment).
__device__ __forceinline__ void mmaSplit(float (&c0)[4], float (&c1)[4], const uint32_t (&aHi)[4],
                                         const uint32_t (&aLo)[4], const uint32_t (&bHi)[4],
                                         const uint32_t (&bLo)[4]) {
  mmaSplitB(c0, c1, aHi, bHi, bLo);
  mmaPair(c0, c1, aLo, bHi);
}

template <int KD> struct GdnChunk {
  using L = ChunkSmem<KD>;
  static constexpr int kStateRows = KD / kWarps;  // state rows (key dims) a warp
  static constexpr int kMTiles = kStateRows / 16; // their m16 tiles
  static_assert(kStateRows % 16 == 0, "whole m16 tiles of state rows a warp");

  const GdnChunkArgs &a;
  char *smem;
  int h, kh, col0, lane, warp;
  int64_t tok0; // the sequence's first token
  int len;      // its tokens

  __device__ bf16 *bf(int offset) const { return reinterpret_cast<bf16 *>(smem + offset); }
  __device__ float *fl(int offset) const { return reinterpret_cast<float *>(smem + offset); }
  __device__ int stage(int s) const { return s * L::stageBytes; }

  // Starts the asynchronous copy of chunk c's q, k and v rows (rows past the sequence
  // zero-filled) into stage s.
  __device__ void issueChunk(int s, int c) const {
    const int t0 = c * kChunk;
    const bf16 *qg = static_cast<const bf16 *>(a.q), *kg = static_cast<const bf16 *>(a.k);
    const bf16 *vg = static_cast<const bf16 *>(a.v);
    bf16 *qs = bf(stage(s) + L::stQ), *ks = bf(stage(s) + L::stK), *vs = bf(stage(s) + L::stV);
    constexpr int kVecs = KD / 8, vVecs = kSlice / 8;
    static_assert(kChunk * kVecs % kThreads == 0 && kChunk * vVecs % kThreads == 0,
                  "whole rounds of 16-byte pieces");
#pragma unroll 1
    for (int i = threadIdx.x; i < kChunk * kVecs; i += kThreads) {
      const int r = i / kVecs, v = i % kVecs;
      const bool valid = t0 + r < len;
      const int64_t row = tok0 + (valid ? t0 + r : 0);
      const int64_t off = (row * a.kHeads + kh) * KD + v * 8;
      cpAsync16(qs + r * L::kRow + v * 8, qg + off, valid);
      cpAsync16(ks + r * L::kRow + v * 8, kg + off, valid);
    }
#pragma unroll 1
    for (int i = threadIdx.x; i < kChunk * vVecs; i += kThreads) {
      const int r = i / vVecs, v = i % vVecs;
      const bool valid = t0 + r < len;
      const int64_t row = tok0 + (valid ? t0 + r : 0);
      cpAsync16(vs + r * L::vRow + v * 8, vg + (row * a.vHeads + h) * a.vDim + col0 + v * 8,
                valid);
    }
    cpAsyncCommit();
  }

  // This thread's raw scalar of chunk c: g (threads 0-63) or beta (64-127) of token
  // threadIdx.x % 64; 0 past the sequence (no decay, no write).
  __device__ float loadScalar(int c) const {
    const int t = c * kChunk + (threadIdx.x & (kChunk - 1));
    if (t >= len)
      return 0.0f;
    const float *src = threadIdx.x < kChunk ? a.g : a.beta;
    return src[(tok0 + t) * a.vHeads + h];
  }
  __device__ void storeScalar(int s, float v) const {
    fl(stage(s) + (threadIdx.x < kChunk ? L::stG : L::stBeta))[threadIdx.x & (kChunk - 1)] = v;
  }

  // The chunk's per-token scalars: 1/|q| (threads 0-63) and 1/|k| (64-127) of token
  // threadIdx.x % 64, and (warp 0) gamma and exp(gamma).
  __device__ void prepare(int s) const {
    const int t = threadIdx.x & (kChunk - 1);
    const bool isQ = threadIdx.x < kChunk;
    float inv = 1.0f;
    if (a.l2norm) {
      const bf16 *row = bf(stage(s) + (isQ ? L::stQ : L::stK)) + t * L::kRow;
      float sum = 0.0f;
#pragma unroll 4
      for (int i = 0; i < KD; i += 8) {
        // Eight bf16 as four words: a bf16 is the high half of its fp32 value.
        const uint4 u = *reinterpret_cast<const uint4 *>(row + i);
        const uint32_t words[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float lo = __uint_as_float(words[j] << 16),
                      hi = __uint_as_float(words[j] & 0xffff0000u);
          sum += lo * lo + hi * hi;
        }
      }
      inv = 1.0f / sqrtf(sum + 1e-6f);
    }
    fl(isQ ? L::nq : L::nk)[t] = inv;
    if (warp == 0) {
      const float *graw = fl(stage(s) + L::stG);
      const float g0 = graw[2 * lane], g1 = graw[2 * lane + 1];
      float c0, c1;
      warpPairPrefix(g0, g1, lane, c0, c1);
      float *gam = fl(L::gam), *eg = fl(L::eg);
      gam[2 * lane] = c0;
      gam[2 * lane + 1] = c1;
      eg[2 * lane] = expf(c0);
      eg[2 * lane + 1] = expf(c1);
    }
  }

  // The state's bf16 parts, this warp's rows (the B operand of K S and Q S).
  __device__ void publishState(const float (&st)[kMTiles][kColTiles][4]) const {
    bf16 *hi = bf(L::sHi), *lo = bf(L::sLo);
    const int g = lane >> 2, q = lane & 3;
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int n = 0; n < kColTiles; ++n)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int row = warp * kStateRows + 16 * mt + g + 8 * r, col = 8 * n + 2 * q;
          storeSplit(hi + row * L::vRow + col, lo + row * L::vRow + col, st[mt][n][2 * r],
                     st[mt][n][2 * r + 1]);
        }
  }

  // The state's global address of this thread's element pair (mt, n, r).
  __device__ float *statePair(float *base, int mt, int n, int r) const {
    const int g = lane >> 2, q = lane & 3;
    const int row = warp * kStateRows + 16 * mt + g + 8 * r;
    return base + static_cast<int64_t>(row) * a.vDim + col0 + 8 * n + 2 * q;
  }

  // One chunk: everything between the barrier after prepare() and the chunk's end. `st`
  // is the state (this warp's rows, fp32), updated.
  __device__ void chunk(int s, int c, float (&st)[kMTiles][kColTiles][4]) const {
    const int g = lane >> 2, q = lane & 3;
    const int t0 = c * kChunk, clen = min(kChunk, len - t0);
    const bf16 *qs = bf(stage(s) + L::stQ), *ks = bf(stage(s) + L::stK);
    const bf16 *vs = bf(stage(s) + L::stV);
    const float *betaS = fl(stage(s) + L::stBeta);
    const float *gam = fl(L::gam), *eg = fl(L::eg), *nq = fl(L::nq), *nk = fl(L::nk);
    const int row0 = 16 * warp + g; // this lane's token rows: row0 and row0 + 8
    float gamT[2], betaT[2], nqT[2], nkT[2], egT[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      gamT[r] = gam[row0 + 8 * r];
      betaT[r] = betaS[row0 + 8 * r];
      nqT[r] = nq[row0 + 8 * r];
      nkT[r] = nk[row0 + 8 * r];
      egT[r] = eg[row0 + 8 * r];
    }
    const float gamLast = gam[kChunk - 1]; // tokens past the sequence have g = 0

    // ---- G = K_w K^T and P = Q_w K^T over the causal 16-token blocks j <= warp.
    float gAcc[2 * kWarps][4] = {}, pAcc[2 * kWarps][4] = {};
#pragma unroll
    for (int k0 = 0; k0 < KD; k0 += 16) {
      uint32_t kA[4], qA[4];
      ldsmX4(kA, ks + (16 * warp + aRow(lane)) * L::kRow + k0 + aCol(lane));
      ldsmX4(qA, qs + (16 * warp + aRow(lane)) * L::kRow + k0 + aCol(lane));
#pragma unroll
      for (int j = 0; j < kWarps; ++j)
        if (j <= warp) {
          uint32_t b[4];
          ldsmX4(b, ks + (16 * j + bnRow(lane)) * L::kRow + k0 + bnCol(lane));
          mmaPair(gAcc[2 * j], gAcc[2 * j + 1], kA, b);
          mmaPair(pAcc[2 * j], pAcc[2 * j + 1], qA, b);
        }
    }

    // ---- The decayed, masked A (-A below the diagonal blocks to shared memory, the
    // diagonal block in fp32 for the inversion) and Aqk (in registers, as bf16 A
    // fragments: an m16n8 accumulator pair is an m16k16 A fragment).
    bf16 *aHi = bf(L::aHi), *aLo = bf(L::aLo);
    float *dg = fl(L::diag) + warp * 16 * L::dRow;
    uint32_t pqHi[kWarps][4] = {}, pqLo[kWarps][4] = {};
#pragma unroll
    for (int j = 0; j < kWarps; ++j)
      if (j <= warp) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int tile = 2 * j + half, u0 = 8 * tile + 2 * q;
          float av[4], pv[4];
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int r = e >> 1, t = row0 + 8 * r, u = u0 + (e & 1);
            const float decay = expf(gamT[r] - gam[u]);
            const float common = nk[u] * decay;
            av[e] = u < t ? gAcc[tile][e] * betaT[r] * nkT[r] * common : 0.0f;
            pv[e] = u <= t ? pAcc[tile][e] * a.scale * nqT[r] * common : 0.0f;
          }
          if (j < warp) {
#pragma unroll
            for (int r = 0; r < 2; ++r) {
              const int off = (row0 + 8 * r) * L::aRow + u0;
              storeSplit(aHi + off, aLo + off, -av[2 * r], -av[2 * r + 1]);
            }
          } else {
#pragma unroll
            for (int e = 0; e < 4; ++e)
              dg[(g + 8 * (e >> 1)) * L::dRow + 8 * half + 2 * q + (e & 1)] = av[e];
          }
          float ph[4];
#pragma unroll
          for (int e = 0; e < 4; ++e)
            ph[e] = bf16Round(pv[e]);
          pqHi[j][2 * half] = packBf16(ph[0], ph[1]);
          pqHi[j][2 * half + 1] = packBf16(ph[2], ph[3]);
          pqLo[j][2 * half] = packBf16(pv[0] - ph[0], pv[1] - ph[1]);
          pqLo[j][2 * half + 1] = packBf16(pv[2] - ph[2], pv[3] - ph[3]);
        }
      }

    // ---- K_w S and Q_w S (S split into bf16 parts: two mma a product).
    float ksAcc[kColTiles][4] = {}, qsAcc[kColTiles][4] = {};
    {
      const bf16 *sHi = bf(L::sHi), *sLo = bf(L::sLo);
#pragma unroll
      for (int k0 = 0; k0 < KD; k0 += 16) {
        uint32_t kA[4], qA[4];
        ldsmX4(kA, ks + (16 * warp + aRow(lane)) * L::kRow + k0 + aCol(lane));
        ldsmX4(qA, qs + (16 * warp + aRow(lane)) * L::kRow + k0 + aCol(lane));
#pragma unroll
        for (int p = 0; p < kColTiles / 2; ++p) {
          uint32_t bh[4], bl[4];
          const int off = (k0 + btRow(lane)) * L::vRow + 16 * p + btCol(lane);
          ldsmX4T(bh, sHi + off);
          ldsmX4T(bl, sLo + off);
          mmaSplitB(ksAcc[2 * p], ksAcc[2 * p + 1], kA, bh, bl);
          mmaSplitB(qsAcc[2 * p], qsAcc[2 * p + 1], qA, bh, bl);
        }
      }
    }
    // The right-hand side R and the outputs' inter-chunk part.
    float racc[kColTiles][4], oacc[kColTiles][4];
#pragma unroll
    for (int n = 0; n < kColTiles; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1;
        const float v = __bfloat162float(vs[(row0 + 8 * r) * L::vRow + 8 * n + 2 * q + (e & 1)]);
        racc[n][e] = betaT[r] * (v - egT[r] * nkT[r] * ksAcc[n][e]);
        oacc[n][e] = a.scale * nqT[r] * egT[r] * qsAcc[n][e];
      }

    // ---- D_w^-1 = (I + A_ww)^-1 by forward substitution: lane c (and c + 16, the same
    // work) solves for column c, x_i = [i == c] - sum_{u<i} A_ww[i][u] x_u.
    __syncwarp();
    uint32_t tAHi[4], tALo[4];
    {
      const int cc = lane & 15;
      float x[16];
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        float acc = i == cc ? 1.0f : 0.0f;
#pragma unroll
        for (int u = 0; u < i; ++u)
          acc -= dg[i * L::dRow + u] * x[u];
        x[i] = acc;
      }
      bf16 *tHi = bf(L::tHi) + warp * 16 * L::tRow, *tLo = bf(L::tLo) + warp * 16 * L::tRow;
      if (lane < 16)
#pragma unroll
        for (int i = 0; i < 16; ++i) {
          const bf16 hi = __float2bfloat16_rn(x[i]);
          tHi[i * L::tRow + cc] = hi;
          tLo[i * L::tRow + cc] = __float2bfloat16_rn(x[i] - __bfloat162float(hi));
        }
      __syncwarp();
      ldsmX4(tAHi, tHi + aRow(lane) * L::tRow + aCol(lane));
      ldsmX4(tALo, tLo + aRow(lane) * L::tRow + aCol(lane));
    }

    // ---- The blocked solve: step s finishes U_s (warp s), then warps w > s subtract
    // A_ws U_s from their right-hand sides.
    bf16 *uHi = bf(L::uHi), *uLo = bf(L::uLo), *wHi = bf(L::wHi), *wLo = bf(L::wLo);
#pragma unroll 1
    for (int step = 0; step < kWarps; ++step) {
      if (warp == step) {
        // R_w (complete) as a B operand: through this warp's U rows.
#pragma unroll
        for (int n = 0; n < kColTiles; ++n)
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const int off = (row0 + 8 * r) * L::vRow + 8 * n + 2 * q;
            storeSplit(uHi + off, uLo + off, racc[n][2 * r], racc[n][2 * r + 1]);
          }
        __syncwarp();
        float u[kColTiles][4] = {};
#pragma unroll
        for (int p = 0; p < kColTiles / 2; ++p) {
          uint32_t bh[4], bl[4];
          const int off = (16 * warp + btRow(lane)) * L::vRow + 16 * p + btCol(lane);
          ldsmX4T(bh, uHi + off);
          ldsmX4T(bl, uLo + off);
          mmaSplit(u[2 * p], u[2 * p + 1], tAHi, tALo, bh, bl);
        }
        __syncwarp(); // every lane has loaded R before U overwrites it
        float wt[2];
#pragma unroll
        for (int r = 0; r < 2; ++r)
          wt[r] = expf(gamLast - gamT[r]) * nkT[r];
#pragma unroll
        for (int n = 0; n < kColTiles; ++n)
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const int off = (row0 + 8 * r) * L::vRow + 8 * n + 2 * q;
            storeSplit(uHi + off, uLo + off, u[n][2 * r], u[n][2 * r + 1]);
            storeSplit(wHi + off, wLo + off, wt[r] * u[n][2 * r], wt[r] * u[n][2 * r + 1]);
          }
      }
      __syncthreads(); // U_step (and W_step) are complete
      if (warp > step) {
        uint32_t ah[4], al[4];
        const int aOff = (16 * warp + aRow(lane)) * L::aRow + 16 * step + aCol(lane);
        ldsmX4(ah, aHi + aOff);
        ldsmX4(al, aLo + aOff);
#pragma unroll
        for (int p = 0; p < kColTiles / 2; ++p) {
          uint32_t bh[4], bl[4];
          const int off = (16 * step + btRow(lane)) * L::vRow + 16 * p + btCol(lane);
          ldsmX4T(bh, uHi + off);
          ldsmX4T(bl, uLo + off);
          mmaSplit(racc[2 * p], racc[2 * p + 1], ah, al, bh, bl);
        }
      }
    }

    // ---- Outputs: oacc += Aqk_wj U_j over j <= warp; rows past the sequence not written.
#pragma unroll
    for (int j = 0; j < kWarps; ++j)
      if (j <= warp) {
#pragma unroll
        for (int p = 0; p < kColTiles / 2; ++p) {
          uint32_t bh[4], bl[4];
          const int off = (16 * j + btRow(lane)) * L::vRow + 16 * p + btCol(lane);
          ldsmX4T(bh, uHi + off);
          ldsmX4T(bl, uLo + off);
          mmaSplit(oacc[2 * p], oacc[2 * p + 1], pqHi[j], pqLo[j], bh, bl);
        }
      }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int t = row0 + 8 * r;
      if (t < clen) {
        bf16 *o = static_cast<bf16 *>(a.out) +
                  ((tok0 + t0 + t) * a.vHeads + h) * a.vDim + col0 + 2 * q;
#pragma unroll
        for (int n = 0; n < kColTiles; ++n)
          *reinterpret_cast<uint32_t *>(o + 8 * n) = packBf16(oacc[n][2 * r], oacc[n][2 * r + 1]);
      }
    }

    // ---- State: S = exp(gamma_last) S + K^T W over the chunk's 16-token blocks (K^T
    // from the k tile by transposed loads; k is bf16, so two mma a product).
    const float decay = expf(gamLast);
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int n = 0; n < kColTiles; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          st[mt][n][e] *= decay;
#pragma unroll
    for (int j = 0; j < kWarps; ++j)
      if (16 * j < clen) {
        uint32_t kT[kMTiles][4];
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt)
          ldsmX4T(kT[mt], ks + (16 * j + atRow(lane)) * L::kRow + warp * kStateRows +
                              16 * mt + atCol(lane));
#pragma unroll
        for (int p = 0; p < kColTiles / 2; ++p) {
          uint32_t bh[4], bl[4];
          const int off = (16 * j + btRow(lane)) * L::vRow + 16 * p + btCol(lane);
          ldsmX4T(bh, wHi + off);
          ldsmX4T(bl, wLo + off);
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt) {
            mmaSplitB(st[mt][2 * p], st[mt][2 * p + 1], kT[mt], bh, bl);
          }
        }
      }
  }
};

// One CTA per (value head, sequence, 32 value columns), walking the sequence chunk by
// chunk with the next chunk's q, k, v in flight (cp.async, two stages); the slice of the
// state lives in registers (fp32) from the first chunk to the last, read from the slot
// before and written back after. Three barriers a chunk plus the solve's four. The
// kernel's body, on the CTA's dynamic shared memory `smem` (a parameter so that the host
// emulation can run it on a buffer of its own).
template <int KD>
__device__ __forceinline__ void gdnChunkPrefillCta(const GdnChunkArgs &a, char *smem) {
  const int h = blockIdx.x, b = blockIdx.y;
  const int slot = a.indices ? a.indices[b] : b;
  if (slot < 0 || slot >= a.numSlots)
    return; // padding: nothing read or written
  const int begin = a.cuSeqlens[b], end = a.cuSeqlens[b + 1];
  if (end <= begin)
    return; // no tokens: the state stays as it is
  using C = GdnChunk<KD>;
  const C k{a,
            smem,
            h,
            h / (a.vHeads / a.kHeads),
            static_cast<int>(blockIdx.z) * kSlice,
            static_cast<int>(threadIdx.x & 31),
            static_cast<int>(threadIdx.x >> 5),
            begin,
            end - begin};
  const int chunks = (k.len + kChunk - 1) / kChunk;
  k.issueChunk(0, 0);
  k.storeScalar(0, k.loadScalar(0));
  float *state = a.state + (static_cast<int64_t>(slot) * a.vHeads + h) * KD * a.vDim;
  float st[C::kMTiles][kColTiles][4];
#pragma unroll
  for (int mt = 0; mt < C::kMTiles; ++mt)
#pragma unroll
    for (int n = 0; n < kColTiles; ++n)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float2 v = *reinterpret_cast<const float2 *>(k.statePair(state, mt, n, r));
        st[mt][n][2 * r] = v.x;
        st[mt][n][2 * r + 1] = v.y;
      }
  k.publishState(st);
#pragma unroll 1
  for (int c = 0; c < chunks; ++c) {
    const int s = c & 1;
    const bool next = c + 1 < chunks;
    cpAsyncWait<0>();
    // Chunk c's q, k, v, g, beta and the state's parts are in; chunk c - 1 is done with
    // the other stage and every per-chunk buffer.
    __syncthreads();
    float nextScalar = 0.0f;
    if (next) {
      k.issueChunk(s ^ 1, c + 1);
      nextScalar = k.loadScalar(c + 1); // a register until the chunk's end
    }
    k.prepare(s);
    __syncthreads(); // norms and decays are complete
    k.chunk(s, c, st);
    if (next) {
      k.storeScalar(s ^ 1, nextScalar);
      k.publishState(st); // every warp read the old parts before the solve's first barrier
    }
  }
#pragma unroll
  for (int mt = 0; mt < C::kMTiles; ++mt)
#pragma unroll
    for (int n = 0; n < kColTiles; ++n)
#pragma unroll
      for (int r = 0; r < 2; ++r)
        *reinterpret_cast<float2 *>(k.statePair(state, mt, n, r)) =
            make_float2(st[mt][n][2 * r], st[mt][n][2 * r + 1]);
}

template <int KD>
__global__ void __launch_bounds__(kThreads) gdnChunkPrefillKernel(GdnChunkArgs a) {
  extern __shared__ __align__(16) char smem[];
  gdnChunkPrefillCta<KD>(a, smem);
}

} // namespace
} // namespace kiln::kernels::gdn

#endif
