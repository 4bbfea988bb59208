//===- Pipelines.cpp - the lowering pipeline and tool registration --------===//
#include "kiln/Driver/Pipelines.h"
#include "kiln/Conversion/KilnToRuntime.h"
#include "kiln/Dialect/Kiln/KilnBufferization.h"
#include "kiln/InitAll.h"
#include "kiln/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Bufferization/Transforms/FuncBufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Bufferization/Transforms/Passes.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Index/IR/IndexDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/SCF/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Tensor/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/UB/IR/UBOps.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

void kiln::buildActivationPlanningPipeline(OpPassManager &pm, const LoweringOptions &options) {
  // Layer loops of a rolled import stay loops through bufferization, the activation
  // plan and the lowering; those the lowering cannot take are copied once a layer
  // here (with a remark why), and all of them with `expandLayers`.
  KilnExpandLayersOptions expand;
  expand.unsupportedOnly = !options.expandLayers;
  expand.fuseResidualNorm = options.fuseResidualNorm;
  pm.addPass(createKilnExpandLayers(expand));
  if (options.fuseResidualNorm) {
    // A loop's layer boundary sits on its back edge; rotated, it is inside the body,
    // where the add and the next norm fuse as in the unrolled step.
    pm.addPass(createKilnRotateLayers());
    pm.addPass(createKilnFuseResidualNorm());
  }
  bufferization::OneShotBufferizePassOptions bufferize;
  // Every Kiln op writes into a destination of its own (a fresh tensor.empty, or an
  // output the entry owns), so one-shot's read-after-write analysis finds no conflict
  // to resolve; it is also quadratic in the ops of one function (1.4 s at 1,024 layers,
  // 5.4 s at 2,048). copy-before-write skips it: a write to a tensor that is read later
  // would get a copy, and test/Transforms/lowering-copies.test checks that the whole
  // models have none.
  bufferize.copyBeforeWrite = true;
  bufferize.bufferizeFunctionBoundaries = true;
  bufferize.functionBoundaryTypeConversion = bufferization::LayoutMapOption::IdentityLayoutMap;
  pm.addPass(bufferization::createOneShotBufferizePass(bufferize));
  pm.addPass(createKilnBindEntry());
  // Folds memref.dim of allocations to their size operands, so every dynamic size
  // traces back to the step's inputs. The step is one block: region simplification
  // (dead-block and liveness sweeps over every op) would find nothing, at a third of
  // the pass's time.
  GreedyRewriteConfig folding;
  folding.setRegionSimplificationLevel(GreedySimplifyRegionLevel::Disabled);
  pm.addPass(createCanonicalizerPass(folding));
  // Before the plan, unlike kiln-pair-linears: the pair's launch reads both inputs while
  // it writes both outputs, which the plan must then keep apart.
  if (options.pairRopes)
    pm.addPass(createKilnPairRopes());
  // Before the plan too: the merged op keeps the projections' allocations as its gate
  // and up, so the plan places the same buffers, and it keeps its output apart from the
  // input the merged op reads while it writes.
  if (options.fusePairSwiglu)
    pm.addPass(createKilnFusePairSwiglu());
  KilnPlanActivationsOptions activations;
  activations.collectiveBytes = options.collectiveBytes;
  pm.addPass(createKilnPlanActivations(activations));
}

void kiln::buildBufferLoweringPipeline(OpPassManager &pm, const LoweringOptions &options) {
  buildActivationPlanningPipeline(pm, options);
  // After the plan, so the report (which stops at the plan) and the placements are the
  // unpaired module's.
  if (options.pairLinears)
    pm.addPass(createKilnPairLinears());
  pm.addPass(createConvertKilnToRuntimeCalls());
  // Every stage after this one is linear in the ops of the step; rolled, a step has
  // one copy of a layer whatever the number of layers (docs/overview.md).
  if (options.rollLayers)
    pm.addPass(createKilnRollLayers());
}

void kiln::buildLoweringPipeline(OpPassManager &pm, const LoweringOptions &options) {
  buildBufferLoweringPipeline(pm, options);
  pm.addPass(createConvertKilnToLLVM());
}

void kiln::registerAllDialects(DialectRegistry &registry) {
  registry.insert<KilnDialect, func::FuncDialect, arith::ArithDialect, math::MathDialect,
                  tensor::TensorDialect, memref::MemRefDialect,
                  bufferization::BufferizationDialect, cf::ControlFlowDialect,
                  index::IndexDialect, LLVM::LLVMDialect, ub::UBDialect, scf::SCFDialect>();
  kiln::registerBufferizableOpInterfaceExternalModels(registry);
  tensor::registerBufferizableOpInterfaceExternalModels(registry);
  arith::registerBufferizableOpInterfaceExternalModels(registry);
  // Layer loops (scf.for marked kiln.layers) carry the residual stream as a tensor.
  scf::registerBufferizableOpInterfaceExternalModels(registry);
  bufferization::func_ext::registerBufferizableOpInterfaceExternalModels(registry);
}

void kiln::registerAllPasses() {
  registerKilnPasses();
  registerKilnConversionPasses();
  registerDeployPipeline();
  bufferization::registerOneShotBufferizePass();
  registerCanonicalizerPass();
  PassPipelineRegistration<>(
      "kiln-lower",
      "Bufferize a deployed module, bind its entry point, plan its activations and "
      "lower it to runtime calls and the LLVM dialect",
      [](OpPassManager &pm) { buildLoweringPipeline(pm); });
}
