//===- Passes.td - Kiln conversions ------------------------*- tablegen -*-===//
#ifndef KILN_CONVERSION_PASSES_TD
#define KILN_CONVERSION_PASSES_TD

include "mlir/Pass/PassBase.td"

def ConvertKilnToRuntimeCalls : Pass<"convert-kiln-to-runtime-calls", "mlir::ModuleOp"> {
  let summary = "Lower kiln ops on buffers, in place, to calls of the Kiln runtime";
  let description = [{
    Every op implementing `RuntimeCallOpInterface` (compute ops, cached ops,
    `kiln.output`) becomes one `func.call @kiln_rt_<op>(%ctx, ...)` on the pointers of
    its own operand and result buffers (docs/abi.md); the surrounding IR is kept. The
    context is the enclosing function's argument marked `kiln.context`. Kernel names
    chosen by `kiln-select-kernels` become the registry's runtime ids; a kernel that is
    planned but not implemented is an error. `kiln.input`, `kiln.activation_buffer`
    and `kiln.weight_ref` become `kiln.buffer_from_pointer` on the runtime's base
    pointers. The module gets `kiln_model_manifest()` (docs/abi.md) and loses its
    `kiln.weight` and `kiln.cache_resource` ops. A kiln op left over is an error
    (`applyPartialConversion`).
  }];
  let dependentDialects = ["::mlir::func::FuncDialect", "::mlir::arith::ArithDialect",
                           "::mlir::memref::MemRefDialect", "::mlir::LLVM::LLVMDialect"];
  let statistics = [
    Statistic<"numCalls", "calls", "Runtime calls emitted">
  ];
}

def ConvertKilnToLLVM : Pass<"convert-kiln-to-llvm", "mlir::ModuleOp"> {
  let summary = "Lower a module of runtime calls on buffers to the LLVM dialect";
  let description = [{
    `kiln.buffer_from_pointer` becomes a memref descriptor over its pointer; scf
    (the loop of `kiln-roll-layers`) becomes cf; memref, func, arith, index and cf go
    to LLVM with upstream patterns, in one full
    conversion followed by the reconciliation of casts. A `memref.alloc` left over is
    an error: every buffer of a compiled step lives in a planned arena.
  }];
  let dependentDialects = ["::mlir::LLVM::LLVMDialect", "::mlir::affine::AffineDialect",
                           "::mlir::arith::ArithDialect", "::mlir::cf::ControlFlowDialect"];
}

#endif
