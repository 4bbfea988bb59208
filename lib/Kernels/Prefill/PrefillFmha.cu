// Dense (varlen K/V) instantiations of the mma.sync prefill kernel: head_dim 64/128/256
// (and MLA's 192) x bf16/fp16 (the paged ones are in PrefillFmhaPaged.cu, so -j2 builds
// them in parallel).
#include "PrefillArgs.cuh"

namespace kiln::kernels::prefill {

kiln_status_t launchDenseSm80(const kiln_prefill_fmha_params_t &p, const char *name) {
  return dispatch<false>(p, name);
}

} // namespace kiln::kernels::prefill
