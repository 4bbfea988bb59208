// The mma.sync paged prefill over an FP8 e4m3 cache (bf16 q/out), head_dim 64/128/256: its
// own translation unit, so a model with 16-bit caches never loads this code.
#include "PrefillArgs.cuh"

namespace kiln::kernels::prefill {

kiln_status_t launchPagedFp8Sm80(const kiln_prefill_fmha_paged_params_t &p, const char *name) {
  return dispatchPagedOverCache<uint8_t>(p, name);
}

} // namespace kiln::kernels::prefill
