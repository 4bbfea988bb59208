//===- FuseSwigluLinear.cpp - kiln-fuse-swiglu-linear ---------------------===//
//
// A batch-1 decode step is a chain of short launches. A gated MLP's SwiGLU writes a
// buffer that only its down projection reads: the skinny GEMM can compute the SwiGLU
// as it loads its input, with the same bits, and the SwiGLU's launch goes away.
//
//===----------------------------------------------------------------------===//
#include "PassDetail.h"
#include "kiln/Transforms/Passes.h"

#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace kiln {
#define GEN_PASS_DEF_KILNFUSESWIGLULINEAR
#include "kiln/Transforms/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {

bool bf16Matrix(Value v) {
  auto type = dyn_cast<MemRefType>(v.getType());
  return type && type.getRank() == 2 && type.getElementType().isBF16();
}

/// The projection a SwiGLU merges into: the next kiln.linear of its block, reading the
/// SwiGLU's output, reached past allocations and memory-effect-free ops only (moving
/// the SwiGLU down to it then reorders no access). The output must be an allocation
/// that nothing else reads, since the merged op may leave it unwritten.
LinearOp projectionOf(SwigluOp swiglu) {
  Value h = swiglu.getInit();
  // kiln.swiglu_linear takes gate, up and its scratch of one type (kiln.swiglu, mere
  // compatible shapes).
  if (!bf16Matrix(h) || swiglu.getGate().getType() != h.getType() ||
      swiglu.getUp().getType() != h.getType() || !h.getDefiningOp<memref::AllocOp>())
    return {};
  LinearOp projection;
  for (Operation *op = swiglu->getNextNode(); op && !projection; op = op->getNextNode()) {
    if (auto linear = dyn_cast<LinearOp>(op); linear && linear.getInput() == h)
      projection = linear;
    else if (!isMemoryEffectFree(op) && !isa<memref::AllocOp>(op))
      return {};
  }
  if (!projection || projection.getBias() || !bf16Matrix(projection.getWeight()) ||
      !bf16Matrix(projection.getInit()))
    return {};
  // The merged op reads gate and up while it writes out.
  for (Value input : {Value(swiglu.getGate()), Value(swiglu.getUp()), h})
    if (projection.getInit() == input || projection.getWeight() == input)
      return {};
  for (Operation *user : h.getUsers())
    if (user != swiglu && user != projection && !isa<memref::DeallocOp>(user))
      return {};
  return projection;
}

struct FuseSwigluLinearPass
    : public kiln::impl::KilnFuseSwigluLinearBase<FuseSwigluLinearPass> {
  void runOnOperation() override {
    SmallVector<std::pair<SwigluOp, LinearOp>> fusions;
    getOperation()->walk([&](SwigluOp swiglu) {
      if (LinearOp projection = projectionOf(swiglu))
        fusions.emplace_back(swiglu, projection);
    });
    for (auto [swiglu, projection] : fusions) {
      OpBuilder builder(projection);
      SwigluLinearOp::create(builder,
                             builder.getFusedLoc({swiglu.getLoc(), projection.getLoc()}),
                             swiglu.getGate(), swiglu.getUp(), projection.getWeight(),
                             swiglu.getInit(), projection.getInit());
      projection->erase();
      swiglu->erase();
    }
    numFused += fusions.size();
  }
};

} // namespace
