//===- KilnBufferization.h - one-shot bufferization of kiln ops -----------===//
#ifndef KILN_DIALECT_KILN_KILNBUFFERIZATION_H
#define KILN_DIALECT_KILN_KILNBUFFERIZATION_H

namespace mlir {
class DialectRegistry;
} // namespace mlir

namespace kiln {
/// Attaches BufferizableOpInterface to the kiln ops that bufferize (compute ops,
/// cached ops, weight_ref).
void registerBufferizableOpInterfaceExternalModels(mlir::DialectRegistry &registry);
} // namespace kiln

#endif
