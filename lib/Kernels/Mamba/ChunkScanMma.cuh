// The device code of ssm_chunk_scan on tensor cores (sm_80+, bf16 activations, head_dim x
// state_size in the instantiated set; ChunkScanMma.cu launches it). The same SSD math as
// the fp32 kernel in PrefillScan.cu, with every product over a chunk an mma.sync m16n8k16
// (bf16 in, fp32 accumulate):
//   CB      = C . B^T                     (exact: C and B are bf16)
//   y       = exp(cum_t) (C . S^T) + G . X (G = decayed CB, masked causal)
//   S'      = exp(cum_last) S + (w o X)^T . B
// Operands that are fp32 (S, G, w o X) are split into a bf16 high part and a bf16 low
// part (v = hi + lo to ~16 bits) and multiplied twice, so each product carries ~2^-17
// relative error instead of bf16's 2^-9; the state itself stays fp32 in registers for the
// whole sequence. See docs/kernels-mamba.md for the design and measurements.
//
// A header so that the same code also runs on the host: test/Kernels/Mamba/
// ChunkScanEmulationTest.cpp runs it a CTA at a time, threads as fibers, with cp.async,
// ldmatrix, mma.sync, shuffles and barriers emulated (CtaEmulator.h), to check its
// fragment layouts, barriers and padding logic in CI, where there is no GPU.
#ifndef KILN_LIB_KERNELS_MAMBA_CHUNKSCANMMA_CUH
#define KILN_LIB_KERNELS_MAMBA_CHUNKSCANMMA_CUH

// The device primitives used below (cp.async, ldmatrix, mma.sync, pack2): under nvcc
// those of Decode/DecodeDevice.cuh; on the host the CTA emulator, included first,
// defines the same names in kiln::decode together with the CUDA built-ins.
#if defined(__CUDACC__)
#include "../Decode/DecodeDevice.cuh"
#elif !defined(KILN_CTA_EMULATION)
#error "device code: compile with nvcc, or include test/Kernels/Common/CtaEmulator.h first"
#endif
#include "../Common/LdmatrixLanes.cuh"
#include "../Common/WarpScan.cuh"
#include "MambaCommon.cuh"
#include "MambaInternal.h"

namespace kiln::kernels::mamba {
// Internal linkage, as when this code lived in ChunkScanMma.cu: every includer has its
// own copy, so the emulation's host instantiations of the kernel never meet the .cu's
// launch stubs of the same names at link time.
namespace {

using decode::cpAsync16;
using decode::cpAsyncCommit;
using decode::cpAsyncWait;
using decode::ldsmX4;
using decode::ldsmX4T;
using decode::mma16816;

constexpr int kChunk = 64; // tokens a chunk
constexpr int kWarps = 4;
constexpr int kMmaThreads = kWarps * 32;

// Shared memory of one CTA, in bytes. bf16 rows are padded by 8 elements (16 bytes) so
// that ldmatrix's 8 row addresses fall in 8 distinct 16-byte bank groups.
template <int P, int N> struct MmaScanSmem {
  static constexpr int xRow = P + 8; // X[t][p], Xw hi/lo [u][p]
  static constexpr int nRow = N + 8; // B[t][n], C[t][n], S hi/lo [p][n]
  static constexpr int xTile = kChunk * xRow * 2;
  static constexpr int nTile = kChunk * nRow * 2;
  // One of two stages of a chunk: X, B, C (cp.async) and the chunk's step sizes, log
  // decays, update weights and key factors (fp32, written by warp 0 while the chunk
  // before computes).
  static constexpr int stageX = 0, stageB = xTile, stageC = stageB + nTile,
                       cum = stageC + nTile, dts = cum + kChunk * 4, w = dts + kChunk * 4,
                       keyF = w + kChunk * 4, stageBytes = keyF + kChunk * 4;
  static constexpr int sHi = 2 * stageBytes, sLo = sHi + P * nRow * 2;
  static constexpr int xwHi = sLo + P * nRow * 2, xwLo = xwHi + xTile;
  static constexpr int bytes = xwLo + xTile;
};

// The state columns' n8 tiles each warp owns in the update, in warp order. The update is
// the one evenly divisible part of a chunk: the causal C.B^T and G.X work grows with the
// warp index (warp w owns token rows 16w..16w+15), so the warps with fewer causal tiles
// take more state columns and all reach the chunk's last barrier at about the same time.
// 32 x 128: outputs 88/112/136/160 mma + 16 mma an n8 column tile -> 184/192/184/192
// (G's exp work is about even: 10/12/14/16 expf a lane; warp 0, lighter, also computes
// the next chunk's decays). 32 x 64: outputs 48/64/80/96 + 16 a tile -> 96/96/112/112.
// 80 x 128 stays even: its registers are full (a warp with more tiles needs their
// accumulators).
struct StateSplit {
  int tiles[kWarps];
};
template <int P, int N> constexpr StateSplit stateSplit() {
  if (P == 32 && N == 128)
    return {{6, 5, 3, 2}};
  if (P == 32 && N == 64)
    return {{3, 2, 2, 1}};
  return {{N / 32, N / 32, N / 32, N / 32}};
}
constexpr int cmax(int x, int y) { return x > y ? x : y; }

// Four adjacent bf16 values, one 8-byte shared-memory access.
struct alignas(8) Bf16x4 {
  __nv_bfloat162 a, b;
};

__device__ __forceinline__ uint32_t packBf16(float lo, float hi) {
  return decode::pack2<__nv_bfloat16>(lo, hi);
}

// v = hi + lo with both bf16: hi is v rounded, lo the rounded remainder.
__device__ __forceinline__ void splitBf16(float v, float &hi, float &lo) {
  hi = __bfloat162float(__float2bfloat16_rn(v));
  lo = v - hi;
}

// Two adjacent values as their bf16 high parts at hi and their remainders at lo.
__device__ __forceinline__ void storeSplitPair(__nv_bfloat16 *hi, __nv_bfloat16 *lo, float v0,
                                               float v1) {
  float h0, l0, h1, l1;
  splitBf16(v0, h0, l0);
  splitBf16(v1, h1, l1);
  *reinterpret_cast<uint32_t *>(hi) = packBf16(h0, h1);
  *reinterpret_cast<uint32_t *>(lo) = packBf16(l0, l1);
}

// acc[j] and acc[j + 1] += a . b[j / 2]'s two n8 tiles, for every pair of accumulator
// tiles: independent accumulators back to back.
template <int Tiles>
__device__ __forceinline__ void mmaTilePairs(float (&acc)[Tiles][4], const uint32_t (&a)[4],
                                             const uint32_t (&b)[Tiles / 2][4]) {
#pragma unroll
  for (int j = 0; j < Tiles; j += 2) {
    mma16816<__nv_bfloat16>(acc[j], a, b[j / 2][0], b[j / 2][1]);
    mma16816<__nv_bfloat16>(acc[j + 1], a, b[j / 2][2], b[j / 2][3]);
  }
}

// P: the head rows of one CTA's slice; N: the state size.
template <int P, int N> struct ChunkScanMma {
  using L = MmaScanSmem<P, N>;
  static constexpr int kPTiles = P / 16; // 16-row tiles of the head rows
  // The state split as plain constants (device code cannot read a class-type constexpr).
  static constexpr int kT0 = stateSplit<P, N>().tiles[0], kT1 = stateSplit<P, N>().tiles[1],
                       kT2 = stateSplit<P, N>().tiles[2], kT3 = stateSplit<P, N>().tiles[3];
  static_assert(kT0 + kT1 + kT2 + kT3 == N / 8, "every state column tile owned by one warp");
  // Registers for the most tiles any warp owns; a warp uses the first wTiles() of them.
  static constexpr int kNWTiles = cmax(cmax(kT0, kT1), cmax(kT2, kT3));
  static constexpr int kCTiles = kChunk / 8; // n8 tiles of a chunk's CB row block
  // Two k steps' fragments of the outputs' state pass in flight: 36 more registers at 32
  // head rows; 80 rows (60 more) would not fit beside the state's 80.
  static constexpr bool kPipeline = P <= 32;

  const ChunkScanArgs &a;
  char *smem;
  int h, p0, lane, warp; // p0: the first head row of this CTA's slice

  __device__ __nv_bfloat16 *at(int offset) const {
    return reinterpret_cast<__nv_bfloat16 *>(smem + offset);
  }
  __device__ float *floats(int offset) const { return reinterpret_cast<float *>(smem + offset); }
  __device__ char *stage(int s) const { return smem + s * L::stageBytes; }
  // This warp's share of the state columns: wTiles() n8 tiles from column 8 wFirst().
  __device__ int wTiles() const {
    return warp == 0 ? kT0 : warp == 1 ? kT1 : warp == 2 ? kT2 : kT3;
  }
  __device__ int wFirst() const {
    return warp == 0 ? 0 : warp == 1 ? kT0 : warp == 2 ? kT0 + kT1 : kT0 + kT1 + kT2;
  }

  // Starts the asynchronous copy of the chunk at token t0 (rows past `end` zero-filled)
  // into stage s, and (warp 0) the loads of the chunk's raw dt, two tokens a lane, into
  // dt0/dt1: they are first used after this chunk's outputs, when they have landed.
  __device__ void issueChunk(int s, int t0, int end, int g, float &dt0, float &dt1) const {
    const auto *x = static_cast<const __nv_bfloat16 *>(a.x);
    const auto *bm = static_cast<const __nv_bfloat16 *>(a.B);
    const auto *cm = static_cast<const __nv_bfloat16 *>(a.C);
    __nv_bfloat16 *xs = reinterpret_cast<__nv_bfloat16 *>(stage(s) + L::stageX);
    __nv_bfloat16 *bs = reinterpret_cast<__nv_bfloat16 *>(stage(s) + L::stageB);
    __nv_bfloat16 *cs = reinterpret_cast<__nv_bfloat16 *>(stage(s) + L::stageC);
    constexpr int xVecs = P / 8, nVecs = N / 8;
    static_assert(kChunk * xVecs % kMmaThreads == 0 && kChunk * nVecs % kMmaThreads == 0,
                  "whole rounds of 16-byte pieces");
    // Fixed trip counts, kept rolled: unrolled, ptxas keeps every piece's 64-bit addresses
    // live at once (80 x 128 then spills).
#pragma unroll 1
    for (int k = 0; k < kChunk * xVecs / kMmaThreads; ++k) {
      const int i = threadIdx.x + k * kMmaThreads, r = i / xVecs, v = i % xVecs;
      const bool valid = t0 + r < end;
      const int64_t row = valid ? t0 + r : t0;
      cpAsync16(xs + r * L::xRow + v * 8, x + row * a.xToken + h * a.headDim + p0 + v * 8, valid);
    }
#pragma unroll 1
    for (int k = 0; k < kChunk * nVecs / kMmaThreads; ++k) {
      const int i = threadIdx.x + k * kMmaThreads, r = i / nVecs, v = i % nVecs;
      const bool valid = t0 + r < end;
      const int64_t row = valid ? t0 + r : t0;
      cpAsync16(bs + r * L::nRow + v * 8, bm + row * a.bToken + g * N + v * 8, valid);
      cpAsync16(cs + r * L::nRow + v * 8, cm + row * a.cToken + g * N + v * 8, valid);
    }
    cpAsyncCommit();
    if (warp == 0) {
      const auto *dt = static_cast<const __nv_bfloat16 *>(a.dt);
      const int t = t0 + 2 * lane;
      dt0 = t < end ? __bfloat162float(dt[int64_t(t) * a.dtToken + h]) : 0.0f;
      dt1 = t + 1 < end ? __bfloat162float(dt[int64_t(t + 1) * a.dtToken + h]) : 0.0f;
    }
  }

  // Step sizes, cumulative log decays and the state-update weights of the chunk in stage
  // st (warp 0; two tokens a lane, raw0/raw1 from issueChunk): dts[t], cum[t] =
  // sum_{u<=t} dts[u] A, w[u] = exp(cum_last - cum[u]) dts[u], and the key factors
  // keyF[u] = exp(cum[e(u)] - cum[u]) dts[u], e(u) the last token of u's 16-token block
  // (G's blocks below the diagonal: exp(cum_t - cum_u) = exp(cum_t - cum_e) exp(cum_e -
  // cum_u) with u <= e < t, both factors <= 1, so neither under- nor overflows where
  // their product does not). Padding tokens get dts = 0, so they neither decay nor
  // contribute.
  __device__ void chunkDecays(char *st, float raw0, float raw1, int len, float A,
                              float bias) const {
    float *cum = reinterpret_cast<float *>(st + L::cum);
    float *dts = reinterpret_cast<float *>(st + L::dts);
    float *w = reinterpret_cast<float *>(st + L::w);
    const int t = 2 * lane;
    const float d0 = t < len ? stepSize(raw0, bias, a.dtSoftplus, a.dtMin, a.dtMax) : 0.0f;
    const float d1 = t + 1 < len ? stepSize(raw1, bias, a.dtSoftplus, a.dtMin, a.dtMax) : 0.0f;
    const float a0 = d0 * A, a1 = d1 * A;
    float c0, c1;
    warpPairPrefix(a0, a1, lane, c0, c1);
    const float last = __shfl_sync(0xffffffffu, c1, 31);
    const float blockEnd = __shfl_sync(0xffffffffu, c1, lane | 7); // token 16 (t / 16) + 15
    float *keyF = reinterpret_cast<float *>(st + L::keyF);
    keyF[t] = expf(blockEnd - c0) * d0;
    keyF[t + 1] = expf(blockEnd - c1) * d1;
    cum[t] = c0;
    cum[t + 1] = c1;
    dts[t] = d0;
    dts[t + 1] = d1;
    w[t] = expf(last - c0) * d0;
    w[t + 1] = expf(last - c1) * d1;
  }

  // The update's left operand: w[u] x[u][p], split into bf16 high and low parts.
  __device__ void weightedInputs(const char *st) const {
    const __nv_bfloat16 *xs = reinterpret_cast<const __nv_bfloat16 *>(st + L::stageX);
    const float *w = reinterpret_cast<const float *>(st + L::w);
    __nv_bfloat16 *hi = at(L::xwHi), *lo = at(L::xwLo);
    // Four head rows (8 bytes) a piece, every load of the thread before its first store:
    // the compiler cannot move a shared load above a shared store it may alias, so a
    // load-compute-store loop would pay the load latency once a piece.
    constexpr int quads = P / 4, iters = kChunk * quads / kMmaThreads;
    static_assert(kChunk * quads % kMmaThreads == 0, "whole rounds of 4-row pieces");
    Bf16x4 xv[iters];
    float wv[iters];
#pragma unroll
    for (int k = 0; k < iters; ++k) {
      const int i = threadIdx.x + k * kMmaThreads, u = i / quads, p = 4 * (i % quads);
      xv[k] = *reinterpret_cast<const Bf16x4 *>(xs + u * L::xRow + p);
      wv[k] = w[u];
    }
#pragma unroll
    for (int k = 0; k < iters; ++k) {
      const int i = threadIdx.x + k * kMmaThreads, u = i / quads, p = 4 * (i % quads);
      float h[4], l[4];
      splitBf16(__low2float(xv[k].a) * wv[k], h[0], l[0]);
      splitBf16(__high2float(xv[k].a) * wv[k], h[1], l[1]);
      splitBf16(__low2float(xv[k].b) * wv[k], h[2], l[2]);
      splitBf16(__high2float(xv[k].b) * wv[k], h[3], l[3]);
      *reinterpret_cast<uint2 *>(hi + u * L::xRow + p) =
          make_uint2(packBf16(h[0], h[1]), packBf16(h[2], h[3]));
      *reinterpret_cast<uint2 *>(lo + u * L::xRow + p) =
          make_uint2(packBf16(l[0], l[1]), packBf16(l[2], l[3]));
    }
  }

  // The outputs of this warp's 16 tokens (rows 16 warp ..): the state's part and the
  // chunk's own part, then D x; rows past `len` are not stored.
  __device__ void outputs(const char *st, int t0, int len, float D) const {
    const __nv_bfloat16 *xs = reinterpret_cast<const __nv_bfloat16 *>(st + L::stageX);
    const __nv_bfloat16 *bs = reinterpret_cast<const __nv_bfloat16 *>(st + L::stageB);
    const __nv_bfloat16 *cs = reinterpret_cast<const __nv_bfloat16 *>(st + L::stageC);
    const __nv_bfloat16 *sHi = at(L::sHi), *sLo = at(L::sLo);
    const float *cum = reinterpret_cast<const float *>(st + L::cum);
    const float *dts = reinterpret_cast<const float *>(st + L::dts);
    const float *keyF = reinterpret_cast<const float *>(st + L::keyF);
    const int m0 = 16 * warp;
    float cb[kCTiles][4] = {};
    float y[P / 8][4] = {};
    // One pass over the state dimension: C's fragment feeds both C.B^T (the causal tiles
    // up to this warp's rows) and C.S^T.
    // The asm statements keep their order, so a load issued just before the mma that
    // needs it would stall the warp for the whole shared-memory latency. Every fragment
    // of a k step is loaded before its mma's, and where the registers allow (kPipeline)
    // one step ahead: step k + 1's loads are issued before step k's mma's and land while
    // they run, so only the first step waits on ldmatrix.
    struct Frags {
      uint32_t cf[4], bf[kCTiles / 2][4], hf[P / 16][4], lf[P / 16][4];
    };
    auto load = [&](Frags &f, int k0) {
      ldsmX4(f.cf, cs + (m0 + aRow(lane)) * L::nRow + k0 + aCol(lane));
#pragma unroll
      for (int j = 0; j < kCTiles; j += 2)
        if (j <= 2 * warp)
          ldsmX4(f.bf[j / 2], bs + (8 * j + bnRow(lane)) * L::nRow + k0 + bnCol(lane));
#pragma unroll
      for (int j = 0; j < P / 8; j += 2) {
        const int off = (8 * j + bnRow(lane)) * L::nRow + k0 + bnCol(lane);
        ldsmX4(f.hf[j / 2], sHi + off);
        ldsmX4(f.lf[j / 2], sLo + off);
      }
    };
    auto mmas = [&](const Frags &f) {
#pragma unroll
      for (int j = 0; j < kCTiles; j += 2) {
        if (j <= 2 * warp) {
          mma16816<__nv_bfloat16>(cb[j], f.cf, f.bf[j / 2][0], f.bf[j / 2][1]);
          mma16816<__nv_bfloat16>(cb[j + 1], f.cf, f.bf[j / 2][2], f.bf[j / 2][3]);
        }
      }
      mmaTilePairs(y, f.cf, f.hf);
      mmaTilePairs(y, f.cf, f.lf);
    };
    if constexpr (kPipeline) {
      Frags f[2];
      load(f[0], 0);
#pragma unroll
      for (int ks = 0; ks < N / 16; ++ks) {
        if (ks + 1 < N / 16)
          load(f[(ks + 1) & 1], 16 * (ks + 1));
        mmas(f[ks & 1]);
      }
    } else {
#pragma unroll
      for (int k0 = 0; k0 < N; k0 += 16) {
        Frags f;
        load(f, k0);
        mmas(f);
      }
    }
    const int g = lane >> 2, c = lane & 3;
    const int r0 = m0 + g, r1 = r0 + 8;
    const float cum0 = cum[r0], cum1 = cum[r1];
    const float e0 = expf(cum0), e1 = expf(cum1);
#pragma unroll
    for (int j = 0; j < P / 8; ++j) {
      y[j][0] *= e0;
      y[j][1] *= e0;
      y[j][2] *= e1;
      y[j][3] *= e1;
    }
    // G = CB exp(cum_t - cum_u) dt_u below the diagonal, times X, 16 keys at a time.
#pragma unroll
    for (int kk = 0; kk < kCTiles / 2; ++kk) {
      if (kk > warp)
        continue;
      // X's fragments first: they land while G's exp/split/pack math runs (they used to be
      // loaded after it, right before the mma's that read them).
      uint32_t xf[P / 16][4];
#pragma unroll
      for (int j = 0; j < P / 8; j += 2)
        ldsmX4T(xf[j / 2], xs + (16 * kk + btRow(lane)) * L::xRow + 8 * j + btCol(lane));
      // Below the diagonal block, 2 exp a lane (its rows' factors) instead of 8; the
      // keys' factors come from chunkDecays.
      const bool below = kk < warp;
      float q0 = 0.0f, q1 = 0.0f;
      if (below) {
        const float ce = cum[16 * kk + 15];
        q0 = expf(cum0 - ce);
        q1 = expf(cum1 - ce);
      }
      uint32_t ghi[4], glo[4];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int j = 2 * kk + half, u0 = 8 * j + 2 * c;
        float v[4];
        if (below) {
#pragma unroll
          for (int r = 0; r < 4; ++r)
            v[r] = cb[j][r] * (r < 2 ? q0 : q1) * keyF[u0 + (r & 1)];
        } else {
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            const int t = r < 2 ? r0 : r1, u = u0 + (r & 1);
            v[r] = u <= t ? cb[j][r] * expf(cum[t] - cum[u]) * dts[u] : 0.0f;
          }
        }
        float h[4], l[4];
#pragma unroll
        for (int r = 0; r < 4; ++r)
          splitBf16(v[r], h[r], l[r]);
        // Accumulator tiles j (keys 0-7) and j+1 (keys 8-15) are the A fragment's halves.
        ghi[2 * half] = packBf16(h[0], h[1]);
        ghi[2 * half + 1] = packBf16(h[2], h[3]);
        glo[2 * half] = packBf16(l[0], l[1]);
        glo[2 * half + 1] = packBf16(l[2], l[3]);
      }
      mmaTilePairs(y, ghi, xf);
      mmaTilePairs(y, glo, xf);
    }
    auto *out = static_cast<__nv_bfloat16 *>(a.out);
#pragma unroll
    for (int j = 0; j < P / 8; ++j) {
      const int p = 8 * j + 2 * c;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int t = half ? r1 : r0;
        if (t >= len)
          continue;
        const __nv_bfloat162 xv = *reinterpret_cast<const __nv_bfloat162 *>(xs + t * L::xRow + p);
        const float v0 = y[j][2 * half] + D * __low2float(xv);
        const float v1 = y[j][2 * half + 1] + D * __high2float(xv);
        *reinterpret_cast<uint32_t *>(out + (t0 + t) * a.yToken + h * a.headDim + p0 + p) =
            packBf16(v0, v1);
      }
    }
  }

  // S = exp(cum_last) S + (w o X)^T B for this warp's state columns (wTiles() n8 tiles
  // from 8 wFirst()), every head row. One instance a tile count, so that a warp with
  // fewer tiles neither branches nor issues predicated-off mma's per tile.
  __device__ void updateState(float (&s)[kPTiles][kNWTiles][4], const char *st) const {
    if constexpr (kT0 == kT1 && kT1 == kT2 && kT2 == kT3) {
      updateTiles<kT0>(s, st, kT0 * warp);
    } else {
      switch (warp) {
      case 0:
        updateTiles<kT0>(s, st, 0);
        break;
      case 1:
        updateTiles<kT1>(s, st, kT0);
        break;
      case 2:
        updateTiles<kT2>(s, st, kT0 + kT1);
        break;
      default:
        updateTiles<kT3>(s, st, kT0 + kT1 + kT2);
      }
    }
  }
  template <int NT>
  __device__ void updateTiles(float (&s)[kPTiles][kNWTiles][4], const char *st, int first) const {
    const __nv_bfloat16 *bs = reinterpret_cast<const __nv_bfloat16 *>(st + L::stageB);
    const __nv_bfloat16 *xwHi = at(L::xwHi), *xwLo = at(L::xwLo);
    const float decay = expf(reinterpret_cast<const float *>(st + L::cum)[kChunk - 1]);
    const int n0 = 8 * first;
#pragma unroll
    for (int mi = 0; mi < kPTiles; ++mi)
#pragma unroll
      for (int nj = 0; nj < NT; ++nj)
#pragma unroll
        for (int r = 0; r < 4; ++r)
          s[mi][nj][r] *= decay;
    // A k step's fragments: B's (two n8 tiles a load; a warp with an odd count reads 8
    // columns it does not use, the next warp's or the row's padding after the last
    // column) and the weighted inputs' hi and lo parts. Loaded one step ahead where the
    // registers allow (kPipeline), as in outputs.
    struct Frags {
      uint32_t bf[NT][2], ahi[kPTiles][4], alo[kPTiles][4];
    };
    auto load = [&](Frags &f, int k0) {
#pragma unroll
      for (int nj = 0; nj < NT; nj += 2) {
        uint32_t q[4];
        ldsmX4T(q, bs + (k0 + btRow(lane)) * L::nRow + n0 + 8 * nj + btCol(lane));
        f.bf[nj][0] = q[0];
        f.bf[nj][1] = q[1];
        if (nj + 1 < NT) {
          f.bf[nj + 1][0] = q[2];
          f.bf[nj + 1][1] = q[3];
        }
      }
#pragma unroll
      for (int mi = 0; mi < kPTiles; ++mi) {
        const int off = (k0 + atRow(lane)) * L::xRow + 16 * mi + atCol(lane);
        ldsmX4T(f.ahi[mi], xwHi + off);
        ldsmX4T(f.alo[mi], xwLo + off);
      }
    };
    // hi then lo: an accumulator's two mma's kPTiles * NT apart.
    auto mmas = [&](const Frags &f) {
#pragma unroll
      for (int mi = 0; mi < kPTiles; ++mi)
#pragma unroll
        for (int nj = 0; nj < NT; ++nj)
          mma16816<__nv_bfloat16>(s[mi][nj], f.ahi[mi], f.bf[nj][0], f.bf[nj][1]);
#pragma unroll
      for (int mi = 0; mi < kPTiles; ++mi)
#pragma unroll
        for (int nj = 0; nj < NT; ++nj)
          mma16816<__nv_bfloat16>(s[mi][nj], f.alo[mi], f.bf[nj][0], f.bf[nj][1]);
    };
    if constexpr (kPipeline) {
      Frags f[2];
      load(f[0], 0);
#pragma unroll
      for (int ks = 0; ks < kChunk / 16; ++ks) {
        if (ks + 1 < kChunk / 16)
          load(f[(ks + 1) & 1], 16 * (ks + 1));
        mmas(f[ks & 1]);
      }
    } else {
#pragma unroll
      for (int k0 = 0; k0 < kChunk; k0 += 16) {
        Frags f;
        load(f, k0);
        mmas(f);
      }
    }
  }

  // The state's bf16 high and low parts, the right operand of the next chunk's C.S^T.
  __device__ void publishState(const float (&s)[kPTiles][kNWTiles][4]) const {
    __nv_bfloat16 *hi = at(L::sHi), *lo = at(L::sLo);
    // Registers 2k and 2k + 1 are adjacent columns of one row: stored as a pair.
    forEachState([&](int mi, int nj, int r, int p, int n) {
      if (r % 2 == 0)
        storeSplitPair(hi + p * L::nRow + n, lo + p * L::nRow + n, s[mi][nj][r], s[mi][nj][r + 1]);
    });
  }

  // Visits this thread's state elements (head row p, state column n, register r).
  template <typename F> __device__ void forEachState(F &&f) const {
    const int g = lane >> 2, c = lane & 3;
    const int nt = wTiles(), n0 = 8 * wFirst();
#pragma unroll
    for (int mi = 0; mi < kPTiles; ++mi)
#pragma unroll
      for (int nj = 0; nj < kNWTiles; ++nj)
        if (nj < nt)
#pragma unroll
          for (int r = 0; r < 4; ++r)
            f(mi, nj, r, 16 * mi + g + (r >> 1) * 8, n0 + 8 * nj + 2 * c + (r & 1));
  }
};

// One CTA per (head, sequence, slice of P head rows), walking the sequence chunk by chunk
// with the next chunk's loads in flight; the slice's state lives in registers (fp32) from
// the first chunk to the last. The kernel's body, on the CTA's dynamic shared memory
// `smem` (a parameter so that the host emulation can run it on a buffer of its own).
template <int P, int N, typename StateT>
__device__ __forceinline__ void chunkScanMmaCta(const ChunkScanArgs &a,
                                                const int32_t *__restrict__ cuSeqlens,
                                                char *smem) {
  const int h = blockIdx.x, b = blockIdx.y;
  const int slot = a.indices ? a.indices[b] : b;
  if (slot < 0 || slot >= a.numSlots)
    return;
  using K = ChunkScanMma<P, N>;
  const int p0 = static_cast<int>(blockIdx.z) * P;
  const K k{a, smem, h, p0, static_cast<int>(threadIdx.x & 31), static_cast<int>(threadIdx.x >> 5)};
  const int g = h / a.headsPerGroup;
  const float A = a.aIsLog ? -expf(a.A[h]) : a.A[h];
  const float D = a.D ? a.D[h] : 0.0f;
  const float bias = a.dtBias ? a.dtBias[h] : 0.0f;
  const int begin = cuSeqlens[b], end = cuSeqlens[b + 1];
  const int chunks = (end - begin + kChunk - 1) / kChunk;
  float dt0 = 0.0f, dt1 = 0.0f; // warp 0: the next chunk's raw dt, two tokens a lane
  if (chunks > 0) {
    k.issueChunk(0, begin, end, g, dt0, dt1);
    if (k.warp == 0)
      k.chunkDecays(k.stage(0), dt0, dt1, min(kChunk, end - begin), A, bias);
  }
  StateT *state = static_cast<StateT *>(a.state) + slot * a.stSlot + h * a.stHead + p0 * a.stDim;
  float s[K::kPTiles][K::kNWTiles][4];
  k.forEachState(
      [&](int mi, int nj, int r, int p, int n) { s[mi][nj][r] = toFloat(state[p * a.stDim + n]); });
  // Two barriers a chunk. Between them every warp's even share: the next chunk's loads,
  // the state's bf16 parts (the state after chunk ci - 1: every warp's outputs of chunk
  // ci - 1 read the old ones before the top barrier) and the weighted inputs.
  for (int ci = 0; ci < chunks; ++ci) {
    const int cur = ci & 1, t0 = begin + ci * kChunk, len = min(kChunk, end - t0);
    cpAsyncWait<0>();
    // Chunk ci landed and its decays are written; chunk ci - 1 is done with the other
    // stage, the state's parts and the weighted inputs.
    __syncthreads();
    const bool next = ci + 1 < chunks;
    if (next)
      k.issueChunk(cur ^ 1, t0 + kChunk, end, g, dt0, dt1);
    k.publishState(s);
    const char *st = k.stage(cur);
    k.weightedInputs(st);
    __syncthreads(); // the weighted inputs and the state's parts are complete
    // Outputs and update back to back, before the barrier that ends the chunk: a warp
    // with fewer causal tiles owns more state columns (stateSplit), so the warps arrive
    // at the barrier together.
    k.outputs(st, t0, len, D);
    k.updateState(s, st);
    // Warp 0, the one with the fewest causal tiles, prepares the next chunk's decays in
    // the other stage (read last by chunk ci - 1).
    if (next && k.warp == 0)
      k.chunkDecays(k.stage(cur ^ 1), dt0, dt1, min(kChunk, end - t0 - kChunk), A, bias);
  }
  k.forEachState([&](int mi, int nj, int r, int p, int n) {
    state[p * a.stDim + n] = fromFloat<StateT>(s[mi][nj][r]);
  });
}

template <int P, int N, typename StateT>
__global__ void __launch_bounds__(kMmaThreads)
    ssmChunkScanMmaKernel(ChunkScanArgs a, const int32_t *__restrict__ cuSeqlens) {
  extern __shared__ __align__(16) char smem[];
  chunkScanMmaCta<P, N, StateT>(a, cuSeqlens, smem);
}

} // namespace
} // namespace kiln::kernels::mamba

#endif
