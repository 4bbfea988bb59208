//===- KilnToCuda.cpp - convert-kiln-to-cuda ------------------------------===//
//
// Cached ops become calls into the Kiln runtime (include/kiln/Runtime/Runtime.h)
// rather than gpu.launch_func on a gpu.binary: Kiln's kernels choose tiles and
// split-KV on the host, validate their arguments and report errors by name, and the
// runtime owns the fatbin; see docs/runtime.md.
//
//===----------------------------------------------------------------------===//
#include "kiln/Conversion/KilnToCuda.h"
#include "kiln/Dialect/Kiln.h"
#include "kiln/Registry/KernelRegistry.h"

#include "mlir/IR/IRMapping.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace kiln {
#define GEN_PASS_DEF_CONVERTKILNTOCUDA
#include "kiln/Conversion/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {
// Values of the runtime ABI (Runtime.h).
constexpr int32_t kDecode = 0, kPrefill = 1;
constexpr int32_t kDtypeBf16 = 0, kDtypeF16 = 1, kDtypeF32 = 2;

struct RuntimeFunction {
  StringLiteral name;
  unsigned numI32Before; // i32 args between ctx and the first i64
  unsigned numI64;
  unsigned numI32After;
};
// attention: phase, layer | kv_offset | heads, kv_heads, head_dim, page, window, kernel, mode
const RuntimeFunction kAttention = {"kiln_rt_attention", 2, 1, 7};
// mla: phase, layer | cache_offset | heads, rank, rope, page, kernel, mode
const RuntimeFunction kMla = {"kiln_rt_mla", 2, 1, 6};
// ssm: phase, layer | state_offset, intermediate_offset | heads, p, n, groups, dtype, kernel
const RuntimeFunction kSsm = {"kiln_rt_ssm", 2, 2, 6};
// conv: phase, layer | state_offset, intermediate_offset | conv_dim, width, silu, kernel
const RuntimeFunction kConv = {"kiln_rt_conv", 2, 2, 4};
const RuntimeFunction kRuntimeFunctions[] = {kAttention, kMla, kSsm, kConv};

FunctionType runtimeFunctionType(MLIRContext *context, const RuntimeFunction &fn) {
  Builder b(context);
  SmallVector<Type> inputs = {LLVM::LLVMPointerType::get(context)};
  inputs.append(fn.numI32Before, b.getI32Type());
  inputs.append(fn.numI64, b.getI64Type());
  inputs.append(fn.numI32After, b.getI32Type());
  return b.getFunctionType(inputs, {b.getI32Type()});
}

int64_t offsetOf(Value resource) {
  if (!resource)
    return -1;
  auto op = resource.getDefiningOp<CacheResourceOp>();
  return op && op.getOffset() ? *op.getOffset() : -1;
}

int32_t runtimeKernelOf(StringAttr name) {
  if (!name)
    return 0;
  const KernelVariant *variant = KernelRegistry::global().lookup(name.getValue());
  return variant ? variant->runtimeKernel : 0;
}

int32_t dtypeCode(Type type) {
  if (type.isF32())
    return kDtypeF32;
  if (type.isF16())
    return kDtypeF16;
  return kDtypeBf16;
}

/// Rewrites one cached op of a step function into `status = kiln_rt_<family>(...)`
/// followed by `cf.cond_br status != 0, ^exit(status), ^next`.
template <typename OpT>
struct LaunchPattern : public OpRewritePattern<OpT> {
  using OpRewritePattern<OpT>::OpRewritePattern;

  /// Integer arguments after the context, in ABI order.
  virtual SmallVector<int64_t> arguments(OpT op, int32_t phase, RuntimeAttr runtime) const = 0;
  virtual const RuntimeFunction &function() const = 0;

  LogicalResult matchAndRewrite(OpT op, PatternRewriter &rewriter) const override {
    auto step = op->template getParentOfType<func::FuncOp>();
    if (!step || !step->hasAttr(kStepPhaseAttrName))
      return rewriter.notifyMatchFailure(op, "not inside a Kiln step function");
    auto module = step->template getParentOfType<ModuleOp>();
    RuntimeAttr runtime = getModuleConfig(module).runtime;
    int32_t phase =
        step->template getAttrOfType<StringAttr>(kStepPhaseAttrName).getValue() == "prefill"
            ? kPrefill
            : kDecode;
    const RuntimeFunction &fn = function();
    SmallVector<int64_t> values = arguments(op, phase, runtime);

    Location loc = op.getLoc();
    Value context = step.getArgument(0);
    SmallVector<Value> operands = {context};
    for (auto [index, value] : llvm::enumerate(values)) {
      bool wide = index >= fn.numI32Before && index < fn.numI32Before + fn.numI64;
      operands.push_back(arith::ConstantOp::create(
          rewriter, loc, rewriter.getIntegerAttr(wide ? rewriter.getI64Type()
                                                      : rewriter.getI32Type(),
                                                 value)));
    }
    auto call = func::CallOp::create(rewriter, loc, fn.name,
                                     TypeRange{rewriter.getI32Type()}, operands);
    Value status = call.getResult(0);
    Value zero = arith::ConstantOp::create(rewriter, loc, rewriter.getI32IntegerAttr(0));
    Value failed =
        arith::CmpIOp::create(rewriter, loc, arith::CmpIPredicate::ne, status, zero);

    Block *current = op->getBlock();
    Block *exit = &step.getBody().back();
    Block *next = rewriter.splitBlock(current, std::next(op->getIterator()));
    rewriter.setInsertionPointToEnd(current);
    cf::CondBranchOp::create(rewriter, loc, failed, exit, ValueRange{status}, next,
                             ValueRange{});
    // Results are bound through the runtime; a placeholder keeps any use valid.
    SmallVector<Value> placeholders;
    rewriter.setInsertionPoint(op);
    for (Type type : op->getResultTypes())
      placeholders.push_back(ub::PoisonOp::create(rewriter, loc, type));
    rewriter.replaceOp(op, placeholders);
    return success();
  }
};

StringAttr kernelFor(Operation *op, int32_t phase) {
  return op->getAttrOfType<StringAttr>(phase == kPrefill ? "prefill_kernel" : "decode_kernel");
}

int64_t specModeOf(Operation *op, int32_t phase) {
  if (phase == kPrefill)
    return static_cast<int64_t>(SpecDecMode::single_token);
  auto mode = op->getAttrOfType<SpecDecModeAttr>("spec_dec_mode");
  return mode ? static_cast<int64_t>(mode.getValue()) : 0;
}

struct AttentionLaunch : LaunchPattern<CachedAttentionOp> {
  using LaunchPattern::LaunchPattern;
  const RuntimeFunction &function() const override { return kAttention; }
  SmallVector<int64_t> arguments(CachedAttentionOp op, int32_t phase,
                                 RuntimeAttr runtime) const override {
    return {phase, op.getLayer(), offsetOf(op.getKv()), op.getNumHeads(), op.getNumKvHeads(),
            op.getHeadDim(), runtime.getPageSize(), op.getSlidingWindow().value_or(0),
            runtimeKernelOf(kernelFor(op, phase)), specModeOf(op, phase)};
  }
};

struct MlaLaunch : LaunchPattern<CachedMlaAttentionOp> {
  using LaunchPattern::LaunchPattern;
  const RuntimeFunction &function() const override { return kMla; }
  SmallVector<int64_t> arguments(CachedMlaAttentionOp op, int32_t phase,
                                 RuntimeAttr runtime) const override {
    return {phase, op.getLayer(), offsetOf(op.getCache()), op.getNumHeads(),
            op.getKvLoraRank(), op.getQkRopeHeadDim(), runtime.getPageSize(),
            runtimeKernelOf(kernelFor(op, phase)), specModeOf(op, phase)};
  }
};

struct SsmLaunch : LaunchPattern<CachedSsmOp> {
  using LaunchPattern::LaunchPattern;
  const RuntimeFunction &function() const override { return kSsm; }
  SmallVector<int64_t> arguments(CachedSsmOp op, int32_t phase,
                                 RuntimeAttr runtime) const override {
    int64_t intermediate = phase == kPrefill ? -1 : offsetOf(op.getIntermediate());
    return {phase, op.getLayer(), offsetOf(op.getState()), intermediate, op.getNumHeads(),
            op.getHeadDim(), op.getStateSize(), op.getNGroups(),
            dtypeCode(runtime.getSsmStateType()), runtimeKernelOf(kernelFor(op, phase))};
  }
};

struct ConvLaunch : LaunchPattern<CachedCausalConvOp> {
  using LaunchPattern::LaunchPattern;
  const RuntimeFunction &function() const override { return kConv; }
  SmallVector<int64_t> arguments(CachedCausalConvOp op, int32_t phase,
                                 RuntimeAttr) const override {
    int64_t intermediate = phase == kPrefill ? -1 : offsetOf(op.getIntermediate());
    return {phase, op.getLayer(), offsetOf(op.getState()), intermediate, op.getConvDim(),
            op.getKernelSize(), op.getSilu() ? 1 : 0, runtimeKernelOf(kernelFor(op, phase))};
  }
};
} // namespace

void kiln::populateKilnToCudaPatterns(RewritePatternSet &patterns) {
  patterns.add<AttentionLaunch, MlaLaunch, SsmLaunch, ConvLaunch>(patterns.getContext());
}

namespace {
enum class Step { prefill, decode, draft };

bool belongsTo(CachedOpInterface op, Step step) {
  bool draft = op.getDraftKind().has_value();
  if (step != Step::draft)
    return !draft;
  return draft && llvm::any_of(op.getCacheSlots(),
                               [](const CacheSlot &slot) { return bool(slot.value); });
}

struct ConvertKilnToCudaPass
    : public kiln::impl::ConvertKilnToCudaBase<ConvertKilnToCudaPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto plan = module->getAttrOfType<PlanAttr>(KilnDialect::kPlanAttrName);
    if (!plan) {
      module.emitError() << "convert-kiln-to-cuda needs the memory plan ('kiln.plan'); "
                            "run kiln-plan-memory (or kiln-deploy) first";
      return signalPassFailure();
    }
    if (!getModuleConfig(module).runtime) {
      module.emitError() << "convert-kiln-to-cuda needs a 'kiln.runtime' module attribute";
      return signalPassFailure();
    }
    SmallVector<func::FuncOp> models;
    if (failed(findModels(module, models)) ||
        llvm::any_of(models, [&](func::FuncOp fn) { return failed(checkLowerable(fn)); }))
      return signalPassFailure();

    declareRuntime(module);
    for (Step step : {Step::prefill, Step::decode, Step::draft})
      buildStep(module, models, step);
    for (func::FuncOp model : models)
      model.erase();

    RewritePatternSet patterns(&getContext());
    populateKilnToCudaPatterns(patterns);
    if (failed(applyPatternsGreedily(module, std::move(patterns))))
      return signalPassFailure();
    eraseLeftovers(module);
    Builder b(&getContext());
    addConstantFunction(module, "kiln_model_arena_bytes", b.getI64IntegerAttr(plan.getTotalBytes()));
    addConstantFunction(module, "kiln_model_speculative_bytes",
                        b.getI64IntegerAttr(plan.getSpeculativeBytes()));
    addConstantFunction(module, "kiln_model_kv_pages",
                        b.getI32IntegerAttr(static_cast<int32_t>(plan.getKvPages())));
  }

  /// The functions holding cached ops: the model, and a draft model's when one was
  /// attached (`draft_<name>`, all of whose layers are draft layers).
  LogicalResult findModels(ModuleOp module, SmallVectorImpl<func::FuncOp> &models) {
    for (auto fn : module.getOps<func::FuncOp>()) {
      bool hasCached = false;
      fn.walk([&](CachedOpInterface) { hasCached = true; });
      if (hasCached)
        models.push_back(fn);
    }
    if (models.empty())
      return module.emitError() << "convert-kiln-to-cuda found no cached op; run "
                                   "kiln-insert-caches (or kiln-deploy) first";
    return success();
  }

  /// Every op that will launch has selected, implemented kernels and planned slots.
  LogicalResult checkLowerable(func::FuncOp model) {
    WalkResult result = model.walk([&](CachedOpInterface op) {
      if (!belongsTo(op, Step::decode) && !belongsTo(op, Step::draft))
        return WalkResult::advance();
      for (StringLiteral attr : {StringLiteral("decode_kernel"), StringLiteral("prefill_kernel")}) {
        auto name = op->getAttrOfType<StringAttr>(attr);
        if (!name) {
          op->emitError() << stringifyOpFamily(op.getOpFamily()) << " layer "
                          << op.getLayerIndex() << " has no '" << attr
                          << "'; run kiln-select-kernels first";
          return WalkResult::interrupt();
        }
        if (runtimeKernelOf(name) == 0) {
          op->emitError() << "kernel '" << name.getValue() << "' of "
                          << stringifyOpFamily(op.getOpFamily()) << " layer "
                          << op.getLayerIndex()
                          << " is planned but not implemented; it cannot be lowered";
          return WalkResult::interrupt();
        }
      }
      for (const CacheSlot &slot : op.getCacheSlots())
        if (slot.value && offsetOf(slot.value) < 0) {
          op->emitError() << "resource in slot '" << slot.name << "' of layer "
                          << op.getLayerIndex() << " has no planned offset; run "
                             "kiln-plan-memory first";
          return WalkResult::interrupt();
        }
      return WalkResult::advance();
    });
    return failure(result.wasInterrupted());
  }

  void declareRuntime(ModuleOp module) {
    OpBuilder builder = OpBuilder::atBlockBegin(module.getBody());
    for (const RuntimeFunction &fn : kRuntimeFunctions) {
      if (module.lookupSymbol(fn.name))
        continue;
      auto decl = func::FuncOp::create(builder, module.getLoc(), fn.name,
                                       runtimeFunctionType(&getContext(), fn));
      decl.setPrivate();
    }
  }

  /// `func @kiln_model_<step>_step(%ctx) -> i32` holding clones of the step's cached
  /// ops (tensor inputs replaced by placeholders) before the patterns run.
  void buildStep(ModuleOp module, ArrayRef<func::FuncOp> models, Step step) {
    SmallVector<CachedOpInterface> ops;
    for (func::FuncOp model : models)
      model.walk([&](CachedOpInterface op) {
        if (belongsTo(op, step))
          ops.push_back(op);
      });
    Location loc = func::FuncOp(models.front()).getLoc();
    if (step == Step::draft && ops.empty())
      return;
    MLIRContext *context = &getContext();
    StringRef name = step == Step::prefill  ? "kiln_model_prefill_step"
                     : step == Step::decode ? "kiln_model_decode_step"
                                            : "kiln_model_draft_step";
    OpBuilder builder = OpBuilder::atBlockEnd(module.getBody());
    Type i32 = builder.getI32Type();
    auto fn = func::FuncOp::create(
        builder, loc, name,
        builder.getFunctionType({LLVM::LLVMPointerType::get(context)}, {i32}));
    fn->setAttr(kStepPhaseAttrName,
                builder.getStringAttr(step == Step::prefill ? "prefill" : "decode"));
    Block *entry = fn.addEntryBlock();
    Block *exit = builder.createBlock(&fn.getBody(), fn.getBody().end(), {i32},
                                      {loc});
    func::ReturnOp::create(builder, loc, exit->getArgument(0));

    builder.setInsertionPointToStart(entry);
    IRMapping mapping;
    for (CachedOpInterface op : ops) {
      for (Value operand : op->getOperands()) {
        if (mapping.contains(operand))
          continue;
        if (auto resource = operand.getDefiningOp<CacheResourceOp>())
          mapping.map(operand, builder.clone(*resource)->getResult(0));
        else
          mapping.map(operand, ub::PoisonOp::create(builder, op.getLoc(), operand.getType()));
      }
      builder.clone(*op, mapping);
    }
    Value ok = arith::ConstantOp::create(builder, loc, builder.getI32IntegerAttr(0));
    cf::BranchOp::create(builder, loc, exit, ValueRange{ok});
    numLaunches += ops.size();
  }

  void eraseLeftovers(ModuleOp module) {
    SmallVector<Operation *> dead;
    module.walk([&](Operation *op) {
      if (isa<CacheResourceOp, ub::PoisonOp>(op))
        dead.push_back(op);
    });
    for (Operation *op : llvm::reverse(dead))
      if (op->use_empty())
        op->erase();
    module.walk([](func::FuncOp fn) { fn->removeAttr(kStepPhaseAttrName); });
  }

  /// `func @name() -> type { return value }`: the plan's numbers for the serving side.
  void addConstantFunction(ModuleOp module, StringRef name, IntegerAttr value) {
    OpBuilder builder = OpBuilder::atBlockEnd(module.getBody());
    auto fn = func::FuncOp::create(builder, module.getLoc(), name,
                                   builder.getFunctionType({}, {value.getType()}));
    builder.setInsertionPointToStart(fn.addEntryBlock());
    Value constant = arith::ConstantOp::create(builder, module.getLoc(), value);
    func::ReturnOp::create(builder, module.getLoc(), constant);
  }
};
} // namespace
