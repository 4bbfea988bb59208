// The Gated DeltaNet decode update (include/kiln/Kernels/GatedDeltaNet.h).
//
// One block per (value head, sequence). The block holds the head's [KD, VD] fp32 state
// in registers: thread (half, c) owns column c and the rows of its half, so reading and
// writing the state is coalesced along c. Per token, the two halves' partial sums of
// S^T k and S^T q meet in shared memory. Every output and intermediate state is
// computed by the same instructions in both modes, so the speculative intermediates
// equal the in-place states bit for bit.
#include "GdnInternal.h"

#include "StatusInternal.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <type_traits>

namespace kiln::kernels::gdn {
namespace {

constexpr int kHalves = 2; // row halves: blockDim.x = 2 * v_dim

struct GdnArgs {
  float *state;
  float *intermediate;
  const int32_t *indices;
  int32_t numSlots, numTokens, kHeads, vHeads, vDim;
  int32_t interTokens; // token states a slot's intermediates hold (>= numTokens)
  const void *q, *k, *v;
  const float *g, *beta;
  void *out;
  int32_t l2norm;
  float scale;
};

template <typename T> __device__ float toFloat(T x);
template <> __device__ float toFloat(__nv_bfloat16 x) { return __bfloat162float(x); }
template <> __device__ float toFloat(__half x) { return __half2float(x); }
template <typename T> __device__ T fromFloat(float x);
template <> __device__ __nv_bfloat16 fromFloat(float x) { return __float2bfloat16(x); }
template <> __device__ __half fromFloat(float x) { return __float2half(x); }

// 1 / sqrt(sum(x^2) + 1e-6) over `n` values in shared memory (every thread computes it:
// n is at most 128 and the values are hot in shared memory).
__device__ float inverseNorm(const float *x, int n) {
  float sum = 0.0f;
  for (int i = 0; i < n; ++i)
    sum += x[i] * x[i];
  return rsqrtf(sum + 1e-6f);
}

template <typename T, int KD>
__global__ void __launch_bounds__(256) gdnUpdateKernel(GdnArgs a) {
  constexpr int kRows = KD / kHalves;
  const int head = blockIdx.x, seq = blockIdx.y;
  const int vd = a.vDim;
  const int c = threadIdx.x % vd, half = threadIdx.x / vd;
  const int slot = a.indices ? a.indices[seq] : seq;
  if (slot < 0 || slot >= a.numSlots)
    return; // padding: nothing read or written
  const int keyHead = head / (a.vHeads / a.kHeads);
  const size_t headState = static_cast<size_t>(KD) * vd;
  float *state = a.state + (static_cast<size_t>(slot) * a.vHeads + head) * headState;

  __shared__ float qs[KD], ks[KD], partial[kHalves][128];
  float s[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
    s[r] = state[(half * kRows + r) * vd + c];

  for (int t = 0; t < a.numTokens; ++t) {
    const size_t token = static_cast<size_t>(seq) * a.numTokens + t;
    const T *q = static_cast<const T *>(a.q) + (token * a.kHeads + keyHead) * KD;
    const T *k = static_cast<const T *>(a.k) + (token * a.kHeads + keyHead) * KD;
    for (int i = threadIdx.x; i < KD; i += blockDim.x) {
      qs[i] = toFloat(q[i]);
      ks[i] = toFloat(k[i]);
    }
    __syncthreads();
    const float qScale = (a.l2norm ? inverseNorm(qs, KD) : 1.0f) * a.scale;
    const float kScale = a.l2norm ? inverseNorm(ks, KD) : 1.0f;
    const size_t headToken = token * a.vHeads + head;
    const float decay = expf(a.g[headToken]);
    const float beta = a.beta[headToken];
    const float v = toFloat(static_cast<const T *>(a.v)[headToken * vd + c]);

    float mem = 0.0f;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      s[r] *= decay;
      mem += s[r] * (ks[half * kRows + r] * kScale);
    }
    partial[half][c] = mem;
    __syncthreads();
    const float delta = (v - (partial[0][c] + partial[1][c])) * beta;
    float o = 0.0f;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      s[r] += (ks[half * kRows + r] * kScale) * delta;
      o += s[r] * (qs[half * kRows + r] * qScale);
    }
    __syncthreads(); // every thread has read partial
    partial[half][c] = o;
    __syncthreads();
    if (half == 0)
      static_cast<T *>(a.out)[headToken * vd + c] = fromFloat<T>(partial[0][c] + partial[1][c]);
    if (a.intermediate) {
      float *inter =
          a.intermediate +
          ((static_cast<size_t>(slot) * a.interTokens + t) * a.vHeads + head) * headState;
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        inter[(half * kRows + r) * vd + c] = s[r];
    }
    __syncthreads(); // qs, ks and partial are reused by the next token
  }
  if (!a.intermediate) {
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      state[(half * kRows + r) * vd + c] = s[r];
  }
}

} // namespace

kiln_status_t launchGdnUpdate(const kiln_gdn_update_params_t &p, float scale) {
  GdnArgs a{};
  fillCommonArgs(a, p, scale);
  a.intermediate = static_cast<float *>(p.intermediate);
  a.numTokens = p.num_tokens;
  a.interTokens = p.intermediate_tokens > 0 ? p.intermediate_tokens : p.num_tokens;
  const dim3 grid(p.v_heads, p.batch);
  const dim3 block(kHalves * p.v_dim);
  cudaStream_t stream = static_cast<cudaStream_t>(p.stream);
  auto go = [&](auto typeTag, auto kdTag) {
    gdnUpdateKernel<decltype(typeTag), decltype(kdTag)::value><<<grid, block, 0, stream>>>(a);
  };
  using K64 = std::integral_constant<int, 64>;
  using K128 = std::integral_constant<int, 128>;
  if (p.dtype == KILN_DTYPE_BF16)
    p.k_dim == 64 ? go(__nv_bfloat16{}, K64{}) : go(__nv_bfloat16{}, K128{});
  else
    p.k_dim == 64 ? go(__half{}, K64{}) : go(__half{}, K128{});
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    return fail(KILN_ERROR_CUDA, "%s: kernel launch failed: %s",
                p.intermediate ? "gdn_update_spec" : "gdn_update", cudaGetErrorString(err));
  return ok();
}

} // namespace kiln::kernels::gdn
