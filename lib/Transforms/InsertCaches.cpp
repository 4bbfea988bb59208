//===- InsertCaches.cpp - kiln-insert-caches ------------------------------===//
#include "PassDetail.h"
#include "kiln/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace kiln {
#define GEN_PASS_DEF_KILNINSERTCACHES
#include "kiln/Transforms/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {
struct InsertCachesPass : public kiln::impl::KilnInsertCachesBase<InsertCachesPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    ModuleConfig config = getModuleConfig(module);
    if (!config.runtime) {
      (void)emitMissingRuntime(module, "kiln-insert-caches");
      return signalPassFailure();
    }
    SmallVector<ModelOpInterface> modelOps;
    module.walk([&](ModelOpInterface op) { modelOps.push_back(op); });
    for (ModelOpInterface op : modelOps)
      rewriteToCachedForm(op, config);
    lastResource.clear();
  }

  /// Per entry block, the last resource declared so far: new ones go after it, which
  /// keeps them in layer order without rescanning the block (linear in the ops).
  DenseMap<Block *, Operation *> lastResource;

  /// Declares the op's resources at the top of its block's region and swaps the op
  /// for its cached form.
  void rewriteToCachedForm(ModelOpInterface op, const ModuleConfig &config) {
    OpBuilder builder(op->getContext());
    Block &entry = op->getParentRegion()->front();
    if (Operation *last = lastResource.lookup(&entry)) {
      builder.setInsertionPointAfter(last);
    } else {
      // Keep resources in layer order: after any the input already declares.
      builder.setInsertionPoint(&entry, entry.begin());
      while (builder.getInsertionPoint() != entry.end() &&
             isa<CacheResourceOp>(*builder.getInsertionPoint()))
        builder.setInsertionPointAfter(&*builder.getInsertionPoint());
    }

    SmallVector<Value> resources;
    for (const ResourceRequest &request :
         op.getResourceRequests(config.spec, config.runtime)) {
      bool speculative = isSpeculativeOnlyKind(request.kind);
      auto resource = CacheResourceOp::create(
          builder, op.getLoc(), CacheType::get(op->getContext(), request.kind), op.getLayerIndex(),
          request.unit, request.elementType,
          request.window ? builder.getI64IntegerAttr(*request.window) : IntegerAttr(),
          request.shard ? builder.getI64IntegerAttr(*request.shard) : IntegerAttr(), speculative,
          /*unmanaged=*/false, StringAttr(), IntegerAttr(), IntegerAttr(),
          /*stride=*/IntegerAttr());
      resources.push_back(resource);
      lastResource[&entry] = resource;
      ++numResources;
      if (speculative)
        ++numSpeculative;
    }
    builder.setInsertionPoint(op);
    Operation *cached = op.buildCachedForm(builder, resources);
    op->replaceAllUsesWith(cached);
    op->erase();
    ++numOpsCached;
  }
};
} // namespace
