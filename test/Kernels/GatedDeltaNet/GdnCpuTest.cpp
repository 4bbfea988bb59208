// The Gated DeltaNet reference on a recurrence worked by hand, and the launcher's
// argument validation (no GPU needed: it runs before any CUDA call).
#include "GdnReference.h"
#include "kiln/Kernels/GatedDeltaNet.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

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
  // The speculative form names itself.
  EXPECT_NE(with([](auto &p) {
              p.intermediate = p.state;
              p.k = nullptr;
            }).find("gdn_update_spec: k is null"),
            std::string::npos);
  // An empty batch launches nothing, so it succeeds without a GPU.
  EXPECT_EQ(with([](auto &p) { p.batch = 0; }), "OK");
}

} // namespace
