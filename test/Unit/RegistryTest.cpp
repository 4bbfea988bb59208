// Registry queries, the feature table, and a variant added by an embedder.
#include "kiln/Registry/KernelRegistry.h"
#include "kiln/InitAll.h"

#include "mlir/IR/Builders.h"

#include <gtest/gtest.h>

using namespace mlir;
using namespace kiln;

namespace {
class RegistryTest : public ::testing::Test {
protected:
  RegistryTest() {
    DialectRegistry registry;
    registerAllDialects(registry);
    context.appendDialectRegistry(registry);
    context.loadAllAvailableDialects();
  }
  KernelQuery gqaDecode(unsigned queryLen) {
    KernelQuery q;
    q.family = OpFamily::attention;
    q.phase = Phase::decode;
    q.headDim = 128;
    q.dtype = Builder(&context).getBF16Type();
    q.pageSize = 64;
    q.groupSize = 4;
    q.numHeads = 32;
    q.queryLen = queryLen;
    return q;
  }
  KernelQuery mlaDecode(unsigned queryLen) {
    KernelQuery q = gqaDecode(queryLen);
    q.family = OpFamily::mla;
    q.headDim = 576;
    q.groupSize = 128;
    q.numHeads = 128;
    return q;
  }
  MLIRContext context;
};

TEST_F(RegistryTest, GqaMultiTokenOnEverySm) {
  KernelRegistry registry = KernelRegistry::builtin();
  for (const SmTraits &traits : supportedSms()) {
    TargetAttr target = TargetAttr::getPreset(&context, "sm_" + std::to_string(traits.sm));
    auto fitting = registry.candidates(gqaDecode(4), target);
    ASSERT_FALSE(fitting.empty()) << traits.sm;
    EXPECT_EQ(fitting.front()->name, "gqa_decode");
  }
}

TEST_F(RegistryTest, MlaMultiTokenNeedsLargeSharedMemory) {
  KernelRegistry registry = KernelRegistry::builtin();
  TargetAttr h200 = TargetAttr::getPreset(&context, "h200");
  TargetAttr rtx = TargetAttr::getPreset(&context, "rtx5090");
  EXPECT_FALSE(registry.candidates(mlaDecode(4), h200).empty());
  std::vector<std::pair<const KernelVariant *, std::string>> rejections;
  EXPECT_TRUE(registry.candidates(mlaDecode(4), rtx, &rejections).empty());
  ASSERT_FALSE(rejections.empty());
  EXPECT_NE(rejections.front().second.find("shared memory"), std::string::npos);
  auto single = registry.candidates(mlaDecode(1), rtx);
  ASSERT_FALSE(single.empty());
  EXPECT_EQ(single.front()->name, "mla_decode_small_smem");
}

// The FP8 MLA latent cache (656-byte tokens): every MLA variant reads it, with the same
// shared-memory rule as bf16 (multi-token off on sm_120, the small-smem kernel there);
// f16 latents have no kernel.
TEST_F(RegistryTest, MlaReadsFp8LatentCaches) {
  KernelRegistry registry = KernelRegistry::builtin();
  TargetAttr h200 = TargetAttr::getPreset(&context, "h200");
  TargetAttr rtx = TargetAttr::getPreset(&context, "rtx5090");
  Builder builder(&context);
  KernelQuery decode = mlaDecode(4);
  decode.dtype = builder.getType<Float8E4M3FNType>();
  auto fitting = registry.candidates(decode, h200);
  ASSERT_FALSE(fitting.empty());
  EXPECT_EQ(fitting.front()->name, "mla_decode");
  EXPECT_TRUE(registry.candidates(decode, rtx).empty());
  decode.queryLen = 1;
  auto single = registry.candidates(decode, rtx);
  ASSERT_FALSE(single.empty());
  EXPECT_EQ(single.front()->name, "mla_decode_small_smem");
  KernelQuery prefill = decode;
  prefill.phase = Phase::prefill;
  auto prompts = registry.candidates(prefill, h200);
  ASSERT_EQ(prompts.size(), 2u);
  EXPECT_EQ(prompts.front()->name, "mla_prefill");
  decode.dtype = builder.getF16Type();
  std::vector<std::pair<const KernelVariant *, std::string>> rejections;
  EXPECT_TRUE(registry.candidates(decode, h200, &rejections).empty());
  ASSERT_FALSE(rejections.empty());
  EXPECT_NE(rejections.front().second.find("not in {bf16, f8E4M3FN}"), std::string::npos)
      << rejections.front().second;
}

TEST_F(RegistryTest, HopperOnlyVariantRejectedElsewhere) {
  KernelRegistry registry = KernelRegistry::builtin();
  const KernelVariant *hopper = registry.lookup("prefill_fmha_sm90");
  ASSERT_TRUE(hopper);
  KernelQuery q = gqaDecode(1);
  q.phase = Phase::prefill;
  for (StringRef name : {"a100", "l40s", "rtx5090"})
    EXPECT_FALSE(
        KernelRegistry::whyRejected(*hopper, q, TargetAttr::getPreset(&context, name)).empty())
        << name.str();
  EXPECT_EQ(KernelRegistry::whyRejected(*hopper, q, TargetAttr::getPreset(&context, "h200")),
            "");
}

// Qwen3-Next's full attention (head_dim 256, GQA 8) selects the wgmma prefill's d256
// variant on Hopper (its own kernel id), the mma.sync prefill elsewhere and for f16 and
// FP8 caches.
TEST_F(RegistryTest, PrefillHeadDim256SelectsWgmmaOnHopper) {
  KernelRegistry registry = KernelRegistry::builtin();
  KernelQuery q = gqaDecode(1);
  q.phase = Phase::prefill;
  q.headDim = 256;
  q.groupSize = 8;
  q.numHeads = 16;
  q.pageSize = 16;
  for (StringRef name : {"a100", "l40s", "h100", "h200", "rtx5090"}) {
    auto fitting = registry.candidates(q, TargetAttr::getPreset(&context, name));
    ASSERT_FALSE(fitting.empty()) << name.str();
    const bool hopper = name == "h100" || name == "h200";
    EXPECT_EQ(fitting.front()->name, hopper ? "prefill_fmha_sm90_d256" : "prefill_fmha")
        << name.str();
    EXPECT_TRUE(fitting.front()->implemented) << name.str();
  }
  const KernelVariant *d256 = registry.lookup("prefill_fmha_sm90_d256");
  ASSERT_TRUE(d256);
  EXPECT_EQ(d256->runtimeKernel, runtimeKernelId("prefill_fmha_sm90_d256"));
  EXPECT_NE(d256->runtimeKernel, 0);
  TargetAttr h200 = TargetAttr::getPreset(&context, "h200");
  Builder builder(&context);
  for (Type cache : {Type(builder.getF16Type()), Type(builder.getType<Float8E4M3FNType>())}) {
    q.dtype = cache;
    auto fitting = registry.candidates(q, h200);
    ASSERT_FALSE(fitting.empty());
    EXPECT_EQ(fitting.front()->name, "prefill_fmha");
  }
  // The d64/d128 tiles are not offered at 256, nor the d256 ones at 128.
  q.dtype = builder.getBF16Type();
  EXPECT_NE(KernelRegistry::whyRejected(*registry.lookup("prefill_fmha_sm90"), q, h200)
                .find("head dim 256 not in {64, 128}"),
            std::string::npos);
  q.headDim = 128;
  EXPECT_NE(KernelRegistry::whyRejected(*d256, q, h200).find("head dim 128 not in {256}"),
            std::string::npos);
}

// KV caches of another type than the runtime's bf16 activations (f16, FP8 e4m3): the
// mma.sync kernels read them, the wgmma prefill (one element type for q and the cache)
// does not, so Hopper selects prefill_fmha for them and prefill_fmha_sm90 for bf16.
TEST_F(RegistryTest, F16AndFp8CachesSelectTheMmaSyncPrefill) {
  KernelRegistry registry = KernelRegistry::builtin();
  TargetAttr h200 = TargetAttr::getPreset(&context, "h200");
  Builder builder(&context);
  KernelQuery prefill = gqaDecode(1);
  prefill.phase = Phase::prefill;
  auto bf16 = registry.candidates(prefill, h200);
  ASSERT_FALSE(bf16.empty());
  EXPECT_EQ(bf16.front()->name, "prefill_fmha_sm90");
  const KernelVariant *hopper = registry.lookup("prefill_fmha_sm90");
  ASSERT_TRUE(hopper);
  for (Type cache : {Type(builder.getF16Type()), Type(builder.getType<Float8E4M3FNType>())}) {
    prefill.dtype = cache;
    auto fitting = registry.candidates(prefill, h200);
    ASSERT_FALSE(fitting.empty());
    EXPECT_EQ(fitting.front()->name, "prefill_fmha");
    EXPECT_NE(KernelRegistry::whyRejected(*hopper, prefill, h200).find("not in {bf16}"),
              std::string::npos);
    KernelQuery decode = gqaDecode(5);
    decode.dtype = cache;
    auto decoders = registry.candidates(decode, h200);
    ASSERT_FALSE(decoders.empty());
    EXPECT_EQ(decoders.front()->name, "gqa_decode"); // multi-token too
  }
}

TEST_F(RegistryTest, EmbedderAddsAVariant) {
  KernelRegistry registry = KernelRegistry::builtin();
  KernelVariant custom;
  custom.name = "my_fp8_decode";
  custom.family = OpFamily::attention;
  custom.phase = Phase::decode;
  custom.minSm = 89;
  custom.requiredFeatures = static_cast<uint32_t>(TargetFeature::fp8);
  custom.headDims = {128};
  custom.dtypes = static_cast<uint32_t>(DtypeBit::fp8_e5m2);
  custom.maxQueryLen = 4;
  custom.priority = 50;
  registry.add(custom);
  // No built-in kernel reads e5m2: the embedder's is the only candidate where it runs.
  KernelQuery q = gqaDecode(4);
  q.dtype = Float8E5M2Type::get(&context);
  auto fitting = registry.candidates(q, TargetAttr::getPreset(&context, "l40s"));
  ASSERT_EQ(fitting.size(), 1u);
  EXPECT_EQ(fitting.front()->name, "my_fp8_decode");
  EXPECT_TRUE(registry.candidates(q, TargetAttr::getPreset(&context, "a100")).empty());
  // e4m3 pools: the built-in gqa_decode reads them on any target.
  q.dtype = Float8E4M3FNType::get(&context);
  fitting = registry.candidates(q, TargetAttr::getPreset(&context, "a100"));
  ASSERT_EQ(fitting.size(), 1u);
  EXPECT_EQ(fitting.front()->name, "gqa_decode");
}

TEST_F(RegistryTest, MaxQueryLenComesFromImplementedVariants) {
  EXPECT_EQ(KernelRegistry::builtin().maxQueryLen(OpFamily::attention), 8u);
  EXPECT_EQ(KernelRegistry::builtin().maxQueryLen(OpFamily::mla), 4u);
}
} // namespace
