// CPU test (runs in CI): the MoE grouped expert GEMM's device code (GroupedGemmSm90.cuh,
// the library's TMA ring) run on the host by the CTA emulator
// (test/Kernels/Common/CtaEmulator.h), wgmma and TMA included, against exact products.
// Without a GPU this checks the swizzled shared layout the tensor-map loads write and the
// wgmma descriptors read, the boxes past the input's end (zeros), the accumulator
// fragment the epilogue stores, the masking of token columns past a tile, the persistent
// loop over tiles, and the mbarrier hand-offs in both directions under random warp
// schedules and random landing times: a stage read before its bytes are in, or
// overwritten before its wgmmas were waited for, gives wrong products.
#include "CtaEmulator.h" // first: the device header takes its primitives from it

#include "GroupedGemmCases.h"
#include "GroupedGemmSm90.cuh"

#include <gtest/gtest.h>

#include <vector>

using namespace kiln::test;
using kiln::test::emu::CtaEmulator;

namespace {

namespace grouped_gemm = kiln::graph::grouped;

// The maps launchGroupedGemm encodes, for the emulator.
grouped_gemm::GroupedGemmMaps mapsFor(const kiln::graph::GroupedGemmArgs &a) {
  const auto weightRows = static_cast<uint64_t>(a.experts * a.n);
  const uint32_t box = a.up ? grouped_gemm::kFeatureTile / 2 : grouped_gemm::kFeatureTile;
  return {{a.weights, weightRows, static_cast<uint64_t>(a.k), box},
          {a.in, static_cast<uint64_t>(a.rows), static_cast<uint64_t>(a.k),
           grouped_gemm::kTokenBox},
          {a.up, weightRows, static_cast<uint64_t>(a.k), box}};
}

// Runs blocks [first, last) of `ctas` through the TMA ring.
bool runBlocks(CtaEmulator &cta, const kiln::graph::GroupedGemmArgs &args, int first, int last,
               int ctas) {
  const grouped_gemm::GroupedGemmMaps maps = mapsFor(args);
  for (int b = first; b < last; ++b)
    if (!cta.run({unsigned(b), 0, 0},
                 [&] { grouped_gemm::groupedGemmCtaTma(args, maps, cta.shared(), b, ctas); }))
      return false;
  return true;
}

TEST(GroupedGemmEmulation, MatchesExactProductsOnEveryTile) {
  for (const uint64_t seed : {5u, 6u}) {
    for (const grouped::Case &c : grouped::cases()) {
      SCOPED_TRACE(c.name + " seed " + std::to_string(seed));
      const grouped::Data d = grouped::randomData(c, 11);
      std::vector<uint16_t> out(static_cast<size_t>(c.rows() * c.n), grouped::kPoison);
      const int32_t tileCount = static_cast<int32_t>(c.tiles.size());
      const kiln::graph::GroupedGemmArgs args{
          d.in.data(), d.weights.data(), out.data(), c.tiles.data(), &tileCount, c.n,
          c.k,         c.rows(),         c.experts};
      CtaEmulator cta(grouped_gemm::kTmaThreads, grouped_gemm::kTmaSharedBytes, seed);
      ASSERT_TRUE(runBlocks(cta, args, 0, c.ctas, c.ctas)) << cta.error();
      EXPECT_EQ(grouped::check(c, d, out), "");
    }
  }
}

// The gated form (an MoE layer's gate and up GEMMs with SwiGLU in the epilogue): the
// gate's and the up's rows of the same features side by side in a stage, paired in the
// epilogue; a pairing or a row offset off by a tile gives values far off SwiGLU.
TEST(GroupedGemmEmulation, GatedMatchesSwigluOfExactProducts) {
  for (const grouped::Case &c : grouped::cases()) {
    SCOPED_TRACE(c.name);
    const grouped::Data d = grouped::randomData(c, 12, true);
    std::vector<uint16_t> out(static_cast<size_t>(c.rows() * c.n), grouped::kPoison);
    const int32_t tileCount = static_cast<int32_t>(c.tiles.size());
    const kiln::graph::GroupedGemmArgs args{
        d.in.data(), d.weights.data(), out.data(), c.tiles.data(), &tileCount,
        c.n,         c.k,              c.rows(),   c.experts,      d.up.data()};
    CtaEmulator cta(grouped_gemm::kTmaThreads, grouped_gemm::kTmaSharedBytes, 7);
    ASSERT_TRUE(runBlocks(cta, args, 0, c.ctas, c.ctas)) << cta.error();
    EXPECT_EQ(grouped::checkGated(c, d, out), "");
  }
}

// Gathered input (the MoE layer's first GEMM reads x's rows through each sorted row's
// token, by cp.async from the producer warpgroup, the weights still by TMA), plain and
// gated: a wrong row, chunk or swizzle, or a stage read before the copies are in, gives
// wrong products.
TEST(GroupedGemmEmulation, GatheredInputMatchesExactProducts) {
  for (const bool gatedForm : {false, true}) {
    for (const grouped::Case &c : grouped::cases()) {
      SCOPED_TRACE(c.name + (gatedForm ? " gated" : " plain"));
      grouped::Data d = grouped::randomData(c, 13, gatedForm);
      const grouped::Gathered g = grouped::gatherInput(c, d, 14);
      std::vector<uint16_t> out(static_cast<size_t>(c.rows() * c.n), grouped::kPoison);
      const int32_t tileCount = static_cast<int32_t>(c.tiles.size());
      const kiln::graph::GroupedGemmArgs args{g.x.data(),
                                              d.weights.data(),
                                              out.data(),
                                              c.tiles.data(),
                                              &tileCount,
                                              c.n,
                                              c.k,
                                              g.tokens,
                                              c.experts,
                                              gatedForm ? d.up.data() : nullptr,
                                              g.rowTokens.data()};
      CtaEmulator cta(grouped_gemm::kTmaThreads, grouped_gemm::kTmaSharedBytes, 15);
      ASSERT_TRUE(runBlocks(cta, args, 0, c.ctas, c.ctas)) << cta.error();
      EXPECT_EQ(gatedForm ? grouped::checkGated(c, d, out) : grouped::check(c, d, out), "");
    }
  }
}

// The dense form (an lm_head's rows in a decode step): equal token tiles over the rows,
// read through the dense split instead of a tile table, every row within one bf16
// rounding of the exact product.
TEST(GroupedGemmEmulation, DenseTilesMatchExactProducts) {
  struct Dense {
    int64_t rows, n, k;
    int32_t tiles;
    int ctas;
  };
  for (const Dense dense :
       {Dense{1, 256, 512, 1, 1}, Dense{37, 512, 256, 1, 2}, Dense{300, 512, 128, 2, 3}}) {
    SCOPED_TRACE("rows " + std::to_string(dense.rows) + " tiles " + std::to_string(dense.tiles));
    // One expert; the table only tells check() which rows the tiles cover.
    const int32_t each = static_cast<int32_t>((dense.rows + dense.tiles - 1) / dense.tiles);
    grouped::Case c{"dense", dense.n, dense.k, 1, {}, 1, 0};
    for (int32_t first = 0; first < dense.rows; first += each)
      c.tiles.push_back(
          {0, first, static_cast<int32_t>(std::min<int64_t>(each, dense.rows - first))});
    const grouped::Data d = grouped::randomData(c, 21);
    std::vector<uint16_t> out(static_cast<size_t>(dense.rows * dense.n), grouped::kPoison);
    kiln::graph::GroupedGemmArgs args{d.in.data(), d.weights.data(), out.data(), nullptr, nullptr,
                                      dense.n,     dense.k,          dense.rows, 1};
    args.denseTiles = dense.tiles;
    CtaEmulator cta(grouped_gemm::kTmaThreads, grouped_gemm::kTmaSharedBytes, 23);
    ASSERT_TRUE(runBlocks(cta, args, 0, dense.ctas, dense.ctas)) << cta.error();
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
      d.in.data(), d.weights.data(), out.data(), c.tiles.data(), &tileCount, c.n,
      c.k,         c.rows(),         c.experts};
  CtaEmulator cta(grouped_gemm::kTmaThreads, grouped_gemm::kTmaSharedBytes, 9);
  ASSERT_TRUE(runBlocks(cta, args, 2, 3, 4)) << cta.error();
  for (uint16_t v : out)
    ASSERT_EQ(v, grouped::kPoison);
}

// Which dense GEMMs of decode steps take the kernel (H100: 132 SMs): an lm_head's
// vocabulary fills the SMs in whole waves; Llama-3.1-8B's projections do not.
TEST(GroupedGemmSelection, DenseShapesThatFillTheSms) {
  using kiln::graph::denseGemmFillsTheSms;
  EXPECT_TRUE(denseGemmFillsTheSms(128256, 4096, 132));  // 501 of 528 feature slots
  EXPECT_TRUE(denseGemmFillsTheSms(32000, 4096, 132));   // 125 of 132
  EXPECT_FALSE(denseGemmFillsTheSms(4096, 4096, 132));   // 16: would need split K
  EXPECT_FALSE(denseGemmFillsTheSms(14336, 4096, 132));  // 56
  EXPECT_FALSE(denseGemmFillsTheSms(151936, 4096, 132)); // not a multiple of 256
  EXPECT_FALSE(denseGemmFillsTheSms(32768, 100, 132));   // k not a multiple of 64
  EXPECT_FALSE(denseGemmFillsTheSms(32768, 4096, 0));
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

// The token tiles the plan kernel may write, which the scratch holds (12 bytes a tile
// in the 72 a pair of the pointer section): never more than the pairs, so a decode
// step's 8 pairs over 256 experts need 8, not 257.
TEST(GroupedGemmSelection, TileBoundNeverExceedsThePairs) {
  using kiln::graph::groupedGemmTileBound;
  EXPECT_EQ(groupedGemmTileBound(8, 256), 8);
  EXPECT_EQ(groupedGemmTileBound(1, 1024), 1);
  EXPECT_EQ(groupedGemmTileBound(4096 * 8, 256), 205 + 256);
  // 700 rows over 4 experts: at most ceil(700 / 160) + 4 tiles.
  EXPECT_EQ(groupedGemmTileBound(700, 4), 5 + 4);
  for (int64_t pairs = 1; pairs < 2000; pairs += 7)
    for (int64_t experts : {1, 8, 64, 256})
      EXPECT_LE(12 * groupedGemmTileBound(pairs, experts) + 4, 72 * pairs);
}

} // namespace
