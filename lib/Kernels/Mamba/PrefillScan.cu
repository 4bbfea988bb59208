// Prompt-wide Mamba2 kernels: the SSD chunked scan (ssm_chunk_scan) and the parallel
// causal conv (conv_prefill). See Mamba.h for the math and docs/kernels-mamba.md for the
// design.
#include "MambaCommon.cuh"
#include "MambaInternal.h"

#include "StatusInternal.h"

#include <cuda_runtime.h>

namespace kiln::kernels::mamba {
namespace {

constexpr int kThreads = 256;
constexpr int kTile = 4; // outputs a thread keeps in registers (tokens or head rows)

// Shared-memory layout of one CTA of the chunked scan, in floats. B, C and the state
// rows are padded by one float so that threads reading consecutive rows (tokens or head
// rows) at one column hit different banks.
struct ScanSmem {
  int L, P, N;
  __host__ __device__ int rowN() const { return N + 1; }
  __host__ __device__ int xs() const { return 0; }
  __host__ __device__ int bs() const { return xs() + L * P; }
  __host__ __device__ int cs() const { return bs() + L * rowN(); }
  __host__ __device__ int st() const { return cs() + L * rowN(); }
  __host__ __device__ int cb() const { return st() + P * rowN(); }
  __host__ __device__ int dts() const { return cb() + L * L; }
  __host__ __device__ int cum() const { return dts() + L; }
  __host__ __device__ int w() const { return cum() + L; }
  __host__ __device__ int floats() const { return w() + L; }
};

__device__ __forceinline__ float loadAct(const void *p, int64_t i, bool half) {
  return half ? __half2float(static_cast<const __half *>(p)[i])
              : __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[i]);
}
__device__ __forceinline__ void storeAct(void *p, int64_t i, float v, bool half) {
  if (half)
    static_cast<__half *>(p)[i] = __float2half_rn(v);
  else
    static_cast<__nv_bfloat16 *>(p)[i] = __float2bfloat16_rn(v);
}

// One CTA per (head, sequence): the state lives in shared memory for the whole sequence,
// each chunk of L tokens is loaded, its decays, C.B products, outputs and the state's
// update computed, then the next chunk follows. StateT: the slot's dtype.
template <typename StateT>
__global__ void __launch_bounds__(kThreads)
    ssmChunkScanKernel(ChunkScanArgs a, const int32_t *__restrict__ cuSeqlens, int L) {
  extern __shared__ float smem[];
  const int h = blockIdx.x, b = blockIdx.y;
  const int slot = a.indices ? a.indices[b] : b;
  if (slot < 0 || slot >= a.numSlots)
    return;
  const int P = a.headDim, N = a.stateSize, rowN = N + 1;
  const ScanSmem lay{L, P, N};
  float *xs = smem + lay.xs(), *bs = smem + lay.bs(), *cs = smem + lay.cs(),
        *st = smem + lay.st(), *cb = smem + lay.cb(), *dts = smem + lay.dts(),
        *cum = smem + lay.cum(), *w = smem + lay.w();
  const int g = h / a.headsPerGroup;
  const bool half = a.half;
  const float A = a.aIsLog ? -expf(a.A[h]) : a.A[h];
  const float D = a.D ? a.D[h] : 0.0f;
  const float bias = a.dtBias ? a.dtBias[h] : 0.0f;
  StateT *state = static_cast<StateT *>(a.state) + slot * a.stSlot + h * a.stHead;
  for (int i = threadIdx.x; i < P * N; i += blockDim.x) {
    const int p = i / N, n = i % N;
    st[p * rowN + n] = toFloat(state[p * a.stDim + n]);
  }
  const int begin = cuSeqlens[b], end = cuSeqlens[b + 1];
  for (int t0 = begin; t0 < end; t0 += L) {
    const int len = min(L, end - t0);
    __syncthreads(); // the previous chunk is done with the buffers
    for (int i = threadIdx.x; i < len * P; i += blockDim.x) {
      const int t = i / P, p = i % P;
      xs[t * P + p] = loadAct(a.x, (t0 + t) * a.xToken + h * P + p, half);
    }
    for (int i = threadIdx.x; i < len * N; i += blockDim.x) {
      const int t = i / N, n = i % N;
      const int64_t row = static_cast<int64_t>(t0 + t);
      bs[t * rowN + n] = loadAct(a.B, row * a.bToken + g * N + n, half);
      cs[t * rowN + n] = loadAct(a.C, row * a.cToken + g * N + n, half);
    }
    for (int t = threadIdx.x; t < len; t += blockDim.x) {
      dts[t] = stepSize(loadAct(a.dt, (t0 + t) * a.dtToken + h, half), bias, a.dtSoftplus,
                        a.dtMin, a.dtMax);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      float run = 0.0f;
      for (int t = 0; t < len; ++t)
        cum[t] = run += dts[t] * A;
    }
    __syncthreads();
    // The decayed C.B products (zero above the diagonal) and each token's weight in the
    // state update.
    for (int i = threadIdx.x; i < L * L; i += blockDim.x) {
      const int t = i / L, u = i % L;
      float v = 0.0f;
      if (t < len && u <= t) {
        for (int n = 0; n < N; ++n)
          v = fmaf(cs[t * rowN + n], bs[u * rowN + n], v);
        v *= expf(cum[t] - cum[u]) * dts[u];
      }
      cb[i] = v;
    }
    for (int u = threadIdx.x; u < len; u += blockDim.x)
      w[u] = expf(cum[len - 1] - cum[u]) * dts[u];
    __syncthreads();
    // Outputs: kTile tokens of one head row a thread (the state row and x loaded once for
    // all of them).
    const int tokenTiles = (len + kTile - 1) / kTile;
    for (int i = threadIdx.x; i < tokenTiles * P; i += blockDim.x) {
      const int tile = i / P, p = i % P, first = tile * kTile;
      float acc[kTile] = {};
      for (int u = 0; u < min(first + kTile, len); ++u) {
        const float xv = xs[u * P + p];
#pragma unroll
        for (int j = 0; j < kTile; ++j)
          acc[j] = fmaf(cb[min(first + j, L - 1) * L + u], xv, acc[j]);
      }
      float fromState[kTile] = {};
      for (int n = 0; n < N; ++n) {
        const float sv = st[p * rowN + n];
#pragma unroll
        for (int j = 0; j < kTile; ++j)
          fromState[j] = fmaf(cs[min(first + j, L - 1) * rowN + n], sv, fromState[j]);
      }
#pragma unroll
      for (int j = 0; j < kTile; ++j) {
        const int t = first + j;
        if (t < len) {
          const float y = acc[j] + expf(cum[t]) * fromState[j] + D * xs[t * P + p];
          storeAct(a.out, (t0 + t) * a.yToken + h * P + p, y, half);
        }
      }
    }
    __syncthreads(); // the outputs read the chunk's incoming state
    // The state after the chunk: kTile head rows of one state column a thread.
    const float decay = expf(cum[len - 1]);
    const int rowTiles = (P + kTile - 1) / kTile;
    for (int i = threadIdx.x; i < rowTiles * N; i += blockDim.x) {
      const int tile = i / N, n = i % N, first = tile * kTile;
      float acc[kTile];
#pragma unroll
      for (int j = 0; j < kTile; ++j)
        acc[j] = first + j < P ? st[(first + j) * rowN + n] * decay : 0.0f;
      for (int u = 0; u < len; ++u) {
        const float bw = bs[u * rowN + n] * w[u];
#pragma unroll
        for (int j = 0; j < kTile; ++j)
          acc[j] = fmaf(xs[u * P + min(first + j, P - 1)], bw, acc[j]);
      }
#pragma unroll
      for (int j = 0; j < kTile; ++j)
        if (first + j < P)
          st[(first + j) * rowN + n] = acc[j];
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < P * N; i += blockDim.x) {
    const int p = i / N, n = i % N;
    state[p * a.stDim + n] = fromFloat<StateT>(st[p * rowN + n]);
  }
}

// conv_prefill, pass 1: every (token, 8 channels) of every sequence; the window before a
// sequence's first token comes from the slot. One thread per 8 channels of a token.
template <typename T, typename StateT>
__global__ void convPrefillKernel(ConvPrefillArgs a, const int32_t *__restrict__ cuSeqlens) {
  const int vecs = a.convDim / 8;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int b = blockIdx.y;
  const int begin = cuSeqlens[b], end = cuSeqlens[b + 1];
  const int64_t t = begin + i / vecs;
  if (t >= end)
    return;
  const int slot = a.indices ? a.indices[b] : b;
  if (slot < 0 || slot >= a.numSlots)
    return;
  const int c0 = static_cast<int>(i % vecs) * 8, W = a.width;
  const T *x = static_cast<const T *>(a.x);
  const T *weight = static_cast<const T *>(a.weight);
  const StateT *window = static_cast<const StateT *>(a.state) + slot * a.stSlot;
  float acc[8];
#pragma unroll
  for (int e = 0; e < 8; ++e)
    acc[e] = a.bias ? toFloat(static_cast<const T *>(a.bias)[c0 + e]) : 0.0f;
  for (int k = 0; k < W; ++k) {
    const int64_t src = t - (W - 1) + k; // the input this tap reads
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const int c = c0 + e;
      const float in = src >= begin ? toFloat(x[src * a.xToken + c])
                                    : toFloat(window[c * (W - 1) + (W - 1) - (begin - src)]);
      acc[e] = fmaf(toFloat(weight[c * W + k]), in, acc[e]);
    }
  }
  T *out = static_cast<T *>(a.out) + t * a.yToken + c0;
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const float y = a.silu ? siluf(acc[e]) : acc[e];
    out[e] = fromFloat<T>(y);
  }
}

// conv_prefill, pass 2 (after every output read the old windows): each sequence's window
// becomes its last W-1 inputs, shifted through the old window when it is shorter.
template <typename T, typename StateT>
__global__ void convPrefillWindowKernel(ConvPrefillArgs a, const int32_t *__restrict__ cuSeqlens) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x, b = blockIdx.y;
  if (c >= a.convDim)
    return;
  const int slot = a.indices ? a.indices[b] : b;
  if (slot < 0 || slot >= a.numSlots)
    return;
  const int begin = cuSeqlens[b], end = cuSeqlens[b + 1], W = a.width;
  StateT *window = static_cast<StateT *>(a.state) + slot * a.stSlot + c * (W - 1);
  const T *x = static_cast<const T *>(a.x);
  float next[3];
  for (int k = 0; k < W - 1; ++k) {
    // Position k of the new window is the input end - (W - 1) + k.
    const int64_t src = static_cast<int64_t>(end) - (W - 1) + k;
    next[k] = src >= begin ? toFloat(x[src * a.xToken + c])
                           : toFloat(window[(W - 1) - (begin - src)]);
  }
  for (int k = 0; k < W - 1; ++k)
    window[k] = fromFloat<StateT>(next[k]);
}

template <typename T, typename StateT>
cudaError_t launchConvPrefillTyped(const ConvPrefillArgs &a, cudaStream_t stream) {
  const int64_t perSeq = a.maxTokens * (a.convDim / 8);
  const dim3 grid(static_cast<unsigned>((perSeq + kThreads - 1) / kThreads),
                  static_cast<unsigned>(a.batch));
  convPrefillKernel<T, StateT><<<grid, kThreads, 0, stream>>>(a, a.cuSeqlens);
  const dim3 windowGrid(static_cast<unsigned>((a.convDim + kThreads - 1) / kThreads),
                        static_cast<unsigned>(a.batch));
  convPrefillWindowKernel<T, StateT><<<windowGrid, kThreads, 0, stream>>>(a, a.cuSeqlens);
  return cudaGetLastError();
}

} // namespace

int chunkScanTokens(int headDim, int stateSize, size_t sharedBytes) {
  for (int L : {64, 32, 16})
    if (static_cast<size_t>(ScanSmem{L, headDim, stateSize}.floats()) * sizeof(float) <=
        sharedBytes)
      return L;
  return 0;
}

kiln_status_t launchSsmChunkScan(const ChunkScanArgs &a, kiln_dtype_t stateDtype,
                                 void *stream) {
  int device = 0, optin = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e == cudaSuccess)
    e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  if (e != cudaSuccess)
    return fail(KILN_ERROR_CUDA, "ssm_chunk_scan: device query failed: %s",
                cudaGetErrorString(e));
  const int mmaBytes = chunkScanMmaBytes(a);
  if (mmaBytes > 0 && mmaBytes <= optin)
    return launchSsmChunkScanMma(a, stateDtype, stream);
  const int L = chunkScanTokens(a.headDim, a.stateSize, static_cast<size_t>(optin));
  if (L == 0)
    return fail(KILN_ERROR_UNSUPPORTED,
                "ssm_chunk_scan: head_dim %d x state_size %d needs more than the %d bytes of "
                "shared memory a block gets here",
                a.headDim, a.stateSize, optin);
  const size_t bytes =
      static_cast<size_t>(ScanSmem{L, a.headDim, a.stateSize}.floats()) * sizeof(float);
  const dim3 grid(static_cast<unsigned>(a.heads), static_cast<unsigned>(a.batch));
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (stateDtype == KILN_DTYPE_F32) {
    e = cudaFuncSetAttribute(ssmChunkScanKernel<float>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
    if (e == cudaSuccess)
      ssmChunkScanKernel<float><<<grid, kThreads, bytes, s>>>(a, a.cuSeqlens, L);
  } else {
    e = cudaFuncSetAttribute(ssmChunkScanKernel<__nv_bfloat16>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
    if (e == cudaSuccess)
      ssmChunkScanKernel<__nv_bfloat16><<<grid, kThreads, bytes, s>>>(a, a.cuSeqlens, L);
  }
  if (e == cudaSuccess)
    e = cudaGetLastError();
  if (e != cudaSuccess)
    return fail(KILN_ERROR_CUDA, "ssm_chunk_scan: launch failed: %s", cudaGetErrorString(e));
  return KILN_OK;
}

kiln_status_t launchConvPrefill(const ConvPrefillArgs &a, kiln_dtype_t stateDtype,
                                kiln_dtype_t dtype, void *stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  cudaError_t e;
  const bool f32State = stateDtype == KILN_DTYPE_F32;
  if (dtype == KILN_DTYPE_BF16)
    e = f32State ? launchConvPrefillTyped<__nv_bfloat16, float>(a, s)
                 : launchConvPrefillTyped<__nv_bfloat16, __nv_bfloat16>(a, s);
  else
    e = f32State ? launchConvPrefillTyped<__half, float>(a, s)
                 : launchConvPrefillTyped<__half, __half>(a, s);
  if (e != cudaSuccess)
    return fail(KILN_ERROR_CUDA, "conv_prefill: launch failed: %s", cudaGetErrorString(e));
  return KILN_OK;
}

} // namespace kiln::kernels::mamba
