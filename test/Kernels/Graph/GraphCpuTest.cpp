// CPU tests (run in CI): the references against hand-computed small cases (each rope
// type included), and the launchers' argument validation, which precedes any CUDA call.
#include "GraphReference.h"
#include "ProgrammaticLaunch.h"
#include "kiln/Kernels/Gemm.h"
#include "kiln/Kernels/Graph.h"
#include "kiln/Kernels/Moe.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

using namespace kiln::reference;

namespace {

uint16_t bf(float v) { return floatToBf16(v); }
float fl(uint16_t b) { return bf16ToFloat(b); }

kiln_rope_params_t ropeParams(int32_t type, float theta) {
  kiln_rope_params_t p{};
  p.type = type;
  p.theta = theta;
  p.factor = 1.0f;
  p.low = 1.0f;
  p.high = 4.0f;
  p.original_max_position = 8192;
  p.attention_factor = 1.0f;
  return p;
}

TEST(GraphReference, Bf16Rounding) {
  EXPECT_EQ(bf(1.0f), 0x3F80);
  EXPECT_EQ(bf(1.0f + 0x1p-8f), 0x3F80);                 // tie -> even
  EXPECT_EQ(bf(1.0f + 3 * 0x1p-8f), 0x3F82);             // tie -> even (up)
  EXPECT_EQ(doubleToBf16(1.0 + 0x1p-8), 0x3F80);         // tie -> even
  // fp32 would round this to the tie 1 + 2^-8 first (then to 1.0): a single rounding
  // goes up.
  EXPECT_EQ(doubleToBf16(1.0 + 0x1p-8 + 0x1p-30), 0x3F81);
  EXPECT_EQ(doubleToBf16(-(1.0 + 0x1p-8 + 0x1p-30)), 0xBF81);
  EXPECT_EQ(fl(0xC040), -3.0f);
}

TEST(GraphReference, RmsNormHandComputed) {
  // x = [1 2 3 4]: mean(x^2) = 7.5, scale = 1/sqrt(7.5) = 0.36514837...
  // h = x * scale = [0.365148 0.730297 1.095445 1.460593] -> bf16
  //   [187 * 2^-9, 187 * 2^-8, 140 * 2^-7, 187 * 2^-7] = [0.365234375 0.73046875 1.09375 1.4609375]
  // out = w * h with w = [1 1 0.5 2] (exact in bf16).
  const uint16_t x[4] = {bf(1), bf(2), bf(3), bf(4)};
  const uint16_t w[4] = {bf(1), bf(1), bf(0.5f), bf(2)};
  uint16_t out[4];
  rmsNormReference(x, w, out, 1, 4, 0.0f);
  EXPECT_EQ(fl(out[0]), 0.365234375f);
  EXPECT_EQ(fl(out[1]), 0.73046875f);
  EXPECT_EQ(fl(out[2]), 0.546875f);
  EXPECT_EQ(fl(out[3]), 2.921875f);
  // A zero row stays zero (eps keeps the scale finite); rows are independent.
  const uint16_t x2[8] = {0, 0, 0, 0, bf(2), bf(2), bf(2), bf(2)};
  uint16_t out2[8];
  rmsNormReference(x2, w, out2, 2, 4, 1e-6f);
  for (int j = 0; j < 4; ++j)
    EXPECT_EQ(out2[j], 0);
  // Row 1: scale = 1/sqrt(4 + 1e-6) ~ 0.5 - 6e-8, h = bf16(1 - 1.2e-7) = 1.
  EXPECT_EQ(fl(out2[4]), 1.0f);
  EXPECT_EQ(fl(out2[6]), 0.5f);
  EXPECT_EQ(fl(out2[7]), 2.0f);
}

TEST(GraphReference, RopeFrequenciesDefaultAndLinear) {
  float inv[2];
  kiln_rope_params_t p = ropeParams(0, 10000.0f);
  ASSERT_TRUE(ropeInvFreqReference(p, 4, inv)); // 1 / 10000^(0/4), 1 / 10000^(2/4)
  EXPECT_EQ(inv[0], 1.0f);
  EXPECT_EQ(inv[1], 1.0f / 100.0f);
  p.type = 1; // linear: inv / factor
  p.factor = 4.0f;
  ASSERT_TRUE(ropeInvFreqReference(p, 4, inv));
  EXPECT_EQ(inv[0], 0.25f);
  EXPECT_EQ(inv[1], (1.0f / 100.0f) / 4.0f);
  p.type = 9;
  EXPECT_FALSE(ropeInvFreqReference(p, 4, inv));
}

TEST(GraphReference, RopeFrequenciesLlama3) {
  // d = 8, theta = 1e4: inv = [1, 0.1, 0.01, 0.001], wavelengths 2 pi / inv =
  // [6.3, 62.8, 628.3, 6283]. original 1024, low 1, high 4, factor 8: high-frequency
  // wavelength 256, low-frequency wavelength 1024. So i = 0, 1 keep inv (short waves),
  // i = 3 is divided by 8 (long), i = 2 is smoothed with
  // s = (1024 / 628.3 - 1) / (4 - 1) = 0.2099155: inv = (1 - s) inv / 8 + s inv.
  kiln_rope_params_t p = ropeParams(2, 10000.0f);
  p.factor = 8.0f;
  p.low = 1.0f;
  p.high = 4.0f;
  p.original_max_position = 1024;
  float inv[4];
  ASSERT_TRUE(ropeInvFreqReference(p, 8, inv));
  EXPECT_EQ(inv[0], 1.0f);
  EXPECT_NEAR(inv[1], 0.1, 1e-8);
  const double s = (1024.0 * 0.01 / (2.0 * M_PI) - 1.0) / 3.0;
  EXPECT_NEAR(s, 0.20991554, 1e-7);
  EXPECT_NEAR(inv[2], 0.01 * ((1.0 - s) / 8.0 + s), 1e-8);
  EXPECT_NEAR(inv[2], 0.00308676, 1e-8);
  EXPECT_NEAR(inv[3], 0.001 / 8.0, 1e-10);
}

TEST(GraphReference, RopeFrequenciesYarn) {
  // d = 8, theta = 1e4, factor 4, correction range [1, 3]: ramp (i - 1) / 2 clamped =
  // [0, 0, 0.5, 1]; inv = interpolation (1/(4 pos)) * ramp + extrapolation (1/pos) * (1 - ramp).
  kiln_rope_params_t p = ropeParams(3, 10000.0f);
  p.factor = 4.0f;
  p.low = 1.0f;
  p.high = 3.0f;
  float inv[4];
  ASSERT_TRUE(ropeInvFreqReference(p, 8, inv));
  EXPECT_EQ(inv[0], 1.0f);
  EXPECT_NEAR(inv[1], 0.1, 1e-8);
  EXPECT_NEAR(inv[2], 0.5 * 0.01 / 4.0 + 0.5 * 0.01, 1e-9); // 0.00625
  EXPECT_NEAR(inv[3], 0.001 / 4.0, 1e-10);
  // low == high: high becomes high + 0.001 (HF's "prevent singularity").
  p.low = p.high = 2.0f;
  ASSERT_TRUE(ropeInvFreqReference(p, 8, inv));
  EXPECT_NEAR(inv[2], 0.01, 1e-9);
  EXPECT_NEAR(inv[3], 0.001 / 4.0, 1e-10);
}

TEST(GraphReference, RopeHandComputed) {
  // d = 4 (half 2), theta 1e4: inv = [1, 0.01]; position 1.
  //   f = 0: cos 1 = 0.540302 -> bf16 138 * 2^-8 = 0.5390625, sin 1 = 0.841471 -> 0.83984375
  //   f = 1: cos 0.01 = 0.99995 -> 1.0, sin 0.01 = 0.00999983 -> 164 * 2^-14 = 0.010009765625
  // x = [1, 2 | 0.5, -1]:
  //   out0 = bf16(1 * c0 + bf16(-0.5 * s0)) = 0.5390625 - 0.419921875 = 0.119140625
  //   out1 = bf16(2 * c1 + bf16(1 * s1)) = bf16(2.010009765625) = 2.015625
  //   out2 = bf16(0.5 * c0 + 1 * s0) = 0.26953125 + 0.83984375 = 1.109375
  //   out3 = bf16(-1 * c1 + bf16(2 * s1)) = bf16(-0.97998046875) = -0.98046875
  uint16_t c, s;
  ropeCosSinReference(1, 1.0f, 1.0f, &c, &s);
  EXPECT_EQ(fl(c), 0.5390625f);
  EXPECT_EQ(fl(s), 0.83984375f);
  ropeCosSinReference(1, 0.01f, 1.0f, &c, &s);
  EXPECT_EQ(fl(c), 1.0f);
  EXPECT_EQ(fl(s), 0.010009765625f);
  ropeCosSinReference(1, 1.0f, 2.0f, &c, &s); // attention_factor scales both (exactly here)
  EXPECT_EQ(fl(c), 1.078125f);
  EXPECT_EQ(fl(s), 1.6796875f);

  const kiln_rope_params_t p = ropeParams(0, 10000.0f);
  const uint16_t x[8] = {bf(1), bf(2), bf(0.5f), bf(-1), bf(1), bf(2), bf(0.5f), bf(-1)};
  const int32_t positions[2] = {1, 0};
  uint16_t out[8];
  ASSERT_TRUE(ropeReference(x, positions, out, 2, 1, 4, 0, p));
  EXPECT_EQ(fl(out[0]), 0.119140625f);
  EXPECT_EQ(fl(out[1]), 2.015625f);
  EXPECT_EQ(fl(out[2]), 1.109375f);
  EXPECT_EQ(fl(out[3]), -0.98046875f);
  for (int j = 4; j < 8; ++j) // position 0: cos 1, sin 0, the identity
    EXPECT_EQ(out[j], x[j]);

  // Partial rope of head_dim 8, rotary_dim 4: the first 4 elements are the whole-head rope
  // of head_dim 4 (its frequencies span 4 dims), the last 4 pass through.
  const uint16_t wide[8] = {bf(1), bf(2), bf(0.5f), bf(-1), bf(7), bf(-3), bf(0.25f), bf(9)};
  uint16_t partial[8];
  ASSERT_TRUE(ropeReference(wide, positions, partial, 1, 1, 8, 4, p));
  for (int j = 0; j < 4; ++j)
    EXPECT_EQ(partial[j], out[j]) << j;
  for (int j = 4; j < 8; ++j)
    EXPECT_EQ(partial[j], wide[j]) << j;
  // rotary_dim == head_dim is the whole head.
  uint16_t whole[8];
  ASSERT_TRUE(ropeReference(x, positions, whole, 2, 1, 4, 4, p));
  for (int j = 0; j < 8; ++j)
    EXPECT_EQ(whole[j], out[j]) << j;
}

TEST(GraphReference, AddSwigluHandComputed) {
  const uint16_t a[3] = {bf(1), bf(3), bf(-2)};
  const uint16_t b[3] = {bf(0.00390625f), bf(0.25f), bf(2)};
  uint16_t out[3];
  addReference(a, b, out, 3);
  EXPECT_EQ(fl(out[0]), 1.0f); // 1 + 2^-8: tie, to even
  EXPECT_EQ(fl(out[1]), 3.25f);
  EXPECT_EQ(out[2], 0); // +0
  // silu(0) = 0; silu(1) = 0.7310586 -> 187 * 2^-8 = 0.73046875, * 2 = 1.4609375;
  // silu(-1) = -0.2689414 -> -138 * 2^-9 = -0.26953125.
  const uint16_t gate[3] = {bf(0), bf(1), bf(-1)};
  const uint16_t up[3] = {bf(5), bf(2), bf(1)};
  swigluReference(gate, up, out, 3);
  EXPECT_EQ(fl(out[0]), 0.0f);
  EXPECT_EQ(fl(out[1]), 1.4609375f);
  EXPECT_EQ(fl(out[2]), -0.26953125f);
}

TEST(GraphReference, EmbeddingAndGather) {
  const uint16_t table[6] = {1, 2, 3, 4, 5, 6}; // 3 rows of 2
  const int32_t ids[4] = {2, -1, 0, 3};
  uint16_t out[8];
  embeddingReference(ids, table, out, 4, 3, 2);
  const uint16_t want[8] = {5, 6, 0, 0, 1, 2, 0, 0};
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(out[i], want[i]) << i;
  gatherRowsReference(table, ids, out, 4, 2, 3);
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(out[i], want[i]) << i;
}

// A vocabulary-parallel rank's lookup: its rows [first, first + rows) only; the ranks'
// lookups sum to the whole table's. And the interleave of gathered column blocks.
TEST(GraphReference, EmbeddingRowsAndBlocksToColumns) {
  const uint16_t table[8] = {1, 2, 3, 4, 5, 6, 7, 8}; // 4 rows of 2
  const int32_t ids[5] = {3, -1, 0, 2, 4};
  uint16_t whole[10], low[10], high[10];
  embeddingReference(ids, table, whole, 5, 4, 2);
  embeddingRowsReference(ids, table, low, 5, 0, 2, 2);
  embeddingRowsReference(ids, table + 4, high, 5, 2, 2, 2);
  const uint16_t wantHigh[10] = {7, 8, 0, 0, 0, 0, 5, 6, 0, 0};
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(high[i], wantHigh[i]) << i;
    EXPECT_EQ(low[i] + high[i], whole[i]) << i;
    EXPECT_TRUE(low[i] == 0 || high[i] == 0) << i;
  }
  // 3 parts of [2 rows, 2 cols]: part p's row r lands at columns [2p, 2p + 2) of row r.
  const uint16_t blocks[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  uint16_t out[12];
  blocksToColumnsReference(blocks, out, 3, 2, 2);
  const uint16_t want[12] = {1, 2, 5, 6, 9, 10, 3, 4, 7, 8, 11, 12};
  for (int i = 0; i < 12; ++i)
    EXPECT_EQ(out[i], want[i]) << i;
}

TEST(GraphReference, ArgmaxTiesNanZeros) {
  const uint16_t nan = 0x7FC0, inf = 0x7F80, ninf = 0xFF80, nzero = 0x8000;
  const uint16_t logits[6 * 4] = {
      bf(1), bf(3), bf(3), bf(2),     // tie: first
      ninf, ninf, ninf, ninf,         // all -inf: 0
      bf(1), bf(7), nan, nan,         // NaN beats everything, first NaN
      nzero, 0, bf(-1), nzero,        // -0 == +0: first
      bf(-5), inf, bf(2), inf,        // +inf tie
      bf(-3), bf(-2), bf(-2.5f), bf(-9)};
  int32_t out[6];
  argmaxReference(logits, out, 6, 4);
  EXPECT_EQ(out[0], 1);
  EXPECT_EQ(out[1], 0);
  EXPECT_EQ(out[2], 2);
  EXPECT_EQ(out[3], 0);
  EXPECT_EQ(out[4], 1);
  EXPECT_EQ(out[5], 1);
}

TEST(GraphReference, GemmHandComputed) {
  // x [2,3], w [2,3] (nn.Linear weight), bias [2]: out = x w^T + b.
  const uint16_t x[6] = {bf(1), bf(2), bf(3), bf(-1), bf(0.5f), bf(4)};
  const uint16_t w[6] = {bf(1), bf(0), bf(-1), bf(2), bf(1), bf(0.25f)};
  const uint16_t bias[2] = {bf(0.5f), bf(-1)};
  double out[4];
  gemmReference(x, w, bias, out, 2, 2, 3);
  EXPECT_EQ(out[0], 1 - 3 + 0.5);
  EXPECT_EQ(out[1], 2 + 2 + 0.75 - 1);
  EXPECT_EQ(out[2], -1 - 4 + 0.5);
  EXPECT_EQ(out[3], -2 + 0.5 + 1 - 1);
  gemmReference(x, w, nullptr, out, 2, 2, 3);
  EXPECT_EQ(out[3], -2 + 0.5 + 1);
}

// ---- launcher validation (fake aligned device addresses: never dereferenced) ---------
void *fake(uintptr_t v) { return reinterpret_cast<void *>(v); }
const int32_t *fakeIndex(uintptr_t v) { return reinterpret_cast<const int32_t *>(v); }

void expectError(kiln_status_t got, kiln_status_t want, const char *kernel, const char *arg) {
  EXPECT_EQ(got, want) << kiln_status_name(got) << ": " << kiln_last_error();
  const std::string message = kiln_last_error();
  EXPECT_NE(message.find(kernel), std::string::npos) << message;
  EXPECT_NE(message.find(arg), std::string::npos) << "want '" << arg << "' in: " << message;
}

constexpr kiln_status_t kInvalid = KILN_ERROR_INVALID_ARGUMENT;
constexpr kiln_status_t kUnsupported = KILN_ERROR_UNSUPPORTED;

TEST(GraphValidation, EmbeddingRowsAndBlocksToColumns) {
  const char *k = "kiln_embedding_rows_bf16";
  void *t = fake(0x10000), *o = fake(0x20000);
  const int32_t *ids = fakeIndex(0x30000);
  expectError(kiln_embedding_rows_bf16(nullptr, t, o, 4, 0, 10, 8, nullptr), kInvalid, k, "ids");
  expectError(kiln_embedding_rows_bf16(ids, t, o, 4, -1, 10, 8, nullptr), kInvalid, k, "first");
  expectError(kiln_embedding_rows_bf16(ids, t, o, 4, int64_t(1) << 32, 10, 8, nullptr),
              kUnsupported, k, "first");
  expectError(kiln_embedding_rows_bf16(ids, t, o, 4, 10, 0, 8, nullptr), kInvalid, k, "rows");
  expectError(kiln_embedding_rows_bf16(ids, t, o, 4, 10, 10, 0, nullptr), kInvalid, k, "hidden");
  EXPECT_EQ(kiln_embedding_rows_bf16(ids, t, o, 0, 10, 10, 8, nullptr), KILN_OK);
  const char *g = "kiln_blocks_to_columns_bf16";
  expectError(kiln_blocks_to_columns_bf16(nullptr, o, 2, 4, 8, nullptr), kInvalid, g, "blocks");
  expectError(kiln_blocks_to_columns_bf16(t, nullptr, 2, 4, 8, nullptr), kInvalid, g, "out");
  expectError(kiln_blocks_to_columns_bf16(fake(0x10001), o, 2, 4, 8, nullptr), kInvalid, g,
              "blocks");
  expectError(kiln_blocks_to_columns_bf16(t, o, 0, 4, 8, nullptr), kInvalid, g, "parts");
  expectError(kiln_blocks_to_columns_bf16(t, o, 2, -1, 8, nullptr), kInvalid, g, "rows");
  expectError(kiln_blocks_to_columns_bf16(t, o, 2, 4, 0, nullptr), kInvalid, g, "cols");
  EXPECT_EQ(kiln_blocks_to_columns_bf16(t, o, 2, 0, 8, nullptr), KILN_OK); // no rows, no CUDA
  EXPECT_STREQ(kiln_last_error(), "");
}

TEST(GraphValidation, Embedding) {
  const char *k = "kiln_embedding_bf16";
  void *t = fake(0x10000), *o = fake(0x20000);
  const int32_t *ids = fakeIndex(0x30000);
  expectError(kiln_embedding_bf16(nullptr, t, o, 4, 10, 8, nullptr), kInvalid, k, "ids");
  expectError(kiln_embedding_bf16(ids, nullptr, o, 4, 10, 8, nullptr), kInvalid, k, "table");
  expectError(kiln_embedding_bf16(ids, t, nullptr, 4, 10, 8, nullptr), kInvalid, k, "out");
  expectError(kiln_embedding_bf16(ids, fake(0x10001), o, 4, 10, 8, nullptr), kInvalid, k, "table");
  expectError(kiln_embedding_bf16(ids, t, o, -1, 10, 8, nullptr), kInvalid, k, "tokens");
  expectError(kiln_embedding_bf16(ids, t, o, 4, 0, 8, nullptr), kInvalid, k, "vocab");
  expectError(kiln_embedding_bf16(ids, t, o, 4, 10, 0, nullptr), kInvalid, k, "hidden");
  expectError(kiln_embedding_bf16(ids, t, o, INT64_MAX / 4, 10, 8, nullptr), kInvalid, k, "out");
  EXPECT_EQ(kiln_embedding_bf16(ids, t, o, 0, 10, 8, nullptr), KILN_OK); // no work, no CUDA
  EXPECT_STREQ(kiln_last_error(), "");
}

TEST(GraphValidation, GatherRows) {
  const char *k = "kiln_gather_rows_bf16";
  void *x = fake(0x10000), *o = fake(0x20000);
  const int32_t *rows = fakeIndex(0x30000);
  expectError(kiln_gather_rows_bf16(nullptr, rows, o, 2, 8, 4, nullptr), kInvalid, k, "x");
  expectError(kiln_gather_rows_bf16(x, nullptr, o, 2, 8, 4, nullptr), kInvalid, k, "rows");
  expectError(kiln_gather_rows_bf16(x, rows, nullptr, 2, 8, 4, nullptr), kInvalid, k, "out");
  expectError(kiln_gather_rows_bf16(x, fakeIndex(0x30002), o, 2, 8, 4, nullptr), kInvalid, k,
              "rows");
  expectError(kiln_gather_rows_bf16(x, rows, o, -2, 8, 4, nullptr), kInvalid, k, "num_rows");
  expectError(kiln_gather_rows_bf16(x, rows, o, 2, -8, 4, nullptr), kInvalid, k, "dim");
  expectError(kiln_gather_rows_bf16(x, rows, o, 2, 8, 0, nullptr), kInvalid, k,
              "num_source_rows");
  EXPECT_EQ(kiln_gather_rows_bf16(x, rows, o, 0, 8, 4, nullptr), KILN_OK);
}

TEST(GraphValidation, RmsNorm) {
  const char *k = "kiln_rms_norm_bf16";
  void *x = fake(0x10000), *w = fake(0x20000), *o = fake(0x30000);
  expectError(kiln_rms_norm_bf16(nullptr, w, o, 2, 8, 1e-6f, nullptr), kInvalid, k, "x");
  expectError(kiln_rms_norm_bf16(x, nullptr, o, 2, 8, 1e-6f, nullptr), kInvalid, k, "weight");
  expectError(kiln_rms_norm_bf16(x, w, nullptr, 2, 8, 1e-6f, nullptr), kInvalid, k, "out");
  expectError(kiln_rms_norm_bf16(x, w, fake(0x30003), 2, 8, 1e-6f, nullptr), kInvalid, k, "out");
  expectError(kiln_rms_norm_bf16(x, w, o, -1, 8, 1e-6f, nullptr), kInvalid, k, "rows");
  expectError(kiln_rms_norm_bf16(x, w, o, 2, 0, 1e-6f, nullptr), kInvalid, k, "dim");
  expectError(kiln_rms_norm_bf16(x, w, o, 2, 8, -1.0f, nullptr), kInvalid, k, "eps");
  expectError(kiln_rms_norm_bf16(x, w, o, 2, 8, NAN, nullptr), kInvalid, k, "eps");
  EXPECT_EQ(kiln_rms_norm_bf16(x, w, o, 0, 8, 1e-6f, nullptr), KILN_OK);
}

TEST(GraphValidation, AddRmsNorm) {
  const char *k = "kiln_add_rms_norm_bf16";
  void *a = fake(0x10000), *b = fake(0x20000), *w = fake(0x30000), *s = fake(0x40000),
       *o = fake(0x50000);
  expectError(kiln_add_rms_norm_bf16(nullptr, b, w, s, o, 2, 8, 1e-6f, nullptr), kInvalid, k, "a");
  expectError(kiln_add_rms_norm_bf16(a, nullptr, w, s, o, 2, 8, 1e-6f, nullptr), kInvalid, k, "b");
  expectError(kiln_add_rms_norm_bf16(a, b, nullptr, s, o, 2, 8, 1e-6f, nullptr), kInvalid, k,
              "weight");
  expectError(kiln_add_rms_norm_bf16(a, b, w, nullptr, o, 2, 8, 1e-6f, nullptr), kInvalid, k,
              "sum");
  expectError(kiln_add_rms_norm_bf16(a, b, w, fake(0x40001), o, 2, 8, 1e-6f, nullptr), kInvalid,
              k, "sum");
  expectError(kiln_add_rms_norm_bf16(a, b, w, s, nullptr, 2, 8, 1e-6f, nullptr), kInvalid, k,
              "out");
  expectError(kiln_add_rms_norm_bf16(a, b, w, s, s, 2, 8, 1e-6f, nullptr), kInvalid, k,
              "out and sum are the same buffer");
  expectError(kiln_add_rms_norm_bf16(a, b, w, s, o, -1, 8, 1e-6f, nullptr), kInvalid, k, "rows");
  expectError(kiln_add_rms_norm_bf16(a, b, w, s, o, 2, 0, 1e-6f, nullptr), kInvalid, k, "dim");
  expectError(kiln_add_rms_norm_bf16(a, b, w, s, o, 2, 8, NAN, nullptr), kInvalid, k, "eps");
  EXPECT_EQ(kiln_add_rms_norm_bf16(a, b, w, a, o, 0, 8, 1e-6f, nullptr), KILN_OK);
}

TEST(GraphValidation, RopePair) {
  const char *k = "kiln_rope_pair_bf16";
  kiln_rope_pair_t p{};
  p.x0 = fake(0x10000);
  p.out0 = fake(0x10000); // in place
  p.x1 = fake(0x40000);
  p.out1 = fake(0x50000);
  p.positions = fakeIndex(0x30000);
  p.tokens = 2;
  p.heads0 = 4;
  p.heads1 = 2;
  p.head_dim = 64;
  p.rope = ropeParams(0, 10000.0f);
  expectError(kiln_rope_pair_bf16(nullptr), kInvalid, k, "params");
  kiln_rope_pair_t bad = p;
  bad.x1 = nullptr;
  expectError(kiln_rope_pair_bf16(&bad), kInvalid, k, "x1");
  bad = p;
  bad.heads1 = 0;
  expectError(kiln_rope_pair_bf16(&bad), kInvalid, k, "heads1");
  bad = p;
  bad.head_dim = 66 * 8;
  expectError(kiln_rope_pair_bf16(&bad), kUnsupported, k, "head_dim");
  bad = p;
  bad.rotary_dim = 3;
  expectError(kiln_rope_pair_bf16(&bad), kInvalid, k, "rotary_dim");
  // One block rotates a token of both: an output over the other tensor is refused.
  bad = p;
  bad.out1 = fake(0x10000 + 64);
  expectError(kiln_rope_pair_bf16(&bad), kInvalid, k, "must not overlap");
  bad = p;
  bad.out0 = fake(0x40000);
  expectError(kiln_rope_pair_bf16(&bad), kInvalid, k, "must not overlap");
  bad = p;
  bad.tokens = 0;
  EXPECT_EQ(kiln_rope_pair_bf16(&bad), KILN_OK) << kiln_last_error();
}

TEST(GraphValidation, Rope) {
  const char *k = "kiln_rope_bf16";
  void *x = fake(0x10000), *o = fake(0x20000);
  const int32_t *pos = fakeIndex(0x30000);
  kiln_rope_params_t p = ropeParams(0, 10000.0f);
  expectError(kiln_rope_bf16(nullptr, pos, o, 2, 4, 64, 0, &p, nullptr), kInvalid, k, "x");
  expectError(kiln_rope_bf16(x, nullptr, o, 2, 4, 64, 0, &p, nullptr), kInvalid, k, "positions");
  expectError(kiln_rope_bf16(x, pos, nullptr, 2, 4, 64, 0, &p, nullptr), kInvalid, k, "out");
  expectError(kiln_rope_bf16(x, pos, o, 2, 4, 64, 0, nullptr, nullptr), kInvalid, k, "rope");
  expectError(kiln_rope_bf16(x, pos, o, -2, 4, 64, 0, &p, nullptr), kInvalid, k, "tokens");
  expectError(kiln_rope_bf16(x, pos, o, 2, 0, 64, 0, &p, nullptr), kInvalid, k, "heads");
  expectError(kiln_rope_bf16(x, pos, o, 2, 4, 0, 0, &p, nullptr), kInvalid, k, "head_dim");
  expectError(kiln_rope_bf16(x, pos, o, 2, 4, 65, 0, &p, nullptr), kInvalid, k, "head_dim");
  expectError(kiln_rope_bf16(x, pos, o, 2, 4, 1024, 0, &p, nullptr), kUnsupported, k, "head_dim");
  kiln_rope_params_t bad = p;
  bad.type = 4;
  expectError(kiln_rope_bf16(x, pos, o, 2, 4, 64, 0, &bad, nullptr), kInvalid, k, "rope->type");
  bad = p;
  bad.theta = 0.0f;
  expectError(kiln_rope_bf16(x, pos, o, 2, 4, 64, 0, &bad, nullptr), kInvalid, k, "rope->theta");
  bad = p;
  bad.attention_factor = INFINITY;
  expectError(kiln_rope_bf16(x, pos, o, 2, 4, 64, 0, &bad, nullptr), kInvalid, k,
              "rope->attention_factor");
  bad = p;
  bad.type = 1;
  bad.factor = 0.0f;
  expectError(kiln_rope_bf16(x, pos, o, 2, 4, 64, 0, &bad, nullptr), kInvalid, k, "rope->factor");
  bad = p;
  bad.type = 2;
  bad.factor = 8.0f;
  bad.high = bad.low;
  expectError(kiln_rope_bf16(x, pos, o, 2, 4, 64, 0, &bad, nullptr), kInvalid, k, "rope->high");
  bad.high = 4.0f;
  bad.original_max_position = 0;
  expectError(kiln_rope_bf16(x, pos, o, 2, 4, 64, 0, &bad, nullptr), kInvalid, k,
              "rope->original_max_position");
  bad = p;
  bad.type = 3;
  bad.factor = 4.0f;
  bad.low = NAN;
  expectError(kiln_rope_bf16(x, pos, o, 2, 4, 64, 0, &bad, nullptr), kInvalid, k, "rope->low");
  EXPECT_EQ(kiln_rope_bf16(x, pos, o, 0, 4, 64, 0, &p, nullptr), KILN_OK);
  // Partial rope: rotary_dim even, at most head_dim (0: the whole head).
  expectError(kiln_rope_bf16(x, pos, o, 2, 4, 64, 63, &p, nullptr), kInvalid, k,
              "rotary_dim 63 must be 0 (the whole head) or even and <= head_dim 64");
  expectError(kiln_rope_bf16(x, pos, o, 2, 4, 64, 66, &p, nullptr), kInvalid, k, "rotary_dim 66");
  expectError(kiln_rope_bf16(x, pos, o, 2, 4, 64, -2, &p, nullptr), kInvalid, k, "rotary_dim -2");
  EXPECT_EQ(kiln_rope_bf16(x, pos, o, 0, 4, 64, 16, &p, nullptr), KILN_OK);
  EXPECT_EQ(kiln_rope_bf16(x, pos, o, 0, 4, 64, 64, &p, nullptr), KILN_OK);
}

TEST(GraphValidation, AddSwiglu) {
  void *a = fake(0x10000), *b = fake(0x20000), *o = fake(0x30000);
  const char *k = "kiln_add_bf16";
  expectError(kiln_add_bf16(nullptr, b, o, 8, nullptr), kInvalid, k, "a");
  expectError(kiln_add_bf16(a, nullptr, o, 8, nullptr), kInvalid, k, "b");
  expectError(kiln_add_bf16(a, b, nullptr, 8, nullptr), kInvalid, k, "out");
  expectError(kiln_add_bf16(a, b, o, -8, nullptr), kInvalid, k, "n");
  expectError(kiln_add_bf16(a, b, o, INT64_MAX, nullptr), kInvalid, k, "n");
  EXPECT_EQ(kiln_add_bf16(a, b, o, 0, nullptr), KILN_OK);
  k = "kiln_swiglu_bf16";
  expectError(kiln_swiglu_bf16(nullptr, b, o, 8, nullptr), kInvalid, k, "gate");
  expectError(kiln_swiglu_bf16(a, nullptr, o, 8, nullptr), kInvalid, k, "up");
  expectError(kiln_swiglu_bf16(a, b, nullptr, 8, nullptr), kInvalid, k, "out");
  expectError(kiln_swiglu_bf16(fake(0x10001), b, o, 8, nullptr), kInvalid, k, "gate");
  expectError(kiln_swiglu_bf16(a, b, o, -1, nullptr), kInvalid, k, "n");
  EXPECT_EQ(kiln_swiglu_bf16(a, b, o, 0, nullptr), KILN_OK);
}

TEST(GraphValidation, Argmax) {
  const char *k = "kiln_argmax_bf16";
  void *l = fake(0x10000);
  int32_t *o = static_cast<int32_t *>(fake(0x20000));
  expectError(kiln_argmax_bf16(nullptr, o, 2, 8, nullptr), kInvalid, k, "logits");
  expectError(kiln_argmax_bf16(l, nullptr, 2, 8, nullptr), kInvalid, k, "out");
  expectError(kiln_argmax_bf16(l, o, -2, 8, nullptr), kInvalid, k, "rows");
  expectError(kiln_argmax_bf16(l, o, 2, 0, nullptr), kInvalid, k, "cols");
  expectError(kiln_argmax_bf16(l, o, 2, int64_t(1) << 31, nullptr), kUnsupported, k, "cols");
  EXPECT_EQ(kiln_argmax_bf16(l, o, 0, 8, nullptr), KILN_OK);
}

// An MTP module's input kernels (docs/mtp.md): the row concat and the next tokens.
TEST(GraphValidation, ConcatAndNextTokens) {
  const char *k = "kiln_concat_bf16";
  void *a = fake(0x10000), *b = fake(0x20000), *o = fake(0x30000);
  expectError(kiln_concat_bf16(nullptr, b, o, 4, 8, 8, nullptr), kInvalid, k, "a");
  expectError(kiln_concat_bf16(a, b, o, 4, 0, 8, nullptr), kInvalid, k, "cols_a");
  expectError(kiln_concat_bf16(a, b, o, -1, 8, 8, nullptr), kInvalid, k, "rows");
  expectError(kiln_concat_bf16(a, b, fake(0x10010), 4, 8, 8, nullptr), kInvalid, k,
              "out overlaps a or b");
  EXPECT_EQ(kiln_concat_bf16(a, b, o, 0, 8, 8, nullptr), KILN_OK) << kiln_last_error();
  const char *n = "kiln_next_tokens_i32";
  auto *ids = static_cast<int32_t *>(fake(0x10000)), *picks = static_cast<int32_t *>(fake(0x20000)),
       *rows = static_cast<int32_t *>(fake(0x30000)), *out = static_cast<int32_t *>(fake(0x40000));
  expectError(kiln_next_tokens_i32(nullptr, picks, rows, out, 8, 2, nullptr), kInvalid, n, "ids");
  expectError(kiln_next_tokens_i32(ids, nullptr, rows, out, 8, 2, nullptr), kInvalid, n, "picks");
  expectError(kiln_next_tokens_i32(ids, picks, rows, out, -1, 2, nullptr), kInvalid, n, "tokens");
  expectError(kiln_next_tokens_i32(ids, picks, rows, ids + 4, 8, 2, nullptr), kInvalid, n,
              "out overlaps ids, picks or rows");
  EXPECT_EQ(kiln_next_tokens_i32(ids, nullptr, nullptr, out, 0, 0, nullptr), KILN_OK)
      << kiln_last_error();
}

TEST(GraphValidation, Gemm) {
  const char *k = "kiln_gemm_bf16";
  EXPECT_EQ(kiln_gemm_create(nullptr), kInvalid);
  EXPECT_NE(std::string(kiln_last_error()).find("kiln_gemm_create"), std::string::npos);
  kiln_gemm_destroy(nullptr); // a no-op
  // A fake handle: every argument check happens before the handle is used.
  kiln_gemm_t *g = reinterpret_cast<kiln_gemm_t *>(fake(0x40000));
  void *x = fake(0x10000), *w = fake(0x20000), *b = fake(0x50000), *o = fake(0x30000);
  void *ws = fake(0x60000);
  expectError(kiln_gemm_set_policy(nullptr, KILN_GEMM_HEURISTIC), kInvalid,
              "kiln_gemm_set_policy", "gemm");
  expectError(kiln_gemm_set_policy(g, static_cast<kiln_gemm_policy_t>(7)), kInvalid,
              "kiln_gemm_set_policy", "policy 7 unknown");
  expectError(kiln_gemm_set_invariant_rows(nullptr, 64), kInvalid,
              "kiln_gemm_set_invariant_rows", "gemm");
  expectError(kiln_gemm_set_invariant_rows(g, 0), kInvalid, "kiln_gemm_set_invariant_rows",
              "rows 0 outside 1..");
  expectError(kiln_gemm_set_invariant_rows(g, int64_t{KILN_GEMM_MAX_INVARIANT_ROWS} + 1),
              kInvalid, "kiln_gemm_set_invariant_rows", "outside 1..");
  expectError(kiln_gemm_set_pin_rows(nullptr, 64), kInvalid, "kiln_gemm_set_pin_rows", "gemm");
  expectError(kiln_gemm_set_skinny(nullptr, KILN_GEMM_SKINNY_TENSOR_CORES), kInvalid,
              "kiln_gemm_set_skinny", "gemm");
  // A strided batch's input may be shared (batch stride 0, kiln_rt_linear_pair); the
  // weights' and outputs' strides may not be 0, and no stride negative.
  {
    const char *sb = "kiln_gemm_bf16_strided_batched";
    kiln_gemm_strided_batch_t p{};
    p.x = x;
    p.w = w;
    p.out = o;
    p.ldx = p.ldw = 8;
    p.ldo = 8;
    p.x_batch_stride = 0;
    p.w_batch_stride = 64;
    p.out_batch_stride = 64;
    p.batch = 2;
    p.m = 0; // valid arguments and no rows: returns before the handle is used
    p.n = p.k = 8;
    EXPECT_EQ(kiln_gemm_bf16_strided_batched(g, &p, ws, 64, nullptr), KILN_OK) << kiln_last_error();
    p.x_batch_stride = -8;
    expectError(kiln_gemm_bf16_strided_batched(g, &p, ws, 64, nullptr), kInvalid, sb,
                "x_batch_stride must be a non-negative multiple of 8");
    p.x_batch_stride = 0;
    p.w_batch_stride = 0;
    expectError(kiln_gemm_bf16_strided_batched(g, &p, ws, 64, nullptr), kInvalid, sb,
                "w_batch_stride must be a positive multiple of 8");
  }
  // The caller's KILN_GEMM_PIN_ROWS is put back afterwards.
  const char *exported = std::getenv("KILN_GEMM_PIN_ROWS");
  const std::string saved = exported ? exported : "";
  for (const char *bad : {"abc", "0", "64x", "-5", "", "99999999999999999999"}) {
    setenv("KILN_GEMM_PIN_ROWS", bad, 1);
    kiln_gemm_t *made = nullptr;
    expectError(kiln_gemm_create(&made), kInvalid, "kiln_gemm_create", "KILN_GEMM_PIN_ROWS");
    EXPECT_EQ(made, nullptr);
    kiln_gemm_destroy(made);
  }
  if (exported)
    setenv("KILN_GEMM_PIN_ROWS", saved.c_str(), 1);
  else
    unsetenv("KILN_GEMM_PIN_ROWS");
  expectError(kiln_gemm_set_pin_rows(g, 0), kInvalid, "kiln_gemm_set_pin_rows",
              "rows 0 outside 1..");
  expectError(kiln_gemm_set_pin_rows(g, int64_t{KILN_GEMM_MAX_INVARIANT_ROWS} + 1), kInvalid,
              "kiln_gemm_set_pin_rows", "outside 1..");
  expectError(kiln_gemm_set_skinny(g, static_cast<kiln_gemm_skinny_t>(3)), kInvalid,
              "kiln_gemm_set_skinny", "form 3 unknown");
  expectError(kiln_gemm_bf16(nullptr, x, w, b, o, 1, 8, 8, ws, 64, nullptr), kInvalid, k, "gemm");
  expectError(kiln_gemm_bf16(g, nullptr, w, b, o, 1, 8, 8, ws, 64, nullptr), kInvalid, k, "x");
  expectError(kiln_gemm_bf16(g, x, nullptr, b, o, 1, 8, 8, ws, 64, nullptr), kInvalid, k, "w");
  expectError(kiln_gemm_bf16(g, x, w, b, nullptr, 1, 8, 8, ws, 64, nullptr), kInvalid, k, "out");
  expectError(kiln_gemm_bf16(g, x, w, fake(0x50001), o, 1, 8, 8, ws, 64, nullptr), kInvalid, k,
              "bias");
  expectError(kiln_gemm_bf16(g, x, w, b, o, -1, 8, 8, ws, 64, nullptr), kInvalid, k, "m");
  expectError(kiln_gemm_bf16(g, x, w, b, o, 1, 0, 8, ws, 64, nullptr), kInvalid, k, "n");
  expectError(kiln_gemm_bf16(g, x, w, b, o, 1, 8, -3, ws, 64, nullptr), kInvalid, k, "k");
  expectError(kiln_gemm_bf16(g, x, w, b, o, int64_t(1) << 32, 8, 8, ws, 64, nullptr),
              kUnsupported, k, "m");
  expectError(kiln_gemm_bf16(g, x, w, b, o, 1, 8, 8, nullptr, 64, nullptr), kInvalid, k,
              "workspace");
  EXPECT_EQ(kiln_gemm_bf16(g, x, w, nullptr, o, 0, 8, 8, nullptr, 0, nullptr), KILN_OK);
  // The gate/up pair with its SwiGLU checks the pair as a strided batch, then h and the
  // pair's form, before it touches the handle; no rows is a no-op.
  {
    const char *ps = "kiln_gemm_bf16_pair_swiglu";
    void *h = fake(0x80000);
    kiln_gemm_strided_batch_t p{};
    p.x = x;
    p.w = w;
    p.out = o;
    p.ldx = p.ldw = p.ldo = 8;
    p.w_batch_stride = p.out_batch_stride = 64;
    p.batch = 2;
    p.m = 0;
    p.n = p.k = 8;
    EXPECT_EQ(kiln_gemm_bf16_pair_swiglu(g, &p, h, nullptr), KILN_OK) << kiln_last_error();
    expectError(kiln_gemm_bf16_pair_swiglu(nullptr, &p, h, nullptr), kInvalid, ps, "gemm is null");
    expectError(kiln_gemm_bf16_pair_swiglu(g, nullptr, h, nullptr), kInvalid, ps,
                "params is null");
    expectError(kiln_gemm_bf16_pair_swiglu(g, &p, nullptr, nullptr), kInvalid, ps, "h is null");
    expectError(kiln_gemm_bf16_pair_swiglu(g, &p, fake(0x80001), nullptr), kInvalid, ps,
                "h is not 2-byte aligned");
    p.batch = 3;
    expectError(kiln_gemm_bf16_pair_swiglu(g, &p, h, nullptr), kInvalid, ps,
                "a gate/up pair is a batch of 2 with one x");
    p.batch = 2;
    p.x_batch_stride = 64;
    expectError(kiln_gemm_bf16_pair_swiglu(g, &p, h, nullptr), kInvalid, ps,
                "x_batch_stride 64");
    p.x_batch_stride = 0;
    p.k = 12;
    expectError(kiln_gemm_bf16_pair_swiglu(g, &p, h, nullptr), kInvalid, ps,
                "k must be a positive multiple of 8");
  }
}

TEST(GraphValidation, GemmBatched) {
  const char *k = "kiln_gemm_bf16_batched";
  kiln_gemm_t *g = reinterpret_cast<kiln_gemm_t *>(fake(0x40000));
  const void *const *w = reinterpret_cast<const void *const *>(fake(0x10000));
  const void *const *x = reinterpret_cast<const void *const *>(fake(0x20000));
  void *const *o = reinterpret_cast<void *const *>(fake(0x30000));
  void *ws = fake(0x60000);
  auto call = [&](kiln_gemm_t *gemm, const void *const *wp, int64_t count, int64_t rows,
                  int64_t n, int64_t kk, void *workspace) {
    return kiln_gemm_bf16_batched(gemm, wp, x, o, count, rows, n, kk, workspace,
                                  workspace ? 64 : 0, nullptr);
  };
  expectError(call(nullptr, w, 4, 1, 8, 8, ws), kInvalid, k, "gemm");
  expectError(call(g, nullptr, 4, 1, 8, 8, ws), kInvalid, k, "w_ptrs");
  expectError(call(g, reinterpret_cast<const void *const *>(fake(0x10004)), 4, 1, 8, 8, ws),
              kInvalid, k, "w_ptrs is not pointer-aligned");
  expectError(call(g, w, -1, 1, 8, 8, ws), kInvalid, k, "count -1");
  expectError(call(g, w, 4, 0, 8, 8, ws), kInvalid, k, "rows 0 outside");
  expectError(call(g, w, 4, 1, 12, 8, ws), kInvalid, k, "n must be a positive multiple of 8");
  expectError(call(g, w, 4, 16, 8, 0, ws), kInvalid, k, "k must be a positive multiple of 8");
  expectError(kiln_gemm_bf16_batched(g, w, x, o, 4, 1, 8, 8, nullptr, 64, nullptr), kInvalid, k,
              "workspace");
  EXPECT_EQ(call(g, w, 0, 1, 8, 8, nullptr), KILN_OK);
}

// The routing rule on hand-made logits: softmax, the top k (ties: the lower index), in
// ascending expert order, renormalized and/or rounded as the flags say.
TEST(GraphReference, MoeRouteHandComputed) {
  // Logits 0, ln 2, ln 4, ln 2 (bf16-exact enough: the test uses the rounded values).
  const uint16_t bits[4] = {bf(0.0f), bf(std::log(2.0f)), bf(std::log(4.0f)),
                            bf(std::log(2.0f))};
  float logits[4];
  double e[4], sum = 0;
  for (int i = 0; i < 4; ++i) {
    logits[i] = fl(bits[i]);
    sum += e[i] = std::exp(double(logits[i]));
  }
  int32_t ids[2];
  float weights[2];
  MoeOptions o;
  o.topK = 2;
  moeRouteReference(logits, 4, o, ids, weights);
  // Experts 2 (largest) and 1 (ties with 3: the lower index), ascending.
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 2);
  EXPECT_FLOAT_EQ(weights[0], float(e[1] / sum));
  EXPECT_FLOAT_EQ(weights[1], float(e[2] / sum));
  o.flags = KILN_MOE_NORMALIZE_TOP_K;
  moeRouteReference(logits, 4, o, ids, weights);
  EXPECT_FLOAT_EQ(weights[0], float(e[1] / (e[1] + e[2])));
  EXPECT_FLOAT_EQ(weights[1], float(e[2] / (e[1] + e[2])));
  o.flags = KILN_MOE_NORMALIZE_TOP_K | KILN_MOE_ROUND_WEIGHTS;
  moeRouteReference(logits, 4, o, ids, weights);
  EXPECT_EQ(weights[0], fl(doubleToBf16(e[1] / (e[1] + e[2]))));
  EXPECT_EQ(weights[1], fl(doubleToBf16(e[2] / (e[1] + e[2]))));
}

// DeepSeek-V3's routing on hand-made logits: sigmoid scores, the correction bias moving
// the choice but not the weights, group-limited top-k (masked keys are 0, not -inf),
// renormalized weights times the routed scale.
TEST(GraphReference, MoeSigmoidGroupRouteHandComputed) {
  // 8 experts in 4 groups of 2. Logits make scores s; the bias lifts expert 1 over 2.
  const float logits[8] = {0.0f, -1.0f, 1.0f, 2.0f, -3.0f, -2.0f, 0.5f, -0.5f};
  const float bias[8] = {0.0f, 0.9f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  double s[8];
  for (int i = 0; i < 8; ++i)
    s[i] = 1.0 / (1.0 + std::exp(-double(logits[i])));
  MoeOptions o;
  o.topK = 2;
  o.flags = KILN_MOE_SIGMOID | KILN_MOE_NORMALIZE_TOP_K;
  o.scale = 2.5f;
  int32_t ids[2];
  float weights[2];
  // No bias, no groups: experts 3 (s 0.88) and 2 (0.73).
  moeRouteReference(logits, 8, o, ids, weights);
  EXPECT_EQ(ids[0], 2);
  EXPECT_EQ(ids[1], 3);
  EXPECT_FLOAT_EQ(weights[0], float(2.5 * s[2] / (s[2] + s[3])));
  // With the bias: expert 1's key is 0.27 + 0.9 = 1.17 > expert 3's, but its weight is
  // its unbiased score.
  o.scoreBias = bias;
  moeRouteReference(logits, 8, o, ids, weights);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 3);
  EXPECT_FLOAT_EQ(weights[0], float(2.5 * s[1] / (s[1] + s[3])));
  EXPECT_FLOAT_EQ(weights[1], float(2.5 * s[3] / (s[1] + s[3])));
  // Groups {0,1} (keys 0.5 + 1.17), {2,3} (0.73 + 0.88), {4,5}, {6,7}: keeping one
  // group leaves experts 0 and 1.
  o.groups = 4;
  o.topGroups = 1;
  moeRouteReference(logits, 8, o, ids, weights);
  EXPECT_EQ(ids[0], 0);
  EXPECT_EQ(ids[1], 1);
  EXPECT_FLOAT_EQ(weights[0], float(2.5 * s[0] / (s[0] + s[1])));
  // A bias of -2 makes every key negative; group {0,1} (keys -1.05, -1.12) is kept, and
  // the masked experts still lose (transformers' DeepseekV3TopkRouter masks with -inf,
  // where a 0 would pick experts 2 and 3).
  const float negative[8] = {-2.0f, -2.0f, -2.0f, -2.0f, -2.0f, -2.0f, -2.0f, -2.0f};
  const float tilted[8] = {3.0f, 2.0f, -3.0f, -3.0f, -3.0f, -3.0f, -3.0f, -3.0f};
  o.scoreBias = negative;
  moeRouteReference(tilted, 8, o, ids, weights);
  EXPECT_EQ(ids[0], 0);
  EXPECT_EQ(ids[1], 1);
}

TEST(GraphReference, MoeGroupMaxRouteHandComputed) {
  // DeepSeek-V2's group_limited_greedy: softmax scores, each group ranked by its largest
  // score, no renormalization. 8 experts in 4 groups of 2.
  const float logits[8] = {2.0f, -4.0f, 1.5f, 1.4f, 0.0f, -1.0f, 0.2f, 0.1f};
  double sum = 0.0, s[8];
  for (int i = 0; i < 8; ++i)
    sum += s[i] = std::exp(double(logits[i]));
  for (double &v : s)
    v /= sum;
  MoeOptions o;
  o.topK = 2;
  o.groups = 4;
  o.topGroups = 1;
  int32_t ids[2];
  float weights[2];
  // Sums of the two largest rank group {2,3} (1.5 + 1.4 logits) over {0,1} (2 - 4).
  moeRouteReference(logits, 8, o, ids, weights);
  EXPECT_EQ(ids[0], 2);
  EXPECT_EQ(ids[1], 3);
  // The largest alone ranks {0,1} first: its two experts, their softmax scores as they are.
  o.flags = KILN_MOE_GROUP_MAX;
  moeRouteReference(logits, 8, o, ids, weights);
  EXPECT_EQ(ids[0], 0);
  EXPECT_EQ(ids[1], 1);
  EXPECT_FLOAT_EQ(weights[0], float(s[0]));
  EXPECT_FLOAT_EQ(weights[1], float(s[1]));
  // Two groups kept: experts 0 and 2, the best of {0,1} and {2,3}.
  o.topGroups = 2;
  moeRouteReference(logits, 8, o, ids, weights);
  EXPECT_EQ(ids[0], 0);
  EXPECT_EQ(ids[1], 2);
}

// gpt-oss's clamped SwiGLU on hand values (alpha 1.702, limit 7): the clamps, and the
// roundings of gate * alpha, of the sigmoid, of the product and of up + 1.
TEST(GraphReference, ClampedSwigluHandComputed) {
  // gate 8 -> 7, up 9 -> 7: bf16(7 * 1.702) = 11.9375, whose sigmoid rounds to 1: 7 * 8.
  EXPECT_EQ(fl(clampedSwigluReference(bf(8), bf(9), 1.702f, 7.0f)), 56.0f);
  // up -9 -> -7: 7 * (-7 + 1).
  EXPECT_EQ(fl(clampedSwigluReference(bf(8), bf(-9), 1.702f, 7.0f)), -42.0f);
  // gate 1, up 0.5: bf16(1.702) = 1.703125, sigmoid 0.845942 -> 0.84765625, times
  // bf16(1.5): 1.271484375 -> 1.2734375.
  EXPECT_EQ(fl(clampedSwigluReference(bf(1), bf(0.5f), 1.702f, 7.0f)), 1.2734375f);
  // No lower clamp on the gate: -8 stays, bf16(-13.616) = -13.625, sigmoid 1.209849e-6
  // -> 1.265625 * 2^-20, times -8 and bf16(0 + 1).
  EXPECT_EQ(fl(clampedSwigluReference(bf(-8), bf(0), 1.702f, 7.0f)),
            -1.265625f * std::ldexp(1.0f, -17));
  // The limit is a parameter: 2 clamps gate 3 and up -3 to 2 and -2; bf16(2 * 1) = 2,
  // sigmoid(2) = 0.880797 -> 0.87890625, glu 1.7578125, times -1.
  EXPECT_EQ(fl(clampedSwigluReference(bf(3), bf(-3), 1.0f, 2.0f)), -1.7578125f);
}

// A one-token layer of 2 experts (hidden 2, inter 1) with the expert biases: top 1 picks
// expert 1 with weight 1, whose gate and up are 2 and 3 before their biases of 6.
TEST(GraphReference, MoeExpertBiasesHandComputed) {
  const uint16_t x[2] = {bf(1), bf(0)};
  const float logits[2] = {0.0f, 1.0f};
  const uint16_t gate[4] = {bf(1), bf(1), bf(2), bf(0)};
  const uint16_t up[4] = {bf(1), bf(1), bf(3), bf(0)};
  const uint16_t down[4] = {bf(1), bf(1), bf(0.5f), bf(-1)};
  const uint16_t gateBias[2] = {bf(0), bf(6)}, upBias[2] = {bf(0), bf(6)};
  const uint16_t downBias[4] = {bf(0), bf(0), bf(1), bf(0.25f)};
  MoeOptions o;
  o.topK = 1;
  o.flags = KILN_MOE_NORMALIZE_TOP_K;
  o.gateBias = gateBias;
  o.upBias = upBias;
  o.downBias = downBias;
  uint16_t out[2];
  // SwiGLU: g 8, u 9; bf16(silu(8)) = 8, times 9: 72; y = [36, -72] plus [1, 0.25]:
  // 37 and -71.75, a tie between -71.5 and -72 that rounds to the even -72.
  moeReference(x, logits, gate, up, down, out, 1, 2, 1, 2, o);
  EXPECT_EQ(fl(out[0]), 37.0f);
  EXPECT_EQ(fl(out[1]), -72.0f);
  // Clamped (gpt-oss): g 8 -> 7, u 9 -> 7, act 7 * 8 = 56; y = [28, -56] + the bias.
  o.flags |= KILN_MOE_CLAMPED_SWIGLU;
  moeReference(x, logits, gate, up, down, out, 1, 2, 1, 2, o);
  EXPECT_EQ(fl(out[0]), 29.0f);
  EXPECT_EQ(fl(out[1]), -55.75f);
  // Plain relu2 experts with the up bias: 9^2 = 81; y = [40.5, -81] + [1, 0.25]: 41.5,
  // and -80.75 (a tie) -> -81.
  o.flags = KILN_MOE_NORMALIZE_TOP_K;
  o.gateBias = nullptr;
  o.activation = 0;
  moeReference(x, logits, nullptr, up, down, out, 1, 2, 1, 2, o);
  EXPECT_EQ(fl(out[0]), 41.5f);
  EXPECT_EQ(fl(out[1]), -81.0f);
  // No biases: g 2, u 3, bf16(silu(2)) = 1.7578125, times 3 -> 5.28125; y = [2.640625,
  // -5.28125].
  o.upBias = o.downBias = nullptr;
  moeReference(x, logits, gate, up, down, out, 1, 2, 1, 2, o);
  EXPECT_EQ(fl(out[0]), 2.640625f);
  EXPECT_EQ(fl(out[1]), -5.28125f);
}

TEST(GraphReference, SigmoidGateHandComputed) {
  // Row 0: x . w = 0, sigmoid 0.5; row 1: x . w = 1 + 1 = 2, sigmoid(2) rounded to bf16.
  const uint16_t x[4] = {bf(2.0f), bf(-1.0f), bf(1.0f), bf(0.5f)};
  const uint16_t w[2] = {bf(1.0f), bf(2.0f)};
  const uint16_t value[4] = {bf(2.0f), bf(-6.0f), bf(4.0f), bf(1.0f)};
  uint16_t out[4];
  sigmoidGateReference(x, w, value, out, 2, 2, 2);
  EXPECT_EQ(fl(out[0]), 1.0f);
  EXPECT_EQ(fl(out[1]), -3.0f);
  const float s = fl(doubleToBf16(1.0 / (1.0 + std::exp(-2.0))));
  EXPECT_EQ(fl(out[2]), fl(bf(4.0f * s)));
  EXPECT_EQ(fl(out[3]), s);
}

TEST(GraphValidation, SigmoidGate) {
  const char *k = "kiln_sigmoid_gate_bf16";
  void *x = fake(0x10000), *w = fake(0x20000), *v = fake(0x30000), *o = fake(0x40000);
  expectError(kiln_sigmoid_gate_bf16(nullptr, w, v, o, 2, 8, 8, nullptr), kInvalid, k, "x");
  expectError(kiln_sigmoid_gate_bf16(x, nullptr, v, o, 2, 8, 8, nullptr), kInvalid, k, "w");
  expectError(kiln_sigmoid_gate_bf16(x, w, nullptr, o, 2, 8, 8, nullptr), kInvalid, k, "value");
  expectError(kiln_sigmoid_gate_bf16(x, w, v, nullptr, 2, 8, 8, nullptr), kInvalid, k, "out");
  expectError(kiln_sigmoid_gate_bf16(x, fake(0x20001), v, o, 2, 8, 8, nullptr), kInvalid, k,
              "w is not 2-byte aligned");
  expectError(kiln_sigmoid_gate_bf16(x, w, v, o, -1, 8, 8, nullptr), kInvalid, k, "rows");
  expectError(kiln_sigmoid_gate_bf16(x, w, v, o, 2, 0, 8, nullptr), kInvalid, k, "dim");
  expectError(kiln_sigmoid_gate_bf16(x, w, v, o, 2, 8, 0, nullptr), kInvalid, k, "cols");
  EXPECT_EQ(kiln_sigmoid_gate_bf16(x, w, v, o, 0, 8, 8, nullptr), KILN_OK);
}

TEST(GraphReference, GatedRmsNormHandComputed) {
  // One row, two groups of two. Group 0: gate 0 zeroes y (silu(0) = 0): the normalized
  // values are 0. Group 1: silu(40) = 40 in bf16 reach, y = (10, 10): normalized to 1.
  const uint16_t x[4] = {bf(3.0f), bf(-2.0f), bf(0.25f), bf(0.25f)};
  const uint16_t gate[6] = {bf(0.0f), bf(0.0f), bf(40.0f), bf(40.0f), bf(9.0f), bf(9.0f)};
  const uint16_t w[4] = {bf(1.0f), bf(1.0f), bf(2.0f), bf(-0.5f)};
  uint16_t out[4];
  gatedRmsNormReference(x, gate, w, out, 1, 4, 6, 2, 1e-5);
  EXPECT_EQ(fl(out[0]), 0.0f);
  EXPECT_EQ(fl(out[1]), 0.0f);
  EXPECT_EQ(fl(out[2]), 2.0f);
  EXPECT_EQ(fl(out[3]), -0.5f);
}

TEST(GraphReference, ActivationHandComputed) {
  const uint16_t x[3] = {bf(-2.0f), bf(3.0f), bf(0.0f)};
  uint16_t out[3];
  activationReference(x, out, 3, 0);
  EXPECT_EQ(fl(out[0]), 0.0f);
  EXPECT_EQ(fl(out[1]), 9.0f);
  EXPECT_EQ(fl(out[2]), 0.0f);
  activationReference(x, out, 3, 1);
  EXPECT_EQ(fl(out[2]), 0.0f);
  EXPECT_EQ(out[1], doubleToBf16(3.0 / (1.0 + std::exp(-3.0))));
}

TEST(GraphValidation, GatedRmsNorm) {
  const char *k = "kiln_gated_rms_norm_bf16";
  void *x = fake(0x10000), *g = fake(0x20000), *w = fake(0x30000), *o = fake(0x40000);
  expectError(kiln_gated_rms_norm_bf16(nullptr, g, w, o, 2, 8, 8, 4, 1e-5f, nullptr), kInvalid,
              k, "x");
  expectError(kiln_gated_rms_norm_bf16(x, nullptr, w, o, 2, 8, 8, 4, 1e-5f, nullptr), kInvalid,
              k, "gate");
  expectError(kiln_gated_rms_norm_bf16(x, g, w, o, 2, 8, 8, 3, 1e-5f, nullptr), kInvalid, k,
              "group_size 3 does not divide width 8");
  expectError(kiln_gated_rms_norm_bf16(x, g, w, o, 2, 8, 6, 4, 1e-5f, nullptr), kInvalid, k,
              "gate_stride 6 < width 8");
  expectError(kiln_gated_rms_norm_bf16(x, g, w, o, 2, 8, 8, 4, -1.0f, nullptr), kInvalid, k,
              "eps");
  EXPECT_EQ(kiln_gated_rms_norm_bf16(x, g, w, o, 0, 8, 8, 4, 1e-5f, nullptr), KILN_OK);
}

TEST(GraphReference, RmsNormOffsetHandComputed) {
  // x = [1 2 3 4], eps 0: scale = fp32(1/sqrt(7.5)) = 0.36514837; the zero-centered weight
  // w = [0 -0.5 0.375 1] multiplies by 1 + w = [1 0.5 1.375 2], all in fp32, rounded once:
  //   [0.365148 0.365148 1.506237 2.921187] -> bf16 [0.365234375 0.365234375 1.5078125 2.921875].
  // Element 2 tells the single rounding from Llama's two: bf16(x * scale) = 1.09375,
  // times 1.375 = 1.50390625 -> 1.5.
  const uint16_t x[4] = {bf(1), bf(2), bf(3), bf(4)};
  const uint16_t w[4] = {bf(0), bf(-0.5f), bf(0.375f), bf(1)};
  uint16_t out[4];
  rmsNormOffsetReference(x, 4, 4, w, out, 1, 1, 4, 0.0, 1.0f);
  EXPECT_EQ(fl(out[0]), 0.365234375f);
  EXPECT_EQ(fl(out[1]), 0.365234375f);
  EXPECT_EQ(fl(out[2]), 1.5078125f);
  EXPECT_EQ(fl(out[3]), 2.921875f);
  EXPECT_EQ(rmsScaleReference(x, 4, 0.0), static_cast<float>(1.0 / std::sqrt(7.5)));
  EXPECT_EQ(rmsNormOffsetOf(x[2], rmsScaleReference(x, 4, 0.0), w[2], 1.0f), out[2]);
  // gpt-oss's form (offset -0.0) with the weight 1 + w stored as is: the same fp32
  // products, the same bits.
  const uint16_t wOne[4] = {bf(1), bf(0.5f), bf(1.375f), bf(2)};
  uint16_t outOne[4];
  rmsNormOffsetReference(x, 4, 4, wOne, outOne, 1, 1, 4, 0.0, -0.0f);
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(outOne[i], out[i]) << i;

  // Per-head rows inside an interleaved [q | gate] projection: 2 tokens x 2 heads of dim 4,
  // head stride 8, token stride 16; row (t, h) normed alone into out[t, h, :].
  std::vector<uint16_t> proj(32);
  for (int i = 0; i < 32; ++i)
    proj[i] = bf(static_cast<float>((i * 7) % 11) - 5.0f);
  const uint16_t unit[4] = {bf(0), bf(0), bf(0), bf(0)};
  uint16_t heads[16], row[4];
  rmsNormOffsetReference(proj.data(), 16, 8, unit, heads, 2, 2, 4, 1e-6, 1.0f);
  for (int t = 0; t < 2; ++t)
    for (int h = 0; h < 2; ++h) {
      rmsNormOffsetReference(proj.data() + t * 16 + h * 8, 4, 4, unit, row, 1, 1, 4, 1e-6, 1.0f);
      for (int i = 0; i < 4; ++i)
        EXPECT_EQ(heads[(t * 2 + h) * 4 + i], row[i]) << t << " " << h << " " << i;
    }
}

TEST(GraphReference, RmsNormOffsetMinusZeroIsTheWeight) {
  // GptOssRMSNorm: bf16(weight * (x * scale)) in fp32. The offset -0.0 gives it for every
  // bf16 weight, zeros' signs included (-0.0 + w == w); +0.0 would turn the weight -0.0
  // into +0.0 and flip the sign of a zero output.
  const float scale = 0.36514837f;
  for (uint16_t x : {bf(3), bf(-3)})
    for (uint32_t w = 0; w <= 0xFFFF; ++w) {
      if (std::isnan(fl(static_cast<uint16_t>(w))))
        continue;
      const uint16_t gptOss = bf(fl(static_cast<uint16_t>(w)) * (fl(x) * scale));
      ASSERT_EQ(rmsNormOffsetOf(x, scale, static_cast<uint16_t>(w), -0.0f), gptOss) << w;
    }
  EXPECT_EQ(rmsNormOffsetOf(bf(3), scale, 0x8000, -0.0f), 0x8000);
  EXPECT_EQ(rmsNormOffsetOf(bf(3), scale, 0x8000, 0.0f), 0x0000);
}

TEST(GraphReference, RmsNormGateHandComputed) {
  // One row, two groups of 2 sharing the weight [2 -0.5] (weight [group_size]).
  // Group 0: x = [3 4], scale = 1/sqrt(12.5): xn = bf16([0.848528 1.131371]) =
  //   [0.84765625 1.1328125], y = bf16(w * xn) = [1.6953125 -0.56640625]; gate [0 40]:
  //   silu = [0 40], out = [0 bf16(-22.65625) = -22.625].
  // Group 1: x = [0.25 0.25], scale = 3.99968: xn = [1 1], y = [2 -0.5]; gate [9 -9]:
  //   out = [bf16(2 * 8.998889) = 18, bf16(-0.5 * -0.00111055) = bf16(0.000555276)].
  const uint16_t x[4] = {bf(3), bf(4), bf(0.25f), bf(0.25f)};
  const uint16_t gate[6] = {bf(0), bf(40), bf(9), bf(-9), bf(100), bf(100)}; // stride 6
  const uint16_t w[2] = {bf(2), bf(-0.5f)};
  uint16_t out[4];
  rmsNormGateReference(x, gate, w, out, 1, 4, 6, 2, 1e-5);
  EXPECT_EQ(fl(out[0]), 0.0f);
  EXPECT_EQ(fl(out[1]), -22.625f);
  EXPECT_EQ(fl(out[2]), 18.0f);
  EXPECT_EQ(out[3], doubleToBf16(0.5 * 9.0 / (1.0 + std::exp(9.0))));
  EXPECT_EQ(fl(out[3]), 146 * 0x1p-18f);
  // The gate is applied after the norm: Mamba2's order (the norm of y = x * silu(gate) =
  // [0 160]: 160 / sqrt(12800) = 1.41421 -> 1.4140625, times -0.5) gives group 0 =
  // [0 -0.70703125] instead.
  const uint16_t wWide[4] = {bf(2), bf(-0.5f), bf(2), bf(-0.5f)};
  uint16_t mamba[4];
  gatedRmsNormReference(x, gate, wWide, mamba, 1, 4, 6, 2, 1e-5);
  EXPECT_EQ(fl(mamba[0]), 0.0f);
  EXPECT_EQ(fl(mamba[1]), -0.70703125f);
}

TEST(GraphReference, SigmoidMulHandComputed) {
  // sigmoid(0) = 0.5: 2 * 0.5 = 1. sigmoid(20) = 1 in fp32: -3. sigmoid(-2) = 0.1192029 ->
  // bf16 0.119140625 (the sigmoid tensor), 5 * that = 0.595703125, a tie -> 0.59375 (with
  // the fp32 sigmoid it would be 0.596015 -> 0.59765625).
  const uint16_t x[3] = {bf(2), bf(-3), bf(5)};
  const uint16_t gate[6] = {bf(0), bf(20), bf(-2), bf(1), bf(1), bf(1)}; // row stride 6
  uint16_t out[3];
  sigmoidMulReference(x, gate, out, 1, 3, 6);
  EXPECT_EQ(fl(out[0]), 1.0f);
  EXPECT_EQ(fl(out[1]), -3.0f);
  EXPECT_EQ(fl(out[2]), 0.59375f);
  // Two rows: the second reads the gate a stride on.
  const uint16_t x2[2] = {bf(5), bf(5)};
  const uint16_t gate2[4] = {bf(-2), bf(7), bf(0), bf(7)};
  uint16_t out2[2];
  sigmoidMulReference(x2, gate2, out2, 2, 1, 2);
  EXPECT_EQ(fl(out2[0]), 0.59375f);
  EXPECT_EQ(fl(out2[1]), 2.5f);
}

TEST(GraphValidation, RmsNormOffset) {
  const char *k = "kiln_rms_norm_offset_bf16";
  void *x = fake(0x10000), *w = fake(0x20000), *o = fake(0x30000);
  // q rows of 2 heads x 64 inside [q | gate] rows: token stride 256, head stride 128.
  auto norm = [&](const void *px, int64_t tokenStride, int64_t headStride, const void *pw, void *po,
                  int64_t tokens, int64_t heads, int64_t dim, float eps) {
    return kiln_rms_norm_offset_bf16(px, tokenStride, headStride, pw, po, tokens, heads, dim, eps,
                                     1.0f, nullptr);
  };
  expectError(norm(nullptr, 256, 128, w, o, 2, 2, 64, 1e-6f), kInvalid, k, "x is null");
  expectError(norm(x, 256, 128, nullptr, o, 2, 2, 64, 1e-6f), kInvalid, k, "weight is null");
  expectError(norm(x, 256, 128, w, nullptr, 2, 2, 64, 1e-6f), kInvalid, k, "out is null");
  expectError(norm(fake(0x10001), 256, 128, w, o, 2, 2, 64, 1e-6f), kInvalid, k,
              "x is not 2-byte aligned");
  expectError(norm(x, 256, 128, w, o, -1, 2, 64, 1e-6f), kInvalid, k, "tokens");
  expectError(norm(x, 256, 128, w, o, 2, 0, 64, 1e-6f), kInvalid, k, "heads");
  expectError(norm(x, 256, 128, w, o, 2, 2, 0, 1e-6f), kInvalid, k, "dim");
  expectError(norm(x, 256, 63, w, o, 2, 2, 64, 1e-6f), kInvalid, k,
              "x strides (token 256, head 63) overlap its rows of 64 elements x 2 heads");
  expectError(norm(x, 191, 128, w, o, 2, 2, 64, 1e-6f), kInvalid, k,
              "x strides (token 191, head 128)");
  expectError(norm(x, 256, 128, w, o, 2, 2, 64, NAN), kInvalid, k, "eps");
  expectError(kiln_rms_norm_offset_bf16(x, 256, 128, w, o, 2, 2, 64, 1e-6f, NAN, nullptr), kInvalid,
              k, "weight_offset is not finite");
  expectError(kiln_rms_norm_offset_bf16(x, 256, 128, w, o, 2, 2, 64, 1e-6f, -INFINITY, nullptr),
              kInvalid, k, "weight_offset is not finite");
  EXPECT_EQ(kiln_rms_norm_offset_bf16(x, 256, 128, w, o, 0, 2, 64, 1e-6f, -0.0f, nullptr), KILN_OK)
      << kiln_last_error();
  expectError(norm(x, INT64_MAX / 2, 128, w, o, 4, 2, 64, 1e-6f), kInvalid, k, "x");
  // out inside the strided x (e.g. over the gate half of the projection).
  expectError(norm(x, 256, 128, w, fake(0x10000 + 2 * 64), 2, 2, 64, 1e-6f), kInvalid, k,
              "out overlaps x");
  expectError(norm(x, 256, 128, w, x, 2, 2, 64, 1e-6f), kInvalid, k, "out overlaps x");
  // One head a token: the head stride is not read; the minimal strides pass.
  EXPECT_EQ(norm(x, 64, -5, w, o, 0, 1, 64, 1e-6f), KILN_OK) << kiln_last_error();
  EXPECT_EQ(norm(x, 192, 128, w, o, 0, 2, 64, 1e-6f), KILN_OK) << kiln_last_error();
  EXPECT_EQ(norm(x, 128, 64, w, o, 0, 2, 64, 1e-6f), KILN_OK) << kiln_last_error();
}

TEST(GraphValidation, AddRmsNormOffset) {
  const char *k = "kiln_add_rms_norm_offset_bf16";
  void *a = fake(0x10000), *b = fake(0x20000), *w = fake(0x30000), *s = fake(0x40000),
       *o = fake(0x50000);
  expectError(kiln_add_rms_norm_offset_bf16(nullptr, b, w, s, o, 2, 8, 1e-6f, 1.0f, nullptr),
              kInvalid, k, "a is null");
  expectError(kiln_add_rms_norm_offset_bf16(a, b, nullptr, s, o, 2, 8, 1e-6f, 1.0f, nullptr),
              kInvalid, k, "weight is null");
  expectError(kiln_add_rms_norm_offset_bf16(a, b, w, s, s, 2, 8, 1e-6f, 1.0f, nullptr), kInvalid, k,
              "out and sum are the same buffer");
  expectError(kiln_add_rms_norm_offset_bf16(a, b, w, s, o, 2, 0, 1e-6f, 1.0f, nullptr), kInvalid, k,
              "dim");
  expectError(kiln_add_rms_norm_offset_bf16(a, b, w, s, o, 2, 8, -1.0f, 1.0f, nullptr), kInvalid, k,
              "eps");
  expectError(kiln_add_rms_norm_offset_bf16(a, b, w, s, o, 2, 8, 1e-6f, INFINITY, nullptr),
              kInvalid, k, "weight_offset is not finite");
  EXPECT_EQ(kiln_add_rms_norm_offset_bf16(a, b, w, a, o, 0, 8, 1e-6f, 1.0f, nullptr), KILN_OK);
  EXPECT_EQ(kiln_add_rms_norm_offset_bf16(a, b, w, a, o, 0, 8, 1e-6f, -0.0f, nullptr), KILN_OK);
}

TEST(GraphValidation, RmsNormGate) {
  const char *k = "kiln_rms_norm_gate_bf16";
  void *x = fake(0x10000), *g = fake(0x20000), *w = fake(0x30000), *o = fake(0x40000);
  expectError(kiln_rms_norm_gate_bf16(nullptr, g, w, o, 2, 8, 8, 4, 1e-5f, nullptr), kInvalid, k,
              "x is null");
  expectError(kiln_rms_norm_gate_bf16(x, nullptr, w, o, 2, 8, 8, 4, 1e-5f, nullptr), kInvalid, k,
              "gate is null");
  expectError(kiln_rms_norm_gate_bf16(x, g, nullptr, o, 2, 8, 8, 4, 1e-5f, nullptr), kInvalid, k,
              "weight is null");
  expectError(kiln_rms_norm_gate_bf16(x, g, w, fake(0x40001), 2, 8, 8, 4, 1e-5f, nullptr), kInvalid,
              k, "out is not 2-byte aligned");
  expectError(kiln_rms_norm_gate_bf16(x, g, w, o, 2, 8, 8, 3, 1e-5f, nullptr), kInvalid, k,
              "group_size 3 does not divide width 8");
  expectError(kiln_rms_norm_gate_bf16(x, g, w, o, 2, 8, 6, 4, 1e-5f, nullptr), kInvalid, k,
              "gate_stride 6 < width 8");
  expectError(kiln_rms_norm_gate_bf16(x, g, w, o, 2, 8, 8, 0, 1e-5f, nullptr), kInvalid, k,
              "group_size");
  expectError(kiln_rms_norm_gate_bf16(x, g, w, o, 2, 8, 8, 4, INFINITY, nullptr), kInvalid, k,
              "eps");
  EXPECT_EQ(kiln_rms_norm_gate_bf16(x, g, w, o, 0, 8, 8, 4, 1e-5f, nullptr), KILN_OK);
}

TEST(GraphValidation, SigmoidMul) {
  const char *k = "kiln_sigmoid_mul_bf16";
  void *x = fake(0x10000), *g = fake(0x20000), *o = fake(0x30000);
  expectError(kiln_sigmoid_mul_bf16(nullptr, g, o, 2, 8, 16, nullptr), kInvalid, k, "x is null");
  expectError(kiln_sigmoid_mul_bf16(x, nullptr, o, 2, 8, 16, nullptr), kInvalid, k, "gate is null");
  expectError(kiln_sigmoid_mul_bf16(x, g, nullptr, 2, 8, 16, nullptr), kInvalid, k, "out is null");
  expectError(kiln_sigmoid_mul_bf16(x, fake(0x20001), o, 2, 8, 16, nullptr), kInvalid, k,
              "gate is not 2-byte aligned");
  expectError(kiln_sigmoid_mul_bf16(x, g, o, -1, 8, 16, nullptr), kInvalid, k, "rows");
  expectError(kiln_sigmoid_mul_bf16(x, g, o, 2, 0, 16, nullptr), kInvalid, k, "dim");
  expectError(kiln_sigmoid_mul_bf16(x, g, o, 2, 8, 7, nullptr), kInvalid, k,
              "gate_stride 7 < dim 8");
  expectError(kiln_sigmoid_mul_bf16(x, g, o, INT64_MAX / 4, 8, 16, nullptr), kInvalid, k, "x");
  EXPECT_EQ(kiln_sigmoid_mul_bf16(x, g, o, 0, 8, 8, nullptr), KILN_OK);
}

TEST(GraphValidation, Activation) {
  const char *k = "kiln_activation_bf16";
  void *x = fake(0x10000), *o = fake(0x40000);
  expectError(kiln_activation_bf16(nullptr, o, 8, 0, nullptr), kInvalid, k, "x");
  expectError(kiln_activation_bf16(x, o, 8, 7, nullptr), kInvalid, k, "kind 7 unknown");
  expectError(kiln_activation_bf16(x, o, -1, 0, nullptr), kInvalid, k, "n");
  EXPECT_EQ(kiln_activation_bf16(x, o, 0, 0, nullptr), KILN_OK);
}

TEST(GraphValidation, Moe) {
  const char *k = "kiln_moe";
  uint64_t perToken = 0;
  ASSERT_EQ(kiln_moe_scratch_bytes_per_token(64, 32, 2, &perToken), KILN_OK);
  EXPECT_EQ(perToken, 4 * 16u + 144u + 512u + 256u + 256u + 512u);
  expectError(kiln_moe_scratch_bytes_per_token(64, 32, 2, nullptr), kInvalid,
              "kiln_moe_scratch_bytes_per_token", "bytes");
  expectError(kiln_moe_scratch_bytes_per_token(60, 32, 2, &perToken), kUnsupported,
              "kiln_moe_scratch_bytes_per_token", "multiples of 8");
  kiln_moe_params_t p{};
  p.x = fake(0x10000);
  p.logits = fake(0x20000);
  p.gate = fake(0x30000);
  p.up = fake(0x40000);
  p.down = fake(0x50000);
  p.out = fake(0x60000);
  p.scratch = fake(0x70000);
  p.tokens = 3;
  p.hidden = 64;
  p.inter = 32;
  p.experts = 8;
  p.top_k = 2;
  p.flags = KILN_MOE_NORMALIZE_TOP_K;
  p.gemm = reinterpret_cast<kiln_gemm_t *>(fake(0x80000));
  expectError(kiln_moe(nullptr), kInvalid, k, "params");
  auto with = [&](auto change) {
    kiln_moe_params_t q = p;
    change(q);
    return kiln_moe(&q);
  };
  expectError(with([](kiln_moe_params_t &q) { q.x = nullptr; }), kInvalid, k, "x is null");
  expectError(with([](kiln_moe_params_t &q) { q.gate = fake(0x30008); }), kUnsupported, k,
              "gate is not 16-byte aligned");
  expectError(with([](kiln_moe_params_t &q) { q.logits = fake(0x20001); }), kInvalid, k,
              "logits is not 2-byte aligned");
  expectError(with([](kiln_moe_params_t &q) { q.gemm = nullptr; }), kInvalid, k, "gemm");
  expectError(with([](kiln_moe_params_t &q) { q.top_k = 9; }), kInvalid, k,
              "top_k 9 exceeds the 8 experts");
  expectError(with([](kiln_moe_params_t &q) { q.top_k = 0; }), kInvalid, k, "top_k");
  expectError(with([](kiln_moe_params_t &q) { q.experts = KILN_MOE_MAX_EXPERTS + 1; }),
              kUnsupported, k, "experts");
  expectError(with([](kiln_moe_params_t &q) { q.inter = 36; }), kUnsupported, k,
              "multiples of 8");
  expectError(with([](kiln_moe_params_t &q) { q.flags = KILN_MOE_KNOWN_FLAGS + 1; }), kInvalid,
              k, "unknown bits");
  expectError(with([](kiln_moe_params_t &q) {
                q.flags = KILN_MOE_F32_LOGITS;
                q.logits = fake(0x20002);
              }),
              kInvalid, k, "logits is not 4-byte aligned");
  expectError(with([](kiln_moe_params_t &q) {
                q.score_bias = static_cast<const float *>(fake(0x90002));
              }),
              kInvalid, k, "score_bias is not 4-byte aligned");
  expectError(with([](kiln_moe_params_t &q) { q.groups = 3; }), kInvalid, k,
              "3 expert groups keeping 1 do not fit 8 experts and top_k 2");
  expectError(with([](kiln_moe_params_t &q) { q.groups = 8; }), kInvalid, k,
              "8 expert groups keeping 1");
  expectError(with([](kiln_moe_params_t &q) {
                q.groups = 4;
                q.top_groups = 5;
              }),
              kInvalid, k, "4 expert groups keeping 5");
  expectError(with([](kiln_moe_params_t &q) {
                q.groups = 4;
                q.top_k = 3;
              }),
              kInvalid, k, "4 expert groups keeping 1 do not fit 8 experts and top_k 3");
  expectError(with([](kiln_moe_params_t &q) { q.groups = -1; }), kInvalid, k, "groups");
  expectError(with([](kiln_moe_params_t &q) {
                q.gate = nullptr;
                q.activation = 7;
              }),
              kInvalid, k, "activation 7 unknown");
  expectError(with([](kiln_moe_params_t &q) { q.scale = -1.0f; }), kInvalid, k,
              "scale -1 is not positive");
  expectError(with([](kiln_moe_params_t &q) { q.out = const_cast<void *>(q.x); }), kInvalid, k,
              "out aliases x");
  expectError(with([](kiln_moe_params_t &q) { q.tokens = -1; }), kInvalid, k, "tokens");
  EXPECT_EQ(with([](kiln_moe_params_t &q) { q.tokens = 0; }), KILN_OK);

  // gpt-oss's expert form: the clamped SwiGLU and the three expert biases (valid as
  // given: no tokens, so nothing launches).
  auto gptOss = [&](auto change) {
    return with([&](kiln_moe_params_t &q) {
      q.flags |= KILN_MOE_CLAMPED_SWIGLU;
      q.glu_alpha = 1.702f;
      q.glu_limit = 7.0f;
      q.gate_bias = fake(0xa0000);
      q.up_bias = fake(0xb0000);
      q.down_bias = fake(0xc0000);
      change(q);
    });
  };
  EXPECT_EQ(gptOss([](kiln_moe_params_t &q) { q.tokens = 0; }), KILN_OK) << kiln_last_error();
  expectError(gptOss([](kiln_moe_params_t &q) {
                q.gate = nullptr;
                q.gate_bias = nullptr;
              }),
              kInvalid, k, "KILN_MOE_CLAMPED_SWIGLU needs gated experts (gate is null)");
  expectError(gptOss([](kiln_moe_params_t &q) {
                q.flags &= ~KILN_MOE_CLAMPED_SWIGLU;
                q.gate = nullptr;
              }),
              kInvalid, k, "gate_bias needs gated experts (gate is null)");
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (float alpha : {nan, inf, -inf})
    expectError(gptOss([&](kiln_moe_params_t &q) { q.glu_alpha = alpha; }), kInvalid, k,
                "glu_alpha is not finite");
  for (float limit : {0.0f, -7.0f, nan, inf})
    expectError(gptOss([&](kiln_moe_params_t &q) { q.glu_limit = limit; }), kInvalid, k,
                "glu_limit must be finite and > 0");
  // A negative alpha is finite: allowed.
  EXPECT_EQ(gptOss([](kiln_moe_params_t &q) {
              q.glu_alpha = -1.0f;
              q.tokens = 0;
            }),
            KILN_OK)
      << kiln_last_error();
  // Without the flag alpha and limit are not read.
  EXPECT_EQ(gptOss([&](kiln_moe_params_t &q) {
              q.flags &= ~KILN_MOE_CLAMPED_SWIGLU;
              q.glu_alpha = nan;
              q.glu_limit = 0.0f;
              q.tokens = 0;
            }),
            KILN_OK)
      << kiln_last_error();
  // Each bias alone, and plain experts with the up and down biases.
  for (int which = 0; which < 3; ++which)
    EXPECT_EQ(with([&](kiln_moe_params_t &q) {
                (which == 0 ? q.gate_bias : which == 1 ? q.up_bias : q.down_bias) = fake(0xa0000);
                q.tokens = 0;
              }),
              KILN_OK)
        << which << ": " << kiln_last_error();
  EXPECT_EQ(gptOss([](kiln_moe_params_t &q) {
              q.flags &= ~KILN_MOE_CLAMPED_SWIGLU;
              q.gate = nullptr;
              q.gate_bias = nullptr;
              q.tokens = 0;
            }),
            KILN_OK)
      << kiln_last_error();
  // The biases are read 16 bytes at a time.
  expectError(gptOss([](kiln_moe_params_t &q) { q.gate_bias = fake(0xa0008); }), kUnsupported, k,
              "gate_bias is not 16-byte aligned");
  expectError(gptOss([](kiln_moe_params_t &q) { q.up_bias = fake(0xb0002); }), kUnsupported, k,
              "up_bias is not 16-byte aligned");
  expectError(gptOss([](kiln_moe_params_t &q) { q.down_bias = fake(0xc0004); }), kUnsupported, k,
              "down_bias is not 16-byte aligned");
}

} // namespace

// kiln_graph_chain_launches marks streams whose small kernels are chained (no launch, no
// GPU: the marks are host state, the streams opaque handles). Past the 64 a clear error;
// the legacy default stream never; KILN_PDL's everywhere-switch over the marks.
TEST(GraphLaunchers, ChainLaunchesMarksStreams) {
  using kiln::kernels::chainSmallKernels;
  struct MarksDecide {
    const std::optional<bool> before = kiln::kernels::chainSmallKernelsEverywhere();
    MarksDecide() { kiln::kernels::setChainSmallKernels(std::nullopt); }
    ~MarksDecide() { kiln::kernels::setChainSmallKernels(before); }
  } marksDecide;
  const auto stream = [](int i) {
    return reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(0x10000 + 16 * i));
  };
  EXPECT_EQ(kiln_graph_chain_launches(nullptr, 1), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kiln_last_error()).find("legacy default stream"), std::string::npos);
  EXPECT_EQ(kiln_graph_chain_launches(nullptr, 0), KILN_OK);
  EXPECT_FALSE(chainSmallKernels(nullptr));

  for (int i = 0; i < kiln::kernels::kMaxChainedStreams; ++i)
    ASSERT_EQ(kiln_graph_chain_launches(stream(i), 1), KILN_OK) << i;
  EXPECT_EQ(kiln_graph_chain_launches(stream(0), 1), KILN_OK); // marked already
  const int last = kiln::kernels::kMaxChainedStreams;
  EXPECT_EQ(kiln_graph_chain_launches(stream(last), 1), KILN_ERROR_UNSUPPORTED);
  EXPECT_NE(std::string(kiln_last_error()).find("64 streams are chained already"),
            std::string::npos)
      << kiln_last_error();
  EXPECT_TRUE(chainSmallKernels(stream(7)));
  EXPECT_FALSE(chainSmallKernels(stream(last)));

  // A freed slot takes the next stream.
  EXPECT_EQ(kiln_graph_chain_launches(stream(7), 0), KILN_OK);
  EXPECT_FALSE(chainSmallKernels(stream(7)));
  EXPECT_EQ(kiln_graph_chain_launches(stream(last), 1), KILN_OK);
  EXPECT_TRUE(chainSmallKernels(stream(last)));

  // The everywhere-switch decides over the marks, both ways.
  kiln::kernels::setChainSmallKernels(false);
  EXPECT_FALSE(chainSmallKernels(stream(0)));
  kiln::kernels::setChainSmallKernels(true);
  EXPECT_TRUE(chainSmallKernels(stream(7)));
  kiln::kernels::setChainSmallKernels(std::nullopt);

  for (int i = 0; i <= last; ++i)
    EXPECT_EQ(kiln_graph_chain_launches(stream(i), 0), KILN_OK);
  for (int i = 0; i <= last; ++i)
    EXPECT_FALSE(chainSmallKernels(stream(i))) << i;
}
