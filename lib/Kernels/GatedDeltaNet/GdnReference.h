// fp64 CPU references of the Gated DeltaNet kernels (include/kiln/Kernels/GatedDeltaNet.h):
// the update for one sequence and one token, on packed arrays (several tokens are this
// applied token after token); a prompt of packed sequences token by token with it; and
// the same prompt in the chunked (WY) form of gdn_chunk_prefill, in fp64.
#ifndef KILN_LIB_KERNELS_GATEDDELTANET_GDNREFERENCE_H
#define KILN_LIB_KERNELS_GATEDDELTANET_GDNREFERENCE_H

namespace kiln::reference {

// state [vHeads, kDim, vDim] (updated in place), q and k [kHeads, kDim], v [vHeads, vDim],
// g and beta [vHeads], out [vHeads, vDim]; scale 0 means 1 / sqrt(kDim).
void gdnUpdateReference(int kHeads, int vHeads, int kDim, int vDim, double *state,
                        const double *q, const double *k, const double *v, const double *g,
                        const double *beta, bool l2norm, double scale, double *out);

// A prompt as gdn_chunk_prefill takes it: sequence b is rows cuSeqlens[b] ..
// cuSeqlens[b+1] - 1 of q, k [tokens, kHeads, kDim], v, out [tokens, vHeads, vDim], g,
// beta [tokens, vHeads]; its slot indices[b] (null: b; negative or >= numSlots: padding,
// its outputs untouched) of state [numSlots, vHeads, kDim, vDim], updated in place.
struct GdnPrompt {
  int batch;
  const int *cuSeqlens, *indices;
  int numSlots, kHeads, vHeads, kDim, vDim;
  const double *q, *k, *v, *g, *beta;
  bool l2norm;
  double scale; // 0: 1 / sqrt(kDim)
};
// gdnUpdateReference token after token.
void gdnPromptReference(const GdnPrompt &p, double *state, double *out);
// The chunked form: chunks of `chunk` tokens, the decay-masked k k^T system solved for
// the corrected values, the state carried across chunks (docs/kernels-gdn.md).
void gdnChunkedReference(const GdnPrompt &p, int chunk, double *state, double *out);

} // namespace kiln::reference

#endif
