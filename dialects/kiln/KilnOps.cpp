//===- KilnOps.cpp - verifiers and interface implementations --------------===//
#include "kiln/Dialect/Kiln.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace kiln;

#include "kiln/Dialect/KilnInterfaces.cpp.inc"

#define GET_OP_CLASSES
#include "kiln/Dialect/KilnOps.cpp.inc"

//===----------------------------------------------------------------------===//
// Shape checks shared by model ops and their cached forms
//===----------------------------------------------------------------------===//

namespace {
constexpr int64_t kAnyDim = ShapedType::kDynamic;

/// Checks rank and every static dimension of `value` against `expected`
/// (kAnyDim: unconstrained, e.g. the token dimension).
LogicalResult checkShape(Operation *op, StringRef name, Value value,
                         ArrayRef<int64_t> expected) {
  auto type = cast<RankedTensorType>(value.getType());
  auto describe = [&]() {
    std::string text;
    llvm::raw_string_ostream os(text);
    os << "[";
    llvm::interleaveComma(expected, os, [&](int64_t dim) {
      if (dim == kAnyDim)
        os << "?";
      else
        os << dim;
    });
    os << "]";
    return text;
  };
  if (type.getRank() != static_cast<int64_t>(expected.size()))
    return op->emitOpError() << "'" << name << "' must have shape " << describe()
                             << ", got " << type;
  for (auto [actual, want] : llvm::zip(type.getShape(), expected))
    if (want != kAnyDim && actual != ShapedType::kDynamic && actual != want)
      return op->emitOpError() << "'" << name << "' must have shape " << describe()
                               << ", got " << type;
  return success();
}

LogicalResult checkPositive(Operation *op, StringRef name, int64_t value) {
  if (value <= 0)
    return op->emitOpError() << "'" << name << "' must be positive, got " << value;
  return success();
}

LogicalResult checkLayer(Operation *op, int64_t layer) {
  if (layer < 0)
    return op->emitOpError() << "'layer' must be >= 0, got " << layer;
  return success();
}

template <typename OpT>
LogicalResult verifyAttentionOp(OpT op) {
  Operation *raw = op.getOperation();
  if (failed(checkLayer(raw, op.getLayer())) ||
      failed(checkPositive(raw, "num_heads", op.getNumHeads())) ||
      failed(checkPositive(raw, "num_kv_heads", op.getNumKvHeads())) ||
      failed(checkPositive(raw, "head_dim", op.getHeadDim())))
    return failure();
  if (op.getNumHeads() % op.getNumKvHeads() != 0)
    return op.emitOpError() << "num_heads (" << op.getNumHeads()
                            << ") must be a multiple of num_kv_heads ("
                            << op.getNumKvHeads() << ")";
  if (std::optional<int64_t> window = op.getSlidingWindow(); window && *window <= 0)
    return op.emitOpError() << "'sliding_window' must be positive, got " << *window;
  int64_t h = op.getNumHeads(), kvh = op.getNumKvHeads(), d = op.getHeadDim();
  if (failed(checkShape(raw, "q", op.getQ(), {kAnyDim, h, d})) ||
      failed(checkShape(raw, "k", op.getK(), {kAnyDim, kvh, d})) ||
      failed(checkShape(raw, "v", op.getV(), {kAnyDim, kvh, d})) ||
      failed(checkShape(raw, "result", op.getOut(), {kAnyDim, h, d})))
    return failure();
  return success();
}

template <typename OpT>
LogicalResult verifyMlaOp(OpT op) {
  Operation *raw = op.getOperation();
  if (failed(checkLayer(raw, op.getLayer())) ||
      failed(checkPositive(raw, "num_heads", op.getNumHeads())) ||
      failed(checkPositive(raw, "kv_lora_rank", op.getKvLoraRank())) ||
      failed(checkPositive(raw, "qk_rope_head_dim", op.getQkRopeHeadDim())))
    return failure();
  int64_t h = op.getNumHeads(), rank = op.getKvLoraRank();
  int64_t width = rank + op.getQkRopeHeadDim();
  if (failed(checkShape(raw, "q", op.getQ(), {kAnyDim, h, width})) ||
      failed(checkShape(raw, "latent", op.getLatent(), {kAnyDim, width})) ||
      failed(checkShape(raw, "result", op.getOut(), {kAnyDim, h, rank})))
    return failure();
  return success();
}

template <typename OpT>
LogicalResult verifySsmOp(OpT op) {
  Operation *raw = op.getOperation();
  if (failed(checkLayer(raw, op.getLayer())) ||
      failed(checkPositive(raw, "num_heads", op.getNumHeads())) ||
      failed(checkPositive(raw, "head_dim", op.getHeadDim())) ||
      failed(checkPositive(raw, "state_size", op.getStateSize())) ||
      failed(checkPositive(raw, "n_groups", op.getNGroups())))
    return failure();
  if (op.getNumHeads() % op.getNGroups() != 0)
    return op.emitOpError() << "num_heads (" << op.getNumHeads()
                            << ") must be a multiple of n_groups (" << op.getNGroups() << ")";
  int64_t h = op.getNumHeads(), p = op.getHeadDim(), n = op.getStateSize(),
          g = op.getNGroups();
  if (failed(checkShape(raw, "x", op.getX(), {kAnyDim, h, p})) ||
      failed(checkShape(raw, "dt", op.getDt(), {kAnyDim, h})) ||
      failed(checkShape(raw, "b", op.getB(), {kAnyDim, g, n})) ||
      failed(checkShape(raw, "c", op.getC(), {kAnyDim, g, n})) ||
      (op.getZ() && failed(checkShape(raw, "gate", op.getZ(), {kAnyDim, h, p}))) ||
      failed(checkShape(raw, "result", op.getOut(), {kAnyDim, h, p})))
    return failure();
  return success();
}

template <typename OpT>
LogicalResult verifyConvOp(OpT op) {
  Operation *raw = op.getOperation();
  if (failed(checkLayer(raw, op.getLayer())) ||
      failed(checkPositive(raw, "conv_dim", op.getConvDim())))
    return failure();
  if (op.getKernelSize() < 2 || op.getKernelSize() > 4)
    return op.emitOpError() << "'kernel_size' must be in [2, 4], got "
                            << op.getKernelSize();
  int64_t c = op.getConvDim();
  if (failed(checkShape(raw, "x", op.getX(), {kAnyDim, c})) ||
      failed(checkShape(raw, "result", op.getOut(), {kAnyDim, c})))
    return failure();
  return success();
}

/// Draft layers of this kind run only under a spec mode that uses them.
bool specUsesDraftLayers(SpecAttr spec, std::optional<DraftKind> draft) {
  if (!spec || !draft)
    return false;
  switch (spec.getMode()) {
  case SpecMode::mtp:
    return *draft == DraftKind::mtp;
  case SpecMode::eagle3:
    return *draft == DraftKind::eagle3;
  case SpecMode::draft_target:
    return *draft == DraftKind::draft_model;
  case SpecMode::ngram:
    return false;
  }
  return false;
}

} // namespace

//===----------------------------------------------------------------------===//
// CacheResourceOp
//===----------------------------------------------------------------------===//

LogicalResult CacheResourceOp::verify() {
  ResourceKind kind = getKind();
  if (failed(checkLayer(*this, getLayer())))
    return failure();
  if (getUnit().empty())
    return emitOpError() << "'unit' shape must not be empty";
  for (int64_t dim : getUnit())
    if (dim <= 0)
      return emitOpError() << "'unit' dimensions must be positive, got " << dim;
  if (!getElementType().isIntOrFloat())
    return emitOpError() << "element type must be an integer or float type, got "
                         << getElementType();
  bool speculative = isSpeculativeOnlyKind(kind);
  if (speculative && !getSpeculativeOnly())
    return emitOpError() << "a " << stringifyResourceKind(kind)
                         << " resource exists only for speculative decoding and must be "
                            "marked 'speculative_only'";
  if (!speculative && getSpeculativeOnly())
    return emitOpError() << "a " << stringifyResourceKind(kind)
                         << " resource is needed without speculation and must not be "
                            "marked 'speculative_only'";
  if (std::optional<int64_t> shard = getShard();
      shard && (*shard < 0 || *shard >= static_cast<int64_t>(getUnit().size())))
    return emitOpError() << "'shard' = " << *shard << " is not a dimension of 'unit' (rank "
                         << getUnit().size() << ")";
  if (std::optional<int64_t> window = getWindow()) {
    if (*window <= 0)
      return emitOpError() << "'window' must be positive, got " << *window;
    if (!isPerTokenKind(kind))
      return emitOpError() << "'window' only applies to per-token (KV) resources, not "
                           << stringifyResourceKind(kind);
  }
  if (std::optional<int64_t> offset = getOffset(); offset && *offset < 0)
    return emitOpError() << "'offset' must be >= 0";
  if (std::optional<int64_t> bytes = getBytes(); bytes && *bytes < 0)
    return emitOpError() << "'bytes' must be >= 0";
  return success();
}

ResourceKind CacheResourceOp::getResourceKind() { return getKind(); }
int64_t CacheResourceOp::getLayerIndex() { return getLayer(); }
bool CacheResourceOp::isSpeculativeOnly() { return getSpeculativeOnly(); }
Type CacheResourceOp::getResourceElementType() { return getElementType(); }
SmallVector<int64_t> CacheResourceOp::getUnitShape(const RuntimeAttr &runtime) {
  return shardUnitShape(getUnit(), getShard(), runtime ? runtime.getTp() : 1);
}
AllocationUnit CacheResourceOp::getAllocationUnit() {
  return isPerTokenKind(getKind()) ? AllocationUnit::perToken : AllocationUnit::perSlot;
}
PoolCategory CacheResourceOp::getPoolCategory() {
  if (getUnmanaged())
    return PoolCategory::unmanaged;
  return isPerTokenKind(getKind()) ? PoolCategory::kv : PoolCategory::state;
}
int64_t CacheResourceOp::getWindowTokens() {
  IntegerAttr window = getWindowAttr();
  return window ? window.getInt() : 0;
}

//===----------------------------------------------------------------------===//
// Model ops
//===----------------------------------------------------------------------===//

LogicalResult AttentionOp::verify() { return verifyAttentionOp(*this); }
LogicalResult MlaAttentionOp::verify() { return verifyMlaOp(*this); }
LogicalResult SsmOp::verify() { return verifySsmOp(*this); }
LogicalResult CausalConvOp::verify() { return verifyConvOp(*this); }

int64_t AttentionOp::getLayerIndex() { return getLayer(); }
int64_t MlaAttentionOp::getLayerIndex() { return getLayer(); }
int64_t SsmOp::getLayerIndex() { return getLayer(); }
int64_t CausalConvOp::getLayerIndex() { return getLayer(); }

SmallVector<ResourceRequest> AttentionOp::getResourceRequests(SpecAttr spec,
                                                              RuntimeAttr runtime) {
  SmallVector<int64_t> unit = {2, getNumKvHeads(), getHeadDim()};
  std::optional<int64_t> window = getSlidingWindow();
  if (!getDraft())
    return {ResourceRequest{ResourceKind::kv, unit, runtime.getKvDtype(), 1, window}};
  if (specUsesDraftLayers(spec, getDraft()))
    return {ResourceRequest{ResourceKind::draft_kv, unit, runtime.getKvDtype(), 1, window}};
  return {};
}

SmallVector<ResourceRequest> MlaAttentionOp::getResourceRequests(SpecAttr spec,
                                                                 RuntimeAttr runtime) {
  // MLA caches one latent row per token, shared by all heads: never sharded.
  SmallVector<int64_t> unit = {getKvLoraRank() + getQkRopeHeadDim()};
  if (!getDraft())
    return {ResourceRequest{ResourceKind::mla_latent, unit, runtime.getKvDtype(),
                            std::nullopt, std::nullopt}};
  if (specUsesDraftLayers(spec, getDraft()))
    return {ResourceRequest{ResourceKind::draft_kv, unit, runtime.getKvDtype(),
                            std::nullopt, std::nullopt}};
  return {};
}

SmallVector<ResourceRequest> SsmOp::getResourceRequests(SpecAttr spec, RuntimeAttr runtime) {
  int64_t h = getNumHeads(), p = getHeadDim(), n = getStateSize(), g = getNGroups();
  Type stateType = runtime.getSsmStateType();
  Type modelType = cast<RankedTensorType>(getX().getType()).getElementType();
  Type f32 = Float32Type::get(getContext());
  Type i32 = IntegerType::get(getContext(), 32);
  SmallVector<ResourceRequest> requests = {
      {ResourceKind::ssm_state, {h, p, n}, stateType, 0, std::nullopt}};
  if (!spec)
    return requests;
  int64_t steps = spec.getTokensPerStep();
  if (spec.getSsm() == SsmSpecMode::rewind) {
    requests.push_back({ResourceKind::intermediate_ssm_state, {steps, h, p, n}, stateType,
                        1, std::nullopt});
    return requests;
  }
  // Replay: the inputs of the last two steps, so the accepted prefix can be recomputed.
  requests.push_back({ResourceKind::replay_x, {2, steps, h, p}, modelType, 2, std::nullopt});
  requests.push_back({ResourceKind::replay_b, {2, steps, g, n}, modelType, 2, std::nullopt});
  requests.push_back({ResourceKind::replay_dt, {2, h, steps}, f32, 1, std::nullopt});
  requests.push_back({ResourceKind::replay_dacs, {2, h, steps}, f32, 1, std::nullopt});
  requests.push_back({ResourceKind::replay_index, {2}, i32, std::nullopt, std::nullopt});
  return requests;
}

SmallVector<ResourceRequest> CausalConvOp::getResourceRequests(SpecAttr spec,
                                                               RuntimeAttr) {
  Type modelType = cast<RankedTensorType>(getX().getType()).getElementType();
  int64_t c = getConvDim(), w = getKernelSize() - 1;
  SmallVector<ResourceRequest> requests = {
      {ResourceKind::conv_state, {c, w}, modelType, 0, std::nullopt}};
  if (spec)
    requests.push_back({ResourceKind::intermediate_conv_state,
                        {static_cast<int64_t>(spec.getTokensPerStep()), c, w}, modelType, 1,
                        std::nullopt});
  return requests;
}

namespace {
/// The resource of `kind` among `resources`, or null.
Value findResource(ValueRange resources, ResourceKind kind) {
  for (Value resource : resources)
    if (resource && cast<CacheType>(resource.getType()).getKind() == kind)
      return resource;
  return {};
}
} // namespace

Operation *AttentionOp::buildCachedForm(OpBuilder &builder, ValueRange resources) {
  Value kv = findResource(resources, getDraft() ? ResourceKind::draft_kv : ResourceKind::kv);
  return CachedAttentionOp::create(builder, getLoc(), getOut().getType(), getQ(), getK(),
                                   getV(), kv, getLayerAttr(), getNumHeadsAttr(),
                                   getNumKvHeadsAttr(), getHeadDimAttr(),
                                   getSlidingWindowAttr(), getDraftAttr(), nullptr, nullptr,
                                   nullptr);
}

Operation *MlaAttentionOp::buildCachedForm(OpBuilder &builder, ValueRange resources) {
  Value cache = findResource(resources, getDraft() ? ResourceKind::draft_kv
                                                   : ResourceKind::mla_latent);
  return CachedMlaAttentionOp::create(builder, getLoc(), getOut().getType(), getQ(),
                                      getLatent(), cache, getLayerAttr(), getNumHeadsAttr(),
                                      getKvLoraRankAttr(), getQkRopeHeadDimAttr(),
                                      getDraftAttr(), nullptr, nullptr, nullptr);
}

Operation *SsmOp::buildCachedForm(OpBuilder &builder, ValueRange resources) {
  auto get = [&](ResourceKind kind) { return findResource(resources, kind); };
  return CachedSsmOp::create(
      builder, getLoc(), getOut().getType(), getX(), getDt(), getB(), getC(), getZ(),
      get(ResourceKind::ssm_state), get(ResourceKind::intermediate_ssm_state),
      get(ResourceKind::replay_x), get(ResourceKind::replay_b), get(ResourceKind::replay_dt),
      get(ResourceKind::replay_dacs), get(ResourceKind::replay_index), getLayerAttr(),
      getNumHeadsAttr(), getHeadDimAttr(), getStateSizeAttr(), getNGroupsAttr(),
      getDraftAttr(), nullptr, nullptr, nullptr);
}

Operation *CausalConvOp::buildCachedForm(OpBuilder &builder, ValueRange resources) {
  return CachedCausalConvOp::create(
      builder, getLoc(), getOut().getType(), getX(),
      findResource(resources, ResourceKind::conv_state),
      findResource(resources, ResourceKind::intermediate_conv_state), getLayerAttr(),
      getConvDimAttr(), getKernelSizeAttr(), getSiluAttr(), getDraftAttr(), nullptr,
      nullptr, nullptr);
}

//===----------------------------------------------------------------------===//
// Cached ops
//===----------------------------------------------------------------------===//

namespace {
/// Checks every slot: kind, speculative-only-ness, layer, presence of required slots.
LogicalResult verifySlots(CachedOpInterface op, ArrayRef<CacheSlot> slots,
                          ArrayRef<StringRef> required) {
  for (const CacheSlot &slot : slots) {
    if (!slot.value) {
      if (llvm::is_contained(required, slot.name))
        return op->emitOpError() << "slot '" << slot.name << "' of layer "
                                 << op.getLayerIndex() << " must hold a resource";
      continue;
    }
    ResourceKind kind = cast<CacheType>(slot.value.getType()).getKind();
    if (!llvm::is_contained(slot.acceptedKinds, kind)) {
      InFlightDiagnostic diag = op->emitOpError()
                                << "slot '" << slot.name << "' expects ";
      llvm::interleave(
          slot.acceptedKinds, [&](ResourceKind k) {
            diag << "!kiln.cache<" << stringifyResourceKind(k) << ">";
          },
          [&] { diag << " or "; });
      return diag << ", got " << slot.value.getType();
    }
    auto resource = slot.value.getDefiningOp<CacheResourceInterface>();
    if (!resource)
      continue;
    if (slot.speculative && !resource.isSpeculativeOnly())
      return op->emitOpError() << "speculative slot '" << slot.name
                               << "' holds a resource that is not speculative-only";
    if (!slot.speculative && resource.isSpeculativeOnly())
      return op->emitOpError() << "slot '" << slot.name
                               << "' is needed without speculation but holds a "
                                  "speculative-only resource";
    if (resource.getLayerIndex() != op.getLayerIndex())
      return op->emitOpError() << "slot '" << slot.name << "' holds the resource of layer "
                               << resource.getLayerIndex() << ", but the op is layer "
                               << op.getLayerIndex();
  }
  return success();
}

/// Empties whichever optional slot holds `resource`.
void clearSlotHolding(Value resource, ArrayRef<MutableOperandRange> optionalSlots) {
  for (MutableOperandRange slot : optionalSlots)
    if (slot.size() == 1 && slot[0].get() == resource) {
      slot.clear();
      return;
    }
}
} // namespace

// Attention
LogicalResult CachedAttentionOp::verify() {
  if (failed(verifyAttentionOp(*this)))
    return failure();
  SmallVector<StringRef, 1> required;
  if (!getDraft())
    required.push_back("kv");
  return verifySlots(*this, getCacheSlots(), required);
}
int64_t CachedAttentionOp::getLayerIndex() { return getLayer(); }
OpFamily CachedAttentionOp::getOpFamily() { return OpFamily::attention; }
std::optional<DraftKind> CachedAttentionOp::getDraftKind() { return getDraft(); }
SmallVector<CacheSlot> CachedAttentionOp::getCacheSlots() {
  if (getDraft())
    return {CacheSlot{"kv", {ResourceKind::draft_kv}, true, getKv()}};
  return {CacheSlot{"kv", {ResourceKind::kv}, false, getKv()}};
}
void CachedAttentionOp::detachResource(Value resource) {
  clearSlotHolding(resource, {getKvMutable()});
}

// MLA
LogicalResult CachedMlaAttentionOp::verify() {
  if (failed(verifyMlaOp(*this)))
    return failure();
  SmallVector<StringRef, 1> required;
  if (!getDraft())
    required.push_back("cache");
  return verifySlots(*this, getCacheSlots(), required);
}
int64_t CachedMlaAttentionOp::getLayerIndex() { return getLayer(); }
OpFamily CachedMlaAttentionOp::getOpFamily() { return OpFamily::mla; }
std::optional<DraftKind> CachedMlaAttentionOp::getDraftKind() { return getDraft(); }
SmallVector<CacheSlot> CachedMlaAttentionOp::getCacheSlots() {
  if (getDraft())
    return {CacheSlot{"cache", {ResourceKind::draft_kv}, true, getCache()}};
  return {CacheSlot{"cache", {ResourceKind::mla_latent}, false, getCache()}};
}
void CachedMlaAttentionOp::detachResource(Value resource) {
  clearSlotHolding(resource, {getCacheMutable()});
}

// SSM
LogicalResult CachedSsmOp::verify() {
  if (failed(verifySsmOp(*this)) ||
      failed(verifySlots(*this, getCacheSlots(), {"state"})))
    return failure();
  bool anyReplay = getReplayX() || getReplayB() || getReplayDt() || getReplayDacs() ||
                   getReplayIndex();
  bool allReplay = getReplayX() && getReplayB() && getReplayDt() && getReplayDacs() &&
                   getReplayIndex();
  if (anyReplay && !allReplay)
    return emitOpError() << "replay slots are all-or-none: replay mode needs replay_x, "
                            "replay_b, replay_dt, replay_dacs and replay_index";
  if (anyReplay && getIntermediate())
    return emitOpError() << "'intermediate' (rewind mode) and the replay slots (replay "
                            "mode) are exclusive";
  return success();
}
int64_t CachedSsmOp::getLayerIndex() { return getLayer(); }
OpFamily CachedSsmOp::getOpFamily() { return OpFamily::ssm; }
std::optional<DraftKind> CachedSsmOp::getDraftKind() { return getDraft(); }
SmallVector<CacheSlot> CachedSsmOp::getCacheSlots() {
  return {CacheSlot{"state", {ResourceKind::ssm_state}, false, getState()},
          CacheSlot{"intermediate", {ResourceKind::intermediate_ssm_state}, true,
                    getIntermediate()},
          CacheSlot{"replay_x", {ResourceKind::replay_x}, true, getReplayX()},
          CacheSlot{"replay_b", {ResourceKind::replay_b}, true, getReplayB()},
          CacheSlot{"replay_dt", {ResourceKind::replay_dt}, true, getReplayDt()},
          CacheSlot{"replay_dacs", {ResourceKind::replay_dacs}, true, getReplayDacs()},
          CacheSlot{"replay_index", {ResourceKind::replay_index}, true, getReplayIndex()}};
}
void CachedSsmOp::detachResource(Value resource) {
  clearSlotHolding(resource, {getIntermediateMutable(), getReplayXMutable(),
                              getReplayBMutable(), getReplayDtMutable(),
                              getReplayDacsMutable(), getReplayIndexMutable()});
}

// Conv
LogicalResult CachedCausalConvOp::verify() {
  if (failed(verifyConvOp(*this)))
    return failure();
  return verifySlots(*this, getCacheSlots(), {"state"});
}
int64_t CachedCausalConvOp::getLayerIndex() { return getLayer(); }
OpFamily CachedCausalConvOp::getOpFamily() { return OpFamily::conv; }
std::optional<DraftKind> CachedCausalConvOp::getDraftKind() { return getDraft(); }
SmallVector<CacheSlot> CachedCausalConvOp::getCacheSlots() {
  return {CacheSlot{"state", {ResourceKind::conv_state}, false, getState()},
          CacheSlot{"intermediate", {ResourceKind::intermediate_conv_state}, true,
                    getIntermediate()}};
}
void CachedCausalConvOp::detachResource(Value resource) {
  clearSlotHolding(resource, {getIntermediateMutable()});
}
