// CPU test (runs in CI): the grouped expert GEMM's cp.async ring (GroupedGemmSm90.cuh
// under KILN_GROUPED_GEMM_TMA 0: every consumer thread loads, a CTA barrier a K block;
// the previous library kernel, which kiln_bench_grouped_gemm keeps as its baseline) run
// by the CTA emulator on the shared cases: the loads kAhead items ahead, the ring's
// barrier and wgmma waits (a stage overwritten before its wgmmas were waited for gives
// wrong products) and the zero-filled rows past a tile.
#include "CtaEmulator.h" // first: the device header takes its primitives from it

#define KILN_GROUPED_GEMM_TMA 0
#define KILN_GROUPED_GEMM_STAGES 4
#include "GroupedGemmCases.h"
#include "GroupedGemmSm90.cuh"

#include <gtest/gtest.h>

#include <vector>

using namespace kiln::test;
using kiln::test::emu::CtaEmulator;

namespace {

TEST(GroupedGemmCpAsyncEmulation, MatchesExactProductsOnEveryTile) {
  namespace grouped_gemm = kiln::graph::grouped;
  for (const grouped::Case &c : grouped::cases()) {
    SCOPED_TRACE(c.name);
    const grouped::Data d = grouped::randomData(c, 11);
    std::vector<uint16_t> out(static_cast<size_t>(c.rows() * c.n), grouped::kPoison);
    const int32_t tileCount = static_cast<int32_t>(c.tiles.size());
    const kiln::graph::GroupedGemmArgs args{
        d.in.data(), d.weights.data(), out.data(), c.tiles.data(), &tileCount, c.n, c.k};
    CtaEmulator cta(grouped_gemm::kThreads, grouped_gemm::kSharedBytes, 5);
    for (int b = 0; b < c.ctas; ++b)
      ASSERT_TRUE(cta.run({unsigned(b), 0, 0}, [&] {
        grouped_gemm::groupedGemmCta(args, cta.shared(), b, c.ctas);
      })) << cta.error();
    EXPECT_EQ(grouped::check(c, d, out), "");
  }
}

} // namespace
