//===- KilnToCuda.h - lowering cached ops to Kiln runtime calls -----------===//
#ifndef KILN_CONVERSION_KILNTOCUDA_H
#define KILN_CONVERSION_KILNTOCUDA_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/UB/IR/UBOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Pass/Pass.h"

namespace kiln {

/// Attribute naming the phase of a step function (`decode` or `prefill`); the
/// patterns read it to pick the decode or the prefill kernel.
constexpr llvm::StringLiteral kStepPhaseAttrName = "kiln.step_phase";

/// Patterns rewriting each cached op inside a step function (a func.func with
/// `kiln.step_phase`, whose first argument is the runtime context and whose last
/// block is the `^exit(%status: i32)` block) into its runtime call and status check.
void populateKilnToCudaPatterns(mlir::RewritePatternSet &patterns);

#define GEN_PASS_DECL
#include "kiln/Conversion/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "kiln/Conversion/Passes.h.inc"

} // namespace kiln

#endif
