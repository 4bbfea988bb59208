// fp64 CPU reference of the Gated DeltaNet update (include/kiln/Kernels/GatedDeltaNet.h)
// for one sequence and one token, on packed arrays; several tokens are this applied
// token after token.
#ifndef KILN_LIB_KERNELS_GATEDDELTANET_GDNREFERENCE_H
#define KILN_LIB_KERNELS_GATEDDELTANET_GDNREFERENCE_H

namespace kiln::reference {

// state [vHeads, kDim, vDim] (updated in place), q and k [kHeads, kDim], v [vHeads, vDim],
// g and beta [vHeads], out [vHeads, vDim]; scale 0 means 1 / sqrt(kDim).
void gdnUpdateReference(int kHeads, int vHeads, int kDim, int vDim, double *state,
                        const double *q, const double *k, const double *v, const double *g,
                        const double *beta, bool l2norm, double scale, double *out);

} // namespace kiln::reference

#endif
