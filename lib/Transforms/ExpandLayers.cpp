//===- ExpandLayers.cpp - kiln-expand-layers ------------------------------===//
//
// A layer loop (`scf.for` marked `kiln.layers`, docs/overview.md "Rolled layers") is
// one decoder layer the importer and the deploy passes handle once. This pass makes
// the module an unrolled import would have become under the same passes: the body
// copied once a layer, the weight families as their members, the body's resources
// declared with the function's. Everything it changes per layer is named by the
// layer index: weight names, layer attributes (through the interfaces), module-path
// locations and the planned offsets (`offset + i * stride`).
//
//===----------------------------------------------------------------------===//
#include "LayerLoops.h"
#include "PassDetail.h"
#include "kiln/Dialect/Kiln/LayerLoop.h"
#include "kiln/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/FunctionInterfaces.h"

namespace kiln {
#define GEN_PASS_DEF_KILNEXPANDLAYERS
#include "kiln/Transforms/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {

/// The layer of a weight member's index once a layer's copy has mapped the loop's
/// index to a constant: a constant, or a sum of them (a rotated loop's next norm).
std::optional<int64_t> constantLayer(Value index) {
  if (std::optional<int64_t> constant = getConstantIntValue(index))
    return constant;
  if (auto sum = index.getDefiningOp<arith::AddIOp>()) {
    std::optional<int64_t> lhs = constantLayer(sum.getLhs()), rhs = constantLayer(sum.getRhs());
    if (lhs && rhs)
      return *lhs + *rhs;
  }
  return std::nullopt;
}

struct ExpandLayersPass : public kiln::impl::KilnExpandLayersBase<ExpandLayersPass> {
  using KilnExpandLayersBase::KilnExpandLayersBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    // Layer loops sit at the top of a function (the importer puts them there): looking
    // only there keeps an unrolled module's no-op run from walking every op.
    SmallVector<scf::ForOp> loops;
    for (auto fn : module.getOps<FunctionOpInterface>())
      llvm::append_range(loops, topLevelLayerLoops(fn));
    // The families are shared by the module's loops: all of them stay, or all expand.
    if (unsupportedOnly &&
        llvm::all_of(loops, [&](scf::ForOp loop) { return succeeded(checkRolledLowering(loop)); }))
      return;
    for (scf::ForOp loop : loops)
      if (failed(expandLoop(loop)))
        return signalPassFailure();
    if (failed(replaceConstantMembers(module)))
      return signalPassFailure();
    expandFamilies(module);
  }

  /// Whether the lowering can take `loop` as a loop; a remark says why not.
  LogicalResult checkRolledLowering(scf::ForOp loop) {
    auto refuse = [&](Operation *at, const Twine &why) {
      if (emitRemarks)
        at->emitRemark() << "kiln-expand-layers: the layer loop is expanded: " << why;
      return failure();
    };
    if (!constantLayerRange(loop))
      return refuse(loop, "its bounds are not constants with step 1");
    for (Value carried : loop.getRegionIterArgs())
      if (!isa<RankedTensorType>(carried.getType()))
        return refuse(loop, "it carries a value that is not a ranked tensor");
    for (Operation &op : loop.getBody()->without_terminator()) {
      if (op.getNumRegions() != 0)
        return refuse(&op, "its body holds an op with regions");
      if (auto cached = dyn_cast<CachedOpInterface>(op); cached && !cached.hasPerLayerRuntimeCall())
        return refuse(&op, "the runtime call of this op does not take its layer and cache "
                           "offsets per layer (hasPerLayerRuntimeCall)");
    }
    if (fuseResidualNorm && normStraddlesBackEdge(loop) && !rotatableNorm(loop))
      return refuse(loop, "the residual add ending a layer and the next layer's norm fuse "
                          "across iterations in the unrolled step (kiln-fuse-residual-norm), "
                          "and kiln-rotate-layers cannot rotate the loop; the loop would "
                          "make other calls");
    return success();
  }

  LogicalResult expandLoop(scf::ForOp loop) {
    std::optional<std::pair<int64_t, int64_t>> layers = constantLayerRange(loop);
    if (!layers)
      return loop.emitError() << "kiln-expand-layers: a layer loop needs constant bounds "
                                 "and step 1";
    const auto [lower, upper] = *layers;
    LayerCopier copier(loop, /*after=*/false);
    Block *body = loop.getBody();
    Value index = loop.getInductionVar();
    SmallVector<Value> carried(loop.getInitArgs());
    for (int64_t layer = lower; layer < upper; ++layer) {
      copier.startLayer(layer - lower, layer);
      IRMapping mapping;
      for (auto [arg, value] : llvm::zip_equal(loop.getRegionIterArgs(), carried))
        mapping.map(arg, value);
      Value layerValue = arith::ConstantIndexOp::create(copier.builder(), loop.getLoc(), layer);
      mapping.map(index, layerValue);
      for (Operation &op : body->without_terminator())
        if (failed(copyOp(op, mapping, copier)))
          return failure();
      for (auto [i, value] : llvm::enumerate(body->getTerminator()->getOperands()))
        carried[i] = mapping.lookupOrDefault(value);
      if (layerValue.use_empty())
        layerValue.getDefiningOp()->erase();
      ++numLayers;
    }
    loop->replaceAllUsesWith(carried);
    Value upperValue = loop.getUpperBound(), stepValue = loop.getStep();
    loop.erase();
    for (Value bound : {upperValue, stepValue})
      if (Operation *def = bound.getDefiningOp(); def && def->use_empty())
        def->erase();
    ++numLoops;
    return success();
  }

  /// Copies `op` of the body for the copier's layer; a weight member becomes a
  /// `kiln.weight_ref` of the member its index names there.
  LogicalResult copyOp(Operation &op, IRMapping &mapping, LayerCopier &copier) {
    auto member = dyn_cast<WeightMemberOp>(op);
    if (!member) {
      copier.copy(op, mapping);
      return success();
    }
    std::optional<int64_t> layer = constantLayer(mapping.lookupOrDefault(member.getIndex()));
    if (!layer)
      return member.emitError() << "kiln-expand-layers: a weight member of a layer loop must "
                                   "be read at a layer the loop's index gives";
    Value ref = WeightRefOp::create(copier.builder(), copier.locations().get(member.getLoc()),
                                    member.getType(), substituteLayer(member.getFamily(), *layer));
    mapping.map(member.getResult(), ref);
    return success();
  }

  /// Members outside layer loops (a rotated loop's first norm and last layer) as
  /// `kiln.weight_ref`s of the member their constant index names.
  LogicalResult replaceConstantMembers(ModuleOp module) {
    SmallVector<WeightMemberOp> members;
    for (auto fn : module.getOps<FunctionOpInterface>())
      if (!fn.isExternal())
        llvm::append_range(members, fn.getFunctionBody().front().getOps<WeightMemberOp>());
    for (WeightMemberOp member : members) {
      std::optional<int64_t> layer = constantLayer(member.getIndex());
      if (!layer)
        return member.emitError() << "kiln-expand-layers: a weight member outside a layer "
                                     "loop must be read at a constant layer";
      OpBuilder builder(member);
      Value ref = WeightRefOp::create(builder, member.getLoc(), member.getType(),
                                      substituteLayer(member.getFamily(), *layer));
      member.getResult().replaceAllUsesWith(ref);
      member.erase();
    }
    return success();
  }

  /// Each run of consecutive families of one count becomes its members, member-major.
  void expandFamilies(ModuleOp module) {
    SmallVector<SmallVector<WeightFamilyOp>> runs;
    WeightFamilyOp previous;
    for (Operation &op : module.getBody()->getOperations()) {
      auto family = dyn_cast<WeightFamilyOp>(op);
      if (family && previous && previous->getNextNode() == family &&
          previous.getCount() == family.getCount())
        runs.back().push_back(family);
      else if (family)
        runs.push_back({family});
      previous = family;
    }
    for (SmallVector<WeightFamilyOp> &run : runs) {
      WeightFamilyOp head = run.front();
      OpBuilder builder(head);
      for (int64_t i = 0, count = static_cast<int64_t>(head.getCount()); i < count; ++i) {
        LayerLocations locations(module.getContext());
        locations.startLayer(i);
        for (WeightFamilyOp family : run)
          createMember(builder, family, i, locations);
      }
      for (WeightFamilyOp family : run)
        family.erase();
    }
  }

  void createMember(OpBuilder &builder, WeightFamilyOp family, int64_t i,
                    LayerLocations &locations) {
    IntegerAttr offset;
    if (family.getOffset() && family.getStride())
      offset = builder.getI64IntegerAttr(static_cast<int64_t>(
          *family.getOffset() + static_cast<uint64_t>(i) * *family.getStride()));
    WeightOp::create(builder, locations.get(family.getLoc()), family.getMemberName(i),
                     family.getType(), offset, family.getRowGroupsAttr(),
                     family.getCheckpointShapeAttr(), family.getTransposeCheckpoint(),
                     family.getMxfp4Checkpoint(), family.getShardAttr());
  }
};
} // namespace
