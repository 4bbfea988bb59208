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
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/DestinationStyleOpInterface.h"
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

/// One allocation with its size bound and lifetime (op positions in the function, in
/// program order, a layer loop's body once). A layer loop's carried buffer (see
/// LayerLoop) is a buffer without an allocation of its own, pinned to its initial
/// value's place.
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
  /// The buffer (index) whose offset this one must take: a layer loop's carried value
  /// and the buffer yielded for it live where the loop's initial value lives.
  std::optional<unsigned> pinnedTo;
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
    // A layer loop's iteration argument has its initial value's sizes (the loop yields
    // a buffer of the same type; planning checks that its bound is no larger).
    if (auto arg = dyn_cast<BlockArgument>(buffer))
      if (auto loop = dyn_cast<scf::ForOp>(arg.getOwner()->getParentOp()))
        if (OpOperand *init = loop.getTiedLoopInit(arg))
          return ofDim(init->get(), dim);
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

/// Op positions in program order (pre-order: a layer loop, then its body once) and
/// where each layer loop's body ends.
struct Positions {
  DenseMap<Operation *, unsigned> of;
  DenseMap<Operation *, unsigned> loopEnd;

  /// Where a use by `user` of a value defined at `def` (an op, or the op owning a block
  /// argument) ends: inside a layer loop that does not hold `def`, the value is read
  /// again next iteration, so the use lasts to the end of the body.
  unsigned useEnd(Operation *user, Operation *def) const {
    unsigned position = of.lookup(user);
    for (Operation *loop = user->getParentOp(); loop; loop = loop->getParentOp()) {
      auto it = loopEnd.find(loop);
      if (it != loopEnd.end() && !loop->isAncestor(def))
        position = std::max(position, it->second);
    }
    return position;
  }
};

Operation *definingOpOrOwner(Value value) {
  if (Operation *def = value.getDefiningOp())
    return def;
  return cast<BlockArgument>(value).getOwner()->getParentOp();
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

/// Last position at which `root` or a view of it is used; the function's end when it
/// leaves the function (returned or handed to the runtime as an output).
unsigned lastUse(Value root, const Positions &positions) {
  unsigned last = 0;
  bool leaves = false;
  Operation *def = definingOpOrOwner(root);
  forEachUser(root, [&](Operation *user) {
    leaves |= isa<func::ReturnOp, OutputOp>(user);
    last = std::max(last, positions.useEnd(user, def));
  });
  return leaves ? std::numeric_limits<unsigned>::max() : last;
}

/// First position at which `root` or a view of it is used.
unsigned firstUse(Value root, const Positions &positions) {
  unsigned first = std::numeric_limits<unsigned>::max();
  forEachUser(root, [&](Operation *user) { first = std::min(first, positions.of.lookup(user)); });
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
/// the number of buffers. A pinned buffer takes its home's offset. Returns the arena
/// size, or nullopt when a pinned buffer cannot have its place.
std::optional<uint64_t> assignOffsets(MutableArrayRef<PlannedBuffer> buffers) {
  SmallVector<PlannedBuffer *> order;
  for (PlannedBuffer &buffer : buffers)
    order.push_back(&buffer);
  llvm::stable_sort(order, [](PlannedBuffer *a, PlannedBuffer *b) { return a->start < b->start; });
  SmallVector<PlannedBuffer *> active;
  uint64_t arena = 0;
  for (PlannedBuffer *buffer : order) {
    llvm::erase_if(active, [&](PlannedBuffer *other) { return other->end < buffer->start; });
    if (buffer->pinnedTo) {
      const PlannedBuffer &home = buffers[*buffer->pinnedTo];
      if (!home.placed || home.bytes < buffer->bytes)
        return std::nullopt;
      // The home and what this buffer may overwrite may overlap it; nothing else.
      const uint64_t begin = home.offset, end = home.offset + buffer->bytes;
      for (PlannedBuffer *other : active) {
        bool allowed =
            other == &home || other->pinnedTo == buffer->pinnedTo ||
            llvm::any_of(buffer->overwritable, [&](unsigned i) { return &buffers[i] == other; });
        if (!allowed && other->offset < end && begin < other->offset + other->bytes)
          return std::nullopt;
      }
      buffer->offset = begin;
      buffer->placed = true;
      active.push_back(buffer);
      continue;
    }
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

  /// Whether `op` is a layer loop: an scf.for marked kiln.layers.
  /// Activation buffers of the planned functions, each counted once per run.
  uint64_t plannedBufferCount = 0;

  static bool isLayerLoop(Operation *op) {
    return isa<scf::ForOp>(op) && op->hasAttr(KilnDialect::kLayersAttrName);
  }

  /// Numbers the function's ops in program order. Code is straight-line but for layer
  /// loops at the top (each body planned once for every iteration; see
  /// docs/overview.md "The activation plan").
  static std::optional<Positions> numberOps(func::FuncOp fn) {
    Positions positions;
    WalkResult walk = fn.walk<WalkOrder::PreOrder>([&](Operation *op) {
      if (op != fn && op->getNumRegions() != 0 && !(isLayerLoop(op) && op->getParentOp() == fn)) {
        op->emitError() << "kiln-plan-activations needs straight-line code (one block) "
                           "and layer loops (scf.for marked kiln.layers) at the top";
        return WalkResult::interrupt();
      }
      positions.of[op] = positions.of.size();
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return std::nullopt;
    for (Operation &op : fn.getBody().front())
      if (isLayerLoop(&op))
        positions.loopEnd[&op] =
            positions.of.lookup(cast<scf::ForOp>(op).getBody()->getTerminator());
    return positions;
  }

  std::optional<uint64_t> planFunction(func::FuncOp fn, const StepLimits &limits) {
    if (!fn.getBody().hasOneBlock()) {
      fn.emitError() << "kiln-plan-activations needs straight-line code (one block)";
      return std::nullopt;
    }
    for (Operation &op : fn.getBody().front())
      if (isLayerLoop(&op))
        forwardInitCopies(cast<scf::ForOp>(op));
    std::optional<Positions> positions = numberOps(fn);
    if (!positions)
      return std::nullopt;

    SizeBounds bounds(limits);
    SmallVector<PlannedBuffer> buffers;
    DenseMap<Value, unsigned> indexOf;
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
      indexOf[alloc.getResult()] = buffers.size();
      buffers.push_back({alloc, *bytes, positions->of.lookup(op), lastUse(alloc, *positions)});
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return std::nullopt;
    for (Operation &op : fn.getBody().front())
      if (isLayerLoop(&op) &&
          failed(addCarriedBuffers(cast<scf::ForOp>(op), *positions, buffers, indexOf)))
        return std::nullopt;
    findOverwritableInputs(buffers, indexOf, *positions);

    std::optional<uint64_t> arena = assignOffsets(buffers);
    if (!arena) {
      fn.emitError() << "kiln-plan-activations: a layer loop's carried buffer cannot stay "
                        "in one place (run kiln-expand-layers first)";
      return std::nullopt;
    }
    for (PlannedBuffer &buffer : buffers) {
      if (!buffer.alloc)
        continue;
      plannedBufferCount += iterationsAround(buffer.alloc);
      replaceWithArenaBuffer(buffer);
    }
    for (Operation &op : fn.getBody().front())
      if (isLayerLoop(&op))
        bindCarriedBuffers(cast<scf::ForOp>(op), buffers, indexOf);
    numBuffers += llvm::count_if(buffers, [](const PlannedBuffer &b) { return bool(b.alloc); });
    return arena;
  }

  /// Copy-before-write bufferization gives a layer loop's carried value a copy of its
  /// initial buffer (the loop writes it). Where that buffer dies at the copy, the loop
  /// may have it: the copy and its fresh buffer go (a copy would be a host copy of
  /// device memory; see convert-kiln-to-runtime-calls).
  static void forwardInitCopies(scf::ForOp loop) {
    for (OpOperand &init : loop.getInitArgsMutable()) {
      auto fresh = init.get().getDefiningOp<memref::AllocOp>();
      if (!fresh || !fresh.getResult().hasNUses(2))
        continue;
      memref::CopyOp copy;
      for (Operation *user : fresh->getUsers())
        if (auto candidate = dyn_cast<memref::CopyOp>(user);
            candidate && candidate.getTarget() == fresh.getResult())
          copy = candidate;
      auto source = copy ? copy.getSource().getDefiningOp<memref::AllocOp>() : memref::AllocOp();
      if (!source || source.getType() != fresh.getType() || copy->getBlock() != loop->getBlock())
        continue;
      bool diesAtCopy = llvm::all_of(source->getUsers(), [&](Operation *user) {
        return user == copy ||
               (!isa<ViewLikeOpInterface>(user) && user->getBlock() == copy->getBlock() &&
                user->isBeforeInBlock(copy));
      });
      if (!diesAtCopy)
        continue;
      copy.erase();
      fresh.replaceAllUsesWith(source.getResult());
      fresh.erase();
    }
  }

  /// For each value a layer loop carries: a buffer for its iteration argument, pinned
  /// to the initial buffer (live from the loop's start to its last read in the body),
  /// and the yielded buffer pinned there too, live to the end of the loop and of the
  /// loop result's uses. Both ends must be buffers of this plan.
  static LogicalResult addCarriedBuffers(scf::ForOp loop, const Positions &positions,
                                         SmallVector<PlannedBuffer> &buffers,
                                         DenseMap<Value, unsigned> &indexOf) {
    auto yield = cast<scf::YieldOp>(loop.getBody()->getTerminator());
    const unsigned loopStart = positions.of.lookup(loop), loopEnd = positions.loopEnd.lookup(loop);
    for (auto [arg, init, yielded, result] :
         llvm::zip_equal(loop.getRegionIterArgs(), loop.getInitArgs(), yield.getOperands(),
                         loop.getResults())) {
      if (!isa<MemRefType>(arg.getType()))
        continue;
      auto home = indexOf.find(init);
      auto next = indexOf.find(yielded);
      if (home == indexOf.end() || next == indexOf.end() ||
          !loop->isAncestor(yielded.getDefiningOp()))
        return loop.emitError() << "kiln-plan-activations: a value a layer loop carries must "
                                   "start in a buffer allocated before the loop and be "
                                   "yielded from a buffer allocated in its body";
      if (lastUse(init, positions) > loopStart)
        return loop.emitError() << "kiln-plan-activations: the initial buffer of a layer "
                                   "loop's carried value is used after the loop starts";
      // Indices, not the map's iterators: the insertions below may grow the map.
      const unsigned homeIndex = home->second, nextIndex = next->second;
      PlannedBuffer carried{memref::AllocOp(), buffers[homeIndex].bytes, loopStart,
                            std::max(loopStart, lastUse(arg, positions))};
      carried.pinnedTo = homeIndex;
      indexOf[arg] = buffers.size();
      buffers.push_back(carried);
      PlannedBuffer &out = buffers[nextIndex];
      out.end = std::max({out.end, loopEnd, lastUse(result, positions)});
      out.pinnedTo = homeIndex;
      // The loop's result is the last yielded buffer: an op after the loop may
      // overwrite it where it dies, as it would the value of an unrolled last layer.
      indexOf[result] = nextIndex;
    }
    return success();
  }

  /// The iteration arguments and results of a planned layer loop read the carried
  /// buffers' one place: the initial buffer, as a view of the arena made in the body.
  static void bindCarriedBuffers(scf::ForOp loop, ArrayRef<PlannedBuffer> buffers,
                                 const DenseMap<Value, unsigned> &indexOf) {
    OpBuilder builder = OpBuilder::atBlockBegin(loop.getBody());
    for (auto [arg, init, result] :
         llvm::zip_equal(loop.getRegionIterArgs(), loop.getInitArgs(), loop.getResults())) {
      auto home = init.getDefiningOp<ActivationBufferOp>();
      if (!home || !indexOf.count(arg))
        continue;
      Value inBody =
          ActivationBufferOp::create(builder, home.getLoc(), home.getType(), home.getOffset(),
                                     home.getCapacity(), home.getSizes());
      arg.replaceAllUsesWith(inBody);
      result.replaceAllUsesWith(init);
    }
  }

  /// For each buffer first used as the init of an op that may overwrite some of its
  /// inputs: those inputs that are whole buffers of this plan and die at that op.
  static void findOverwritableInputs(MutableArrayRef<PlannedBuffer> buffers,
                                     const DenseMap<Value, unsigned> &indexOf,
                                     const Positions &positions) {
    for (PlannedBuffer &buffer : buffers) {
      if (!buffer.alloc)
        continue;
      Value value = buffer.alloc.getResult();
      const unsigned first = firstUse(value, positions);
      for (OpOperand &init : value.getUses()) {
        auto op = dyn_cast<OverwritesInputsOpInterface>(init.getOwner());
        if (!op || positions.of.lookup(op) != first)
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
    fn.walk([&](RuntimeCallOpInterface op) {
      launches += op.getMaxDecodeLaunches() * iterationsAround(op);
    });
    return launches;
  }

  /// How many times `op` runs in a step: the trip counts of the layer loops around it.
  static uint64_t iterationsAround(Operation *op) {
    uint64_t iterations = 1;
    for (auto loop = op->getParentOfType<scf::ForOp>(); loop;
         loop = loop->getParentOfType<scf::ForOp>())
      if (std::optional<APInt> trips = loop.getStaticTripCount())
        iterations *= trips->getZExtValue();
    return iterations;
  }

  DeviceMemoryAttr deviceMemory(ModuleOp module, const ModuleConfig &config,
                                const StepLimits &limits, uint64_t arena, uint64_t launches) {
    uint64_t weights = 0;
    for (WeightOp weight : module.getOps<WeightOp>())
      if (std::optional<int64_t> offset = weight.getOffset())
        weights = std::max(weights, llvm::alignTo(*offset + weight.getBytes().value_or(0),
                                                  kAlignment));
    // A family's last member ends the run it is laid out in.
    for (WeightFamilyOp family : module.getOps<WeightFamilyOp>())
      if (family.getOffset() && family.getStride())
        weights =
            std::max(weights, llvm::alignTo(*family.getOffset() +
                                                (family.getCount() - 1) * *family.getStride() +
                                                family.getMemberBytes().value_or(0),
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
    // Counted once an iteration, as the unrolled step would have them (planFunction).
    numBuffersPlanned = plannedBufferCount;
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
