// The mma.sync paged prefill over an f16 cache next to bf16 q/out, head_dim 64/128/256:
// its own translation unit (built in parallel, and loaded only by models that read f16
// caches).
#include "PrefillArgs.cuh"

namespace kiln::kernels::prefill {

kiln_status_t launchPagedF16Sm80(const kiln_prefill_fmha_paged_params_t &p, const char *name) {
  kiln_status_t st = checkDeviceSm80(name);
  if (st != KILN_OK)
    return st;
  const FmhaArgs a = makeArgs(p);
  cudaStream_t stream = static_cast<cudaStream_t>(p.stream);
  // validatePaged: an f16 cache of another dtype than q's comes with bf16 q/out.
  const cudaError_t err = forMmaHeadDim(KILN_DTYPE_BF16, p.head_dim, [&](auto, auto d) {
    return launchDefaultConfig<__nv_bfloat16, decltype(d)::value, true, __half>(
        a, p.batch, p.max_seqlen_q, p.q_heads, stream);
  });
  return launchResult(err, name);
}

} // namespace kiln::kernels::prefill
