//===- DropSpeculativeResources.cpp - kiln-drop-speculative-resources -----===//
#include "PassDetail.h"
#include "kiln/Transforms/Passes.h"

namespace kiln {
#define GEN_PASS_DEF_KILNDROPSPECULATIVERESOURCES
#include "kiln/Transforms/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {
struct DropSpeculativeResourcesPass
    : public kiln::impl::KilnDropSpeculativeResourcesBase<DropSpeculativeResourcesPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    ModuleConfig config = getModuleConfig(module);
    if (config.spec)
      return; // Speculation is on: every resource is wanted.

    SmallVector<CacheResourceInterface> speculative;
    module.walk([&](CacheResourceInterface resource) {
      if (resource.isSpeculativeOnly())
        speculative.push_back(resource);
    });
    for (CacheResourceInterface resource : speculative)
      if (failed(drop(resource, config.runtime)))
        return signalPassFailure();
  }

  LogicalResult drop(CacheResourceInterface resource, RuntimeAttr runtime) {
    Operation *op = resource.getOperation();
    for (Value result : op->getResults())
      for (Operation *user : llvm::make_early_inc_range(result.getUsers())) {
        auto cached = dyn_cast<CachedOpInterface>(user);
        if (!cached)
          return user->emitError()
                 << "cannot detach speculative-only " << describeResource(resource)
                 << " from '" << user->getName()
                 << "', which has no cache slots (CachedOpInterface)";
        cached.detachResource(result);
      }
    std::optional<uint64_t> bytes =
        runtime ? computeResourceBytes(resource, runtime) : std::nullopt;
    if (emitRemarks)
      op->emitRemark() << "dropped speculative-only " << describeResource(resource) << " ("
                       << (bytes ? formatBytes(*bytes)
                                 : runtime ? "size overflows 63 bits" : "size unknown")
                       << "): speculation is off";
    ++numDropped;
    bytesDropped += bytes.value_or(0);
    op->erase();
    return success();
  }
};
} // namespace
