// The validated launch of the Gated DeltaNet update (GdnLaunchers.cpp, plain C++) as the
// CUDA side (GdnUpdate.cu) takes it.
#ifndef KILN_LIB_KERNELS_GATEDDELTANET_GDNINTERNAL_H
#define KILN_LIB_KERNELS_GATEDDELTANET_GDNINTERNAL_H

#include "kiln/Kernels/GatedDeltaNet.h"

namespace kiln::kernels::gdn {

// Arguments are validated; returns KILN_OK or KILN_ERROR_CUDA (message set).
kiln_status_t launchGdnUpdate(const kiln_gdn_update_params_t &p, float scale);

} // namespace kiln::kernels::gdn

#endif
