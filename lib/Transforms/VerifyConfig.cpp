//===- VerifyConfig.cpp - kiln-verify-config ------------------------------===//
#include "PassDetail.h"
#include "kiln/Registry/KernelRegistry.h"
#include "kiln/Transforms/Passes.h"

namespace kiln {
#define GEN_PASS_DEF_KILNVERIFYCONFIG
#include "kiln/Transforms/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {
struct VerifyConfigPass : public kiln::impl::KilnVerifyConfigBase<VerifyConfigPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    ModuleConfig config = getModuleConfig(module);
    if (failed(checkSpeculativeResources(module, config)) ||
        failed(checkSpec(module, config)) || failed(checkTensorParallelRanks(module, config)))
      signalPassFailure();
  }

  /// A per-rank graph (imported for N tensor-parallel ranks) runs on exactly N ranks.
  LogicalResult checkTensorParallelRanks(ModuleOp module, const ModuleConfig &config) {
    if (!config.model || !config.runtime || config.model.getTpRanks() <= 1 ||
        config.model.getTpRanks() == config.runtime.getTp())
      return success();
    return module.emitError() << "the graph was imported for " << config.model.getTpRanks()
                              << " tensor-parallel ranks (one rank's heads and projections) "
                                 "but kiln.runtime has tp = "
                              << config.runtime.getTp() << "; deploy it with tp = "
                              << config.model.getTpRanks() << " or import again";
  }

  /// Speculative-only resources and replay buffers exist only with a spec config:
  /// without one they are the unbound allocations that once ran a 44 GiB L40S out of
  /// memory.
  LogicalResult checkSpeculativeResources(ModuleOp module, const ModuleConfig &config) {
    if (config.spec)
      return success();
    WalkResult result = module.walk([&](CacheResourceInterface resource) {
      if (!resource.isSpeculativeOnly())
        return WalkResult::advance();
      ResourceKind kind = resource.getResourceKind();
      bool replay = kind == ResourceKind::replay_x || kind == ResourceKind::replay_b ||
                    kind == ResourceKind::replay_dt;
      InFlightDiagnostic diag = resource->emitError();
      if (replay)
        diag << "SSM replay mode requires speculation: " << describeResource(resource)
             << " is a replay buffer but the module has no 'kiln.spec'; add "
                "#kiln.spec<..., ssm = replay> or run kiln-drop-speculative-resources";
      else
        diag << "speculative-only " << describeResource(resource)
             << " without 'kiln.spec': speculation is off, so nothing would bind it; run "
                "kiln-drop-speculative-resources or add a #kiln.spec";
      return WalkResult::interrupt();
    });
    return failure(result.wasInterrupted());
  }

  LogicalResult checkSpec(ModuleOp module, const ModuleConfig &config) {
    SpecAttr spec = config.spec;
    if (!spec)
      return success();
    if (spec.getSsm() == SsmSpecMode::replay && config.target && config.target.getSm() < 80)
      return module.emitError() << "kiln.spec ssm = replay needs sm_80 or newer; target '"
                                << config.target.getName() << "' is sm_"
                                << config.target.getSm() << "; use ssm = rewind";
    if (spec.isOneModel()) {
      DraftKind wanted =
          spec.getMode() == SpecMode::mtp ? DraftKind::mtp : DraftKind::eagle3;
      bool found = false;
      module.walk([&](Operation *op) {
        std::optional<DraftKind> draft;
        if (auto model = dyn_cast<ModelOpInterface>(op))
          draft = model.getDraftKind();
        else if (auto cached = dyn_cast<CachedOpInterface>(op))
          draft = cached.getDraftKind();
        found |= draft == wanted;
      });
      if (!found)
        return module.emitError()
               << "kiln.spec mode = " << stringifySpecMode(spec.getMode())
               << " is one-model speculation and needs "
               << (wanted == DraftKind::mtp
                       ? "MTP draft layers (num_nextn_predict_layers > 0)"
                       : "an Eagle3 head layer")
               << ", but the model has none; use mode = draft_target or ngram, or a "
                  "model that has them";
    }
    unsigned maxQueryLen = KernelRegistry::global().maxQueryLen(OpFamily::attention);
    if (spec.getMaxDraftLen() >= maxQueryLen) // never max_draft_len + 1: it could wrap
      return module.emitError() << "kiln.spec max_draft_len = " << spec.getMaxDraftLen()
                                << " exceeds " << maxQueryLen - 1
                                << ", the most draft tokens Kiln's decode kernels verify "
                                   "in one step (q_len <= "
                                << maxQueryLen << ")";
    return success();
  }
};
} // namespace
