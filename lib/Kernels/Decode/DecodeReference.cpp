#include "DecodeReference.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace kiln::reference {

namespace {
// Softmax-weighted sum over keys first..end-1: scores[j] -> out[d] = sum_j p_j v(j)[d];
// a sink logit (if any) joins the softmax without a value.
template <typename KeyFn, typename ValueFn>
void attendRow(int first, int end, int dv, double scale, KeyFn dot, ValueFn value, double *out,
               const double *sink = nullptr) {
  std::fill(out, out + dv, 0.0);
  first = std::max(first, 0);
  if (end <= first)
    return;
  std::vector<double> scores(end - first);
  double maxScore = sink ? *sink : -INFINITY;
  for (int j = first; j < end; ++j) {
    scores[j - first] = dot(j) * scale;
    maxScore = std::max(maxScore, scores[j - first]);
  }
  double total = sink ? std::exp(*sink - maxScore) : 0.0;
  for (double &score : scores) {
    score = std::exp(score - maxScore);
    total += score;
  }
  for (int j = first; j < end; ++j) {
    const float *v = value(j);
    double w = scores[j - first] / total;
    for (int d = 0; d < dv; ++d)
      out[d] += w * v[d];
  }
}
} // namespace

std::vector<double> gqaDecode(const PagedShape &s, const std::vector<float> &q,
                              const std::vector<float> &kv, const std::vector<int32_t> &blockTable,
                              const std::vector<int32_t> &seqLens, double scale, int window,
                              const std::vector<float> &sinks) {
  const int D = s.headDim, group = s.qHeads / s.kvHeads;
  std::vector<double> out(static_cast<size_t>(s.batch) * s.qLen * s.qHeads * D);
  auto row = [&](int b, int pos, int half, int h) {
    size_t page = static_cast<size_t>(blockTable[static_cast<size_t>(b) * s.maxPages + pos / s.pageSize]);
    size_t slot = pos % s.pageSize;
    return kv.data() + (((page * 2 + half) * s.pageSize + slot) * s.kvHeads + h) * D;
  };
  for (int b = 0; b < s.batch; ++b)
    for (int i = 0; i < s.qLen; ++i)
      for (int h = 0; h < s.qHeads; ++h) {
        size_t qi = ((static_cast<size_t>(b) * s.qLen + i) * s.qHeads + h) * D;
        const float *qr = q.data() + qi;
        int kvh = h / group;
        int count = seqLens[b] - s.qLen + 1 + i;
        const double sink = sinks.empty() ? 0.0 : sinks[h];
        attendRow(
            window > 0 ? count - window : 0, count, D, scale,
            [&](int j) {
              const float *k = row(b, j, 0, kvh);
              double acc = 0;
              for (int d = 0; d < D; ++d)
                acc += static_cast<double>(qr[d]) * k[d];
              return acc;
            },
            [&](int j) { return row(b, j, 1, kvh); }, out.data() + qi,
            sinks.empty() ? nullptr : &sink);
      }
  return out;
}

std::vector<double> mlaDecode(int batch, int qLen, int heads, int maxPages,
                              const std::vector<float> &q, const std::vector<float> &pool,
                              const std::vector<int32_t> &blockTable,
                              const std::vector<int32_t> &seqLens, double scale) {
  constexpr int Dqk = 576, Dv = 512, Page = 64;
  std::vector<double> out(static_cast<size_t>(batch) * qLen * heads * Dv);
  for (int b = 0; b < batch; ++b) {
    auto key = [&](int pos) {
      size_t page = static_cast<size_t>(blockTable[static_cast<size_t>(b) * maxPages + pos / Page]);
      return pool.data() + (page * Page + pos % Page) * Dqk;
    };
    for (int i = 0; i < qLen; ++i)
      for (int h = 0; h < heads; ++h) {
        size_t r = (static_cast<size_t>(b) * qLen + i) * heads + h;
        const float *qr = q.data() + r * Dqk;
        attendRow(
            0, seqLens[b] - qLen + 1 + i, Dv, scale,
            [&](int j) {
              const float *k = key(j);
              double acc = 0;
              for (int d = 0; d < Dqk; ++d)
                acc += static_cast<double>(qr[d]) * k[d];
              return acc;
            },
            key, out.data() + r * Dv);
      }
  }
  return out;
}

} // namespace kiln::reference
