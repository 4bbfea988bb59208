// The skinny GEMM's device code shared by its kernels (SkinnyGemm.cu): the loads, the
// warps' sums and the stores of both forms, and the tensor-core form's register kernel
// as one CTA's function. A header so that the same code also runs on the host under the
// CTA emulator (test/Kernels/Common/CtaEmulator.h), which checks the tensor-core form's
// lanes, rows and SwiGLU epilogue in CI, where there is no GPU.
#ifndef KILN_LIB_KERNELS_GRAPH_SKINNYGEMMDEVICE_CUH
#define KILN_LIB_KERNELS_GRAPH_SKINNYGEMMDEVICE_CUH

#if defined(__CUDACC__)
#include "../Common/Mma.cuh"
#elif !defined(KILN_CTA_EMULATION)
#error "device code: compile with nvcc, or include test/Kernels/Common/CtaEmulator.h first"
#endif
#include "../Common/Pdl.cuh"
#include "SkinnyGemm.h"
#include "Swiglu.cuh"

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace kiln::graph::skinny {
// Internal linkage: the emulation's host instantiations never meet the .cu's.
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kChunkElems = 8; // bf16 in 16 bytes

// 16 bytes of weights, which no kernel of a step writes: the non-coherent path, not kept
// in the L1 (each byte is read once).
__device__ __forceinline__ uint4 loadStreaming(const uint16_t *p) {
#ifdef KILN_CTA_EMULATION
  return *reinterpret_cast<const uint4 *>(p);
#else
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
#endif
}

// 16 bytes of the GEMM's input x. Plain loads: it was written by the kernel before,
// which ran beside this one until the wait (the non-coherent path is for data read-only
// for a kernel's life).
__device__ __forceinline__ uint4 loadInput(const uint16_t *p) {
  return *reinterpret_cast<const uint4 *>(p);
}

// This CTA's weight rows into the L2, one bulk prefetch a row (sm_90+; a no-op below).
__device__ __forceinline__ void prefetchRowsToL2(const uint16_t *w, int64_t ldw, int64_t k,
                                                 int features) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (static_cast<int>(threadIdx.x) < features) {
    const uint16_t *row = w + threadIdx.x * ldw;
    const uint32_t bytes = static_cast<uint32_t>(k * 2);
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(row), "r"(bytes)
                 : "memory");
  }
#endif
}

// The warps' partial sums of one output (warpStride floats apart in shared memory) in
// warp order, the bias in fp32, one rounding to bf16: the last step of both forms.
__device__ __forceinline__ float roundedSum(const float *partials, int warpStride,
                                            const uint16_t *bias, int64_t feature) {
  float sum = partials[0];
#pragma unroll
  for (int i = 1; i < kWarps; ++i)
    sum += partials[i * warpStride];
  if (bias)
    sum += __uint_as_float(static_cast<uint32_t>(bias[feature]) << 16);
  return __bfloat162float(__float2bfloat16_rn(sum));
}

__device__ __forceinline__ void storeSum(const SkinnyGemmArgs &a, const float *partials,
                                         int warpStride, int64_t entry, int64_t row,
                                         int64_t feature) {
  a.out[entry * a.outBatchStride + row * a.ldo + feature] = __bfloat16_as_ushort(
      __float2bfloat16_rn(roundedSum(partials, warpStride, a.bias, feature)));
}

// The SwiGLU epilogue's output element: gate and up rounded as the pair's GEMM stores
// them, then swiglu rounded as kiln_swiglu_bf16 rounds it.
__device__ __forceinline__ void storeSwiglu(const SkinnyGemmArgs &a, const float *gatePartials,
                                            const float *upPartials, int warpStride,
                                            int64_t row, int64_t feature) {
  const float gate = roundedSum(gatePartials, warpStride, nullptr, feature);
  const float up = roundedSum(upPartials, warpStride, nullptr, feature);
  a.glu[row * a.ldGlu + feature] =
      __bfloat16_as_ushort(__float2bfloat16_rn(swigluOfBf16(gate, up)));
}

// Lets the next kernel's CTAs launch once every CTA of this one is past its K loop. Not
// at the start: a chained small kernel after a GEMM lets its own dependent (the next
// GEMM) launch at once, and a GEMM that did the same would pull the whole chain of
// later kernels onto the SMs, waiting, while this one still streams its weights
// (measured: chained small kernels cost the 8B batch-1 step 4% on an H100 with the
// trigger at the start, docs/performance.md 2026-12-07).
__device__ __forceinline__ void letDependentsLaunch() { kiln::kernels::pdlLaunchDependents(); }

// ---- the tensor-core form ------------------------------------------------------------
// mma.sync m16n8k16 with the weights as A (16 features x 16 k) and x as B (16 k x 8
// rows): "swap AB", so one instruction serves up to 8 rows and the rows cost no CUDA-core
// work. Lane (g, t) = (lane / 4, lane % 4) loads 16 bytes (k 8t .. 8t + 7 of a 32-wide K
// step) of feature rows g and g + 8 and of x row g; the mma's k slots 2t, 2t + 1, 2t + 8,
// 2t + 9 take four of them and a second mma the other four. That is a fixed permutation
// of K within the step, the same for A and B, so the products pair up as in the plain
// dot product and the summation order depends on nothing but the shape. The 8 warps of a
// CTA take K steps w, w + 8, ...; their partial sums add in warp order.
constexpr int kMmaFeatures = 16;
constexpr int kMmaStepK = 32;
// K steps a warp of the register kernel loads before it multiplies: 4, or 8 for the deep
// variant (KILN_SKINNY_MMA_DEPTH=8; twice the weight bytes in flight, for cards whose
// bandwidth needs more, at the registers' cost).
constexpr int kMmaStepsInFlight = 4;
constexpr int kMmaStepsInFlightDeep = 8;

// c += A . B of one m16n8k16 step (Common/Mma.cuh; the emulator's under emulation).
__device__ __forceinline__ void mmaBf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                        uint32_t b1) {
#ifdef KILN_CTA_EMULATION
  kiln::decode::mma16816<__nv_bfloat16>(c, a, b0, b1);
#else
  kiln::kernels::mma16816<__nv_bfloat16>(c, a, b0, b1);
#endif
}

// The block of a tensor-core CTA: 16 A rows of one batch entry (blockIdx.x, .y) and a
// row group of 8 * TILES rows (blockIdx.z), with the features and rows it really has.
// Plain, A rows g and g + 8 are features first + g and first + g + 8 of w; with the
// SwiGLU epilogue (GLU) they are feature first + g of the gate (entry 0) and of the up
// projection (entry 1), so a CTA has 8 features and the grid one entry. An mma sums each
// of its outputs alike whatever A row it takes, so a feature's bits are the same either
// way.
template <int TILES, bool GLU = false> struct MmaBlock {
  static constexpr int kFeatures = GLU ? kMmaFeatures / 2 : kMmaFeatures;
  int64_t entry, first, firstRow;
  int features, rows;
  const uint16_t *w, *x;
  const uint16_t *wHigh; // A row 8 of the CTA
  __device__ explicit MmaBlock(const SkinnyGemmArgs &a)
      : entry(blockIdx.y), first(static_cast<int64_t>(blockIdx.x) * kFeatures),
        firstRow(static_cast<int64_t>(blockIdx.z) * (8 * TILES)),
        features(static_cast<int>(a.n - first < kFeatures ? a.n - first : kFeatures)),
        rows(static_cast<int>(a.m - firstRow < 8 * TILES ? a.m - firstRow : 8 * TILES)),
        w(a.w + entry * a.wBatchStride + first * a.ldw),
        x(a.x + entry * a.xBatchStride + firstRow * a.ldx),
        wHigh(GLU ? w + a.wBatchStride : w + 8 * a.ldw) {}
  // Whether A rows g and g + 8 are features of the output.
  __device__ bool lowFeature(int g) const { return g < features; }
  __device__ bool highFeature(int g) const { return (GLU ? g : g + 8) < features; }
};

// The warps' accumulators through `partial` (shared, [kWarps][16][8 * TILES]) into the
// output: acc[tile] holds c0, c1 = (A row g, rows 2t, 2t + 1) and c2, c3 = (A row g + 8,
// the same rows); each output adds its warps in warp order (roundedSum). With the SwiGLU
// epilogue, A rows f and f + 8 are the gate and up of feature f.
template <int TILES, bool GLU>
__device__ __forceinline__ void storeMmaSums(const SkinnyGemmArgs &a,
                                             const MmaBlock<TILES, GLU> &blk,
                                             float (*partial)[kMmaFeatures][8 * TILES],
                                             const float (&acc)[TILES][4]) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int tile = 0; tile < TILES; ++tile) {
    partial[warp][g][tile * 8 + 2 * t] = acc[tile][0];
    partial[warp][g][tile * 8 + 2 * t + 1] = acc[tile][1];
    partial[warp][g + 8][tile * 8 + 2 * t] = acc[tile][2];
    partial[warp][g + 8][tile * 8 + 2 * t + 1] = acc[tile][3];
  }
  __syncthreads();
  constexpr int kStride = kMmaFeatures * 8 * TILES;
  if (threadIdx.x >= MmaBlock<TILES, GLU>::kFeatures * 8 * TILES)
    return;
  const int f = threadIdx.x / (8 * TILES), r = threadIdx.x % (8 * TILES);
  if (f >= blk.features || r >= blk.rows)
    return;
  if constexpr (GLU)
    storeSwiglu(a, &partial[0][f][r], &partial[0][f + 8][r], kStride, blk.firstRow + r,
                blk.first + f);
  else
    storeSum(a, &partial[0][f][r], kStride, blk.entry, blk.firstRow + r, blk.first + f);
}

// One CTA of the register kernel (skinnyMmaKernel): TILES n8 tiles of rows, a row group of
// 8 * TILES rows (blockIdx.z); DEPTH K steps a warp in flight; GLU: the SwiGLU epilogue
// (SkinnyGemmArgs::glu). `partial`: the CTA's shared [kWarps][16][8 * TILES] floats.
template <int TILES, int DEPTH, bool GLU>
__device__ __forceinline__ void skinnyMmaCta(const SkinnyGemmArgs &a, bool prefetch,
                                             float (*partial)[kMmaFeatures][8 * TILES]) {
  const MmaBlock<TILES, GLU> blk(a);
  const int rows = blk.rows;
  const uint16_t *x = blk.x;
  if (prefetch) {
    // Plain, the CTA's rows of w are contiguous; with the epilogue, two runs of them.
    prefetchRowsToL2(blk.w, a.ldw, a.k, blk.features);
    if constexpr (GLU)
      prefetchRowsToL2(blk.wHigh, a.ldw, a.k, blk.features);
  }
  kiln::kernels::pdlWait();

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  const bool lowFeature = blk.lowFeature(g), highFeature = blk.highFeature(g);
  const uint16_t *wLow = blk.w + g * a.ldw + 8 * t, *wHigh = blk.wHigh + g * a.ldw + 8 * t;
  float acc[TILES][4] = {};
  const int steps = static_cast<int>((a.k + kMmaStepK - 1) / kMmaStepK);
  const uint4 zero = make_uint4(0, 0, 0, 0);
  for (int base = warp; base < steps; base += kWarps * DEPTH) {
    // Every load of the batch is issued before any value is used.
    uint4 lo[DEPTH], hi[DEPTH], xs[DEPTH][TILES];
#pragma unroll
    for (int u = 0; u < DEPTH; ++u) {
      const int step = base + u * kWarps;
      const int64_t k = static_cast<int64_t>(step) * kMmaStepK + 8 * t;
      const bool valid = step < steps && k < a.k;
      lo[u] = valid && lowFeature ? loadStreaming(wLow + step * kMmaStepK) : zero;
      hi[u] = valid && highFeature ? loadStreaming(wHigh + step * kMmaStepK) : zero;
#pragma unroll
      for (int tile = 0; tile < TILES; ++tile) {
        const int r = tile * 8 + g;
        xs[u][tile] = valid && r < rows ? loadInput(x + r * a.ldx + k) : zero;
      }
    }
#pragma unroll
    for (int u = 0; u < DEPTH; ++u)
#pragma unroll
      for (int tile = 0; tile < TILES; ++tile) {
        // The chunk's k 0-3 (A's slots 2t, 2t + 1, 2t + 8, 2t + 9), then its k 4-7.
        const uint32_t kLow[4] = {lo[u].x, hi[u].x, lo[u].y, hi[u].y};
        const uint32_t kHigh[4] = {lo[u].z, hi[u].z, lo[u].w, hi[u].w};
        mmaBf16(acc[tile], kLow, xs[u][tile].x, xs[u][tile].y);
        mmaBf16(acc[tile], kHigh, xs[u][tile].z, xs[u][tile].w);
      }
  }

  letDependentsLaunch();
  storeMmaSums(a, blk, partial, acc);
}

} // namespace
} // namespace kiln::graph::skinny

#endif // KILN_LIB_KERNELS_GRAPH_SKINNYGEMMDEVICE_CUH
