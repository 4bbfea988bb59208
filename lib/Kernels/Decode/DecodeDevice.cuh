// Device primitives shared by the decode kernels: cp.async, ldmatrix, mma.sync
// m16n8k16 (bf16/fp16 in, fp32 accumulate), 16-bit packing, XOR-swizzled smem rows.
// Everything here needs sm_80+ (the library's lowest target).
#ifndef KILN_LIB_KERNELS_DECODE_DECODEDEVICE_CUH
#define KILN_LIB_KERNELS_DECODE_DECODEDEVICE_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "Mma.cuh"
#include "Pdl.cuh"
#include "kiln/Kernels/Decode.h" // KILN_DECODE_MAX_SPLITS

namespace kiln::decode {

__device__ __forceinline__ uint32_t smemAddr(const void *ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

// 16-byte async copy global -> shared; zero-fills the destination when !valid.
__device__ __forceinline__ void cpAsync16(void *smem, const void *gmem, bool valid) {
  int srcBytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smemAddr(smem)),
               "l"(gmem), "r"(srcBytes));
}
// cpAsync16 with an L2 prefetch hint of PF bytes (0: none, 64, 128, 256): the L2 fetches
// the whole aligned PF-byte sector group of the source at once.
template <int PF>
__device__ __forceinline__ void cpAsync16Pf(void *smem, const void *gmem, bool valid) {
  if constexpr (PF == 0) {
    cpAsync16(smem, gmem, valid);
  } else {
    static_assert(PF == 64 || PF == 128 || PF == 256, "cp.async prefetches 64/128/256 bytes");
    const int srcBytes = valid ? 16 : 0;
    if constexpr (PF == 64)
      asm volatile("cp.async.cg.shared.global.L2::64B [%0], [%1], 16, %2;\n" ::"r"(smemAddr(smem)),
                   "l"(gmem), "r"(srcBytes));
    else if constexpr (PF == 128)
      asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(smemAddr(smem)),
                   "l"(gmem), "r"(srcBytes));
    else
      asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(smemAddr(smem)),
                   "l"(gmem), "r"(srcBytes));
  }
}
__device__ __forceinline__ void cpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldsmX4(uint32_t (&r)[4], const void *smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smemAddr(smem)));
}
__device__ __forceinline__ void ldsmX2(uint32_t (&r)[2], const void *smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smemAddr(smem)));
}
__device__ __forceinline__ void ldsmX4T(uint32_t (&r)[4], const void *smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smemAddr(smem)));
}

using kiln::kernels::mma16816;

template <typename T> __device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <> __device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t *>(&v);
}
template <> __device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t *>(&v);
}

// Element offset of 16-byte chunk `chunk` of row `row` in a swizzled tile whose rows
// hold `rowChunks` chunks (a multiple of 8). Chunks are permuted within each group of
// 8 by XOR with the row, so ldmatrix over 8 consecutive rows hits 8 distinct banks.
__device__ __forceinline__ int swz(int row, int chunk, int rowChunks) {
  return (row * rowChunks + ((chunk & ~7) | ((chunk ^ row) & 7))) * 8;
}

__device__ __forceinline__ float quadMax(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quadSum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

using kiln::kernels::pdlLaunchDependents;
using kiln::kernels::pdlWait;

// Split-KV partials: o[row][split][dv] fp32 (already divided by the split's sum) and
// lse[row][split] = log2(sum) + max (log2 domain, -inf for an empty split).
//
// The combine's arithmetic lives in these two helpers so the separate combine kernel and
// gqa_decode's fused combine (the last split block of a group) give the same bits.
//
// Weights of one row's splits (written to `weights` when not null) and the reciprocal
// of their total; an attention sink (sinkLse > -inf) is one more partial with no value.
__device__ __forceinline__ float splitWeights(const float *lse, int numSplits, float sinkLse,
                                              bool hasSink, float *weights) {
  float maxLse = sinkLse;
  for (int s = 0; s < numSplits; ++s)
    maxLse = fmaxf(maxLse, lse[s]);
  float total = 0.f;
  for (int s = 0; s < numSplits; ++s) {
    float w = maxLse == -INFINITY ? 0.f : exp2f(lse[s] - maxLse);
    total += w;
    if (weights)
      weights[s] = w;
  }
  if (hasSink)
    total += exp2f(sinkLse - maxLse);
  return total > 0.f ? 1.f / total : 0.f;
}

// Four consecutive output values (column d) of one row: sum_s w_s * o[s][d..d+3] / total,
// summed in split order (a zero weight adds nothing). The loads of up to 16 splits are
// issued ahead of their sums: one dependent L2 round trip a split made the combine
// latency-bound (~0.2 us a split; 26 splits were ~5 us of a 20 us step).
template <typename T>
__device__ __forceinline__ uint2 combineFour(const float *o, const float *weights, int numSplits,
                                             int dv, int d, float inv) {
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  constexpr int U = 16;
  for (int s = 0; s < numSplits; s += U) {
    float4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u)
      // L2 loads: in the fused combine the partials come from other SMs' blocks.
      v[u] = s + u < numSplits
                 ? __ldcg(reinterpret_cast<const float4 *>(o + static_cast<size_t>(s + u) * dv + d))
                 : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const float w = s + u < numSplits ? weights[s + u] : 0.f;
      if (w == 0.f)
        continue;
      acc.x = __fmaf_rn(w, v[u].x, acc.x);
      acc.y = __fmaf_rn(w, v[u].y, acc.y);
      acc.z = __fmaf_rn(w, v[u].z, acc.z);
      acc.w = __fmaf_rn(w, v[u].w, acc.w);
    }
  }
  uint2 packed;
  packed.x = pack2<T>(acc.x * inv, acc.y * inv);
  packed.y = pack2<T>(acc.z * inv, acc.w * inv);
  return packed;
}

template <typename T>
__global__ void splitCombineKernel(const float *__restrict__ partO,
                                   const float *__restrict__ partLse, T *__restrict__ out,
                                   int numSplits, int dv, const float *__restrict__ sinks,
                                   int heads) {
  // Launched programmatically after gqa_decode's split kernel: the partials are its.
  pdlWait();
  const int row = blockIdx.x;
  const float *lse = partLse + static_cast<size_t>(row) * numSplits;
  // An attention sink (row = ((b * q_len + t) * heads + head)) is one more partial
  // with log-sum-exp sinks[head] * log2(e) and no value, added last.
  const float sinkLse = sinks ? sinks[row % heads] * 1.4426950408889634f : -INFINITY;
  // static: never sized by the launch. The lse values are staged in parallel first:
  // read in the weights' loop, each was a dependent L2 round trip.
  __shared__ float sLse[KILN_DECODE_MAX_SPLITS], weights[KILN_DECODE_MAX_SPLITS];
  for (int s = threadIdx.x; s < numSplits; s += blockDim.x)
    sLse[s] = lse[s];
  __syncthreads();
  const float inv = splitWeights(sLse, numSplits, sinkLse, sinks != nullptr,
                                 threadIdx.x == 0 ? weights : nullptr);
  __syncthreads();
  const float *o = partO + static_cast<size_t>(row) * numSplits * dv;
  for (int d = threadIdx.x * 4; d < dv; d += blockDim.x * 4)
    *reinterpret_cast<uint2 *>(out + static_cast<size_t>(row) * dv + d) =
        combineFour<T>(o, weights, numSplits, dv, d, inv);
}

} // namespace kiln::decode

#endif
