// Argument validation of the prefill launchers. Every case here fails validation, which
// happens before any CUDA call, so the test runs on machines without a GPU.
#include "kiln/Kernels/Prefill.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

namespace {

// Fake, 16-byte aligned, never dereferenced addresses.
alignas(16) unsigned char fakeData[256];
void *fake(int i) { return fakeData + 16 * i; }

kiln_prefill_fmha_params_t validDense() {
  kiln_prefill_fmha_params_t p{};
  p.q = fake(0);
  p.k = fake(1);
  p.v = fake(2);
  p.out = fake(3);
  p.cu_seqlens_q = static_cast<const int32_t *>(fake(4));
  p.cu_seqlens_k = static_cast<const int32_t *>(fake(5));
  p.batch = 2;
  p.total_q = 100;
  p.total_k = 100;
  p.max_seqlen_q = 60;
  p.q_heads = 8;
  p.kv_heads = 2;
  p.head_dim = 128;
  p.dtype = KILN_DTYPE_BF16;
  p.softmax_scale = 0.125f;
  p.causal = 1;
  return p;
}

kiln_prefill_fmha_paged_params_t validPaged() {
  kiln_prefill_fmha_paged_params_t p{};
  p.q = fake(0);
  p.kv_cache = fake(1);
  p.out = fake(3);
  p.cu_seqlens_q = static_cast<const int32_t *>(fake(4));
  p.seq_lens = static_cast<const int32_t *>(fake(5));
  p.block_table = static_cast<const int32_t *>(fake(6));
  p.batch = 2;
  p.total_q = 8;
  p.max_seqlen_q = 4;
  p.num_pages = 64;
  p.page_size = 16;
  p.max_pages_per_seq = 32;
  p.q_heads = 8;
  p.kv_heads = 2;
  p.head_dim = 64;
  p.dtype = KILN_DTYPE_F16;
  p.kv_dtype = KILN_DTYPE_F16;
  p.softmax_scale = 0.125f;
  p.causal = 1;
  return p;
}

void expectDense(const kiln_prefill_fmha_params_t &p, kiln_status_t status, const char *arg) {
  EXPECT_EQ(kiln_prefill_fmha(&p), status) << arg;
  const std::string message = kiln_last_error();
  EXPECT_NE(message.find("kiln_prefill_fmha"), std::string::npos) << message;
  EXPECT_NE(message.find(arg), std::string::npos) << message;
}

void expectPaged(const kiln_prefill_fmha_paged_params_t &p, kiln_status_t status,
                 const char *arg) {
  EXPECT_EQ(kiln_prefill_fmha_paged(&p), status) << arg;
  const std::string message = kiln_last_error();
  EXPECT_NE(message.find("kiln_prefill_fmha_paged"), std::string::npos) << message;
  EXPECT_NE(message.find(arg), std::string::npos) << message;
}

} // namespace

TEST(PrefillValidation, NullParams) {
  EXPECT_EQ(kiln_prefill_fmha(nullptr), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kiln_last_error()).find("params"), std::string::npos);
  EXPECT_EQ(kiln_prefill_fmha_paged(nullptr), KILN_ERROR_INVALID_ARGUMENT);
}

TEST(PrefillValidation, DenseNullPointers) {
  auto p = validDense();
  p.q = nullptr;
  expectDense(p, KILN_ERROR_INVALID_ARGUMENT, "q is null");
  p = validDense();
  p.k = nullptr;
  expectDense(p, KILN_ERROR_INVALID_ARGUMENT, "k is null");
  p = validDense();
  p.v = nullptr;
  expectDense(p, KILN_ERROR_INVALID_ARGUMENT, "v is null");
  p = validDense();
  p.out = nullptr;
  expectDense(p, KILN_ERROR_INVALID_ARGUMENT, "out is null");
  p = validDense();
  p.cu_seqlens_q = nullptr;
  expectDense(p, KILN_ERROR_INVALID_ARGUMENT, "cu_seqlens_q");
  p = validDense();
  p.cu_seqlens_k = nullptr;
  expectDense(p, KILN_ERROR_INVALID_ARGUMENT, "cu_seqlens_k");
}

TEST(PrefillValidation, DenseSizes) {
  auto p = validDense();
  p.batch = 0;
  expectDense(p, KILN_ERROR_INVALID_ARGUMENT, "batch");
  p = validDense();
  p.total_q = -1;
  expectDense(p, KILN_ERROR_INVALID_ARGUMENT, "total_q");
  p = validDense();
  p.max_seqlen_q = 101;
  expectDense(p, KILN_ERROR_INVALID_ARGUMENT, "max_seqlen_q");
  p = validDense();
  p.max_seqlen_q = 0;
  expectDense(p, KILN_ERROR_INVALID_ARGUMENT, "max_seqlen_q");
  p = validDense();
  p.total_k = -5;
  expectDense(p, KILN_ERROR_INVALID_ARGUMENT, "total_k");
  p = validDense();
  p.q_heads = 0;
  expectDense(p, KILN_ERROR_INVALID_ARGUMENT, "q_heads");
  p = validDense();
  p.kv_heads = 0;
  expectDense(p, KILN_ERROR_INVALID_ARGUMENT, "kv_heads");
  p = validDense();
  p.kv_heads = 3;
  expectDense(p, KILN_ERROR_INVALID_ARGUMENT, "kv_heads");
}

TEST(PrefillValidation, DenseHeadDimDtypeScale) {
  auto p = validDense();
  p.head_dim = 0;
  expectDense(p, KILN_ERROR_INVALID_ARGUMENT, "head_dim");
  p.head_dim = 96;
  expectDense(p, KILN_ERROR_UNSUPPORTED, "head_dim");
  p.head_dim = 320;
  expectDense(p, KILN_ERROR_UNSUPPORTED, "head_dim = 320 not supported (64, 128, 256;");
  // 256 (Qwen3-Next) passes the head-dim check: the next failure is the strides', sized
  // by it, or the v head dim that must equal it.
  p = validDense();
  p.head_dim = 256;
  p.q_token_stride = 8 * 128;
  expectDense(p, KILN_ERROR_INVALID_ARGUMENT, "q strides (token 1024, head 256)");
  p = validDense();
  p.head_dim = 256;
  p.v_head_dim = 128;
  expectDense(p, KILN_ERROR_UNSUPPORTED, "v_head_dim = 128 with head_dim = 256");
  p = validDense();
  p.dtype = KILN_DTYPE_F32;
  expectDense(p, KILN_ERROR_UNSUPPORTED, "dtype");
  p = validDense();
  p.softmax_scale = 0.f;
  expectDense(p, KILN_ERROR_INVALID_ARGUMENT, "softmax_scale");
  p.softmax_scale = NAN;
  expectDense(p, KILN_ERROR_INVALID_ARGUMENT, "softmax_scale");
  p.softmax_scale = -1.f;
  expectDense(p, KILN_ERROR_INVALID_ARGUMENT, "softmax_scale");
  p = validDense();
  p.causal = 2;
  expectDense(p, KILN_ERROR_INVALID_ARGUMENT, "causal");
}

// v_head_dim: equal to head_dim, or DeepSeek MLA's 128 under 192 (dense only, no window
// or sinks); v and out strides are checked against it.
TEST(PrefillValidation, VHeadDim) {
  auto p = validDense();
  p.v_head_dim = 64;
  expectDense(p, KILN_ERROR_UNSUPPORTED, "v_head_dim = 64 with head_dim = 128");
  p = validDense();
  p.head_dim = 192;
  expectDense(p, KILN_ERROR_UNSUPPORTED, "v_head_dim = 0 with head_dim = 192");
  p.v_head_dim = 128;
  p.window = 16;
  expectDense(p, KILN_ERROR_UNSUPPORTED, "no sliding window or sinks");
  p = validDense();
  p.head_dim = 192;
  p.v_head_dim = 128;
  p.v_token_stride = 200; // 2 kv heads of 128 do not fit
  expectDense(p, KILN_ERROR_INVALID_ARGUMENT, "v strides");
  auto paged = validPaged();
  paged.head_dim = 192;
  expectPaged(paged, KILN_ERROR_UNSUPPORTED, "reads dense K/V only");
}

TEST(PrefillValidation, DenseStridesAndAlignment) {
  auto p = validDense();
  p.q_token_stride = 1028; // not a multiple of 8
  expectDense(p, KILN_ERROR_INVALID_ARGUMENT, "q strides");
  p = validDense();
  p.k_token_stride = 128; // 2 kv heads of 128 do not fit
  expectDense(p, KILN_ERROR_INVALID_ARGUMENT, "k strides");
  p = validDense();
  p.out_head_stride = -8;
  expectDense(p, KILN_ERROR_INVALID_ARGUMENT, "stride");
  p = validDense();
  p.v = fakeData + 8;
  expectDense(p, KILN_ERROR_INVALID_ARGUMENT, "v is not 16-byte aligned");
}

TEST(PrefillValidation, UnknownVariant) {
  auto p = validDense();
  EXPECT_EQ(kiln_prefill_fmha_variant(&p, static_cast<kiln_prefill_variant_t>(9)),
            KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kiln_last_error()).find("variant"), std::string::npos);
  auto pp = validPaged();
  EXPECT_EQ(kiln_prefill_fmha_paged_variant(&pp, static_cast<kiln_prefill_variant_t>(9)),
            KILN_ERROR_INVALID_ARGUMENT);
  // Validation still runs first whatever the variant.
  p.q = nullptr;
  EXPECT_EQ(kiln_prefill_fmha_variant(&p, KILN_PREFILL_VARIANT_SM90), KILN_ERROR_INVALID_ARGUMENT);
}

TEST(PrefillValidation, Paged) {
  auto p = validPaged();
  p.kv_cache = nullptr;
  expectPaged(p, KILN_ERROR_INVALID_ARGUMENT, "kv_cache is null");
  p = validPaged();
  p.block_table = nullptr;
  expectPaged(p, KILN_ERROR_INVALID_ARGUMENT, "block_table is null");
  p = validPaged();
  p.seq_lens = nullptr;
  expectPaged(p, KILN_ERROR_INVALID_ARGUMENT, "seq_lens is null");
  p = validPaged();
  p.q = nullptr;
  expectPaged(p, KILN_ERROR_INVALID_ARGUMENT, "q is null");
  p = validPaged();
  p.page_size = 0;
  expectPaged(p, KILN_ERROR_INVALID_ARGUMENT, "page_size");
  p = validPaged();
  p.num_pages = 0;
  expectPaged(p, KILN_ERROR_INVALID_ARGUMENT, "num_pages");
  p = validPaged();
  p.max_pages_per_seq = 0;
  expectPaged(p, KILN_ERROR_INVALID_ARGUMENT, "max_pages_per_seq");
  p = validPaged();
  p.head_dim = 80;
  expectPaged(p, KILN_ERROR_UNSUPPORTED, "head_dim");
  p = validPaged();
  p.head_dim = 256; // supported: the page size is what fails
  p.page_size = 0;
  expectPaged(p, KILN_ERROR_INVALID_ARGUMENT, "page_size");
  p = validPaged();
  p.q_heads = 6;
  p.kv_heads = 4;
  expectPaged(p, KILN_ERROR_INVALID_ARGUMENT, "kv_heads");
}

// The cache holds q's dtype, or FP8 e4m3 / f16 next to bf16 q; scales belong to FP8.
// Valid combinations with no query rows pass validation and launch nothing (so they
// return KILN_OK without a GPU).
TEST(PrefillValidation, PagedCacheDtypes) {
  auto p = validPaged();
  p.total_q = 0;
  p.max_seqlen_q = 0;
  p.dtype = KILN_DTYPE_BF16;
  for (kiln_dtype_t cache : {KILN_DTYPE_BF16, KILN_DTYPE_F16, KILN_DTYPE_FP8_E4M3}) {
    p.kv_dtype = cache;
    EXPECT_EQ(kiln_prefill_fmha_paged(&p), KILN_OK) << cache << ": " << kiln_last_error();
  }
  p = validPaged();
  p.dtype = KILN_DTYPE_F16;
  p.kv_dtype = KILN_DTYPE_BF16; // bf16 next to f16 q: no kernel
  expectPaged(p, KILN_ERROR_UNSUPPORTED, "kv_dtype 0 unsupported with dtype 1");
  p.kv_dtype = KILN_DTYPE_FP8_E4M3;
  expectPaged(p, KILN_ERROR_UNSUPPORTED, "FP8 e4m3 pool needs BF16 activations");
  p = validPaged();
  p.dtype = KILN_DTYPE_BF16;
  p.kv_dtype = KILN_DTYPE_F32;
  expectPaged(p, KILN_ERROR_UNSUPPORTED, "F16 = 1 next to BF16");
  p.kv_dtype = KILN_DTYPE_F16;
  p.k_scale = static_cast<const float *>(fake(7)); // an f16 cache has no scales
  expectPaged(p, KILN_ERROR_INVALID_ARGUMENT, "k_scale / v_scale are for FP8 pools only");
}
