// CPU test (runs in CI): the MoE grouped expert GEMM's device code (GroupedGemmSm90.cuh)
// run on the host by the CTA emulator (test/Kernels/Common/CtaEmulator.h), wgmma
// included, against exact products. Without a GPU this checks the swizzled shared
// layout the cp.async loads write and the wgmma descriptors read, the accumulator
// fragment the epilogue stores, the masking of token columns past a tile, the
// persistent loop over tiles, and the ring's barriers and waits (under random warp
// schedules: a stage overwritten before its wgmma was waited for reads the wrong data).
#include "CtaEmulator.h" // first: the device header takes its primitives from it

#include "GroupedGemmCases.h"
#include "GroupedGemmSm90.cuh"

#include <gtest/gtest.h>

#include <vector>

using namespace kiln::test;
using kiln::test::emu::CtaEmulator;

namespace {

TEST(GroupedGemmEmulation, MatchesExactProductsOnEveryTile) {
  for (const grouped::Case &c : grouped::cases()) {
    SCOPED_TRACE(c.name);
    const grouped::Data d = grouped::randomData(c, 11);
    std::vector<uint16_t> out(static_cast<size_t>(c.rows() * c.n), grouped::kPoison);
    const int32_t tileCount = static_cast<int32_t>(c.tiles.size());
    const kiln::graph::GroupedGemmArgs args{
        d.in.data(), d.weights.data(), out.data(), c.tiles.data(), &tileCount, c.n, c.k};
    CtaEmulator cta(kiln::graph::grouped::kThreads, kiln::graph::grouped::kSharedBytes, 5);
    for (int b = 0; b < c.ctas; ++b)
      ASSERT_TRUE(cta.run({unsigned(b), 0, 0}, [&] {
        kiln::graph::grouped::groupedGemmCta(args, cta.shared(), b, c.ctas);
      })) << cta.error();
    EXPECT_EQ(grouped::check(c, d, out), "");
  }
}

// A CTA past the last tile returns before touching anything (the launch's bound on the
// tiles exceeds the tiles in use).
TEST(GroupedGemmEmulation, CtasPastTheTilesDoNothing) {
  const grouped::Case c = grouped::cases()[0];
  const grouped::Data d = grouped::randomData(c, 3);
  std::vector<uint16_t> out(static_cast<size_t>(c.rows() * c.n), grouped::kPoison);
  const int32_t tileCount = 1; // one tile x two feature tiles
  const kiln::graph::GroupedGemmArgs args{
      d.in.data(), d.weights.data(), out.data(), c.tiles.data(), &tileCount, c.n, c.k};
  CtaEmulator cta(kiln::graph::grouped::kThreads, kiln::graph::grouped::kSharedBytes, 9);
  ASSERT_TRUE(cta.run({2, 0, 0}, [&] {
    kiln::graph::grouped::groupedGemmCta(args, cta.shared(), 2, 4);
  })) << cta.error();
  for (uint16_t v : out)
    ASSERT_EQ(v, grouped::kPoison);
}

// Which grouped MoE layers take the kernel (GroupedGemm.h): the shapes of the measured
// models at their benchmark batches.
TEST(GroupedGemmSelection, ShapesAndRowsPerExpert) {
  using kiln::graph::groupedGemmShapesFit;
  // DeepSeek-V3 (hidden 7168, 256 experts of 2048, top 8) at 4096 and 512 tokens.
  EXPECT_TRUE(groupedGemmShapesFit(7168, 2048, 256, 4096 * 8));
  EXPECT_TRUE(groupedGemmShapesFit(7168, 2048, 256, 512 * 8));
  // Qwen3-30B-A3B (2048, 128 experts of 768, top 8) at 2048 tokens: 128 rows an expert.
  EXPECT_TRUE(groupedGemmShapesFit(2048, 768, 128, 2048 * 8));
  // Mixtral-8x7B (4096, 8 experts of 14336, top 2): 64 rows an expert at 256 tokens take
  // it, 512 at 2048 tokens (compute-bound) keep cuBLASLt.
  EXPECT_TRUE(groupedGemmShapesFit(4096, 14336, 8, 256 * 2));
  EXPECT_FALSE(groupedGemmShapesFit(4096, 14336, 8, 2048 * 2));
  // Nemotron-3-Nano (hidden 2688, experts of 1856): not multiples of the CTA's features.
  EXPECT_FALSE(groupedGemmShapesFit(2688, 1856, 128, 4096 * 6));
  EXPECT_FALSE(groupedGemmShapesFit(2048, 896, 128, 4096));
}

} // namespace
