// gdn_prepare (include/kiln/Kernels/GatedDeltaNet.h): a GDN layer's inputs as the update
// and the chunked prefill take them: q, k and v packed, the gates in transformers'
// roundings.
//
// One block per token: its threads copy the token's q, k and v rows out of their column
// slices and compute its gates. The work is small and memory-bound next to the kernels it
// feeds; plain 2-byte accesses keep any stride of a column slice legal.
#include "GdnInternal.h"

#include "StatusInternal.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace kiln::kernels::gdn {
namespace {

constexpr int kThreads = 256;

__device__ float roundBf16(float x) { return __bfloat162float(__float2bfloat16(x)); }

// torch.nn.functional.softplus (beta 1, threshold 20).
__device__ float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

__device__ const __nv_bfloat16 *bf16At(const void *base, int64_t token, int64_t stride) {
  return static_cast<const __nv_bfloat16 *>(base) + token * stride;
}

// `width` values of token t's row of `x` (rows `stride` apart) to the packed `out`.
__device__ void packRow(const void *x, int64_t stride, void *out, int64_t width, int64_t t) {
  const __nv_bfloat16 *row = bf16At(x, t, stride);
  __nv_bfloat16 *to = static_cast<__nv_bfloat16 *>(out) + t * width;
  for (int64_t i = threadIdx.x; i < width; i += kThreads)
    to[i] = row[i];
}

__global__ void __launch_bounds__(kThreads) gdnPrepareKernel(const kiln_gdn_prepare_params_t p) {
  const int64_t t = blockIdx.x;
  const int64_t keyWidth = int64_t(p.k_heads) * p.k_dim;
  packRow(p.q, p.q_stride, p.q_out, keyWidth, t);
  packRow(p.k, p.k_stride, p.k_out, keyWidth, t);
  packRow(p.v, p.v_stride, p.v_out, int64_t(p.v_heads) * p.v_dim, t);
  const __nv_bfloat16 *a = bf16At(p.a, t, p.a_stride), *b = bf16At(p.b, t, p.b_stride);
  for (int h = threadIdx.x; h < p.v_heads; h += kThreads) {
    const int64_t at = t * p.v_heads + h;
    p.g[at] = -expf(p.a_log[h]) * softplus(__bfloat162float(a[h]) + p.dt_bias[h]);
    p.beta[at] = roundBf16(1.0f / (1.0f + expf(-__bfloat162float(b[h]))));
  }
}

} // namespace

kiln_status_t launchGdnPrepare(const kiln_gdn_prepare_params_t &p) {
  gdnPrepareKernel<<<p.tokens, kThreads, 0, static_cast<cudaStream_t>(p.stream)>>>(p);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    return fail(KILN_ERROR_CUDA, "gdn_prepare: kernel launch failed: %s", cudaGetErrorString(err));
  return ok();
}

} // namespace kiln::kernels::gdn
