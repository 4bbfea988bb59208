// Host-side helpers for the Mamba kernel tests: typed host tensors (values kept as the
// doubles the device will see) and random fills.
#ifndef KILN_TEST_KERNELS_MAMBA_MAMBATESTUTIL_H
#define KILN_TEST_KERNELS_MAMBA_MAMBATESTUTIL_H

#include "kiln/Kernels/HostNumeric.h"
#include "kiln/Kernels/Status.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace kiln::test {

inline int dtypeSize(kiln_dtype_t t) { return t == KILN_DTYPE_F32 ? 4 : 2; }

inline double roundToDtype(double v, kiln_dtype_t t) {
  float f = static_cast<float>(v);
  if (t == KILN_DTYPE_BF16)
    return kiln_bf16_to_float(kiln_float_to_bf16(f));
  if (t == KILN_DTYPE_F16)
    return kiln_f16_to_float(kiln_float_to_f16(f));
  return f;
}

// A tensor stored as raw bytes of `dtype`, readable and writable as doubles.
struct HostTensor {
  kiln_dtype_t dtype = KILN_DTYPE_F32;
  size_t count = 0;
  std::vector<uint8_t> bytes;

  HostTensor() = default;
  HostTensor(kiln_dtype_t t, size_t n) : dtype(t), count(n), bytes(n * dtypeSize(t), 0) {}

  double get(size_t i) const {
    if (dtype == KILN_DTYPE_F32) {
      float f;
      std::memcpy(&f, &bytes[i * 4], 4);
      return f;
    }
    uint16_t h;
    std::memcpy(&h, &bytes[i * 2], 2);
    return dtype == KILN_DTYPE_BF16 ? kiln_bf16_to_float(h) : kiln_f16_to_float(h);
  }
  void set(size_t i, double v) {
    float f = static_cast<float>(v);
    if (dtype == KILN_DTYPE_F32) {
      std::memcpy(&bytes[i * 4], &f, 4);
      return;
    }
    uint16_t h = dtype == KILN_DTYPE_BF16 ? kiln_float_to_bf16(f) : kiln_float_to_f16(f);
    std::memcpy(&bytes[i * 2], &h, 2);
  }
  std::vector<double> toDouble() const {
    std::vector<double> out(count);
    for (size_t i = 0; i < count; ++i)
      out[i] = get(i);
    return out;
  }
  size_t elemBytes() const { return static_cast<size_t>(dtypeSize(dtype)); }
  bool sameBytes(size_t first, size_t n, const HostTensor &other) const {
    return std::memcmp(&bytes[first * elemBytes()], &other.bytes[first * elemBytes()],
                       n * elemBytes()) == 0;
  }
};

struct Rng {
  std::mt19937_64 engine;
  explicit Rng(uint64_t seed) : engine(seed) {}
  double uniform(double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(engine);
  }
  void fill(HostTensor &t, double lo, double hi) {
    for (size_t i = 0; i < t.count; ++i)
      t.set(i, uniform(lo, hi));
  }
  void fill(std::vector<float> &v, double lo, double hi) {
    for (float &f : v)
      f = static_cast<float>(uniform(lo, hi));
  }
};

// Slot indices for a ragged batch: a random permutation of the slots, with every
// `padEvery`-th sequence marked as padding (-1) when padEvery > 0.
inline std::vector<int32_t> makeIndices(Rng &rng, int batch, int slots, int padEvery) {
  std::vector<int32_t> perm(slots);
  for (int i = 0; i < slots; ++i)
    perm[i] = i;
  std::shuffle(perm.begin(), perm.end(), rng.engine);
  std::vector<int32_t> idx(batch);
  for (int b = 0; b < batch; ++b)
    idx[b] = (padEvery > 0 && b % padEvery == padEvery - 1) ? -1 : perm[b];
  return idx;
}

// A ragged batch of prompts packed token after token: cu_seqlens and the slot of every
// sequence (the slots in reverse order; the sequence at padIndex is padding, -1).
struct PackedPrompts {
  std::vector<int32_t> cu{0}, slots;
  int tokens() const { return cu.back(); }
  int batch() const { return static_cast<int>(slots.size()); }
};

inline PackedPrompts packPrompts(const std::vector<int> &lengths, int padIndex) {
  PackedPrompts p;
  for (size_t b = 0; b < lengths.size(); ++b) {
    p.cu.push_back(p.cu.back() + lengths[b]);
    const int slot = static_cast<int>(lengths.size() - 1 - b);
    p.slots.push_back(static_cast<int>(b) == padIndex ? -1 : slot);
  }
  return p;
}

} // namespace kiln::test

#endif
