// fp64 CPU reference of the Gated DeltaNet update, written from the recurrence (not
// from the kernel): the delta rule with a gated decay, as transformers'
// torch_recurrent_gated_delta_rule states it.
#include "GdnReference.h"

#include <cmath>
#include <vector>

namespace kiln::reference {

namespace {
std::vector<double> normalized(const double *x, int n, bool l2norm) {
  std::vector<double> out(x, x + n);
  if (!l2norm)
    return out;
  double sum = 0.0;
  for (double v : out)
    sum += v * v;
  const double inv = 1.0 / std::sqrt(sum + 1e-6);
  for (double &v : out)
    v *= inv;
  return out;
}
} // namespace

void gdnUpdateReference(int kHeads, int vHeads, int kDim, int vDim, double *state,
                        const double *q, const double *k, const double *v, const double *g,
                        const double *beta, bool l2norm, double scale, double *out) {
  if (scale == 0.0)
    scale = 1.0 / std::sqrt(static_cast<double>(kDim));
  const int group = vHeads / kHeads;
  for (int h = 0; h < vHeads; ++h) {
    const int kh = h / group;
    std::vector<double> qn = normalized(q + kh * kDim, kDim, l2norm);
    std::vector<double> kn = normalized(k + kh * kDim, kDim, l2norm);
    double *s = state + static_cast<long>(h) * kDim * vDim;
    const double decay = std::exp(g[h]);
    for (int i = 0; i < kDim * vDim; ++i)
      s[i] *= decay;
    for (int col = 0; col < vDim; ++col) {
      double mem = 0.0;
      for (int row = 0; row < kDim; ++row)
        mem += s[row * vDim + col] * kn[row];
      const double delta = beta[h] * (v[h * vDim + col] - mem);
      double o = 0.0;
      for (int row = 0; row < kDim; ++row) {
        s[row * vDim + col] += kn[row] * delta;
        o += s[row * vDim + col] * qn[row];
      }
      out[h * vDim + col] = scale * o;
    }
  }
}

} // namespace kiln::reference
