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
#include "PassDetail.h"
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
constexpr llvm::StringLiteral kHole = "{}";

/// `text` with its first `{}` replaced by `index` (unchanged without one).
std::string substitute(StringRef text, int64_t index) {
  size_t hole = text.find(kHole);
  if (hole == StringRef::npos)
    return text.str();
  return (text.take_front(hole) + Twine(index) + text.drop_front(hole + kHole.size())).str();
}

/// Locations of one layer's copies: a module path `model.layers.{}.x` names the layer.
class LayerLocations {
public:
  explicit LayerLocations(MLIRContext *ctx) : ctx(ctx) {}
  void startLayer(int64_t layer) {
    index = layer;
    cache.clear();
  }
  Location get(Location at) {
    auto name = dyn_cast<NameLoc>(at);
    if (!name || !name.getName().getValue().contains(kHole))
      return at;
    auto [it, fresh] = cache.try_emplace(at, at);
    if (fresh)
      it->second = NameLoc::get(StringAttr::get(ctx, substitute(name.getName().getValue(), index)),
                                name.getChildLoc());
    return it->second;
  }

private:
  MLIRContext *ctx;
  int64_t index = 0;
  DenseMap<Location, Location> cache;
};

/// Sets the layer of an op that has one (asked through the interfaces).
void moveToLayer(Operation *op, int64_t layer) {
  if (auto model = dyn_cast<ModelOpInterface>(op))
    model.setLayerIndex(layer);
  else if (auto cached = dyn_cast<CachedOpInterface>(op))
    cached.setLayerIndex(layer);
  else if (auto resource = dyn_cast<CacheResourceInterface>(op))
    resource.setLayerIndex(layer);
}

/// Where the function's resources end: new ones go there, in layer order.
Block::iterator endOfResources(Block &entry) {
  Block::iterator it = entry.begin();
  while (it != entry.end() && isa<CacheResourceInterface>(*it))
    ++it;
  return it;
}

struct ExpandLayersPass : public kiln::impl::KilnExpandLayersBase<ExpandLayersPass> {
  using KilnExpandLayersBase::KilnExpandLayersBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    // Layer loops sit at the top of a function (the importer puts them there): looking
    // only there keeps an unrolled module's no-op run from walking every op.
    SmallVector<scf::ForOp> loops;
    for (auto fn : module.getOps<FunctionOpInterface>()) {
      if (fn.isExternal())
        continue;
      for (Operation &op : fn.getFunctionBody().front())
        if (auto loop = dyn_cast<scf::ForOp>(op);
            loop && loop->hasAttr(KilnDialect::kLayersAttrName))
          loops.push_back(loop);
    }
    // The families are shared by the module's loops: all of them stay, or all expand.
    if (unsupportedOnly &&
        llvm::all_of(loops, [&](scf::ForOp loop) { return succeeded(checkRolledLowering(loop)); }))
      return;
    for (scf::ForOp loop : loops)
      if (failed(expandLoop(loop)))
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
    if (!getConstantIntValue(loop.getLowerBound()) || !getConstantIntValue(loop.getUpperBound()) ||
        getConstantIntValue(loop.getStep()) != 1)
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
    if (fuseResidualNorm)
      for (auto [arg, yielded] : llvm::zip_equal(loop.getRegionIterArgs(),
                                                 loop.getBody()->getTerminator()->getOperands())) {
        bool endsWithAdd = yielded.getDefiningOp<AddOp>() != nullptr;
        bool normalizedNext =
            llvm::any_of(arg.getUsers(), [](Operation *user) { return isa<RmsNormOp>(user); });
        if (endsWithAdd && normalizedNext)
          return refuse(loop, "the residual add ending a layer and the next layer's norm fuse "
                              "across iterations in the unrolled step (kiln-fuse-residual-norm); "
                              "the loop would make other calls");
      }
    return success();
  }

  LogicalResult expandLoop(scf::ForOp loop) {
    std::optional<int64_t> lower = getConstantIntValue(loop.getLowerBound());
    std::optional<int64_t> upper = getConstantIntValue(loop.getUpperBound());
    std::optional<int64_t> step = getConstantIntValue(loop.getStep());
    if (!lower || !upper || step != 1)
      return loop.emitError() << "kiln-expand-layers: a layer loop needs constant bounds "
                                 "and step 1";
    Block &entry = loop->getParentRegion()->front();
    OpBuilder resourceBuilder(&entry, endOfResources(entry));
    OpBuilder builder(loop);
    LayerLocations locations(loop->getContext());
    Block *body = loop.getBody();
    Value index = loop.getInductionVar();
    SmallVector<Value> carried(loop.getInitArgs());
    for (int64_t layer = *lower; layer < *upper; ++layer) {
      locations.startLayer(layer);
      IRMapping mapping;
      for (auto [arg, value] : llvm::zip_equal(loop.getRegionIterArgs(), carried))
        mapping.map(arg, value);
      if (llvm::any_of(index.getUsers(),
                       [](Operation *user) { return !isa<WeightMemberOp>(user); }))
        mapping.map(index, arith::ConstantIndexOp::create(builder, loop.getLoc(), layer));
      for (Operation &op : body->without_terminator()) {
        if (failed(copyOp(op, layer - *lower, layer, index, mapping, builder, resourceBuilder,
                          locations)))
          return failure();
      }
      for (auto [i, value] : llvm::enumerate(body->getTerminator()->getOperands()))
        carried[i] = mapping.lookupOrDefault(value);
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

  /// Copies `op` of the body for `layer` (the `ordinal`-th of the loop).
  LogicalResult copyOp(Operation &op, int64_t ordinal, int64_t layer, Value index,
                       IRMapping &mapping, OpBuilder &builder, OpBuilder &resourceBuilder,
                       LayerLocations &locations) {
    if (auto member = dyn_cast<WeightMemberOp>(op)) {
      if (member.getIndex() != index)
        return member.emitError() << "kiln-expand-layers: a weight member of a layer loop "
                                     "must be read at the loop's layer";
      Value ref = WeightRefOp::create(builder, locations.get(member.getLoc()), member.getType(),
                                      substitute(member.getFamily(), layer));
      mapping.map(member.getResult(), ref);
      return success();
    }
    bool resource = isa<CacheResourceInterface>(op);
    Operation *copy = (resource ? resourceBuilder : builder).clone(op, mapping);
    copy->walk([&](Operation *nested) { nested->setLoc(locations.get(nested->getLoc())); });
    moveToLayer(copy, layer);
    if (auto planned = dyn_cast<CacheResourceOp>(copy)) {
      if (std::optional<uint64_t> stride = planned.getStride()) {
        if (std::optional<uint64_t> offset = planned.getOffset())
          planned.setOffset(*offset + static_cast<uint64_t>(ordinal) * *stride);
        planned.removeStrideAttr();
      }
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
      for (int64_t i = 0; i < head.getCount(); ++i) {
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
