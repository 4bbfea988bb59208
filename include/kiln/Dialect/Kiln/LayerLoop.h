//===- LayerLoop.h - the layers a layer loop stands for ----------*- C++ -*-===//
//
// A layer loop is an `scf.for` marked `kiln.layers` (docs/overview.md, "Rolled layers"),
// its induction variable the layer index. The passes that expand, rotate or lower it and
// the report all need the layers it runs over; users include this header and link
// MLIRSCFDialect.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_DIALECT_KILN_LAYERLOOP_H
#define KILN_DIALECT_KILN_LAYERLOOP_H

#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"

#include <optional>
#include <utility>

namespace kiln {

/// The layers [first, end) of `loop` when its bounds are constants and its step is 1;
/// none otherwise.
inline std::optional<std::pair<int64_t, int64_t>> constantLayerRange(mlir::scf::ForOp loop) {
  std::optional<int64_t> lower = mlir::getConstantIntValue(loop.getLowerBound());
  std::optional<int64_t> upper = mlir::getConstantIntValue(loop.getUpperBound());
  if (!lower || !upper || mlir::getConstantIntValue(loop.getStep()) != 1)
    return std::nullopt;
  return std::make_pair(*lower, *upper);
}

} // namespace kiln

#endif
