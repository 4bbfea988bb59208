//===- Passes.h - Kiln passes ----------------------------------------------===//
#ifndef KILN_TRANSFORMS_PASSES_H
#define KILN_TRANSFORMS_PASSES_H

#include "kiln/Dialect/Kiln/Kiln.h"
#include "kiln/Transforms/Pipeline.h" // kDefaultUsableFraction, a pass option default
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Pass/Pass.h"

#include "llvm/ADT/Statistic.h"

namespace kiln {

#define GEN_PASS_DECL
#include "kiln/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "kiln/Transforms/Passes.h.inc"

/// kiln.add followed by kiln.rms_norm of its sum -> kiln.add_rms_norm (on tensors).
/// `fused` (may be null) counts the rewrites.
void populateFuseResidualNormPatterns(mlir::RewritePatternSet &patterns,
                                      llvm::Statistic *fused = nullptr);

} // namespace kiln

#endif
