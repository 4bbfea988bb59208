// The Gated DeltaNet reference on a recurrence worked by hand, the chunked (WY) form of
// the prefill against the token-by-token recurrence in fp64, and the launchers' argument
// validation (no GPU needed: it runs before any CUDA call).
#include "GdnInternal.h"
#include "GdnReference.h"
#include "GdnTestUtil.h"
#include "kiln/Kernels/GatedDeltaNet.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <utility>

using kiln::reference::gdnUpdateReference;

namespace {

// One head, k_dim = v_dim = 2, no normalization, scale 1, from the identity state:
//   token 1: g = ln 0.5, k = (1, 0), v = (1, 2), beta = 1, q = (0, 1)
//     S = 0.5 I; mem = S^T k = (0.5, 0); delta = (0.5, 2); S = [[1, 2], [0, 0.5]]
//     out = S^T q = (0, 0.5)
//   token 2: g = 0, k = (0, 1), v = (1, 1), beta = 0.5, q = (1, 1)
//     mem = (0, 0.5); delta = (0.5, 0.25); S = [[1, 2], [0.5, 0.75]]; out = (1.5, 2.75)
TEST(GdnReference, HandWorkedRecurrence) {
  double state[4] = {1, 0, 0, 1};
  double out[2];
  const double q1[2] = {0, 1}, k1[2] = {1, 0}, v1[2] = {1, 2}, g1 = std::log(0.5), b1 = 1;
  gdnUpdateReference(1, 1, 2, 2, state, q1, k1, v1, &g1, &b1, false, 1.0, out);
  EXPECT_DOUBLE_EQ(state[0], 1.0);
  EXPECT_DOUBLE_EQ(state[1], 2.0);
  EXPECT_DOUBLE_EQ(state[2], 0.0);
  EXPECT_DOUBLE_EQ(state[3], 0.5);
  EXPECT_DOUBLE_EQ(out[0], 0.0);
  EXPECT_DOUBLE_EQ(out[1], 0.5);
  const double q2[2] = {1, 1}, k2[2] = {0, 1}, v2[2] = {1, 1}, g2 = 0, b2 = 0.5;
  gdnUpdateReference(1, 1, 2, 2, state, q2, k2, v2, &g2, &b2, false, 1.0, out);
  EXPECT_DOUBLE_EQ(state[2], 0.5);
  EXPECT_DOUBLE_EQ(state[3], 0.75);
  EXPECT_DOUBLE_EQ(out[0], 1.5);
  EXPECT_DOUBLE_EQ(out[1], 2.75);
}

// Value heads share key heads in groups; l2norm and the default scale 1/sqrt(k_dim).
TEST(GdnReference, GroupedHeadsNormalizedAndScaled) {
  double state[2 * 4] = {}; // 2 value heads of [2, 2], zero
  double out[4];
  const double q[2] = {3, 4}, k[2] = {0, 2}, v[4] = {1, 0, 0, 1}, g[2] = {0, 0},
               beta[2] = {1, 1};
  gdnUpdateReference(1, 2, 2, 2, state, q, k, v, g, beta, true, 0.0, out);
  // k -> (0, 1), q -> (0.6, 0.8), scale 1/sqrt(2): S_h = k v_h^T, out_h = scale 0.8 v_h.
  const double s = 0.8 / std::sqrt(2.0);
  EXPECT_NEAR(out[0], s * 1, 1e-6);
  EXPECT_NEAR(out[1], 0, 1e-12);
  EXPECT_NEAR(out[2], 0, 1e-12);
  EXPECT_NEAR(out[3], s * 1, 1e-6);
  EXPECT_NEAR(state[2], 1, 1e-6); // head 0 row 1 = v_0
  EXPECT_NEAR(state[7], 1, 1e-6); // head 1 row 1 col 1
}

kiln_gdn_update_params_t valid() {
  static float f[4] __attribute__((aligned(16)));
  kiln_gdn_update_params_t p{};
  p.state = f;
  p.num_slots = 4;
  p.batch = 2;
  p.num_tokens = 1;
  p.k_heads = 2;
  p.v_heads = 4;
  p.k_dim = 128;
  p.v_dim = 128;
  p.dtype = KILN_DTYPE_BF16;
  p.q = p.k = p.v = f;
  p.g = p.beta = f;
  p.out = f;
  return p;
}

std::string fails(kiln_gdn_update_params_t p) {
  kiln_status_t s = kiln_gdn_update(&p);
  return s == KILN_OK ? std::string("OK") : kiln_last_error();
}

TEST(GdnValidation, EveryArgumentIsNamed) {
  EXPECT_EQ(kiln_gdn_update(nullptr), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kiln_last_error()).find("params is null"), std::string::npos);
  auto with = [](auto change) {
    kiln_gdn_update_params_t p = valid();
    change(p);
    return fails(p);
  };
  EXPECT_NE(with([](auto &p) { p.state = nullptr; }).find("gdn_update: state is null"),
            std::string::npos);
  EXPECT_NE(with([](auto &p) { p.beta = nullptr; }).find("beta is null"), std::string::npos);
  EXPECT_NE(with([](auto &p) { p.num_tokens = 65; }).find("num_tokens = 65 exceeds"),
            std::string::npos);
  EXPECT_NE(with([](auto &p) { p.v_heads = 3; })
                .find("v_heads (3) must be a multiple of k_heads (2)"),
            std::string::npos);
  EXPECT_NE(with([](auto &p) { p.k_dim = 96; }).find("k_dim 96 unsupported (64 or 128)"),
            std::string::npos);
  EXPECT_NE(with([](auto &p) { p.v_dim = 256; }).find("v_dim 256 unsupported"),
            std::string::npos);
  EXPECT_NE(with([](auto &p) { p.dtype = KILN_DTYPE_F32; }).find("dtype 2 unsupported"),
            std::string::npos);
  EXPECT_NE(with([](auto &p) { p.scale = -1.0f; }).find("scale -1 must be finite"),
            std::string::npos);
  EXPECT_NE(with([](auto &p) { p.scale = NAN; }).find("must be finite"), std::string::npos);
  EXPECT_NE(with([](auto &p) { p.batch = 5; })
                .find("state_indices is null and batch (5) > num_slots (4)"),
            std::string::npos);
  EXPECT_NE(with([](auto &p) { p.q = static_cast<const char *>(p.q) + 2; })
                .find("q is not 16-byte aligned"),
            std::string::npos);
  EXPECT_NE(with([](auto &p) {
              p.num_tokens = 4;
              p.intermediate_tokens = 3;
            }).find("intermediate_tokens (3) must be 0 (num_tokens) or >= num_tokens (4)"),
            std::string::npos);
  EXPECT_NE(with([](auto &p) { p.intermediate_tokens = -1; }).find("intermediate_tokens (-1)"),
            std::string::npos);
  // The speculative form names itself.
  EXPECT_NE(with([](auto &p) {
              p.intermediate = p.state;
              p.k = nullptr;
            }).find("gdn_update_spec: k is null"),
            std::string::npos);
  // An empty batch launches nothing, so it succeeds without a GPU.
  EXPECT_EQ(with([](auto &p) { p.batch = 0; }), "OK");
}

kiln_gdn_update_replay_params_t validReplay() {
  static float f[4] __attribute__((aligned(16)));
  static int32_t pairs[4];
  kiln_gdn_update_replay_params_t p{};
  p.state = f;
  p.num_slots = 4;
  p.replay = pairs;
  p.replay_k = p.replay_v = f;
  p.replay_gb = f;
  p.max_tokens = 4;
  p.batch = 2;
  p.num_tokens = 4;
  p.k_heads = 2;
  p.v_heads = 4;
  p.k_dim = 128;
  p.v_dim = 128;
  p.dtype = KILN_DTYPE_BF16;
  p.q = p.k = p.v = f;
  p.g = p.beta = f;
  p.out = f;
  return p;
}

// gdn_update_replay checks the update's arguments (a fold alone takes no activations) and
// its replay buffers, and names each.
TEST(GdnReplayValidation, EveryArgumentIsNamed) {
  EXPECT_EQ(kiln_gdn_update_replay(nullptr), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kiln_last_error()).find("gdn_update_replay: params is null"),
            std::string::npos);
  auto with = [](auto change) {
    kiln_gdn_update_replay_params_t p = validReplay();
    change(p);
    const kiln_status_t s = kiln_gdn_update_replay(&p);
    return s == KILN_OK ? std::string("OK") : std::string(kiln_last_error());
  };
  const std::pair<std::function<void(kiln_gdn_update_replay_params_t &)>, const char *> cases[] = {
      {[](auto &p) { p.state = nullptr; }, "gdn_update_replay: state is null"},
      {[](auto &p) { p.q = nullptr; }, "gdn_update_replay: q is null"},
      {[](auto &p) { p.out = nullptr; }, "out is null"},
      {[](auto &p) { p.num_tokens = -1; }, "num_tokens is negative (-1)"},
      {[](auto &p) { p.num_tokens = 65; }, "num_tokens = 65 exceeds"},
      {[](auto &p) { p.batch = -1; }, "batch is negative (-1)"},
      {[](auto &p) { p.num_slots = 0; }, "num_slots must be > 0"},
      {[](auto &p) { p.v_heads = 3; }, "v_heads (3) must be a multiple of k_heads (2)"},
      {[](auto &p) { p.k_dim = 96; }, "k_dim 96 unsupported (64 or 128)"},
      {[](auto &p) { p.dtype = KILN_DTYPE_F32; }, "dtype 2 unsupported"},
      {[](auto &p) { p.scale = -1.0f; }, "scale -1 must be finite"},
      {[](auto &p) { p.batch = 5; }, "state_indices is null and batch (5) > num_slots (4)"},
      {[](auto &p) { p.k = static_cast<const char *>(p.k) + 2; }, "k is not 16-byte aligned"},
      {[](auto &p) { p.replay = nullptr; }, "gdn_update_replay: replay is null"},
      {[](auto &p) { p.replay_k = nullptr; }, "replay_k is null"},
      {[](auto &p) { p.replay_v = nullptr; }, "replay_v is null"},
      {[](auto &p) { p.replay_gb = nullptr; }, "replay_gb is null"},
      {[](auto &p) {
         p.replay = reinterpret_cast<const int32_t *>(reinterpret_cast<const char *>(p.replay) + 2);
       },
       "replay is not 4-byte aligned"},
      {[](auto &p) { p.replay_v = static_cast<char *>(p.replay_v) + 1; },
       "replay_v is not 2-byte aligned"},
      {[](auto &p) { p.max_tokens = 0; }, "max_tokens must be > 0"},
      {[](auto &p) { p.max_tokens = 65; }, "max_tokens = 65 exceeds"},
      {[](auto &p) { p.max_tokens = 3; },
       "num_tokens 4 > max_tokens 3: a verify step's inputs must fit a replay buffer"}};
  for (const auto &[change, message] : cases)
    EXPECT_NE(with(change).find(message), std::string::npos) << message << ": " << with(change);
  // A fold alone (no tokens) takes no activations; an empty batch launches nothing: both
  // succeed without a GPU when the batch is empty.
  EXPECT_EQ(with([](auto &p) {
              p.num_tokens = 0;
              p.q = p.k = p.v = nullptr;
              p.g = p.beta = nullptr;
              p.out = nullptr;
              p.batch = 0;
            }),
            "OK");
  EXPECT_EQ(with([](auto &p) { p.batch = 0; }), "OK");
  // The baseline kernel has no replay form; the refusal comes before any CUDA call.
  const kiln_gdn_update_replay_params_t p = validReplay();
  EXPECT_EQ(kiln::kernels::gdn::gdnUpdateReplayWithVariant(
                &p, kiln::kernels::gdn::GdnUpdateVariant::Baseline),
            KILN_ERROR_UNSUPPORTED);
  EXPECT_NE(std::string(kiln_last_error())
                .find("gdn_update_replay: kernel variant baseline has no gdn_update_replay form"),
            std::string::npos)
      << kiln_last_error();
}

// The chunked form gdn_chunk_prefill computes equals the recurrence (fp64: to rounding),
// over chunk edges, a 1-token sequence, a padding sequence, grouped heads, with and
// without l2norm, from nonzero states, at chunk 64 and at chunk 5 (many chunks).
TEST(GdnReference, ChunkedFormEqualsTokenByToken) {
  for (bool l2norm : {true, false})
    for (int chunk : {64, 5}) {
      const kiln::test::GdnPromptData d({70, 1, 13, 64, 130}, {2}, 2, 4, 16, 8, l2norm, 21);
      std::vector<double> tokenState, tokenOut;
      d.reference(tokenState, tokenOut);
      auto doubles = [](const std::vector<uint16_t> &x) {
        std::vector<double> out(x.size());
        for (size_t i = 0; i < x.size(); ++i)
          out[i] = kiln_bf16_to_float(x[i]);
        return out;
      };
      const std::vector<double> q = doubles(d.q), k = doubles(d.k), v = doubles(d.v);
      const std::vector<double> g(d.g.begin(), d.g.end()), beta(d.beta.begin(), d.beta.end());
      std::vector<double> state(d.state.begin(), d.state.end()), out(d.outCount(), NAN);
      const kiln::reference::GdnPrompt p{d.batch(), d.cu.data(), d.indices.data(), d.slots,
                                         d.kHeads,  d.vHeads,    d.kDim,           d.vDim,
                                         q.data(),  k.data(),    v.data(),         g.data(),
                                         beta.data(), l2norm,    0.0};
      kiln::reference::gdnChunkedReference(p, chunk, state.data(), out.data());
      double worst = 0;
      for (size_t i = 0; i < out.size(); ++i) {
        ASSERT_EQ(std::isnan(out[i]), std::isnan(tokenOut[i])) << "output " << i;
        if (!std::isnan(out[i]))
          worst = std::max(worst, std::fabs(out[i] - tokenOut[i]) / (std::fabs(tokenOut[i]) + 1e-3));
      }
      for (size_t i = 0; i < state.size(); ++i)
        worst = std::max(worst, std::fabs(state[i] - tokenState[i]) / (std::fabs(tokenState[i]) + 1e-3));
      EXPECT_LT(worst, 1e-10) << "l2norm " << l2norm << " chunk " << chunk;
    }
}

kiln_gdn_chunk_prefill_params_t validPrefill() {
  static float f[4] __attribute__((aligned(16)));
  static int32_t cu[3] = {0, 1, 2};
  kiln_gdn_chunk_prefill_params_t p{};
  p.state = f;
  p.num_slots = 4;
  p.cu_seqlens = cu;
  p.batch = 2;
  p.k_heads = 2;
  p.v_heads = 4;
  p.k_dim = 128;
  p.v_dim = 128;
  p.dtype = KILN_DTYPE_BF16;
  p.q = p.k = p.v = f;
  p.g = p.beta = f;
  p.out = f;
  return p;
}

TEST(GdnChunkPrefillValidation, EveryArgumentIsNamed) {
  EXPECT_EQ(kiln_gdn_chunk_prefill(nullptr), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kiln_last_error()).find("gdn_chunk_prefill: params is null"),
            std::string::npos);
  auto with = [](auto change) {
    kiln_gdn_chunk_prefill_params_t p = validPrefill();
    change(p);
    kiln_status_t s = kiln_gdn_chunk_prefill(&p);
    return s == KILN_OK ? std::string("OK") : std::string(kiln_last_error());
  };
  auto has = [](const std::string &message, const char *part) {
    return message.find(part) != std::string::npos;
  };
  EXPECT_PRED2(has, with([](auto &p) { p.state = nullptr; }), "gdn_chunk_prefill: state is null");
  EXPECT_PRED2(has, with([](auto &p) { p.cu_seqlens = nullptr; }), "cu_seqlens is null");
  EXPECT_PRED2(has, with([](auto &p) { p.q = nullptr; }), "q is null");
  EXPECT_PRED2(has, with([](auto &p) { p.k = nullptr; }), "k is null");
  EXPECT_PRED2(has, with([](auto &p) { p.v = nullptr; }), "v is null");
  EXPECT_PRED2(has, with([](auto &p) { p.g = nullptr; }), "g is null");
  EXPECT_PRED2(has, with([](auto &p) { p.beta = nullptr; }), "beta is null");
  EXPECT_PRED2(has, with([](auto &p) { p.out = nullptr; }), "out is null");
  EXPECT_PRED2(has, with([](auto &p) { p.batch = -1; }), "batch is negative (-1)");
  EXPECT_PRED2(has, with([](auto &p) { p.batch = 65536; }),
               "batch = 65536 exceeds the supported maximum 65535");
  EXPECT_PRED2(has, with([](auto &p) { p.num_slots = 0; }), "num_slots must be > 0 (got 0)");
  EXPECT_PRED2(has, with([](auto &p) { p.k_heads = 0; }), "k_heads must be > 0 (got 0)");
  EXPECT_PRED2(has, with([](auto &p) { p.v_heads = -2; }), "v_heads must be > 0 (got -2)");
  EXPECT_PRED2(has, with([](auto &p) { p.v_heads = 3; }),
               "v_heads (3) must be a multiple of k_heads (2)");
  EXPECT_PRED2(has, with([](auto &p) { p.k_dim = 96; }), "k_dim 96 unsupported (64 or 128)");
  EXPECT_PRED2(has, with([](auto &p) { p.v_dim = 256; }), "v_dim 256 unsupported (64 or 128)");
  EXPECT_PRED2(has, with([](auto &p) { p.dtype = KILN_DTYPE_F16; }),
               "dtype 1 unsupported (BF16");
  EXPECT_PRED2(has, with([](auto &p) { p.scale = -1.0f; }), "scale -1 must be finite and >= 0");
  EXPECT_PRED2(has, with([](auto &p) { p.scale = INFINITY; }), "must be finite");
  EXPECT_PRED2(has, with([](auto &p) { p.batch = 5; }),
               "state_indices is null and batch (5) > num_slots (4)");
  auto plus = [](const void *x, int bytes) { return static_cast<const char *>(x) + bytes; };
  EXPECT_PRED2(has, with([&](auto &p) { p.state = const_cast<char *>(plus(p.state, 4)); }),
               "state is not 16-byte aligned");
  EXPECT_PRED2(has, with([&](auto &p) { p.q = plus(p.q, 2); }), "q is not 16-byte aligned");
  EXPECT_PRED2(has, with([&](auto &p) { p.k = plus(p.k, 8); }), "k is not 16-byte aligned");
  EXPECT_PRED2(has, with([&](auto &p) { p.v = plus(p.v, 2); }), "v is not 16-byte aligned");
  EXPECT_PRED2(has, with([&](auto &p) { p.out = const_cast<char *>(plus(p.out, 2)); }),
               "out is not 16-byte aligned");
  EXPECT_PRED2(has, with([&](auto &p) { p.g = reinterpret_cast<const float *>(plus(p.g, 2)); }),
               "g is not 4-byte aligned");
  EXPECT_PRED2(has,
               with([&](auto &p) { p.beta = reinterpret_cast<const float *>(plus(p.beta, 1)); }),
               "beta is not 4-byte aligned");
  EXPECT_PRED2(has, with([&](auto &p) {
                 p.cu_seqlens = reinterpret_cast<const int32_t *>(plus(p.cu_seqlens, 2));
               }),
               "cu_seqlens is not 4-byte aligned");
  EXPECT_PRED2(has, with([&](auto &p) {
                 p.state_indices = reinterpret_cast<const int32_t *>(plus(p.cu_seqlens, 1));
               }),
               "state_indices is not 4-byte aligned");
  // An empty batch launches nothing, so it succeeds without a GPU.
  EXPECT_EQ(with([](auto &p) { p.batch = 0; }), "OK");
}

} // namespace

// The host reference of gdn_prepare's gates on values worked by hand: softplus is the
// identity above 20.
TEST(GdnReference, PrepareRoundsAsTransformers) {
  EXPECT_EQ(kiln::test::gdnGateReference(kiln_float_to_bf16(24.0f), 0.0f, 1.0f), -25.0f);
  EXPECT_NEAR(kiln::test::gdnGateReference(kiln_float_to_bf16(0.0f), std::log(2.0f), 0.0f),
              -2.0 * std::log(2.0), 1e-6);
  EXPECT_EQ(kiln::test::gdnSigmoidReference(kiln_float_to_bf16(0.0f)), 0.5f);
}

kiln_gdn_prepare_params_t validPrepare() {
  static float f[4] __attribute__((aligned(16)));
  kiln_gdn_prepare_params_t p{};
  p.tokens = 3;
  p.k_heads = 2;
  p.v_heads = 4;
  p.k_dim = 128;
  p.v_dim = 64;
  p.q = p.k = p.v = p.a = p.b = f;
  p.q_stride = p.k_stride = 2 * 128;
  p.v_stride = 4 * 64;
  p.a_stride = p.b_stride = 4;
  p.a_log = p.dt_bias = f;
  p.q_out = p.k_out = p.v_out = f;
  p.g = p.beta = f;
  return p;
}

TEST(GdnPrepareValidation, EveryArgumentIsNamed) {
  EXPECT_EQ(kiln_gdn_prepare(nullptr), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kiln_last_error()).find("gdn_prepare: params is null"), std::string::npos);
  auto with = [](auto change) {
    kiln_gdn_prepare_params_t p = validPrepare();
    change(p);
    kiln_status_t s = kiln_gdn_prepare(&p);
    return s == KILN_OK ? std::string("OK") : std::string(kiln_last_error());
  };
  auto has = [](const std::string &message, const char *part) {
    return message.find(part) != std::string::npos;
  };
  EXPECT_PRED2(has, with([](auto &p) { p.q = nullptr; }), "gdn_prepare: q is null");
  EXPECT_PRED2(has, with([](auto &p) { p.b = nullptr; }), "b is null");
  EXPECT_PRED2(has, with([](auto &p) { p.a_log = nullptr; }), "a_log is null");
  EXPECT_PRED2(has, with([](auto &p) { p.dt_bias = nullptr; }), "dt_bias is null");
  EXPECT_PRED2(has, with([](auto &p) { p.v_out = nullptr; }), "v_out is null");
  EXPECT_PRED2(has, with([](auto &p) { p.beta = nullptr; }), "beta is null");
  EXPECT_PRED2(has, with([](auto &p) { p.tokens = -1; }), "tokens is negative (-1)");
  EXPECT_PRED2(has, with([](auto &p) { p.k_dim = 0; }), "k_dim must be > 0 (got 0)");
  EXPECT_PRED2(has, with([](auto &p) { p.v_heads = 0; }), "v_heads must be > 0 (got 0)");
  EXPECT_PRED2(has, with([](auto &p) { p.q_stride = 255; }),
               "q_stride 255 < the row's 256 elements");
  EXPECT_PRED2(has, with([](auto &p) { p.v_stride = 100; }),
               "v_stride 100 < the row's 256 elements");
  EXPECT_PRED2(has, with([](auto &p) { p.b_stride = 3; }), "b_stride 3 < the row's 4 elements");
  auto plus = [](const void *x, int bytes) { return static_cast<const char *>(x) + bytes; };
  EXPECT_PRED2(has, with([&](auto &p) { p.k = plus(p.k, 1); }), "k is not 2-byte aligned");
  EXPECT_PRED2(has, with([&](auto &p) {
                 p.g = reinterpret_cast<float *>(const_cast<char *>(plus(p.g, 2)));
               }),
               "g is not 4-byte aligned");
  // Column slices at any element offset and stride are fine; no tokens launch nothing.
  EXPECT_EQ(with([&](auto &p) {
              p.q = plus(p.q, 2);
              p.q_stride = 257;
              p.tokens = 0;
            }),
            "OK");
}
