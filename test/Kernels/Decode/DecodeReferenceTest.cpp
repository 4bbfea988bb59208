// The fp64 references against cases small enough to compute by hand.
#include "DecodeReference.h"

#include <gtest/gtest.h>

#include <cmath>

using kiln::reference::PagedShape;

namespace {

TEST(DecodeReference, SingleKeyReturnsItsValue) {
  PagedShape s;
  s.headDim = 2;
  // one page of one slot: K = [1, 1], V = [3, -4]
  std::vector<float> kv = {1, 1, 3, -4};
  auto out = kiln::reference::gqaDecode(s, {0.5f, 2.f}, kv, {0}, {1}, 1.0);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_DOUBLE_EQ(out[0], 3.0);
  EXPECT_DOUBLE_EQ(out[1], -4.0);
}

TEST(DecodeReference, TwoKeysSoftmaxAndScale) {
  PagedShape s;
  s.headDim = 2;
  s.pageSize = 2;
  // page 0: K0 = [1, 0], K1 = [0, 0]; V0 = [1, 2], V1 = [3, 4]
  std::vector<float> kv = {1, 0, 0, 0, 1, 2, 3, 4};
  auto out = kiln::reference::gqaDecode(s, {2.f, 7.f}, kv, {0}, {2}, 0.5);
  // scores: 2*1*0.5 = 1 and 0  ->  p0 = e/(1+e)
  double p0 = std::exp(1.0) / (1 + std::exp(1.0)), p1 = 1 - p0;
  EXPECT_NEAR(out[0], p0 * 1 + p1 * 3, 1e-12);
  EXPECT_NEAR(out[1], p0 * 2 + p1 * 4, 1e-12);
}

TEST(DecodeReference, PagesFollowTheBlockTable) {
  PagedShape s;
  s.headDim = 1;
  s.pageSize = 1;
  s.maxPages = 2;
  // pages: page p = [K, V]; K all 0 (uniform attention), V page0 = 10, page1 = 20, page2 = 40
  std::vector<float> kv = {0, 10, 0, 20, 0, 40};
  // the sequence's positions 0, 1 live in pages 2 and 0 -> mean of 40 and 10
  auto out = kiln::reference::gqaDecode(s, {1.f}, kv, {2, 0}, {2}, 1.0);
  EXPECT_NEAR(out[0], 25.0, 1e-12);
}

TEST(DecodeReference, MultiTokenIsCausalAmongNewTokens) {
  PagedShape s;
  s.qLen = 2;
  s.headDim = 1;
  s.pageSize = 4;
  // 3 cached positions, the last 2 are the new tokens; K = 0 -> uniform weights.
  std::vector<float> kv = {0, 0, 0, 0, /*V*/ 1, 2, 6, 100};
  auto out = kiln::reference::gqaDecode(s, {1.f, 1.f}, kv, {0}, {3}, 1.0);
  EXPECT_NEAR(out[0], 1.5, 1e-12); // token 0 sees positions 0, 1
  EXPECT_NEAR(out[1], 3.0, 1e-12); // token 1 sees positions 0, 1, 2
}

TEST(DecodeReference, SlidingWindowKeepsTheLastKeys) {
  PagedShape s;
  s.qLen = 2;
  s.headDim = 1;
  s.pageSize = 4;
  // 4 cached positions (V 1, 2, 6, 100), K = 0: uniform weights over each window of 2.
  std::vector<float> kv = {0, 0, 0, 0, /*V*/ 1, 2, 6, 100};
  auto out = kiln::reference::gqaDecode(s, {1.f, 1.f}, kv, {0}, {4}, 1.0, /*window=*/2);
  EXPECT_NEAR(out[0], 4.0, 1e-12);  // token 0 (position 2) sees positions 1, 2
  EXPECT_NEAR(out[1], 53.0, 1e-12); // token 1 (position 3) sees positions 2, 3
}

TEST(DecodeReference, AttentionSinkTakesMassWithoutValue) {
  PagedShape s;
  s.headDim = 1;
  // One key of score 1 (K = 2, q = 1, scale 0.5), V = 8, and a sink logit of 0:
  // out = 8 * e / (e + 1).
  std::vector<float> kv = {2, 8};
  auto out = kiln::reference::gqaDecode(s, {1.f}, kv, {0}, {1}, 0.5, 0, {0.f});
  EXPECT_NEAR(out[0], 8 * std::exp(1.0) / (std::exp(1.0) + 1), 1e-12);
}

TEST(DecodeReference, GroupedHeadsShareTheirKvHead) {
  PagedShape s;
  s.qHeads = 4;
  s.kvHeads = 2;
  s.headDim = 1;
  // one slot: kv head 0 V = 5, kv head 1 V = 7 (K values irrelevant with one key)
  std::vector<float> kv = {1, 1, 5, 7};
  auto out = kiln::reference::gqaDecode(s, {1, 1, 1, 1}, kv, {0}, {1}, 1.0);
  EXPECT_EQ(out, (std::vector<double>{5, 5, 7, 7}));
}

TEST(DecodeReference, MlaUsesLatentPrefixAsValue) {
  std::vector<float> pool(2 * 64 * 576, 0.f);
  std::vector<float> q(576, 0.f);
  q[575] = 1.f; // only the rope part of q is non-zero
  // position 0 -> page 1 slot 0; position 1 -> page 1 slot 1
  float *k0 = &pool[(64 + 0) * 576], *k1 = &pool[(64 + 1) * 576];
  k0[575] = 2.f; // score 2 * scale
  k1[575] = 0.f;
  for (int d = 0; d < 512; ++d) {
    k0[d] = 1.f;
    k1[d] = -1.f;
  }
  auto out = kiln::reference::mlaDecode(1, 1, 1, 1, q, pool, {1}, {2}, 0.5);
  ASSERT_EQ(out.size(), 512u);
  double p0 = std::exp(1.0) / (1 + std::exp(1.0));
  EXPECT_NEAR(out[0], p0 - (1 - p0), 1e-12);
  EXPECT_NEAR(out[511], p0 - (1 - p0), 1e-12);
}

} // namespace
