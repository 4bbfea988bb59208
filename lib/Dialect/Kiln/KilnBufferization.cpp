//===- KilnBufferization.cpp - one-shot bufferization of kiln ops ---------===//
//
// Compute and cached ops are in destination-passing style, so one-shot bufferization
// writes each result into the buffer of its `outs` operand (DestinationStyleBufferization
// in the header): the op becomes the same op on memrefs, without results. Kiln's
// kernels never read their output buffer, so an init produced by `tensor.empty` costs
// no copy. `kiln.weight_ref` becomes a read-only memref of the weight.
//
//===----------------------------------------------------------------------===//
#include "kiln/Dialect/Kiln/KilnBufferization.h"
#include "kiln/Dialect/Kiln/Kiln.h"

#include "mlir/Dialect/Bufferization/IR/BufferizableOpInterface.h"
#include "mlir/Dialect/Bufferization/IR/DstBufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Utils/StructuredOpsUtils.h"

using namespace mlir;
using namespace mlir::bufferization;

namespace {

/// A weight read (`kiln.weight_ref`, `kiln.weight_member`) becomes the same op with a
/// read-only memref result: the weights are never written by a step.
template <typename OpTy>
struct WeightReadModel
    : public BufferizableOpInterface::ExternalModel<WeightReadModel<OpTy>, OpTy> {
  bool bufferizesToAllocation(Operation *, Value) const { return false; }
  bool isWritable(Operation *, Value, const AnalysisState &) const { return false; }
  bool bufferizesToMemoryRead(Operation *, OpOperand &, const AnalysisState &) const {
    return false;
  }
  bool bufferizesToMemoryWrite(Operation *, OpOperand &, const AnalysisState &) const {
    return false;
  }
  AliasingValueList getAliasingValues(Operation *, OpOperand &, const AnalysisState &) const {
    return {};
  }

  LogicalResult bufferize(Operation *op, RewriterBase &rewriter, const BufferizationOptions &,
                          BufferizationState &) const {
    auto tensorType = dyn_cast<RankedTensorType>(op->getResult(0).getType());
    if (!tensorType)
      return success();
    auto memrefType = MemRefType::get(tensorType.getShape(), tensorType.getElementType());
    rewriter.setInsertionPoint(op);
    Operation *buffer = rewriter.clone(*op);
    buffer->getResult(0).setType(memrefType);
    replaceOpWithBufferizedValues(rewriter, op, buffer->getResult(0));
    return success();
  }
};

template <typename... OpTs>
void attachDestinationStyleModels(MLIRContext *context) {
  (OpTs::template attachInterface<kiln::DestinationStyleBufferization<OpTs>>(*context), ...);
}

} // namespace

void kiln::registerBufferizableOpInterfaceExternalModels(DialectRegistry &registry) {
  registry.addExtension(+[](MLIRContext *context, KilnDialect *) {
    attachDestinationStyleModels<
        EmbeddingOp, RmsNormOp, AddRmsNormOp, LinearOp, RopeOp, AddOp, AllReduceOp, AllGatherOp,
        SwigluOp, GatherRowsOp, MoeOp, SigmoidGateOp, SigmoidMulOp, GatedRmsNormOp, ActivationOp,
        ArgmaxOp, NextTokensOp, ConcatOp, CachedAttentionOp, CachedMlaAttentionOp, CachedSsmOp,
        CachedCausalConvOp, CachedGatedDeltaNetOp>(context);
    WeightRefOp::attachInterface<WeightReadModel<WeightRefOp>>(*context);
    WeightMemberOp::attachInterface<WeightReadModel<WeightMemberOp>>(*context);
  });
}
