// Attributes, presets, interface queries and byte formulas of the kiln dialect.
#include "kiln/Dialect/Kiln/Kiln.h"
#include "kiln/Runtime/Layout.h"
#include "kiln/InitAll.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

using namespace mlir;
using namespace kiln;

namespace {
class DialectTest : public ::testing::Test {
protected:
  DialectTest() {
    DialectRegistry registry;
    registerAllDialects(registry);
    context.appendDialectRegistry(registry);
    context.loadAllAvailableDialects();
  }
  RuntimeAttr runtime(unsigned batch, unsigned seq, unsigned page = 64, unsigned tp = 1) {
    return RuntimeAttr::get(&context, batch, seq, page, Builder(&context).getBF16Type(), tp,
                            Type(), /*max_step_tokens=*/0, kDefaultCudaGraphs,
                            DenseI32ArrayAttr(), /*kv_ring_window=*/0);
  }
  /// Bytes of the single resource declared by `resourceIr` under `config`.
  uint64_t bytesOf(StringRef resourceIr, RuntimeAttr config) {
    std::string text = ("func.func @f() {\n" + resourceIr + "\n return\n}").str();
    OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(text, &context);
    EXPECT_TRUE(module);
    uint64_t bytes = 0;
    module->walk([&](CacheResourceInterface r) {
      std::optional<uint64_t> resource = computeResourceBytes(r, config);
      EXPECT_TRUE(resource) << "overflow";
      bytes += resource.value_or(0);
    });
    return bytes;
  }
  /// Whether the bytes of the single resource of `resourceIr` overflow under `config`.
  bool overflows(StringRef resourceIr, RuntimeAttr config) {
    std::string text = ("func.func @f() {\n" + resourceIr + "\n return\n}").str();
    OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(text, &context);
    bool overflow = false;
    module->walk([&](CacheResourceInterface r) {
      overflow |= !computeResourceBytes(r, config).has_value();
    });
    return overflow;
  }
  MLIRContext context;
};

TEST_F(DialectTest, ResourceBytesOverflowIsNulloptNotAWrappedSize) {
  // 2^31 tokens x 2^21 sequences x 4 KiB per token = 2^64: wrapped to 0 before.
  EXPECT_TRUE(overflows("%0 = kiln.cache_resource layer 0 unit [2, 8, 128] of bf16 : "
                        "!kiln.cache<kv>",
                        runtime(2097152, 2147483648u)));
  EXPECT_FALSE(overflows("%0 = kiln.cache_resource layer 0 unit [2, 8, 128] of bf16 : "
                         "!kiln.cache<kv>",
                         runtime(64, 8192)));
  // A unit of 2^62 elements of 4 bytes overflows before any token count.
  EXPECT_TRUE(overflows("%0 = kiln.cache_resource layer 0 unit [4194304, 1099511627776] of "
                        "f32 : !kiln.cache<ssm_state>",
                        runtime(1, 64)));
}

TEST_F(DialectTest, PresetsExpandToPublishedNumbers) {
  TargetAttr h200 = TargetAttr::getPreset(&context, "h200");
  ASSERT_TRUE(h200);
  EXPECT_EQ(h200.getSm(), 90u);
  EXPECT_EQ(h200.getMemoryBytes(), 150109880320ull);
  EXPECT_EQ(h200.getSmemPerBlock(), 232448u);
  EXPECT_TRUE(h200.hasFeature(TargetFeature::wgmma));
  TargetAttr rtx = TargetAttr::getPreset(&context, "rtx5090");
  ASSERT_TRUE(rtx);
  EXPECT_EQ(rtx.getSm(), 120u);
  EXPECT_EQ(rtx.getSmemPerBlock(), 101376u);
  EXPECT_FALSE(rtx.hasFeature(TargetFeature::wgmma));
  EXPECT_FALSE(rtx.hasFeature(TargetFeature::tcgen05));
  EXPECT_TRUE(TargetAttr::getPreset(&context, "b200").hasFeature(TargetFeature::tcgen05));
  for (StringRef name : {"a100", "a10g", "l4", "l40s", "h100", "h200", "b200", "b300",
                         "rtx5090", "rtx-pro-6000", "dgx-spark"})
    EXPECT_TRUE(TargetAttr::getPreset(&context, name)) << name.str();
  EXPECT_FALSE(TargetAttr::getPreset(&context, "t4"));
  EXPECT_FALSE(TargetAttr::getPreset(&context, "sm_75"));
  TargetAttr sm121 = TargetAttr::getPreset(&context, "sm_121");
  ASSERT_TRUE(sm121);
  EXPECT_EQ(sm121.getMemoryBytes(), 0u);
}

TEST_F(DialectTest, SmTableMatchesProgrammingGuide) {
  EXPECT_EQ(lookupSmTraits(80)->smemPerBlockOptin, 166912u);
  EXPECT_EQ(lookupSmTraits(89)->smemPerBlockOptin, 101376u);
  EXPECT_EQ(lookupSmTraits(103)->smemPerBlockOptin, 232448u);
  EXPECT_FALSE(lookupSmTraits(75));
  EXPECT_EQ(parseSmName("sm_90"), 90u);
  EXPECT_EQ(parseSmName("120"), 120u);
  EXPECT_FALSE(parseSmName("sm_x"));
}

TEST_F(DialectTest, SpecAttrQueries) {
  auto spec = SpecAttr::get(&context, SpecMode::mtp, 3, SsmSpecMode::rewind);
  EXPECT_TRUE(spec.isOneModel());
  EXPECT_EQ(spec.getTokensPerStep(), 4u);
  EXPECT_FALSE(SpecAttr::get(&context, SpecMode::draft_target, 4, SsmSpecMode::rewind)
                   .isOneModel());
}

// Paged KV: bytes/token = 2 * kv_heads * head_dim * 2 (bf16).
TEST_F(DialectTest, KvBytes) {
  uint64_t bytes = bytesOf(
      "%r = kiln.cache_resource layer 0 unit [2, 8, 128] of bf16 shard 1 : !kiln.cache<kv>",
      runtime(64, 8192));
  EXPECT_EQ(bytes, 64ull * 8192 * 2 * 8 * 128 * 2);
  // Sequence length rounds up to whole pages; a sliding window does not cap it (its
  // layer keeps the pages of the one block table every layer shares).
  EXPECT_EQ(bytesOf("%r = kiln.cache_resource layer 0 unit [2, 8, 128] of bf16 : "
                    "!kiln.cache<kv>",
                    runtime(1, 100)),
            128ull * 2 * 8 * 128 * 2);
  EXPECT_EQ(bytesOf("%r = kiln.cache_resource layer 0 unit [2, 8, 128] of bf16 window 256 "
                    ": !kiln.cache<kv>",
                    runtime(2, 8192)),
            2ull * 8192 * 2 * 8 * 128 * 2);
}

// MLA: 576 values per token whatever the head count.
TEST_F(DialectTest, MlaLatentBytes) {
  EXPECT_EQ(bytesOf("%r = kiln.cache_resource layer 0 unit [576] of bf16 : "
                    "!kiln.cache<mla_latent>",
                    runtime(128, 4096, 64, 8)),
            128ull * 4096 * 576 * 2);
}

// Nemotron-Nano-9B-v2: 128 heads x 80 x 128 fp32 with 128 slots = 640 MiB per layer;
// intermediate states for 1 + 3 tokens are four times that.
TEST_F(DialectTest, SsmStateBytes) {
  EXPECT_EQ(bytesOf("%r = kiln.cache_resource layer 0 unit [128, 80, 128] of f32 shard 0 : "
                    "!kiln.cache<ssm_state>",
                    runtime(128, 8192)),
            640ull << 20);
  EXPECT_EQ(bytesOf("%r = kiln.cache_resource layer 0 unit [4, 128, 80, 128] of f32 shard "
                    "1 speculative_only : !kiln.cache<intermediate_ssm_state>",
                    runtime(128, 8192)),
            2560ull << 20);
}

// tp divides the shard dimension; KV heads fewer than ranks are replicated.
TEST_F(DialectTest, TensorParallelSplit) {
  EXPECT_EQ(bytesOf("%r = kiln.cache_resource layer 0 unit [128, 80, 128] of f32 shard 0 : "
                    "!kiln.cache<ssm_state>",
                    runtime(128, 8192, 64, 4)),
            160ull << 20);
  EXPECT_EQ(bytesOf("%r = kiln.cache_resource layer 0 unit [2, 8, 128] of bf16 shard 1 : "
                    "!kiln.cache<kv>",
                    runtime(1, 64, 64, 16)),
            64ull * 2 * 1 * 128 * 2);
  EXPECT_EQ(shardUnitShape({10240, 3}, 0, 2), (SmallVector<int64_t>{5120, 3}));
}

TEST_F(DialectTest, ResourceInterfaceQueries) {
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(
      "func.func @f() {\n"
      "%a = kiln.cache_resource layer 3 unit [4, 10240, 3] of bf16 speculative_only : "
      "!kiln.cache<intermediate_conv_state>\n"
      "%b = kiln.cache_resource layer 5 unit [2, 8, 64] of f16 unmanaged : "
      "!kiln.cache<kv>\n return\n}",
      &context);
  ASSERT_TRUE(module);
  SmallVector<CacheResourceInterface> resources;
  module->walk([&](CacheResourceInterface r) { resources.push_back(r); });
  ASSERT_EQ(resources.size(), 2u);
  EXPECT_EQ(resources[0].getResourceKind(), ResourceKind::intermediate_conv_state);
  EXPECT_TRUE(resources[0].isSpeculativeOnly());
  EXPECT_EQ(resources[0].getLayerIndex(), 3);
  EXPECT_EQ(resources[0].getAllocationUnit(), AllocationUnit::perSlot);
  EXPECT_EQ(resources[0].getPoolCategory(), PoolCategory::state);
  EXPECT_FALSE(resources[1].isSpeculativeOnly());
  EXPECT_EQ(resources[1].getAllocationUnit(), AllocationUnit::perToken);
  EXPECT_EQ(resources[1].getPoolCategory(), PoolCategory::unmanaged);
  EXPECT_TRUE(resources[1].getResourceElementType().isF16());
}
// The lowering passes these enum values to the runtime unchanged, so they must be the
// codes of include/kiln/Runtime/ABI.def.
TEST_F(DialectTest, EnumsMatchRuntimeAbi) {
#define KILN_RT_ROPE(ENUM, value, name)                                                    \
  EXPECT_EQ(static_cast<int64_t>(*symbolizeRopeType(name)), value) << name;
#include "kiln/Runtime/ABI.def"
#define KILN_RT_INPUT(ENUM, value, name)                                                   \
  EXPECT_EQ(static_cast<int64_t>(*symbolizeInputKind(name)), value) << name;
#include "kiln/Runtime/ABI.def"
#define KILN_RT_OUTPUT(ENUM, value, name)                                                  \
  EXPECT_EQ(static_cast<int64_t>(*symbolizeOutputKind(name)), value) << name;
#include "kiln/Runtime/ABI.def"
#define KILN_RT_ACTIVATION(ENUM, value, name)                                              \
  EXPECT_EQ(static_cast<int64_t>(*symbolizeActivationKind(name)), value) << name;
#include "kiln/Runtime/ABI.def"
}

// max_logit_rows = max_batch x (1 + drafts); max_step_tokens defaults to the larger of
// that and min(max_seq_len, 2048), or is what kiln.runtime says.
TEST_F(DialectTest, StepLimits) {
  ModuleConfig config;
  config.runtime = runtime(4, 256);
  StepLimits limits = getStepLimits(config);
  EXPECT_EQ(limits.maxLogitRows, 4u);
  EXPECT_EQ(limits.maxStepTokens, 256u);
  EXPECT_EQ(limits.maxDraftLen, 0u);
  config.runtime = runtime(1024, 8192);
  config.spec = SpecAttr::get(&context, SpecMode::mtp, 3, SsmSpecMode::rewind);
  limits = getStepLimits(config);
  EXPECT_EQ(limits.maxLogitRows, 4096u);
  EXPECT_EQ(limits.maxStepTokens, 4096u);
  EXPECT_EQ(limits.maxDraftLen, 3u);
  config.runtime = RuntimeAttr::get(&context, 4, 8192, 64, Builder(&context).getBF16Type(),
                                    1, Type(), /*max_step_tokens=*/512, kDefaultCudaGraphs,
                                    DenseI32ArrayAttr(), /*kv_ring_window=*/0);
  EXPECT_EQ(getStepLimits(config).maxStepTokens, 512u);
  EXPECT_EQ(getStepLimits(ModuleConfig()).maxStepTokens, 0u);
}

TEST_F(DialectTest, DeviceMemoryTotal) {
  // The allocation: the graphs' reserve is the driver's, the communicator's NCCL's.
  auto memory = DeviceMemoryAttr::get(&context, 1, 2, 4, 8, 16, 0, 0, 0, 32, 64);
  EXPECT_EQ(memory.getTotal(), 31u);
  EXPECT_EQ(memory.getDeviceTotal(), 127u);
  auto overflow = DeviceMemoryAttr::get(&context, UINT64_MAX, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  EXPECT_FALSE(overflow.getTotal());
  auto graphsOverflow = DeviceMemoryAttr::get(&context, UINT64_MAX, 0, 0, 0, 0, 0, 0, 0, 1, 0);
  EXPECT_EQ(graphsOverflow.getTotal(), UINT64_MAX);
  EXPECT_FALSE(graphsOverflow.getDeviceTotal());
}

TEST_F(DialectTest, GraphReserveIsWholePagesPerShape) {
  // 300 launches of 4 KiB: 1.17 MiB, one 2 MiB page a shape.
  EXPECT_EQ(kiln_rt_graph_reserve_bytes(64, 300), 64u * (2u << 20));
  EXPECT_EQ(kiln_rt_graph_reserve_bytes(2, 600), 2u * (4u << 20));
  EXPECT_EQ(kiln_rt_graph_reserve_bytes(0, 600), 0u);
}
} // namespace
