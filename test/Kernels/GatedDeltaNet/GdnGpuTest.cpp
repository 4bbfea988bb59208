// GPU tests of the Gated DeltaNet update: against the fp64 reference on random data
// (grouped heads, shuffled slots with a padding sequence, several tokens, l2norm on and
// off), and the speculative intermediates against repeated in-place updates, bitwise.
#include "GdnReference.h"
#include "GpuTest.h"
#include "kiln/Kernels/GatedDeltaNet.h"
#include "kiln/Kernels/HostNumeric.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

using kiln::reference::gdnUpdateReference;

namespace {

#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

template <typename T> struct Device {
  T *ptr = nullptr;
  explicit Device(const std::vector<T> &host) {
    if (cudaMalloc(&ptr, host.size() * sizeof(T) + 16) == cudaSuccess)
      cudaMemcpy(ptr, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  ~Device() { cudaFree(ptr); }
  std::vector<T> read(size_t n) const {
    std::vector<T> host(n);
    cudaMemcpy(host.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost);
    return host;
  }
};

// A problem: packed host data; activations held as the bf16 values the device sees.
struct Problem {
  int batch, tokens, kHeads, vHeads, kDim, vDim, slots;
  std::vector<int32_t> indices;
  std::vector<uint16_t> q, k, v; // bf16
  std::vector<float> g, beta, state;

  Problem(int batch, int tokens, int kHeads, int vHeads, int kDim, int vDim, unsigned seed)
      : batch(batch), tokens(tokens), kHeads(kHeads), vHeads(vHeads), kDim(kDim), vDim(vDim),
        slots(batch + 2) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> unit(0.0f, 1.0f);
    // Distinct slots in shuffled order (two sequences on one slot would race), and a
    // padding sequence.
    std::vector<int32_t> all(slots);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    indices.assign(all.begin(), all.begin() + batch);
    indices[batch / 2] = -1;
    auto bf16s = [&](size_t n) {
      std::vector<uint16_t> out(n);
      for (auto &x : out)
        x = kiln_float_to_bf16(normal(rng));
      return out;
    };
    q = bf16s(size_t(batch) * tokens * kHeads * kDim);
    k = bf16s(size_t(batch) * tokens * kHeads * kDim);
    v = bf16s(size_t(batch) * tokens * vHeads * vDim);
    for (int i = 0; i < batch * tokens * vHeads; ++i) {
      g.push_back(-unit(rng));          // decay in (e^-1, 1]
      beta.push_back(unit(rng));        // write strength in (0, 1)
    }
    for (size_t i = 0; i < size_t(slots) * vHeads * kDim * vDim; ++i)
      state.push_back(0.1f * normal(rng));
  }
  size_t headState() const { return size_t(kDim) * vDim; }
};

struct KernelRun {
  std::vector<float> state, intermediate;
  std::vector<uint16_t> out;
};

KernelRun runKernel(const Problem &p, bool spec, bool l2norm) {
  Device<float> state(p.state), g(p.g), beta(p.beta);
  Device<uint16_t> q(p.q), k(p.k), v(p.v);
  Device<int32_t> indices(p.indices);
  const size_t outCount = size_t(p.batch) * p.tokens * p.vHeads * p.vDim;
  Device<uint16_t> out(std::vector<uint16_t>(outCount, 0xFFFF));
  const size_t interCount = size_t(p.slots) * p.tokens * p.vHeads * p.headState();
  Device<float> inter(std::vector<float>(spec ? interCount : 1, NAN));
  kiln_gdn_update_params_t a{};
  a.state = state.ptr;
  a.num_slots = p.slots;
  a.state_indices = indices.ptr;
  a.intermediate = spec ? inter.ptr : nullptr;
  a.batch = p.batch;
  a.num_tokens = p.tokens;
  a.k_heads = p.kHeads;
  a.v_heads = p.vHeads;
  a.k_dim = p.kDim;
  a.v_dim = p.vDim;
  a.dtype = KILN_DTYPE_BF16;
  a.q = q.ptr;
  a.k = k.ptr;
  a.v = v.ptr;
  a.g = g.ptr;
  a.beta = beta.ptr;
  a.out = out.ptr;
  a.l2norm_qk = l2norm;
  KernelRun r;
  EXPECT_EQ(kiln_gdn_update(&a), KILN_OK) << kiln_last_error();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  r.state = state.read(p.state.size());
  r.out = out.read(outCount);
  if (spec)
    r.intermediate = inter.read(interCount);
  return r;
}

void expectMatchesReference(const Problem &p, bool l2norm) {
  KernelRun got = runKernel(p, false, l2norm);
  std::vector<double> state(p.state.begin(), p.state.end());
  double worstOut = 0, worstState = 0;
  for (int b = 0; b < p.batch; ++b) {
    const int slot = p.indices[b];
    const size_t outBase = size_t(b) * p.tokens * p.vHeads * p.vDim;
    if (slot < 0) {
      for (size_t i = 0; i < size_t(p.tokens) * p.vHeads * p.vDim; ++i)
        ASSERT_EQ(got.out[outBase + i], 0xFFFF) << "padding sequence " << b << " was written";
      continue;
    }
    double *s = &state[size_t(slot) * p.vHeads * p.headState()];
    for (int t = 0; t < p.tokens; ++t) {
      auto doubles = [&](const std::vector<uint16_t> &x, size_t first, size_t n) {
        std::vector<double> out(n);
        for (size_t i = 0; i < n; ++i)
          out[i] = kiln_bf16_to_float(x[first + i]);
        return out;
      };
      const size_t token = size_t(b) * p.tokens + t;
      auto q = doubles(p.q, token * p.kHeads * p.kDim, size_t(p.kHeads) * p.kDim);
      auto k = doubles(p.k, token * p.kHeads * p.kDim, size_t(p.kHeads) * p.kDim);
      auto v = doubles(p.v, token * p.vHeads * p.vDim, size_t(p.vHeads) * p.vDim);
      std::vector<double> g(&p.g[token * p.vHeads], &p.g[token * p.vHeads] + p.vHeads);
      std::vector<double> beta(&p.beta[token * p.vHeads], &p.beta[token * p.vHeads] + p.vHeads);
      std::vector<double> out(size_t(p.vHeads) * p.vDim);
      gdnUpdateReference(p.kHeads, p.vHeads, p.kDim, p.vDim, s, q.data(), k.data(), v.data(),
                         g.data(), beta.data(), l2norm, 0.0, out.data());
      for (size_t i = 0; i < out.size(); ++i) {
        const double kernel = kiln_bf16_to_float(got.out[token * p.vHeads * p.vDim + i]);
        // bf16 output: one rounding (2^-8 relative) plus fp32 accumulation.
        const double err = std::fabs(kernel - out[i]) / (std::fabs(out[i]) + 0.05);
        worstOut = std::max(worstOut, err);
      }
    }
  }
  for (size_t i = 0; i < state.size(); ++i)
    worstState = std::max(worstState, std::fabs(got.state[i] - state[i]) /
                                          (std::fabs(state[i]) + 1e-3));
  EXPECT_LT(worstOut, 1e-2);
  // fp32 state against fp64: unnormalized keys (norm ~sqrt(k_dim)) scale every rounding
  // of the 2 x k_dim-term sums up; measured 1.1e-4 at k_dim 64 (H200, 2026-12-03).
  EXPECT_LT(worstState, l2norm ? 1e-4 : 5e-4);
  std::printf("  k_dim %d v_dim %d, %d tokens, l2norm %d: worst out rel err %.2e, state %.2e\n",
              p.kDim, p.vDim, p.tokens, l2norm, worstOut, worstState);
}

TEST(GdnGpu, MatchesReferenceQwen3NextShapes) {
  KILN_REQUIRE_GPU();
  // Qwen3-Next per TP rank of 4: 4 key heads, 8 value heads of 128 x 128.
  expectMatchesReference(Problem(5, 1, 4, 8, 128, 128, 1), true);
  expectMatchesReference(Problem(3, 6, 4, 8, 128, 128, 2), true);
  expectMatchesReference(Problem(4, 3, 2, 2, 64, 64, 3), false);
  expectMatchesReference(Problem(2, 2, 1, 4, 64, 128, 4), true);
}

// Rewind-mode speculation: the intermediate of token t equals the slot's state after
// t + 1 in-place single-token updates, bit for bit, and the slot's state is not written.
TEST(GdnGpu, IntermediatesEqualRepeatedInPlaceUpdates) {
  KILN_REQUIRE_GPU();
  Problem p(4, 5, 4, 8, 128, 128, 7);
  KernelRun spec = runKernel(p, true, true);
  EXPECT_EQ(std::memcmp(spec.state.data(), p.state.data(), p.state.size() * 4), 0)
      << "the speculative update wrote the main state";
  Problem step = p;
  for (int t = 0; t < p.tokens; ++t) {
    // Token t of every sequence alone, in place.
    Problem one(p.batch, 1, p.kHeads, p.vHeads, p.kDim, p.vDim, 0);
    one.indices = p.indices;
    one.state = step.state;
    auto slice = [&](const auto &x, size_t perToken) {
      std::decay_t<decltype(x)> out;
      for (int b = 0; b < p.batch; ++b)
        out.insert(out.end(), x.begin() + (size_t(b) * p.tokens + t) * perToken,
                   x.begin() + (size_t(b) * p.tokens + t + 1) * perToken);
      return out;
    };
    one.q = slice(p.q, size_t(p.kHeads) * p.kDim);
    one.k = slice(p.k, size_t(p.kHeads) * p.kDim);
    one.v = slice(p.v, size_t(p.vHeads) * p.vDim);
    one.g = slice(p.g, p.vHeads);
    one.beta = slice(p.beta, p.vHeads);
    KernelRun r = runKernel(one, false, true);
    step.state = r.state;
    for (int b = 0; b < p.batch; ++b) {
      const int slot = p.indices[b];
      if (slot < 0)
        continue;
      const size_t perSlot = size_t(p.vHeads) * p.headState();
      const float *want = &r.state[size_t(slot) * perSlot];
      const float *got = &spec.intermediate[(size_t(slot) * p.tokens + t) * perSlot];
      ASSERT_EQ(std::memcmp(want, got, perSlot * 4), 0)
          << "sequence " << b << " token " << t << ": intermediate differs from in-place";
      for (size_t i = 0; i < size_t(p.vHeads) * p.vDim; ++i)
        ASSERT_EQ(r.out[size_t(b) * p.vHeads * p.vDim + i],
                  spec.out[(size_t(b) * p.tokens + t) * p.vHeads * p.vDim + i])
            << "sequence " << b << " token " << t << ": output differs";
    }
  }
}

} // namespace
