// The validated launches of the Gated DeltaNet kernels (GdnLaunchers.cpp, plain C++) as
// the CUDA side (GdnUpdate.cu, GdnChunkPrefill.cu) takes them.
#ifndef KILN_LIB_KERNELS_GATEDDELTANET_GDNINTERNAL_H
#define KILN_LIB_KERNELS_GATEDDELTANET_GDNINTERNAL_H

#include "kiln/Kernels/GatedDeltaNet.h"

namespace kiln::kernels::gdn {

// Arguments are validated; returns KILN_OK or KILN_ERROR_CUDA (message set).
kiln_status_t launchGdnUpdate(const kiln_gdn_update_params_t &p, float scale);

// gdn_chunk_prefill's kernel arguments (GdnChunkPrefill.cuh), validated.
struct GdnChunkArgs {
  float *state;
  const int32_t *indices; // or null: slot = sequence
  const int32_t *cuSeqlens;
  int32_t numSlots, kHeads, vHeads, vDim;
  const void *q, *k, *v; // bf16
  const float *g, *beta;
  void *out; // bf16
  int32_t l2norm;
  float scale; // resolved: > 0
};

// Returns KILN_OK, KILN_ERROR_UNSUPPORTED (the device lacks the block's shared memory) or
// KILN_ERROR_CUDA (message set). batch >= 1.
kiln_status_t launchGdnChunkPrefill(const GdnChunkArgs &a, int batch, int kDim, void *stream);

} // namespace kiln::kernels::gdn

#endif
