//===- Passes.td - Kiln conversions ------------------------*- tablegen -*-===//
#ifndef KILN_CONVERSION_PASSES_TD
#define KILN_CONVERSION_PASSES_TD

include "mlir/Pass/PassBase.td"

def ConvertKilnToCuda : Pass<"convert-kiln-to-cuda", "mlir::ModuleOp"> {
  let summary = "Lower cached ops with selected kernels to calls into the Kiln runtime";
  let description = [{
    Turns the model function (and an attached draft model's) into step functions that
    a serving process calls:
    `kiln_model_prefill_step`, `kiln_model_decode_step` and, when draft layers hold
    resources, `kiln_model_draft_step`, each `(!llvm.ptr ctx) -> i32`. Every cached op
    becomes a call of `kiln_rt_attention`, `kiln_rt_mla`, `kiln_rt_ssm` or
    `kiln_rt_conv` (include/kiln/Runtime/Runtime.h) with its planned arena offsets,
    shapes, runtime kernel id and spec-dec mode as constants, followed by a status
    check that returns the first failure. `kiln_model_arena_bytes` and
    `kiln_model_speculative_bytes` return the plan's totals, `kiln_model_kv_pages` its
    pages per KV pool (the runtime batch's `num_pages`). An op whose draft slot is
    empty launches nothing. Needs `kiln-plan-memory` and `kiln-select-kernels` first;
    a kernel that is planned but not implemented is an error. The output holds only
    func, arith, cf and llvm types.
  }];
  let dependentDialects = ["::mlir::func::FuncDialect", "::mlir::arith::ArithDialect",
                           "::mlir::cf::ControlFlowDialect", "::mlir::LLVM::LLVMDialect",
                           "::mlir::ub::UBDialect"];
  let statistics = [
    Statistic<"numLaunches", "launches", "Runtime launch calls emitted">
  ];
}

#endif
