// Paged-KV ("extend context") instantiations of the mma.sync prefill kernel.
#include "PrefillArgs.cuh"

namespace kiln::kernels::prefill {

kiln_status_t launchPagedSm80(const kiln_prefill_fmha_paged_params_t &p, const char *name) {
  if (p.kv_dtype == KILN_DTYPE_FP8_E4M3)
    return launchPagedFp8Sm80(p, name);
  if (p.kv_dtype != p.dtype) // validatePaged: an f16 cache next to bf16 q
    return launchPagedF16Sm80(p, name);
  return dispatch<true>(p, name);
}

} // namespace kiln::kernels::prefill
