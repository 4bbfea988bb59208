//===- FusePairSwiglu.cpp - kiln-fuse-pair-swiglu --------------------------===//
//
// A batch-1 decode step is a chain of short launches. A gated MLP's gate and up
// projections write two buffers that only its SwiGLU reads: the skinny GEMM that
// computes both (one CTA takes the same features of each) can apply the SwiGLU to its
// two sums before it stores anything, with the same bits, and the SwiGLU's launch goes
// away. Unlike a SwiGLU computed as the down projection loads its input, nothing is
// computed twice.
//
//===----------------------------------------------------------------------===//
#include "PassDetail.h"
#include "kiln/Transforms/Passes.h"

#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace kiln {
#define GEN_PASS_DEF_KILNFUSEPAIRSWIGLU
#include "kiln/Transforms/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {

bool bf16Matrix(Value v) {
  auto type = dyn_cast<MemRefType>(v.getType());
  return type && type.getRank() == 2 && type.getElementType().isBF16();
}

/// The projection that alone writes `buffer`, an allocation that nothing but that
/// projection and `swiglu` uses (deallocations aside): the merged op may leave it
/// unwritten.
LinearOp soleWriterOf(Value buffer, SwigluOp swiglu) {
  if (!buffer.getDefiningOp<memref::AllocOp>())
    return {};
  LinearOp writer;
  for (OpOperand &use : buffer.getUses()) {
    Operation *user = use.getOwner();
    if (user == swiglu || isa<memref::DeallocOp>(user))
      continue;
    auto linear = dyn_cast<LinearOp>(user);
    if (!linear || writer || &use != &linear.getInitMutable())
      return {};
    writer = linear;
  }
  if (!writer || writer->getBlock() != swiglu->getBlock() || writer.getBias() ||
      !bf16Matrix(writer.getInput()) || !bf16Matrix(writer.getWeight()))
    return {};
  return writer;
}

/// The gate and up projections a SwiGLU merges with: one input and one weight shape,
/// both before it in its block, with only allocations and memory-effect-free ops
/// between the first of them and the SwiGLU (merging them there reorders no access).
std::optional<std::pair<LinearOp, LinearOp>> projectionsOf(SwigluOp swiglu) {
  Value gate = swiglu.getGate(), up = swiglu.getUp(), h = swiglu.getInit();
  if (!bf16Matrix(h) || gate.getType() != h.getType() || up.getType() != h.getType() ||
      gate == up || h == gate || h == up)
    return std::nullopt;
  LinearOp gateLinear = soleWriterOf(gate, swiglu), upLinear = soleWriterOf(up, swiglu);
  if (!gateLinear || !upLinear || gateLinear.getInput() != upLinear.getInput() ||
      gateLinear.getWeight().getType() != upLinear.getWeight().getType() ||
      h == gateLinear.getInput())
    return std::nullopt;
  Operation *first =
      gateLinear->isBeforeInBlock(upLinear) ? gateLinear.getOperation() : upLinear.getOperation();
  Operation *second = first == gateLinear ? upLinear.getOperation() : gateLinear.getOperation();
  bool secondSeen = false;
  for (Operation *op = first->getNextNode(); op != swiglu; op = op->getNextNode()) {
    if (!op)
      return std::nullopt; // the SwiGLU before its projections: not a pair to merge
    if (op == second)
      secondSeen = true;
    else if (!isMemoryEffectFree(op) && !isa<memref::AllocOp>(op))
      return std::nullopt;
  }
  if (!secondSeen)
    return std::nullopt; // a projection after the SwiGLU: it read that input unwritten
  return std::make_pair(gateLinear, upLinear);
}

struct FusePairSwigluPass : public kiln::impl::KilnFusePairSwigluBase<FusePairSwigluPass> {
  void runOnOperation() override {
    SmallVector<std::tuple<SwigluOp, LinearOp, LinearOp>> fusions;
    getOperation()->walk([&](SwigluOp swiglu) {
      if (auto projections = projectionsOf(swiglu))
        fusions.emplace_back(swiglu, projections->first, projections->second);
    });
    for (auto [swiglu, gate, up] : fusions) {
      OpBuilder builder(swiglu);
      LinearPairSwigluOp::create(
          builder, builder.getFusedLoc({gate.getLoc(), up.getLoc(), swiglu.getLoc()}),
          gate.getInput(), gate.getWeight(), up.getWeight(), swiglu.getGate(), swiglu.getUp(),
          swiglu.getInit());
      swiglu->erase();
      gate->erase();
      up->erase();
    }
    numFused += fusions.size();
  }
};

} // namespace
