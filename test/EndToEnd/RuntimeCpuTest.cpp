// Runtime checks that need no GPU: errors without a device, null contexts, and the
// hand-written models' steps on a validation-only ("dry") context, where every argument,
// binding, arena bound and kernel/phase rule is checked exactly as on a GPU context.
#include "kiln/Runtime/Runtime.h"

#include "GpuTest.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

using ArenaFn = uint64_t (*)();
using StepFn = int32_t (*)(kiln_rt_context_t *);

struct HandModel {
  void *handle = nullptr;
  ArenaFn arena = nullptr, spec = nullptr;
  StepFn decode = nullptr, prefill = nullptr;

  explicit HandModel(const char *path) {
    handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!handle)
      return;
    arena = reinterpret_cast<ArenaFn>(dlsym(handle, "kiln_model_arena_bytes"));
    spec = reinterpret_cast<ArenaFn>(dlsym(handle, "kiln_model_speculative_bytes"));
    decode = reinterpret_cast<StepFn>(dlsym(handle, "kiln_model_decode_step"));
    prefill = reinterpret_cast<StepFn>(dlsym(handle, "kiln_model_prefill_step"));
  }
  ~HandModel() {
    if (handle)
      dlclose(handle);
  }
  bool ok() const { return handle && arena && spec && decode && prefill; }
};

// Fake device pointers: a dry context checks only that they are bound (non-null).
void *fake(int i) { return reinterpret_cast<void *>(static_cast<uintptr_t>(0x1000 * (i + 1))); }

void bindHybrid(kiln_rt_context_t *ctx) {
  int i = 0;
  for (int layer : {0, 2}) {
    for (const char *name : {"x", "dt", "b", "c", "z", "out", "A", "D", "dt_bias", "conv.x",
                             "conv.out", "conv.weight", "conv.bias"})
      ASSERT_EQ(kiln_rt_bind(ctx, layer, name, fake(i++)), KILN_OK);
  }
  for (int layer : {1, 3})
    for (const char *name : {"q", "k", "v", "out"})
      ASSERT_EQ(kiln_rt_bind(ctx, layer, name, fake(i++)), KILN_OK);
}

void bindMla(kiln_rt_context_t *ctx) {
  int i = 0;
  for (int layer : {0, 1})
    for (const char *name : {"q", "latent", "out"})
      ASSERT_EQ(kiln_rt_bind(ctx, layer, name, fake(i++)), KILN_OK);
}

const int32_t kCu[5] = {0, 37, 101, 106, 206};

kiln_rt_batch_t decodeBatch(int qLen, int numPages, int maxPages) {
  kiln_rt_batch_t b{};
  b.batch = 4;
  b.q_len = qLen;
  b.seq_lens = static_cast<const int32_t *>(fake(100));
  b.block_table = static_cast<const int32_t *>(fake(101));
  b.max_pages = maxPages;
  b.num_pages = numPages;
  b.slot_indices = static_cast<const int32_t *>(fake(102));
  b.num_slots = 4;
  return b;
}

kiln_rt_batch_t prefillBatch(int numPages, int maxPages) {
  kiln_rt_batch_t b = decodeBatch(1, numPages, maxPages);
  b.cu_seqlens_q = static_cast<const int32_t *>(fake(103));
  b.cu_seqlens_q_host = kCu;
  b.total_tokens = 206;
  b.max_q_len = 100;
  return b;
}

std::string lastError() { return kiln_last_error(); }

TEST(RuntimeCpu, CreateWithoutDevice) {
  kiln_rt_context_t *ctx = nullptr;
  kiln_status_t s = kiln_rt_create(0, 1 << 20, &ctx);
  if (kiln::test::hasCudaDevice()) {
    ASSERT_EQ(s, KILN_OK) << lastError();
    EXPECT_EQ(kiln_rt_arena_bytes(ctx), 1u << 20);
    EXPECT_NE(kiln_rt_arena(ctx), nullptr);
    kiln_rt_destroy(ctx);
    return;
  }
  EXPECT_EQ(s, KILN_ERROR_NO_DEVICE);
  EXPECT_EQ(ctx, nullptr);
  EXPECT_NE(lastError().find("kiln_rt_create: no CUDA device"), std::string::npos) << lastError();
}

TEST(RuntimeCpu, NullContext) {
  EXPECT_EQ(kiln_rt_bind(nullptr, 0, "q", fake(0)), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("context is null"), std::string::npos) << lastError();
  kiln_rt_batch_t b = decodeBatch(1, 64, 16);
  EXPECT_EQ(kiln_rt_set_batch(nullptr, &b), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(kiln_rt_attention(nullptr, 0, 1, 0, 8, 2, 128, 16, 0, KILN_RT_KERNEL_GQA_DECODE, 0),
            KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("layer 1: context is null"), std::string::npos) << lastError();
  EXPECT_EQ(kiln_rt_synchronize(nullptr), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(kiln_rt_create(0, 0, nullptr), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(kiln_rt_arena_bytes(nullptr), 0u);
  kiln_rt_destroy(nullptr);
}

TEST(RuntimeCpu, BindAndBatchValidation) {
  kiln_rt_context_t *ctx = nullptr;
  ASSERT_EQ(kiln_rt_create_dry(1 << 20, &ctx), KILN_OK);
  EXPECT_EQ(kiln_rt_bind(ctx, 0, nullptr, fake(0)), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(kiln_rt_bind(ctx, -1, "q", fake(0)), KILN_ERROR_INVALID_ARGUMENT);
  kiln_rt_batch_t b = decodeBatch(0, 64, 16);
  EXPECT_EQ(kiln_rt_set_batch(ctx, &b), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("q_len 0"), std::string::npos) << lastError();
  const int32_t badCu[5] = {0, 37, 30, 106, 206};
  b = prefillBatch(64, 16);
  b.cu_seqlens_q_host = badCu;
  EXPECT_EQ(kiln_rt_set_batch(ctx, &b), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("decreases"), std::string::npos) << lastError();
  // A launch without a batch.
  EXPECT_EQ(kiln_rt_mla(ctx, 0, 0, 0, 16, 512, 64, 64, KILN_RT_KERNEL_MLA_DECODE, 0),
            KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("no batch set"), std::string::npos) << lastError();
  kiln_rt_destroy(ctx);
}

// The four hand-written models run their steps on dry contexts: everything validates, the
// recorded resources fit the arena, intermediate states exist iff speculation is on.
TEST(RuntimeCpu, HandModelsValidateDry) {
  struct Case {
    const char *path;
    bool mla, spec;
  } cases[] = {{KILN_HAND_HYBRID_NOSPEC, false, false},
               {KILN_HAND_HYBRID_SPEC, false, true},
               {KILN_HAND_MLA_NOSPEC, true, false},
               {KILN_HAND_MLA_SPEC, true, true}};
  for (const Case &c : cases) {
    SCOPED_TRACE(c.path);
    HandModel model(c.path);
    ASSERT_TRUE(model.ok()) << dlerror();
    kiln_rt_context_t *ctx = nullptr;
    ASSERT_EQ(kiln_rt_create_dry(model.arena(), &ctx), KILN_OK);
    EXPECT_EQ(kiln_rt_arena(ctx), nullptr);
    EXPECT_EQ(kiln_rt_arena_bytes(ctx), model.arena());
    int page = c.mla ? 64 : 16, maxPages = 256 / page, numPages = 4 * maxPages;
    if (c.mla)
      bindMla(ctx);
    else
      bindHybrid(ctx);
    kiln_rt_batch_t pb = prefillBatch(numPages, maxPages);
    ASSERT_EQ(kiln_rt_set_batch(ctx, &pb), KILN_OK) << lastError();
    EXPECT_EQ(model.prefill(ctx), KILN_OK) << lastError();
    kiln_rt_batch_t db = decodeBatch(c.spec ? 4 : 1, numPages, maxPages);
    ASSERT_EQ(kiln_rt_set_batch(ctx, &db), KILN_OK) << lastError();
    EXPECT_EQ(model.decode(ctx), KILN_OK) << lastError();
    if (!c.spec)
      EXPECT_EQ(model.spec(), 0u);
    uint64_t off = 0, bytes = 0;
    if (c.mla) {
      EXPECT_EQ(kiln_rt_resource(ctx, 1, "mla_latent", &off, &bytes), KILN_OK);
      EXPECT_EQ(bytes, 16u * 64 * 576 * 2);
      EXPECT_LE(off + bytes, model.arena());
    } else {
      EXPECT_EQ(kiln_rt_resource(ctx, 3, "kv", &off, &bytes), KILN_OK);
      EXPECT_EQ(bytes, 64u * 2 * 16 * 2 * 128 * 2);
      EXPECT_EQ(kiln_rt_resource(ctx, 2, "ssm_state", &off, &bytes), KILN_OK);
      EXPECT_EQ(bytes, 4u * 8 * 64 * 128 * 4);
      kiln_status_t inter = kiln_rt_resource(ctx, 2, "intermediate_ssm_state", &off, &bytes);
      EXPECT_EQ(inter == KILN_OK, c.spec);
      if (c.spec) {
        EXPECT_EQ(bytes, 4u * 4 * 8 * 64 * 128 * 4);
        uint64_t convBytes = 0;
        EXPECT_EQ(kiln_rt_resource(ctx, 0, "intermediate_conv_state", &off, &convBytes), KILN_OK);
        EXPECT_EQ(2 * (bytes + convBytes), model.spec());
      }
      // A multi-token decode step on a model without speculation is rejected.
      if (!c.spec) {
        kiln_rt_batch_t mb = decodeBatch(4, numPages, maxPages);
        ASSERT_EQ(kiln_rt_set_batch(ctx, &mb), KILN_OK);
        EXPECT_EQ(model.decode(ctx), KILN_ERROR_INVALID_ARGUMENT);
        EXPECT_NE(lastError().find("needs conv_update_spec"), std::string::npos) << lastError();
      }
    }
    int32_t accepted[4] = {1, 2, 3, 5};
    EXPECT_EQ(kiln_rt_commit_accepted(ctx, accepted), KILN_ERROR_INVALID_ARGUMENT);
    kiln_rt_destroy(ctx);
  }
}

TEST(RuntimeCpu, MissingBindingNamesLayerAndTensor) {
  HandModel model(KILN_HAND_HYBRID_NOSPEC);
  ASSERT_TRUE(model.ok());
  kiln_rt_context_t *ctx = nullptr;
  ASSERT_EQ(kiln_rt_create_dry(model.arena(), &ctx), KILN_OK);
  bindHybrid(ctx);
  ASSERT_EQ(kiln_rt_bind(ctx, 2, "dt", nullptr), KILN_OK); // unbind
  kiln_rt_batch_t db = decodeBatch(1, 64, 16);
  ASSERT_EQ(kiln_rt_set_batch(ctx, &db), KILN_OK);
  EXPECT_EQ(model.decode(ctx), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("layer 2: tensor 'dt' is not bound"), std::string::npos)
      << lastError();
  EXPECT_NE(lastError().find("kiln_rt_ssm (ssm_update)"), std::string::npos) << lastError();
  // Optional tensors may stay unbound.
  ASSERT_EQ(kiln_rt_bind(ctx, 2, "dt", fake(7)), KILN_OK);
  ASSERT_EQ(kiln_rt_bind(ctx, 2, "z", nullptr), KILN_OK);
  ASSERT_EQ(kiln_rt_bind(ctx, 2, "conv.bias", nullptr), KILN_OK);
  EXPECT_EQ(model.decode(ctx), KILN_OK) << lastError();
  // The conv's weight is required.
  ASSERT_EQ(kiln_rt_bind(ctx, 0, "conv.weight", nullptr), KILN_OK);
  EXPECT_EQ(model.decode(ctx), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("layer 0: tensor 'conv.weight' (or 'weight') is not bound"),
            std::string::npos)
      << lastError();
  kiln_rt_destroy(ctx);
}

TEST(RuntimeCpu, LaunchValidation) {
  kiln_rt_context_t *ctx = nullptr;
  const uint64_t kvBytes = 64ull * 2 * 16 * 2 * 128 * 2;
  ASSERT_EQ(kiln_rt_create_dry(3 * kvBytes, &ctx), KILN_OK);
  for (const char *name : {"q", "k", "v", "out"}) {
    ASSERT_EQ(kiln_rt_bind(ctx, 1, name, fake(1)), KILN_OK);
    ASSERT_EQ(kiln_rt_bind(ctx, 3, name, fake(2)), KILN_OK);
  }
  kiln_rt_batch_t b = decodeBatch(1, 64, 16);
  ASSERT_EQ(kiln_rt_set_batch(ctx, &b), KILN_OK);
  const int32_t D = KILN_RT_DECODE, GQA = KILN_RT_KERNEL_GQA_DECODE;
  EXPECT_EQ(kiln_rt_attention(ctx, D, 1, 0, 8, 2, 128, 16, 0, GQA, 0), KILN_OK) << lastError();
  // Sliding window: not supported yet.
  EXPECT_EQ(kiln_rt_attention(ctx, D, 1, 0, 8, 2, 128, 16, 512, GQA, 0), KILN_ERROR_UNSUPPORTED);
  EXPECT_NE(lastError().find("sliding-window"), std::string::npos) << lastError();
  // Outside the arena.
  EXPECT_EQ(kiln_rt_attention(ctx, D, 3, 2 * kvBytes + 256, 8, 2, 128, 16, 0, GQA, 0),
            KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("does not fit in the arena"), std::string::npos) << lastError();
  // Overlapping layer 1's pool.
  EXPECT_EQ(kiln_rt_attention(ctx, D, 3, kvBytes / 2, 8, 2, 128, 16, 0, GQA, 0),
            KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("overlaps layer 1's kv"), std::string::npos) << lastError();
  EXPECT_EQ(kiln_rt_attention(ctx, D, 3, kvBytes, 8, 2, 128, 16, 0, GQA, 0), KILN_OK)
      << lastError();
  // Misaligned offset, bad head dim, kernel/phase mismatch, heads not a multiple.
  EXPECT_EQ(kiln_rt_attention(ctx, D, 3, kvBytes + 8, 8, 2, 128, 16, 0, GQA, 0),
            KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(kiln_rt_attention(ctx, D, 3, kvBytes, 8, 2, 96, 16, 0, GQA, 0),
            KILN_ERROR_UNSUPPORTED);
  EXPECT_EQ(kiln_rt_attention(ctx, D, 3, kvBytes, 8, 2, 128, 16, 0, KILN_RT_KERNEL_PREFILL_FMHA,
                              0),
            KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("cannot run attention in decode"), std::string::npos) << lastError();
  EXPECT_EQ(kiln_rt_attention(ctx, D, 3, kvBytes, 8, 3, 128, 16, 0, GQA, 0),
            KILN_ERROR_INVALID_ARGUMENT);
  // Multi-token decode: q_len 4 needs MULTI_TOKEN or EXTEND_CONTEXT.
  b.q_len = 4;
  ASSERT_EQ(kiln_rt_set_batch(ctx, &b), KILN_OK);
  EXPECT_EQ(kiln_rt_attention(ctx, D, 1, 0, 8, 2, 128, 16, 0, GQA, KILN_RT_SINGLE_TOKEN),
            KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("SINGLE_TOKEN"), std::string::npos) << lastError();
  EXPECT_EQ(kiln_rt_attention(ctx, D, 1, 0, 8, 2, 128, 16, 0, GQA, KILN_RT_MULTI_TOKEN), KILN_OK);
  EXPECT_EQ(kiln_rt_attention(ctx, D, 1, 0, 8, 2, 128, 16, 0, GQA, KILN_RT_EXTEND_CONTEXT),
            KILN_OK);
  // Prefill without packed sequence info.
  EXPECT_EQ(kiln_rt_attention(ctx, KILN_RT_PREFILL, 1, 0, 8, 2, 128, 16, 0,
                              KILN_RT_KERNEL_PREFILL_FMHA, 0),
            KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("cu_seqlens_q_host"), std::string::npos) << lastError();
  kiln_rt_destroy(ctx);
}

TEST(RuntimeCpu, MlaAndMambaRules) {
  kiln_rt_context_t *ctx = nullptr;
  ASSERT_EQ(kiln_rt_create_dry(64ull << 20, &ctx), KILN_OK);
  for (const char *name : {"q", "latent", "out"})
    ASSERT_EQ(kiln_rt_bind(ctx, 0, name, fake(3)), KILN_OK);
  kiln_rt_batch_t b = decodeBatch(4, 16, 4);
  ASSERT_EQ(kiln_rt_set_batch(ctx, &b), KILN_OK);
  EXPECT_EQ(kiln_rt_mla(ctx, 0, 0, 0, 16, 512, 64, 64, KILN_RT_KERNEL_MLA_DECODE_SMALL_SMEM,
                        KILN_RT_MULTI_TOKEN),
            KILN_ERROR_UNSUPPORTED);
  EXPECT_NE(lastError().find("q_len 1 only"), std::string::npos) << lastError();
  EXPECT_EQ(kiln_rt_mla(ctx, 0, 0, 0, 16, 512, 64, 64, KILN_RT_KERNEL_MLA_DECODE_SMALL_SMEM,
                        KILN_RT_EXTEND_CONTEXT),
            KILN_OK) << lastError();
  EXPECT_EQ(kiln_rt_mla(ctx, 0, 0, 0, 16, 256, 64, 64, KILN_RT_KERNEL_MLA_DECODE, 1),
            KILN_ERROR_UNSUPPORTED);
  EXPECT_EQ(kiln_rt_mla(ctx, 0, 0, 0, 16, 512, 64, 32, KILN_RT_KERNEL_MLA_DECODE, 1),
            KILN_ERROR_UNSUPPORTED);
  // SSM: spec kernel without intermediate states; bad state size; bad dtype.
  for (const char *name : {"x", "dt", "b", "c", "out", "A"})
    ASSERT_EQ(kiln_rt_bind(ctx, 1, name, fake(4)), KILN_OK);
  EXPECT_EQ(kiln_rt_ssm(ctx, 0, 1, 8 << 20, -1, 8, 64, 128, 2, KILN_DTYPE_F32,
                        KILN_RT_KERNEL_SSM_UPDATE_SPEC),
            KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("intermediate_offset < 0"), std::string::npos) << lastError();
  EXPECT_EQ(kiln_rt_ssm(ctx, 0, 1, 8 << 20, 16 << 20, 8, 64, 128, 2, KILN_DTYPE_F32,
                        KILN_RT_KERNEL_SSM_UPDATE_SPEC),
            KILN_OK) << lastError();
  EXPECT_EQ(kiln_rt_ssm(ctx, 0, 1, 8 << 20, 16 << 20, 8, 64, 96, 2, KILN_DTYPE_F32,
                        KILN_RT_KERNEL_SSM_UPDATE_SPEC),
            KILN_ERROR_UNSUPPORTED);
  EXPECT_EQ(kiln_rt_ssm(ctx, 0, 1, 8 << 20, 16 << 20, 8, 64, 128, 2, KILN_DTYPE_F16,
                        KILN_RT_KERNEL_SSM_UPDATE_SPEC),
            KILN_ERROR_UNSUPPORTED);
  EXPECT_EQ(kiln_rt_ssm(ctx, 0, 1, 8 << 20, 16 << 20, 8, 64, 128, 3, KILN_DTYPE_F32,
                        KILN_RT_KERNEL_SSM_UPDATE_SPEC),
            KILN_ERROR_INVALID_ARGUMENT);
  // Conv: width 5 unsupported, prefill kernel in decode rejected.
  for (const char *name : {"conv.x", "conv.out", "conv.weight"})
    ASSERT_EQ(kiln_rt_bind(ctx, 1, name, fake(5)), KILN_OK);
  EXPECT_EQ(kiln_rt_conv(ctx, 0, 1, 40 << 20, 41 << 20, 1024, 5, 1,
                         KILN_RT_KERNEL_CONV_UPDATE_SPEC),
            KILN_ERROR_UNSUPPORTED);
  EXPECT_EQ(kiln_rt_conv(ctx, 0, 1, 40 << 20, 41 << 20, 1024, 4, 1,
                         KILN_RT_KERNEL_CONV_PREFILL_SEQUENTIAL),
            KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(kiln_rt_conv(ctx, 0, 1, 40 << 20, 41 << 20, 1024, 4, 1,
                         KILN_RT_KERNEL_CONV_UPDATE_SPEC),
            KILN_OK) << lastError();
  int32_t accepted[4] = {1, 2, 3, 4};
  EXPECT_EQ(kiln_rt_commit_accepted(ctx, accepted), KILN_OK) << lastError();
  kiln_rt_destroy(ctx);
}

} // namespace
