// The validated launches of the Gated DeltaNet kernels (GdnLaunchers.cpp, plain C++) as
// the CUDA side (GdnUpdate.cu, GdnChunkPrefill.cu, GdnPrepare.cu) takes them.
#ifndef KILN_LIB_KERNELS_GATEDDELTANET_GDNINTERNAL_H
#define KILN_LIB_KERNELS_GATEDDELTANET_GDNINTERNAL_H

#include "kiln/Kernels/GatedDeltaNet.h"

namespace kiln::kernels::gdn {

// The decode update's kernels (GdnUpdate.cu). kiln_gdn_update runs kGdnUpdateDefault;
// the benchmark (bench/Gdn) and GdnGpuTest run each to compare them. Every variant gives
// the same bits (the same fp32 operations in the same order); they differ in how a state
// is spread over blocks and in registers, i.e. in speed only.
enum class GdnUpdateVariant {
  Baseline,    // one block of 2 v_dim threads a (head, sequence), 215 registers: 1 block an SM
  Cols128Occ2, // the split kernel: 128 columns a block (256 threads), 2 blocks an SM
  Cols128Occ3, // 128 columns, 3 blocks an SM (80 registers, 4 bytes spilled)
  Cols64Occ4,  // 64 columns a block (128 threads), 4 blocks an SM (122 registers)
  Cols64Occ5,  // 64 columns, 5 blocks an SM (96 registers)
  Cols64Occ6,  // 64 columns, 6 blocks an SM (80 registers, 12 bytes spilled)
  Cols32Occ10, // 32 columns a block (64 threads), 10 blocks an SM (96 registers)
  // cols64-occ5 with the tail of a launch of few waves in mind (GdnUpdate.cu, GdnAccess):
  Cols64Occ5Cs,      // the state's loads and stores evict-first in the L2 (.cs)
  Cols64Occ5Pf,      // the last wave's states prefetched into the L2 by the wave before
  Cols64Occ5CsPf,    // both
  Cols64Occ5CsPfAll, // both, every wave's states but the first's prefetched
  Count,
};
// cols64-occ5 (2.5 states in flight an SM without spills) with evict-first state
// accesses and the last wave's states prefetched into L2, so that the last wave does not
// wait on DRAM with the machine idle around it (TP 4 at batch 64: 1,024 blocks, 1.55
// waves of 660). Measured (H100, 2026-12-06 16:52 UTC, docs/kernels-gdn.md): the
// highest minimum over the batch >= 64 shapes, 86.7% of the copy ceiling at TP 4 batch
// 64 against cols64-occ5's 85.3%, within 1-2 points of it elsewhere.
constexpr GdnUpdateVariant kGdnUpdateDefault = GdnUpdateVariant::Cols64Occ5CsPf;
// kiln_gdn_update_replay's: plain cols64-occ5. The prefetch measured 1-2.5 points slower
// there (the replay kernel's extra reads of kept tokens compete with it), and the .cs
// accesses make ptxas spill about 530 bytes under the 5-blocks bound.
constexpr GdnUpdateVariant kGdnUpdateReplayDefault = GdnUpdateVariant::Cols64Occ5;
const char *gdnUpdateVariantName(GdnUpdateVariant v);

// Arguments are validated; returns KILN_OK or KILN_ERROR_CUDA (message set).
kiln_status_t launchGdnUpdate(const kiln_gdn_update_params_t &p, float scale,
                              GdnUpdateVariant variant);

// kiln_gdn_update with a chosen kernel: validates as kiln_gdn_update does (GdnLaunchers.cpp).
kiln_status_t gdnUpdateWithVariant(const kiln_gdn_update_params_t *params,
                                   GdnUpdateVariant variant);

// gdn_update_replay with a chosen kernel: the split variants only (the baseline has no
// replay form: KILN_ERROR_UNSUPPORTED). Arguments are validated; returns KILN_OK or an
// error (message set).
kiln_status_t launchGdnUpdateReplay(const kiln_gdn_update_replay_params_t &p, float scale,
                                    GdnUpdateVariant variant);

// kiln_gdn_update_replay with a chosen kernel: validates as kiln_gdn_update_replay does.
kiln_status_t gdnUpdateReplayWithVariant(const kiln_gdn_update_replay_params_t *params,
                                         GdnUpdateVariant variant);

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
