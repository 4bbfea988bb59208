// Causal depthwise conv1d update (decode), single-token and spec (T tokens).
//
// One thread owns 8 consecutive channels of one sequence: their state windows
// (8 * (W-1) values, a whole number of 16-byte words), 8 x values (16 bytes), 8 weight
// rows (8 * W values) and 8 outputs (16 bytes). Blocks of kConvThreads threads cover
// conv_dim; grid.y is the sequence.
#include "MambaCommon.cuh"
#include "MambaInternal.h"
#include "StatusInternal.h"

namespace kiln::kernels::mamba {
namespace {

constexpr int kConvThreads = 128;
constexpr int kCh = 8; // channels per thread

// Loads `Count` values of T (Count * sizeof(T) a multiple of 16 bytes) as fp32.
template <typename T, int Count>
__device__ __forceinline__ void loadRow(const T *p, float (&f)[Count]) {
  constexpr int kV = Vec16<T>::kElems;
  static_assert(Count % kV == 0, "whole 16-byte words");
#pragma unroll
  for (int i = 0; i < Count / kV; ++i) {
    float tmp[kV];
    unpack16<T>(load16(p + i * kV), tmp);
#pragma unroll
    for (int e = 0; e < kV; ++e)
      f[i * kV + e] = tmp[e];
  }
}

template <typename T, int Count>
__device__ __forceinline__ void storeRow(T *p, const float (&f)[Count]) {
  constexpr int kV = Vec16<T>::kElems;
  static_assert(Count % kV == 0, "whole 16-byte words");
#pragma unroll
  for (int i = 0; i < Count / kV; ++i) {
    float tmp[kV];
#pragma unroll
    for (int e = 0; e < kV; ++e)
      tmp[e] = f[i * kV + e];
    store16(p + i * kV, pack16<T>(tmp));
  }
}

template <typename ST, typename AT, int W, bool kSpec>
__global__ void __launch_bounds__(kConvThreads) convUpdateKernel(const ConvArgs a) {
  constexpr int K = W - 1;
  const int b = blockIdx.y;
  const int slot = a.indices ? a.indices[b] : b;
  if (slot < 0 || slot >= a.numSlots)
    return;
  const int c0 = (blockIdx.x * kConvThreads + threadIdx.x) * kCh;
  if (c0 >= a.convDim)
    return;

  float st[kCh * K]; // [channel][k], the layout in memory
  loadRow<ST, kCh * K>(static_cast<const ST *>(a.stateIn) + slot * a.inSlot +
                           static_cast<int64_t>(c0) * K,
                       st);
  float w[kCh * W];
  loadRow<AT, kCh * W>(static_cast<const AT *>(a.weight) + static_cast<int64_t>(c0) * W, w);
  float bias[kCh];
  if (a.bias) {
    loadRow<AT, kCh>(static_cast<const AT *>(a.bias) + c0, bias);
  } else {
#pragma unroll
    for (int c = 0; c < kCh; ++c)
      bias[c] = 0.0f;
  }

  const int numTokens = kSpec ? a.numTokens : 1;
  for (int t = 0; t < numTokens; ++t) {
    float x[kCh];
    loadRow<AT, kCh>(static_cast<const AT *>(a.x) + b * a.xBatch + t * a.xToken + c0, x);
    float y[kCh];
#pragma unroll
    for (int c = 0; c < kCh; ++c) {
      float acc = bias[c];
#pragma unroll
      for (int k = 0; k < K; ++k)
        acc = fmaf(w[c * W + k], st[c * K + k], acc);
      acc = fmaf(w[c * W + K], x[c], acc);
      y[c] = a.silu ? siluf(acc) : acc;
#pragma unroll
      for (int k = 0; k + 1 < K; ++k)
        st[c * K + k] = st[c * K + k + 1];
      st[c * K + K - 1] = x[c];
    }
    storeRow<AT, kCh>(static_cast<AT *>(a.out) + b * a.yBatch + t * a.yToken + c0, y);
    storeRow<ST, kCh * K>(static_cast<ST *>(a.stateOut) + slot * a.outSlot + t * a.outToken +
                              static_cast<int64_t>(c0) * K,
                          st);
  }
}

template <typename ST, typename AT, bool kSpec>
kiln_status_t launchConv(const ConvArgs &a, int width, cudaStream_t stream,
                         const char *name) {
  dim3 grid((a.convDim / kCh + kConvThreads - 1) / kConvThreads, a.batch);
  switch (width) {
  case 2:
    convUpdateKernel<ST, AT, 2, kSpec><<<grid, kConvThreads, 0, stream>>>(a);
    break;
  case 3:
    convUpdateKernel<ST, AT, 3, kSpec><<<grid, kConvThreads, 0, stream>>>(a);
    break;
  case 4:
    convUpdateKernel<ST, AT, 4, kSpec><<<grid, kConvThreads, 0, stream>>>(a);
    break;
  default:
    return fail(KILN_ERROR_UNSUPPORTED, "%s: width %d not instantiated", name, width);
  }
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    return fail(KILN_ERROR_CUDA, "%s: kernel launch failed: %s", name, cudaGetErrorString(err));
  return ok();
}

template <bool kSpec>
kiln_status_t dispatch(const ConvArgs &a, kiln_dtype_t stateDtype, kiln_dtype_t dtype,
                       int width, cudaStream_t stream, const char *name) {
  if (dtype == KILN_DTYPE_BF16) {
    if (stateDtype == KILN_DTYPE_BF16)
      return launchConv<__nv_bfloat16, __nv_bfloat16, kSpec>(a, width, stream, name);
    if (stateDtype == KILN_DTYPE_F32)
      return launchConv<float, __nv_bfloat16, kSpec>(a, width, stream, name);
  } else if (dtype == KILN_DTYPE_F16) {
    if (stateDtype == KILN_DTYPE_F16)
      return launchConv<__half, __half, kSpec>(a, width, stream, name);
    if (stateDtype == KILN_DTYPE_F32)
      return launchConv<float, __half, kSpec>(a, width, stream, name);
  }
  return fail(KILN_ERROR_UNSUPPORTED, "%s: dtype/state_dtype combination not instantiated",
              name);
}

} // namespace

kiln_status_t launchConvUpdate(const ConvArgs &args, kiln_dtype_t stateDtype,
                               kiln_dtype_t dtype, int width, bool spec, void *stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  return spec ? dispatch<true>(args, stateDtype, dtype, width, s, "conv_update_spec")
              : dispatch<false>(args, stateDtype, dtype, width, s, "conv_update");
}

} // namespace kiln::kernels::mamba
