// The validated launches of the Gated DeltaNet kernels (GdnLaunchers.cpp, plain C++) as
// the CUDA side (GdnUpdate.cu, GdnChunkPrefill.cu, GdnPrepare.cu) takes them.
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

// The fields every GDN kernel's arguments take from its parameters alike (the update's
// GdnArgs and GdnChunkArgs name them the same); `scale` resolved (> 0).
template <class Args, class Params>
void fillCommonArgs(Args &a, const Params &p, float scale) {
  a.state = static_cast<float *>(p.state);
  a.indices = p.state_indices;
  a.numSlots = p.num_slots;
  a.kHeads = p.k_heads;
  a.vHeads = p.v_heads;
  a.vDim = p.v_dim;
  a.q = p.q;
  a.k = p.k;
  a.v = p.v;
  a.g = p.g;
  a.beta = p.beta;
  a.out = p.out;
  a.l2norm = p.l2norm_qk;
  a.scale = scale;
}

// Returns KILN_OK, KILN_ERROR_UNSUPPORTED (the device lacks the block's shared memory) or
// KILN_ERROR_CUDA (message set). batch >= 1.
kiln_status_t launchGdnChunkPrefill(const GdnChunkArgs &a, int batch, int kDim, void *stream);

// Validated, tokens >= 1; returns KILN_OK or KILN_ERROR_CUDA (message set).
kiln_status_t launchGdnPrepare(const kiln_gdn_prepare_params_t &p);

} // namespace kiln::kernels::gdn

#endif
