//===- SelectKernels.cpp - kiln-select-kernels ----------------------------===//
//
// Every decision comes from the kernel registry's declared requirements: e.g. MLA
// decode stays single-token on sm_120 because no multi-token MLA variant fits in
// its 99 KiB of shared memory, while GQA keeps multi-token decode there.
//
//===----------------------------------------------------------------------===//
#include "PassDetail.h"
#include "kiln/Registry/KernelRegistry.h"
#include "kiln/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringSet.h"

namespace kiln {
#define GEN_PASS_DEF_KILNSELECTKERNELS
#include "kiln/Transforms/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {
/// The registry query of one cached op, phase aside: what the op says it needs.
KernelQuery describeOp(CachedOpInterface op, const ModuleConfig &config) {
  KernelShape shape = op.getKernelShape(config.runtime);
  KernelQuery query;
  query.family = op.getOpFamily();
  query.headDim = shape.headDim;
  query.dtype = shape.dtype;
  query.pageSize = shape.pageSize;
  query.groupSize = shape.groupSize;
  query.numHeads = shape.numHeads;
  query.needsIntermediates = shape.needsIntermediates;
  query.needsReplay = shape.needsReplay;
  return query;
}

/// Tokens per sequence a decode step of `op` verifies: 1 + drafts for the target
/// model's layers under any speculation, and for draft layers inside the model's entry
/// (an MTP module run after the target on the step's tokens, docs/mtp.md); other draft
/// layers decode one token at a time.
unsigned decodeQueryLen(CachedOpInterface op, SpecAttr spec) {
  if (!spec)
    return 1;
  auto fn = op->getParentOfType<func::FuncOp>();
  const bool inStep = fn && fn->hasAttr(KilnDialect::kEntryAttrName);
  if (op.getDraftKind() && !inStep)
    return 1;
  return spec.getTokensPerStep();
}

struct SelectKernelsPass : public kiln::impl::KilnSelectKernelsBase<SelectKernelsPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    ModuleConfig config = getModuleConfig(module);
    if (!config.target) {
      (void)emitMissingTarget(module, "kiln-select-kernels");
      return signalPassFailure();
    }
    if (!config.runtime) {
      (void)emitMissingRuntime(module, "kiln-select-kernels");
      return signalPassFailure();
    }
    if (failed(parseOverrides(module)))
      return signalPassFailure();
    WalkResult result = module.walk([&](CachedOpInterface op) {
      return failed(select(op, config)) ? WalkResult::interrupt() : WalkResult::advance();
    });
    if (result.wasInterrupted())
      signalPassFailure();
  }

  /// family name -> forced variant.
  llvm::StringMap<const KernelVariant *> overrides;

  LogicalResult parseOverrides(ModuleOp module) {
    const KernelRegistry &registry = KernelRegistry::global();
    for (const std::string &entry : force) {
      StringRef text(entry), family, name;
      std::tie(family, name) = text.split('=');
      if (name.empty())
        std::swap(family, name);
      const KernelVariant *variant = registry.lookup(name);
      if (!variant)
        return module.emitError() << "kiln-select-kernels: forced kernel '" << name
                                  << "' is not in the kernel registry";
      StringRef variantFamily = stringifyOpFamily(variant->family);
      if (!family.empty() && family != variantFamily)
        return module.emitError() << "kiln-select-kernels: forced kernel '" << name
                                  << "' serves " << variantFamily << ", not " << family;
      overrides[(variantFamily + "." + stringifyPhase(variant->phase)).str()] = variant;
    }
    return success();
  }

  LogicalResult select(CachedOpInterface op, const ModuleConfig &config) {
    // An empty speculative KV slot: a draft layer with speculation off never runs.
    if (op.getDraftKind() && llvm::all_of(op.getCacheSlots(), [](const CacheSlot &slot) {
          return !slot.value;
        }))
      return success();
    KernelQuery query = describeOp(op, config);
    explained.clear();
    Builder builder(op->getContext());
    SpecDecMode mode = SpecDecMode::single_token;

    // Decode: multi-token when a variant verifies every draft token in one step,
    // otherwise single-token with the drafts through the context path.
    query.phase = Phase::decode;
    query.queryLen = decodeQueryLen(op, config.spec);
    const KernelVariant *decode = choose(op, query, config, /*required=*/query.queryLen == 1);
    if (!decode && query.queryLen == 1)
      return failure();
    if (!decode) {
      query.queryLen = 1;
      decode = choose(op, query, config, /*required=*/true);
      if (!decode)
        return failure();
      mode = SpecDecMode::extend_context;
    } else if (query.queryLen > 1) {
      mode = SpecDecMode::multi_token;
    }

    query.phase = Phase::prefill;
    query.queryLen = 1;
    query.needsIntermediates = query.needsReplay = false;
    const KernelVariant *prefill = choose(op, query, config, /*required=*/true);
    if (!prefill)
      return failure();

    const bool attentionLike =
        op.getOpFamily() == OpFamily::attention || op.getOpFamily() == OpFamily::mla;
    op.setChosenKernels(decode->name, prefill->name,
                        attentionLike ? std::optional<SpecDecMode>(mode) : std::nullopt);
    numSelected += 2;
    if (attentionLike) {
      numMultiToken += mode == SpecDecMode::multi_token;
      numExtendContext += mode == SpecDecMode::extend_context;
    }
    return success();
  }

  /// The best variant for `query`, or null. Remarks explain rejections; when
  /// `required`, no fitting variant is an error listing every reason.
  /// Remarks already emitted for the current op (the fallback query repeats some).
  llvm::StringSet<> explained;

  const KernelVariant *choose(CachedOpInterface op, const KernelQuery &query,
                              const ModuleConfig &config, bool required) {
    const KernelRegistry &registry = KernelRegistry::global();
    StringRef family = stringifyOpFamily(query.family);
    StringRef phase = stringifyPhase(query.phase);
    auto forced = overrides.find((family + "." + phase).str());
    if (forced != overrides.end()) {
      std::string reason = KernelRegistry::whyRejected(*forced->second, query, config.target);
      if (reason.empty())
        return forced->second;
      if (required)
        op->emitError() << "forced kernel '" << forced->second->name << "' cannot run "
                        << family << " layer " << op.getLayerIndex() << " on '"
                        << config.target.getName() << "': " << reason;
      return nullptr;
    }

    std::vector<std::pair<const KernelVariant *, std::string>> rejections;
    std::vector<const KernelVariant *> fitting =
        registry.candidates(query, config.target, &rejections);
    if (emitRemarks)
      for (auto &[variant, reason] : rejections) {
        std::string text = (phase + " kernel '" + variant->name + "' rejected for " +
                            family + " layer " + llvm::Twine(op.getLayerIndex()) + ": " +
                            reason)
                               .str();
        if (explained.insert(text).second)
          op->emitRemark() << text;
      }
    if (!fitting.empty()) {
      const KernelVariant *best = fitting.front();
      if (!best->implemented && emitRemarks)
        op->emitRemark() << phase << " kernel '" << best->name << "' for " << family
                          << " layer " << op.getLayerIndex()
                          << " is planned but not implemented yet; lowering will reject it";
      return best;
    }
    if (required) {
      InFlightDiagnostic diag = op->emitError()
                                << "no " << phase << " kernel for " << family << " layer "
                                << op.getLayerIndex() << " on '" << config.target.getName()
                                << "' (sm_" << config.target.getSm() << ")";
      for (auto &[variant, reason] : rejections)
        diag << "; " << variant->name << ": " << reason;
    }
    return nullptr;
  }
};
} // namespace
