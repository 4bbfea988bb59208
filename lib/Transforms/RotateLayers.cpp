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
    SmallVector<Operation *> normOps = *normOperandSlice(loop, norm);
    normOps.push_back(norm);
    Value firstNorm = copyFirstNormBefore(loop, norm, normOps);
    SmallPtrSet<Operation *, 8> nextNormOps;
    scf::ForOp rotated = carryNextNorm(loop, norm, normOps, firstNorm, nextNormOps);
    copyLastLayerAfter(loop, rotated, nextNormOps);
    Operation *oldUpper = loop.getUpperBound().getDefiningOp();
    loop.erase();
    if (oldUpper && oldUpper->use_empty())
      oldUpper->erase();
  }

  /// The first layer's norm (`normOps`, its operands' ops and the norm), before `loop`.
  static Value copyFirstNormBefore(scf::ForOp loop, RmsNormOp norm,
                                   ArrayRef<Operation *> normOps) {
    int64_t lower = *getConstantIntValue(loop.getLowerBound());
    unsigned carried = cast<BlockArgument>(norm.getInput()).getArgNumber() - 1;
    LayerCopier head(loop, /*after=*/false);
    head.startLayer(0, lower);
    IRMapping mapping;
    mapping.map(loop.getInductionVar(),
                arith::ConstantIndexOp::create(head.builder(), loop.getLoc(), lower).getResult());
    mapping.map(norm.getInput(), loop.getInitArgs()[carried]);
    for (Operation *op : normOps)
      head.copy(*op, mapping);
    return mapping.lookup(norm.getResult());
  }

  /// A loop over every layer of `loop` but the last, with `loop`'s body, that carries the
  /// norm as one more value (from `firstNorm`) and ends each iteration with the next
  /// layer's norm (its ops recorded in `nextNormOps`). `loop` is left without a body.
  static scf::ForOp carryNextNorm(scf::ForOp loop, RmsNormOp norm, ArrayRef<Operation *> normOps,
                                  Value firstNorm, SmallPtrSetImpl<Operation *> &nextNormOps) {
    Location loc = loop.getLoc();
    int64_t upper = *getConstantIntValue(loop.getUpperBound());
    unsigned carried = cast<BlockArgument>(norm.getInput()).getArgNumber() - 1;
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

    auto yield = cast<scf::YieldOp>(body->getTerminator());
    builder.setInsertionPoint(yield);
    Value one = arith::ConstantIndexOp::create(builder, loc, 1);
    auto nextLayer = arith::AddIOp::create(builder, loc, rotated.getInductionVar(), one);
    nextNormOps.insert(one.getDefiningOp());
    nextNormOps.insert(nextLayer);
    IRMapping mapping;
    mapping.map(rotated.getInductionVar(), nextLayer.getResult());
    mapping.map(norm.getInput(), yield.getOperand(carried));
    yield.getResultsMutable().append(copyNorm(builder, normOps, mapping, nextNormOps));

    norm.getResult().replaceAllUsesWith(body->getArguments().back());
    norm.erase();
    for (Operation *op : llvm::reverse(normOps.drop_back()))
      if (op->use_empty())
        op->erase();
    return rotated;
  }

  /// The last layer after `rotated`: its body but the next layer's norm, reading the
  /// loop's results (its norm the last), in place of `loop`'s results.
  static void copyLastLayerAfter(scf::ForOp loop, scf::ForOp rotated,
                                 const SmallPtrSetImpl<Operation *> &nextNormOps) {
    int64_t lower = *getConstantIntValue(rotated.getLowerBound());
    int64_t layer = *getConstantIntValue(loop.getUpperBound()) - 1;
    SmallVector<OpOperand *> resultUses;
    for (Value result : loop.getResults())
      for (OpOperand &use : result.getUses())
        resultUses.push_back(&use);
    LayerCopier tail(rotated, /*after=*/true);
    tail.startLayer(layer - lower, layer);
    IRMapping mapping;
    Value layerValue = arith::ConstantIndexOp::create(tail.builder(), rotated.getLoc(), layer);
    mapping.map(rotated.getInductionVar(), layerValue);
    for (auto [arg, result] : llvm::zip_equal(rotated.getRegionIterArgs(), rotated.getResults()))
      mapping.map(arg, result);
    Block *body = rotated.getBody();
    for (Operation &op : body->without_terminator())
      if (!nextNormOps.contains(&op))
        tail.copy(op, mapping);
    Operation *yield = body->getTerminator();
    for (OpOperand *use : resultUses) {
      unsigned index = cast<OpResult>(use->get()).getResultNumber();
      use->set(mapping.lookupOrDefault(yield->getOperand(index)));
    }
    if (layerValue.use_empty())
      layerValue.getDefiningOp()->erase();
  }
};

} // namespace
