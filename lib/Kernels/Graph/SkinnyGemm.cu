// The skinny GEMM (SkinnyGemm.h): a CTA of 256 threads computes FEATURES output features
// of up to MAX_ROWS rows (one row group, blockIdx.z); thread t owns K chunks t, t + 256,
// t + 512, ... (16 bytes each) of them.
#include "SkinnyGemm.h"

#include "Pdl.cuh"
#include "ProgrammaticLaunch.h"

#include <cuda_bf16.h>

#include <cstdlib>
#include <limits>
#include <string>

namespace kiln::graph {
namespace {

using kiln::kernels::pdlLaunchDependents;
using kiln::kernels::pdlWait;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kChunkElems = 8; // bf16 in 16 bytes
// K chunks a thread loads before it multiplies: weight loads in flight per thread.
constexpr int kChunksInFlight = 2;

__device__ __forceinline__ uint4 loadStreaming(const uint16_t *p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

__device__ __forceinline__ float lowBf16(uint32_t v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float highBf16(uint32_t v) { return __uint_as_float(v & 0xffff0000u); }

// acc += the 8 products of one chunk, in element order.
__device__ __forceinline__ float dotChunk(float acc, uint4 w, uint4 x) {
  const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
  const uint32_t xs[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    acc = __fmaf_rn(lowBf16(ws[i]), lowBf16(xs[i]), acc);
    acc = __fmaf_rn(highBf16(ws[i]), highBf16(xs[i]), acc);
  }
  return acc;
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

// CTAs an SM: four where the accumulators and the weights in flight fit 64 registers
// without spilling, three for the larger row groups.
template <int MAX_ROWS> constexpr int minCtasPerSm() { return MAX_ROWS <= 4 ? 4 : 3; }

template <int MAX_ROWS, int FEATURES>
__global__ void __launch_bounds__(kThreads, minCtasPerSm<MAX_ROWS>())
    skinnyGemmKernel(SkinnyGemmArgs a, bool prefetch) {
  const int64_t entry = blockIdx.y;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * FEATURES;
  const int features = static_cast<int>(a.n - first < FEATURES ? a.n - first : FEATURES);
  const uint16_t *w = a.w + entry * a.wBatchStride + first * a.ldw;
  const int64_t firstRow = static_cast<int64_t>(blockIdx.z) * MAX_ROWS;
  const uint16_t *x = a.x + entry * a.xBatchStride + firstRow * a.ldx;
  const int m = static_cast<int>(a.m - firstRow < MAX_ROWS ? a.m - firstRow : MAX_ROWS);

  // Weights are never written by a step: fetching them before the wait is safe, and is
  // what overlaps this GEMM with the end of the kernel before it.
  if (prefetch)
    prefetchRowsToL2(w, a.ldw, a.k, features);
  pdlLaunchDependents();
  pdlWait();

  float acc[MAX_ROWS][FEATURES];
#pragma unroll
  for (int r = 0; r < MAX_ROWS; ++r)
#pragma unroll
    for (int f = 0; f < FEATURES; ++f)
      acc[r][f] = 0.0f;

  const int chunks = static_cast<int>(a.k / kChunkElems);
  for (int base = threadIdx.x; base < chunks; base += kChunksInFlight * kThreads) {
    uint4 wv[kChunksInFlight][FEATURES];
#pragma unroll
    for (int u = 0; u < kChunksInFlight; ++u) {
      const int chunk = base + u * kThreads;
#pragma unroll
      for (int f = 0; f < FEATURES; ++f)
        wv[u][f] = chunk < chunks && f < features
                       ? loadStreaming(w + f * a.ldw + chunk * kChunkElems)
                       : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kChunksInFlight; ++u) {
      const int chunk = base + u * kThreads;
      if (chunk >= chunks)
        break;
#pragma unroll
      for (int r = 0; r < MAX_ROWS; ++r) {
        if (r >= m)
          break;
        // A plain load: x was written by the kernel before, which ran beside this one
        // until the wait (the non-coherent path is for data read-only for a kernel's life).
        const uint4 xv = reinterpret_cast<const uint4 *>(x + r * a.ldx)[chunk];
#pragma unroll
        for (int f = 0; f < FEATURES; ++f)
          acc[r][f] = dotChunk(acc[r][f], wv[u][f], xv);
      }
    }
  }

  __shared__ float partial[kWarps][MAX_ROWS][FEATURES];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int r = 0; r < MAX_ROWS; ++r)
#pragma unroll
    for (int f = 0; f < FEATURES; ++f) {
      float v = acc[r][f];
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2)
        v += __shfl_xor_sync(0xffffffffu, v, offset);
      if (lane == 0)
        partial[warp][r][f] = v;
    }
  __syncthreads();
  if (threadIdx.x >= MAX_ROWS * FEATURES)
    return;
  const int r = threadIdx.x / FEATURES, f = threadIdx.x % FEATURES;
  if (r >= m || f >= features)
    return;
  float sum = partial[0][r][f];
#pragma unroll
  for (int i = 1; i < kWarps; ++i)
    sum += partial[i][r][f];
  if (a.bias)
    sum += __uint_as_float(static_cast<uint32_t>(a.bias[first + f]) << 16);
  a.out[entry * a.outBatchStride + (firstRow + r) * a.ldo + first + f] =
      __bfloat16_as_ushort(__float2bfloat16_rn(sum));
}

// KILN_SKINNY_GEMM_OVERLAP=0: a plain launch without the L2 prefetch (what the overlap
// is worth, measured in bench/Gemm); read once.
bool overlapWithPrevious() {
  static const bool overlap = [] {
    const char *v = std::getenv("KILN_SKINNY_GEMM_OVERLAP");
    return !(v && std::string(v) == "0");
  }();
  return overlap;
}

template <int MAX_ROWS, int FEATURES>
cudaError_t launchWith(const SkinnyGemmArgs &args, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((args.n + FEATURES - 1) / FEATURES),
                  static_cast<unsigned>(args.batch),
                  static_cast<unsigned>((args.m + MAX_ROWS - 1) / MAX_ROWS));
  // Programmatic launch only where the image that runs waits (an sm_90+ binary): below
  // that, griddepcontrol.wait compiles to nothing and x could be read too early.
  static const bool imageWaits = [] {
    cudaFuncAttributes attributes{};
    const bool known = cudaFuncGetAttributes(&attributes, &skinnyGemmKernel<MAX_ROWS, FEATURES>) ==
                       cudaSuccess;
    if (!known)
      cudaGetLastError();
    return known && attributes.binaryVersion >= 90;
  }();
  SkinnyGemmArgs copy = args;
  bool overlap = imageWaits && overlapWithPrevious();
  void *argv[] = {&copy, &overlap};
  return kiln::kernels::launchMaybeProgrammatic(
      reinterpret_cast<const void *>(&skinnyGemmKernel<MAX_ROWS, FEATURES>), grid,
      dim3(kThreads), argv, 0, stream, overlap);
}

bool multipleOf8(int64_t v) { return v % 8 == 0; }
bool aligned16(const void *p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

} // namespace

bool skinnyGemmFits(const SkinnyGemmArgs &a) {
  const int64_t int32Max = std::numeric_limits<int32_t>::max();
  if (!a.x || !a.w || !a.out || !aligned16(a.x) || !aligned16(a.w) || !aligned16(a.out))
    return false;
  constexpr int64_t gridYZ = 65535;
  if (a.m < 1 || a.m > kSkinnyGemmRowGroup * gridYZ || a.batch < 1 || a.batch > gridYZ ||
      a.n < 1 || a.k < kChunkElems || a.n > int32Max || a.k > int32Max / 2)
    return false;
  for (int64_t v : {a.k, a.ldx, a.ldw, a.xBatchStride, a.wBatchStride})
    if (v < 0 || !multipleOf8(v))
      return false;
  return a.ldx >= a.k && a.ldw >= a.k && a.ldo >= a.n;
}

// The CTA's feature count and row group only change which sums share a CTA (and so how
// often x is re-read from the L1 and w from the L2), never a sum: picked for occupancy.
// Fewer features at more rows keep the accumulators within the registers
// (minCtasPerSm).
cudaError_t launchSkinnyGemm(const SkinnyGemmArgs &args, cudaStream_t stream) {
  switch (args.m) {
  case 1:
    return launchWith<1, 4>(args, stream);
  case 2:
    return launchWith<2, 2>(args, stream);
  case 3:
  case 4:
    return launchWith<4, 2>(args, stream);
  case 5:
  case 6:
  case 7:
  case 8:
    return launchWith<8, 2>(args, stream);
  default:
    static_assert(kSkinnyGemmRowGroup == 16);
    return launchWith<16, 1>(args, stream);
  }
}

} // namespace kiln::graph
