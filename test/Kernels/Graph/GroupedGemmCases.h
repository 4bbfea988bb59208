// The grouped expert GEMM's test cases (lib/Kernels/Graph/GroupedGemm.h), shared by the
// CPU emulation test and the GPU test: token-tile tables that cover every instruction
// width (tiles of 1 to 160 rows, widths 32..160), tiles of one expert side by side,
// experts without rows, rows no tile covers (which must stay untouched), more tiles than
// CTAs (the persistent loop and the loads that cross tiles), and an input that ends with
// the last tile.
#ifndef KILN_TEST_KERNELS_GRAPH_GROUPEDGEMMCASES_H
#define KILN_TEST_KERNELS_GRAPH_GROUPEDGEMMCASES_H

#include "GroupedGemm.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace kiln::test::grouped {

struct Case {
  std::string name;
  int64_t n, k;
  int experts;
  std::vector<graph::GroupedGemmTile> tiles;
  int ctas;             // persistent CTAs to run (fewer than the tiles x feature tiles)
  int trailingRows = 3; // input rows past the last tile (no tile covers them)

  int64_t rows() const {
    int64_t last = 0;
    for (const auto &t : tiles)
      last = std::max<int64_t>(last, t.first + t.rows);
    return last + trailingRows;
  }
};

inline std::vector<Case> cases() {
  return {
      // One expert in two tiles, an expert skipped, a gap of rows between tiles.
      {"widths", 256, 256, 4, {{0, 0, 1}, {0, 1, 31}, {2, 40, 33}, {3, 73, 64}, {1, 140, 65}}, 3},
      {"wide", 512, 512, 3, {{2, 0, 160}, {0, 160, 129}, {1, 289, 97}, {1, 386, 128}}, 3},
      // K of one block and a single CTA walking every tile.
      {"short-k", 256, 64, 2, {{1, 0, 7}, {0, 7, 150}}, 1},
      // The input ends with the last tile: its token loads reach past the last row (the
      // TMA boxes of 32 rows read zeros there, never memory past the buffer).
      {"last-rows", 256, 128, 2, {{1, 0, 40}, {0, 40, 9}}, 2, 0},
  };
}

inline uint16_t toBf16(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16); // nearest-even
}
inline float fromBf16(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float v;
  std::memcpy(&v, &u, 4);
  return v;
}

// Random inputs of a case: in [rows, k], weights [experts, n, k], and for the gated form
// the up weights [experts, n, k].
struct Data {
  std::vector<uint16_t> in, weights, up;
};
inline Data randomData(const Case &c, uint32_t seed, bool gated = false) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Data d;
  d.in.resize(static_cast<size_t>(c.rows() * c.k));
  d.weights.resize(static_cast<size_t>(c.experts * c.n * c.k));
  for (auto &v : d.in)
    v = toBf16(u(rng));
  for (auto &v : d.weights)
    v = toBf16(u(rng) / std::sqrt(static_cast<float>(c.k)));
  if (gated) {
    d.up.resize(d.weights.size());
    for (auto &v : d.up)
      v = toBf16(u(rng) / std::sqrt(static_cast<float>(c.k)));
  }
  return d;
}

// A gathered input for a case (GroupedGemmArgs::rowTokens): `tokens` rows of which the
// sorted row r is row rowTokens[r] (several rows may share a token, as a token's top-k
// pairs do); `d.in` is rewritten to the gathered rows, so check() still applies.
struct Gathered {
  std::vector<uint16_t> x;
  std::vector<int32_t> rowTokens;
  int64_t tokens;
};
inline Gathered gatherInput(const Case &c, Data &d, uint32_t seed) {
  Gathered g;
  g.tokens = c.rows() / 2 + 5;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  g.x.resize(static_cast<size_t>(g.tokens * c.k));
  for (auto &v : g.x)
    v = toBf16(u(rng));
  g.rowTokens.resize(static_cast<size_t>(c.rows()));
  for (int64_t r = 0; r < c.rows(); ++r) {
    g.rowTokens[r] = static_cast<int32_t>((r * 7 + 3) % g.tokens);
    std::copy_n(g.x.begin() + g.rowTokens[r] * c.k, c.k, d.in.begin() + r * c.k);
  }
  return g;
}

// in[row] . w[expert, f] exactly, and the sum of the products' magnitudes.
inline double exactDot(const Case &c, const Data &d, const std::vector<uint16_t> &w, int64_t row,
                       int expert, int64_t f, double &magnitude) {
  double sum = 0.0;
  magnitude = 0.0;
  for (int64_t i = 0; i < c.k; ++i) {
    const double p =
        double(fromBf16(d.in[row * c.k + i])) * double(fromBf16(w[(expert * c.n + f) * c.k + i]));
    sum += p;
    magnitude += std::fabs(p);
  }
  return sum;
}

constexpr uint16_t kPoison = 0xFFFF; // a bf16 NaN: rows no tile covers must keep it

// Every element of a row no tile covers is still poison.
inline std::string untouchedRows(const Case &c, const std::vector<char> &covered,
                                 const std::vector<uint16_t> &out) {
  for (int64_t row = 0; row < c.rows(); ++row)
    if (!covered[row])
      for (int64_t f = 0; f < c.n; ++f)
        if (out[row * c.n + f] != kPoison)
          return c.name + ": row " + std::to_string(row) + " is in no tile but was written";
  return "";
}

// Checks every element of `out` ([rows, n], poisoned before the call) that a tile covers
// against expect(row, expert, feature) = {value, tolerance}, and that every other element
// is still poison. Returns a description of the first mismatch, or "".
struct Expected {
  double value, tolerance;
};
template <class Expect>
std::string checkCovered(const Case &c, const std::vector<uint16_t> &out, const char *form,
                         Expect expect) {
  std::vector<char> covered(static_cast<size_t>(c.rows()), 0);
  for (const auto &t : c.tiles)
    for (int r = 0; r < t.rows; ++r) {
      const int64_t row = t.first + r;
      covered[row] = 1;
      for (int64_t f = 0; f < c.n; ++f) {
        const Expected want = expect(row, t.expert, f);
        const double got = fromBf16(out[row * c.n + f]);
        if (!(std::fabs(got - want.value) <= want.tolerance))
          return c.name + form + ": row " + std::to_string(row) + " feature " + std::to_string(f) +
                 " of expert " + std::to_string(t.expert) + ": " + std::to_string(got) + " vs " +
                 std::to_string(want.value);
      }
    }
  return untouchedRows(c, covered, out);
}

// The plain form: each covered element within one bf16 rounding of the exact product
// (plus the fp32 sum's own error).
inline std::string check(const Case &c, const Data &d, const std::vector<uint16_t> &out) {
  return checkCovered(c, out, "", [&](int64_t row, int expert, int64_t f) {
    double magnitude = 0.0;
    const double sum = exactDot(c, d, d.weights, row, expert, f, magnitude);
    return Expected{sum, std::ldexp(std::fabs(sum), -8) + magnitude * 1e-6 + 1e-30};
  });
}

// The gated form: each covered element is SwiGLU of the two exact products, each rounded
// to bf16 as the kernel's fp32 sums are (within one bf16 rounding plus the sums' own
// error, so the result within a few bf16 ulps).
inline std::string checkGated(const Case &c, const Data &d, const std::vector<uint16_t> &out) {
  return checkCovered(c, out, " (gated)", [&](int64_t row, int expert, int64_t f) {
    double gateMagnitude = 0.0, upMagnitude = 0.0;
    const double gate = fromBf16(
        toBf16(static_cast<float>(exactDot(c, d, d.weights, row, expert, f, gateMagnitude))));
    const double up =
        fromBf16(toBf16(static_cast<float>(exactDot(c, d, d.up, row, expert, f, upMagnitude))));
    const double want = gate / (1.0 + std::exp(-gate)) * up;
    // A gate or up one bf16 step off moves silu(gate) x up by about that step's share.
    return Expected{want, std::ldexp(std::fabs(want), -5) +
                              std::ldexp(std::fabs(up) + std::fabs(gate), -8) +
                              (gateMagnitude + upMagnitude) * 1e-6 + 1e-30};
  });
}

} // namespace kiln::test::grouped

#endif
