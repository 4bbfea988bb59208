// fp64 CPU references of the Mamba2 decode kernels, for one sequence and one token,
// on packed arrays. The spec variants are these applied token after token.
#ifndef KILN_LIB_KERNELS_MAMBA_MAMBAREFERENCE_H
#define KILN_LIB_KERNELS_MAMBA_MAMBAREFERENCE_H

namespace kiln::reference {

// state [heads, headDim, stateSize] (updated in place), x [heads, headDim], dt [heads],
// dtBias [heads] or null, A [heads], B and C [nGroups, stateSize], D [heads] or null,
// z [heads, headDim] or null, out [heads, headDim]. `aIsLog`: A holds A_log (the decay
// is -exp(A_log)); dtMin / dtMax > 0 clamp dt after the softplus.
void ssmUpdateReference(int heads, int headDim, int stateSize, int nGroups, double *state,
                        const double *x, const double *dt, const double *dtBias,
                        const double *A, const double *B, const double *C, const double *D,
                        const double *z, bool dtSoftplus, double *out, bool aIsLog = false,
                        double dtMin = 0.0, double dtMax = 0.0);

// state [convDim, width-1] (shifted in place), x [convDim], weight [convDim, width],
// bias [convDim] or null, out [convDim].
void convUpdateReference(int convDim, int width, double *state, const double *x,
                         const double *weight, const double *bias, bool silu, double *out);

double softplusReference(double v);
double siluReference(double v);

} // namespace kiln::reference

#endif
