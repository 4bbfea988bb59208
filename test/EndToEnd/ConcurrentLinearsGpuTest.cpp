// Concurrent projections (docs/runtime.md): a decode-sized linear right after another of
// the same input runs beside it in a captured graph. The outputs of an eager step, the
// step that captures and the replays must have the same bits and match a host reference,
// and the op after them must see what the one beside ran wrote (the join).
#include "kiln/Runtime/Runtime.h"

#include "GpuTest.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr int64_t kBatch = 4, kHidden = 512, kQ = 1024, kKv = 128;

std::string lastError() { return kiln_last_error(); }

float toFloat(uint16_t bits) {
  const uint32_t word = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &word, 4);
  return f;
}

uint16_t bf16Of(float f) {
  uint32_t word;
  std::memcpy(&word, &f, 4);
  return static_cast<uint16_t>((word + 0x7fffu + ((word >> 16) & 1u)) >> 16);
}

std::vector<uint16_t> randomBf16(int64_t n, uint32_t seed) {
  std::vector<uint16_t> v(n);
  for (int64_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    v[i] = bf16Of((static_cast<float>(seed >> 8) / 16777216.0f - 0.5f) * 0.25f);
  }
  return v;
}

// Offsets inside the weights and the activations.
constexpr uint64_t kWq = 0, kWk = kWq + kQ * kHidden * 2, kWv = kWk + kKv * kHidden * 2,
                   kWo = kWv + kKv * kHidden * 2;
constexpr uint64_t kX = 0, kOutQ = 64 << 10, kOutK = kOutQ + (64 << 10),
                   kOutV = kOutK + (16 << 10), kOutO = kOutV + (16 << 10);

char *weights(kiln_rt_context_t *ctx, uint64_t off) {
  return static_cast<char *>(kiln_rt_weights(ctx)) + off;
}
char *acts(kiln_rt_context_t *ctx, uint64_t off) {
  return static_cast<char *>(kiln_rt_activations(ctx)) + off;
}

// q = x Wq^T; k, v = x Wk^T, x Wv^T (a pair: it runs beside q); o = k Wo^T reads what
// the pair wrote (after the join).
void forward(kiln_rt_context_t *ctx) {
  kiln_rt_linear(ctx, acts(ctx, kX), weights(ctx, kWq), nullptr, acts(ctx, kOutQ), kBatch, kQ,
                 kHidden);
  kiln_rt_linear_pair(ctx, acts(ctx, kX), weights(ctx, kWk), weights(ctx, kWv),
                      acts(ctx, kOutK), acts(ctx, kOutV), kBatch, kKv, kHidden);
  kiln_rt_linear(ctx, acts(ctx, kOutK), weights(ctx, kWo), nullptr, acts(ctx, kOutO), kBatch,
                 kHidden, kKv);
}

kiln_rt_config_t config() {
  kiln_rt_config_t c{};
  c.vocab_size = 512;
  c.max_batch = kBatch;
  c.max_seq_len = 256;
  c.page_size = 16;
  c.kv_pages = 16;
  c.max_step_tokens = 256;
  c.max_logit_rows = 16;
  c.weight_bytes = 4 << 20;
  c.cache_bytes = 1 << 20;
  c.activation_bytes = 4 << 20;
  c.workspace_bytes = kiln_rt_workspace_bytes(16, 4, 64);
  c.io_bytes = kiln_rt_io_bytes(kBatch, 256, 16, 16, 0);
  return c;
}

void setDecodeStep(kiln_rt_context_t *ctx) {
  int32_t q[kBatch], lens[kBatch], table[kBatch * 16] = {}, ids[kBatch], rows[kBatch];
  for (int i = 0; i < kBatch; ++i) {
    q[i] = 1;
    lens[i] = 5;
    ids[i] = i;
    rows[i] = i;
  }
  kiln_rt_batch_t b{};
  b.phase = KILN_RT_PHASE_DECODE;
  b.batch = kBatch;
  b.q_lens = q;
  b.seq_lens = lens;
  b.block_table = table;
  b.token_ids = ids;
  b.logit_rows = rows;
  b.num_logit_rows = kBatch;
  ASSERT_EQ(kiln_rt_set_batch(ctx, &b), KILN_OK) << lastError();
}

std::vector<uint16_t> read(kiln_rt_context_t *ctx, uint64_t off, int64_t n) {
  std::vector<uint16_t> out(n);
  EXPECT_EQ(kiln_rt_synchronize(ctx), KILN_OK) << lastError();
  EXPECT_EQ(cudaMemcpy(out.data(), acts(ctx, off), n * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}

// out[m, n] = x[m, k] w[n, k]^T in float, each output rounded to bf16.
std::vector<float> reference(const std::vector<uint16_t> &x, const std::vector<uint16_t> &w,
                             int64_t m, int64_t n, int64_t k) {
  std::vector<float> out(m * n);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < n; ++c) {
      double sum = 0;
      for (int64_t i = 0; i < k; ++i)
        sum += static_cast<double>(toFloat(x[r * k + i])) * toFloat(w[c * k + i]);
      out[r * n + c] = toFloat(bf16Of(static_cast<float>(sum)));
    }
  return out;
}

void expectNear(const std::vector<uint16_t> &got, const std::vector<float> &want,
                const char *what) {
  ASSERT_EQ(got.size(), want.size());
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (std::fabs(toFloat(got[i]) - want[i]) > 1e-2f + 1e-2f * std::fabs(want[i]) && bad++ < 5)
      ADD_FAILURE() << what << "[" << i << "] = " << toFloat(got[i]) << ", want " << want[i];
}

struct Outputs {
  std::vector<uint16_t> q, k, v, o;
  bool operator==(const Outputs &other) const {
    return q == other.q && k == other.k && v == other.v && o == other.o;
  }
};

// Steps of the forward: the first eager, the second captured, the rest replayed; the
// outputs cleared before each, so every step must write them again.
std::vector<Outputs> runSteps(bool concurrent, int steps) {
  if (concurrent)
    unsetenv("KILN_CONCURRENT_LINEARS");
  else
    setenv("KILN_CONCURRENT_LINEARS", "0", 1);
  kiln_rt_context_t *ctx = nullptr;
  kiln_rt_config_t c = config();
  EXPECT_EQ(kiln_rt_create(0, &c, &ctx), KILN_OK) << lastError();
  unsetenv("KILN_CONCURRENT_LINEARS");
  std::vector<Outputs> all;
  if (!ctx)
    return all;
  EXPECT_EQ(kiln_rt_set_graph_limits(ctx, nullptr, 0, UINT64_MAX), KILN_OK) << lastError();
  const auto x = randomBf16(kBatch * kHidden, 1), wq = randomBf16(kQ * kHidden, 2),
             wk = randomBf16(kKv * kHidden, 3), wv = randomBf16(kKv * kHidden, 4),
             wo = randomBf16(kHidden * kKv, 5);
  EXPECT_EQ(cudaMemcpy(acts(ctx, kX), x.data(), x.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  for (auto [off, w] : {std::pair{kWq, &wq}, {kWk, &wk}, {kWv, &wv}, {kWo, &wo}})
    EXPECT_EQ(cudaMemcpy(weights(ctx, off), w->data(), w->size() * 2, cudaMemcpyHostToDevice),
              cudaSuccess);
  for (int step = 0; step < steps; ++step) {
    EXPECT_EQ(cudaMemset(acts(ctx, kOutQ), 0xff, kOutO + kBatch * kHidden * 2 - kOutQ),
              cudaSuccess);
    setDecodeStep(ctx);
    EXPECT_EQ(kiln_rt_forward(ctx, forward), KILN_OK) << lastError();
    all.push_back({read(ctx, kOutQ, kBatch * kQ), read(ctx, kOutK, kBatch * kKv),
                   read(ctx, kOutV, kBatch * kKv), read(ctx, kOutO, kBatch * kHidden)});
  }
  kiln_rt_graph_stats_t stats{};
  EXPECT_EQ(kiln_rt_graph_stats(ctx, &stats), KILN_OK) << lastError();
  EXPECT_EQ(stats.graphs, 1) << "the step was not captured";
  EXPECT_EQ(stats.replays, static_cast<uint64_t>(steps - 2));
  // Host references of all four (o from the device's k, so it checks the ordering alone).
  expectNear(all.back().q, reference(x, wq, kBatch, kQ, kHidden), "q");
  expectNear(all.back().k, reference(x, wk, kBatch, kKv, kHidden), "k");
  expectNear(all.back().v, reference(x, wv, kBatch, kKv, kHidden), "v");
  expectNear(all.back().o, reference(all.back().k, wo, kBatch, kHidden, kKv), "o");
  kiln_rt_destroy(ctx);
  return all;
}

TEST(ConcurrentLinearsGpu, EagerCapturedAndReplayedStepsHaveTheSameBits) {
  KILN_REQUIRE_GPU();
  const std::vector<Outputs> steps = runSteps(/*concurrent=*/true, 5);
  ASSERT_EQ(steps.size(), 5u);
  for (size_t i = 1; i < steps.size(); ++i)
    EXPECT_TRUE(steps[i] == steps[0]) << "step " << i << " differs from the eager step";
}

TEST(ConcurrentLinearsGpu, OffGivesCorrectOutputsToo) {
  KILN_REQUIRE_GPU();
  const std::vector<Outputs> steps = runSteps(/*concurrent=*/false, 3);
  ASSERT_EQ(steps.size(), 3u);
  for (size_t i = 1; i < steps.size(); ++i)
    EXPECT_TRUE(steps[i] == steps[0]) << "step " << i << " differs from the eager step";
}

} // namespace
