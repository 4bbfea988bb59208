// CPU test (runs in CI): gdn_chunk_prefill's device code (GdnChunkPrefill.cuh) run on the
// host, one CTA at a time, by the CTA emulator (Common/CtaEmulator.h), against the fp64
// token-by-token reference at GdnGpuTest's tolerances. Without a GPU this checks the
// kernel's fragment layouts (ldmatrix addresses, mma operands), its barriers and cp.async
// stages under random warp schedules, its bounds (sequences ending inside a chunk and
// inside a 16-token block, a 1-token sequence, padding) and that its ldmatrix loads are
// free of bank conflicts.
#include "CtaEmulator.h" // first: GdnChunkPrefill.cuh takes its device primitives from it

#include "GdnChunkPrefill.cuh"
#include "GdnTestUtil.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

using kiln::kernels::gdn::GdnChunkArgs;
using kiln::test::GdnPromptData;
using kiln::test::emu::CtaEmulator;

namespace {

// The kernel over the prompt's grid, from the states `state` (updated); returns the
// outputs, poison (0xFFFF) where not written, with a guard row after the last token.
template <int KD>
std::vector<uint16_t> emulate(const GdnPromptData &p, std::vector<float> &state, uint64_t seed) {
  namespace gdn = kiln::kernels::gdn;
  std::vector<uint16_t> out(p.outCount() + size_t(p.vHeads) * p.vDim, 0xFFFF);
  GdnChunkArgs a{};
  a.state = state.data();
  a.indices = p.indices.data();
  a.cuSeqlens = p.cu.data();
  a.numSlots = p.slots;
  a.kHeads = p.kHeads;
  a.vHeads = p.vHeads;
  a.vDim = p.vDim;
  a.q = p.q.data();
  a.k = p.k.data();
  a.v = p.v.data();
  a.g = p.g.data();
  a.beta = p.beta.data();
  a.out = out.data();
  a.l2norm = p.l2norm;
  a.scale = 1.0f / std::sqrt(static_cast<float>(KD));
  // Other schedules: KILN_CTA_SCHEDULE_SEED=<n>.
  const char *scheduleSeed = std::getenv("KILN_CTA_SCHEDULE_SEED");
  CtaEmulator cta(gdn::kThreads, gdn::ChunkSmem<KD>::bytes,
                  seed * 7919 + (scheduleSeed ? std::strtoull(scheduleSeed, nullptr, 10) : 0));
  for (int z = 0; z < p.vDim / gdn::kSlice; ++z)
    for (int b = 0; b < p.batch(); ++b)
      for (int h = 0; h < p.vHeads; ++h) {
        const uint3 block{unsigned(h), unsigned(b), unsigned(z)};
        const bool ran = cta.run(block, [&] { gdn::gdnChunkPrefillCta<KD>(a, cta.shared()); });
        EXPECT_TRUE(ran) << cta.error();
        if (!ran)
          return out;
      }
  EXPECT_EQ(cta.bankConflicts(), 0) << "of " << cta.ldmatrixPhases() << " ldmatrix phases";
  return out;
}

template <int KD> void runCase(const GdnPromptData &p, uint64_t seed) {
  ASSERT_EQ(p.kDim, KD);
  const auto start = std::chrono::steady_clock::now();
  std::vector<float> state = p.state;
  std::vector<uint16_t> out = emulate<KD>(p, state, seed);
  if (::testing::Test::HasFailure())
    return;
  for (size_t i = p.outCount(); i < out.size(); ++i)
    ASSERT_EQ(out[i], 0xFFFF) << "written past the last token";
  out.resize(p.outCount());
  const kiln::test::GdnErrors e = kiln::test::compareToReference(p, out, state);
  EXPECT_EQ(e.paddingWritten, 0) << "outputs of a padding sequence written";
  EXPECT_EQ(e.untouchedChanged, 0) << "a slot without tokens changed";
  EXPECT_LT(e.out, 1e-2);
  EXPECT_LT(e.state, 1e-4);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::printf("  k_dim %d v_dim %d l2norm %d: worst out rel err %.2e, state %.2e (%.0f ms)\n",
              KD, p.vDim, p.l2norm, e.out, e.state, ms);
}

// Lengths across chunk and 16-token block edges, one token, a padding sequence.
TEST(GdnChunkEmulation, KDim64Ragged) {
  runCase<64>(GdnPromptData({70, 1, 16, 5, 129}, {3}, 1, 2, 64, 64, true, 11), 1);
}

// Qwen3-Next's head shape, grouped heads, without l2norm.
TEST(GdnChunkEmulation, KDim128GroupedNoNorm) {
  runCase<128>(GdnPromptData({100, 33}, {}, 1, 2, 128, 128, false, 12), 2);
}

// Grouped key heads at k_dim 128 and v_dim 64 (two column slices), a 200-token sequence.
TEST(GdnChunkEmulation, KDim128VDim64) {
  runCase<128>(GdnPromptData({200, 65}, {}, 2, 4, 128, 64, true, 13), 3);
}

// A prompt split over two calls: the second starts from the states the first wrote
// (GdnGpuTest.ChunkPrefillContinuesAPrompt's split, at k_dim 64).
TEST(GdnChunkEmulation, ContinuesAPrompt) {
  const GdnPromptData whole({150, 70, 9}, {}, 1, 2, 64, 64, true, 15);
  const std::vector<int> firstLen = {100, 64, 1};
  const GdnPromptData first = kiln::test::splitPrompt(whole, firstLen, true);
  const GdnPromptData second = kiln::test::splitPrompt(whole, firstLen, false);
  std::vector<float> state = whole.state;
  std::vector<uint16_t> a = emulate<64>(first, state, 5);
  std::vector<uint16_t> b = emulate<64>(second, state, 6);
  ASSERT_FALSE(::testing::Test::HasFailure());
  a.resize(first.outCount());
  b.resize(second.outCount());
  const kiln::test::GdnErrors e = kiln::test::compareToReference(
      whole, kiln::test::joinOutputs(whole, first, a, second, b), state);
  EXPECT_EQ(e.untouchedChanged, 0) << "a slot without tokens changed";
  EXPECT_LT(e.out, 1e-2);
  EXPECT_LT(e.state, 1e-4);
  std::printf("  continued over two calls: worst out rel err %.2e, state %.2e\n", e.out, e.state);
}

// k_dim 64 with v_dim 128 (four column slices).
TEST(GdnChunkEmulation, KDim64VDim128) {
  runCase<64>(GdnPromptData({48, 64}, {0}, 1, 1, 64, 128, true, 14), 4);
}

} // namespace
