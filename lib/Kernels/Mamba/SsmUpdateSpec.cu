#include "SsmKernel.cuh"

namespace kiln::kernels::mamba {
kiln_status_t launchSsmUpdateSpec(const SsmArgs &args, kiln_dtype_t stateDtype,
                                  kiln_dtype_t dtype, int stateSize, void *stream) {
  return launchSsm<SsmMode::spec>(args, stateDtype, dtype, stateSize, stream, "ssm_update_spec");
}
} // namespace kiln::kernels::mamba
