//===- LayerLoops.cpp - what the layer-loop passes share -------------------===//
#include "LayerLoops.h"
#include "kiln/Dialect/Kiln/LayerLoop.h"

#include "mlir/Interfaces/FunctionInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

using namespace mlir;
using namespace kiln;

namespace {
constexpr llvm::StringLiteral kHole = "{}";

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

/// The ops of `loop`'s body that `values` depend on, in program order; failure when
/// one of them has memory effects, holds a region, or reads a carried value other than
/// `carried`.
FailureOr<SmallVector<Operation *>> bodySlice(scf::ForOp loop, ArrayRef<Value> values,
                                              Value carried) {
  llvm::SetVector<Operation *> slice;
  SmallVector<Value> worklist(values.begin(), values.end());
  while (!worklist.empty()) {
    Value value = worklist.pop_back_val();
    if (auto arg = dyn_cast<BlockArgument>(value)) {
      if (arg.getOwner() == loop.getBody() && arg != loop.getInductionVar() && arg != carried)
        return failure();
      continue;
    }
    Operation *def = value.getDefiningOp();
    if (!loop->isProperAncestor(def) || slice.contains(def))
      continue;
    if (def->getNumRegions() != 0 || !isMemoryEffectFree(def))
      return failure();
    slice.insert(def);
    llvm::append_range(worklist, def->getOperands());
  }
  SmallVector<Operation *> ordered(slice.begin(), slice.end());
  llvm::sort(ordered, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
  return ordered;
}
} // namespace

SmallVector<scf::ForOp> kiln::topLevelLayerLoops(FunctionOpInterface fn) {
  SmallVector<scf::ForOp> loops;
  if (fn.isExternal())
    return loops;
  for (Operation &op : fn.getFunctionBody().front())
    if (auto loop = dyn_cast<scf::ForOp>(op); loop && loop->hasAttr(KilnDialect::kLayersAttrName))
      loops.push_back(loop);
  return loops;
}

std::string kiln::substituteLayer(StringRef text, int64_t index) {
  size_t hole = text.find(kHole);
  if (hole == StringRef::npos)
    return text.str();
  return (text.take_front(hole) + Twine(index) + text.drop_front(hole + kHole.size())).str();
}

Location LayerLocations::get(Location at) {
  auto name = dyn_cast<NameLoc>(at);
  if (!name || !name.getName().getValue().contains(kHole))
    return at;
  auto [it, fresh] = cache.try_emplace(at, at);
  if (fresh)
    it->second = NameLoc::get(StringAttr::get(ctx, substituteLayer(name.getName().getValue(), index)),
                              name.getChildLoc());
  return it->second;
}

LayerCopier::LayerCopier(scf::ForOp loop, bool after)
    : opBuilder(loop->getContext()), resourceBuilder(loop->getContext()),
      layerLocations(loop->getContext()) {
  if (after)
    opBuilder.setInsertionPointAfter(loop);
  else
    opBuilder.setInsertionPoint(loop);
  Block &entry = loop->getParentRegion()->front();
  resourceBuilder.setInsertionPoint(&entry, endOfResources(entry));
}

void LayerCopier::startLayer(int64_t layerOrdinal, int64_t layerIndex) {
  ordinal = layerOrdinal;
  layer = layerIndex;
  layerLocations.startLayer(layerIndex);
}

Operation *LayerCopier::copy(Operation &op, IRMapping &mapping) {
  bool resource = isa<CacheResourceInterface>(op);
  Operation *copy = (resource ? resourceBuilder : opBuilder).clone(op, mapping);
  copy->walk([&](Operation *nested) { nested->setLoc(layerLocations.get(nested->getLoc())); });
  moveToLayer(copy, layer);
  if (auto planned = dyn_cast<CacheResourceOp>(copy)) {
    if (std::optional<uint64_t> stride = planned.getStride()) {
      if (std::optional<uint64_t> offset = planned.getOffset())
        planned.setOffset(*offset + static_cast<uint64_t>(ordinal) * *stride);
      planned.removeStrideAttr();
    }
  }
  return copy;
}

bool kiln::normStraddlesBackEdge(scf::ForOp loop) {
  for (auto [arg, yielded] : llvm::zip_equal(loop.getRegionIterArgs(),
                                             loop.getBody()->getTerminator()->getOperands()))
    if (yielded.getDefiningOp<AddOp>() &&
        llvm::any_of(arg.getUsers(), [](Operation *user) { return isa<RmsNormOp>(user); }))
      return true;
  return false;
}

RmsNormOp kiln::rotatableNorm(scf::ForOp loop) {
  std::optional<std::pair<int64_t, int64_t>> layers = constantLayerRange(loop);
  if (!layers || layers->second - layers->first < 3)
    return {};
  auto yield = cast<scf::YieldOp>(loop.getBody()->getTerminator());
  for (auto [arg, yielded] : llvm::zip_equal(loop.getRegionIterArgs(), yield.getOperands())) {
    if (!yielded.getDefiningOp<AddOp>())
      continue;
    SmallVector<RmsNormOp> norms;
    for (Operation *user : arg.getUsers())
      if (auto norm = dyn_cast<RmsNormOp>(user); norm && norm.getInput() == arg && norm.getResult())
        norms.push_back(norm);
    if (norms.size() != 1)
      continue;
    RmsNormOp norm = norms.front();
    if (succeeded(normOperandSlice(loop, norm)))
      return norm;
  }
  return {};
}

FailureOr<SmallVector<Operation *>> kiln::normOperandSlice(scf::ForOp loop, RmsNormOp norm) {
  return bodySlice(loop, {norm.getWeight(), norm.getInit()}, norm.getInput());
}
