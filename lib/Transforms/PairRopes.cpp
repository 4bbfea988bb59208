//===- PairRopes.cpp - kiln-pair-ropes ------------------------------------===//
//
// A decode step of a few rows is a chain of short launches. A layer's q and k rotary
// embeddings read the same positions with the same parameters: one launch rotates both,
// and computes each token's cos/sin table once.
//
//===----------------------------------------------------------------------===//
#include "PassDetail.h"
#include "kiln/Transforms/Passes.h"

#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Interfaces/ViewLikeInterface.h"


namespace kiln {
#define GEN_PASS_DEF_KILNPAIRROPES
#include "kiln/Transforms/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {

/// A rope the pair computes: buffers of bf16 [tokens, heads, head_dim].
bool pairable(RopeOp rope) {
  for (Value v : {rope.getInput(), rope.getInit()}) {
    auto type = dyn_cast<MemRefType>(v.getType());
    if (!type || !type.getElementType().isBF16() || type.getRank() != 3)
      return false;
  }
  return isa<MemRefType>(rope.getPositions().getType());
}

/// What a memref views: the memref.alloc (before the activation plan) or planned
/// kiln.activation_buffer (after it) it comes from, or the function argument; null
/// (and no argument) for anything else.
struct Origin {
  Operation *buffer = nullptr;
  bool argument = false;
};

Origin originOf(Value buffer) {
  while (Operation *def = buffer.getDefiningOp()) {
    if (isa<memref::AllocOp, ActivationBufferOp>(def))
      return {def, false};
    auto view = dyn_cast<ViewLikeOpInterface>(def);
    if (!view)
      return {};
    buffer = view.getViewSource();
  }
  auto arg = cast<BlockArgument>(buffer);
  return {nullptr, arg.getOwner()->isEntryBlock() &&
                       isa<FunctionOpInterface>(arg.getOwner()->getParentOp())};
}

/// Whether a rope's output `out` shares no byte with `other`. An allocation is fresh:
/// apart from every other allocation and from the function's arguments. Planned
/// activation buffers are apart when their bytes are (the plan lets buffers of disjoint
/// lifetimes share bytes).
bool apart(Value out, Value other) {
  Origin a = originOf(out), b = originOf(other);
  if (!a.buffer || a.buffer == b.buffer)
    return false;
  if (isa<memref::AllocOp>(a.buffer))
    return b.argument || (b.buffer && isa<memref::AllocOp>(b.buffer));
  auto x = cast<ActivationBufferOp>(a.buffer);
  auto y = dyn_cast_or_null<ActivationBufferOp>(b.buffer);
  if (!y)
    return false;
  return x.getOffset() + x.getCapacity() <= y.getOffset() ||
         y.getOffset() + y.getCapacity() <= x.getOffset();
}

/// The rope that pairs with `first`: the next kiln.rope of its block at the same
/// positions with the same parameters and head dimension, reached past allocations and
/// memory-effect-free ops only. One launch rotates a token of both at once, so neither
/// output may share a byte with the other rope's input or output. Before the
/// activation plan that holds for distinct allocations, and the plan then keeps the
/// pair's four buffers apart; after it, the second's output may sit over the first's
/// input, which dies at the first (the 8B step's plan does that).
RopeOp partnerOf(RopeOp first) {
  auto headDim = [](RopeOp r) { return cast<MemRefType>(r.getInput().getType()).getShape()[2]; };
  for (Operation *op = first->getNextNode(); op; op = op->getNextNode()) {
    if (auto second = dyn_cast<RopeOp>(op))
      if (pairable(second) && second.getPositions() == first.getPositions() &&
          second.getRope() == first.getRope() &&
          second.getRotaryDim() == first.getRotaryDim() && headDim(second) == headDim(first) &&
          apart(first.getInit(), second.getInput()) &&
          apart(second.getInit(), first.getInput()) && apart(first.getInit(), second.getInit()))
        return second;
    // Before the plan each output is allocated just before its op: moving the first
    // rope past an allocation reorders no access.
    if (!isMemoryEffectFree(op) && !isa<memref::AllocOp>(op))
      return {};
  }
  return {};
}

struct PairRopesPass : public kiln::impl::KilnPairRopesBase<PairRopesPass> {
  void runOnOperation() override {
    numPaired += mergePairs<RopeOp>(
        getOperation(), pairable, partnerOf,
        [](OpBuilder &builder, Location at, RopeOp first, RopeOp second) {
          RopePairOp::create(builder, at, first.getInput(), second.getInput(),
                             first.getPositions(), first.getInit(), second.getInit(),
                             first.getRope(), first.getRotaryDimAttr());
        });
  }
};

} // namespace
