// The mma.sync paged prefill over an f16 cache next to bf16 q/out, head_dim 64/128/256:
// its own translation unit (built in parallel, and loaded only by models that read f16
// caches).
#include "PrefillArgs.cuh"

namespace kiln::kernels::prefill {

kiln_status_t launchPagedF16Sm80(const kiln_prefill_fmha_paged_params_t &p, const char *name) {
  return dispatchPagedOverCache<__half>(p, name);
}

} // namespace kiln::kernels::prefill
