// The mma.sync paged prefill over an FP8 e4m3 cache (bf16 q/out), head_dim 64/128/256: its
// own translation unit, so a model with 16-bit caches never loads this code.
#include "PrefillArgs.cuh"

namespace kiln::kernels::prefill {

kiln_status_t launchPagedFp8Sm80(const kiln_prefill_fmha_paged_params_t &p, const char *name) {
  kiln_status_t st = checkDeviceSm80(name);
  if (st != KILN_OK)
    return st;
  const FmhaArgs a = makeArgs(p);
  cudaStream_t stream = static_cast<cudaStream_t>(p.stream);
  // validatePaged: an FP8 cache comes with bf16 q/out.
  const cudaError_t err = forMmaHeadDim(KILN_DTYPE_BF16, p.head_dim, [&](auto, auto d) {
    return launchDefaultConfig<__nv_bfloat16, decltype(d)::value, true, uint8_t>(
        a, p.batch, p.max_seqlen_q, p.q_heads, stream);
  });
  return launchResult(err, name);
}

} // namespace kiln::kernels::prefill
