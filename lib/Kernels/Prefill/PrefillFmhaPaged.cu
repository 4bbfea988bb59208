// Paged-KV ("extend context") instantiations of the mma.sync prefill kernel.
#include "PrefillArgs.cuh"

namespace kiln::kernels::prefill {

kiln_status_t launchPagedSm80(const kiln_prefill_fmha_paged_params_t &p, const char *name) {
  return dispatch<true>(p, name);
}

} // namespace kiln::kernels::prefill
