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
  configure.kvRingWindow = options.kvRingWindow.value_or(0);
  configure.cudaGraphs = options.cudaGraphs;
  configure.cudaGraphBatches = options.cudaGraphBatches;
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
/// `kiln-deploy{...}` options as kiln-opt sees them: the rows of DeployOptions.def (a
/// count of 0 keeps the module's value).
struct DeployPipelineOptions : public PassPipelineOptions<DeployPipelineOptions> {
#define KILN_DEPLOY_STRING(field, flag, category, help)                                    \
  Option<std::string> field{*this, flag, llvm::cl::desc(help)};
#define KILN_DEPLOY_COUNT(field, flag, category, help)                                     \
  Option<unsigned> field{*this, flag, llvm::cl::desc(help), llvm::cl::init(0)};
#define KILN_DEPLOY_SCALAR(type, field, flag, default, category, help)                     \
  Option<type> field{*this, flag, llvm::cl::desc(help), llvm::cl::init(default)};
#define KILN_DEPLOY_LIST(field, flag, category, help)                                      \
  ListOption<std::string> field{*this, flag, llvm::cl::desc(help)};
#include "kiln/Transforms/DeployOptions.def"

  kiln::DeployOptions toDeployOptions() const {
    kiln::DeployOptions options;
#define KILN_DEPLOY_STRING(field, flag, category, help) options.field = field;
#define KILN_DEPLOY_COUNT(field, flag, category, help)                                     \
  if (field)                                                                               \
    options.field = field;
#define KILN_DEPLOY_SCALAR(type, field, flag, default, category, help) options.field = field;
#define KILN_DEPLOY_LIST(field, flag, category, help)                                      \
  options.field.assign(field.begin(), field.end());
#include "kiln/Transforms/DeployOptions.def"
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
