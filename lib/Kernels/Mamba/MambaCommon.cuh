// Device helpers shared by the Mamba kernels: scalar conversions and 16-byte vector
// loads/stores of fp32 / bf16 / fp16 values as fp32 registers.
#ifndef KILN_LIB_KERNELS_MAMBA_MAMBACOMMON_CUH
#define KILN_LIB_KERNELS_MAMBA_MAMBACOMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace kiln::kernels::mamba {

__device__ __forceinline__ float toFloat(float v) { return v; }
__device__ __forceinline__ float toFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float toFloat(__half v) { return __half2float(v); }

template <typename T> __device__ __forceinline__ T fromFloat(float v);
template <> __device__ __forceinline__ float fromFloat<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 fromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <> __device__ __forceinline__ __half fromFloat<__half>(float v) {
  return __float2half_rn(v);
}

// Rounds an fp32 value to what storing it as T and reading it back gives.
template <typename T> __device__ __forceinline__ float roundTo(float v) {
  return toFloat(fromFloat<T>(v));
}
template <> __device__ __forceinline__ float roundTo<float>(float v) { return v; }

// Elements of T in 16 bytes.
template <typename T> struct Vec16 {
  static constexpr int kElems = 16 / static_cast<int>(sizeof(T));
};

// Unpacks a 16-byte word into fp32 values.
template <typename T>
__device__ __forceinline__ void unpack16(const uint4 &u, float (&f)[Vec16<T>::kElems]) {
  if constexpr (sizeof(T) == 4) {
    f[0] = __uint_as_float(u.x);
    f[1] = __uint_as_float(u.y);
    f[2] = __uint_as_float(u.z);
    f[3] = __uint_as_float(u.w);
  } else {
    const T *h = reinterpret_cast<const T *>(&u);
#pragma unroll
    for (int i = 0; i < 8; ++i)
      f[i] = toFloat(h[i]);
  }
}

template <typename T>
__device__ __forceinline__ uint4 pack16(const float (&f)[Vec16<T>::kElems]) {
  uint4 u;
  if constexpr (sizeof(T) == 4) {
    u.x = __float_as_uint(f[0]);
    u.y = __float_as_uint(f[1]);
    u.z = __float_as_uint(f[2]);
    u.w = __float_as_uint(f[3]);
  } else {
    T *h = reinterpret_cast<T *>(&u);
#pragma unroll
    for (int i = 0; i < 8; ++i)
      h[i] = fromFloat<T>(f[i]);
  }
  return u;
}

__device__ __forceinline__ uint4 load16(const void *p) {
  return *reinterpret_cast<const uint4 *>(p);
}
__device__ __forceinline__ void store16(void *p, const uint4 &u) {
  *reinterpret_cast<uint4 *>(p) = u;
}

__device__ __forceinline__ float siluf(float v) { return v / (1.0f + expf(-v)); }

// A token's step size dt' from its raw dt (Mamba.h: bias, softplus, clamp when > 0).
__device__ __forceinline__ float stepSize(float raw, float bias, int32_t softplus, float dtMin,
                                          float dtMax) {
  float dt = raw + bias;
  if (softplus)
    dt = dt <= 20.0f ? log1pf(expf(dt)) : dt;
  if (dtMin > 0.0f)
    dt = fmaxf(dt, dtMin);
  if (dtMax > 0.0f)
    dt = fminf(dt, dtMax);
  return dt;
}

} // namespace kiln::kernels::mamba

#endif
