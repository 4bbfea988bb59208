// RoPE inverse frequencies, computed on the host exactly as Hugging Face transformers
// computes its `inv_freq` buffer (fp32 tensor ops on the CPU, once at model init).
// Header-only so that the launcher and the CPU reference share the one implementation
// (there is a single definition of the rope frequency math in Kiln).
//
// Every line mirrors one PyTorch fp32 operation; notes on the operations:
//  - `scalar / tensor` is `tensor.reciprocal() * scalar` in PyTorch (two roundings);
//  - a Python float meeting an fp32 tensor is first rounded to fp32;
//  - `base ** t` is evaluated here in double and rounded once (the correctly rounded
//    fp32 power, which PyTorch's powf agrees with but for rare last-bit cases).
#ifndef KILN_LIB_KERNELS_GRAPH_ROPEFREQUENCIES_H
#define KILN_LIB_KERNELS_GRAPH_ROPEFREQUENCIES_H

#include "kiln/Kernels/Graph.h"

#include <cmath>
#include <cstdint>

namespace kiln::graph {

enum RopeType : int32_t { kRopeDefault = 0, kRopeLinear = 1, kRopeLlama3 = 2, kRopeYarn = 3 };

// base ** (arange(0, dim, 2).float() / dim), fp32.
inline float ropePositionFrequency(float base, int64_t i, int64_t headDim) {
  const float exponent = static_cast<float>(2 * i) / static_cast<float>(headDim);
  return static_cast<float>(std::pow(static_cast<double>(base), static_cast<double>(exponent)));
}

// Writes headDim / 2 inverse frequencies into inv. Returns false for an unknown type.
// The arguments are assumed valid (the launcher checks them).
inline bool ropeInverseFrequencies(const kiln_rope_params_t &p, int64_t headDim, float *inv) {
  const int64_t half = headDim / 2;
  switch (p.type) {
  case kRopeDefault:
  case kRopeLinear:
  case kRopeLlama3:
    // _compute_default_rope_parameters: 1.0 / (base ** (arange(0, dim, 2) / dim))
    for (int64_t i = 0; i < half; ++i)
      inv[i] = 1.0f / ropePositionFrequency(p.theta, i, headDim);
    break;
  case kRopeYarn: {
    // _compute_yarn_parameters: pos_freqs, extrapolation 1/pos, interpolation
    // 1/(factor*pos), blended by 1 - linear_ramp_factor(low, high, dim // 2).
    const double lowD = p.low;
    double highD = p.high;
    if (lowD == highD)
      highD += 0.001; // linear_ramp_factor: "prevent singularity"
    const float low = static_cast<float>(lowD);
    const float range = static_cast<float>(highD - lowD);
    for (int64_t i = 0; i < half; ++i) {
      const float pos = ropePositionFrequency(p.theta, i, headDim);
      const float extrapolation = 1.0f / pos;
      const float interpolation = 1.0f / (p.factor * pos);
      float ramp = (static_cast<float>(i) - low) / range;
      ramp = ramp < 0.0f ? 0.0f : (ramp > 1.0f ? 1.0f : ramp); // torch.clamp(_, 0, 1)
      const float extrapolationFactor = 1.0f - ramp;
      inv[i] = interpolation * (1.0f - extrapolationFactor) +
               extrapolation * extrapolationFactor;
    }
    return true;
  }
  default:
    return false;
  }
  if (p.type == kRopeLinear) {
    for (int64_t i = 0; i < half; ++i)
      inv[i] = inv[i] / p.factor; // inv_freq /= factor
  } else if (p.type == kRopeLlama3) {
    // _compute_llama3_parameters.
    const double orig = static_cast<double>(p.original_max_position);
    const float lowFreqWavelen = static_cast<float>(orig / p.low);
    const float highFreqWavelen = static_cast<float>(orig / p.high);
    const float twoPi = static_cast<float>(2.0 * 3.14159265358979323846);
    const float origF = static_cast<float>(orig);
    const float lowF = p.low;
    const float smoothRange = static_cast<float>(static_cast<double>(p.high) - p.low);
    for (int64_t i = 0; i < half; ++i) {
      const float f = inv[i];
      const float wavelen = (1.0f / f) * twoPi;                       // 2 * pi / inv_freq
      const float llama = wavelen > lowFreqWavelen ? f / p.factor : f; // torch.where
      const float smooth = ((1.0f / wavelen) * origF - lowF) / smoothRange;
      const float smoothed = (1.0f - smooth) * llama / p.factor + smooth * llama;
      const bool medium = !(wavelen < highFreqWavelen) && !(wavelen > lowFreqWavelen);
      inv[i] = medium ? smoothed : llama;
    }
  }
  return true;
}

} // namespace kiln::graph

#endif
