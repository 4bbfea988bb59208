// CPU test (runs in CI): the grouped expert GEMM's producer-warpgroup variant
// (GroupedGemmSm90.cuh under KILN_GROUPED_GEMM_PRODUCER, which kiln_bench_grouped_gemm
// compares with the library's kernel) run by the CTA emulator on the shared cases:
// mbarrier hand-offs in both directions, the producer's early exit, and the consumers'
// release of each stage only after their wgmmas are done (an early release lets the
// producer overwrite a stage a wgmma still reads: the emulator's wgmmas read at their
// wait, so the products come out wrong).
#include "CtaEmulator.h" // first: the device header takes its primitives from it

#define KILN_GROUPED_GEMM_PRODUCER 1
#include "GroupedGemmCases.h"
#include "GroupedGemmSm90.cuh"

#include <gtest/gtest.h>

#include <vector>

using namespace kiln::test;
using kiln::test::emu::CtaEmulator;

namespace {

TEST(GroupedGemmProducerEmulation, MatchesExactProductsOnEveryTile) {
  namespace grouped_gemm = kiln::graph::grouped;
  for (const uint64_t seed : {5u, 6u}) {
    for (const grouped::Case &c : grouped::cases()) {
      SCOPED_TRACE(c.name + " seed " + std::to_string(seed));
      const grouped::Data d = grouped::randomData(c, 11);
      std::vector<uint16_t> out(static_cast<size_t>(c.rows() * c.n), grouped::kPoison);
      const int32_t tileCount = static_cast<int32_t>(c.tiles.size());
      const kiln::graph::GroupedGemmArgs args{
          d.in.data(), d.weights.data(), out.data(), c.tiles.data(), &tileCount, c.n, c.k};
      CtaEmulator cta(grouped_gemm::kSpecializedThreads, grouped_gemm::kSpecializedSharedBytes,
                      seed);
      for (int b = 0; b < c.ctas; ++b)
        ASSERT_TRUE(cta.run({unsigned(b), 0, 0}, [&] {
          grouped_gemm::groupedGemmCtaSpecialized(args, cta.shared(), b, c.ctas);
        })) << cta.error();
      EXPECT_EQ(grouped::check(c, d, out), "");
    }
  }
}

} // namespace
