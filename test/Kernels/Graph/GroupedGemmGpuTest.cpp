// GPU test: the MoE grouped expert GEMM (GroupedGemmSm90.cu, wgmma) on the cases the CPU
// emulation test runs (GroupedGemmCases.h), launched as kiln_moe launches it, against
// exact products; rows no tile covers stay untouched, and a second launch gives the same
// bits. On an sm_90 device the kernel must be ready (the library carries the sm_90a
// image); elsewhere the MoE layer keeps cuBLASLt and the test says so.
#include "GpuTest.h"
#include "GroupedGemmCases.h"
#include "kiln/Kernels/Graph.h"

#include <gtest/gtest.h>

#include <vector>

using namespace kiln::test;

namespace {

template <typename T> T *deviceCopy(const std::vector<T> &host) {
  T *p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, host.size() * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
            cudaSuccess);
  return p;
}

template <typename... T> void freeDevice(T *...buffers) { (cudaFree(buffers), ...); }

TEST(GroupedGemmGpu, MatchesExactProductsOnEveryTile) {
  KILN_REQUIRE_GPU();
  int device = 0, major = 0, minor = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  if (major != 9 || minor != 0) {
    EXPECT_FALSE(kiln::graph::groupedGemmDeviceReady(true));
    GTEST_SKIP() << "sm_" << major << minor << ": the grouped GEMM is sm_90a only";
  }
  ASSERT_TRUE(kiln::graph::groupedGemmDeviceReady(true)) << "no sm_90a image in the library";
  for (const grouped::Case &c : grouped::cases()) {
    SCOPED_TRACE(c.name);
    const grouped::Data d = grouped::randomData(c, 11);
    const size_t outElems = static_cast<size_t>(c.rows() * c.n);
    uint16_t *in = deviceCopy(d.in), *weights = deviceCopy(d.weights);
    uint16_t *out = deviceCopy(std::vector<uint16_t>(outElems, grouped::kPoison));
    auto *tiles = deviceCopy(c.tiles);
    int32_t *count = deviceCopy(std::vector<int32_t>{static_cast<int32_t>(c.tiles.size())});
    const kiln::graph::GroupedGemmArgs args{in,  weights, out,      tiles,    count,
                                            c.n, c.k,     c.rows(), c.experts};
    // A bound above the tiles in use: the CTAs past them must return untouched.
    const int64_t bound = static_cast<int64_t>(c.tiles.size()) + 5;
    ASSERT_EQ(kiln::graph::launchGroupedGemm(args, bound, nullptr), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<uint16_t> got(outElems), again(outElems);
    ASSERT_EQ(cudaMemcpy(got.data(), out, outElems * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(grouped::check(c, d, got), "");
    ASSERT_EQ(kiln::graph::launchGroupedGemm(args, bound, nullptr), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(again.data(), out, outElems * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_TRUE(again == got) << "a second launch gave other bits";
    freeDevice(in, weights, out, tiles, count);
  }
}

// The gated form (gate, up and SwiGLU in one pass) against the exact products, and
// bitwise against what kiln_moe ran before it: the two plain GEMMs, then the elementwise
// SwiGLU.
TEST(GroupedGemmGpu, GatedEqualsTwoGemmsThenSwiglu) {
  KILN_REQUIRE_GPU();
  if (!kiln::graph::groupedGemmDeviceReady(true))
    GTEST_SKIP() << "not an sm_90a device: the grouped GEMM does not run here";
  for (const grouped::Case &c : grouped::cases()) {
    SCOPED_TRACE(c.name);
    const grouped::Data d = grouped::randomData(c, 12, true);
    const size_t outElems = static_cast<size_t>(c.rows() * c.n);
    const std::vector<uint16_t> poison(outElems, grouped::kPoison);
    uint16_t *in = deviceCopy(d.in), *gate = deviceCopy(d.weights), *up = deviceCopy(d.up);
    uint16_t *fused = deviceCopy(poison), *gateOut = deviceCopy(poison);
    uint16_t *upOut = deviceCopy(poison);
    auto *tiles = deviceCopy(c.tiles);
    int32_t *count = deviceCopy(std::vector<int32_t>{static_cast<int32_t>(c.tiles.size())});
    const int64_t bound = static_cast<int64_t>(c.tiles.size()) + 5;
    const kiln::graph::GroupedGemmArgs gated{in,  gate, fused,    tiles,     count,
                                             c.n, c.k,  c.rows(), c.experts, up};
    kiln::graph::GroupedGemmArgs plain = gated;
    plain.up = nullptr;
    plain.out = gateOut;
    ASSERT_EQ(kiln::graph::launchGroupedGemm(gated, bound, nullptr), cudaSuccess);
    ASSERT_EQ(kiln::graph::launchGroupedGemm(plain, bound, nullptr), cudaSuccess);
    plain.weights = up;
    plain.out = upOut;
    ASSERT_EQ(kiln::graph::launchGroupedGemm(plain, bound, nullptr), cudaSuccess);
    // SwiGLU over the rows the tiles cover (the others hold poison in both).
    ASSERT_EQ(kiln_swiglu_bf16(gateOut, upOut, gateOut, static_cast<int64_t>(outElems), nullptr),
              KILN_OK);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<uint16_t> got(outElems), want(outElems);
    ASSERT_EQ(cudaMemcpy(got.data(), fused, outElems * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(want.data(), gateOut, outElems * 2, cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_EQ(grouped::checkGated(c, d, got), "");
    std::vector<char> covered(static_cast<size_t>(c.rows()), 0);
    for (const auto &t : c.tiles)
      for (int r = 0; r < t.rows; ++r)
        covered[t.first + r] = 1;
    for (size_t i = 0; i < outElems; ++i) {
      if (covered[i / c.n]) {
        ASSERT_EQ(got[i], want[i]) << "element " << i << ": the fused SwiGLU rounds otherwise";
      }
    }
    freeDevice(in, gate, up, fused, gateOut, upOut, tiles, count);
  }
}

// Gathered input (x's rows through each sorted row's token, as kiln_moe's first GEMM
// reads them), gated: bitwise what the same GEMM gives on the rows gathered beforehand.
TEST(GroupedGemmGpu, GatheredEqualsPreGathered) {
  KILN_REQUIRE_GPU();
  if (!kiln::graph::groupedGemmDeviceReady(true))
    GTEST_SKIP() << "not an sm_90a device: the grouped GEMM does not run here";
  for (const grouped::Case &c : grouped::cases()) {
    SCOPED_TRACE(c.name);
    grouped::Data d = grouped::randomData(c, 13, true);
    const grouped::Gathered g = grouped::gatherInput(c, d, 14);
    const size_t outElems = static_cast<size_t>(c.rows() * c.n);
    const std::vector<uint16_t> poison(outElems, grouped::kPoison);
    uint16_t *x = deviceCopy(g.x), *rowsIn = deviceCopy(d.in);
    uint16_t *gate = deviceCopy(d.weights), *up = deviceCopy(d.up);
    uint16_t *gathered = deviceCopy(poison), *pre = deviceCopy(poison);
    int32_t *rowTokens = deviceCopy(g.rowTokens);
    auto *tiles = deviceCopy(c.tiles);
    int32_t *count = deviceCopy(std::vector<int32_t>{static_cast<int32_t>(c.tiles.size())});
    const int64_t bound = static_cast<int64_t>(c.tiles.size()) + 5;
    const kiln::graph::GroupedGemmArgs direct{x,   gate, gathered, tiles,     count,
                                              c.n, c.k,  g.tokens, c.experts, up,
                                              rowTokens};
    const kiln::graph::GroupedGemmArgs sorted{rowsIn, gate, pre,      tiles,     count,
                                              c.n,    c.k,  c.rows(), c.experts, up};
    ASSERT_EQ(kiln::graph::launchGroupedGemm(direct, bound, nullptr), cudaSuccess);
    ASSERT_EQ(kiln::graph::launchGroupedGemm(sorted, bound, nullptr), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<uint16_t> got(outElems), want(outElems);
    ASSERT_EQ(cudaMemcpy(got.data(), gathered, outElems * 2, cudaMemcpyDeviceToHost),
              cudaSuccess);
    ASSERT_EQ(cudaMemcpy(want.data(), pre, outElems * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(grouped::checkGated(c, d, got), "");
    EXPECT_TRUE(got == want) << "the gathered rows give other bits than the sorted copy";
    freeDevice(x, rowsIn, gate, up, gathered, pre, rowTokens, tiles, count);
  }
}

// Whether a token's output bits depend on the tile around it: the same rows computed as
// one tile of 160 (instruction width 160), as tiles of 1..31 rows (width 32) and in
// between. If they never do, decode and verify steps (whose batches differ) may take
// the grouped GEMM with speculation staying lossless (docs/kernels-graph.md); kiln_moe
// keeps the pairs mode for them until this has passed on the GPU.
TEST(GroupedGemmGpu, RowBitsDoNotDependOnTheTile) {
  KILN_REQUIRE_GPU();
  if (!kiln::graph::groupedGemmDeviceReady(true))
    GTEST_SKIP() << "not an sm_90a device: the grouped GEMM does not run here";
  const int64_t n = 512, k = 1024, rows = 160;
  grouped::Case whole{"whole", n, k, 1, {{0, 0, 160}}, 2, 0};
  const grouped::Data d = grouped::randomData(whole, 21, true);
  const std::vector<std::vector<kiln::graph::GroupedGemmTile>> splits = {
      {{0, 0, 160}},
      {{0, 0, 1}, {0, 1, 31}, {0, 32, 33}, {0, 65, 64}, {0, 129, 31}},
      {{0, 0, 97}, {0, 97, 2}, {0, 99, 61}}};
  uint16_t *in = deviceCopy(d.in), *gate = deviceCopy(d.weights), *up = deviceCopy(d.up);
  for (const bool gatedForm : {false, true}) {
    std::vector<uint16_t> first;
    for (const auto &tiles : splits) {
      const size_t outElems = static_cast<size_t>(rows * n);
      uint16_t *out = deviceCopy(std::vector<uint16_t>(outElems, grouped::kPoison));
      auto *dTiles = deviceCopy(tiles);
      int32_t *count = deviceCopy(std::vector<int32_t>{static_cast<int32_t>(tiles.size())});
      const kiln::graph::GroupedGemmArgs args{in, gate, out,  dTiles, count,
                                              n,  k,    rows, 1,      gatedForm ? up : nullptr};
      ASSERT_EQ(kiln::graph::launchGroupedGemm(args, static_cast<int64_t>(tiles.size()), nullptr),
                cudaSuccess);
      std::vector<uint16_t> got(outElems);
      ASSERT_EQ(cudaMemcpy(got.data(), out, outElems * 2, cudaMemcpyDeviceToHost), cudaSuccess);
      if (first.empty())
        first = got;
      else
        EXPECT_TRUE(got == first) << (gatedForm ? "gated" : "plain") << ", split into "
                                  << tiles.size() << " tiles: other bits";
      freeDevice(out, dTiles, count);
    }
  }
  freeDevice(in, gate, up);
}

} // namespace
