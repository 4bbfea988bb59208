// An embedding model compiler in miniature, built against Kiln's installed tree:
//  1. it adds its own decode kernel to Kiln's registry and runs the deploy pipeline as a
//     library: Kiln plans the caches and picks the embedder's kernel where it fits;
//  2. it puts kiln.attention inside its own linalg graph, bufferizes the whole function
//     with upstream one-shot bufferization, and applies only Kiln's runtime-call
//     patterns: the attention becomes a call on its own buffers while the embedder's
//     linalg ops are kept, in place, for the embedder's own lowering;
//  3. it brings its own attention op (ConsumerOps.h, a dialect of its own in plain C++)
//     and Kiln gives it a KV cache, a kernel, planned memory and a runtime call through
//     the interfaces alone.
#include "ConsumerOps.h"

#include "kiln/Conversion/KilnToRuntime.h"
#include "kiln/Dialect/Kiln/Kiln.h"
#include "kiln/InitAll.h"
#include "kiln/Registry/KernelRegistry.h"
#include "kiln/Transforms/Pipeline.h"

#include "mlir/Dialect/Bufferization/Transforms/Passes.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/DialectConversion.h"

#include <cstdio>
#include <string>

namespace {

const char *kAttentionOnly = R"mlir(
module {
  func.func @forward(%q: tensor<?x32x128xbf16>, %k: tensor<?x8x128xbf16>) -> tensor<?x32x128xbf16> {
    %0 = kiln.attention layer 0 %q, %k, %k {num_heads = 32, num_kv_heads = 8, head_dim = 128}
      : tensor<?x32x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x32x128xbf16>
    return %0 : tensor<?x32x128xbf16>
  }
}
)mlir";

// The embedder's own layer: its projections are linalg, Kiln provides the attention.
const char *kLinalgLayer = R"mlir(
module {
  func.func @layer(%ctx: !llvm.ptr {kiln.context}, %x: tensor<16x256xbf16>,
                   %wq: tensor<256x256xbf16>, %wk: tensor<256x128xbf16>,
                   %wv: tensor<256x128xbf16>) -> tensor<16x256xbf16> {
    %zero = arith.constant 0.0 : bf16
    %eq = tensor.empty() : tensor<16x256xbf16>
    %fq = linalg.fill ins(%zero : bf16) outs(%eq : tensor<16x256xbf16>) -> tensor<16x256xbf16>
    %q = linalg.matmul ins(%x, %wq : tensor<16x256xbf16>, tensor<256x256xbf16>) outs(%fq : tensor<16x256xbf16>) -> tensor<16x256xbf16>
    %ek = tensor.empty() : tensor<16x128xbf16>
    %fk = linalg.fill ins(%zero : bf16) outs(%ek : tensor<16x128xbf16>) -> tensor<16x128xbf16>
    %k = linalg.matmul ins(%x, %wk : tensor<16x256xbf16>, tensor<256x128xbf16>) outs(%fk : tensor<16x128xbf16>) -> tensor<16x128xbf16>
    %v = linalg.matmul ins(%x, %wv : tensor<16x256xbf16>, tensor<256x128xbf16>) outs(%fk : tensor<16x128xbf16>) -> tensor<16x128xbf16>
    %q3 = tensor.expand_shape %q [[0], [1, 2]] output_shape [16, 2, 128] : tensor<16x256xbf16> into tensor<16x2x128xbf16>
    %k3 = tensor.expand_shape %k [[0], [1, 2]] output_shape [16, 1, 128] : tensor<16x128xbf16> into tensor<16x1x128xbf16>
    %v3 = tensor.expand_shape %v [[0], [1, 2]] output_shape [16, 1, 128] : tensor<16x128xbf16> into tensor<16x1x128xbf16>
    %a = kiln.attention layer 0 %q3, %k3, %v3 {num_heads = 2, num_kv_heads = 1, head_dim = 128}
      : tensor<16x2x128xbf16>, tensor<16x1x128xbf16>, tensor<16x1x128xbf16> -> tensor<16x2x128xbf16>
    %a2 = tensor.collapse_shape %a [[0], [1, 2]] : tensor<16x2x128xbf16> into tensor<16x256xbf16>
    %out = linalg.add ins(%x, %a2 : tensor<16x256xbf16>, tensor<16x256xbf16>) outs(%eq : tensor<16x256xbf16>) -> tensor<16x256xbf16>
    return %out : tensor<16x256xbf16>
  }
}
)mlir";

// Part 3's layer: part 2's, with the embedder's own attention op in place of Kiln's.
std::string ownOpLayer() {
  std::string text = kLinalgLayer;
  const std::string kilnOp = "kiln.attention layer 0 %q3, %k3, %v3 {num_heads = 2, "
                             "num_kv_heads = 1, head_dim = 128}\n      : tensor<16x2x128xbf16>, "
                             "tensor<16x1x128xbf16>, tensor<16x1x128xbf16> -> "
                             "tensor<16x2x128xbf16>";
  const std::string ownOp =
      "\"consumer.attention\"(%q3, %k3, %v3) {layer = 0 : i64, num_heads = 2 : i64, "
      "num_kv_heads = 1 : i64, head_dim = 128 : i64}\n      : (tensor<16x2x128xbf16>, "
      "tensor<16x1x128xbf16>, tensor<16x1x128xbf16>) -> tensor<16x2x128xbf16>";
  const size_t at = text.find(kilnOp);
  return at == std::string::npos ? std::string() : text.replace(at, kilnOp.size(), ownOp);
}

int fail(const char *what) {
  std::fprintf(stderr, "kiln-consumer: %s\n", what);
  return 1;
}

mlir::LogicalResult deploy(mlir::MLIRContext &context, mlir::ModuleOp module,
                           const char *spec) {
  kiln::DeployOptions options;
  options.target = "h200";
  options.spec = spec;
  options.maxBatch = 4;
  options.maxSeqLen = 1024;
  mlir::PassManager pm(&context, mlir::ModuleOp::getOperationName());
  kiln::buildDeployPipeline(pm, options);
  return pm.run(module);
}

/// Part 1: the embedder's kernel variant wins where it fits.
int registryAndPlan(mlir::MLIRContext &context) {
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(kAttentionOnly, &context);
  if (!module)
    return fail("failed to parse the attention model");
  kiln::KernelVariant mine;
  mine.name = "consumer_decode";
  mine.family = kiln::OpFamily::attention;
  mine.phase = kiln::Phase::decode;
  mine.headDims = {128};
  mine.dtypes = static_cast<uint32_t>(kiln::DtypeBit::bf16);
  mine.maxQueryLen = 4;
  mine.priority = 100;
  kiln::KernelRegistry::global().add(mine);
  if (mlir::failed(deploy(context, *module, "ngram:3")))
    return fail("deploy pipeline failed");
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

/// One-shot bufferization of a whole function, then Kiln's runtime-call patterns on the
/// ops that implement RuntimeCallOpInterface; everything else stays for the embedder.
mlir::LogicalResult bufferizeAndCallRuntime(mlir::MLIRContext &context, mlir::ModuleOp module) {
  mlir::PassManager pm(&context, mlir::ModuleOp::getOperationName());
  mlir::bufferization::OneShotBufferizePassOptions bufferize;
  bufferize.bufferizeFunctionBoundaries = true;
  bufferize.functionBoundaryTypeConversion =
      mlir::bufferization::LayoutMapOption::IdentityLayoutMap;
  pm.addPass(mlir::bufferization::createOneShotBufferizePass(bufferize));
  if (mlir::failed(pm.run(module)))
    return mlir::failure();
  mlir::ConversionTarget target(context);
  target.addLegalDialect<mlir::linalg::LinalgDialect, mlir::memref::MemRefDialect,
                         mlir::arith::ArithDialect, mlir::func::FuncDialect,
                         mlir::LLVM::LLVMDialect>();
  target.addIllegalDialect<kiln::KilnDialect, consumer::ConsumerDialect>();
  target.addLegalOp<kiln::CacheResourceOp>();
  mlir::RewritePatternSet patterns(&context);
  kiln::populateKilnToRuntimeCallPatterns(patterns);
  return mlir::applyPartialConversion(module, target, std::move(patterns));
}

/// Part 2: Kiln lowers its op in place inside the embedder's linalg graph.
int inPlaceLowering(mlir::MLIRContext &context) {
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(kLinalgLayer, &context);
  if (!module)
    return fail("failed to parse the linalg layer");
  kiln::KernelRegistry::global() = kiln::KernelRegistry::builtin();
  if (mlir::failed(deploy(context, *module, "none")))
    return fail("deploy pipeline failed on the linalg layer");

  // The embedder's own conversion: Kiln's ops must go, everything else stays.
  if (mlir::failed(bufferizeAndCallRuntime(context, *module)))
    return fail("bufferization or Kiln's runtime-call patterns failed");

  unsigned matmuls = 0, attentionCalls = 0, adds = 0;
  module->walk([&](mlir::Operation *op) {
    if (mlir::isa<mlir::linalg::MatmulOp>(op))
      ++matmuls;
    if (mlir::isa<mlir::linalg::AddOp>(op))
      ++adds;
    if (auto call = mlir::dyn_cast<mlir::func::CallOp>(op))
      attentionCalls += call.getCallee() == "kiln_rt_attention";
  });
  std::printf("kiln-consumer: in place: %u linalg.matmul, %u linalg.add kept, %u "
              "kiln_rt_attention call\n",
              matmuls, adds, attentionCalls);
  return matmuls == 3 && adds == 1 && attentionCalls == 1 ? 0 : 1;
}

/// Part 3: the embedder's own op, through Kiln's interfaces alone.
int ownOp(mlir::MLIRContext &context) {
  const std::string text = ownOpLayer();
  if (text.empty())
    return fail("part 2's layer no longer holds the kiln.attention part 3 replaces");
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(text, &context);
  if (!module)
    return fail("failed to parse the layer with the embedder's own op");
  if (mlir::failed(deploy(context, *module, "none")))
    return fail("deploy pipeline failed on the embedder's own op");
  auto plan = (*module)->getAttrOfType<kiln::PlanAttr>("kiln.plan");
  std::string kernel;
  unsigned cached = 0;
  module->walk([&](consumer::CachedAttentionOp op) {
    ++cached;
    if (auto name = op->getAttrOfType<mlir::StringAttr>("decode_kernel"))
      kernel = name.getValue().str();
  });
  if (mlir::failed(bufferizeAndCallRuntime(context, *module)))
    return fail("lowering the embedder's own op failed");
  unsigned calls = 0, matmuls = 0, left = 0;
  module->walk([&](mlir::Operation *op) {
    if (auto call = mlir::dyn_cast<mlir::func::CallOp>(op))
      calls += call.getCallee() == "kiln_rt_attention" && call->hasAttr("kiln.layer");
    matmuls += mlir::isa<mlir::linalg::MatmulOp>(op);
    left += op->getDialect() && op->getDialect()->getNamespace() == "consumer";
  });
  // 4 sequences x 1024 tokens x [2 x 1 x 128] bf16 of KV.
  const uint64_t expected = 4ull * 1024 * 2 * 1 * 128 * 2;
  std::printf("kiln-consumer: own op: %u cached, plan %llu bytes, decode kernel %s, %u "
              "kiln_rt_attention call, %u linalg.matmul kept, %u consumer ops left\n",
              cached, static_cast<unsigned long long>(plan ? plan.getTotalBytes() : 0),
              kernel.c_str(), calls, matmuls, left);
  return cached == 1 && plan && plan.getTotalBytes() == expected && kernel == "gqa_decode" &&
                 calls == 1 && matmuls == 3 && left == 0
             ? 0
             : 1;
}

} // namespace

int main() {
  mlir::DialectRegistry registry;
  kiln::registerAllDialects(registry);
  registry.insert<mlir::linalg::LinalgDialect>();
  mlir::linalg::registerBufferizableOpInterfaceExternalModels(registry);
  consumer::registerConsumerDialect(registry);
  mlir::MLIRContext context(registry);
  context.loadAllAvailableDialects();
  if (int status = registryAndPlan(context))
    return status;
  if (int status = inPlaceLowering(context))
    return status;
  return ownOp(context);
}
