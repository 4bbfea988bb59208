//===- FuseResidualNorm.cpp - kiln-fuse-residual-norm ---------------------===//
//
// Decode steps of small batches are bound by launches as much as by bytes: every
// kernel of a layer costs a few microseconds however little it reads. The residual add
// and the norm of its sum are two such kernels per sublayer; kiln.add_rms_norm is one.
//
//===----------------------------------------------------------------------===//
#include "PassDetail.h"
#include "kiln/Transforms/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/WalkPatternRewriteDriver.h"

namespace kiln {
#define GEN_PASS_DEF_KILNFUSERESIDUALNORM
#include "kiln/Transforms/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {

/// True when every user of `sum` other than `norm` comes after `norm` in its block, so
/// that the fused op, placed where the norm is, dominates them all.
bool usedOnlyFrom(Value sum, Operation *norm) {
  for (Operation *user : sum.getUsers())
    if (user != norm && (user->getBlock() != norm->getBlock() || !norm->isBeforeInBlock(user)))
      return false;
  return true;
}

struct FuseAddIntoRmsNorm : public OpRewritePattern<RmsNormOp> {
  FuseAddIntoRmsNorm(MLIRContext *context, llvm::Statistic *fused)
      : OpRewritePattern<RmsNormOp>(context), fused(fused) {}

  LogicalResult matchAndRewrite(RmsNormOp norm, PatternRewriter &rewriter) const override {
    Value normed = norm.getResult();
    if (!normed)
      return rewriter.notifyMatchFailure(norm, "on buffers");
    auto add = norm.getInput().getDefiningOp<AddOp>();
    if (!add || !add.getResult())
      return rewriter.notifyMatchFailure(norm, "the input is not the result of a kiln.add");
    Value sum = add.getResult();
    if (cast<ShapedType>(sum.getType()).getRank() != 2)
      return rewriter.notifyMatchFailure(norm, "not rows of [tokens, hidden]");
    if (!usedOnlyFrom(sum, norm))
      return rewriter.notifyMatchFailure(norm, "the sum is used before the norm");
    auto fusedOp =
        AddRmsNormOp::create(rewriter, rewriter.getFusedLoc({add.getLoc(), norm.getLoc()}),
                             TypeRange{sum.getType(), normed.getType()}, add.getLhs(), add.getRhs(),
                             norm.getWeight(), add.getInit(), norm.getInit(), norm.getEpsilonAttr(),
                             norm.getZeroCenteredAttr(), norm.getF32WeightAttr());
    rewriter.replaceAllUsesWith(sum, fusedOp.getResult(0));
    rewriter.replaceOp(norm, fusedOp.getResult(1));
    rewriter.eraseOp(add);
    if (fused)
      ++*fused;
    return success();
  }

  llvm::Statistic *fused;
};

struct FuseResidualNormPass
    : public kiln::impl::KilnFuseResidualNormBase<FuseResidualNormPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateFuseResidualNormPatterns(patterns, &numFused);
    // One walk: a fused op is never a candidate again, so there is no fixpoint to reach
    // (the greedy driver's worklist, folding and dead-code sweep took 0.5 s at 4,096
    // layers, and would erase kiln ops whose results are unused).
    walkAndApplyPatterns(getOperation(), std::move(patterns));
  }
};

} // namespace

void kiln::populateFuseResidualNormPatterns(RewritePatternSet &patterns,
                                            llvm::Statistic *fused) {
  patterns.add<FuseAddIntoRmsNorm>(patterns.getContext(), fused);
}
