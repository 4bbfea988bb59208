//===- KilnBufferization.cpp - one-shot bufferization of kiln ops ---------===//
//
// Compute and cached ops are in destination-passing style, so one-shot bufferization
// writes each result into the buffer of its `outs` operand: the op becomes the same op
// on memrefs, without results. Kiln's kernels never read their output buffer, so an
// init produced by `tensor.empty` costs no copy. `kiln.weight_ref` becomes a read-only
// memref of the weight.
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

template <typename OpT>
struct DestinationStyleModel
    : public DstBufferizableOpInterfaceExternalModel<DestinationStyleModel<OpT>, OpT> {
  /// Kiln's kernels overwrite their output without reading it.
  bool bufferizesToMemoryRead(Operation *op, OpOperand &operand,
                              const AnalysisState &) const {
    return !cast<DestinationStyleOpInterface>(op).isDpsInit(&operand);
  }

  LogicalResult bufferize(Operation *op, RewriterBase &rewriter,
                          const BufferizationOptions &options,
                          BufferizationState &state) const {
    auto dps = cast<DestinationStyleOpInterface>(op);
    SmallVector<Value> operands, initBuffers;
    for (OpOperand &operand : op->getOpOperands()) {
      Value value = operand.get();
      if (!isa<TensorType>(value.getType())) {
        operands.push_back(value);
        continue;
      }
      FailureOr<Value> buffer = getBuffer(rewriter, value, options, state);
      if (failed(buffer))
        return failure();
      operands.push_back(*buffer);
      if (dps.isDpsInit(&operand))
        initBuffers.push_back(*buffer);
    }
    rewriter.setInsertionPoint(op);
    mlir::clone(rewriter, op, /*newResultTypes=*/TypeRange{}, operands);
    replaceOpWithBufferizedValues(rewriter, op, initBuffers);
    return success();
  }
};

struct WeightRefModel
    : public BufferizableOpInterface::ExternalModel<WeightRefModel, kiln::WeightRefOp> {
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
    auto ref = cast<kiln::WeightRefOp>(op);
    auto tensorType = dyn_cast<RankedTensorType>(ref.getType());
    if (!tensorType)
      return success();
    auto memrefType = MemRefType::get(tensorType.getShape(), tensorType.getElementType());
    rewriter.setInsertionPoint(op);
    Value buffer = kiln::WeightRefOp::create(rewriter, op->getLoc(), memrefType,
                                             ref.getWeightAttr());
    replaceOpWithBufferizedValues(rewriter, op, buffer);
    return success();
  }
};

template <typename... OpTs>
void attachDestinationStyleModels(MLIRContext *context) {
  (OpTs::template attachInterface<DestinationStyleModel<OpTs>>(*context), ...);
}

} // namespace

void kiln::registerBufferizableOpInterfaceExternalModels(DialectRegistry &registry) {
  registry.addExtension(+[](MLIRContext *context, KilnDialect *) {
    attachDestinationStyleModels<EmbeddingOp, RmsNormOp, LinearOp, RopeOp, AddOp, SwigluOp,
                                 GatherRowsOp, CachedAttentionOp, CachedMlaAttentionOp,
                                 CachedSsmOp, CachedCausalConvOp>(context);
    WeightRefOp::attachInterface<WeightRefModel>(*context);
  });
}
