//===- DraftModel.cpp - merge a draft model into its target's module ------===//
#include "kiln/Import/HFConfig.h"

#include "kiln/Dialect/Kiln.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

using namespace mlir;

LogicalResult kiln::attachDraftModel(ModuleOp target, OwningOpRef<ModuleOp> draft) {
  // Draft layers follow the target's layers, so every (layer, kind) names one resource.
  int64_t firstLayer = 0;
  target.walk([&](ModelOpInterface op) {
    firstLayer = std::max(firstLayer, op.getLayerIndex() + 1);
  });
  Builder builder(target.getContext());
  auto draftKind = DraftKindAttr::get(target.getContext(), DraftKind::draft_model);
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

  SmallVector<func::FuncOp> functions(draft->getOps<func::FuncOp>());
  for (func::FuncOp fn : functions) {
    fn->remove();
    fn.setSymName(("draft_" + fn.getSymName()).str());
    if (target.lookupSymbol(fn.getSymName()))
      return fn.emitError() << "symbol '" << fn.getSymName()
                            << "' already exists in the target model";
    target.getBody()->push_back(fn);
  }

  // Both models' weights share the GPU.
  auto targetModel = target->getAttrOfType<ModelAttr>(KilnDialect::kModelAttrName);
  auto draftModel = (*draft)->getAttrOfType<ModelAttr>(KilnDialect::kModelAttrName);
  if (targetModel && draftModel)
    target->setAttr(KilnDialect::kModelAttrName,
                    ModelAttr::get(target.getContext(), targetModel.getName(),
                                   targetModel.getModelType(), targetModel.getNumLayers(),
                                   targetModel.getDtype(),
                                   targetModel.getWeightBytes() + draftModel.getWeightBytes()));
  return success();
}
