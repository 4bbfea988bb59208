// CPU test (runs in CI): the skinny GEMM's tensor-core register kernel
// (SkinnyGemmDevice.cuh) run by the CTA emulator. The plain form against fp64 products of
// the bf16 operands; the SwiGLU epilogue against the plain pair's two outputs put
// through kiln_swiglu_bf16's rounding, bit for bit: one and two row tiles, a row group's
// last rows missing, features past n within a CTA, K past the last 32-wide step, both
// depths, and the up weights at a distance other than n * k.
#include "CtaEmulator.h" // first: the device header takes its primitives from it

#include "SkinnyGemmDevice.cuh"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

using kiln::graph::SkinnyGemmArgs;
using kiln::test::emu::CtaEmulator;
namespace skinny = kiln::graph::skinny;

namespace {

uint16_t toBf16(float v) { return __bfloat16_as_ushort(__float2bfloat16_rn(v)); }
float fromBf16(uint16_t v) { return __bfloat162float(__ushort_as_bfloat16(v)); }

std::vector<uint16_t> randomBf16(size_t n, std::mt19937 &rng, float scale) {
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<uint16_t> v(n);
  for (uint16_t &e : v)
    e = toBf16(dist(rng));
  return v;
}

constexpr uint16_t kPoison = 0xFFFF;

// Every CTA of one launch of the register kernel (the launcher's grid for it).
template <int TILES, int DEPTH, bool GLU> std::string runGrid(const SkinnyGemmArgs &a) {
  constexpr int features = GLU ? skinny::kMmaFeatures / 2 : skinny::kMmaFeatures;
  const unsigned gx = static_cast<unsigned>((a.n + features - 1) / features);
  const unsigned gy = GLU ? 1u : static_cast<unsigned>(a.batch);
  const unsigned gz = static_cast<unsigned>((a.m + 8 * TILES - 1) / (8 * TILES));
  using Partial = float(*)[skinny::kMmaFeatures][8 * TILES];
  CtaEmulator cta(skinny::kThreads, sizeof(float) * skinny::kWarps * skinny::kMmaFeatures * 8 * TILES,
                  7);
  for (unsigned z = 0; z < gz; ++z)
    for (unsigned y = 0; y < gy; ++y)
      for (unsigned x = 0; x < gx; ++x)
        if (!cta.run({x, y, z}, [&] {
              skinny::skinnyMmaCta<TILES, DEPTH, GLU>(a, false,
                                                      reinterpret_cast<Partial>(cta.shared()));
            }))
          return cta.error();
  return "";
}

struct Case {
  int64_t m, n, k, wGap;
};

template <int TILES, int DEPTH> void checkCase(const Case &c) {
  SCOPED_TRACE("m " + std::to_string(c.m) + " n " + std::to_string(c.n) + " k " +
               std::to_string(c.k) + " depth " + std::to_string(DEPTH));
  std::mt19937 rng(static_cast<uint32_t>(c.m * 131 + c.n * 7 + c.k));
  const int64_t wStride = c.n * c.k + c.wGap, outStride = c.m * c.n;
  const auto x = randomBf16(c.m * c.k, rng, 1.0f);
  const auto w = randomBf16(wStride + c.n * c.k, rng, 2.0f / std::sqrt(float(c.k)));
  std::vector<uint16_t> pair(2 * outStride, kPoison), h(c.m * c.n, kPoison);
  SkinnyGemmArgs a{x.data(), c.k,        0,          w.data(), c.k, wStride, nullptr,
                   pair.data(), c.n,     outStride,  2,        c.m, c.n,     c.k};
  ASSERT_EQ((runGrid<TILES, DEPTH, false>(a)), "");
  // The pair against fp64: the mma's fp32 sums, one rounding to bf16.
  for (int64_t e = 0; e < 2; ++e)
    for (int64_t r = 0; r < c.m; ++r)
      for (int64_t f = 0; f < c.n; ++f) {
        double want = 0, magnitude = 0;
        for (int64_t i = 0; i < c.k; ++i) {
          const double p = double(fromBf16(x[r * c.k + i])) *
                           double(fromBf16(w[e * wStride + f * c.k + i]));
          want += p;
          magnitude += std::fabs(p);
        }
        const float got = fromBf16(pair[e * outStride + r * c.n + f]);
        ASSERT_NEAR(got, want, std::fabs(want) / 128 + magnitude * 1e-5 + 1e-6)
            << "entry " << e << " row " << r << " feature " << f;
      }
  // The epilogue: swiglu of the pair's two bf16 outputs, rounded as kiln_swiglu_bf16.
  a.glu = h.data();
  a.ldGlu = c.n;
  std::fill(pair.begin(), pair.end(), kPoison);
  std::vector<uint16_t> plain(2 * outStride, kPoison);
  SkinnyGemmArgs plainArgs = a;
  plainArgs.glu = nullptr;
  plainArgs.out = plain.data();
  ASSERT_EQ((runGrid<TILES, DEPTH, false>(plainArgs)), "");
  ASSERT_EQ((runGrid<TILES, DEPTH, true>(a)), "");
  for (uint16_t v : pair)
    ASSERT_EQ(v, kPoison) << "the epilogue wrote the pair's outputs";
  for (int64_t r = 0; r < c.m; ++r)
    for (int64_t f = 0; f < c.n; ++f) {
      const float gate = fromBf16(plain[r * c.n + f]), up = fromBf16(plain[outStride + r * c.n + f]);
      const uint16_t want = toBf16(kiln::graph::swigluOfBf16(gate, up));
      ASSERT_EQ(h[r * c.n + f], want) << "row " << r << " feature " << f;
    }
}

// Rows 1-8: one tile; 9-16 (and beyond, in more row groups): two. K of 2312 is 73 steps of
// 32: a warp takes 9-10 of them, in batches of 4 or 8 (two batches at depth 8, the last
// ragged), so the depths accumulate in different batches.
const Case kOneTile[] = {{1, 40, 64, 0},  {3, 20, 136, 8}, {8, 24, 256, 0},
                         {5, 4, 32, 16},  {2, 16, 2312, 0}};
const Case kTwoTiles[] = {{9, 16, 96, 0}, {16, 8, 64, 8}, {17, 24, 64, 0},
                          {33, 12, 40, 0}, {12, 8, 2312, 8}};

TEST(SkinnyGemmEmulation, PairAndSwigluEpilogueOneTile) {
  for (const Case &c : kOneTile) {
    checkCase<1, skinny::kMmaStepsInFlight>(c);
    checkCase<1, skinny::kMmaStepsInFlightDeep>(c);
  }
}

TEST(SkinnyGemmEmulation, PairAndSwigluEpilogueTwoTiles) {
  for (const Case &c : kTwoTiles) {
    checkCase<2, skinny::kMmaStepsInFlight>(c);
    checkCase<2, skinny::kMmaStepsInFlightDeep>(c);
  }
}

} // namespace
