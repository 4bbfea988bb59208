// gdn_prepare (include/kiln/Kernels/GatedDeltaNet.h): a GDN layer's inputs as the update
// and the chunked prefill take them, in transformers' bf16 roundings.
//
// One block per token. Each warp normalizes whole q or k rows (a head's k_dim values), so
// a row's sum of squares has the fixed order the header documents (a lane's strided
// values in order, then a butterfly): a host reference reproduces it bit for bit. The
// block's threads then copy the token's v and compute its gates. The work is small and
// memory-bound next to the kernels it feeds; plain 2-byte accesses keep any stride of a
// column slice legal.
#include "GdnInternal.h"

#include "StatusInternal.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace kiln::kernels::gdn {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpSize = 32;
constexpr int kWarps = kThreads / kWarpSize;

__device__ float roundBf16(float x) { return __bfloat162float(__float2bfloat16(x)); }

// transformers' l2norm(x, eps=1e-6) on bf16 tensors: every op rounds to bf16; the sum
// accumulates in fp32. One warp, `n` values at `x`.
__device__ void l2normRow(const __nv_bfloat16 *x, __nv_bfloat16 *out, int n, int lane) {
  float partial = 0.0f;
  for (int i = lane; i < n; i += kWarpSize) {
    const float xi = __bfloat162float(x[i]);
    partial += roundBf16(xi * xi);
  }
  // Lanes l and l ^ m add the same two values (fp32 addition commutes): every lane ends
  // with the same sum.
  for (int m = kWarpSize / 2; m > 0; m /= 2)
    partial += __shfl_xor_sync(0xffffffffu, partial, m);
  const float s = roundBf16(partial);
  const float s2 = roundBf16(s + 1e-6f);
  const float inv = roundBf16(__frsqrt_rn(s2));
  for (int i = lane; i < n; i += kWarpSize)
    out[i] = __float2bfloat16(__bfloat162float(x[i]) * inv);
}

// torch.nn.functional.softplus (beta 1, threshold 20).
__device__ float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

__device__ const __nv_bfloat16 *bf16At(const void *base, int64_t token, int64_t stride) {
  return static_cast<const __nv_bfloat16 *>(base) + token * stride;
}

__global__ void __launch_bounds__(kThreads) gdnPrepareKernel(const kiln_gdn_prepare_params_t p) {
  const int64_t t = blockIdx.x;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  // Rows 0 .. k_heads - 1 are q's heads, the next k_heads k's.
  for (int row = warp; row < 2 * p.k_heads; row += kWarps) {
    const bool isK = row >= p.k_heads;
    const int head = isK ? row - p.k_heads : row;
    const __nv_bfloat16 *x =
        bf16At(isK ? p.k : p.q, t, isK ? p.k_stride : p.q_stride) + int64_t(head) * p.k_dim;
    __nv_bfloat16 *out =
        static_cast<__nv_bfloat16 *>(isK ? p.k_out : p.q_out) + (t * p.k_heads + head) * p.k_dim;
    l2normRow(x, out, p.k_dim, lane);
  }
  const int64_t vWidth = int64_t(p.v_heads) * p.v_dim;
  const __nv_bfloat16 *v = bf16At(p.v, t, p.v_stride);
  __nv_bfloat16 *vOut = static_cast<__nv_bfloat16 *>(p.v_out) + t * vWidth;
  for (int64_t i = threadIdx.x; i < vWidth; i += kThreads)
    vOut[i] = v[i];
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
