//===- DraftModel.cpp - merge a draft model into its target's module ------===//
//
// A two-model setup (`--spec draft:N --draft-model X.json`) merges the draft model
// into the target's module for planning and reporting: its caches share the GPU with
// the target's, its layers are draft layers, its weights count against the budget.
// The draft model is compiled to its own shared object for running (it has its own
// step); the merged module is not an executable of both.
//
// Merging renames what would clash: the draft's `kiln.weight`s get the prefix
// "draft." (their `kiln.weight_ref`s follow), its functions become `draft_<name>`,
// and its model function loses `kiln.entry` (the target's `@forward` stays the one
// entry of the module).
//
//===----------------------------------------------------------------------===//
#include "kiln/Import/HFConfig.h"

#include "kiln/Dialect/Kiln/Kiln.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringMap.h"

using namespace mlir;

LogicalResult kiln::attachDraftModel(ModuleOp target, OwningOpRef<ModuleOp> draft) {
  MLIRContext *ctx = target.getContext();
  // Draft layers follow the target's layers, so every (layer, kind) names one resource.
  int64_t firstLayer = 0;
  target.walk([&](ModelOpInterface op) {
    firstLayer = std::max(firstLayer, op.getLayerIndex() + 1);
  });
  Builder builder(ctx);
  auto draftKind = DraftKindAttr::get(ctx, DraftKind::draft_model);
  WalkResult result = draft->walk([&](ModelOpInterface op) {
    if (op->hasAttr("draft")) {
      op->emitError() << "the draft model already has draft layers (MTP/Eagle3); a "
                         "two-model setup drafts with the whole draft model";
      return WalkResult::interrupt();
    }
    op->setAttr("layer", builder.getI64IntegerAttr(op.getLayerIndex() + firstLayer));
    op->setAttr("draft", draftKind);
    return WalkResult::advance();
  });
  if (result.wasInterrupted())
    return failure();
  // Diagnostics name the draft's module paths as "draft.model.layers.3...".
  draft->walk([&](Operation *op) {
    if (auto name = dyn_cast<NameLoc>(op->getLoc()))
      op->setLoc(NameLoc::get(StringAttr::get(ctx, "draft." + name.getName().getValue()),
                              name.getChildLoc()));
  });

  // Names first, so that a clash leaves the target untouched.
  SmallVector<func::FuncOp> functions(draft->getOps<func::FuncOp>());
  for (func::FuncOp fn : functions) {
    std::string name = ("draft_" + fn.getSymName()).str();
    if (target.lookupSymbol(name))
      return fn.emitError() << "symbol '" << name << "' already exists in the target model";
  }
  // Weights: "draft." + the Hugging Face name, after the target's weights.
  llvm::StringMap<std::string> renamed;
  SmallVector<WeightOp> weights(draft->getOps<WeightOp>());
  for (WeightOp weight : weights) {
    std::string name = ("draft." + weight.getSymName()).str();
    if (target.lookupSymbol(name))
      return weight.emitError() << "symbol '" << name << "' already exists in the target model";
    renamed[weight.getSymName()] = name;
  }
  WalkResult refs = draft->walk([&](WeightRefOp ref) {
    auto it = renamed.find(ref.getWeight());
    if (it == renamed.end()) {
      ref.emitError() << "'" << ref.getWeight() << "' does not name a kiln.weight of the "
                      << "draft model";
      return WalkResult::interrupt();
    }
    ref.setWeightAttr(FlatSymbolRefAttr::get(ctx, it->second));
    return WalkResult::advance();
  });
  if (refs.wasInterrupted())
    return failure();
  Block *body = target.getBody();
  Operation *insertAfter = nullptr;
  for (WeightOp weight : target.getOps<WeightOp>())
    insertAfter = weight;
  for (WeightOp weight : weights) {
    weight->remove();
    weight.setSymName(renamed[weight.getSymName()]);
    if (insertAfter)
      body->getOperations().insertAfter(Block::iterator(insertAfter), weight);
    else
      body->push_front(weight);
    insertAfter = weight;
  }

  for (func::FuncOp fn : functions) {
    fn->remove();
    fn.setSymName(("draft_" + fn.getSymName()).str());
    fn->removeAttr(KilnDialect::kEntryAttrName);
    body->push_back(fn);
  }

  // Both models' weights share the GPU.
  auto targetModel = target->getAttrOfType<ModelAttr>(KilnDialect::kModelAttrName);
  auto draftModel = (*draft)->getAttrOfType<ModelAttr>(KilnDialect::kModelAttrName);
  if (targetModel && draftModel)
    target->setAttr(KilnDialect::kModelAttrName,
                    ModelAttr::get(ctx, targetModel.getName(), targetModel.getModelType(),
                                   targetModel.getNumLayers(), targetModel.getDtype(),
                                   targetModel.getWeightBytes() + draftModel.getWeightBytes(),
                                   targetModel.getTpRanks()));
  return success();
}
