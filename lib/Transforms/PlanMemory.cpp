//===- PlanMemory.cpp - kiln-plan-memory ----------------------------------===//
#include "PassDetail.h"
#include "kiln/Transforms/Passes.h"

#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/Builders.h"
#include "llvm/Support/CheckedArithmetic.h"
#include "llvm/Support/MathExtras.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <set>

namespace kiln {
#define GEN_PASS_DEF_KILNPLANMEMORY
#include "kiln/Transforms/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {
constexpr uint64_t kAlignment = 256;
constexpr unsigned kLargestConsumersShown = 5;

/// alignTo(bytes, kAlignment), saturating at the top of uint64_t.
uint64_t alignSaturating(uint64_t bytes) {
  return bytes > UINT64_MAX - kAlignment ? UINT64_MAX : llvm::alignTo(bytes, kAlignment);
}

/// A resource with its size, as the planner sees it.
struct PlannedResource {
  mutable CacheResourceOp op; // op handles are cheap values; accessors are non-const
  PoolCategory category;
  std::string pool;
  uint64_t unitBytes = 0; // bytes per token (KV) or per slot (state)
  uint64_t bytes = 0;     // of one copy
  uint64_t offset = 0;    // of the first copy
  /// Copies: the layers of the layer loop whose body declares it (1 outside one).
  uint64_t copies = 1;
  /// That layer loop (null outside one).
  Operation *loop = nullptr;
};

/// The layer loop (`scf.for` marked `kiln.layers`) directly around `op`, and its trip
/// count; {nullptr, 1} when there is none.
std::pair<Operation *, uint64_t> enclosingLayerLoop(Operation *op) {
  auto loop = dyn_cast_or_null<scf::ForOp>(op->getParentOp());
  if (!loop || !loop->hasAttr(KilnDialect::kLayersAttrName))
    return {nullptr, 1};
  std::optional<int64_t> lower = getConstantIntValue(loop.getLowerBound());
  std::optional<int64_t> upper = getConstantIntValue(loop.getUpperBound());
  if (!lower || !upper || *upper <= *lower)
    return {nullptr, 1};
  return {loop, static_cast<uint64_t>(*upper - *lower)};
}

/// "kv.w4096.d128.bf16" / "kv.full.d576.bf16": KV pools are keyed by window, the
/// innermost dimension (head dim or latent width) and the element type.
std::string kvPoolName(CacheResourceOp op) {
  std::string type;
  llvm::raw_string_ostream os(type);
  os << op.getElementType();
  int64_t window = op.getWindowTokens();
  return "kv." + (window ? "w" + std::to_string(window) : std::string("full")) + ".d" +
         std::to_string(op.getUnit().back()) + "." + type;
}

struct PlanMemoryPass : public kiln::impl::KilnPlanMemoryBase<PlanMemoryPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    // One pass instance may run on many modules: nothing carries over.
    weightsExceedBudget = false;
    exactWeightBytes = 0;
    ModuleConfig config = getModuleConfig(module);
    if (!config.runtime) {
      (void)emitMissingRuntime(module, "kiln-plan-memory");
      return signalPassFailure();
    }
    if (!(usableFraction > 0.0 && usableFraction <= 1.0)) { // NaN fails too
      module.emitError() << "kiln-plan-memory: usable-fraction = " << fractionText()
                         << " must be in (0, 1]";
      return signalPassFailure();
    }
    std::optional<uint64_t> weightBytes = planWeights(module);
    if (!weightBytes)
      return signalPassFailure();
    exactWeightBytes = *weightBytes;
    SmallVector<PlannedResource> resources;
    if (failed(collect(module, config.runtime, resources)) ||
        failed(checkShards(resources, config)))
      return signalPassFailure();
    warnUnusedRingWindow(module, config.runtime, resources);

    std::optional<uint64_t> budget = computeBudget(module, config);
    if (!budget)
      return signalPassFailure();
    std::optional<uint64_t> kvPages;
    if (fillKv) {
      kvPages = fillPages(module, resources, config.runtime, *budget);
      if (!kvPages)
        return signalPassFailure();
    }
    if (failed(size(resources, config.runtime, kvPages)))
      return signalPassFailure();
    layOut(module, resources, config, *budget, kvPages);
  }

  LogicalResult collect(ModuleOp module, RuntimeAttr runtime,
                        SmallVectorImpl<PlannedResource> &resources) {
    WalkResult walk = module.walk([&](CacheResourceOp op) {
      PlannedResource planned{op, op.getPoolCategory(), "", 0, 0, 0};
      planned.pool = planned.category == PoolCategory::kv ? kvPoolName(op)
                                                          : stringifyPoolCategory(planned.category).str();
      std::optional<uint64_t> unit = computeUnitBytes(op, runtime);
      if (!unit) {
        op.emitError() << "the bytes of one unit of " << describeResource(op) << " ("
                       << describeResourceBytes(op, runtime) << ") overflow 63 bits";
        return WalkResult::interrupt();
      }
      planned.unitBytes = *unit;
      std::tie(planned.loop, planned.copies) = enclosingLayerLoop(op);
      resources.push_back(planned);
      return WalkResult::advance();
    });
    return failure(walk.wasInterrupted());
  }

  /// A kv_ring_window that no layer's window equals plans every pool in full: say so
  /// (a typo in --kv-ring-window would otherwise cost the memory silently).
  void warnUnusedRingWindow(ModuleOp module, RuntimeAttr runtime,
                            ArrayRef<PlannedResource> resources) {
    if (runtime.getKvRingWindow() == 0 ||
        llvm::any_of(resources, [&](const PlannedResource &planned) {
          return ringPagesPerSlot(planned.op, runtime) > 0;
        }))
      return;
    std::set<int64_t> windows;
    for (const PlannedResource &planned : resources)
      if (int64_t window = planned.op.getWindowTokens())
        windows.insert(window);
    InFlightDiagnostic warning = module.emitWarning()
                                 << "kiln-plan-memory: kv_ring_window " << runtime.getKvRingWindow()
                                 << " is no layer's sliding window; every KV pool is planned "
                                    "in full (the layers' windows: ";
    if (windows.empty())
      warning << "none";
    llvm::interleaveComma(windows, warning);
    warning << ")";
  }

  /// With tp > 1 the shard dimension must split evenly (KV heads below tp replicate).
  LogicalResult checkShards(ArrayRef<PlannedResource> resources, const ModuleConfig &config) {
    unsigned tp = planShardDivisor(config);
    if (tp == 1)
      return success();
    for (const PlannedResource &planned : resources) {
      std::optional<int64_t> shard = planned.op.getShard();
      if (!shard)
        continue;
      int64_t dim = planned.op.getUnit()[*shard];
      bool replicated = isPerTokenKind(planned.op.getKind()) && dim < tp;
      if (!replicated && dim % tp != 0)
        return planned.op.emitError()
               << "tp = " << tp << " does not divide dimension " << *shard << " (" << dim
               << ") of " << describeResource(planned.op) << "; choose a tp that divides it";
    }
    return success();
  }

  /// Target memory x usable fraction - weights per rank - reserve; 0 when unknown.
  /// Returns 0 (and records weightsExceedBudget) when the weights alone do not fit, so
  /// that the plan is still laid out for the report; nullopt on a reserve that
  /// overflows (diagnosed).
  std::optional<uint64_t> computeBudget(ModuleOp module, const ModuleConfig &config) {
    if (!config.target || config.target.getMemoryBytes() == 0) {
      module.emitWarning() << "kiln-plan-memory: the target's memory size is unknown; "
                              "the plan is not checked against a budget";
      return 0;
    }
    uint64_t usable =
        static_cast<uint64_t>(config.target.getMemoryBytes() * usableFraction.getValue());
    // The declared weights when the module has them; the importer's estimate otherwise.
    uint64_t declared = exactWeightBytes ? exactWeightBytes
                                         : (config.model ? config.model.getWeightBytes() : 0);
    uint64_t weights = declared / planShardDivisor(config);
    std::optional<uint64_t> taken = llvm::checkedAddUnsigned<uint64_t>(weights, reserveBytes);
    if (!taken) {
      module.emitError() << "kiln-plan-memory: reserve-bytes = " << reserveBytes.getValue()
                         << " plus the weights (" << weights << " bytes per rank) overflows "
                         << "64 bits";
      return std::nullopt;
    }
    if (*taken >= usable) {
      weightsExceedBudget = true;
      module.emitError() << "model weights (" << formatBytes(weights) << " per rank"
                         << (reserveBytes ? " + reserve" : "") << ") exceed the usable "
                         << formatBytes(usable) << " of '" << config.target.getName()
                         << "' (" << formatBytes(config.target.getMemoryBytes()) << " x "
                         << fractionText() << "); use more tensor-parallel ranks or a "
                            "larger target";
      return 0;
    }
    return usable - *taken;
  }

  bool weightsExceedBudget = false;
  uint64_t exactWeightBytes = 0;

  /// Lays the module's `kiln.weight`s out in one allocation (256-byte aligned, in
  /// declaration order) and returns its size; nullopt on overflow (diagnosed). A run of
  /// consecutive weight families of one count is laid out member-major, as the
  /// unrolled layers' weights would be: each family at the offset of its member 0 and
  /// the run's stride.
  std::optional<uint64_t> planWeights(ModuleOp module) {
    uint64_t offset = 0;
    Builder builder(module.getContext());
    for (Operation &op : module.getBody()->getOperations()) {
      if (auto family = dyn_cast<WeightFamilyOp>(op)) {
        if (!isa_and_nonnull<WeightFamilyOp>(family->getPrevNode()) ||
            cast<WeightFamilyOp>(family->getPrevNode()).getCount() != family.getCount())
          if (!planFamilyRun(family, offset))
            return std::nullopt;
        continue;
      }
      auto weight = dyn_cast<WeightOp>(op);
      if (!weight)
        continue;
      std::optional<uint64_t> bytes = weight.getBytes();
      uint64_t aligned = 0;
      if (!bytes || __builtin_add_overflow(offset, *bytes, &aligned) ||
          aligned > static_cast<uint64_t>(INT64_MAX) - kAlignment) {
        weight.emitError() << "the weights' total size overflows 64 bits at '"
                           << weight.getSymName() << "'";
        return std::nullopt;
      }
      weight.setOffsetAttr(builder.getI64IntegerAttr(static_cast<int64_t>(offset)));
      offset = llvm::alignTo(aligned, kAlignment);
    }
    return offset;
  }

  /// Lays out the run of families starting at `first` from `offset` (advanced past the
  /// run); false on overflow (diagnosed).
  bool planFamilyRun(WeightFamilyOp first, uint64_t &offset) {
    SmallVector<WeightFamilyOp> run;
    for (Operation *op = first; op; op = op->getNextNode()) {
      auto family = dyn_cast<WeightFamilyOp>(op);
      if (!family || family.getCount() != first.getCount())
        break;
      run.push_back(family);
    }
    // One layer's members, as the unrolled layout would place them after `offset`.
    uint64_t stride = 0;
    SmallVector<uint64_t> within;
    for (WeightFamilyOp family : run) {
      std::optional<uint64_t> bytes = family.getMemberBytes();
      uint64_t end = 0;
      if (!bytes || __builtin_add_overflow(stride, *bytes, &end) ||
          end > static_cast<uint64_t>(INT64_MAX) - kAlignment)
        return emitFamilyOverflow(family);
      within.push_back(stride);
      stride = llvm::alignTo(end, kAlignment);
    }
    uint64_t all = 0, endOfRun = 0;
    if (__builtin_mul_overflow(stride, static_cast<uint64_t>(first.getCount()), &all) ||
        __builtin_add_overflow(offset, all, &endOfRun) ||
        endOfRun > static_cast<uint64_t>(INT64_MAX) - kAlignment)
      return emitFamilyOverflow(run.back());
    Builder builder(first.getContext());
    for (auto [family, start] : llvm::zip_equal(run, within)) {
      family.setOffsetAttr(builder.getI64IntegerAttr(static_cast<int64_t>(offset + start)));
      family.setStrideAttr(builder.getI64IntegerAttr(static_cast<int64_t>(stride)));
    }
    offset = endOfRun;
    return true;
  }

  bool emitFamilyOverflow(WeightFamilyOp family) {
    family.emitError() << "the weights' total size overflows 64 bits at '" << family.getSymName()
                       << "'";
    return false;
  }

  /// Pages per KV resource so that KV fills what the budget leaves after states.
  std::optional<uint64_t> fillPages(ModuleOp module, ArrayRef<PlannedResource> resources,
                                    RuntimeAttr runtime, uint64_t budget) {
    if (budget == 0) {
      if (!weightsExceedBudget)
        module.emitError() << "kiln-plan-memory: fill-kv needs a target with a known "
                              "memory size";
      return std::nullopt;
    }
    // Saturating: anything near 2^64 is far beyond any budget, which the checks below
    // then report.
    uint64_t fixed = 0, bytesPerPage = 0;
    for (const PlannedResource &planned : resources) {
      // A ring pool's size is fixed by the window, not by the pages left.
      if (ringPagesPerSlot(planned.op, runtime) > 0)
        fixed = llvm::SaturatingAdd(
            fixed, llvm::SaturatingMultiply(
                       alignSaturating(computeResourceBytes(planned.op, runtime)
                                           .value_or(std::numeric_limits<uint64_t>::max())),
                       planned.copies));
      else if (planned.op.getAllocationUnit() == AllocationUnit::perToken)
        bytesPerPage = llvm::SaturatingAdd(
            bytesPerPage,
            llvm::SaturatingMultiply<uint64_t>(
                llvm::SaturatingMultiply<uint64_t>(planned.unitBytes, runtime.getPageSize()),
                planned.copies));
      else
        fixed = llvm::SaturatingAdd(
            fixed, llvm::SaturatingMultiply(alignSaturating(llvm::SaturatingMultiply<uint64_t>(
                                                planned.unitBytes, runtime.getMaxBatch())),
                                            planned.copies));
    }
    if (bytesPerPage == 0)
      return 0;
    if (fixed >= budget) {
      module.emitError() << "kiln-plan-memory: fill-kv leaves no memory for KV pages: "
                            "states take "
                         << formatBytes(fixed) << " of a " << formatBytes(budget)
                         << " budget";
      return std::nullopt;
    }
    uint64_t pages = (budget - fixed) / llvm::SaturatingAdd(bytesPerPage, kAlignment);
    if (pages == 0) {
      module.emitError() << "kiln-plan-memory: fill-kv: one KV page of every layer ("
                         << formatBytes(bytesPerPage) << ") does not fit in the "
                         << formatBytes(budget - fixed) << " the states leave";
      return std::nullopt;
    }
    return pages;
  }

  LogicalResult size(MutableArrayRef<PlannedResource> resources, RuntimeAttr runtime,
                     std::optional<uint64_t> kvPages) {
    uint64_t total = 0;
    for (PlannedResource &planned : resources) {
      std::optional<uint64_t> bytes = computeResourceBytes(planned.op, runtime, kvPages);
      std::optional<uint64_t> copies = bytes && *bytes <= kMaxPlanBytes
                                           ? llvm::checkedMulUnsigned<uint64_t>(
                                                 llvm::alignTo(*bytes, kAlignment), planned.copies)
                                           : std::nullopt;
      std::optional<uint64_t> aligned =
          copies ? llvm::checkedAddUnsigned<uint64_t>(total, *copies) : std::nullopt;
      if (!aligned || *aligned > kMaxPlanBytes)
        return planned.op.emitError()
               << (bytes ? "the cache plan's total overflows 63 bits at "
                         : "the bytes of ")
               << describeResource(planned.op) << " ("
               << describeResourceBytes(planned.op, runtime, kvPages) << ")"
               << (bytes ? "" : " overflow 63 bits") << "; reduce max_batch or max_seq_len";
      planned.bytes = *bytes;
      total = *aligned;
    }
    return success();
  }

  void layOut(ModuleOp module, MutableArrayRef<PlannedResource> resources,
              const ModuleConfig &config, uint64_t budget,
              std::optional<uint64_t> kvPages) {
    // Pools in a fixed order: KV pools by name, then state, then unmanaged.
    std::vector<std::pair<std::string, SmallVector<PlannedResource *>>> pools;
    auto rank = [](PoolCategory category) { return static_cast<int>(category); };
    SmallVector<PlannedResource *> order;
    for (PlannedResource &planned : resources)
      order.push_back(&planned);
    std::stable_sort(order.begin(), order.end(), [&](auto *a, auto *b) {
      if (a->category != b->category)
        return rank(a->category) < rank(b->category);
      return a->pool < b->pool;
    });
    for (PlannedResource *planned : order) {
      if (pools.empty() || pools.back().first != planned->pool)
        pools.emplace_back(planned->pool, SmallVector<PlannedResource *>());
      pools.back().second.push_back(planned);
    }

    Builder builder(module.getContext());
    SmallVector<Attribute> poolAttrs;
    uint64_t offset = 0, kv = 0, state = 0, speculative = 0, unmanaged = 0;
    for (auto &[name, members] : pools) {
      uint64_t poolOffset = offset, poolMembers = 0;
      PoolCategory category = members.front()->category;
      for (auto [i, planned] : llvm::enumerate(members)) {
        placeInPool(members, i, offset);
        poolMembers += planned->copies;
        uint64_t bytes = planned->bytes * planned->copies;
        CacheResourceOp op = planned->op;
        op.setPoolAttr(builder.getStringAttr(name));
        op.setOffsetAttr(builder.getI64IntegerAttr(planned->offset));
        op.setBytesAttr(builder.getI64IntegerAttr(planned->bytes));
        if (op.isSpeculativeOnly())
          speculative += bytes;
        if (category == PoolCategory::kv)
          kv += bytes;
        else if (category == PoolCategory::state)
          state += bytes;
        else {
          unmanaged += bytes;
          op.emitWarning() << describeResource(op) << " (" << formatBytes(planned->bytes)
                           << ") is unmanaged: it is allocated outside Kiln's pools, "
                              "per layer, and no cache manager accounts for it";
        }
      }
      poolAttrs.push_back(PoolAttr::get(module.getContext(), name, category, poolOffset,
                                        offset - poolOffset, poolMembers));
    }
    uint64_t total = offset;
    uint64_t pages = kvPages ? *kvPages : pagesPlanned(config.runtime, resources);
    bool fits = !weightsExceedBudget && (budget == 0 || total <= budget);
    module->setAttr(KilnDialect::kPlanAttrName,
                    PlanAttr::get(module.getContext(), total, kv, state, speculative,
                                  unmanaged, budget, pages, fits,
                                  builder.getArrayAttr(poolAttrs)));
    totalBytes = total;
    kvBytes = kv;
    stateBytes = state;
    speculativeBytes = speculative;
    unmanagedBytes = unmanaged;
    if (weightsExceedBudget)
      return signalPassFailure();
    if (!fits) {
      reportOverBudget(module, resources, config, total, budget);
      signalPassFailure();
    }
  }

  /// Places `members[i]` of a pool at `offset` and advances it. The members a layer
  /// loop's body declares are consecutive in the pool (stable order); as unrolled
  /// layers they would interleave layer by layer, so each gets the offset of its first
  /// layer's copy and the stride of one layer's members (`stride` on the op).
  void placeInPool(ArrayRef<PlannedResource *> members, size_t i, uint64_t &offset) {
    PlannedResource *planned = members[i];
    if (!planned->loop) {
      planned->offset = offset;
      offset += llvm::alignTo(planned->bytes, kAlignment);
      return;
    }
    // The first of a loop's members in this pool lays out all of them.
    if (i > 0 && members[i - 1]->loop == planned->loop)
      return;
    size_t end = i;
    uint64_t stride = 0;
    for (; end < members.size() && members[end]->loop == planned->loop; ++end) {
      members[end]->offset = offset + stride;
      stride += llvm::alignTo(members[end]->bytes, kAlignment);
    }
    Builder builder(planned->op.getContext());
    for (size_t j = i; j < end; ++j)
      members[j]->op.setStrideAttr(builder.getI64IntegerAttr(static_cast<int64_t>(stride)));
    offset += stride * planned->copies;
  }

  std::string fractionText() const {
    char text[32];
    std::snprintf(text, sizeof(text), "%g", usableFraction.getValue());
    return text;
  }

  /// Pages of the largest per-token resource (all KV pools share the page count).
  uint64_t pagesPlanned(RuntimeAttr runtime, ArrayRef<PlannedResource> resources) {
    uint64_t pages = 0;
    for (const PlannedResource &planned : resources)
      if (planned.op.getAllocationUnit() == AllocationUnit::perToken)
        pages = std::max(pages, tokensPerSequence(runtime) / runtime.getPageSize() *
                                    runtime.getMaxBatch());
    return pages;
  }

  /// Resources of one kind and speculative-only status, added up: "27 x
  /// intermediate_ssm_state (speculative-only) 67.50 GiB" says what to change, where
  /// the largest single resources would name four KV pools first.
  struct ConsumerGroup {
    ResourceKind kind;
    bool speculative;
    unsigned count = 0;
    uint64_t bytes = 0;
  };

  static SmallVector<ConsumerGroup> groupConsumers(ArrayRef<PlannedResource> resources) {
    SmallVector<ConsumerGroup> groups;
    for (const PlannedResource &planned : resources) {
      ResourceKind kind = planned.op.getKind();
      bool speculative = planned.op.isSpeculativeOnly();
      auto *group = llvm::find_if(groups, [&](const ConsumerGroup &g) {
        return g.kind == kind && g.speculative == speculative;
      });
      if (group == groups.end()) {
        groups.push_back({kind, speculative});
        group = &groups.back();
      }
      group->count += planned.copies;
      group->bytes = llvm::SaturatingAdd(group->bytes,
                                         llvm::SaturatingMultiply(planned.bytes, planned.copies));
    }
    std::stable_sort(groups.begin(), groups.end(),
                     [](const ConsumerGroup &a, const ConsumerGroup &b) { return a.bytes > b.bytes; });
    return groups;
  }

  void reportOverBudget(ModuleOp module, ArrayRef<PlannedResource> resources,
                        const ModuleConfig &config, uint64_t total, uint64_t budget) {
    InFlightDiagnostic diag = module.emitError();
    diag << "memory plan does not fit on '" << config.target.getName() << "': needs "
         << formatBytes(total) << ", budget " << formatBytes(budget) << " ("
         << formatBytes(config.target.getMemoryBytes()) << " x " << fractionText();
    uint64_t weights = exactWeightBytes ? exactWeightBytes
                                        : (config.model ? config.model.getWeightBytes() : 0);
    if (weights)
      diag << " - " << formatBytes(weights / planShardDivisor(config)) << " weights";
    diag << "); largest consumers:";
    SmallVector<ConsumerGroup> groups = groupConsumers(resources);
    for (unsigned i = 0; i < std::min<size_t>(kLargestConsumersShown, groups.size()); ++i)
      diag << (i ? ", " : " ") << groups[i].count << " x "
           << stringifyResourceKind(groups[i].kind)
           << (groups[i].speculative ? " (speculative-only)" : "") << " "
           << formatBytes(groups[i].bytes);
    suggestWhatFits(diag, resources, config, budget);
    suggestOtherSsmMode(diag, module, resources, config, total, budget);
  }

  /// The other SSM recovery mode's speculative-only state, asked of the cached ops
  /// (CachedOpInterface::getResourceRequestsUnder) and sized as this plan sizes per-slot
  /// resources: rewind keeps a state per verified token, replay the last steps' inputs,
  /// so one of them is often far smaller.
  void suggestOtherSsmMode(InFlightDiagnostic &diag, ModuleOp module,
                           ArrayRef<PlannedResource> resources, const ModuleConfig &config,
                           uint64_t total, uint64_t budget) {
    SpecAttr spec = config.spec;
    RuntimeAttr runtime = config.runtime;
    if (!spec || !runtime)
      return;
    const SsmSpecMode other =
        spec.getSsm() == SsmSpecMode::rewind ? SsmSpecMode::replay : SsmSpecMode::rewind;
    SpecAttr otherSpec =
        SpecAttr::get(module.getContext(), spec.getMode(), spec.getMaxDraftLen(), other);
    uint64_t otherBytes = 0;
    module.walk([&](CachedOpInterface op) {
      uint64_t copies = enclosingLayerLoop(op).second;
      for (const ResourceRequest &request : op.getResourceRequestsUnder(otherSpec, runtime)) {
        if (!isSpeculativeOnlyKind(request.kind) || isPerTokenKind(request.kind))
          continue;
        std::optional<uint64_t> unit = computeUnitBytes(
            shardUnitShape(request.unit, request.shard, planShardDivisor(config)),
            request.elementType);
        uint64_t bytes = llvm::SaturatingMultiply<uint64_t>(unit.value_or(UINT64_MAX),
                                                            runtime.getMaxBatch());
        otherBytes = llvm::SaturatingAdd(otherBytes,
                                         llvm::SaturatingMultiply(alignSaturating(bytes), copies));
      }
    });
    uint64_t currentBytes = 0;
    for (const PlannedResource &planned : resources)
      if (planned.op.isSpeculativeOnly() &&
          planned.op.getAllocationUnit() == AllocationUnit::perSlot)
        currentBytes = llvm::SaturatingAdd(currentBytes,
                                           llvm::SaturatingMultiply(planned.bytes, planned.copies));
    if (otherBytes == 0 || otherBytes >= currentBytes)
      return;
    const uint64_t withOther = total - currentBytes + otherBytes;
    diag.attachNote() << "with --ssm-mode " << stringifySsmSpecMode(other)
                      << " the speculative-only states take " << formatBytes(otherBytes)
                      << " instead of " << formatBytes(currentBytes) << ": the plan "
                      << (withOther <= budget ? "fits" : "still does not fit") << " ("
                      << formatBytes(withOther) << ")";
  }

  /// Notes on what would fit the budget, each changing one limit: the largest
  /// max_batch at this max_seq_len, the largest max_seq_len at this max_batch, and the
  /// largest draft length. Bytes are linear in each (per slot, per token, per verified
  /// token), so the bounds come from the same unit sizes the plan used; each resource
  /// may lose up to one alignment to padding, which the bounds leave room for.
  void suggestWhatFits(InFlightDiagnostic &diag, ArrayRef<PlannedResource> resources,
                       const ModuleConfig &config, uint64_t budget) {
    RuntimeAttr runtime = config.runtime;
    uint64_t slack = 0;
    for (const PlannedResource &planned : resources)
      slack = llvm::SaturatingAdd(slack, llvm::SaturatingMultiply(planned.copies, kAlignment));
    if (budget <= slack)
      return;
    uint64_t usable = budget - slack;
    uint64_t perSequence = 0, statePerSequence = 0, kvPerToken = 0;
    for (const PlannedResource &planned : resources) {
      uint64_t unit = llvm::SaturatingMultiply(planned.unitBytes, planned.copies);
      if (planned.op.getAllocationUnit() == AllocationUnit::perSlot) {
        perSequence = llvm::SaturatingAdd(perSequence, unit);
        statePerSequence = llvm::SaturatingAdd(statePerSequence, unit);
        continue;
      }
      perSequence = llvm::SaturatingAdd(perSequence,
                                        llvm::SaturatingMultiply(unit, tokensPerSequence(runtime)));
      kvPerToken = llvm::SaturatingAdd(kvPerToken, unit);
    }
    if (perSequence == 0)
      return;
    uint64_t batch = usable / perSequence;
    if (batch >= 1)
      diag.attachNote() << "fits with max_batch " << batch << " (at max_seq_len "
                        << runtime.getMaxSeqLen() << ")";
    else
      diag.attachNote() << "not even one sequence of " << runtime.getMaxSeqLen()
                        << " tokens fits";
    uint64_t states = llvm::SaturatingMultiply<uint64_t>(statePerSequence, runtime.getMaxBatch());
    if (kvPerToken && usable > states) {
      uint64_t page = runtime.getPageSize();
      uint64_t tokens = (usable - states) /
                        llvm::SaturatingMultiply<uint64_t>(kvPerToken, runtime.getMaxBatch()) /
                        page * page;
      if (tokens >= page)
        diag.attachNote() << "fits with max_seq_len " << tokens << " (at max_batch "
                          << runtime.getMaxBatch() << ")";
    }
    if (config.spec)
      suggestDraftLength(diag, resources, config, usable);
  }

  /// Intermediate states hold one entry per verified token (1 + drafts): the largest
  /// draft length whose intermediates fit next to everything else.
  void suggestDraftLength(InFlightDiagnostic &diag, ArrayRef<PlannedResource> resources,
                          const ModuleConfig &config, uint64_t usable) {
    uint64_t steps = config.spec.getTokensPerStep(), perStep = 0, rest = 0;
    for (const PlannedResource &planned : resources) {
      ResourceKind kind = planned.op.getKind();
      // Per copy, then times the copies: the same rounding as one resource a layer.
      if (isPerDraftStepKind(kind))
        perStep += planned.bytes / steps * planned.copies;
      else
        rest += llvm::SaturatingMultiply(planned.bytes, planned.copies);
    }
    if (perStep == 0)
      return;
    if (rest >= usable || (usable - rest) / perStep < 2) {
      diag.attachNote() << "no draft length fits: without the intermediate states the plan "
                           "needs "
                        << formatBytes(rest) << "; replay mode (--ssm-mode replay) or less "
                                                "max_batch";
      return;
    }
    diag.attachNote() << "fits with max_draft_len " << (usable - rest) / perStep - 1;
  }
};
} // namespace
