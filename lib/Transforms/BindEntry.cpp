//===- BindEntry.cpp - kiln-bind-entry -------------------------------------===//
//
// The model function takes the step's inputs as arguments and returns its logits:
// the natural form for importers and embedders. A compiled step instead gets both
// from the runtime's context, so this pass gives the bufferized function the entry
// signature `kiln_model_forward(ctx)` of docs/abi.md.
//
//===----------------------------------------------------------------------===//
#include "PassDetail.h"
#include "kiln/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/Builders.h"

namespace kiln {
#define GEN_PASS_DEF_KILNBINDENTRY
#include "kiln/Transforms/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {
constexpr StringLiteral kEntryName = "kiln_model_forward";

struct BindEntryPass : public kiln::impl::KilnBindEntryBase<BindEntryPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<func::FuncOp> entries;
    for (auto fn : module.getOps<func::FuncOp>())
      if (fn->hasAttr(KilnDialect::kEntryAttrName))
        entries.push_back(fn);
    if (entries.size() != 1) {
      module.emitError() << "kiln-bind-entry needs exactly one function marked '"
                         << KilnDialect::kEntryAttrName << "', found " << entries.size();
      return signalPassFailure();
    }
    if (failed(bind(entries.front())))
      signalPassFailure();
  }

  LogicalResult bind(func::FuncOp fn) {
    if (!fn.getBody().hasOneBlock())
      return fn.emitError() << "the model function must be one block (straight-line code)";
    if (!SymbolTable::symbolKnownUseEmpty(fn, fn->getParentOp()))
      return fn.emitError() << "the model function is called from the module; the entry "
                               "point is called by the runtime only";
    if (Operation *clash = SymbolTable::lookupSymbolIn(fn->getParentOp(), kEntryName);
        clash && clash != fn)
      return clash->emitError() << "'" << kEntryName << "' is reserved for the entry point";
    Block &body = fn.getBody().front();
    OpBuilder builder = OpBuilder::atBlockBegin(&body);
    for (BlockArgument arg : body.getArguments()) {
      auto kind = fn.getArgAttrOfType<InputKindAttr>(arg.getArgNumber(),
                                                     KilnDialect::kInputAttrName);
      if (!kind)
        return fn.emitError() << "argument " << arg.getArgNumber() << " of the model "
                              << "function has no '" << KilnDialect::kInputAttrName
                              << "' marker (token_ids, positions or logit_rows)";
      auto type = dyn_cast<MemRefType>(arg.getType());
      if (!type)
        return fn.emitError() << "argument " << arg.getArgNumber()
                              << " is not a buffer; run one-shot-bufferize first";
      if (type.getRank() != 1 || !type.getElementType().isInteger(32))
        return fn.emitError() << "argument " << arg.getArgNumber() << " ("
                              << stringifyInputKind(kind.getValue())
                              << ") must be a 1-D i32 buffer, got " << type;
      Value input = InputOp::create(builder, arg.getLoc(), arg.getType(), kind);
      arg.replaceAllUsesWith(input);
    }
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    builder.setInsertionPoint(ret);
    for (auto [index, value] : llvm::enumerate(ret.getOperands())) {
      auto kind = fn.getResultAttrOfType<OutputKindAttr>(index, KilnDialect::kOutputAttrName);
      if (!kind)
        return fn.emitError() << "result " << index << " of the model function has no '"
                              << KilnDialect::kOutputAttrName << "' marker";
      if (!isa<MemRefType>(value.getType()))
        return fn.emitError() << "result " << index
                              << " is not a buffer; run one-shot-bufferize first";
      OutputOp::create(builder, ret.getLoc(), kind, value);
    }
    ret->setOperands({});

    auto pointer = LLVM::LLVMPointerType::get(&getContext());
    body.eraseArguments(0, body.getNumArguments());
    body.addArgument(pointer, fn.getLoc());
    fn.setFunctionType(FunctionType::get(&getContext(), {pointer}, {}));
    fn.setAllArgAttrs(ArrayRef<DictionaryAttr>{});
    fn.setAllResultAttrs(ArrayRef<DictionaryAttr>{});
    fn.setArgAttr(0, KilnDialect::kContextAttrName, UnitAttr::get(&getContext()));
    fn.setSymName(kEntryName);
    fn.setPublic();
    return success();
  }
};
} // namespace
