//===- PlanActivations.cpp - kiln-plan-activations --------------------------===//
//
// Every intermediate buffer of a compiled step gets a planned place in one activation
// arena, so the runtime allocates the arena once and a step allocates nothing. The
// sizes of token-dimension buffers are bounded by the step limits, so the plan is a
// compile-time number the report shows and the runtime checks.
//
//===----------------------------------------------------------------------===//
#include "PassDetail.h"
#include "kiln/Runtime/Layout.h"
#include "kiln/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/Interfaces/DestinationStyleOpInterface.h"
#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/ViewLikeInterface.h"
#include "llvm/Support/MathExtras.h"

#include <algorithm>
#include <limits>

namespace kiln {
#define GEN_PASS_DEF_KILNPLANACTIVATIONS
#include "kiln/Transforms/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {
constexpr uint64_t kAlignment = 256;

/// One allocation with its size bound and lifetime (op positions in the block).
struct PlannedBuffer {
  memref::AllocOp alloc;
  uint64_t bytes = 0;
  unsigned start = 0, end = 0;
  uint64_t offset = 0;
  /// Buffers (indices) this one may be placed exactly over: inputs of the op that first
  /// writes it, which die there and which that op may overwrite
  /// (OverwritesInputsOpInterface).
  SmallVector<unsigned, 2> overwritable;
  bool placed = false;
};

/// Upper bounds of dynamic sizes, traced back to the step's inputs.
class SizeBounds {
public:
  explicit SizeBounds(const StepLimits &limits) : limits(limits) {}

  std::optional<uint64_t> ofValue(Value size) {
    if (std::optional<int64_t> constant = getConstantIntValue(size))
      return *constant >= 0 ? std::optional<uint64_t>(*constant) : std::nullopt;
    if (auto dim = size.getDefiningOp<memref::DimOp>())
      if (std::optional<int64_t> index = dim.getConstantIndex())
        return ofDim(dim.getSource(), *index);
    return std::nullopt;
  }

  std::optional<uint64_t> ofDim(Value buffer, int64_t dim) {
    auto type = dyn_cast<MemRefType>(buffer.getType());
    if (!type || dim < 0 || dim >= type.getRank())
      return std::nullopt;
    if (!type.isDynamicDim(dim))
      return type.getDimSize(dim);
    Operation *def = buffer.getDefiningOp();
    if (auto input = dyn_cast_or_null<InputOp>(def))
      return input.getKind() == InputKind::logit_rows ? limits.maxLogitRows
                                                       : limits.maxStepTokens;
    if (auto alloc = dyn_cast_or_null<memref::AllocOp>(def))
      return ofMixed(alloc.getMixedSizes()[dim]);
    if (auto expand = dyn_cast_or_null<memref::ExpandShapeOp>(def))
      return ofMixed(expand.getMixedOutputShape()[dim]);
    if (auto collapse = dyn_cast_or_null<memref::CollapseShapeOp>(def)) {
      uint64_t product = 1;
      for (int64_t sourceDim : collapse.getReassociationIndices()[dim]) {
        std::optional<uint64_t> bound = ofDim(collapse.getSrc(), sourceDim);
        if (!bound || __builtin_mul_overflow(product, *bound, &product))
          return std::nullopt;
      }
      return product;
    }
    return std::nullopt;
  }

private:
  std::optional<uint64_t> ofMixed(OpFoldResult size) {
    if (auto attr = dyn_cast<Attribute>(size))
      return cast<IntegerAttr>(attr).getInt();
    return ofValue(cast<Value>(size));
  }

  StepLimits limits;
};

/// The position in `block` of the op holding `op` (op itself or an ancestor).
std::optional<unsigned> positionIn(Block &block, Operation *op,
                                   const DenseMap<Operation *, unsigned> &positions) {
  Operation *ancestor = block.findAncestorOpInBlock(*op);
  if (!ancestor)
    return std::nullopt;
  return positions.lookup(ancestor);
}

/// Calls `visit(user)` for every user of `root` and of the views of it.
template <typename Visit> void forEachUser(Value root, Visit visit) {
  SmallVector<Value> worklist = {root};
  while (!worklist.empty()) {
    Value value = worklist.pop_back_val();
    for (Operation *user : value.getUsers()) {
      visit(user);
      if (auto view = dyn_cast<ViewLikeOpInterface>(user))
        if (view.getViewSource() == value)
          llvm::append_range(worklist, user->getResults());
    }
  }
}

/// Last position at which `root` or a view of it is used; the block's end when it
/// leaves the function (returned or handed to the runtime as an output).
unsigned lastUse(Value root, Block &block, const DenseMap<Operation *, unsigned> &positions) {
  unsigned last = 0;
  bool leaves = false;
  forEachUser(root, [&](Operation *user) {
    leaves |= isa<func::ReturnOp, OutputOp>(user);
    if (std::optional<unsigned> position = positionIn(block, user, positions))
      last = std::max(last, *position);
  });
  return leaves ? std::numeric_limits<unsigned>::max() : last;
}

/// First position at which `root` or a view of it is used.
unsigned firstUse(Value root, Block &block, const DenseMap<Operation *, unsigned> &positions) {
  unsigned first = std::numeric_limits<unsigned>::max();
  forEachUser(root, [&](Operation *user) {
    if (std::optional<unsigned> position = positionIn(block, user, positions))
      first = std::min(first, *position);
  });
  return first;
}

/// Exactly over one of `buffer`'s overwritable inputs (placed, still live, no smaller),
/// where no other live buffer overlaps: the offset, if there is one.
std::optional<uint64_t> overwriteOffset(const PlannedBuffer &buffer,
                                        ArrayRef<PlannedBuffer> buffers,
                                        ArrayRef<PlannedBuffer *> active) {
  for (unsigned index : buffer.overwritable) {
    const PlannedBuffer &input = buffers[index];
    if (!input.placed || input.bytes < buffer.bytes || !llvm::is_contained(active, &input))
      continue;
    const uint64_t begin = input.offset, end = input.offset + buffer.bytes;
    bool free = llvm::none_of(active, [&](const PlannedBuffer *other) {
      return other != &input && other->offset < end && begin < other->offset + other->bytes;
    });
    if (free)
      return begin;
  }
  return std::nullopt;
}

/// Linear-scan first fit: buffers in order of allocation; each goes exactly over an
/// input it may overwrite (see PlannedBuffer::overwritable) when it can, else at the
/// lowest aligned offset that overlaps no buffer still live (the active set, small in a
/// decoder: the residual stream and a layer's temporaries), so planning stays linear in
/// the number of buffers. Returns the arena size.
uint64_t assignOffsets(MutableArrayRef<PlannedBuffer> buffers) {
  SmallVector<PlannedBuffer *> order;
  for (PlannedBuffer &buffer : buffers)
    order.push_back(&buffer);
  llvm::stable_sort(order, [](PlannedBuffer *a, PlannedBuffer *b) { return a->start < b->start; });
  SmallVector<PlannedBuffer *> active;
  uint64_t arena = 0;
  for (PlannedBuffer *buffer : order) {
    llvm::erase_if(active, [&](PlannedBuffer *other) { return other->end < buffer->start; });
    std::optional<uint64_t> over = overwriteOffset(*buffer, buffers, active);
    SmallVector<std::pair<uint64_t, uint64_t>> taken; // [begin, end) in bytes
    for (PlannedBuffer *other : active)
      taken.push_back({other->offset, other->offset + other->bytes});
    llvm::sort(taken);
    uint64_t offset = 0;
    for (auto [begin, end] : taken) {
      if (offset + buffer->bytes <= begin)
        break;
      offset = std::max(offset, llvm::alignTo(end, kAlignment));
    }
    buffer->offset = over.value_or(offset);
    buffer->placed = true;
    arena = std::max(arena, llvm::alignTo(buffer->offset + buffer->bytes, kAlignment));
    active.push_back(buffer);
  }
  return arena;
}

struct PlanActivationsPass
    : public kiln::impl::KilnPlanActivationsBase<PlanActivationsPass> {
  using KilnPlanActivationsBase::KilnPlanActivationsBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    ModuleConfig config = getModuleConfig(module);
    if (!config.runtime) {
      (void)emitMissingRuntime(module, "kiln-plan-activations");
      return signalPassFailure();
    }
    StepLimits limits = getStepLimits(config);
    uint64_t arena = 0, launches = 0;
    for (auto fn : module.getOps<func::FuncOp>()) {
      if (!hasContextArgument(fn))
        continue;
      std::optional<uint64_t> bytes = planFunction(fn, limits);
      if (!bytes)
        return signalPassFailure();
      arena = std::max(arena, *bytes);
      launches = std::max(launches, estimateLaunches(fn));
    }
    arenaBytes = arena;
    DeviceMemoryAttr memory = deviceMemory(module, config, limits, arena, launches);
    module->setAttr(KilnDialect::kDeviceMemoryAttrName, memory);
    if (failed(checkFitsTarget(module, config.target, planShardDivisor(config),
                               config.runtime.getTp(), memory)))
      return signalPassFailure();
  }

  /// The cache plan was checked against its budget, but the activations and the
  /// per-step buffers grow with max_step_tokens: the whole device total must fit the
  /// target's memory. The error lists every category, largest first, and says which
  /// limit shrinks the largest. With tensor parallelism a rank holds 1/tp of the
  /// weights (the caches are already per rank): `divisor` is what still divides the
  /// declared weights (1 for a per-rank graph), `tp` the ranks.
  static LogicalResult checkFitsTarget(ModuleOp module, TargetAttr target, unsigned divisor,
                                       unsigned tp, DeviceMemoryAttr memory) {
    if (!target || target.getMemoryBytes() == 0)
      return success();
    uint64_t weights = memory.getWeights() / std::max(1u, divisor);
    std::optional<uint64_t> total = 0;
    for (uint64_t part :
         {weights, memory.getCaches(), memory.getActivations(), memory.getWorkspace(),
          memory.getIo(), memory.getCudaGraphs(), memory.getCollectives()})
      if (total && __builtin_add_overflow(*total, part, &*total))
        total = std::nullopt;
    if (total && *total <= target.getMemoryBytes())
      return success();
    struct Category {
      const char *name;
      uint64_t bytes;
      const char *remedy;
    };
    SmallVector<Category> categories = {
        {tp > 1 ? "weights per rank" : "weights", weights, "use more tensor-parallel ranks"},
        {"caches", memory.getCaches(), "lower max_batch or max_seq_len"},
        {"activations", memory.getActivations(),
         "lower max_step_tokens (it bounds every activation buffer)"},
        {"workspace", memory.getWorkspace(), "lower max_batch or the draft length"},
        {"io", memory.getIo(), "lower max_step_tokens or max_batch"},
        {"cuda graphs", memory.getCudaGraphs(), "lower --cuda-graphs"}};
    if (memory.getCollectives()) // only a model with collectives reserves it
      categories.push_back({"NCCL communicator", memory.getCollectives(),
                            "lower --collective-workspace-mib if NCCL takes less"});
    llvm::stable_sort(categories,
                      [](const Category &a, const Category &b) { return a.bytes > b.bytes; });
    InFlightDiagnostic diag = module.emitError()
                              << "the compiled model needs "
                              << (total ? formatBytes(*total) : "more than 16 EiB")
                              << " of device memory, more than the "
                              << formatBytes(target.getMemoryBytes()) << " of '"
                              << target.getName() << "': ";
    llvm::interleaveComma(categories, diag, [&](const Category &category) {
      diag << category.name << " " << formatBytes(category.bytes);
    });
    diag << " (steps of up to " << memory.getMaxStepTokens() << " tokens); "
         << categories.front().remedy;
    return failure();
  }

  static bool hasContextArgument(func::FuncOp fn) {
    for (unsigned i = 0; i < fn.getNumArguments(); ++i)
      if (fn.getArgAttr(i, KilnDialect::kContextAttrName))
        return true;
    return false;
  }

  std::optional<uint64_t> planFunction(func::FuncOp fn, const StepLimits &limits) {
    if (!fn.getBody().hasOneBlock()) {
      fn.emitError() << "kiln-plan-activations needs straight-line code (one block)";
      return std::nullopt;
    }
    Block &block = fn.getBody().front();
    DenseMap<Operation *, unsigned> positions;
    for (auto [index, op] : llvm::enumerate(block))
      positions[&op] = index;

    SizeBounds bounds(limits);
    SmallVector<PlannedBuffer> buffers;
    WalkResult walk = fn.walk([&](Operation *op) {
      if (isa<memref::AllocaOp>(op)) {
        op->emitError() << "stack buffers (memref.alloca) are not supported in a compiled step";
        return WalkResult::interrupt();
      }
      auto alloc = dyn_cast<memref::AllocOp>(op);
      if (!alloc)
        return WalkResult::advance();
      std::optional<uint64_t> bytes = allocationBytes(alloc, bounds);
      if (!bytes)
        return WalkResult::interrupt();
      unsigned start = positions.lookup(block.findAncestorOpInBlock(*op));
      buffers.push_back({alloc, *bytes, start, lastUse(alloc, block, positions)});
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return std::nullopt;
    findOverwritableInputs(buffers, block, positions);

    uint64_t arena = assignOffsets(buffers);
    for (PlannedBuffer &buffer : buffers)
      replaceWithArenaBuffer(buffer);
    numBuffers += buffers.size();
    return arena;
  }

  /// For each buffer first used as the init of an op that may overwrite some of its
  /// inputs: those inputs that are whole buffers of this plan and die at that op.
  static void findOverwritableInputs(MutableArrayRef<PlannedBuffer> buffers, Block &block,
                                     const DenseMap<Operation *, unsigned> &positions) {
    DenseMap<Value, unsigned> indexOf;
    for (auto [index, buffer] : llvm::enumerate(buffers))
      indexOf[buffer.alloc.getResult()] = index;
    for (PlannedBuffer &buffer : buffers) {
      Value value = buffer.alloc.getResult();
      const unsigned first = firstUse(value, block, positions);
      for (OpOperand &init : value.getUses()) {
        auto op = dyn_cast<OverwritesInputsOpInterface>(init.getOwner());
        if (!op || positionIn(block, op, positions) != first)
          continue;
        for (OpOperand &input : op->getOpOperands()) {
          auto it = indexOf.find(input.get());
          if (it == indexOf.end() || &input == &init || !op.mayOverwriteInput(init, input))
            continue;
          if (buffers[it->second].end == first)
            buffer.overwritable.push_back(it->second);
        }
      }
    }
  }

  std::optional<uint64_t> allocationBytes(memref::AllocOp alloc, SizeBounds &bounds) {
    MemRefType type = alloc.getType();
    if (!type.getLayout().isIdentity()) {
      alloc.emitError() << "activation buffers need the identity layout, got " << type;
      return std::nullopt;
    }
    uint64_t bytes = getElementBytes(type.getElementType());
    for (int64_t dim = 0; dim < type.getRank(); ++dim) {
      std::optional<uint64_t> size = bounds.ofDim(alloc.getResult(), dim);
      if (!size) {
        alloc.emitError() << "cannot bound dimension " << dim << " of this " << type
                          << " buffer; dynamic sizes must come from the step's inputs "
                             "(kiln.input) or constants";
        return std::nullopt;
      }
      if (__builtin_mul_overflow(bytes, *size, &bytes)) {
        alloc.emitError() << "the size of this " << type << " buffer overflows 64 bits";
        return std::nullopt;
      }
    }
    return bytes;
  }

  void replaceWithArenaBuffer(PlannedBuffer &buffer) {
    memref::AllocOp alloc = buffer.alloc;
    for (Operation *user : llvm::make_early_inc_range(alloc->getUsers()))
      if (isa<memref::DeallocOp>(user))
        user->erase();
    OpBuilder builder(alloc);
    Value replacement = ActivationBufferOp::create(
        builder, alloc.getLoc(), alloc.getType(), static_cast<int64_t>(buffer.offset),
        static_cast<int64_t>(buffer.bytes), alloc.getDynamicSizes());
    alloc.replaceAllUsesWith(replacement);
    alloc.erase();
  }

  /// An upper bound of the kernel launches of one decode step, for the CUDA graphs'
  /// reserve: what each runtime call says it may launch (two by default: a GEMM may add
  /// a split-K reduction, split-KV attention a combine), plus the step's input copy and
  /// argmax.
  static uint64_t estimateLaunches(func::FuncOp fn) {
    uint64_t launches = 2;
    fn.walk([&](RuntimeCallOpInterface op) { launches += op.getMaxDecodeLaunches(); });
    return launches;
  }

  DeviceMemoryAttr deviceMemory(ModuleOp module, const ModuleConfig &config,
                                const StepLimits &limits, uint64_t arena, uint64_t launches) {
    uint64_t weights = 0;
    for (WeightOp weight : module.getOps<WeightOp>())
      if (std::optional<int64_t> offset = weight.getOffset())
        weights = std::max(weights, llvm::alignTo(*offset + weight.getBytes().value_or(0),
                                                  kAlignment));
    auto plan = module->getAttrOfType<PlanAttr>(KilnDialect::kPlanAttrName);
    uint64_t caches = plan ? plan.getTotalBytes() : 0;
    int64_t maxHeads = 1, maxHeadDim = 1;
    RuntimeAttr runtime = config.runtime;
    // Split-KV partials are sized by the widest attention layer (its kernel shape).
    module.walk([&](CachedOpInterface op) {
      if (op.getOpFamily() != OpFamily::attention)
        return;
      KernelShape shape = op.getKernelShape(runtime);
      maxHeads = std::max<int64_t>(maxHeads, shape.numHeads);
      maxHeadDim = std::max<int64_t>(maxHeadDim, shape.headDim);
    });
    uint64_t workspace = kiln_rt_workspace_bytes(static_cast<int64_t>(limits.maxLogitRows),
                                                 maxHeads, maxHeadDim);
    uint64_t io = kiln_rt_io_bytes(runtime.getMaxBatch(),
                                   static_cast<int64_t>(limits.maxStepTokens),
                                   static_cast<int64_t>(limits.maxLogitRows),
                                   static_cast<int64_t>(runtime.getMaxPagesPerSequence()),
                                   runtime.getKvRingWindow() > 0 ? 1 : 0);
    // cudaMalloc hands out whole 2 MiB pages: the padding goes to the workspace (the
    // runtime gives it to split-KV partials), so the device memory used equals the plan.
    uint64_t subtotal = weights + caches + arena + workspace + io;
    workspace += kiln_rt_granule_padding(subtotal);
    uint64_t numBuffersPlanned = 0;
    module.walk([&](ActivationBufferOp) { ++numBuffersPlanned; });
    // Shapes beyond those decode steps can have are never captured: no reserve for them.
    const uint64_t graphs =
        kiln_rt_graph_reserve_bytes(runtime.getCapturableShapes(limits.maxDraftLen), launches);
    // A rank's NCCL communicator: NCCL's own buffers, made when the context joins it
    // (docs/tensor-parallel.md); loading refuses one that took more than this.
    bool collectives = runtime.getTp() > 1;
    module.walk([&](Operation *op) {
      if (isa<AllReduceOp, AllGatherOp>(op)) {
        collectives = true;
        return WalkResult::interrupt();
      }
      return WalkResult::advance();
    });
    return DeviceMemoryAttr::get(module.getContext(), weights, caches, arena, workspace, io,
                                 limits.maxStepTokens, limits.maxLogitRows, numBuffersPlanned,
                                 graphs, collectives ? uint64_t(collectiveBytes) : 0);
  }
};
} // namespace
