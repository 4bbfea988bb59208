//===- RotateLayers.cpp - kiln-rotate-layers ------------------------------===//
//
// In the unrolled step the residual add that ends layer i and the first norm of layer
// i + 1 are one kiln.add_rms_norm (kiln-fuse-residual-norm): one launch a layer fewer.
// A layer loop splits the pair across its back edge, where no pattern sees it. This
// pass rotates the loop so that the pair sits in one iteration: layer `first`'s norm
// before the loop, each iteration ending with the next layer's norm (carried to the
// next iteration), and the last layer, which has no next, copied after the loop. The
// step then makes the unrolled step's calls with one copy of a layer.
//
//===----------------------------------------------------------------------===//
#include "LayerLoops.h"
#include "PassDetail.h"
#include "kiln/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/Interfaces/FunctionInterfaces.h"

namespace kiln {
#define GEN_PASS_DEF_KILNROTATELAYERS
#include "kiln/Transforms/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {

/// Copies `ops` (the norm last) with `mapping` and records the copies in `copies`;
/// returns the norm's copy.
Value copyNorm(OpBuilder &builder, ArrayRef<Operation *> ops, IRMapping &mapping,
               SmallPtrSetImpl<Operation *> &copies) {
  Operation *copy = nullptr;
  for (Operation *op : ops)
    copies.insert(copy = builder.clone(*op, mapping));
  return copy->getResult(0);
}

struct RotateLayersPass : public kiln::impl::KilnRotateLayersBase<RotateLayersPass> {
  void runOnOperation() override {
    for (auto fn : getOperation().getOps<FunctionOpInterface>())
      for (scf::ForOp loop : topLevelLayerLoops(fn))
        if (RmsNormOp norm = rotatableNorm(loop)) {
          rotate(loop, norm);
          ++numRotated;
        }
  }

  void rotate(scf::ForOp loop, RmsNormOp norm) {
    int64_t lower = *getConstantIntValue(loop.getLowerBound());
    int64_t upper = *getConstantIntValue(loop.getUpperBound());
    Location loc = loop.getLoc();
    unsigned carried = cast<BlockArgument>(norm.getInput()).getArgNumber() - 1;
    SmallVector<Operation *> normOps = *normOperandSlice(loop, norm);
    normOps.push_back(norm);

    // Layer `lower`'s norm, before the loop.
    LayerCopier head(loop, /*after=*/false);
    head.startLayer(0, lower);
    IRMapping headMapping;
    headMapping.map(loop.getInductionVar(),
                    arith::ConstantIndexOp::create(head.builder(), loc, lower).getResult());
    headMapping.map(norm.getInput(), loop.getInitArgs()[carried]);
    for (Operation *op : normOps)
      head.copy(*op, headMapping);
    Value firstNorm = headMapping.lookup(norm.getResult());

    // The loop over every layer but the last, carrying the next layer's norm too.
    OpBuilder builder(loop);
    SmallVector<Value> inits(loop.getInitArgs());
    inits.push_back(firstNorm);
    Value last = arith::ConstantIndexOp::create(builder, loc, upper - 1);
    auto rotated = scf::ForOp::create(builder, loc, loop.getLowerBound(), last,
                                      loop.getStep(), inits);
    rotated->setDiscardableAttrs(loop->getDiscardableAttrDictionary());
    Block *body = rotated.getBody();
    for (auto [from, to] : llvm::zip(loop.getBody()->getArguments(), body->getArguments()))
      from.replaceAllUsesWith(to);
    body->getOperations().splice(body->end(), loop.getBody()->getOperations());
    Value carriedNorm = body->getArguments().back();
    auto yield = cast<scf::YieldOp>(body->getTerminator());
    builder.setInsertionPoint(yield);
    Value one = arith::ConstantIndexOp::create(builder, loc, 1);
    auto nextLayer = arith::AddIOp::create(builder, loc, rotated.getInductionVar(), one);
    SmallPtrSet<Operation *, 8> nextNormOps = {one.getDefiningOp(), nextLayer};
    IRMapping nextMapping;
    nextMapping.map(rotated.getInductionVar(), nextLayer.getResult());
    nextMapping.map(norm.getInput(), yield.getOperand(carried));
    Value nextNorm = copyNorm(builder, normOps, nextMapping, nextNormOps);
    yield.getResultsMutable().append(nextNorm);
    norm.getResult().replaceAllUsesWith(carriedNorm);
    norm.erase();
    for (Operation *op : llvm::reverse(ArrayRef(normOps).drop_back()))
      if (op->use_empty())
        op->erase();

    // The last layer after the loop: its norm is the loop's last result.
    SmallVector<OpOperand *> resultUses;
    for (Value result : loop.getResults())
      for (OpOperand &use : result.getUses())
        resultUses.push_back(&use);
    LayerCopier tail(rotated, /*after=*/true);
    tail.startLayer(upper - 1 - lower, upper - 1);
    IRMapping tailMapping;
    Value lastLayer = arith::ConstantIndexOp::create(tail.builder(), loc, upper - 1);
    tailMapping.map(rotated.getInductionVar(), lastLayer);
    for (auto [arg, result] : llvm::zip_equal(rotated.getRegionIterArgs(), rotated.getResults()))
      tailMapping.map(arg, result);
    for (Operation &op : body->without_terminator())
      if (!nextNormOps.contains(&op))
        tail.copy(op, tailMapping);
    for (OpOperand *use : resultUses) {
      unsigned index = cast<OpResult>(use->get()).getResultNumber();
      use->set(tailMapping.lookupOrDefault(yield.getOperand(index)));
    }
    if (lastLayer.use_empty())
      lastLayer.getDefiningOp()->erase();
    Operation *oldUpper = loop.getUpperBound().getDefiningOp();
    loop.erase();
    if (oldUpper && oldUpper->use_empty())
      oldUpper->erase();
  }
};

} // namespace
