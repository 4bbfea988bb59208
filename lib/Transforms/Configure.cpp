//===- Configure.cpp - kiln-configure: module config from options ---------===//
#include "PassDetail.h"
#include "kiln/Transforms/Passes.h"

#include "mlir/IR/Builders.h"

namespace kiln {
#define GEN_PASS_DEF_KILNCONFIGURE
#include "kiln/Transforms/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {
std::optional<Type> parseDtype(MLIRContext *context, StringRef name) {
  Builder builder(context);
  if (name == "bf16")
    return builder.getBF16Type();
  if (name == "f16" || name == "fp16")
    return builder.getF16Type();
  if (name == "f32" || name == "fp32")
    return builder.getF32Type();
  if (name == "fp8" || name == "f8E4M3FN")
    return Float8E4M3FNType::get(context);
  return std::nullopt;
}

struct ConfigurePass : public kiln::impl::KilnConfigureBase<ConfigurePass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (failed(applyTarget(module)) || failed(applyRuntime(module)) || failed(applySpec(module)) ||
        failed(applyRingWindow(module)))
      signalPassFailure();
  }

  /// `kv-ring-window`: the ring's bound is the step size, so max_step_tokens becomes
  /// explicit (its default depends on the speculation, set just before).
  LogicalResult applyRingWindow(ModuleOp module) {
    if (kvRingWindow == 0)
      return success();
    ModuleConfig config = getModuleConfig(module);
    RuntimeAttr r = config.runtime;
    const auto stepTokens = static_cast<unsigned>(getStepLimits(config).maxStepTokens);
    auto attr = RuntimeAttr::getChecked(
        [&] { return module.emitError(); }, module.getContext(), r.getMaxBatch(), r.getMaxSeqLen(),
        r.getPageSize(), r.getKvDtype(), r.getTp(), r.getStateDtype(), stepTokens,
        r.getCudaGraphs(), r.getCudaGraphBatches(), static_cast<unsigned>(kvRingWindow));
    if (!attr)
      return failure();
    module->setAttr(KilnDialect::kRuntimeAttrName, attr);
    return success();
  }

  LogicalResult applyTarget(ModuleOp module) {
    if (target.empty())
      return success();
    TargetAttr attr = TargetAttr::getPreset(module.getContext(), target);
    if (!attr) {
      std::string presets;
      for (const TargetPreset &preset : targetPresets())
        presets += (presets.empty() ? "" : ", ") + preset.name.str();
      return module.emitError() << "unknown target '" << target << "'; expected one of "
                                << presets << ", or sm_XY with XY a supported SM";
    }
    module->setAttr(KilnDialect::kTargetAttrName, attr);
    return success();
  }

  LogicalResult applyRuntime(ModuleOp module) {
    RuntimeAttr old = getModuleConfig(module).runtime;
    MLIRContext *context = module.getContext();
    Type kv = old ? old.getKvDtype() : Builder(context).getBF16Type();
    if (!kvDtype.empty()) {
      std::optional<Type> parsed = parseDtype(context, kvDtype);
      if (!parsed)
        return module.emitError() << "unknown kv dtype '" << kvDtype
                                  << "'; expected bf16, f16, f32 or fp8";
      kv = *parsed;
    }
    auto pick = [](unsigned option, unsigned current) { return option ? option : current; };
    const int graphs = cudaGraphs;
    if (graphs < -1)
      return module.emitError() << "cuda-graphs = " << graphs
                                << " must be a count of step shapes (0: no CUDA graphs)";
    FailureOr<DenseI32ArrayAttr> batches =
        parseGraphBatches(module, old ? old.getCudaGraphBatches() : DenseI32ArrayAttr());
    if (failed(batches))
      return failure();
    auto attr = RuntimeAttr::getChecked(
        [&] { return module.emitError(); }, context, pick(maxBatch, old ? old.getMaxBatch() : 64),
        pick(maxSeqLen, old ? old.getMaxSeqLen() : 8192),
        pick(pageSize, old ? old.getPageSize() : 64), kv, pick(tp, old ? old.getTp() : 1),
        old ? old.getStateDtype() : Type(), pick(maxStepTokens, old ? old.getMaxStepTokens() : 0),
        graphs >= 0 ? static_cast<unsigned>(graphs)
                    : (old ? old.getCudaGraphs() : kDefaultCudaGraphs),
        *batches, old ? old.getKvRingWindow() : 0u);
    if (!attr)
      return failure();
    module->setAttr(KilnDialect::kRuntimeAttrName, attr);
    return success();
  }

  /// `cuda-graph-batches`: "" keeps `current`, "all" drops the list, else ascending
  /// batch sizes separated by commas (the attribute's verifier checks their range).
  FailureOr<DenseI32ArrayAttr> parseGraphBatches(ModuleOp module, DenseI32ArrayAttr current) {
    if (cudaGraphBatches.empty())
      return current;
    if (cudaGraphBatches == "all")
      return DenseI32ArrayAttr();
    SmallVector<int32_t> batches;
    SmallVector<StringRef> items;
    StringRef(cudaGraphBatches).split(items, ',');
    for (StringRef item : items) {
      int32_t batch = 0;
      if (item.trim().getAsInteger(10, batch))
        return module.emitError() << "cuda-graph-batches: '" << item.trim()
                                  << "' is not a batch size (expected e.g. 1,2,4,8 or all)";
      batches.push_back(batch);
    }
    return DenseI32ArrayAttr::get(module.getContext(), batches);
  }

  LogicalResult applySpec(ModuleOp module) {
    SpecAttr old = getModuleConfig(module).spec;
    if (spec.empty() && ssmMode.empty())
      return success();
    std::optional<SsmSpecMode> ssm =
        ssmMode.empty() ? std::optional<SsmSpecMode>(old ? old.getSsm() : SsmSpecMode::rewind)
                        : symbolizeSsmSpecMode(ssmMode);
    if (!ssm)
      return module.emitError() << "unknown SSM spec mode '" << ssmMode
                                << "'; expected rewind or replay";
    if (spec == "none" || (spec.empty() && !old)) {
      if (*ssm == SsmSpecMode::replay)
        return module.emitError() << "SSM replay mode requires speculation: ssm-mode = "
                                     "replay needs a spec setup (e.g. spec = mtp:3)";
      module->removeAttr(KilnDialect::kSpecAttrName);
      return success();
    }
    SpecMode mode = old ? old.getMode() : SpecMode::mtp;
    unsigned drafts = old ? old.getMaxDraftLen() : 1;
    if (!spec.empty()) {
      auto [modeName, count] = StringRef(spec).split(':');
      std::optional<SpecMode> parsedMode =
          modeName == "draft" ? std::optional<SpecMode>(SpecMode::draft_target)
                              : symbolizeSpecMode(modeName);
      if (!parsedMode || count.empty() || count.getAsInteger(10, drafts))
        return module.emitError() << "bad spec '" << spec
                                  << "'; expected none, mtp:N, eagle3:N, draft:N or ngram:N";
      mode = *parsedMode;
    }
    auto attr = SpecAttr::getChecked([&] { return module.emitError(); },
                                     module.getContext(), mode, drafts, *ssm);
    if (!attr)
      return failure();
    module->setAttr(KilnDialect::kSpecAttrName, attr);
    return success();
  }
};
} // namespace
