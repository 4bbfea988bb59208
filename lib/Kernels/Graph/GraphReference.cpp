#include "GraphReference.h"

#include "RopeFrequencies.h"

#include <algorithm>
#include <functional>
#include <cmath>
#include <vector>
#include <cstring>
#include <limits>

namespace kiln::reference {

float bf16ToFloat(uint16_t bits) {
  const uint32_t word = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &word, sizeof(value));
  return value;
}

uint16_t floatToBf16(float value) {
  uint32_t word;
  std::memcpy(&word, &value, sizeof(word));
  if (std::isnan(value))
    return static_cast<uint16_t>((word >> 16) | 0x40);
  const uint32_t roundingBias = 0x7fff + ((word >> 16) & 1);
  return static_cast<uint16_t>((word + roundingBias) >> 16);
}

uint16_t doubleToBf16(double value) {
  // Round to fp32 with round-to-odd, then to bf16 with round-to-nearest-even: fp32 keeps
  // more than two extra bits, so the result is the once-rounded bf16 of `value`.
  float f = static_cast<float>(value);
  if (std::isfinite(value) && std::isfinite(f) && static_cast<double>(f) != value) {
    uint32_t word;
    std::memcpy(&word, &f, sizeof(word));
    if ((word & 1u) == 0) {
      f = std::nextafter(f, static_cast<float>(value > static_cast<double>(f) ? INFINITY
                                                                              : -INFINITY));
    }
  }
  return floatToBf16(f);
}

namespace {
void copyRowsOrZero(const uint16_t *src, const int32_t *index, uint16_t *out, int64_t rows,
                    int64_t dim, int64_t numSource) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t s = index[r];
    for (int64_t j = 0; j < dim; ++j)
      out[r * dim + j] = (s >= 0 && s < numSource) ? src[s * dim + j] : 0;
  }
}
} // namespace

void embeddingReference(const int32_t *ids, const uint16_t *table, uint16_t *out,
                        int64_t tokens, int64_t vocab, int64_t hidden) {
  copyRowsOrZero(table, ids, out, tokens, hidden, vocab);
}

void gatherRowsReference(const uint16_t *x, const int32_t *rows, uint16_t *out,
                         int64_t numRows, int64_t dim, int64_t numSourceRows) {
  copyRowsOrZero(x, rows, out, numRows, dim, numSourceRows);
}

void embeddingRowsReference(const int32_t *ids, const uint16_t *table, uint16_t *out,
                            int64_t tokens, int64_t first, int64_t rows, int64_t hidden) {
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t s = static_cast<int64_t>(ids[t]) - first;
    for (int64_t j = 0; j < hidden; ++j)
      out[t * hidden + j] = (s >= 0 && s < rows) ? table[s * hidden + j] : 0;
  }
}

void blocksToColumnsReference(const uint16_t *blocks, uint16_t *out, int64_t parts, int64_t rows,
                              int64_t cols) {
  for (int64_t p = 0; p < parts; ++p)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < cols; ++j)
        out[r * parts * cols + p * cols + j] = blocks[(p * rows + r) * cols + j];
}

void rmsNormReference(const uint16_t *x, const uint16_t *weight, uint16_t *out, int64_t rows,
                      int64_t dim, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t *row = x + r * dim;
    double sum = 0.0;
    for (int64_t j = 0; j < dim; ++j) {
      const double v = bf16ToFloat(row[j]);
      sum += v * v;
    }
    const double scale = 1.0 / std::sqrt(sum / static_cast<double>(dim) + eps);
    for (int64_t j = 0; j < dim; ++j) {
      const uint16_t h = doubleToBf16(bf16ToFloat(row[j]) * scale);
      // The product of two bf16 values is exact in fp32.
      out[r * dim + j] = floatToBf16(bf16ToFloat(weight[j]) * bf16ToFloat(h));
    }
  }
}

bool ropeInvFreqReference(const kiln_rope_params_t &rope, int64_t headDim, float *invFreq) {
  return kiln::graph::ropeInverseFrequencies(rope, headDim, invFreq);
}

void ropeCosSinReference(int32_t position, float invFreq, float attentionFactor,
                         uint16_t *cos, uint16_t *sin) {
  const float angle = static_cast<float>(position) * invFreq; // one fp32 multiply
  const float c = static_cast<float>(std::cos(static_cast<double>(angle)));
  const float s = static_cast<float>(std::sin(static_cast<double>(angle)));
  *cos = floatToBf16(c * attentionFactor);
  *sin = floatToBf16(s * attentionFactor);
}

bool ropeReference(const uint16_t *x, const int32_t *positions, uint16_t *out, int64_t tokens,
                   int64_t heads, int64_t headDim, int64_t rotaryDim,
                   const kiln_rope_params_t &rope) {
  const int64_t rotary = rotaryDim == 0 ? headDim : rotaryDim;
  const int64_t half = rotary / 2;
  float inv[KILN_ROPE_MAX_HEAD_DIM / 2];
  if (headDim > KILN_ROPE_MAX_HEAD_DIM || rotary > headDim ||
      !ropeInvFreqReference(rope, rotary, inv))
    return false;
  // transformers' cat([rotated, x[..., rotary_dim:]]): the tail passes through.
  for (int64_t row = 0; row < tokens * heads; ++row)
    for (int64_t j = rotary; j < headDim; ++j)
      out[row * headDim + j] = x[row * headDim + j];
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t f = 0; f < half; ++f) {
      uint16_t cb, sb;
      ropeCosSinReference(positions[t], inv[f], rope.attention_factor, &cb, &sb);
      const float c = bf16ToFloat(cb), s = bf16ToFloat(sb);
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t base = (t * heads + h) * headDim;
        const float x1 = bf16ToFloat(x[base + f]), x2 = bf16ToFloat(x[base + f + half]);
        // q * cos + rotate_half(q) * sin, rotate_half(q) = cat(-q2, q1).
        const float a1 = bf16ToFloat(floatToBf16(x1 * c));
        const float b1 = bf16ToFloat(floatToBf16(-x2 * s));
        const float a2 = bf16ToFloat(floatToBf16(x2 * c));
        const float b2 = bf16ToFloat(floatToBf16(x1 * s));
        out[base + f] = floatToBf16(a1 + b1);
        out[base + f + half] = floatToBf16(a2 + b2);
      }
    }
  }
  return true;
}

void addReference(const uint16_t *a, const uint16_t *b, uint16_t *out, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = floatToBf16(bf16ToFloat(a[i]) + bf16ToFloat(b[i]));
}

void swigluReference(const uint16_t *gate, const uint16_t *up, uint16_t *out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = bf16ToFloat(gate[i]);
    const uint16_t act = doubleToBf16(g / (1.0 + std::exp(-g)));
    out[i] = floatToBf16(bf16ToFloat(act) * bf16ToFloat(up[i]));
  }
}

void sigmoidGateReference(const uint16_t *x, const uint16_t *w, const uint16_t *value,
                          uint16_t *out, int64_t rows, int64_t dim, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    double dot = 0.0;
    for (int64_t i = 0; i < dim; ++i)
      dot += static_cast<double>(bf16ToFloat(x[r * dim + i])) * bf16ToFloat(w[i]);
    const double g = bf16ToFloat(doubleToBf16(dot));
    const float s = bf16ToFloat(doubleToBf16(1.0 / (1.0 + std::exp(-g))));
    for (int64_t c = 0; c < cols; ++c)
      out[r * cols + c] = floatToBf16(bf16ToFloat(value[r * cols + c]) * s);
  }
}

void gatedRmsNormReference(const uint16_t *x, const uint16_t *gate, const uint16_t *weight,
                           uint16_t *out, int64_t rows, int64_t width, int64_t gateStride,
                           int64_t groupSize, double eps) {
  std::vector<double> y(static_cast<size_t>(groupSize));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t first = 0; first < width; first += groupSize) {
      double squares = 0.0;
      for (int64_t i = 0; i < groupSize; ++i) {
        const double g = bf16ToFloat(gate[r * gateStride + first + i]);
        y[i] = bf16ToFloat(x[r * width + first + i]) * (g / (1.0 + std::exp(-g)));
        squares += y[i] * y[i];
      }
      const double inv = 1.0 / std::sqrt(squares / static_cast<double>(groupSize) + eps);
      for (int64_t i = 0; i < groupSize; ++i) {
        const float normed = bf16ToFloat(doubleToBf16(y[i] * inv));
        out[r * width + first + i] =
            doubleToBf16(static_cast<double>(bf16ToFloat(weight[first + i])) * normed);
      }
    }
}

uint16_t rmsNormOffsetOf(uint16_t x, float scale, uint16_t weight, float weightOffset) {
  return floatToBf16((bf16ToFloat(x) * scale) * (weightOffset + bf16ToFloat(weight)));
}

uint16_t rmsNormGateOf(uint16_t x, float scale, uint16_t weight, float silu) {
  const float normed = bf16ToFloat(floatToBf16(bf16ToFloat(x) * scale));
  const float weighted = bf16ToFloat(floatToBf16(bf16ToFloat(weight) * normed));
  return floatToBf16(weighted * silu);
}

uint16_t sigmoidMulOf(uint16_t x, float sigmoid) {
  return floatToBf16(bf16ToFloat(x) * bf16ToFloat(floatToBf16(sigmoid)));
}

float rmsScaleReference(const uint16_t *x, int64_t n, double eps) {
  double squares = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double v = bf16ToFloat(x[i]);
    squares += v * v;
  }
  return static_cast<float>(1.0 / std::sqrt(squares / static_cast<double>(n) + eps));
}

float siluReference(uint16_t gate) {
  const double g = bf16ToFloat(gate);
  return static_cast<float>(g / (1.0 + std::exp(-g)));
}

float sigmoidReference(uint16_t gate) {
  return static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(bf16ToFloat(gate)))));
}

void rmsNormOffsetReference(const uint16_t *x, int64_t tokenStride, int64_t headStride,
                            const uint16_t *weight, uint16_t *out, int64_t tokens, int64_t heads,
                            int64_t dim, double eps, float weightOffset) {
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t h = 0; h < heads; ++h) {
      const uint16_t *row = x + t * tokenStride + h * headStride;
      const float scale = rmsScaleReference(row, dim, eps);
      for (int64_t i = 0; i < dim; ++i)
        out[(t * heads + h) * dim + i] = rmsNormOffsetOf(row[i], scale, weight[i], weightOffset);
    }
}

void rmsNormGateReference(const uint16_t *x, const uint16_t *gate, const uint16_t *weight,
                          uint16_t *out, int64_t rows, int64_t width, int64_t gateStride,
                          int64_t groupSize, double eps) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t first = 0; first < width; first += groupSize) {
      const uint16_t *xg = x + r * width + first;
      const float scale = rmsScaleReference(xg, groupSize, eps);
      for (int64_t i = 0; i < groupSize; ++i)
        out[r * width + first + i] =
            rmsNormGateOf(xg[i], scale, weight[i], siluReference(gate[r * gateStride + first + i]));
    }
}

void sigmoidMulReference(const uint16_t *x, const uint16_t *gate, uint16_t *out, int64_t rows,
                         int64_t dim, int64_t gateStride) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < dim; ++i)
      out[r * dim + i] = sigmoidMulOf(x[r * dim + i], sigmoidReference(gate[r * gateStride + i]));
}

void activationReference(const uint16_t *x, uint16_t *out, int64_t n, int kind) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = bf16ToFloat(x[i]);
    out[i] = doubleToBf16(kind == 0 ? (v > 0.0 ? v * v : 0.0) : v / (1.0 + std::exp(-v)));
  }
}

void argmaxReference(const uint16_t *logits, int32_t *out, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    int64_t best = 0;
    float bestValue = bf16ToFloat(logits[r * cols]);
    for (int64_t c = 1; c < cols; ++c) {
      const float v = bf16ToFloat(logits[r * cols + c]);
      if (std::isnan(bestValue))
        break; // the first NaN wins
      if (std::isnan(v) || v > bestValue) {
        best = c;
        bestValue = v;
      }
    }
    out[r] = static_cast<int32_t>(best);
  }
}

void gemmReference(const uint16_t *x, const uint16_t *w, const uint16_t *bias, double *out,
                   int64_t m, int64_t n, int64_t k) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = bias ? bf16ToFloat(bias[j]) : 0.0;
      for (int64_t p = 0; p < k; ++p)
        sum += static_cast<double>(bf16ToFloat(x[i * k + p])) * bf16ToFloat(w[j * k + p]);
      out[i * n + j] = sum;
    }
  }
}

namespace {

// DeepSeek's group-limited routing (Moe.h): keys outside the top_groups best groups
// (a group's key: the sum of its two largest, or with groupMax its largest) become -inf:
// never chosen, whatever the sign of the kept keys (sigmoid scores plus a negative bias).
void maskGroups(std::vector<double> &choice, int32_t groups, int32_t topGroups, bool groupMax) {
  const size_t size = choice.size() / static_cast<size_t>(groups);
  std::vector<std::pair<double, int32_t>> keys;
  for (int32_t g = 0; g < groups; ++g) {
    std::vector<double> members(choice.begin() + g * size, choice.begin() + (g + 1) * size);
    std::partial_sort(members.begin(), members.begin() + 2, members.end(), std::greater<>());
    keys.push_back({groupMax ? members[0] : members[0] + members[1], -g}); // ties: the lower group
  }
  std::sort(keys.begin(), keys.end(), std::greater<>());
  std::vector<bool> kept(static_cast<size_t>(groups), false);
  for (int32_t j = 0; j < topGroups; ++j)
    kept[static_cast<size_t>(-keys[j].second)] = true;
  for (size_t e = 0; e < choice.size(); ++e)
    if (!kept[e / size])
      choice[e] = -std::numeric_limits<double>::infinity();
}

} // namespace

void moeRouteReference(const float *logits, int64_t experts, const MoeOptions &o, int32_t *ids,
                       float *weights) {
  std::vector<double> scores(static_cast<size_t>(experts));
  if (o.flags & KILN_MOE_SIGMOID) {
    for (int64_t e = 0; e < experts; ++e)
      scores[e] = 1.0 / (1.0 + std::exp(-static_cast<double>(logits[e])));
  } else {
    double maxLogit = -INFINITY, sum = 0.0;
    for (int64_t e = 0; e < experts; ++e)
      maxLogit = std::max(maxLogit, static_cast<double>(logits[e]));
    for (int64_t e = 0; e < experts; ++e)
      sum += scores[e] = std::exp(logits[e] - maxLogit);
    for (double &s : scores)
      s /= sum;
  }
  std::vector<double> choice(scores);
  if (o.scoreBias)
    for (int64_t e = 0; e < experts; ++e)
      choice[e] += o.scoreBias[e];
  if (o.groups > 1)
    maskGroups(choice, o.groups, o.topGroups, (o.flags & KILN_MOE_GROUP_MAX) != 0);
  std::vector<std::pair<int32_t, double>> chosen;
  std::vector<bool> taken(static_cast<size_t>(experts), false);
  for (int32_t j = 0; j < o.topK; ++j) {
    int64_t best = -1;
    for (int64_t e = 0; e < experts; ++e)
      if (!taken[e] && (best < 0 || choice[e] > choice[best]))
        best = e;
    chosen.push_back({static_cast<int32_t>(best), scores[best]});
    taken[best] = true;
  }
  double total = 0.0;
  for (const auto &c : chosen)
    total += c.second;
  std::sort(chosen.begin(), chosen.end());
  for (int32_t j = 0; j < o.topK; ++j) {
    ids[j] = chosen[j].first;
    double w = chosen[j].second;
    if (o.flags & KILN_MOE_NORMALIZE_TOP_K)
      w /= total;
    w *= o.scale;
    weights[j] = (o.flags & KILN_MOE_ROUND_WEIGHTS) ? bf16ToFloat(doubleToBf16(w))
                                                    : static_cast<float>(w);
  }
}

uint16_t clampedSwigluReference(uint16_t gate, uint16_t up, float alpha, float limit) {
  const auto op = [](float v) { return bf16ToFloat(floatToBf16(v)); }; // one bf16 op
  float g = bf16ToFloat(gate), u = bf16ToFloat(up);
  if (g > limit) // torch.clamp(max=limit); a NaN stays
    g = limit;
  if (u > limit)
    u = limit;
  else if (u < -limit)
    u = -limit;
  g = op(g);
  u = op(u);
  const double z = op(g * alpha);
  const float sigmoid = bf16ToFloat(doubleToBf16(1.0 / (1.0 + std::exp(-z))));
  const float glu = op(g * sigmoid);
  return floatToBf16(op(u + 1.0f) * glu);
}

void moeReference(const uint16_t *x, const float *logits, const uint16_t *gate,
                  const uint16_t *up, const uint16_t *down, uint16_t *out, int64_t tokens,
                  int64_t hidden, int64_t inter, int64_t experts, const MoeOptions &o) {
  std::vector<int32_t> ids(static_cast<size_t>(o.topK));
  std::vector<float> weights(static_cast<size_t>(o.topK));
  std::vector<double> wide(static_cast<size_t>(std::max(hidden, inter)));
  std::vector<uint16_t> g(static_cast<size_t>(inter)), u(g.size()), act(g.size()),
      y(static_cast<size_t>(hidden));
  for (int64_t t = 0; t < tokens; ++t) {
    moeRouteReference(logits + t * experts, experts, o, ids.data(), weights.data());
    std::vector<float> acc(static_cast<size_t>(hidden), 0.0f);
    for (int32_t j = 0; j < o.topK; ++j) {
      const int64_t e = ids[j];
      // nn.Linear's output (one rounding of the exact sum), then the bias as a bf16 add.
      const auto linear = [&](const uint16_t *w, const uint16_t *bias, const uint16_t *in,
                              int64_t n, int64_t k, uint16_t *result) {
        gemmReference(in, w + e * n * k, nullptr, wide.data(), 1, n, k);
        for (int64_t i = 0; i < n; ++i) {
          result[i] = doubleToBf16(wide[i]);
          if (bias)
            result[i] = floatToBf16(bf16ToFloat(result[i]) + bf16ToFloat(bias[e * n + i]));
        }
      };
      linear(up, o.upBias, x + t * hidden, inter, hidden, u.data());
      if (gate) {
        linear(gate, o.gateBias, x + t * hidden, inter, hidden, g.data());
        if (o.flags & KILN_MOE_CLAMPED_SWIGLU)
          for (int64_t i = 0; i < inter; ++i)
            act[i] = clampedSwigluReference(g[i], u[i], o.gluAlpha, o.gluLimit);
        else
          swigluReference(g.data(), u.data(), act.data(), inter);
      } else {
        activationReference(u.data(), act.data(), inter, o.activation);
      }
      linear(down, o.downBias, act.data(), hidden, inter, y.data());
      for (int64_t h = 0; h < hidden; ++h) {
        if (o.flags & KILN_MOE_F32_COMBINE) {
          acc[h] += bf16ToFloat(y[h]) * weights[j];
        } else {
          const float part = bf16ToFloat(floatToBf16(bf16ToFloat(y[h]) * weights[j]));
          acc[h] = bf16ToFloat(floatToBf16(acc[h] + part));
        }
      }
    }
    for (int64_t h = 0; h < hidden; ++h)
      out[t * hidden + h] = floatToBf16(acc[h]);
  }
}

} // namespace kiln::reference
