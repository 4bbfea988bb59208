// The fp64 reference against attention computed by hand on tiny inputs.
#include "PrefillReference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

using kiln::reference::prefillAttentionReference;

// One sequence, 2 queries, 2 keys, head_dim 2, causal, q_len == k_len.
// q0 sees k0 only -> out0 = v0. q1 sees k0,k1 with scores s = q1.k * scale.
TEST(PrefillReference, TinyCausal) {
  const std::vector<float> q = {1, 0, /* q1 */ 0, 2};
  const std::vector<float> k = {1, 1, /* k1 */ 0, 1};
  const std::vector<float> v = {1, 2, /* v1 */ 3, -1};
  const int32_t cu[] = {0, 2};
  std::vector<double> out(4, -7.0);
  prefillAttentionReference(q.data(), k.data(), v.data(), out.data(), cu, cu, 1, 1, 1, 2, 0.5,
                            true);
  EXPECT_DOUBLE_EQ(out[0], 1.0);
  EXPECT_DOUBLE_EQ(out[1], 2.0);
  // q1 . k0 = 2, q1 . k1 = 2 -> equal weights 1/2.
  EXPECT_NEAR(out[2], 2.0, 1e-15);
  EXPECT_NEAR(out[3], 0.5, 1e-15);
}

// Non-causal, unequal scores: q.k0 = 1, q.k1 = 0, scale 1 -> weights e/(e+1), 1/(e+1).
TEST(PrefillReference, TinyNonCausal) {
  const std::vector<float> q = {1, 0};
  const std::vector<float> k = {1, 0, 0, 1};
  const std::vector<float> v = {1, 0, 0, 1};
  const int32_t cuQ[] = {0, 1}, cuK[] = {0, 2};
  std::vector<double> out(2);
  prefillAttentionReference(q.data(), k.data(), v.data(), out.data(), cuQ, cuK, 1, 1, 1, 2, 1.0,
                            false);
  const double e = std::exp(1.0);
  EXPECT_NEAR(out[0], e / (e + 1), 1e-15);
  EXPECT_NEAR(out[1], 1 / (e + 1), 1e-15);
}

// Bottom-right causal with q_len < k_len: 1 query, 3 keys -> it sees all 3 keys.
// q_len > k_len: 3 queries, 1 key -> queries 0 and 1 see nothing (zeros), query 2 sees k0.
// GQA: two q heads share one kv head.
TEST(PrefillReference, BottomRightCausalAndGqa) {
  const int32_t cuQ[] = {0, 1, 4}, cuK[] = {0, 3, 4};
  // head_dim 1, q_heads 2, kv_heads 1.
  const std::vector<float> q = {0, 0, /* seq1 */ 1, 1, 1, 1, 1, -1};
  const std::vector<float> k = {5, 6, 7, /* seq1 */ 2};
  const std::vector<float> v = {3, 6, 9, /* seq1 */ 4};
  std::vector<double> out(8, -7.0);
  prefillAttentionReference(q.data(), k.data(), v.data(), out.data(), cuQ, cuK, 2, 2, 1, 1, 1.0,
                            true);
  EXPECT_NEAR(out[0], 6.0, 1e-14); // zero query: uniform weights over v = 3, 6, 9
  EXPECT_NEAR(out[1], 6.0, 1e-14);
  for (int i = 2; i < 6; ++i)
    EXPECT_EQ(out[i], 0.0) << i;
  EXPECT_EQ(out[6], 4.0);
  EXPECT_EQ(out[7], 4.0);
}

// A window of 2 over 3 keys (q = 0: uniform weights): query 2 sees keys 1 and 2 only; a
// sink logit of 0 next to one key of score 1 takes e^0 / (e + 1) of the mass.
TEST(PrefillReference, SlidingWindowAndSink) {
  const std::vector<float> q = {0, 0, 0};
  const std::vector<float> k = {0, 0, 0};
  const std::vector<float> v = {1, 2, 9};
  const int32_t cu[] = {0, 3};
  std::vector<double> out(3);
  prefillAttentionReference(q.data(), k.data(), v.data(), out.data(), cu, cu, 1, 1, 1, 1, 1.0,
                            true, /*window=*/2);
  EXPECT_NEAR(out[0], 1.0, 1e-15);
  EXPECT_NEAR(out[1], 1.5, 1e-15);
  EXPECT_NEAR(out[2], 5.5, 1e-15);

  const std::vector<float> q1 = {1}, k1 = {1}, v1 = {4}, sink = {0.f};
  const int32_t one[] = {0, 1};
  std::vector<double> out1(1);
  prefillAttentionReference(q1.data(), k1.data(), v1.data(), out1.data(), one, one, 1, 1, 1, 1,
                            1.0, true, 0, sink.data());
  const double e = std::exp(1.0);
  EXPECT_NEAR(out1[0], 4 * e / (e + 1), 1e-14);
}
