#include "PrefillReference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace kiln::reference {

void prefillAttentionReference(const float *q, const float *k, const float *v, double *out,
                               const int32_t *cu_q, const int32_t *cu_k, int batch,
                               int q_heads, int kv_heads, int head_dim, double softmax_scale,
                               bool causal, int window, const float *sinks, int v_head_dim) {
  const int group = q_heads / kv_heads;
  const int dv = v_head_dim > 0 ? v_head_dim : head_dim;
  std::vector<double> scores;
  for (int b = 0; b < batch; ++b) {
    const int qStart = cu_q[b], qLen = cu_q[b + 1] - cu_q[b];
    const int kStart = cu_k[b], kLen = cu_k[b + 1] - cu_k[b];
    scores.resize(std::max(kLen, 1));
    for (int h = 0; h < q_heads; ++h) {
      const int kh = h / group;
      for (int i = 0; i < qLen; ++i) {
        const float *qi = q + (static_cast<int64_t>(qStart + i) * q_heads + h) * head_dim;
        double *oi = out + (static_cast<int64_t>(qStart + i) * q_heads + h) * dv;
        const int visible = causal ? std::clamp(i + (kLen - qLen) + 1, 0, kLen) : kLen;
        const int first = causal && window > 0 ? std::max(0, visible - window) : 0;
        for (int d = 0; d < dv; ++d)
          oi[d] = 0.0;
        if (visible <= first)
          continue;
        double maxScore =
            sinks ? static_cast<double>(sinks[h]) : -std::numeric_limits<double>::infinity();
        for (int j = first; j < visible; ++j) {
          const float *kj = k + (static_cast<int64_t>(kStart + j) * kv_heads + kh) * head_dim;
          double dot = 0.0;
          for (int d = 0; d < head_dim; ++d)
            dot += static_cast<double>(qi[d]) * static_cast<double>(kj[d]);
          scores[j] = dot * softmax_scale;
          maxScore = std::max(maxScore, scores[j]);
        }
        double sum = sinks ? std::exp(static_cast<double>(sinks[h]) - maxScore) : 0.0;
        for (int j = first; j < visible; ++j) {
          scores[j] = std::exp(scores[j] - maxScore);
          sum += scores[j];
        }
        for (int j = first; j < visible; ++j) {
          const float *vj = v + (static_cast<int64_t>(kStart + j) * kv_heads + kh) * dv;
          const double w = scores[j] / sum;
          for (int d = 0; d < dv; ++d)
            oi[d] += w * static_cast<double>(vj[d]);
        }
      }
    }
  }
}

} // namespace kiln::reference
