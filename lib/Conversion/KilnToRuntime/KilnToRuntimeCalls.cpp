//===- KilnToRuntimeCalls.cpp - convert-kiln-to-runtime-calls -------------===//
//
// Kiln's ops lower in place: each op on buffers becomes one call of the Kiln runtime
// on the pointers of its own operands and result (docs/abi.md), so the graph around
// it — Kiln's or an embedder's — is kept. The runtime's kernels choose tiles and
// split-KV on the host and validate their arguments with messages naming the layer,
// which is why the calls go to the runtime rather than to gpu.launch_func.
//
//===----------------------------------------------------------------------===//
#include "kiln/Conversion/KilnToRuntime.h"
#include "kiln/Dialect/Kiln/Kiln.h"
#include "kiln/Registry/KernelRegistry.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Transforms/DialectConversion.h"

namespace kiln {
#define GEN_PASS_DEF_CONVERTKILNTORUNTIMECALLS
#include "kiln/Conversion/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace kiln {
/// The manifest text of a planned module (Manifest.cpp); failure is diagnosed.
FailureOr<std::string> buildManifest(ModuleOp module);
} // namespace kiln

namespace {

Type pointerType(MLIRContext *context) { return LLVM::LLVMPointerType::get(context); }

/// The argument marked `kiln.context` of the function holding `op`.
FailureOr<Value> contextOf(Operation *op) {
  auto fn = op->getParentOfType<FunctionOpInterface>();
  if (fn && !fn.isExternal())
    for (unsigned i = 0; i < fn.getNumArguments(); ++i)
      if (fn.getArgAttr(i, KilnDialect::kContextAttrName))
        return fn.getArgument(i);
  return op->emitOpError() << "lowers to a runtime call, so its function needs an "
                              "'!llvm.ptr {kiln.context}' argument (the runtime context)";
}

/// Declares `name` with `type` in the module, or checks an existing declaration. The
/// runtime functions are few; they are found through the module's first ops (where
/// they are declared) instead of a scan of every symbol, which would make the lowering
/// quadratic in a model's weights.
LogicalResult declareRuntimeFunction(Operation *user, StringRef name, FunctionType type) {
  auto module = user->getParentOfType<ModuleOp>();
  func::FuncOp existing;
  for (auto fn : module.getOps<func::FuncOp>()) {
    if (!fn.isExternal())
      break; // declarations come first (inserted at the module's start)
    if (fn.getSymName() == name) {
      existing = fn;
      break;
    }
  }
  if (!existing)
    existing = module.lookupSymbol<func::FuncOp>(name);
  if (existing) {
    if (existing.getFunctionType() != type)
      return user->emitOpError() << "calls '" << name << "' as " << type
                                 << ", but the module declares it as "
                                 << existing.getFunctionType();
    return success();
  }
  OpBuilder builder = OpBuilder::atBlockBegin(module.getBody());
  auto decl = func::FuncOp::create(builder, module.getLoc(), name, type);
  decl.setPrivate();
  return success();
}

/// `result = name(operands)` with the runtime function declared on first use.
FailureOr<Value> callRuntime(OpBuilder &builder, Operation *user, StringRef name,
                             ValueRange operands, Type result) {
  FunctionType type = builder.getFunctionType(operands.getTypes(), {result});
  if (failed(declareRuntimeFunction(user, name, type)))
    return failure();
  return func::CallOp::create(builder, user->getLoc(), name, TypeRange{result}, operands)
      .getResult(0);
}

Value i64Of(OpBuilder &builder, Location loc, Value index) {
  return arith::IndexCastOp::create(builder, loc, builder.getI64Type(), index);
}

/// Device address of the first element of `buffer` (the aligned pointer plus the
/// buffer's offset), or null for an absent optional operand. A buffer made over a
/// runtime pointer (`kiln.buffer_from_pointer`: contiguous, offset 0) is that pointer:
/// most operands are, and the metadata extraction would be dead weight per call.
Value pointerOf(OpBuilder &builder, Location loc, Value buffer) {
  Type ptr = pointerType(builder.getContext());
  if (!buffer)
    return LLVM::ZeroOp::create(builder, loc, ptr);
  // Reshapes of a contiguous buffer start where it starts.
  Value source = buffer;
  while (Operation *def = source.getDefiningOp()) {
    if (auto expand = dyn_cast<memref::ExpandShapeOp>(def))
      source = expand.getSrc();
    else if (auto collapse = dyn_cast<memref::CollapseShapeOp>(def))
      source = collapse.getSrc();
    else
      break;
  }
  if (auto made = source.getDefiningOp<BufferFromPointerOp>())
    return made.getPointer();
  auto type = cast<MemRefType>(buffer.getType());
  Value base = memref::ExtractAlignedPointerAsIndexOp::create(builder, loc, buffer);
  auto metadata = memref::ExtractStridedMetadataOp::create(builder, loc, buffer);
  Value elementBytes = arith::ConstantIndexOp::create(
      builder, loc, static_cast<int64_t>(getElementBytes(type.getElementType())));
  Value offsetBytes = arith::MulIOp::create(builder, loc, metadata.getOffset(), elementBytes);
  Value address = arith::AddIOp::create(builder, loc, base, offsetBytes);
  return LLVM::IntToPtrOp::create(builder, loc, ptr, i64Of(builder, loc, address));
}

/// Dimension `dim` of `buffer` when it is dynamic: the size a `kiln.buffer_from_pointer`
/// was made with, else a `memref.dim`.
Value dynamicDim(OpBuilder &builder, Location loc, Value buffer, int64_t dim) {
  if (auto made = buffer.getDefiningOp<BufferFromPointerOp>())
    return made.getSizes()[cast<MemRefType>(buffer.getType()).getDynamicDimIndex(dim)];
  return memref::DimOp::create(builder, loc, buffer, dim);
}

/// Product of dimensions [first, last) of `buffer` as i64: the static ones multiplied
/// at compile time, one multiplication per dynamic one.
Value productOfDims(OpBuilder &builder, Location loc, Value buffer, int64_t first,
                    int64_t last) {
  auto type = cast<MemRefType>(buffer.getType());
  int64_t staticProduct = 1;
  Value dynamicProduct;
  for (int64_t dim = first; dim < last; ++dim) {
    if (!type.isDynamicDim(dim)) {
      staticProduct *= type.getDimSize(dim);
      continue;
    }
    Value size = dynamicDim(builder, loc, buffer, dim);
    dynamicProduct =
        dynamicProduct ? arith::MulIOp::create(builder, loc, dynamicProduct, size) : size;
  }
  if (!dynamicProduct)
    return arith::ConstantOp::create(builder, loc, builder.getI64IntegerAttr(staticProduct))
        .getResult();
  if (staticProduct != 1)
    dynamicProduct = arith::MulIOp::create(
        builder, loc, dynamicProduct, arith::ConstantIndexOp::create(builder, loc, staticProduct));
  return i64Of(builder, loc, dynamicProduct);
}

/// The layer loop (scf.for marked kiln.layers) around `op`, if any.
scf::ForOp layerLoopOf(Operation *op) {
  auto loop = op->getParentOfType<scf::ForOp>();
  return loop && loop->hasAttr(KilnDialect::kLayersAttrName) ? loop : scf::ForOp();
}

/// `base + (iv - lower) * step` as i64: a per-layer value in the iteration of `loop`
/// the op runs in (base: its value in the loop's first iteration).
Value perLayerValue(OpBuilder &builder, Location loc, scf::ForOp loop, int64_t base, int64_t step) {
  Value ordinal = arith::SubIOp::create(builder, loc, loop.getInductionVar(), loop.getLowerBound());
  Value scaled = arith::MulIOp::create(
      builder, loc, i64Of(builder, loc, ordinal),
      arith::ConstantOp::create(builder, loc, builder.getI64IntegerAttr(step)));
  return arith::AddIOp::create(
      builder, loc, scaled,
      arith::ConstantOp::create(builder, loc, builder.getI64IntegerAttr(base)));
}

FailureOr<Value> materialize(OpBuilder &builder, Operation *op, const RuntimeArg &arg) {
  Location loc = op->getLoc();
  if (arg.perLayer != 0 && (arg.kind == RuntimeArg::Kind::i32 || arg.kind == RuntimeArg::Kind::i64))
    if (scf::ForOp loop = layerLoopOf(op)) {
      Value value = perLayerValue(builder, loc, loop, arg.integer, arg.perLayer);
      if (arg.kind == RuntimeArg::Kind::i64)
        return value;
      return arith::TruncIOp::create(builder, loc, builder.getI32Type(), value).getResult();
    }
  auto rank = [&] { return cast<MemRefType>(arg.buffer.getType()).getRank(); };
  switch (arg.kind) {
  case RuntimeArg::Kind::pointer:
    return pointerOf(builder, loc, arg.buffer);
  case RuntimeArg::Kind::dim:
    return productOfDims(builder, loc, arg.buffer, arg.integer, arg.integer + 1);
  case RuntimeArg::Kind::leadingElements:
    return productOfDims(builder, loc, arg.buffer, 0, rank() - 1);
  case RuntimeArg::Kind::elements:
    return productOfDims(builder, loc, arg.buffer, 0, rank());
  case RuntimeArg::Kind::i32:
    return arith::ConstantOp::create(builder, loc, builder.getI32IntegerAttr(arg.integer))
        .getResult();
  case RuntimeArg::Kind::i64:
    return arith::ConstantOp::create(builder, loc, builder.getI64IntegerAttr(arg.integer))
        .getResult();
  case RuntimeArg::Kind::f32:
    return arith::ConstantOp::create(builder, loc, builder.getF32FloatAttr(arg.real))
        .getResult();
  case RuntimeArg::Kind::rowStride: {
    auto type = cast<MemRefType>(arg.buffer.getType());
    auto [strides, offset] = type.getStridesAndOffset();
    if (!ShapedType::isDynamic(strides.front()))
      return arith::ConstantOp::create(builder, loc, builder.getI64IntegerAttr(strides.front()))
          .getResult();
    auto metadata = memref::ExtractStridedMetadataOp::create(builder, loc, arg.buffer);
    return i64Of(builder, loc, metadata.getStrides().front());
  }
  case RuntimeArg::Kind::kernel: {
    int32_t id = 0;
    if (!arg.symbol.empty()) {
      const KernelVariant *variant = KernelRegistry::global().lookup(arg.symbol);
      if (!variant || !variant->implemented || variant->runtimeKernel == 0)
        return op->emitOpError() << "kernel '" << arg.symbol
                                 << "' is planned but not implemented; it cannot be lowered";
      id = variant->runtimeKernel;
    }
    return arith::ConstantOp::create(builder, loc, builder.getI32IntegerAttr(id)).getResult();
  }
  }
  return failure();
}

/// Every dimension but the first is packed (static strides of a row-major row): a
/// column slice of a wider tensor, reshaped or not.
bool hasContiguousRows(MemRefType type) {
  auto [strides, offset] = type.getStridesAndOffset();
  int64_t expected = 1;
  for (int64_t dim = type.getRank() - 1; dim >= 1; --dim) {
    if (strides[dim] != expected || type.isDynamicDim(dim))
      return false;
    expected *= type.getDimSize(dim);
  }
  return true;
}

/// Whether `type` is dense row-major, wherever it starts: a view of whole leading
/// indices of a dense buffer (gpt-oss's gate and up halves of one expert weight) is.
bool isDenseWithOffset(MemRefType type) {
  if (type.getLayout().isIdentity())
    return true;
  if (!hasContiguousRows(type))
    return false;
  if (type.getRank() <= 1)
    return type.getRank() == 0 || type.getStridesAndOffset().first[0] == 1;
  int64_t inner = 1;
  for (int64_t dim = 1; dim < type.getRank(); ++dim)
    inner *= type.getDimSize(dim);
  return type.getStridesAndOffset().first[0] == inner;
}

/// Checks what the runtime's kernels can take before any IR is built: dense buffers of
/// bf16 (tensors) or i32 (indices), and kernels the runtime implements.
LogicalResult checkArguments(Operation *op, const RuntimeCall &call) {
  for (const RuntimeArg &arg : call.args) {
    if (arg.kind == RuntimeArg::Kind::kernel && !arg.symbol.empty()) {
      const KernelVariant *variant = KernelRegistry::global().lookup(arg.symbol);
      if (!variant || !variant->implemented || variant->runtimeKernel == 0)
        return op->emitOpError() << "kernel '" << arg.symbol
                                 << "' is planned but not implemented; it cannot be lowered";
    }
    if (arg.kind != RuntimeArg::Kind::pointer || !arg.buffer)
      continue;
    auto type = cast<MemRefType>(arg.buffer.getType());
    if (!isDenseWithOffset(type) && !(arg.strided && hasContiguousRows(type)))
      return op->emitOpError() << "the runtime's kernels take dense row-major buffers"
                               << (arg.strided ? " (rows may be strided)" : "") << ", got "
                               << type;
    Type element = type.getElementType();
    if (arg.f32Data) {
      if (!element.isF32())
        return op->emitOpError() << "the runtime takes this parameter as f32, got " << type;
      continue;
    }
    // i8: raw scratch bytes (kiln.moe's routing and pointer arrays).
    if (!element.isBF16() && !element.isInteger(32) && !element.isInteger(8))
      return op->emitOpError() << "the runtime's kernels take bf16 tensors, i32 indices and "
                                  "i8 scratch, got "
                               << type;
  }
  return success();
}

/// Every RuntimeCallOpInterface op on buffers becomes `func.call @callee(ctx, ...)`.
struct RuntimeCallLowering : public OpInterfaceRewritePattern<RuntimeCallOpInterface> {
  using OpInterfaceRewritePattern::OpInterfaceRewritePattern;

  LogicalResult matchAndRewrite(RuntimeCallOpInterface op,
                                PatternRewriter &rewriter) const override {
    FailureOr<Value> context = contextOf(op);
    if (failed(context))
      return failure();
    scf::ForOp loop = layerLoopOf(op);
    auto cached = dyn_cast<CachedOpInterface>(op.getOperation());
    if (loop && cached && !cached.hasPerLayerRuntimeCall())
      return op->emitOpError() << "is in a layer loop, but its runtime call does not take its "
                                  "layer and cache offsets per layer; run kiln-expand-layers";
    FailureOr<RuntimeCall> call = op.getRuntimeCall();
    if (failed(call) || failed(checkArguments(op, *call)))
      return failure();
    SmallVector<Value> operands = {*context};
    for (const RuntimeArg &arg : call->args) {
      FailureOr<Value> value = materialize(rewriter, op, arg);
      if (failed(value))
        return failure();
      operands.push_back(*value);
    }
    FailureOr<Value> result =
        callRuntime(rewriter, op, call->callee, operands, rewriter.getI32Type());
    if (failed(result))
      return failure();
    // The call of a cached op starts its layer's kernels: kiln-roll-layers anchors on
    // this mark, so that it asks the interface rather than knowing callee names. A
    // layer loop's calls are rolled already: unmarked, kiln-roll-layers leaves them.
    if (cached && !loop)
      result->getDefiningOp()->setAttr(KilnDialect::kLayerAttrName,
                                       rewriter.getI64IntegerAttr(cached.getLayerIndex()));
    rewriter.eraseOp(op);
    return success();
  }
};

/// The runtime's base pointers, fetched once at the top of each function.
class BasePointers {
public:
  FailureOr<Value> get(Operation *user, StringRef function) {
    FailureOr<Value> context = contextOf(user);
    if (failed(context))
      return failure();
    Value &cached = cache[{context->getParentBlock(), function}];
    if (cached)
      return cached;
    OpBuilder builder = OpBuilder::atBlockBegin(context->getParentBlock());
    FailureOr<Value> base =
        callRuntime(builder, user, function, {*context}, pointerType(user->getContext()));
    if (succeeded(base))
      cached = *base;
    return base;
  }

private:
  DenseMap<std::pair<Block *, StringRef>, Value> cache;
};

/// `base + offset` bytes as a pointer.
Value advance(OpBuilder &builder, Location loc, Value base, int64_t offset) {
  Value delta = arith::ConstantOp::create(builder, loc, builder.getI64IntegerAttr(offset));
  return LLVM::GEPOp::create(builder, loc, base.getType(), builder.getI8Type(), base,
                             ValueRange{delta});
}

/// Rewrites the ops that produce buffers (inputs, planned activations, weights) into
/// `kiln.buffer_from_pointer` over the runtime's pointers.
LogicalResult materializeBuffers(ModuleOp module) {
  BasePointers bases;
  SymbolTable symbols(module);
  SmallVector<Operation *> producers;
  module.walk([&](Operation *op) {
    if (isa<InputOp, ActivationBufferOp>(op) ||
        (isa<WeightRefOp, WeightMemberOp>(op) && isa<MemRefType>(op->getResult(0).getType())))
      producers.push_back(op);
  });
  for (Operation *op : producers) {
    OpBuilder builder(op);
    Location loc = op->getLoc();
    Value pointer;
    SmallVector<Value> sizes;
    if (auto input = dyn_cast<InputOp>(op)) {
      FailureOr<Value> context = contextOf(op);
      if (failed(context))
        return failure();
      Value kind = arith::ConstantOp::create(
          builder, loc, builder.getI32IntegerAttr(static_cast<int32_t>(input.getKind())));
      FailureOr<Value> data = callRuntime(builder, op, "kiln_rt_input", {*context, kind},
                                          pointerType(op->getContext()));
      FailureOr<Value> size = callRuntime(builder, op, "kiln_rt_input_size",
                                          {*context, kind}, builder.getI64Type());
      if (failed(data) || failed(size))
        return failure();
      pointer = *data;
      sizes.push_back(arith::IndexCastOp::create(builder, loc, builder.getIndexType(), *size));
    } else if (auto activation = dyn_cast<ActivationBufferOp>(op)) {
      FailureOr<Value> base = bases.get(op, "kiln_rt_activations");
      if (failed(base))
        return failure();
      pointer = advance(builder, loc, *base, activation.getOffset());
      llvm::append_range(sizes, activation.getSizes());
    } else if (auto member = dyn_cast<WeightMemberOp>(op)) {
      auto family = symbols.lookup<WeightFamilyOp>(member.getFamily());
      if (!family || !family.getOffset() || !family.getStride())
        return op->emitOpError() << "weight family '" << member.getFamily()
                                 << "' has no planned offset and stride; run kiln-plan-memory";
      FailureOr<Value> base = bases.get(op, "kiln_rt_weights");
      if (failed(base))
        return failure();
      // Member i sits at offset + i * stride (kiln-plan-memory's member-major layout).
      // One statement an op: the order of function arguments' evaluation is the host
      // compiler's, and the IR must not depend on it.
      Value index = i64Of(builder, loc, member.getIndex());
      Value stride =
          arith::ConstantOp::create(builder, loc, builder.getI64IntegerAttr(*family.getStride()));
      Value scaled = arith::MulIOp::create(builder, loc, index, stride);
      Value offset =
          arith::ConstantOp::create(builder, loc, builder.getI64IntegerAttr(*family.getOffset()));
      Value delta = arith::AddIOp::create(builder, loc, scaled, offset);
      pointer = LLVM::GEPOp::create(builder, loc, base->getType(), builder.getI8Type(), *base,
                                    ValueRange{delta});
    } else {
      auto ref = cast<WeightRefOp>(op);
      auto weight = symbols.lookup<WeightOp>(ref.getWeight());
      if (!weight || !weight.getOffset())
        return op->emitOpError() << "weight '" << ref.getWeight()
                                 << "' has no planned offset; run kiln-plan-memory";
      FailureOr<Value> base = bases.get(op, "kiln_rt_weights");
      if (failed(base))
        return failure();
      pointer = advance(builder, loc, *base, *weight.getOffset());
    }
    Value buffer = BufferFromPointerOp::create(builder, loc, op->getResult(0).getType(),
                                               pointer, sizes);
    op->getResult(0).replaceAllUsesWith(buffer);
    op->erase();
  }
  return success();
}

/// `func.func @kiln_model_manifest() -> !llvm.ptr` returning the manifest text.
void emitManifest(ModuleOp module, StringRef text) {
  MLIRContext *context = module.getContext();
  OpBuilder builder = OpBuilder::atBlockEnd(module.getBody());
  Location loc = module.getLoc();
  std::string data = text.str();
  data.push_back('\0');
  auto arrayType = LLVM::LLVMArrayType::get(IntegerType::get(context, 8), data.size());
  LLVM::GlobalOp::create(builder, loc, arrayType, /*isConstant=*/true,
                         LLVM::Linkage::Internal, "kiln_manifest_text",
                         builder.getStringAttr(data));
  auto fn = func::FuncOp::create(builder, loc, "kiln_model_manifest",
                                 builder.getFunctionType({}, {pointerType(context)}));
  builder.setInsertionPointToStart(fn.addEntryBlock());
  Value address = LLVM::AddressOfOp::create(builder, loc, pointerType(context),
                                            "kiln_manifest_text");
  func::ReturnOp::create(builder, loc, address);
}

struct ConvertKilnToRuntimeCallsPass
    : public kiln::impl::ConvertKilnToRuntimeCallsBase<ConvertKilnToRuntimeCallsPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    bool isModel = module->hasAttr(KilnDialect::kDeviceMemoryAttrName);
    std::string manifest;
    if (isModel) {
      FailureOr<std::string> text = buildManifest(module);
      if (failed(text))
        return signalPassFailure();
      manifest = std::move(*text);
    }
    if (failed(materializeBuffers(module)))
      return signalPassFailure();

    // A compiled model's buffers are device memory: a copy between them would run on
    // the host. Bufferization leaves one where an op writes into a tensor read later;
    // every op must write a destination of its own (docs/overview.md). An embedder's
    // module (no plan) keeps its copies: its buffers are its own business.
    WalkResult copies = module.walk([&](memref::CopyOp copy) {
      if (!isModel)
        return WalkResult::advance();
      copy.emitError() << "a copy between the step's buffers has no runtime call (an op "
                          "writes into a tensor that is read later); give it a "
                          "destination of its own";
      return WalkResult::interrupt();
    });
    if (copies.wasInterrupted())
      return signalPassFailure();

    ConversionTarget target(getContext());
    target.addLegalDialect<func::FuncDialect, arith::ArithDialect, memref::MemRefDialect,
                           LLVM::LLVMDialect>();
    target.addIllegalDialect<KilnDialect>();
    target.addLegalOp<BufferFromPointerOp, CacheResourceOp, WeightOp, WeightFamilyOp>();
    RewritePatternSet patterns(&getContext());
    populateKilnToRuntimeCallPatterns(patterns);
    unsigned before = countCalls(module);
    if (failed(applyPartialConversion(module, target, std::move(patterns))))
      return signalPassFailure();
    numCalls += countCalls(module) - before;

    SmallVector<Operation *> dead;
    module.walk([&](Operation *op) {
      if (isa<WeightOp, WeightFamilyOp>(op) || (isa<CacheResourceOp>(op) && op->use_empty()))
        dead.push_back(op);
    });
    for (Operation *op : dead)
      op->erase();
    if (isModel)
      emitManifest(module, manifest);
  }

  static unsigned countCalls(ModuleOp module) {
    unsigned calls = 0;
    module.walk([&](func::CallOp) { ++calls; });
    return calls;
  }
};
} // namespace

void kiln::populateKilnToRuntimeCallPatterns(RewritePatternSet &patterns) {
  patterns.add<RuntimeCallLowering>(patterns.getContext());
}
