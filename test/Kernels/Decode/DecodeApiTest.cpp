// Launcher argument validation: every check runs before any CUDA call, so these run in
// CI without a GPU. Pointers are fake (never dereferenced on failure paths).
#include "kiln/Kernels/Decode.h"
#include "kiln/Kernels/HostNumeric.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

namespace {

void *fakePtr(uintptr_t offset = 0) { return reinterpret_cast<void *>(0x100000 + offset); }
const int32_t *fakeInts() { return static_cast<const int32_t *>(fakePtr(0x1000)); }

kiln_gqa_decode_params_t validGqa() {
  kiln_gqa_decode_params_t p{};
  p.q = fakePtr();
  p.kv_cache = fakePtr(0x10000);
  p.block_table = fakeInts();
  p.seq_lens = fakeInts();
  p.out = fakePtr(0x20000);
  p.batch = 2;
  p.q_len = 1;
  p.q_heads = 32;
  p.kv_heads = 8;
  p.head_dim = 128;
  p.page_size = 64;
  p.num_pages = 16;
  p.max_pages_per_seq = 8;
  p.max_seq_len = 512;
  p.softmax_scale = 0.088f;
  p.dtype = KILN_DTYPE_BF16;
  return p;
}

void expectError(kiln_status_t status, kiln_status_t expected, const char *kernel,
                 const char *argument) {
  EXPECT_EQ(status, expected) << kiln_last_error();
  std::string message = kiln_last_error();
  EXPECT_NE(message.find(kernel), std::string::npos) << message;
  EXPECT_NE(message.find(argument), std::string::npos) << message;
}

TEST(GqaDecodeApi, NullParams) {
  expectError(kiln_gqa_decode(nullptr), KILN_ERROR_INVALID_ARGUMENT, "gqa_decode", "params");
  size_t bytes = 0;
  expectError(kiln_gqa_decode_workspace_bytes(nullptr, &bytes), KILN_ERROR_INVALID_ARGUMENT,
              "gqa_decode", "params");
  auto p = validGqa();
  expectError(kiln_gqa_decode_workspace_bytes(&p, nullptr), KILN_ERROR_INVALID_ARGUMENT,
              "gqa_decode", "bytes");
}

TEST(GqaDecodeApi, NullPointers) {
  struct Case {
    const char *name;
    void (*clear)(kiln_gqa_decode_params_t &);
  } cases[] = {
      {"q", [](kiln_gqa_decode_params_t &p) { p.q = nullptr; }},
      {"kv_cache", [](kiln_gqa_decode_params_t &p) { p.kv_cache = nullptr; }},
      {"block_table", [](kiln_gqa_decode_params_t &p) { p.block_table = nullptr; }},
      {"seq_lens", [](kiln_gqa_decode_params_t &p) { p.seq_lens = nullptr; }},
      {"out", [](kiln_gqa_decode_params_t &p) { p.out = nullptr; }},
  };
  for (const Case &c : cases) {
    auto p = validGqa();
    c.clear(p);
    expectError(kiln_gqa_decode(&p), KILN_ERROR_INVALID_ARGUMENT, "gqa_decode", c.name);
  }
}

TEST(GqaDecodeApi, UnsupportedShapes) {
  auto p = validGqa();
  p.head_dim = 96;
  expectError(kiln_gqa_decode(&p), KILN_ERROR_UNSUPPORTED, "gqa_decode", "head_dim");
  p = validGqa();
  p.page_size = 8;
  expectError(kiln_gqa_decode(&p), KILN_ERROR_UNSUPPORTED, "gqa_decode", "page_size");
  p = validGqa();
  p.page_size = 48;
  expectError(kiln_gqa_decode(&p), KILN_ERROR_UNSUPPORTED, "gqa_decode", "page_size");
  p = validGqa();
  p.q_heads = 64;
  p.kv_heads = 2; // group 32
  expectError(kiln_gqa_decode(&p), KILN_ERROR_UNSUPPORTED, "gqa_decode", "group");
  p = validGqa();
  p.q_len = 9;
  expectError(kiln_gqa_decode(&p), KILN_ERROR_UNSUPPORTED, "gqa_decode", "q_len");
  p = validGqa();
  p.dtype = KILN_DTYPE_F32;
  expectError(kiln_gqa_decode(&p), KILN_ERROR_UNSUPPORTED, "gqa_decode", "dtype");
}

TEST(GqaDecodeApi, InvalidSizes) {
  auto p = validGqa();
  p.batch = 0;
  expectError(kiln_gqa_decode(&p), KILN_ERROR_INVALID_ARGUMENT, "gqa_decode", "batch");
  p = validGqa();
  p.q_len = 0;
  expectError(kiln_gqa_decode(&p), KILN_ERROR_INVALID_ARGUMENT, "gqa_decode", "q_len");
  p = validGqa();
  p.q_heads = 30; // not a multiple of kv_heads 8
  expectError(kiln_gqa_decode(&p), KILN_ERROR_INVALID_ARGUMENT, "gqa_decode", "q_heads");
  p = validGqa();
  p.kv_heads = 0;
  expectError(kiln_gqa_decode(&p), KILN_ERROR_INVALID_ARGUMENT, "gqa_decode", "kv_heads");
  p = validGqa();
  p.max_seq_len = 513; // > 8 pages * 64
  expectError(kiln_gqa_decode(&p), KILN_ERROR_INVALID_ARGUMENT, "gqa_decode", "max_seq_len");
  p = validGqa();
  p.num_pages = 0;
  expectError(kiln_gqa_decode(&p), KILN_ERROR_INVALID_ARGUMENT, "gqa_decode", "num_pages");
  p = validGqa();
  p.max_pages_per_seq = 0;
  expectError(kiln_gqa_decode(&p), KILN_ERROR_INVALID_ARGUMENT, "gqa_decode",
              "max_pages_per_seq");
  p = validGqa();
  p.softmax_scale = 0.f;
  expectError(kiln_gqa_decode(&p), KILN_ERROR_INVALID_ARGUMENT, "gqa_decode", "softmax_scale");
  p = validGqa();
  p.num_splits = KILN_DECODE_MAX_SPLITS + 1;
  expectError(kiln_gqa_decode(&p), KILN_ERROR_INVALID_ARGUMENT, "gqa_decode", "num_splits");
  p = validGqa();
  p.split_keys = -64;
  expectError(kiln_gqa_decode(&p), KILN_ERROR_INVALID_ARGUMENT, "gqa_decode", "split_keys");
  p = validGqa();
  p.split_keys = 256; // batch-invariant chunks exclude an explicit split count
  p.num_splits = 4;
  expectError(kiln_gqa_decode(&p), KILN_ERROR_INVALID_ARGUMENT, "gqa_decode", "exclusive");
  p = validGqa();
  p.q = fakePtr(2);
  expectError(kiln_gqa_decode(&p), KILN_ERROR_INVALID_ARGUMENT, "gqa_decode", "aligned");
  // The fused combine's counters: one a (sequence, kv head, row block), 4-byte aligned.
  p = validGqa();
  p.split_counters = fakePtr(4);
  p.split_counter_bytes = 4ull * p.batch * p.kv_heads - 1;
  expectError(kiln_gqa_decode(&p), KILN_ERROR_INVALID_ARGUMENT, "gqa_decode",
              "split_counter_bytes");
  p.split_counters = fakePtr(2);
  p.split_counter_bytes = 4ull * p.batch * p.kv_heads;
  expectError(kiln_gqa_decode(&p), KILN_ERROR_INVALID_ARGUMENT, "gqa_decode", "split_counters");
}

kiln_kv_append_params_t validAppend() {
  kiln_kv_append_params_t p{};
  p.k = fakePtr();
  p.v = fakePtr(0x1000);
  p.kv_cache = fakePtr(0x2000);
  p.block_table = fakeInts();
  p.token_batch = fakeInts();
  p.token_pos = fakeInts();
  p.num_tokens = 4;
  p.batch = 2;
  p.kv_heads = 8;
  p.head_dim = 128;
  p.page_size = 16;
  p.num_pages = 4;
  p.max_pages_per_seq = 2;
  p.dtype = KILN_DTYPE_F16;
  p.kv_dtype = KILN_DTYPE_F16;
  return p;
}

TEST(KvAppendApi, Validation) {
  expectError(kiln_kv_append(nullptr), KILN_ERROR_INVALID_ARGUMENT, "kv_append", "params");
  auto p = validAppend();
  p.v = nullptr;
  expectError(kiln_kv_append(&p), KILN_ERROR_INVALID_ARGUMENT, "kv_append", "v");
  p = validAppend();
  p.token_pos = nullptr;
  expectError(kiln_kv_append(&p), KILN_ERROR_INVALID_ARGUMENT, "kv_append", "token_pos");
  p = validAppend();
  p.head_dim = 80;
  expectError(kiln_kv_append(&p), KILN_ERROR_UNSUPPORTED, "kv_append", "head_dim");
  p = validAppend();
  p.page_size = 256;
  expectError(kiln_kv_append(&p), KILN_ERROR_UNSUPPORTED, "kv_append", "page_size");
  p = validAppend();
  p.dtype = KILN_DTYPE_F32;
  expectError(kiln_kv_append(&p), KILN_ERROR_UNSUPPORTED, "kv_append", "dtype");
  p = validAppend();
  p.k_token_stride = 1020; // < kv_heads * head_dim
  expectError(kiln_kv_append(&p), KILN_ERROR_INVALID_ARGUMENT, "kv_append", "k_token_stride");
  p = validAppend();
  p.v_token_stride = 1028; // not a multiple of 8
  expectError(kiln_kv_append(&p), KILN_ERROR_INVALID_ARGUMENT, "kv_append", "v_token_stride");
  p = validAppend();
  p.num_tokens = -1;
  expectError(kiln_kv_append(&p), KILN_ERROR_INVALID_ARGUMENT, "kv_append", "num_tokens");
  p = validAppend();
  p.num_tokens = 0; // valid no-op, touches nothing
  EXPECT_EQ(kiln_kv_append(&p), KILN_OK) << kiln_last_error();
}

TEST(MlaKvAppendApi, Validation) {
  kiln_mla_kv_append_params_t p{};
  p.kv_c = fakePtr();
  p.k_pe = fakePtr(0x1000);
  p.latent_cache = fakePtr(0x2000);
  p.block_table = fakeInts();
  p.token_batch = fakeInts();
  p.token_pos = fakeInts();
  p.num_tokens = 1;
  p.batch = 1;
  p.num_pages = 1;
  p.max_pages_per_seq = 1;
  p.dtype = KILN_DTYPE_BF16;
  auto q = p;
  q.k_pe = nullptr;
  expectError(kiln_mla_kv_append(&q), KILN_ERROR_INVALID_ARGUMENT, "mla_kv_append", "k_pe");
  q = p;
  q.kv_c_token_stride = 100;
  expectError(kiln_mla_kv_append(&q), KILN_ERROR_INVALID_ARGUMENT, "mla_kv_append",
              "kv_c_token_stride");
  q = p;
  q.batch = 0;
  expectError(kiln_mla_kv_append(&q), KILN_ERROR_INVALID_ARGUMENT, "mla_kv_append", "batch");
  q = p;
  q.kv_dtype = KILN_DTYPE_F16;
  expectError(kiln_mla_kv_append(&q), KILN_ERROR_UNSUPPORTED, "mla_kv_append", "kv_dtype 1");
  q = p;
  q.kv_dtype = KILN_DTYPE_FP8_E4M3;
  q.dtype = KILN_DTYPE_F16;
  expectError(kiln_mla_kv_append(&q), KILN_ERROR_UNSUPPORTED, "mla_kv_append",
              "FP8 pool takes BF16");
}

kiln_mla_decode_params_t validMla() {
  kiln_mla_decode_params_t p{};
  p.q = fakePtr();
  p.latent_cache = fakePtr(0x10000);
  p.block_table = fakeInts();
  p.seq_lens = fakeInts();
  p.out = fakePtr(0x20000);
  p.batch = 2;
  p.q_len = 1;
  p.num_heads = 128;
  p.num_pages = 8;
  p.max_pages_per_seq = 4;
  p.max_seq_len = 256;
  p.softmax_scale = 0.07f;
  p.dtype = KILN_DTYPE_BF16;
  return p;
}

TEST(MlaDecodeApi, Validation) {
  expectError(kiln_mla_decode(nullptr), KILN_ERROR_INVALID_ARGUMENT, "mla_decode", "params");
  auto p = validMla();
  p.latent_cache = nullptr;
  expectError(kiln_mla_decode(&p), KILN_ERROR_INVALID_ARGUMENT, "mla_decode", "latent_cache");
  p = validMla();
  p.dtype = KILN_DTYPE_F16;
  expectError(kiln_mla_decode(&p), KILN_ERROR_UNSUPPORTED, "mla_decode", "dtype");
  p = validMla();
  p.q_len = 5;
  expectError(kiln_mla_decode(&p), KILN_ERROR_UNSUPPORTED, "mla_decode", "q_len");
  p = validMla();
  p.q_len = 2;
  expectError(kiln_mla_decode_small_smem(&p), KILN_ERROR_UNSUPPORTED, "mla_decode_small_smem",
              "q_len");
  p = validMla();
  p.num_heads = 129;
  expectError(kiln_mla_decode(&p), KILN_ERROR_UNSUPPORTED, "mla_decode", "num_heads");
  p = validMla();
  p.max_seq_len = 257; // > 4 pages * 64
  expectError(kiln_mla_decode(&p), KILN_ERROR_INVALID_ARGUMENT, "mla_decode", "max_seq_len");
  p = validMla();
  p.out = fakePtr(8);
  expectError(kiln_mla_decode(&p), KILN_ERROR_INVALID_ARGUMENT, "mla_decode", "aligned");
  size_t bytes = 0;
  p = validMla();
  p.seq_lens = nullptr;
  expectError(kiln_mla_decode_workspace_bytes(&p, &bytes), KILN_ERROR_INVALID_ARGUMENT,
              "mla_decode", "seq_lens");
  p = validMla();
  p.kv_dtype = KILN_DTYPE_F16;
  expectError(kiln_mla_decode(&p), KILN_ERROR_UNSUPPORTED, "mla_decode", "kv_dtype 1");
}

// The pool holds the activations' dtype, or FP8 e4m3 or f16 next to bf16; scales belong
// to FP8.
TEST(GqaDecodeApi, PoolDtypes) {
  auto p = validGqa();
  p.dtype = KILN_DTYPE_F16;
  p.kv_dtype = KILN_DTYPE_BF16;
  expectError(kiln_gqa_decode(&p), KILN_ERROR_UNSUPPORTED, "gqa_decode",
              "kv_dtype 0 unsupported with dtype 1");
  p = validGqa();
  p.kv_dtype = KILN_DTYPE_F32;
  expectError(kiln_gqa_decode(&p), KILN_ERROR_UNSUPPORTED, "gqa_decode", "or F16 = 1 next to BF16");
  p = validGqa();
  p.kv_dtype = KILN_DTYPE_F16; // an f16 pool takes no scales either
  p.v_scale = static_cast<const float *>(fakePtr(0x2000));
  expectError(kiln_gqa_decode(&p), KILN_ERROR_INVALID_ARGUMENT, "gqa_decode",
              "k_scale / v_scale are for FP8 pools only");
  p = validGqa();
  p.dtype = KILN_DTYPE_F16;
  p.kv_dtype = KILN_DTYPE_FP8_E4M3;
  expectError(kiln_gqa_decode(&p), KILN_ERROR_UNSUPPORTED, "gqa_decode",
              "FP8 e4m3 pool needs BF16 activations");
  p = validGqa();
  p.k_scale = static_cast<const float *>(fakePtr(0x2000));
  expectError(kiln_gqa_decode(&p), KILN_ERROR_INVALID_ARGUMENT, "gqa_decode",
              "k_scale / v_scale are for FP8 pools only");
  auto a = validAppend();
  a.kv_dtype = KILN_DTYPE_BF16; // dtype is F16
  expectError(kiln_kv_append(&a), KILN_ERROR_UNSUPPORTED, "kv_append", "kv_dtype 0");
  a = validAppend();
  a.kv_dtype = KILN_DTYPE_FP8_E4M3; // needs bf16 k/v
  expectError(kiln_kv_append(&a), KILN_ERROR_UNSUPPORTED, "kv_append", "BF16 activations");
}

// An f16 pool next to bf16 q/out passes validation: the workspace query plans it (on a
// GPU, KILN_OK; without one the device query fails, never the arguments), and kv_append
// with no tokens returns before any launch.
TEST(GqaDecodeApi, F16PoolNextToBf16) {
  auto p = validGqa();
  p.kv_dtype = KILN_DTYPE_F16;
  size_t bytes = 0;
  const kiln_status_t status = kiln_gqa_decode_workspace_bytes(&p, &bytes);
  EXPECT_TRUE(status == KILN_OK || status == KILN_ERROR_NO_DEVICE || status == KILN_ERROR_CUDA)
      << kiln_status_name(status) << ": " << kiln_last_error();
  auto a = validAppend();
  a.dtype = KILN_DTYPE_BF16;
  a.kv_dtype = KILN_DTYPE_F16;
  a.num_tokens = 0;
  EXPECT_EQ(kiln_kv_append(&a), KILN_OK) << kiln_last_error();
  a.k_scale = static_cast<const float *>(fakePtr(0x3000));
  expectError(kiln_kv_append(&a), KILN_ERROR_INVALID_ARGUMENT, "kv_append",
              "k_scale / v_scale are for FP8 pools only");
  a = validAppend(); // f16 k/v, f16 pool: the copy, as before
  a.num_tokens = 0;
  EXPECT_EQ(kiln_kv_append(&a), KILN_OK) << kiln_last_error();
}

// The f16 pool's encoder (kv_append's rounding, for references): round to nearest even,
// fp16 subnormals below 2^-14, saturation at +-65504 instead of infinity, NaN kept.
TEST(HostNumeric, F16SaturatingHandValues) {
  EXPECT_EQ(kiln_float_to_f16_sat(0.f), 0x0000);
  EXPECT_EQ(kiln_float_to_f16_sat(-0.f), 0x8000);
  EXPECT_EQ(kiln_float_to_f16_sat(1.f), 0x3c00);
  EXPECT_EQ(kiln_float_to_f16_sat(-2.5f), 0xc100);
  // bf16 values in fp16's normal range are exact: 1 + 2^-7 (bf16's last bit).
  EXPECT_EQ(kiln_float_to_f16_sat(1.0078125f), 0x3c08);
  EXPECT_EQ(kiln_float_to_f16_sat(1.f + std::ldexp(1.f, -11)), 0x3c00);     // tie: to even
  EXPECT_EQ(kiln_float_to_f16_sat(1.f + 3 * std::ldexp(1.f, -11)), 0x3c02); // tie: to even
  EXPECT_EQ(kiln_float_to_f16_sat(65504.f), 0x7bff);                        // the largest finite
  EXPECT_EQ(kiln_float_to_f16_sat(65519.f), 0x7bff);                        // rounds down to it
  EXPECT_EQ(kiln_float_to_f16_sat(65520.f), 0x7bff); // would round to infinity: saturates
  EXPECT_EQ(kiln_float_to_f16_sat(65536.f), 0x7bff); // bf16 0x4780
  EXPECT_EQ(kiln_float_to_f16_sat(-1e30f), 0xfbff);
  EXPECT_EQ(kiln_float_to_f16_sat(INFINITY), 0x7bff);
  EXPECT_EQ(kiln_float_to_f16_sat(-INFINITY), 0xfbff);
  EXPECT_EQ(kiln_float_to_f16(65520.f), 0x7c00);                   // the plain encoder overflows
  EXPECT_EQ(kiln_float_to_f16_sat(std::ldexp(1.f, -14)), 0x0400);  // the smallest normal
  EXPECT_EQ(kiln_float_to_f16_sat(std::ldexp(1.f, -24)), 0x0001);  // the smallest subnormal
  EXPECT_EQ(kiln_float_to_f16_sat(std::ldexp(1.f, -25)), 0x0000);  // tie with 0: to even
  EXPECT_EQ(kiln_float_to_f16_sat(std::ldexp(3.f, -26)), 0x0001);  // 0.75 units: up
  EXPECT_EQ(kiln_float_to_f16_sat(-std::ldexp(1.f, -26)), 0x8000); // a quarter unit: -0
  // A bf16 value below 2^-14 keeps at most its 8 significant bits as an fp16 subnormal:
  // 1.5 * 2^-20 = 24 units of 2^-24.
  EXPECT_EQ(kiln_float_to_f16_sat(1.5f * std::ldexp(1.f, -20)), 0x0018);
  const uint16_t nan = kiln_float_to_f16_sat(NAN);
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0);
  // Every finite fp16 value round-trips.
  for (int bits = 0; bits < 0x10000; ++bits)
    if ((bits & 0x7c00) != 0x7c00)
      EXPECT_EQ(kiln_float_to_f16_sat(kiln_f16_to_float(static_cast<uint16_t>(bits))), bits)
          << bits;
}

TEST(HostNumeric, E4m3HandValues) {
  EXPECT_EQ(kiln_float_to_e4m3(0.f), 0x00);
  EXPECT_EQ(kiln_float_to_e4m3(-0.f), 0x80);
  EXPECT_EQ(kiln_float_to_e4m3(1.f), 0x38);       // 2^(7-7)
  EXPECT_EQ(kiln_float_to_e4m3(-1.f), 0xb8);
  EXPECT_EQ(kiln_float_to_e4m3(1.0625f), 0x38);   // halfway 1 / 1.125: to even
  EXPECT_EQ(kiln_float_to_e4m3(1.1875f), 0x3a);   // halfway 1.125 / 1.25: to even
  EXPECT_EQ(kiln_float_to_e4m3(448.f), 0x7e);     // the largest finite
  EXPECT_EQ(kiln_float_to_e4m3(1e6f), 0x7e);      // saturates
  EXPECT_EQ(kiln_float_to_e4m3(-1e6f), 0xfe);
  EXPECT_EQ(kiln_float_to_e4m3(std::ldexp(1.f, -9)), 0x01); // the smallest subnormal
  EXPECT_EQ(kiln_float_to_e4m3(std::ldexp(1.f, -6)), 0x08); // the smallest normal
  EXPECT_EQ(kiln_float_to_e4m3(std::ldexp(1.f, -11)), 0x00); // below half a unit
  EXPECT_EQ(kiln_float_to_e4m3(NAN) & 0x7f, 0x7f);
  EXPECT_EQ(kiln_e4m3_to_float(0x7e), 448.f);
  EXPECT_EQ(kiln_e4m3_to_float(0x01), std::ldexp(1.f, -9));
  EXPECT_EQ(kiln_e4m3_to_float(0xc4), -3.f); // 1.5 * 2^(8-7)
  EXPECT_TRUE(std::isnan(kiln_e4m3_to_float(0x7f)));
  EXPECT_TRUE(std::isnan(kiln_e4m3_to_float(0xff)));
  for (int bits = 0; bits < 256; ++bits)
    if ((bits & 0x7f) != 0x7f)
      EXPECT_EQ(kiln_float_to_e4m3(kiln_e4m3_to_float(static_cast<uint8_t>(bits))), bits)
          << bits;
}

// The FP8 MLA latent token: power-of-two group scales (the smallest with amax / scale <=
// 448), e4m3 values, f32 scales at byte 512, the rope key in bf16 at byte 528.
TEST(HostNumeric, MlaFp8Token) {
  EXPECT_EQ(kiln_mla_fp8_scale(0.f), 1.f);
  EXPECT_EQ(kiln_mla_fp8_scale(INFINITY), 1.f);
  EXPECT_EQ(kiln_mla_fp8_scale(NAN), 1.f);
  EXPECT_EQ(kiln_mla_fp8_scale(448.f), 1.f); // exactly e4m3's largest
  EXPECT_EQ(kiln_mla_fp8_scale(449.f), 2.f);
  EXPECT_EQ(kiln_mla_fp8_scale(1.f), std::ldexp(1.f, -8));   // 1 / 2^-8 = 256 <= 448
  EXPECT_EQ(kiln_mla_fp8_scale(1.75f), std::ldexp(1.f, -8)); // 448 exactly
  EXPECT_EQ(kiln_mla_fp8_scale(1.8f), std::ldexp(1.f, -7));
  EXPECT_EQ(kiln_mla_fp8_scale(1e-40f), std::ldexp(1.f, -126)); // no subnormal scale
  static_assert(KILN_MLA_FP8_TOKEN_BYTES == 656, "512 + 16 + 128");
  uint16_t latent[512], rope[64], back[576];
  for (int i = 0; i < 512; ++i) // group g holds values up to 10^g: scales differ by group
    latent[i] = kiln_float_to_bf16(std::pow(10.f, static_cast<float>(i / 128)) *
                                   std::sin(0.37f * static_cast<float>(i)));
  for (int i = 0; i < 64; ++i)
    rope[i] = kiln_float_to_bf16(0.25f * static_cast<float>(i) - 3.f);
  uint8_t token[KILN_MLA_FP8_TOKEN_BYTES];
  kiln_mla_fp8_encode_token(latent, rope, token);
  for (int g = 0; g < 4; ++g) {
    float amax = 0.f, scale;
    for (int i = 0; i < 128; ++i)
      amax = std::fmax(amax, std::fabs(kiln_bf16_to_float(latent[g * 128 + i])));
    std::memcpy(&scale, token + KILN_MLA_FP8_SCALE_OFFSET + 4 * g, 4);
    EXPECT_EQ(scale, kiln_mla_fp8_scale(amax)) << g;
    EXPECT_LE(amax / scale, 448.f);
    EXPECT_GT(amax / scale, 224.f); // a power of two wastes at most one binade
  }
  EXPECT_EQ(std::memcmp(token + KILN_MLA_FP8_ROPE_OFFSET, rope, sizeof(rope)), 0);
  kiln_mla_fp8_decode_token(token, back);
  EXPECT_EQ(std::memcmp(back + 512, rope, sizeof(rope)), 0);
  for (int i = 0; i < 512; ++i) {
    float scale;
    std::memcpy(&scale, token + KILN_MLA_FP8_SCALE_OFFSET + 4 * (i / 128), 4);
    const float want = kiln_bf16_to_float(latent[i]), got = kiln_bf16_to_float(back[i]);
    // e4m3 keeps 4 significant bits (relative error <= 2^-4) above its subnormals
    // (absolute error <= 2^-10 * scale there); the widening to bf16 is exact.
    EXPECT_EQ(got, kiln_e4m3_to_float(token[i]) * scale) << i;
    EXPECT_LE(std::fabs(got - want), std::max(std::fabs(want) / 16.f, std::ldexp(scale, -10))) << i;
  }
}

} // namespace
