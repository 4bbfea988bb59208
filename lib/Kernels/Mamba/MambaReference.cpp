#include "MambaReference.h"

#include <algorithm>
#include <cmath>

namespace kiln::reference {

double softplusReference(double v) { return v > 20.0 ? v : std::log1p(std::exp(v)); }

double siluReference(double v) { return v / (1.0 + std::exp(-v)); }

void ssmUpdateReference(int heads, int headDim, int stateSize, int nGroups, double *state,
                        const double *x, const double *dt, const double *dtBias,
                        const double *A, const double *B, const double *C, const double *D,
                        const double *z, bool dtSoftplus, double *out, bool aIsLog,
                        double dtMin, double dtMax) {
  const int headsPerGroup = heads / nGroups;
  for (int h = 0; h < heads; ++h) {
    const int g = h / headsPerGroup;
    double d = dt[h] + (dtBias ? dtBias[h] : 0.0);
    if (dtSoftplus)
      d = softplusReference(d);
    if (dtMin > 0.0)
      d = std::max(d, dtMin);
    if (dtMax > 0.0)
      d = std::min(d, dtMax);
    const double a = aIsLog ? -std::exp(A[h]) : A[h];
    const double dA = std::exp(d * a);
    const double *Bg = B + static_cast<long>(g) * stateSize;
    const double *Cg = C + static_cast<long>(g) * stateSize;
    for (int p = 0; p < headDim; ++p) {
      const long row = static_cast<long>(h) * headDim + p;
      double *s = state + row * stateSize;
      double acc = 0.0;
      for (int n = 0; n < stateSize; ++n) {
        s[n] = s[n] * dA + d * Bg[n] * x[row];
        acc += s[n] * Cg[n];
      }
      double y = acc + (D ? D[h] : 0.0) * x[row];
      if (z)
        y *= siluReference(z[row]);
      out[row] = y;
    }
  }
}

void convUpdateReference(int convDim, int width, double *state, const double *x,
                         const double *weight, const double *bias, bool silu, double *out) {
  const int K = width - 1;
  for (int c = 0; c < convDim; ++c) {
    double *s = state + static_cast<long>(c) * K;
    const double *w = weight + static_cast<long>(c) * width;
    double y = bias ? bias[c] : 0.0;
    for (int k = 0; k < K; ++k)
      y += w[k] * s[k];
    y += w[K] * x[c];
    out[c] = silu ? siluReference(y) : y;
    for (int k = 0; k + 1 < K; ++k)
      s[k] = s[k + 1];
    s[K - 1] = x[c];
  }
}

} // namespace kiln::reference
