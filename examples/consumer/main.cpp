// An embedding compiler in miniature: parses a model with Kiln's ops, adds its own
// kernel variant to the registry, runs the deploy pipeline as a library, and reads the
// plan and the kernel choice back.
#include "kiln/Dialect/Kiln.h"
#include "kiln/Registry/KernelRegistry.h"
#include "kiln/Transforms/Pipeline.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

#include <cstdio>

static const char *kModel = R"mlir(
module {
  func.func @forward(%q: tensor<?x32x128xbf16>, %k: tensor<?x8x128xbf16>) -> tensor<?x32x128xbf16> {
    %0 = kiln.attention layer 0 %q, %k, %k {num_heads = 32, num_kv_heads = 8, head_dim = 128}
      : tensor<?x32x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x32x128xbf16>
    return %0 : tensor<?x32x128xbf16>
  }
}
)mlir";

int main() {
  mlir::DialectRegistry registry;
  kiln::registerAllDialects(registry);
  mlir::MLIRContext context(registry);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(kModel, &context);
  if (!module) {
    std::fprintf(stderr, "kiln-consumer: failed to parse\n");
    return 1;
  }

  // The embedder's own decode kernel, preferred over Kiln's where it fits.
  kiln::KernelVariant mine;
  mine.name = "consumer_decode";
  mine.family = kiln::OpFamily::attention;
  mine.phase = kiln::Phase::decode;
  mine.headDims = {128};
  mine.dtypes = static_cast<uint32_t>(kiln::DtypeBit::bf16);
  mine.maxQueryLen = 4;
  mine.priority = 100;
  kiln::KernelRegistry::global().add(mine);

  kiln::DeployOptions options;
  options.target = "h200";
  options.spec = "ngram:3";
  options.maxBatch = 4;
  options.maxSeqLen = 1024;
  mlir::PassManager pm(&context, mlir::ModuleOp::getOperationName());
  kiln::buildDeployPipeline(pm, options);
  if (mlir::failed(pm.run(*module))) {
    std::fprintf(stderr, "kiln-consumer: deploy pipeline failed\n");
    return 1;
  }

  auto plan = (*module)->getAttrOfType<kiln::PlanAttr>("kiln.plan");
  std::string kernel;
  module->walk([&](kiln::CachedAttentionOp op) {
    if (auto name = op.getDecodeKernelAttr())
      kernel = name.getValue().str();
  });
  // 4 sequences x 1024 tokens x 2 x 8 x 128 x 2 bytes of KV.
  const uint64_t expected = 4ull * 1024 * 2 * 8 * 128 * 2;
  std::printf("kiln-consumer: plan %llu bytes, decode kernel %s\n",
              static_cast<unsigned long long>(plan ? plan.getTotalBytes() : 0),
              kernel.c_str());
  return plan && plan.getTotalBytes() == expected && kernel == "consumer_decode" ? 0 : 1;
}
