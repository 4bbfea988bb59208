//===- KilnToLLVM.cpp - convert-kiln-to-llvm -------------------------------===//
#include "kiln/Conversion/KilnToRuntime.h"
#include "kiln/Dialect/Kiln/Kiln.h"

#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVM.h"
#include "mlir/Conversion/IndexToLLVM/IndexToLLVM.h"
#include "mlir/Conversion/LLVMCommon/ConversionTarget.h"
#include "mlir/Conversion/LLVMCommon/MemRefBuilder.h"
#include "mlir/Conversion/LLVMCommon/Pattern.h"
#include "mlir/Conversion/LLVMCommon/TypeConverter.h"
#include "mlir/Conversion/MemRefToLLVM/MemRefToLLVM.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Conversion/AffineToStandard/AffineToStandard.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Pass/PassManager.h"

namespace kiln {
#define GEN_PASS_DEF_CONVERTKILNTOLLVM
#include "kiln/Conversion/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {
/// A contiguous (identity-layout) memref descriptor over the op's pointer.
struct BufferFromPointerLowering : public ConvertOpToLLVMPattern<BufferFromPointerOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;

  LogicalResult matchAndRewrite(BufferFromPointerOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    auto type = cast<MemRefType>(op.getType());
    Type descriptorType = getTypeConverter()->convertType(type);
    if (!descriptorType)
      return rewriter.notifyMatchFailure(op, "memref type not convertible");
    auto descriptor = MemRefDescriptor::poison(rewriter, loc, descriptorType);
    descriptor.setAllocatedPtr(rewriter, loc, adaptor.getPointer());
    descriptor.setAlignedPtr(rewriter, loc, adaptor.getPointer());
    descriptor.setConstantOffset(rewriter, loc, 0);
    SmallVector<Value> sizes;
    auto dynamicSizes = adaptor.getSizes().begin();
    for (int64_t dim : type.getShape())
      sizes.push_back(dim == ShapedType::kDynamic
                          ? *dynamicSizes++
                          : createIndexAttrConstant(rewriter, loc, getIndexType(), dim));
    // Row-major strides from the innermost dimension outwards.
    Value stride = createIndexAttrConstant(rewriter, loc, getIndexType(), 1);
    for (int64_t dim = type.getRank() - 1; dim >= 0; --dim) {
      descriptor.setSize(rewriter, loc, dim, sizes[dim]);
      descriptor.setStride(rewriter, loc, dim, stride);
      stride = LLVM::MulOp::create(rewriter, loc, stride, sizes[dim]).getResult();
    }
    rewriter.replaceOp(op, {descriptor});
    return success();
  }
};

struct ConvertKilnToLLVMPass : public kiln::impl::ConvertKilnToLLVMBase<ConvertKilnToLLVMPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    WalkResult leftover = module.walk([](Operation *op) {
      if (isa<memref::AllocOp, memref::AllocaOp, memref::DeallocOp>(op)) {
        op->emitError() << "buffer allocation left in a compiled step: every buffer must "
                           "live in a planned arena (run kiln-plan-activations)";
        return WalkResult::interrupt();
      }
      if (isa<memref::GetGlobalOp>(op)) {
        op->emitError() << "a constant buffer in host memory (memref.get_global) cannot be "
                           "passed to the GPU; make it a kiln.weight";
        return WalkResult::interrupt();
      }
      return WalkResult::advance();
    });
    if (leftover.wasInterrupted())
      return signalPassFailure();

    // Views (expand/collapse_shape) become reinterpret casts with affine index math,
    // which the LLVM conversion understands once affine is lowered.
    OpPassManager views(ModuleOp::getOperationName());
    views.addPass(memref::createExpandStridedMetadataPass());
    views.addPass(createLowerAffinePass());
    // A rolled step's loop over its layers (kiln-roll-layers) becomes branches.
    views.addPass(createSCFToControlFlowPass());
    if (failed(runPipeline(views, module)))
      return signalPassFailure();

    LLVMConversionTarget target(getContext());
    target.addLegalOp<ModuleOp>();
    LLVMTypeConverter converter(&getContext());
    RewritePatternSet patterns(&getContext());
    populateFinalizeMemRefToLLVMConversionPatterns(converter, patterns);
    populateFuncToLLVMConversionPatterns(converter, patterns);
    arith::populateArithToLLVMConversionPatterns(converter, patterns);
    cf::populateControlFlowToLLVMConversionPatterns(converter, patterns);
    index::populateIndexToLLVMConversionPatterns(converter, patterns);
    populateKilnToLLVMPatterns(converter, patterns);
    if (failed(applyFullConversion(module, target, std::move(patterns))))
      return signalPassFailure();

    // Kiln's markers have no meaning in LLVM IR (translation would warn about them).
    module.walk([](LLVM::CallOp call) { call->removeAttr(KilnDialect::kLayerAttrName); });
    module.walk([](LLVM::LLVMFuncOp fn) {
      fn->removeAttr(KilnDialect::kEntryAttrName);
      for (unsigned i = 0; i < fn.getNumArguments(); ++i)
        fn.removeArgAttr(i, KilnDialect::kContextAttrName);
    });

    OpPassManager reconcile(ModuleOp::getOperationName());
    reconcile.addPass(createReconcileUnrealizedCastsPass());
    if (failed(runPipeline(reconcile, module)))
      signalPassFailure();
  }
};
} // namespace

void kiln::populateKilnToLLVMPatterns(LLVMTypeConverter &converter,
                                      RewritePatternSet &patterns) {
  patterns.add<BufferFromPointerLowering>(converter);
}
