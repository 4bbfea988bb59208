//===- PairLinears.cpp - kiln-pair-linears ---------------------------------===//
//
// A decode step of a few rows is a chain of short launches, each paying a fixed ramp-up
// and tail. A layer's k and v projections (and its gate and up projections) read one
// input with weights of one shape: one strided-batched GEMM computes both.
//
//===----------------------------------------------------------------------===//
#include "PassDetail.h"
#include "kiln/Transforms/Passes.h"

#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace kiln {
#define GEN_PASS_DEF_KILNPAIRLINEARS
#include "kiln/Transforms/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {

/// A projection the pair's GEMM computes: buffers, no bias, bf16 in, weight and out.
bool pairable(LinearOp linear) {
  if (linear.getBias())
    return false;
  for (Value v : {linear.getInput(), linear.getWeight(), linear.getInit()}) {
    auto type = dyn_cast<MemRefType>(v.getType());
    if (!type || !type.getElementType().isBF16() || type.getRank() != 2)
      return false;
  }
  return true;
}

/// The projection that pairs with `first`: the next kiln.linear of its block reading the
/// same input with a weight of the same shape, reached past memory-effect-free ops only.
LinearOp partnerOf(LinearOp first) {
  auto weightShape = [](LinearOp l) {
    return cast<MemRefType>(l.getWeight().getType()).getShape();
  };
  for (Operation *op = first->getNextNode(); op; op = op->getNextNode()) {
    if (auto second = dyn_cast<LinearOp>(op))
      if (pairable(second) && second.getInput() == first.getInput() &&
          weightShape(second) == weightShape(first) &&
          second.getInit().getType() == first.getInit().getType())
        return second;
    if (!isMemoryEffectFree(op))
      return {};
  }
  return {};
}

struct PairLinearsPass : public kiln::impl::KilnPairLinearsBase<PairLinearsPass> {
  void runOnOperation() override {
    numPaired += mergePairs<LinearOp>(
        getOperation(), pairable, partnerOf,
        [](OpBuilder &builder, Location at, LinearOp first, LinearOp second) {
          LinearPairOp::create(builder, at, first.getInput(), first.getWeight(),
                               second.getWeight(), first.getInit(), second.getInit());
        });
  }
};

} // namespace
