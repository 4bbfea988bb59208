// fp64 CPU reference of the Gated DeltaNet update, written from the recurrence (not
// from the kernel): the delta rule with a gated decay, as transformers'
// torch_recurrent_gated_delta_rule states it.
#include "GdnReference.h"

#include <algorithm>
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

namespace kiln::reference {

namespace {
// The slot of sequence b, or -1 for padding.
int slotOf(const GdnPrompt &p, int b) {
  const int s = p.indices ? p.indices[b] : b;
  return s < 0 || s >= p.numSlots ? -1 : s;
}
} // namespace

void gdnPromptReference(const GdnPrompt &p, double *state, double *out) {
  const long headState = static_cast<long>(p.kDim) * p.vDim;
  for (int b = 0; b < p.batch; ++b) {
    const int slot = slotOf(p, b);
    if (slot < 0)
      continue;
    double *s = state + slot * p.vHeads * headState;
    for (long t = p.cuSeqlens[b]; t < p.cuSeqlens[b + 1]; ++t)
      gdnUpdateReference(p.kHeads, p.vHeads, p.kDim, p.vDim, s, p.q + t * p.kHeads * p.kDim,
                         p.k + t * p.kHeads * p.kDim, p.v + t * p.vHeads * p.vDim,
                         p.g + t * p.vHeads, p.beta + t * p.vHeads, p.l2norm, p.scale,
                         out + t * p.vHeads * p.vDim);
  }
}

void gdnChunkedReference(const GdnPrompt &p, int chunk, double *state, double *out) {
  const int K = p.kDim, V = p.vDim, group = p.vHeads / p.kHeads;
  const double scale = p.scale == 0.0 ? 1.0 / std::sqrt(static_cast<double>(K)) : p.scale;
  for (int b = 0; b < p.batch; ++b) {
    const int slot = slotOf(p, b);
    if (slot < 0)
      continue;
    const long begin = p.cuSeqlens[b], end = p.cuSeqlens[b + 1];
    for (int h = 0; h < p.vHeads; ++h) {
      const int kh = h / group;
      double *S = state + (static_cast<long>(slot) * p.vHeads + h) * K * V;
      for (long c0 = begin; c0 < end; c0 += chunk) {
        const int L = static_cast<int>(std::min<long>(chunk, end - c0));
        std::vector<std::vector<double>> q(L), k(L);
        std::vector<double> gam(L), beta(L);
        double run = 0.0;
        for (int t = 0; t < L; ++t) {
          const long tok = c0 + t;
          q[t] = normalized(p.q + (tok * p.kHeads + kh) * K, K, p.l2norm);
          k[t] = normalized(p.k + (tok * p.kHeads + kh) * K, K, p.l2norm);
          run += p.g[tok * p.vHeads + h];
          gam[t] = run;
          beta[t] = p.beta[tok * p.vHeads + h];
        }
        auto dot = [K](const std::vector<double> &x, const std::vector<double> &y) {
          double sum = 0.0;
          for (int i = 0; i < K; ++i)
            sum += x[i] * y[i];
          return sum;
        };
        // R_t = beta_t (v_t - exp(gamma_t) S^T k_t); (I + A) U = R by forward
        // substitution, A[t][u] = beta_t exp(gamma_t - gamma_u) k_t . k_u (u < t).
        std::vector<std::vector<double>> U(L, std::vector<double>(V));
        for (int t = 0; t < L; ++t) {
          const double *v = p.v + ((c0 + t) * p.vHeads + h) * V;
          for (int col = 0; col < V; ++col) {
            double ks = 0.0;
            for (int i = 0; i < K; ++i)
              ks += S[i * V + col] * k[t][i];
            U[t][col] = beta[t] * (v[col] - std::exp(gam[t]) * ks);
          }
          for (int u = 0; u < t; ++u) {
            const double a = beta[t] * std::exp(gam[t] - gam[u]) * dot(k[t], k[u]);
            for (int col = 0; col < V; ++col)
              U[t][col] -= a * U[u][col];
          }
        }
        // out_t = scale (exp(gamma_t) S^T q_t + sum_{u<=t} exp(gamma_t - gamma_u) q_t.k_u U_u)
        for (int t = 0; t < L; ++t) {
          double *o = out + ((c0 + t) * p.vHeads + h) * V;
          for (int col = 0; col < V; ++col) {
            double qs = 0.0;
            for (int i = 0; i < K; ++i)
              qs += S[i * V + col] * q[t][i];
            o[col] = std::exp(gam[t]) * qs;
          }
          for (int u = 0; u <= t; ++u) {
            const double a = std::exp(gam[t] - gam[u]) * dot(q[t], k[u]);
            for (int col = 0; col < V; ++col)
              o[col] += a * U[u][col];
          }
          for (int col = 0; col < V; ++col)
            o[col] *= scale;
        }
        // S = exp(gamma_last) S + sum_u exp(gamma_last - gamma_u) k_u U_u^T
        const double last = gam[L - 1];
        for (int i = 0; i < K * V; ++i)
          S[i] *= std::exp(last);
        for (int u = 0; u < L; ++u) {
          const double w = std::exp(last - gam[u]);
          for (int i = 0; i < K; ++i)
            for (int col = 0; col < V; ++col)
              S[i * V + col] += w * k[u][i] * U[u][col];
        }
      }
    }
  }
}

} // namespace kiln::reference
