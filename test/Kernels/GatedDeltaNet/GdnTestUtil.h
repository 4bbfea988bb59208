// A random prompt for the Gated DeltaNet prefill tests (GdnCpuTest, the emulation test,
// GdnGpuTest): packed sequences of given lengths with bf16 q, k, v as the device sees
// them, fp32 g and beta, an fp32 initial state per slot, shuffled slots and optional
// padding sequences, and the fp64 token-by-token reference of the whole prompt.
#ifndef KILN_TEST_KERNELS_GATEDDELTANET_GDNTESTUTIL_H
#define KILN_TEST_KERNELS_GATEDDELTANET_GDNTESTUTIL_H

#include "GdnReference.h"
#include "kiln/Kernels/HostNumeric.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

namespace kiln::test {

struct GdnPromptData {
  int kHeads, vHeads, kDim, vDim, slots;
  bool l2norm;
  std::vector<int32_t> cu, indices; // [batch + 1], [batch]
  std::vector<uint16_t> q, k, v;    // bf16
  std::vector<float> g, beta, state;

  // `lengths` per sequence; `padding` lists sequences whose slot is -1. Without l2norm
  // the keys are drawn with norm about 1 (normal / sqrt(k_dim)): the delta rule's
  // I - beta k k^T then contracts, as it does with normalized keys.
  GdnPromptData(const std::vector<int> &lengths, const std::vector<int> &padding, int kHeads,
                int vHeads, int kDim, int vDim, bool l2norm, unsigned seed,
                float stateScale = 0.1f)
      : kHeads(kHeads), vHeads(vHeads), kDim(kDim), vDim(vDim),
        slots(static_cast<int>(lengths.size()) + 2), l2norm(l2norm) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> unit(0.0f, 1.0f);
    const int batch = static_cast<int>(lengths.size());
    cu.push_back(0);
    for (int len : lengths)
      cu.push_back(cu.back() + len);
    std::vector<int32_t> all(slots);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    indices.assign(all.begin(), all.begin() + batch);
    for (int b : padding)
      indices[b] = -1;
    const int tokens = cu.back();
    const float keyScale = l2norm ? 1.0f : 1.0f / std::sqrt(static_cast<float>(kDim));
    auto bf16s = [&](size_t n, float scale) {
      std::vector<uint16_t> out(n);
      for (auto &x : out)
        x = kiln_float_to_bf16(scale * normal(rng));
      return out;
    };
    q = bf16s(size_t(tokens) * kHeads * kDim, keyScale);
    k = bf16s(size_t(tokens) * kHeads * kDim, keyScale);
    v = bf16s(size_t(tokens) * vHeads * vDim, 1.0f);
    for (int i = 0; i < tokens * vHeads; ++i) {
      g.push_back(-0.5f * unit(rng)); // decay in (e^-0.5, 1]
      beta.push_back(unit(rng));      // write strength in (0, 1)
    }
    for (size_t i = 0; i < size_t(slots) * vHeads * kDim * vDim; ++i)
      state.push_back(stateScale * normal(rng));
  }
  int batch() const { return static_cast<int>(indices.size()); }
  int tokens() const { return cu.back(); }
  size_t outCount() const { return size_t(tokens()) * vHeads * vDim; }

  // The fp64 token-by-token reference: final states (all slots) and outputs (NaN where a
  // padding sequence's rows are: not written).
  void reference(std::vector<double> &finalState, std::vector<double> &out) const {
    auto doubles = [](const std::vector<uint16_t> &x) {
      std::vector<double> d(x.size());
      for (size_t i = 0; i < x.size(); ++i)
        d[i] = kiln_bf16_to_float(x[i]);
      return d;
    };
    const std::vector<double> qd = doubles(q), kd = doubles(k), vd = doubles(v);
    const std::vector<double> gd(g.begin(), g.end()), bd(beta.begin(), beta.end());
    finalState.assign(state.begin(), state.end());
    out.assign(outCount(), NAN);
    reference::GdnPrompt p{batch(), cu.data(), indices.data(), slots, kHeads, vHeads, kDim,
                           vDim, qd.data(), kd.data(), vd.data(), gd.data(), bd.data(),
                           l2norm, 0.0};
    reference::gdnPromptReference(p, finalState.data(), out.data());
  }
};

// Rows [cu[b], cu[b] + firstLen[b]) of every sequence of `whole` (first) or the rest
// (!first), as a prompt of their own with whole's slots and initial states: a prompt split
// over two calls.
inline GdnPromptData splitPrompt(const GdnPromptData &whole, const std::vector<int> &firstLen,
                                 bool first) {
  GdnPromptData d = whole;
  d.cu = {0};
  d.q.clear(), d.k.clear(), d.v.clear(), d.g.clear(), d.beta.clear();
  for (int b = 0; b < whole.batch(); ++b) {
    const int from = whole.cu[b] + (first ? 0 : firstLen[b]);
    const int to = first ? whole.cu[b] + firstLen[b] : whole.cu[b + 1];
    auto rows = [&](const auto &src, auto &dst, size_t width) {
      dst.insert(dst.end(), src.begin() + from * width, src.begin() + to * width);
    };
    rows(whole.q, d.q, size_t(whole.kHeads) * whole.kDim);
    rows(whole.k, d.k, size_t(whole.kHeads) * whole.kDim);
    rows(whole.v, d.v, size_t(whole.vHeads) * whole.vDim);
    rows(whole.g, d.g, whole.vHeads);
    rows(whole.beta, d.beta, whole.vHeads);
    d.cu.push_back(d.cu.back() + (to - from));
  }
  return d;
}

// The outputs of the two calls of splitPrompt in the whole prompt's row order.
inline std::vector<uint16_t> joinOutputs(const GdnPromptData &whole, const GdnPromptData &first,
                                         const std::vector<uint16_t> &a,
                                         const GdnPromptData &second,
                                         const std::vector<uint16_t> &b) {
  std::vector<uint16_t> out;
  const size_t width = size_t(whole.vHeads) * whole.vDim;
  for (int s = 0; s < whole.batch(); ++s) {
    out.insert(out.end(), a.begin() + first.cu[s] * width, a.begin() + first.cu[s + 1] * width);
    out.insert(out.end(), b.begin() + second.cu[s] * width,
               b.begin() + second.cu[s + 1] * width);
  }
  return out;
}

// Worst errors of a kernel's results against the reference: outputs |got - ref| /
// (|ref| + 0.05) over the written rows (as GdnGpuTest's update cases), states |got - ref|
// / (|ref| + rms(ref)) over every slot (as the Mamba chunk scan's: the chunked form's
// products carry ~2^-17 relative error of their own magnitude, where a state value that
// cancels to near zero has no relative precision of its own); counts outputs of padding
// rows that were written (not NaN-poisoned 0xFFFF) and slots without tokens that changed.
struct GdnErrors {
  double out = 0, state = 0;
  long paddingWritten = 0, untouchedChanged = 0;
};
inline GdnErrors compareToReference(const GdnPromptData &p, const std::vector<uint16_t> &out,
                                    const std::vector<float> &state) {
  std::vector<double> refState, refOut;
  p.reference(refState, refOut);
  GdnErrors e;
  for (size_t i = 0; i < refOut.size(); ++i) {
    if (std::isnan(refOut[i])) {
      e.paddingWritten += out[i] != 0xFFFF;
      continue;
    }
    const double got = kiln_bf16_to_float(out[i]);
    const double err = std::fabs(got - refOut[i]) / (std::fabs(refOut[i]) + 0.05);
    e.out = std::max(e.out, std::isnan(err) ? INFINITY : err);
  }
  double squares = 0;
  for (double r : refState)
    squares += r * r;
  const double rms = std::sqrt(squares / refState.size());
  for (size_t i = 0; i < refState.size(); ++i) {
    const double err = std::fabs(state[i] - refState[i]) / (std::fabs(refState[i]) + rms);
    e.state = std::max(e.state, std::isnan(err) ? INFINITY : err);
  }
  // Slots no sequence with tokens reaches keep their bytes.
  std::vector<bool> touched(p.slots, false);
  for (int b = 0; b < p.batch(); ++b)
    if (p.indices[b] >= 0 && p.cu[b + 1] > p.cu[b])
      touched[p.indices[b]] = true;
  const size_t perSlot = size_t(p.vHeads) * p.kDim * p.vDim;
  for (int s = 0; s < p.slots; ++s)
    if (!touched[s])
      for (size_t i = 0; i < perSlot; ++i)
        e.untouchedChanged += state[s * perSlot + i] != p.state[s * perSlot + i];
  return e;
}

// ---- gdn_prepare's gate formulas on the host (kiln/Kernels/GatedDeltaNet.h), in fp32 and
// bf16 as the kernel rounds them; g and beta go through expf and log1pf, whose last fp32
// bit may differ between host and device.

inline float roundBf16(float x) { return kiln_bf16_to_float(kiln_float_to_bf16(x)); }

// g = -exp(a_log) softplus(a + dt_bias) (torch's softplus, threshold 20).
inline float gdnGateReference(uint16_t a, float aLog, float dtBias) {
  const float x = kiln_bf16_to_float(a) + dtBias;
  const float softplus = x > 20.0f ? x : std::log1p(std::exp(x));
  return -std::exp(aLog) * softplus;
}

// sigmoid(b) in fp32, before the bf16 rounding of beta.
inline float gdnSigmoidReference(uint16_t b) {
  return 1.0f / (1.0f + std::exp(-kiln_bf16_to_float(b)));
}

} // namespace kiln::test

#endif
