//===- KilnToRuntime.h - kiln ops on buffers to runtime calls and LLVM ----===//
//
// The lowering of a bufferized kiln module (docs/overview.md, "IR levels"):
//   convert-kiln-to-runtime-calls  kiln ops -> func.call @kiln_rt_*(ctx, pointers, sizes)
//   convert-kiln-to-llvm           buffers, func, arith, cf -> the LLVM dialect
// Embedders that keep their own lowering use the patterns alone.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_CONVERSION_KILNTORUNTIME_H
#define KILN_CONVERSION_KILNTORUNTIME_H

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Pass/Pass.h"

#include <memory>

namespace mlir {
class LLVMTypeConverter;
class RewritePatternSet;
} // namespace mlir

namespace kiln {

#define GEN_PASS_DECL
#include "kiln/Conversion/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "kiln/Conversion/Passes.h.inc"

/// Patterns rewriting every RuntimeCallOpInterface op on buffers into a runtime call
/// (the callee is declared in the module on first use).
void populateKilnToRuntimeCallPatterns(mlir::RewritePatternSet &patterns);

/// The pattern lowering `kiln.buffer_from_pointer` to a memref descriptor.
void populateKilnToLLVMPatterns(mlir::LLVMTypeConverter &converter,
                                mlir::RewritePatternSet &patterns);

} // namespace kiln

#endif
