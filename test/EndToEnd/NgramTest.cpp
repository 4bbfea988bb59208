// N-gram proposals and draft acceptance of kiln-run's speculative decoding.
#include "Ngram.h"

#include <gtest/gtest.h>

#include <vector>

using kiln::spec::acceptedDrafts;
using kiln::spec::proposeNgram;
using V = std::vector<int32_t>;

TEST(Ngram, CopiesWhatFollowedTheLongestSuffix) {
  // Suffix [1 2 3] occurred at 0; it was followed by 9 8.
  V h = {1, 2, 3, 9, 8, 5, 1, 2, 3};
  EXPECT_EQ(proposeNgram(h, 2), (V{9, 8}));
  int32_t out[3];
  EXPECT_EQ(proposeNgram(h.data(), h.size(), 3, out), 3);
  EXPECT_EQ(V(out, out + 3), (V{9, 8, 5}));
}

TEST(Ngram, PrefersTheMostRecentOccurrence) {
  V h = {4, 7, 1, 4, 7, 2, 0, 4, 7};
  EXPECT_EQ(proposeNgram(h, 1), (V{2})); // [4 7] last seen before position 7 at 3
}

TEST(Ngram, FallsBackToShorterNgrams) {
  V h = {5, 6, 9, 1, 2, 6};
  int32_t out[2];
  EXPECT_EQ(proposeNgram(h.data(), h.size(), 2, out), 1); // only [6] repeats
  EXPECT_EQ(V(out, out + 2), (V{9, 1}));
}

TEST(Ngram, RepeatsPeriodicPatternsPastTheEnd) {
  V h = {3, 1, 2, 1, 2};
  // [1 2] occurred at 1, followed by [1 2] and then the proposals themselves.
  EXPECT_EQ(proposeNgram(h, 5), (V{1, 2, 1, 2, 1}));
  V same = {7, 7, 7};
  EXPECT_EQ(proposeNgram(same, 4), (V{7, 7, 7, 7}));
}

TEST(Ngram, NoMatchRepeatsTheLastToken) {
  int32_t out[3] = {-1, -1, -1};
  V h = {1, 2, 3, 4};
  EXPECT_EQ(proposeNgram(h.data(), h.size(), 3, out), 0);
  EXPECT_EQ(V(out, out + 3), (V{4, 4, 4}));
  EXPECT_EQ(proposeNgram(nullptr, 0, 3, out), 0);
  EXPECT_EQ(V(out, out + 3), (V{0, 0, 0}));
  EXPECT_EQ(proposeNgram(h, 0), V{});
  V one = {9};
  EXPECT_EQ(proposeNgram(one, 2), (V{9, 9}));
}

TEST(Ngram, MinAndMaxN) {
  V h = {1, 2, 8, 3, 2};
  int32_t out[1];
  EXPECT_EQ(proposeNgram(h.data(), h.size(), 1, out, 3, 2), 0); // [3 2] never repeats
  EXPECT_EQ(out[0], 2);
  EXPECT_EQ(proposeNgram(h.data(), h.size(), 1, out, 3, 1), 1);
  EXPECT_EQ(out[0], 8);
}

TEST(Ngram, AcceptedDrafts) {
  int32_t drafts[3] = {5, 6, 7};
  int32_t all[4] = {5, 6, 7, 9};
  int32_t two[4] = {5, 6, 1, 9};
  int32_t none[4] = {4, 6, 7, 9};
  EXPECT_EQ(acceptedDrafts(drafts, all, 3), 3);
  EXPECT_EQ(acceptedDrafts(drafts, two, 3), 2);
  EXPECT_EQ(acceptedDrafts(drafts, none, 3), 0);
  EXPECT_EQ(acceptedDrafts(drafts, all, 0), 0);
}
