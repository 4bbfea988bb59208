//===- Pipeline.cpp - kiln-deploy and registration for embedders ----------===//
#include "kiln/Transforms/Pipeline.h"
#include "kiln/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Pass/PassOptions.h"
#include "mlir/Pass/PassRegistry.h"

using namespace mlir;

void kiln::buildDeployPipeline(OpPassManager &pm, const DeployOptions &options) {
  KilnConfigureOptions configure;
  configure.target = options.target;
  configure.spec = options.spec;
  configure.ssmMode = options.ssmMode;
  configure.maxBatch = options.maxBatch.value_or(0);
  configure.maxSeqLen = options.maxSeqLen.value_or(0);
  configure.pageSize = options.pageSize.value_or(0);
  configure.tp = options.tp.value_or(0);
  configure.maxStepTokens = options.maxStepTokens.value_or(0);
  configure.kvDtype = options.kvDtype;
  pm.addPass(createKilnConfigure(configure));
  pm.addPass(createKilnInsertCaches());
  KilnDropSpeculativeResourcesOptions drop;
  drop.emitRemarks = options.emitRemarks;
  pm.addPass(createKilnDropSpeculativeResources(drop));
  pm.addPass(createKilnVerifyConfig());
  // Kernel choice does not depend on the plan; selecting first keeps the kernels in
  // the report of a model that does not fit.
  KilnSelectKernelsOptions select;
  select.force.assign(options.force.begin(), options.force.end());
  select.emitRemarks = options.emitRemarks;
  pm.addPass(createKilnSelectKernels(select));
  KilnPlanMemoryOptions plan;
  plan.usableFraction = options.usableFraction;
  plan.fillKv = options.fillKv;
  plan.reserveBytes = options.reserveBytes;
  pm.addPass(createKilnPlanMemory(plan));
}

namespace {
/// `kiln-deploy` options as kiln-opt sees them.
struct DeployPipelineOptions : public PassPipelineOptions<DeployPipelineOptions> {
  Option<std::string> target{*this, "target", llvm::cl::desc("Preset or sm_XY")};
  Option<std::string> spec{*this, "spec",
                           llvm::cl::desc("none, mtp:N, eagle3:N, draft:N, ngram:N")};
  Option<std::string> ssmMode{*this, "ssm-mode", llvm::cl::desc("rewind or replay")};
  Option<unsigned> maxBatch{*this, "max-batch", llvm::cl::init(0)};
  Option<unsigned> maxSeqLen{*this, "max-seq-len", llvm::cl::init(0)};
  Option<unsigned> pageSize{*this, "page-size", llvm::cl::init(0)};
  Option<unsigned> tp{*this, "tp", llvm::cl::init(0)};
  Option<unsigned> maxStepTokens{*this, "max-step-tokens", llvm::cl::init(0)};
  Option<std::string> kvDtype{*this, "kv-dtype", llvm::cl::desc("bf16, f16, f32, fp8")};
  Option<double> usableFraction{*this, "usable-fraction", llvm::cl::init(0.9)};
  Option<bool> fillKv{*this, "fill-kv", llvm::cl::init(false)};
  Option<uint64_t> reserveBytes{*this, "reserve-bytes", llvm::cl::init(0)};
  Option<bool> remarks{*this, "remarks", llvm::cl::init(false)};
  ListOption<std::string> force{*this, "force", llvm::cl::desc("Kernel overrides")};

  kiln::DeployOptions toDeployOptions() const {
    kiln::DeployOptions options;
    options.target = target;
    options.spec = spec;
    options.ssmMode = ssmMode;
    auto set = [](unsigned value) {
      return value ? std::optional<unsigned>(value) : std::nullopt;
    };
    options.maxBatch = set(maxBatch);
    options.maxSeqLen = set(maxSeqLen);
    options.pageSize = set(pageSize);
    options.tp = set(tp);
    options.maxStepTokens = set(maxStepTokens);
    options.kvDtype = kvDtype;
    options.usableFraction = usableFraction;
    options.fillKv = fillKv;
    options.reserveBytes = reserveBytes;
    options.emitRemarks = remarks;
    options.force.assign(force.begin(), force.end());
    return options;
  }
};
} // namespace

void kiln::registerDeployPipeline() {
  PassPipelineRegistration<DeployPipelineOptions>(
      "kiln-deploy",
      "Configure, insert caches, drop speculative-only resources without speculation, "
      "verify the configuration, select kernels and plan memory",
      [](OpPassManager &pm, const DeployPipelineOptions &options) {
        buildDeployPipeline(pm, options.toDeployOptions());
      });
}
