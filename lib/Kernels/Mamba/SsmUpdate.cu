#include "SsmKernel.cuh"

namespace kiln::kernels::mamba {
kiln_status_t launchSsmUpdate(const SsmArgs &args, kiln_dtype_t stateDtype,
                              kiln_dtype_t dtype, int stateSize, void *stream) {
  return launchSsm<SsmMode::single>(args, stateDtype, dtype, stateSize, stream, "ssm_update");
}
} // namespace kiln::kernels::mamba
