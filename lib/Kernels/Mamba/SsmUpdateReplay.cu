#include "SsmKernel.cuh"

namespace kiln::kernels::mamba {
kiln_status_t launchSsmUpdateReplay(const SsmArgs &args, kiln_dtype_t stateDtype,
                                    kiln_dtype_t dtype, int stateSize, void *stream) {
  return launchSsm<SsmMode::replay>(args, stateDtype, dtype, stateSize, stream,
                                    "ssm_update_replay");
}
} // namespace kiln::kernels::mamba
