//===- KilnBufferization.h - one-shot bufferization of kiln ops -----------===//
//
// Kiln's compute and cached ops are in destination-passing style: one-shot
// bufferization writes each result into the buffer of its init operand, and the op
// becomes the same op on memrefs without results. An embedder's own cached op in
// destination-passing style (DestinationStyleOpInterface) gets the same bufferization
// by attaching kiln::DestinationStyleBufferization<ItsOp>.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_DIALECT_KILN_KILNBUFFERIZATION_H
#define KILN_DIALECT_KILN_KILNBUFFERIZATION_H

#include "mlir/Dialect/Bufferization/IR/BufferizableOpInterface.h"
#include "mlir/Dialect/Bufferization/IR/DstBufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Utils/StructuredOpsUtils.h"
#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/DestinationStyleOpInterface.h"

namespace mlir {
class DialectRegistry;
} // namespace mlir

namespace kiln {

/// BufferizableOpInterface of a destination-passing-style op whose kernel overwrites
/// its init without reading it: tensor operands become their buffers, non-tensor
/// operands (cache resources) stay, and the op is cloned on buffers without results.
template <typename OpT>
struct DestinationStyleBufferization
    : public mlir::bufferization::DstBufferizableOpInterfaceExternalModel<
          DestinationStyleBufferization<OpT>, OpT> {
  bool bufferizesToMemoryRead(mlir::Operation *op, mlir::OpOperand &operand,
                              const mlir::bufferization::AnalysisState &) const {
    return !mlir::cast<mlir::DestinationStyleOpInterface>(op).isDpsInit(&operand);
  }

  mlir::LogicalResult bufferize(mlir::Operation *op, mlir::RewriterBase &rewriter,
                                const mlir::bufferization::BufferizationOptions &options,
                                mlir::bufferization::BufferizationState &state) const {
    auto dps = mlir::cast<mlir::DestinationStyleOpInterface>(op);
    llvm::SmallVector<mlir::Value> operands, initBuffers;
    for (mlir::OpOperand &operand : op->getOpOperands()) {
      mlir::Value value = operand.get();
      if (!mlir::isa<mlir::TensorType>(value.getType())) {
        operands.push_back(value);
        continue;
      }
      mlir::FailureOr<mlir::Value> buffer =
          mlir::bufferization::getBuffer(rewriter, value, options, state);
      if (mlir::failed(buffer))
        return mlir::failure();
      operands.push_back(*buffer);
      if (dps.isDpsInit(&operand))
        initBuffers.push_back(*buffer);
    }
    rewriter.setInsertionPoint(op);
    mlir::clone(rewriter, op, /*newResultTypes=*/mlir::TypeRange{}, operands);
    mlir::bufferization::replaceOpWithBufferizedValues(rewriter, op, initBuffers);
    return mlir::success();
  }
};

/// Attaches BufferizableOpInterface to the kiln ops that bufferize (compute ops,
/// cached ops, weight_ref).
void registerBufferizableOpInterfaceExternalModels(mlir::DialectRegistry &registry);

} // namespace kiln

#endif
