//===- LayerLoops.h - what the layer-loop passes share ---------------------===//
//
// A layer loop is an `scf.for` marked `kiln.layers` (docs/overview.md, "Rolled
// layers"): one decoder layer that stands for every layer of a run. kiln-expand-layers
// copies its body once a layer; kiln-rotate-layers peels its last layer. Both copy a
// body for one layer the same way, here.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_LIB_TRANSFORMS_LAYERLOOPS_H
#define KILN_LIB_TRANSFORMS_LAYERLOOPS_H

#include "kiln/Dialect/Kiln/Kiln.h"

#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/FunctionInterfaces.h"

namespace kiln {

/// The layer loops at the top of `fn`'s body (where the importer puts them: looking
/// only there keeps an unrolled module's no-op run from walking every op).
llvm::SmallVector<mlir::scf::ForOp> topLevelLayerLoops(mlir::FunctionOpInterface fn);

/// Locations of one layer's copies: a module path `model.layers.{}.x` names the layer.
class LayerLocations {
public:
  explicit LayerLocations(mlir::MLIRContext *ctx) : ctx(ctx) {}
  void startLayer(int64_t layer) {
    index = layer;
    cache.clear();
  }
  mlir::Location get(mlir::Location at);

private:
  mlir::MLIRContext *ctx;
  int64_t index = 0;
  llvm::DenseMap<mlir::Location, mlir::Location> cache;
};

/// `text` with its first `{}` replaced by `index` (unchanged without one).
std::string substituteLayer(llvm::StringRef text, int64_t index);

/// Copies ops of a layer loop's body for one layer: each copy moved to the layer (asked
/// through the interfaces), named by it (locations), and the body's cache resources
/// declared with the function's at `offset + ordinal * stride`.
class LayerCopier {
public:
  /// Copies go before `loop` (`after`: after it); resources after the function's.
  LayerCopier(mlir::scf::ForOp loop, bool after);
  /// Starts layer `layer`, the `ordinal`-th of the loop.
  void startLayer(int64_t ordinal, int64_t layer);
  /// Copies `op` with `mapping` (updated with the copy's results).
  mlir::Operation *copy(mlir::Operation &op, mlir::IRMapping &mapping);
  mlir::OpBuilder &builder() { return opBuilder; }
  LayerLocations &locations() { return layerLocations; }

private:
  mlir::OpBuilder opBuilder;
  mlir::OpBuilder resourceBuilder;
  LayerLocations layerLocations;
  int64_t ordinal = 0, layer = 0;
};

/// The norm kiln-rotate-layers moves across `loop`'s back edge: a `kiln.rms_norm` of a
/// carried value that the body yields from a `kiln.add` (the residual add ending one
/// layer and the first norm of the next, which the unrolled step fuses), whose other
/// operands the induction variable and values from outside the loop give. Null when
/// there is none, or the loop cannot be rotated: other bounds than constants with step
/// 1, or fewer than three trips (rotated, a loop of one trip is no loop: the
/// canonicalizer inlines it after bufferization has planned it as one).
RmsNormOp rotatableNorm(mlir::scf::ForOp loop);

/// The body's ops that give the operands of `norm` other than its input (its weight
/// member, its destination), in program order; failure when one has memory effects,
/// holds a region, or reads a carried value other than the norm's input.
mlir::FailureOr<llvm::SmallVector<mlir::Operation *>> normOperandSlice(mlir::scf::ForOp loop,
                                                                       RmsNormOp norm);

/// Whether the residual add ending `loop`'s body and the next iteration's first norm
/// are a pair kiln-fuse-residual-norm fuses in the unrolled step.
bool normStraddlesBackEdge(mlir::scf::ForOp loop);

} // namespace kiln

#endif
