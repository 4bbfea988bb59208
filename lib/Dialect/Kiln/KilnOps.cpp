//===- KilnOps.cpp - verifiers and interface implementations --------------===//
#include "kiln/Dialect/Kiln/Kiln.h"
#include "kiln/Kernels/Decode.h"   // the FP8 MLA latent token
#include "kiln/Kernels/Moe.h"      // kiln_moe flags and scratch layout
#include "kiln/Runtime/Layout.h"  // kiln.mla_attention's scratch layout
#include "kiln/Runtime/Runtime.h" // kiln_rt_dtype_t codes of kiln_rt_attention

#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/MathExtras.h"

#include <cmath>

using namespace mlir;
using namespace kiln;

#include "kiln/Dialect/Kiln/KilnInterfaces.cpp.inc"

#define GET_OP_CLASSES
#include "kiln/Dialect/Kiln/KilnOps.cpp.inc"

//===----------------------------------------------------------------------===//
// Shape checks shared by model ops and their cached forms
//===----------------------------------------------------------------------===//

namespace {
constexpr int64_t kAnyDim = ShapedType::kDynamic;

/// Checks rank and every static dimension of `value` against `expected`
/// (kAnyDim: unconstrained, e.g. the token dimension).
LogicalResult checkShape(Operation *op, StringRef name, Value value,
                         ArrayRef<int64_t> expected) {
  auto type = cast<ShapedType>(value.getType());
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

/// The value holding the op's output shape: the init of a cached (DPS) op, the result
/// of a model op.
template <typename OpT>
Value outputOf(OpT op) {
  if constexpr (OpT::template hasTrait<DestinationStyleOpInterface::Trait>())
    return op.getInit();
  else
    return op.getOut();
}

/// Operands of a cached (DPS) op are all tensors or all buffers, and its destination
/// has the element type of `input`.
LogicalResult verifyDestination(Operation *op, Value input, Value init) {
  bool tensors = false, buffers = false;
  for (Value operand : op->getOperands()) {
    tensors |= isa<TensorType>(operand.getType());
    buffers |= isa<MemRefType>(operand.getType());
  }
  if (tensors && buffers)
    return op->emitOpError() << "mixes tensors and buffers; operands must all be tensors "
                                "or all be memrefs";
  Type inputType = cast<ShapedType>(input.getType()).getElementType();
  Type initType = cast<ShapedType>(init.getType()).getElementType();
  if (inputType != initType)
    return op->emitOpError() << "'outs' must have element type " << inputType << ", got "
                             << initType;
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
      failed(checkShape(raw, "result", outputOf(op), {kAnyDim, h, d})))
    return failure();
  if (Value sinks = op.getSinks()) {
    if (failed(checkShape(raw, "sinks", sinks, {h})))
      return failure();
    if (!cast<ShapedType>(sinks.getType()).getElementType().isF32())
      return op.emitOpError() << "'sinks' must be f32 (one logit a head), got " << sinks.getType();
  }
  return success();
}

template <typename OpT> LogicalResult verifyMlaGraphForm(OpT op);

template <typename OpT>
LogicalResult verifyMlaOp(OpT op) {
  Operation *raw = op.getOperation();
  if (failed(checkLayer(raw, op.getLayer())) ||
      failed(checkPositive(raw, "num_heads", op.getNumHeads())) ||
      failed(checkPositive(raw, "kv_lora_rank", op.getKvLoraRank())) ||
      failed(checkPositive(raw, "qk_rope_head_dim", op.getQkRopeHeadDim())))
    return failure();
  if (op.getKvB())
    return verifyMlaGraphForm(op);
  if (op.getKPe() || op.getPositions() || op.getScratch() || op.getQkNopeHeadDim() ||
      op.getVHeadDim() || op.getRope() || op.getRopeStyle() || op.getSoftmaxScale())
    return op.emitOpError()
           << "k_pe, positions, scratch, qk_nope_head_dim, v_head_dim, rope, rope_style and "
              "softmax_scale belong to the whole-graph form, which needs kv_b";
  int64_t h = op.getNumHeads(), rank = op.getKvLoraRank();
  int64_t width = rank + op.getQkRopeHeadDim();
  if (failed(checkShape(raw, "q", op.getQ(), {kAnyDim, h, width})) ||
      failed(checkShape(raw, "latent", op.getLatent(), {kAnyDim, width})) ||
      failed(checkShape(raw, "result", outputOf(op), {kAnyDim, h, rank})))
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
      failed(checkShape(raw, "result", outputOf(op), {kAnyDim, h, p})))
    return failure();
  // The per-head parameters are f32 (the kernels' math; checkpoints' bf16 values widen
  // exactly at load time).
  for (auto [name, value] : {std::pair<StringRef, Value>{"a_log", op.getALog()},
                             {"d", op.getD()},
                             {"dt_bias", op.getDtBias()}}) {
    if (!value)
      continue;
    if (failed(checkShape(raw, name, value, {h})))
      return failure();
    if (!cast<ShapedType>(value.getType()).getElementType().isF32())
      return op.emitOpError() << "'" << name << "' must be f32, got "
                              << cast<ShapedType>(value.getType()).getElementType();
  }
  if ((op.getD() || op.getDtBias()) && !op.getALog())
    return op.emitOpError() << "has 'd' or 'dt_bias' but no 'a_log' (the parameters come "
                               "together)";
  for (auto [name, bound] : {std::pair<StringRef, std::optional<APFloat>>{"dt_min", op.getDtMin()},
                             {"dt_max", op.getDtMax()}})
    if (bound && (bound->isNegative() || !bound->isFinite()))
      return op.emitOpError() << "'" << name << "' must be finite and >= 0";
  return success();
}

template <typename OpT>
LogicalResult verifyGdnOp(OpT op) {
  Operation *raw = op.getOperation();
  if (failed(checkLayer(raw, op.getLayer())) ||
      failed(checkPositive(raw, "num_k_heads", op.getNumKHeads())) ||
      failed(checkPositive(raw, "num_v_heads", op.getNumVHeads())) ||
      failed(checkPositive(raw, "head_k_dim", op.getHeadKDim())) ||
      failed(checkPositive(raw, "head_v_dim", op.getHeadVDim())))
    return failure();
  if (op.getNumVHeads() % op.getNumKHeads() != 0)
    return op.emitOpError() << "num_v_heads (" << op.getNumVHeads()
                            << ") must be a multiple of num_k_heads (" << op.getNumKHeads()
                            << ")";
  int64_t hk = op.getNumKHeads(), hv = op.getNumVHeads(), dk = op.getHeadKDim(),
          dv = op.getHeadVDim();
  if (failed(checkShape(raw, "q", op.getQ(), {kAnyDim, hk, dk})) ||
      failed(checkShape(raw, "k", op.getK(), {kAnyDim, hk, dk})) ||
      failed(checkShape(raw, "v", op.getV(), {kAnyDim, hv, dv})) ||
      failed(checkShape(raw, "a", op.getA(), {kAnyDim, hv})) ||
      failed(checkShape(raw, "b", op.getB(), {kAnyDim, hv})) ||
      failed(checkShape(raw, "result", outputOf(op), {kAnyDim, hv, dv})))
    return failure();
  // The per-head parameters are f32 (checkpoints' bf16 values widen exactly at load).
  for (auto [name, value] :
       {std::pair<StringRef, Value>{"a_log", op.getALog()}, {"dt_bias", op.getDtBias()}}) {
    if (!value)
      continue;
    if (failed(checkShape(raw, name, value, {hv})))
      return failure();
    if (!cast<ShapedType>(value.getType()).getElementType().isF32())
      return op.emitOpError() << "'" << name << "' must be f32, got "
                              << cast<ShapedType>(value.getType()).getElementType();
  }
  if (Value scratch = op.getScratch()) {
    const int64_t perToken = kiln_rt_gdn_scratch_bytes_per_token(hk, hv, dk, dv);
    if (failed(checkShape(raw, "scratch", scratch, {kAnyDim, perToken})))
      return failure();
    if (!cast<ShapedType>(scratch.getType()).getElementType().isInteger(8))
      return op.emitOpError() << "'scratch' must be i8, got "
                              << cast<ShapedType>(scratch.getType()).getElementType();
  }
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
      failed(checkShape(raw, "result", outputOf(op), {kAnyDim, c})) ||
      (op.getWeight() &&
       failed(checkShape(raw, "weight", op.getWeight(),
                         {c, static_cast<int64_t>(op.getKernelSize())}))) ||
      (op.getBias() && failed(checkShape(raw, "bias", op.getBias(), {c}))))
    return failure();
  if (op.getBias() && !op.getWeight())
    return op.emitOpError() << "has a 'bias' but no 'weight'";
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
  return shardUnitShape(getUnit(), getShard(), planShardDivisor(*this, runtime));
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
LogicalResult GatedDeltaNetOp::verify() { return verifyGdnOp(*this); }

int64_t AttentionOp::getLayerIndex() { return getLayer(); }
int64_t MlaAttentionOp::getLayerIndex() { return getLayer(); }
int64_t SsmOp::getLayerIndex() { return getLayer(); }
int64_t CausalConvOp::getLayerIndex() { return getLayer(); }
int64_t GatedDeltaNetOp::getLayerIndex() { return getLayer(); }

SmallVector<ResourceRequest> AttentionOp::getResourceRequests(SpecAttr spec,
                                                              RuntimeAttr runtime) {
  SmallVector<int64_t> unit = {2, static_cast<int64_t>(getNumKvHeads()),
                               static_cast<int64_t>(getHeadDim())};
  std::optional<int64_t> window = getSlidingWindow();
  if (!getDraft())
    return {ResourceRequest{ResourceKind::kv, unit, runtime.getKvDtype(), 1, window}};
  if (specUsesDraftLayers(spec, getDraft()))
    return {ResourceRequest{ResourceKind::draft_kv, unit, runtime.getKvDtype(), 1, window}};
  return {};
}

/// The bytes of an FP8 latent token: the latent in e4m3, an f32 scale a 128 of its values,
/// the rope key in bf16 (kiln/Kernels/Decode.h; 656 at DeepSeek's 512 + 64).
static int64_t mlaFp8TokenBytes(int64_t rank, int64_t rope) {
  return rank + 4 * llvm::divideCeil(rank, KILN_MLA_FP8_GROUP) + 2 * rope;
}
static_assert(KILN_MLA_FP8_TOKEN_BYTES == KILN_MLA_KV_LORA_RANK +
                                              4 * KILN_MLA_KV_LORA_RANK / KILN_MLA_FP8_GROUP +
                                              2 * KILN_MLA_ROPE_DIM,
              "the FP8 latent token's layout");

SmallVector<ResourceRequest> MlaAttentionOp::getResourceRequests(SpecAttr spec,
                                                                 RuntimeAttr runtime) {
  // MLA caches one latent row per token, shared by all heads: never sharded. An
  // f8E4M3FN cache keeps the FP8 latent token: its bytes, counted in e4m3-sized units
  // (the rope key stays bf16 and the scales f32 inside them).
  SmallVector<int64_t> unit = {static_cast<int64_t>(getKvLoraRank() + getQkRopeHeadDim())};
  if (isa<Float8E4M3FNType>(runtime.getKvDtype()))
    unit = {mlaFp8TokenBytes(getKvLoraRank(), getQkRopeHeadDim())};
  if (!getDraft())
    return {ResourceRequest{ResourceKind::mla_latent, unit, runtime.getKvDtype(),
                            std::nullopt, std::nullopt}};
  if (specUsesDraftLayers(spec, getDraft()))
    return {ResourceRequest{ResourceKind::draft_kv, unit, runtime.getKvDtype(),
                            std::nullopt, std::nullopt}};
  return {};
}

namespace {
/// The resources of a Mamba2 mixer (model and cached op alike).
SmallVector<ResourceRequest> ssmRequests(MLIRContext *context, int64_t h, int64_t p,
                                         int64_t n, int64_t g, Type modelType,
                                         SpecAttr spec, RuntimeAttr runtime) {
  Type stateType = runtime.getSsmStateType();
  Type f32 = Float32Type::get(context);
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
  // Replay: x, B and dt (after softplus and clamp) of the last two speculative steps
  // (one being read while the next is written), so the state after the accepted prefix
  // is recomputed token by token: docs/replay.md.
  requests.push_back({ResourceKind::replay_x, {2, steps, h, p}, modelType, 2, std::nullopt});
  requests.push_back({ResourceKind::replay_b, {2, steps, g, n}, modelType, 2, std::nullopt});
  requests.push_back({ResourceKind::replay_dt, {2, h, steps}, f32, 1, std::nullopt});
  return requests;
}

/// The resources of a causal conv (model and cached op alike).
SmallVector<ResourceRequest> convRequests(int64_t c, int64_t w, Type modelType, SpecAttr spec) {
  SmallVector<ResourceRequest> requests = {
      {ResourceKind::conv_state, {c, w}, modelType, 0, std::nullopt}};
  if (spec)
    requests.push_back({ResourceKind::intermediate_conv_state,
                        {static_cast<int64_t>(spec.getTokensPerStep()), c, w}, modelType, 1,
                        std::nullopt});
  return requests;
}

/// The resources of a Gated DeltaNet layer (model and cached op alike).
SmallVector<ResourceRequest> gdnRequests(MLIRContext *context, int64_t hk, int64_t hv,
                                         int64_t dk, int64_t dv, Type modelType,
                                         SpecAttr spec, RuntimeAttr runtime) {
  // The recurrent state is kept like a Mamba2 state (the runtime's SSM state dtype,
  // f32 unless the config says otherwise), divided across TP ranks by value head.
  Type stateType = runtime.getSsmStateType();
  Type f32 = Float32Type::get(context);
  SmallVector<ResourceRequest> requests = {
      {ResourceKind::gdn_state, {hv, dk, dv}, stateType, 0, std::nullopt}};
  if (!spec)
    return requests;
  int64_t steps = spec.getTokensPerStep();
  if (spec.getSsm() == SsmSpecMode::rewind) {
    requests.push_back({ResourceKind::intermediate_gdn_state, {steps, hv, dk, dv}, stateType,
                        1, std::nullopt});
    return requests;
  }
  // Replay: k, v, g and beta of the last two steps, from which the state after the
  // accepted prefix is recomputed (q does not enter the state).
  requests.push_back(
      {ResourceKind::gdn_replay_k, {2, steps, hk, dk}, modelType, 2, std::nullopt});
  requests.push_back(
      {ResourceKind::gdn_replay_v, {2, steps, hv, dv}, modelType, 2, std::nullopt});
  requests.push_back({ResourceKind::gdn_replay_gb, {2, hv, steps, 2}, f32, 1, std::nullopt});
  return requests;
}

} // namespace

SmallVector<ResourceRequest> SsmOp::getResourceRequests(SpecAttr spec, RuntimeAttr runtime) {
  return ssmRequests(getContext(), getNumHeads(), getHeadDim(), getStateSize(), getNGroups(),
                     cast<ShapedType>(getX().getType()).getElementType(), spec, runtime);
}

SmallVector<ResourceRequest> CausalConvOp::getResourceRequests(SpecAttr spec, RuntimeAttr) {
  return convRequests(getConvDim(), getKernelSize() - 1,
                      cast<ShapedType>(getX().getType()).getElementType(), spec);
}

SmallVector<ResourceRequest> GatedDeltaNetOp::getResourceRequests(SpecAttr spec,
                                                                  RuntimeAttr runtime) {
  return gdnRequests(getContext(), getNumKHeads(), getNumVHeads(), getHeadKDim(),
                     getHeadVDim(), cast<ShapedType>(getV().getType()).getElementType(), spec,
                     runtime);
}

namespace {
/// `tensor.empty` of `type`, its dynamic dimensions read from the same dimensions of
/// `like` (the token dimension of an input).
Value emptyLike(OpBuilder &builder, Location loc, Type type, Value like) {
  auto tensorType = cast<RankedTensorType>(type);
  SmallVector<Value> dynamicSizes;
  for (int64_t dim = 0; dim < tensorType.getRank(); ++dim)
    if (tensorType.isDynamicDim(dim))
      dynamicSizes.push_back(tensor::DimOp::create(builder, loc, like, dim));
  return tensor::EmptyOp::create(builder, loc, tensorType, dynamicSizes);
}

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
  Value init = emptyLike(builder, getLoc(), getOut().getType(), getQ());
  return CachedAttentionOp::create(builder, getLoc(), getOut().getType(), getQ(), getK(), getV(),
                                   getSinks(), kv, init, getLayerAttr(), getNumHeadsAttr(),
                                   getNumKvHeadsAttr(), getHeadDimAttr(), getSlidingWindowAttr(),
                                   getDraftAttr(), nullptr, nullptr, nullptr);
}

Operation *MlaAttentionOp::buildCachedForm(OpBuilder &builder, ValueRange resources) {
  Value cache = findResource(resources, getDraft() ? ResourceKind::draft_kv
                                                   : ResourceKind::mla_latent);
  Value init = emptyLike(builder, getLoc(), getOut().getType(), getQ());
  return CachedMlaAttentionOp::create(
      builder, getLoc(), getOut().getType(), getQ(), getLatent(), getKPe(), getPositions(),
      getKvB(), getScratch(), cache, init, getLayerAttr(), getNumHeadsAttr(),
      getKvLoraRankAttr(), getQkRopeHeadDimAttr(), getDraftAttr(), getQkNopeHeadDimAttr(),
      getVHeadDimAttr(), getRopeAttr(), getRopeStyleAttr(), getSoftmaxScaleAttr(), nullptr,
      nullptr, nullptr);
}

Operation *SsmOp::buildCachedForm(OpBuilder &builder, ValueRange resources) {
  auto get = [&](ResourceKind kind) { return findResource(resources, kind); };
  Value init = emptyLike(builder, getLoc(), getOut().getType(), getX());
  return CachedSsmOp::create(
      builder, getLoc(), getOut().getType(), getX(), getDt(), getB(), getC(), getZ(),
      getALog(), getD(), getDtBias(), get(ResourceKind::ssm_state), get(ResourceKind::intermediate_ssm_state),
      get(ResourceKind::replay_x), get(ResourceKind::replay_b), get(ResourceKind::replay_dt),
      init, getLayerAttr(),
      getNumHeadsAttr(), getHeadDimAttr(), getStateSizeAttr(), getNGroupsAttr(),
      getDraftAttr(), getDtMinAttr(), getDtMaxAttr(), nullptr, nullptr, nullptr);
}

Operation *GatedDeltaNetOp::buildCachedForm(OpBuilder &builder, ValueRange resources) {
  auto get = [&](ResourceKind kind) { return findResource(resources, kind); };
  Value init = emptyLike(builder, getLoc(), getOut().getType(), getV());
  return CachedGatedDeltaNetOp::create(
      builder, getLoc(), getOut().getType(), getQ(), getK(), getV(), getA(), getB(), getALog(),
      getDtBias(), getScratch(), get(ResourceKind::gdn_state),
      get(ResourceKind::intermediate_gdn_state), get(ResourceKind::gdn_replay_k),
      get(ResourceKind::gdn_replay_v), get(ResourceKind::gdn_replay_gb), init, getLayerAttr(),
      getNumKHeadsAttr(), getNumVHeadsAttr(), getHeadKDimAttr(), getHeadVDimAttr(), getDraftAttr(),
      nullptr, nullptr, nullptr);
}

Operation *CausalConvOp::buildCachedForm(OpBuilder &builder, ValueRange resources) {
  Value init = emptyLike(builder, getLoc(), getOut().getType(), getX());
  return CachedCausalConvOp::create(
      builder, getLoc(), getOut().getType(), getX(), getWeight(), getBias(),
      findResource(resources, ResourceKind::conv_state),
      findResource(resources, ResourceKind::intermediate_conv_state), init, getLayerAttr(),
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
/// How a recurrent op recovers the state of the accepted drafts: rewind keeps the state
/// after each draft in `intermediate`, replay keeps the inputs in the `replay_*` slots.
/// All replay slots or none, and never both modes.
LogicalResult verifyRecoverySlots(Operation *op, ArrayRef<CacheSlot> slots) {
  SmallVector<StringRef> replay;
  bool anyReplay = false, allReplay = true, rewind = false;
  for (const CacheSlot &slot : slots) {
    if (slot.name == "intermediate") {
      rewind = static_cast<bool>(slot.value);
    } else if (slot.name.starts_with("replay_")) {
      replay.push_back(slot.name);
      anyReplay |= static_cast<bool>(slot.value);
      allReplay &= static_cast<bool>(slot.value);
    }
  }
  if (anyReplay && !allReplay) {
    std::string names;
    for (auto [i, name] : llvm::enumerate(replay))
      names += (i == 0 ? "" : i + 1 == replay.size() ? " and " : ", ") + name.str();
    return op->emitOpError() << "replay slots are all-or-none: replay mode needs " << names;
  }
  if (anyReplay && rewind)
    return op->emitOpError() << "'intermediate' (rewind mode) and the replay slots (replay "
                                "mode) are exclusive";
  return success();
}

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
  if (failed(verifyAttentionOp(*this)) || failed(verifyDestination(*this, getQ(), getInit())))
    return failure();
  SmallVector<StringRef, 1> required;
  if (!getDraft())
    required.push_back("kv");
  return verifySlots(*this, getCacheSlots(), required);
}
int64_t CachedAttentionOp::getLayerIndex() { return getLayer(); }
OpFamily CachedAttentionOp::getOpFamily() { return OpFamily::attention; }

KernelShape CachedAttentionOp::getKernelShape(RuntimeAttr runtime) {
  KernelShape shape;
  shape.headDim = getHeadDim();
  shape.dtype = runtime.getKvDtype();
  shape.pageSize = runtime.getPageSize();
  shape.groupSize = getNumHeads() / getNumKvHeads();
  shape.numHeads = getNumHeads();
  return shape;
}
std::optional<DraftKind> CachedAttentionOp::getDraftKind() { return getDraft(); }
SmallVector<CacheSlot> CachedAttentionOp::getCacheSlots() {
  if (getDraft())
    return {CacheSlot{"kv", {ResourceKind::draft_kv}, true, getKv()}};
  return {CacheSlot{"kv", {ResourceKind::kv}, false, getKv()}};
}
SmallVector<ResourceRequest> CachedAttentionOp::getResourceRequestsUnder(SpecAttr,
                                                                           RuntimeAttr) {
  return {}; // its needs do not depend on the SSM recovery mode
}
void CachedAttentionOp::detachResource(Value resource) {
  clearSlotHolding(resource, {getKvMutable()});
}

// MLA
LogicalResult CachedMlaAttentionOp::verify() {
  if (failed(verifyMlaOp(*this)) || failed(verifyDestination(*this, getQ(), getInit())))
    return failure();
  SmallVector<StringRef, 1> required;
  if (!getDraft())
    required.push_back("cache");
  return verifySlots(*this, getCacheSlots(), required);
}
int64_t CachedMlaAttentionOp::getLayerIndex() { return getLayer(); }
OpFamily CachedMlaAttentionOp::getOpFamily() { return OpFamily::mla; }

KernelShape CachedMlaAttentionOp::getKernelShape(RuntimeAttr runtime) {
  KernelShape shape;
  shape.headDim = getKvLoraRank() + getQkRopeHeadDim();
  shape.dtype = runtime.getKvDtype();
  shape.pageSize = runtime.getPageSize();
  shape.groupSize = getNumHeads();
  shape.numHeads = getNumHeads() / planShardDivisor(*this, runtime);
  return shape;
}
std::optional<DraftKind> CachedMlaAttentionOp::getDraftKind() { return getDraft(); }
SmallVector<CacheSlot> CachedMlaAttentionOp::getCacheSlots() {
  if (getDraft())
    return {CacheSlot{"cache", {ResourceKind::draft_kv}, true, getCache()}};
  return {CacheSlot{"cache", {ResourceKind::mla_latent}, false, getCache()}};
}
SmallVector<ResourceRequest> CachedMlaAttentionOp::getResourceRequestsUnder(SpecAttr,
                                                                              RuntimeAttr) {
  return {}; // its needs do not depend on the SSM recovery mode
}
void CachedMlaAttentionOp::detachResource(Value resource) {
  clearSlotHolding(resource, {getCacheMutable()});
}

// SSM
LogicalResult CachedSsmOp::verify() {
  if (failed(verifySsmOp(*this)) || failed(verifyDestination(*this, getX(), getInit())) ||
      failed(verifySlots(*this, getCacheSlots(), {"state"})))
    return failure();
  return verifyRecoverySlots(*this, getCacheSlots());
}
int64_t CachedSsmOp::getLayerIndex() { return getLayer(); }
OpFamily CachedSsmOp::getOpFamily() { return OpFamily::ssm; }

KernelShape CachedSsmOp::getKernelShape(RuntimeAttr runtime) {
  KernelShape shape;
  shape.headDim = getHeadDim();
  shape.dtype = runtime.getSsmStateType();
  shape.needsIntermediates = static_cast<bool>(getIntermediate());
  shape.needsReplay = static_cast<bool>(getReplayX());
  return shape;
}
std::optional<DraftKind> CachedSsmOp::getDraftKind() { return getDraft(); }
SmallVector<CacheSlot> CachedSsmOp::getCacheSlots() {
  return {CacheSlot{"state", {ResourceKind::ssm_state}, false, getState()},
          CacheSlot{"intermediate", {ResourceKind::intermediate_ssm_state}, true,
                    getIntermediate()},
          CacheSlot{"replay_x", {ResourceKind::replay_x}, true, getReplayX()},
          CacheSlot{"replay_b", {ResourceKind::replay_b}, true, getReplayB()},
          CacheSlot{"replay_dt", {ResourceKind::replay_dt}, true, getReplayDt()}};
}
SmallVector<ResourceRequest> CachedSsmOp::getResourceRequestsUnder(SpecAttr spec,
                                                                     RuntimeAttr runtime) {
  return ssmRequests(getContext(), getNumHeads(), getHeadDim(), getStateSize(), getNGroups(),
                     cast<ShapedType>(getX().getType()).getElementType(), spec, runtime);
}
void CachedSsmOp::detachResource(Value resource) {
  clearSlotHolding(resource, {getIntermediateMutable(), getReplayXMutable(),
                              getReplayBMutable(), getReplayDtMutable()});
}

// Gated DeltaNet
LogicalResult CachedGatedDeltaNetOp::verify() {
  if (failed(verifyGdnOp(*this)) || failed(verifyDestination(*this, getV(), getInit())) ||
      failed(verifySlots(*this, getCacheSlots(), {"state"})))
    return failure();
  return verifyRecoverySlots(*this, getCacheSlots());
}
int64_t CachedGatedDeltaNetOp::getLayerIndex() { return getLayer(); }
OpFamily CachedGatedDeltaNetOp::getOpFamily() { return OpFamily::gdn; }

KernelShape CachedGatedDeltaNetOp::getKernelShape(RuntimeAttr runtime) {
  KernelShape shape;
  shape.headDim = getHeadKDim();
  shape.dtype = runtime.getSsmStateType();
  shape.numHeads = getNumVHeads() / planShardDivisor(*this, runtime);
  shape.needsIntermediates = static_cast<bool>(getIntermediate());
  shape.needsReplay = static_cast<bool>(getReplayK());
  return shape;
}
std::optional<DraftKind> CachedGatedDeltaNetOp::getDraftKind() { return getDraft(); }
SmallVector<CacheSlot> CachedGatedDeltaNetOp::getCacheSlots() {
  return {CacheSlot{"state", {ResourceKind::gdn_state}, false, getState()},
          CacheSlot{"intermediate", {ResourceKind::intermediate_gdn_state}, true,
                    getIntermediate()},
          CacheSlot{"replay_k", {ResourceKind::gdn_replay_k}, true, getReplayK()},
          CacheSlot{"replay_v", {ResourceKind::gdn_replay_v}, true, getReplayV()},
          CacheSlot{"replay_gb", {ResourceKind::gdn_replay_gb}, true, getReplayGb()}};
}
SmallVector<ResourceRequest> CachedGatedDeltaNetOp::getResourceRequestsUnder(
    SpecAttr spec, RuntimeAttr runtime) {
  return gdnRequests(getContext(), getNumKHeads(), getNumVHeads(), getHeadKDim(),
                     getHeadVDim(), cast<ShapedType>(getV().getType()).getElementType(), spec,
                     runtime);
}
void CachedGatedDeltaNetOp::detachResource(Value resource) {
  clearSlotHolding(resource, {getIntermediateMutable(), getReplayKMutable(),
                              getReplayVMutable(), getReplayGbMutable()});
}

// Conv
LogicalResult CachedCausalConvOp::verify() {
  if (failed(verifyConvOp(*this)) || failed(verifyDestination(*this, getX(), getInit())))
    return failure();
  return verifySlots(*this, getCacheSlots(), {"state"});
}
int64_t CachedCausalConvOp::getLayerIndex() { return getLayer(); }
OpFamily CachedCausalConvOp::getOpFamily() { return OpFamily::conv; }

KernelShape CachedCausalConvOp::getKernelShape(RuntimeAttr) {
  KernelShape shape;
  shape.dtype = cast<RankedTensorType>(getX().getType()).getElementType();
  shape.needsIntermediates = static_cast<bool>(getIntermediate());
  return shape;
}
std::optional<DraftKind> CachedCausalConvOp::getDraftKind() { return getDraft(); }
SmallVector<CacheSlot> CachedCausalConvOp::getCacheSlots() {
  return {CacheSlot{"state", {ResourceKind::conv_state}, false, getState()},
          CacheSlot{"intermediate", {ResourceKind::intermediate_conv_state}, true,
                    getIntermediate()}};
}
SmallVector<ResourceRequest> CachedCausalConvOp::getResourceRequestsUnder(SpecAttr spec,
                                                                            RuntimeAttr) {
  return convRequests(getConvDim(), getKernelSize() - 1,
                      cast<ShapedType>(getX().getType()).getElementType(), spec);
}
void CachedCausalConvOp::detachResource(Value resource) {
  clearSlotHolding(resource, {getIntermediateMutable()});
}

//===----------------------------------------------------------------------===//
// Runtime calls of cached ops (RuntimeCallOpInterface)
//===----------------------------------------------------------------------===//

namespace {
/// Planned arena offset of the resource in a slot; -1 when unplanned or empty.
int64_t plannedOffset(Value resource) {
  if (!resource)
    return -1;
  auto op = resource.getDefiningOp<CacheResourceOp>();
  return op && op.getOffset() ? *op.getOffset() : -1;
}

LogicalResult requireBuffers(Operation *op) {
  for (Value operand : op->getOperands())
    if (isa<TensorType>(operand.getType()))
      return op->emitOpError() << "lowers to a runtime call only on buffers; bufferize first";
  return success();
}

RuntimeArg kernelArg(StringAttr name) {
  RuntimeArg arg{RuntimeArg::Kind::kernel};
  arg.symbol = name ? name.getValue() : StringRef();
  return arg;
}

int64_t specDecModeValue(std::optional<SpecDecMode> mode) {
  return static_cast<int64_t>(mode.value_or(SpecDecMode::single_token));
}
} // namespace

/// The planned per-layer stride of a layer loop's resource (0 outside a loop).
static int64_t plannedStride(Value resource) {
  auto op = resource ? resource.getDefiningOp<CacheResourceOp>() : CacheResourceOp();
  return op && op.getStride() ? static_cast<int64_t>(*op.getStride()) : 0;
}

bool CachedAttentionOp::hasPerLayerRuntimeCall() { return true; }

FailureOr<RuntimeCall> CachedAttentionOp::getRuntimeCall() {
  if (failed(requireBuffers(*this)))
    return failure();
  ModuleConfig config = getModuleConfig((*this)->getParentOfType<ModuleOp>());
  if (!config.runtime)
    return emitOpError() << "needs the module's 'kiln.runtime' to lower (page size)";
  int64_t offset = plannedOffset(getKv());
  if (offset < 0)
    return emitOpError() << "layer " << getLayer()
                         << ": the KV resource has no planned offset; run kiln-plan-memory";
  // kiln_rt_attention takes bf16 activations and a bf16, f16 or f8E4M3FN pool
  // (kv_dtype); any other cache dtype has no kernel that reads it next to bf16
  // activations.
  Type bf16 = BFloat16Type::get(getContext());
  auto resource = getKv().getDefiningOp<CacheResourceOp>();
  Type cacheType = resource ? resource.getElementType() : bf16;
  int64_t kvDtype = KILN_RT_DTYPE_BF16;
  if (isa<Float8E4M3FNType>(cacheType))
    kvDtype = KILN_RT_DTYPE_F8E4M3FN;
  else if (cacheType.isF16())
    kvDtype = KILN_RT_DTYPE_F16;
  else if (cacheType != bf16)
    return emitOpError() << "layer " << getLayer() << ": the KV cache is " << cacheType
                         << ", but the runtime's attention kernels read bf16, f16 or f8E4M3FN "
                            "caches next to bf16 activations; compile with --kv-dtype bf16, "
                            "f16 or fp8 to run the model";
  Type qType = cast<ShapedType>(getQ().getType()).getElementType();
  if (qType != bf16)
    return emitOpError() << "layer " << getLayer() << ": q is " << qType
                         << ", but the runtime's attention path takes bf16 activations only";
  return RuntimeCall{
      "kiln_rt_attention",
      {RuntimeArg::layer(getLayer()), RuntimeArg::cacheOffset(offset, plannedStride(getKv())),
       RuntimeArg::pointer(getQ()), RuntimeArg::pointer(getK()), RuntimeArg::pointer(getV()),
       RuntimeArg::f32Pointer(getSinks()), RuntimeArg::pointer(getInit()),
       RuntimeArg::dim(getQ(), 0), RuntimeArg::i32(getNumHeads()), RuntimeArg::i32(getNumKvHeads()),
       RuntimeArg::i32(getHeadDim()), RuntimeArg::i32(config.runtime.getPageSize()),
       RuntimeArg::i32(getSlidingWindow().value_or(0)), kernelArg(getDecodeKernelAttr()),
       kernelArg(getPrefillKernelAttr()), RuntimeArg::i32(specDecModeValue(getSpecDecMode())),
       RuntimeArg::f32(0.0), RuntimeArg::i32(kvDtype)}};
}

// Decode: rope(k_pe), the latent append, rope(q_pe), the absorb GEMM, mla_decode (one
// split: no combine), the value GEMM; each GEMM may add a split-K reduction.
uint64_t CachedMlaAttentionOp::getMaxDecodeLaunches() { return 8; }

FailureOr<RuntimeCall> CachedMlaAttentionOp::getRuntimeCall() {
  if (!isWholeGraph())
    return emitOpError() << "layer " << getLayer()
                         << ": the cache-planning form of MLA (no kv_b) does not lower; "
                            "import the model's whole graph (quantized checkpoints, such as "
                            "DeepSeek-V3's FP8 release, import as this form)";
  if (failed(requireBuffers(*this)))
    return failure();
  ModuleConfig config = getModuleConfig((*this)->getParentOfType<ModuleOp>());
  if (!config.runtime)
    return emitOpError() << "needs the module's 'kiln.runtime' to lower (page size)";
  int64_t offset = plannedOffset(getCache());
  if (offset < 0)
    return emitOpError() << "layer " << getLayer()
                         << ": the latent resource has no planned offset; run kiln-plan-memory";
  // kiln_rt_mla_attention reads a bf16 latent pool or the FP8 latent token (f8E4M3FN).
  auto resource = getCache().getDefiningOp<CacheResourceOp>();
  Type bf16 = BFloat16Type::get(getContext());
  Type cacheType = resource ? resource.getElementType() : bf16;
  int64_t kvDtype = KILN_RT_DTYPE_BF16;
  if (isa<Float8E4M3FNType>(cacheType))
    kvDtype = KILN_RT_DTYPE_F8E4M3FN;
  else if (cacheType != bf16)
    return emitOpError() << "layer " << getLayer() << ": the latent cache is " << cacheType
                         << ", but the MLA kernels read bf16 or f8E4M3FN caches; compile with "
                            "--kv-dtype bf16 or fp8";
  RopeAttr rope = *getRope();
  int64_t style = static_cast<int64_t>(getRopeStyle().value_or(RopeStyle::rotate_half));
  return RuntimeCall{
      "kiln_rt_mla_attention",
      {RuntimeArg::i32(getLayer()), RuntimeArg::i64(offset), RuntimeArg::pointer(getQ()),
       RuntimeArg::pointer(getLatent()), RuntimeArg::stridedPointer(getKPe()),
       RuntimeArg::rowStride(getKPe()), RuntimeArg::pointer(getPositions()),
       RuntimeArg::pointer(getKvB()), RuntimeArg::pointer(getScratch()),
       RuntimeArg::pointer(getInit()), RuntimeArg::dim(getQ(), 0),
       RuntimeArg::i32(getNumHeads()), RuntimeArg::i32(getKvLoraRank()),
       RuntimeArg::i32(getQkRopeHeadDim()), RuntimeArg::i32(*getQkNopeHeadDim()),
       RuntimeArg::i32(*getVHeadDim()), RuntimeArg::i32(config.runtime.getPageSize()),
       kernelArg(getDecodeKernelAttr()), kernelArg(getPrefillKernelAttr()),
       RuntimeArg::i32(specDecModeValue(getSpecDecMode())),
       RuntimeArg::f32(getSoftmaxScale()->convertToDouble()), RuntimeArg::i32(style),
       RuntimeArg::i32(static_cast<int64_t>(rope.getType())),
       RuntimeArg::f32(rope.getThetaValue()), RuntimeArg::f32(rope.getFactorValue()),
       RuntimeArg::f32(rope.getLowValue()), RuntimeArg::f32(rope.getHighValue()),
       RuntimeArg::i64(rope.getOriginalMaxPosition()),
       RuntimeArg::f32(rope.getAttentionFactorValue()), RuntimeArg::i32(kvDtype)}};
}

namespace {
/// The cache dtype code of a state resource the recurrent kernels read (f32 or bf16).
FailureOr<int64_t> stateDtypeOf(Operation *op, int64_t layer, Value resource) {
  auto cache = resource.getDefiningOp<CacheResourceOp>();
  Type type = cache ? cache.getElementType() : Type();
  if (type && type.isF32())
    return static_cast<int64_t>(KILN_RT_DTYPE_F32);
  if (type && type.isBF16())
    return static_cast<int64_t>(KILN_RT_DTYPE_BF16);
  return op->emitOpError() << "layer " << layer << ": the state is " << type
                           << ", but the recurrent kernels keep f32 or bf16 states";
}

/// Planned offsets of a recurrent op's state and its speculative buffers: the rewind
/// intermediates or the replay buffers (-1 where the slot is empty).
LogicalResult stateOffsets(Operation *op, int64_t layer, Value state,
                           ArrayRef<Value> speculative, int64_t &stateOffset,
                           MutableArrayRef<int64_t> speculativeOffsets) {
  stateOffset = plannedOffset(state);
  bool planned = stateOffset >= 0;
  for (auto [value, offset] : llvm::zip_equal(speculative, speculativeOffsets)) {
    offset = value ? plannedOffset(value) : -1;
    planned &= !value || offset >= 0;
  }
  if (!planned)
    return op->emitOpError() << "layer " << layer
                             << ": the state has no planned offset; run kiln-plan-memory";
  return success();
}

LogicalResult requireBf16(Operation *op, int64_t layer, std::initializer_list<Value> values) {
  for (Value value : values)
    if (value && !cast<ShapedType>(value.getType()).getElementType().isBF16())
      return op->emitOpError() << "layer " << layer << ": the recurrent kernels take bf16 "
                                  "activations, got "
                               << value.getType();
  return success();
}

double clampValue(std::optional<APFloat> bound) {
  return bound ? bound->convertToDouble() : 0.0;
}
} // namespace

FailureOr<RuntimeCall> CachedSsmOp::getRuntimeCall() {
  if (failed(requireBuffers(*this)))
    return failure();
  if (!getALog())
    return emitOpError() << "layer " << getLayer()
                         << ": lowering needs the layer's parameters (a_log, d, dt_bias)";
  if (getZ())
    return emitOpError() << "layer " << getLayer()
                         << ": a gate inside the scan is not lowered; apply it in a "
                            "kiln.gated_rms_norm after the scan (Mamba2's order)";
  // intermediate, replay_x, replay_b, replay_dt
  int64_t stateOffset, speculative[4];
  if (failed(stateOffsets(*this, getLayer(), getState(),
                          {getIntermediate(), getReplayX(), getReplayB(), getReplayDt()},
                          stateOffset, speculative)) ||
      failed(requireBf16(*this, getLayer(), {getX(), getDt(), getB(), getC(), getInit()})))
    return failure();
  FailureOr<int64_t> dtype = stateDtypeOf(*this, getLayer(), getState());
  if (failed(dtype))
    return failure();
  return RuntimeCall{
      "kiln_rt_mamba_ssm",
      {RuntimeArg::i32(getLayer()), RuntimeArg::i64(stateOffset),
       RuntimeArg::i64(speculative[0]), RuntimeArg::i64(speculative[1]),
       RuntimeArg::i64(speculative[2]), RuntimeArg::i64(speculative[3]),
       RuntimeArg::stridedPointer(getX()), RuntimeArg::stridedPointer(getDt()),
       RuntimeArg::stridedPointer(getB()), RuntimeArg::stridedPointer(getC()),
       RuntimeArg::f32Pointer(getALog()), RuntimeArg::f32Pointer(getD()),
       RuntimeArg::f32Pointer(getDtBias()), RuntimeArg::pointer(getInit()),
       RuntimeArg::dim(getX(), 0), RuntimeArg::i64(getNumHeads()), RuntimeArg::i64(getHeadDim()),
       RuntimeArg::i64(getStateSize()), RuntimeArg::i64(getNGroups()),
       RuntimeArg::rowStride(getX()), RuntimeArg::rowStride(getDt()),
       RuntimeArg::rowStride(getB()), RuntimeArg::f32(clampValue(getDtMin())),
       RuntimeArg::f32(clampValue(getDtMax())), RuntimeArg::i32(*dtype),
       kernelArg(getDecodeKernelAttr()), kernelArg(getPrefillKernelAttr()),
       RuntimeArg::i32(specDecModeValue(getSpecDecMode()))}};
}
FailureOr<RuntimeCall> CachedGatedDeltaNetOp::getRuntimeCall() {
  if (failed(requireBuffers(*this)))
    return failure();
  if (!getALog() || !getDtBias() || !getScratch())
    return emitOpError() << "layer " << getLayer()
                         << ": lowering needs the layer's parameters (a_log, dt_bias) and "
                            "its scratch";
  // intermediate, replay_k, replay_v, replay_gb
  int64_t stateOffset, speculative[4];
  if (failed(stateOffsets(*this, getLayer(), getState(),
                          {getIntermediate(), getReplayK(), getReplayV(), getReplayGb()},
                          stateOffset, speculative)) ||
      failed(requireBf16(*this, getLayer(), {getQ(), getK(), getV(), getA(), getB(), getInit()})))
    return failure();
  FailureOr<int64_t> dtype = stateDtypeOf(*this, getLayer(), getState());
  if (failed(dtype))
    return failure();
  if (*dtype != KILN_RT_DTYPE_F32)
    return emitOpError() << "layer " << getLayer()
                         << ": the Gated DeltaNet kernels keep f32 states";
  return RuntimeCall{"kiln_rt_gated_delta_net",
                     {RuntimeArg::i32(getLayer()),
                      RuntimeArg::i64(stateOffset),
                      RuntimeArg::i64(speculative[0]),
                      RuntimeArg::i64(speculative[1]),
                      RuntimeArg::i64(speculative[2]),
                      RuntimeArg::i64(speculative[3]),
                      RuntimeArg::stridedPointer(getQ()),
                      RuntimeArg::stridedPointer(getK()),
                      RuntimeArg::stridedPointer(getV()),
                      RuntimeArg::stridedPointer(getA()),
                      RuntimeArg::stridedPointer(getB()),
                      RuntimeArg::f32Pointer(getALog()),
                      RuntimeArg::f32Pointer(getDtBias()),
                      RuntimeArg::pointer(getScratch()),
                      RuntimeArg::pointer(getInit()),
                      RuntimeArg::dim(getQ(), 0),
                      RuntimeArg::i64(getNumKHeads()),
                      RuntimeArg::i64(getNumVHeads()),
                      RuntimeArg::i64(getHeadKDim()),
                      RuntimeArg::i64(getHeadVDim()),
                      RuntimeArg::rowStride(getQ()),
                      RuntimeArg::rowStride(getK()),
                      RuntimeArg::rowStride(getV()),
                      RuntimeArg::rowStride(getA()),
                      RuntimeArg::rowStride(getB()),
                      RuntimeArg::i32(*dtype),
                      kernelArg(getDecodeKernelAttr()),
                      kernelArg(getPrefillKernelAttr()),
                      RuntimeArg::i32(specDecModeValue(getSpecDecMode()))}};
}
FailureOr<RuntimeCall> CachedCausalConvOp::getRuntimeCall() {
  if (failed(requireBuffers(*this)))
    return failure();
  if (!getWeight())
    return emitOpError() << "layer " << getLayer()
                         << ": lowering needs the conv's weight (and bias, if any)";
  int64_t stateOffset, interOffset[1];
  if (failed(stateOffsets(*this, getLayer(), getState(), {getIntermediate()}, stateOffset,
                          interOffset)) ||
      failed(requireBf16(*this, getLayer(), {getX(), getWeight(), getBias(), getInit()})))
    return failure();
  FailureOr<int64_t> dtype = stateDtypeOf(*this, getLayer(), getState());
  if (failed(dtype))
    return failure();
  return RuntimeCall{
      "kiln_rt_causal_conv",
      {RuntimeArg::i32(getLayer()), RuntimeArg::i64(stateOffset), RuntimeArg::i64(interOffset[0]),
       RuntimeArg::stridedPointer(getX()), RuntimeArg::pointer(getWeight()),
       RuntimeArg::pointer(getBias()), RuntimeArg::pointer(getInit()),
       RuntimeArg::dim(getX(), 0), RuntimeArg::i64(getConvDim()),
       RuntimeArg::i32(getKernelSize()), RuntimeArg::rowStride(getX()),
       RuntimeArg::i32(getSilu() ? 1 : 0), RuntimeArg::i32(*dtype),
       kernelArg(getDecodeKernelAttr()), kernelArg(getPrefillKernelAttr()),
       RuntimeArg::i32(specDecModeValue(getSpecDecMode()))}};
}

//===----------------------------------------------------------------------===//
// Compute ops
//===----------------------------------------------------------------------===//

namespace {
ShapedType shapedOf(Value value) { return cast<ShapedType>(value.getType()); }

/// Reads of every input buffer, a write of the init buffer; nothing on tensors.
void computeEffects(Operation *op,
                    SmallVectorImpl<SideEffects::EffectInstance<MemoryEffects::Effect>> &effects) {
  auto dps = cast<DestinationStyleOpInterface>(op);
  for (OpOperand &operand : op->getOpOperands()) {
    if (!isa<MemRefType>(operand.get().getType()))
      continue;
    if (dps.isDpsInit(&operand))
      effects.emplace_back(MemoryEffects::Write::get(), &operand,
                           SideEffects::DefaultResource::get());
    else
      effects.emplace_back(MemoryEffects::Read::get(), &operand,
                           SideEffects::DefaultResource::get());
  }
}

/// A norm's weight form: `zero_centered` (Qwen3-Next) or `f32_weight` (gpt-oss), not both.
LogicalResult checkNormWeightForm(Operation *op, bool zeroCentered, bool f32Weight) {
  if (zeroCentered && f32Weight)
    return op->emitOpError() << "has both 'zero_centered' and 'f32_weight'; a norm's weight "
                                "is zero-centered (1 + weight) or applied as is, not both";
  return success();
}

/// All shaped operands are tensors, or all are memrefs.
LogicalResult checkOneForm(Operation *op) {
  bool tensors = false, buffers = false;
  for (Value operand : op->getOperands()) {
    tensors |= isa<TensorType>(operand.getType());
    buffers |= isa<MemRefType>(operand.getType());
  }
  if (tensors && buffers)
    return op->emitOpError() << "mixes tensors and buffers; operands must all be tensors "
                                "or all be memrefs";
  return success();
}

LogicalResult checkElementType(Operation *op, StringRef name, Value value, Type expected) {
  Type actual = shapedOf(value).getElementType();
  if (actual != expected)
    return op->emitOpError() << "'" << name << "' must have element type " << expected
                             << ", got " << actual;
  return success();
}

LogicalResult checkRank(Operation *op, StringRef name, Value value, int64_t rank) {
  if (!shapedOf(value).hasRank() || shapedOf(value).getRank() != rank)
    return op->emitOpError() << "'" << name << "' must have rank " << rank << ", got "
                             << value.getType();
  return success();
}

/// `a` and `b` have compatible shapes (equal where both are static).
LogicalResult checkSameShape(Operation *op, StringRef nameA, Value a, StringRef nameB,
                             Value b) {
  ShapedType ta = shapedOf(a), tb = shapedOf(b);
  bool compatible = ta.getRank() == tb.getRank() &&
                    llvm::all_of(llvm::zip(ta.getShape(), tb.getShape()), [](auto dims) {
                      auto [x, y] = dims;
                      return x == ShapedType::kDynamic || y == ShapedType::kDynamic || x == y;
                    });
  if (!compatible)
    return op->emitOpError() << "'" << nameA << "' " << a.getType() << " and '" << nameB
                             << "' " << b.getType() << " must have the same shape";
  return success();
}

/// Static size of `dim` of `value`, or kDynamic.
int64_t sizeOf(Value value, int64_t dim) { return shapedOf(value).getDimSize(dim); }

LogicalResult checkDimEquals(Operation *op, StringRef name, Value value, int64_t dim,
                             int64_t expected, StringRef what) {
  int64_t actual = sizeOf(value, dim);
  if (actual != ShapedType::kDynamic && expected != ShapedType::kDynamic && actual != expected)
    return op->emitOpError() << "dimension " << dim << " of '" << name << "' (" << actual
                             << ") must equal " << what << " (" << expected << ")";
  return success();
}

Type i32Type(Operation *op) { return IntegerType::get(op->getContext(), 32); }
Type bf16Type(Operation *op) { return BFloat16Type::get(op->getContext()); }

/// kiln.mla_attention's whole-graph form (and its cached form): every graph operand and
/// attribute present, shapes from the head sizes, bf16 activations and kv_b, i32
/// positions, an i8 scratch of the bytes a token needs.
template <typename OpT>
LogicalResult verifyMlaGraphForm(OpT op) {
  Operation *raw = op.getOperation();
  const char *missing = !op.getKPe()               ? "k_pe"
                        : !op.getPositions()       ? "positions"
                        : !op.getScratch()         ? "scratch"
                        : !op.getQkNopeHeadDim()   ? "qk_nope_head_dim"
                        : !op.getVHeadDim()        ? "v_head_dim"
                        : !op.getRope()            ? "rope"
                        : !op.getSoftmaxScale()    ? "softmax_scale"
                                                   : nullptr;
  if (missing)
    return op.emitOpError() << "the whole-graph form (kv_b given) needs '" << missing << "'";
  const int64_t h = op.getNumHeads(), rank = op.getKvLoraRank(), rope = op.getQkRopeHeadDim();
  const int64_t nope = *op.getQkNopeHeadDim(), v = *op.getVHeadDim();
  if (failed(checkPositive(raw, "qk_nope_head_dim", nope)) ||
      failed(checkPositive(raw, "v_head_dim", v)))
    return failure();
  // The per-head GEMMs and the FMHA read 16-byte rows.
  for (auto [name, value] : {std::pair<StringRef, int64_t>{"kv_lora_rank", rank},
                             {"qk_rope_head_dim", rope}, {"qk_nope_head_dim", nope},
                             {"v_head_dim", v}})
    if (value % 8 != 0)
      return op.emitOpError() << "'" << name << "' (" << value
                              << ") must be a multiple of 8 (16-byte rows)";
  double scale = op.getSoftmaxScale()->convertToDouble();
  if (!(scale > 0) || !std::isfinite(scale))
    return op.emitOpError() << "'softmax_scale' must be a positive finite number, got "
                            << scale;
  Type bf16 = BFloat16Type::get(op.getContext());
  const int64_t perToken = kiln_rt_mla_scratch_bytes_per_token(h, rank, rope, nope, v);
  Value tokens = op.getQ();
  if (failed(checkShape(raw, "q", op.getQ(), {kAnyDim, h, nope + rope})) ||
      failed(checkShape(raw, "latent", op.getLatent(), {kAnyDim, rank})) ||
      failed(checkShape(raw, "k_pe", op.getKPe(), {kAnyDim, rope})) ||
      failed(checkShape(raw, "positions", op.getPositions(), {kAnyDim})) ||
      failed(checkShape(raw, "kv_b", op.getKvB(), {h * (nope + v), rank})) ||
      failed(checkShape(raw, "scratch", op.getScratch(), {kAnyDim, perToken})) ||
      failed(checkShape(raw, "result", outputOf(op), {kAnyDim, h, v})))
    return failure();
  for (auto [name, value] : {std::pair<StringRef, Value>{"q", op.getQ()},
                             {"latent", op.getLatent()}, {"k_pe", op.getKPe()},
                             {"kv_b", op.getKvB()}, {"result", outputOf(op)}})
    if (failed(checkElementType(raw, name, value, bf16)))
      return failure();
  if (failed(checkElementType(raw, "positions", op.getPositions(), i32Type(raw))) ||
      failed(checkElementType(raw, "scratch", op.getScratch(),
                              IntegerType::get(op.getContext(), 8))))
    return failure();
  for (auto [name, value] : {std::pair<StringRef, Value>{"latent", op.getLatent()},
                             {"k_pe", op.getKPe()}, {"positions", op.getPositions()},
                             {"scratch", op.getScratch()}, {"result", outputOf(op)}})
    if (failed(checkDimEquals(raw, name, value, 0, sizeOf(tokens, 0), "the token count")))
      return failure();
  return success();
}

LogicalResult checkEpsilon(Operation *op, APFloat epsilon) {
  double eps = epsilon.convertToDouble();
  if (!(eps > 0) || !std::isfinite(eps))
    return op->emitOpError() << "'epsilon' must be a positive finite number, got " << eps;
  return success();
}
} // namespace

#define KILN_COMPUTE_EFFECTS(OpT)                                                          \
  void OpT::getEffects(                                                                    \
      SmallVectorImpl<SideEffects::EffectInstance<MemoryEffects::Effect>> &effects) {      \
    computeEffects(*this, effects);                                                        \
  }
KILN_COMPUTE_EFFECTS(EmbeddingOp)
KILN_COMPUTE_EFFECTS(RmsNormOp)
KILN_COMPUTE_EFFECTS(AddRmsNormOp)
KILN_COMPUTE_EFFECTS(LinearOp)
KILN_COMPUTE_EFFECTS(RopeOp)
KILN_COMPUTE_EFFECTS(AddOp)
KILN_COMPUTE_EFFECTS(AllReduceOp)
KILN_COMPUTE_EFFECTS(AllGatherOp)
KILN_COMPUTE_EFFECTS(SwigluOp)
KILN_COMPUTE_EFFECTS(GatherRowsOp)
KILN_COMPUTE_EFFECTS(MoeOp)
KILN_COMPUTE_EFFECTS(SigmoidGateOp)
KILN_COMPUTE_EFFECTS(SigmoidMulOp)
KILN_COMPUTE_EFFECTS(GatedRmsNormOp)
KILN_COMPUTE_EFFECTS(ActivationOp)
KILN_COMPUTE_EFFECTS(ArgmaxOp)
KILN_COMPUTE_EFFECTS(ConcatOp)
KILN_COMPUTE_EFFECTS(NextTokensOp)
KILN_COMPUTE_EFFECTS(LinearPairOp)
KILN_COMPUTE_EFFECTS(RopePairOp)
KILN_COMPUTE_EFFECTS(LinearPairSwigluOp)
#undef KILN_COMPUTE_EFFECTS

LogicalResult EmbeddingOp::verify() {
  Operation *op = *this;
  if (failed(checkOneForm(op)) || failed(checkRank(op, "ids", getIds(), 1)) ||
      failed(checkRank(op, "table", getTable(), 2)) ||
      failed(checkRank(op, "init", getInit(), 2)) ||
      failed(checkElementType(op, "ids", getIds(), i32Type(op))) ||
      failed(checkElementType(op, "init", getInit(), shapedOf(getTable()).getElementType())) ||
      failed(checkDimEquals(op, "init", getInit(), 0, sizeOf(getIds(), 0), "the token count")) ||
      failed(checkDimEquals(op, "init", getInit(), 1, sizeOf(getTable(), 1), "the hidden size")))
    return failure();
  return success();
}
FailureOr<RuntimeCall> EmbeddingOp::getRuntimeCall() {
  if (failed(requireBuffers(*this)))
    return failure();
  // The vocabulary-parallel form takes the same arguments; the runtime finds the rank's
  // first row from the context's rank.
  return RuntimeCall{getVocabParallel() ? "kiln_rt_embedding_rank" : "kiln_rt_embedding",
                     {RuntimeArg::pointer(getIds()), RuntimeArg::pointer(getTable()),
                      RuntimeArg::pointer(getInit()), RuntimeArg::dim(getIds(), 0),
                      RuntimeArg::dim(getTable(), 0), RuntimeArg::dim(getTable(), 1)}};
}

LogicalResult RmsNormOp::verify() {
  Operation *op = *this;
  ShapedType input = shapedOf(getInput());
  if (failed(checkOneForm(op)) ||
      failed(checkNormWeightForm(op, getZeroCentered(), getF32Weight())))
    return failure();
  if (!input.hasRank() || input.getRank() < 2 || input.getRank() > 3)
    return emitOpError() << "'input' must have rank 2 or 3, got " << getInput().getType();
  int64_t last = input.getRank() - 1;
  if (failed(checkRank(op, "weight", getWeight(), 1)) ||
      failed(checkDimEquals(op, "weight", getWeight(), 0, input.getDimSize(last),
                            "the normalized size")) ||
      failed(checkSameShape(op, "input", getInput(), "init", getInit())) ||
      failed(checkElementType(op, "init", getInit(), input.getElementType())))
    return failure();
  return checkEpsilon(op, getEpsilon());
}
namespace {
/// The weight offset of kiln_rt_rms_norm_offset and kiln_rt_add_rms_norm_offset, whose
/// norms compute bf16((x * scale) * (offset + weight)) in fp32: 1 for `zero_centered`, -0.0
/// for `f32_weight` (-0.0 + weight is weight for every weight, -0.0 included).
double weightOffsetOf(bool zeroCentered) { return zeroCentered ? 1.0 : -0.0; }

/// The norm of `[tokens, dim]` or `[tokens, heads, dim]` rows whose weight multiplies the
/// fp32 normalized value (`zero_centered` or `f32_weight`); the input may be a column slice
/// (its token dimension strided, the rest contiguous: heads `dim` apart).
RuntimeCall offsetCall(Value input, Value weight, Value init, APFloat epsilon, bool zeroCentered) {
  const int64_t last = shapedOf(input).getRank() - 1;
  RuntimeArg heads = last == 2 ? RuntimeArg::dim(input, 1) : RuntimeArg::i64(1);
  return RuntimeCall{"kiln_rt_rms_norm_offset",
                     {RuntimeArg::stridedPointer(input), RuntimeArg::rowStride(input),
                      RuntimeArg::dim(input, last), RuntimeArg::pointer(weight),
                      RuntimeArg::pointer(init), RuntimeArg::dim(input, 0), heads,
                      RuntimeArg::dim(input, last), RuntimeArg::f32(epsilon.convertToDouble()),
                      RuntimeArg::f32(weightOffsetOf(zeroCentered))}};
}
} // namespace

FailureOr<RuntimeCall> RmsNormOp::getRuntimeCall() {
  if (failed(requireBuffers(*this)))
    return failure();
  int64_t last = shapedOf(getInput()).getRank() - 1;
  if (getZeroCentered() || getF32Weight())
    return offsetCall(getInput(), getWeight(), getInit(), getEpsilon(), getZeroCentered());
  // A column slice (MLA's compressed KV) keeps its rows' stride.
  auto input = dyn_cast<MemRefType>(getInput().getType());
  if (input && !input.getLayout().isIdentity())
    return RuntimeCall{"kiln_rt_rms_norm_strided",
                       {RuntimeArg::stridedPointer(getInput()), RuntimeArg::rowStride(getInput()),
                        RuntimeArg::pointer(getWeight()), RuntimeArg::pointer(getInit()),
                        RuntimeArg::leadingElements(getInput()),
                        RuntimeArg::dim(getInput(), last),
                        RuntimeArg::f32(getEpsilon().convertToDouble())}};
  return RuntimeCall{"kiln_rt_rms_norm",
                     {RuntimeArg::pointer(getInput()), RuntimeArg::pointer(getWeight()),
                      RuntimeArg::pointer(getInit()), RuntimeArg::leadingElements(getInput()),
                      RuntimeArg::dim(getInput(), last),
                      RuntimeArg::f32(getEpsilon().convertToDouble())}};
}

LogicalResult AddRmsNormOp::verify() {
  Operation *op = *this;
  if (failed(checkOneForm(op)) ||
      failed(checkNormWeightForm(op, getZeroCentered(), getF32Weight())) ||
      failed(checkRank(op, "lhs", getLhs(), 2)) ||
      failed(checkSameShape(op, "lhs", getLhs(), "rhs", getRhs())) ||
      failed(checkSameShape(op, "lhs", getLhs(), "sum_init", getSumInit())) ||
      failed(checkSameShape(op, "lhs", getLhs(), "norm_init", getNormInit())) ||
      failed(checkRank(op, "weight", getWeight(), 1)) ||
      failed(
          checkDimEquals(op, "weight", getWeight(), 0, sizeOf(getLhs(), 1), "the normalized size")))
    return failure();
  Type element = shapedOf(getLhs()).getElementType();
  for (auto [name, value] : {std::pair<StringRef, Value>{"rhs", getRhs()},
                             {"weight", getWeight()},
                             {"sum_init", getSumInit()},
                             {"norm_init", getNormInit()}})
    if (failed(checkElementType(op, name, value, element)))
      return failure();
  if (getSumInit() == getNormInit())
    return emitOpError() << "'sum_init' and 'norm_init' are the same value (the norm would "
                            "overwrite the residual)";
  return checkEpsilon(op, getEpsilon());
}
bool AddRmsNormOp::mayOverwriteInput(OpOperand &init, OpOperand &input) {
  const bool isInit = &init == &getSumInitMutable() || &init == &getNormInitMutable();
  const bool isSummand = &input == &getLhsMutable() || &input == &getRhsMutable();
  return isInit && isSummand;
}

FailureOr<RuntimeCall> AddRmsNormOp::getRuntimeCall() {
  if (failed(requireBuffers(*this)))
    return failure();
  RuntimeCall call{"kiln_rt_add_rms_norm",
                   {RuntimeArg::pointer(getLhs()), RuntimeArg::pointer(getRhs()),
                    RuntimeArg::pointer(getWeight()), RuntimeArg::pointer(getSumInit()),
                    RuntimeArg::pointer(getNormInit()), RuntimeArg::dim(getLhs(), 0),
                    RuntimeArg::dim(getLhs(), 1), RuntimeArg::f32(getEpsilon().convertToDouble())}};
  if (getZeroCentered() || getF32Weight()) {
    call.callee = "kiln_rt_add_rms_norm_offset";
    call.args.push_back(RuntimeArg::f32(weightOffsetOf(getZeroCentered())));
  }
  return call;
}

LogicalResult LinearOp::verify() {
  Operation *op = *this;
  if (failed(checkOneForm(op)) || failed(checkRank(op, "input", getInput(), 2)) ||
      failed(checkRank(op, "weight", getWeight(), 2)) ||
      failed(checkRank(op, "init", getInit(), 2)) ||
      failed(checkDimEquals(op, "weight", getWeight(), 1, sizeOf(getInput(), 1),
                            "the input features")) ||
      failed(checkDimEquals(op, "init", getInit(), 0, sizeOf(getInput(), 0), "the rows")) ||
      failed(checkDimEquals(op, "init", getInit(), 1, sizeOf(getWeight(), 0),
                            "the output features")) ||
      failed(checkElementType(op, "weight", getWeight(), shapedOf(getInput()).getElementType())))
    return failure();
  // An f32 result keeps the fp32 sums (a DeepSeek-style router), without a bias.
  const bool f32Out = shapedOf(getInit()).getElementType().isF32() &&
                      !shapedOf(getInput()).getElementType().isF32();
  if (!f32Out &&
      failed(checkElementType(op, "init", getInit(), shapedOf(getInput()).getElementType())))
    return failure();
  if (f32Out && getBias())
    return emitOpError() << "an f32 result takes no bias";
  if (Value bias = getBias())
    if (failed(checkRank(op, "bias", bias, 1)) ||
        failed(checkDimEquals(op, "bias", bias, 0, sizeOf(getWeight(), 0),
                              "the output features")))
      return failure();
  return success();
}
FailureOr<RuntimeCall> LinearOp::getRuntimeCall() {
  if (failed(requireBuffers(*this)))
    return failure();
  if (shapedOf(getInit()).getElementType().isF32())
    return RuntimeCall{"kiln_rt_linear_f32out",
                       {RuntimeArg::pointer(getInput()), RuntimeArg::pointer(getWeight()),
                        RuntimeArg::f32Pointer(getInit()), RuntimeArg::dim(getInput(), 0),
                        RuntimeArg::dim(getWeight(), 0), RuntimeArg::dim(getWeight(), 1)}};
  return RuntimeCall{"kiln_rt_linear",
                     {RuntimeArg::pointer(getInput()), RuntimeArg::pointer(getWeight()),
                      RuntimeArg::pointer(getBias()), RuntimeArg::pointer(getInit()),
                      RuntimeArg::dim(getInput(), 0), RuntimeArg::dim(getWeight(), 0),
                      RuntimeArg::dim(getWeight(), 1)}};
}

/// The buffers-only GEMM ops (linear_pair, linear_pair_swiglu) take bf16 matrices only.
static LogicalResult checkBf16Matrices(Operation *op,
                                       ArrayRef<std::pair<const char *, Value>> operands) {
  Type bf16 = BFloat16Type::get(op->getContext());
  for (auto [name, value] : operands)
    if (failed(checkRank(op, name, value, 2)) || failed(checkElementType(op, name, value, bf16)))
      return failure();
  return success();
}

/// A pair's operands: bf16 matrices, input [m, k], two weights [n, k] of one shape, and
/// each output [m, n].
static LogicalResult verifyPair(Operation *op, Value input, Value weight0, Value weight1,
                                ArrayRef<std::pair<const char *, Value>> outputs) {
  SmallVector<std::pair<const char *, Value>> matrices = {
      {"input", input}, {"weight0", weight0}, {"weight1", weight1}};
  matrices.append(outputs.begin(), outputs.end());
  if (failed(checkBf16Matrices(op, matrices)))
    return failure();
  if (shapedOf(weight0).getShape() != shapedOf(weight1).getShape())
    return op->emitOpError() << "weight0 and weight1 differ in shape: a pair is one GEMM shape";
  if (failed(checkDimEquals(op, "weight0", weight0, 1, sizeOf(input, 1), "the input features")))
    return failure();
  for (auto [name, output] : outputs)
    if (failed(checkDimEquals(op, name, output, 0, sizeOf(input, 0), "the rows")) ||
        failed(checkDimEquals(op, name, output, 1, sizeOf(weight0, 0), "the output features")))
      return failure();
  return success();
}

LogicalResult LinearPairOp::verify() {
  return verifyPair(*this, getInput(), getWeight0(), getWeight1(),
                    {{"init0", getInit0()}, {"init1", getInit1()}});
}

// Two GEMMs where cuBLASLt has no algorithm for the shared input, each with its split-K
// reduction.
uint64_t LinearPairOp::getMaxDecodeLaunches() { return 4; }

FailureOr<RuntimeCall> LinearPairOp::getRuntimeCall() {
  return RuntimeCall{"kiln_rt_linear_pair",
                     {RuntimeArg::pointer(getInput()), RuntimeArg::pointer(getWeight0()),
                      RuntimeArg::pointer(getWeight1()), RuntimeArg::pointer(getInit0()),
                      RuntimeArg::pointer(getInit1()), RuntimeArg::dim(getInput(), 0),
                      RuntimeArg::dim(getWeight0(), 0), RuntimeArg::dim(getWeight0(), 1)}};
}

LogicalResult LinearPairSwigluOp::verify() {
  return verifyPair(*this, getInput(), getWeight0(), getWeight1(),
                    {{"gate", getGate()}, {"up", getUp()}, {"init", getInit()}});
}

// The unfused path's SwiGLU kernel reads an element of gate and up before it writes that
// element of init (as kiln.swiglu); the fused path writes neither gate nor up.
bool LinearPairSwigluOp::mayOverwriteInput(OpOperand &init, OpOperand &input) {
  return &init == &getInitMutable() &&
         (&input == &getGateMutable() || &input == &getUpMutable());
}

// Unfused: the pair's launches (LinearPairOp) and the SwiGLU.
uint64_t LinearPairSwigluOp::getMaxDecodeLaunches() { return 5; }

FailureOr<RuntimeCall> LinearPairSwigluOp::getRuntimeCall() {
  return RuntimeCall{"kiln_rt_linear_pair_swiglu",
                     {RuntimeArg::pointer(getInput()), RuntimeArg::pointer(getWeight0()),
                      RuntimeArg::pointer(getWeight1()), RuntimeArg::pointer(getGate()),
                      RuntimeArg::pointer(getUp()), RuntimeArg::pointer(getInit()),
                      RuntimeArg::dim(getInput(), 0), RuntimeArg::dim(getWeight0(), 0),
                      RuntimeArg::dim(getWeight0(), 1)}};
}

int64_t MoeOp::scratchBytesPerToken(int64_t hidden, int64_t inter, int64_t topK) {
  return static_cast<int64_t>(
      kiln_moe_scratch_per_token(hidden, inter, static_cast<int32_t>(topK)));
}

// The group-limited routing of kiln_moe (Moe.h): equal groups of at least two experts,
// and the kept groups hold top_k experts.
static LogicalResult verifyMoeGroups(MoeOp op, int64_t experts) {
  const int64_t groups = static_cast<int64_t>(op.getGroups()),
                kept = static_cast<int64_t>(op.getTopGroups()),
                topK = static_cast<int64_t>(op.getTopK());
  if (kept > groups)
    return op.emitOpError() << "top_groups " << kept << " exceeds the " << groups << " groups";
  if (op.getGroupMax() && groups == 1)
    return op.emitOpError() << "'group_max' chooses between groups; it needs groups > 1";
  if (groups == 1 || experts == ShapedType::kDynamic)
    return success();
  if (experts % groups != 0 || experts / groups < 2)
    return op.emitOpError() << groups << " groups do not split the " << experts
                            << " experts into equal groups of at least 2";
  if (kept * (experts / groups) < topK)
    return op.emitOpError() << "the " << kept << " kept groups hold "
                            << kept * (experts / groups) << " experts, fewer than top_k "
                            << topK;
  return success();
}

LogicalResult MoeOp::verify() {
  Operation *op = *this;
  if (failed(checkOneForm(op)) || failed(checkRank(op, "input", getInput(), 2)) ||
      failed(checkRank(op, "logits", getLogits(), 2)) ||
      (getGate() && failed(checkRank(op, "gate", getGate(), 3))) ||
      failed(checkRank(op, "up", getUp(), 3)) || failed(checkRank(op, "down", getDown(), 3)) ||
      failed(checkSameShape(op, "input", getInput(), "init", getInit())) ||
      (getGate() && failed(checkSameShape(op, "gate", getGate(), "up", getUp()))) ||
      failed(checkRank(op, "scratch", getScratch(), 2)) ||
      failed(checkElementType(op, "scratch", getScratch(), IntegerType::get(getContext(), 8))))
    return failure();
  Type element = shapedOf(getInput()).getElementType();
  for (auto [name, value] : {std::pair<StringRef, Value>{"gate", getGate()},
                             {"up", getUp()},
                             {"down", getDown()},
                             {"init", getInit()}})
    if (value && failed(checkElementType(op, name, value, element)))
      return failure();
  // DeepSeek-style routers compute their logits in fp32.
  Type logitElement = shapedOf(getLogits()).getElementType();
  if (logitElement != element && !logitElement.isF32())
    return emitOpError() << "'logits' must be " << element << " or f32, got " << logitElement;
  const int64_t hidden = sizeOf(getInput(), 1), experts = sizeOf(getUp(), 0),
                inter = sizeOf(getUp(), 1);
  if (failed(checkDimEquals(op, "logits", getLogits(), 0, sizeOf(getInput(), 0), "the token count")) ||
      failed(checkDimEquals(op, "logits", getLogits(), 1, experts, "the expert count")) ||
      failed(checkDimEquals(op, "up", getUp(), 2, hidden, "the hidden size")) ||
      failed(checkDimEquals(op, "down", getDown(), 0, experts, "the expert count")) ||
      failed(checkDimEquals(op, "down", getDown(), 1, hidden, "the hidden size")) ||
      failed(checkDimEquals(op, "down", getDown(), 2, inter, "the expert MLP size")) ||
      failed(checkDimEquals(op, "scratch", getScratch(), 0, sizeOf(getInput(), 0),
                            "the token count")))
    return failure();
  if (Value bias = getScoreBias())
    if (failed(checkRank(op, "score_bias", bias, 1)) ||
        failed(checkElementType(op, "score_bias", bias, Float32Type::get(getContext()))) ||
        failed(checkDimEquals(op, "score_bias", bias, 0, experts, "the expert count")))
      return failure();
  if (getGate() && getActivation() != ActivationKind::silu)
    return emitOpError() << "gated experts run SwiGLU: activation must be silu, got "
                         << stringifyActivationKind(getActivation());
  if (failed(verifyExpertBiases(experts, hidden, inter, element)) || failed(verifyClampedSwiglu()))
    return failure();
  if (!(getRoutedScale().convertToFloat() > 0.0f))
    return emitOpError() << "routed_scale must be positive";
  const int64_t topK = static_cast<int64_t>(getTopK());
  if (experts != ShapedType::kDynamic && topK > experts)
    return emitOpError() << "top_k " << topK << " exceeds the " << experts << " experts";
  if (topK > KILN_MOE_MAX_TOP_K || (experts != ShapedType::kDynamic && experts > KILN_MOE_MAX_EXPERTS))
    return emitOpError() << "supports up to " << KILN_MOE_MAX_EXPERTS << " experts and top_k "
                         << KILN_MOE_MAX_TOP_K << ", got " << experts << " and " << topK;
  if (failed(verifyMoeGroups(*this, experts)))
    return failure();
  if (hidden != ShapedType::kDynamic && inter != ShapedType::kDynamic &&
      failed(checkDimEquals(op, "scratch", getScratch(), 1,
                            scratchBytesPerToken(hidden, inter, topK),
                            "the bytes a token needs (kiln_moe_scratch_bytes_per_token)")))
    return failure();
  return success();
}
LogicalResult MoeOp::verifyExpertBiases(int64_t experts, int64_t hidden, int64_t inter,
                                        Type element) {
  Operation *op = *this;
  if (getGateBias() && !getGate())
    return emitOpError() << "'gate_bias' needs gated experts (a 'gate' weight)";
  for (auto [name, value, width, what] :
       {std::tuple<StringRef, Value, int64_t, StringRef>{"gate_bias", getGateBias(), inter,
                                                         "the expert MLP size"},
        {"up_bias", getUpBias(), inter, "the expert MLP size"},
        {"down_bias", getDownBias(), hidden, "the hidden size"}})
    if (value && (failed(checkRank(op, name, value, 2)) ||
                  failed(checkElementType(op, name, value, element)) ||
                  failed(checkDimEquals(op, name, value, 0, experts, "the expert count")) ||
                  failed(checkDimEquals(op, name, value, 1, width, what))))
      return failure();
  return success();
}

LogicalResult MoeOp::verifyClampedSwiglu() {
  FloatAttr limitAttr = getSwigluLimitAttr(), alphaAttr = getSwigluAlphaAttr();
  if (!limitAttr && !alphaAttr)
    return success();
  if (!limitAttr || !alphaAttr)
    return emitOpError() << "'swiglu_limit' and 'swiglu_alpha' go together (gpt-oss's "
                            "clamped SwiGLU)";
  if (!getGate())
    return emitOpError() << "the clamped SwiGLU needs gated experts (a 'gate' weight)";
  const double limit = limitAttr.getValueAsDouble(), alpha = alphaAttr.getValueAsDouble();
  if (!(limit > 0.0) || !std::isfinite(limit) || !std::isfinite(alpha))
    return emitOpError() << "'swiglu_limit' must be positive and finite and 'swiglu_alpha' "
                            "finite, got "
                         << limit << " and " << alpha;
  return success();
}

// Decode (the pairs mode): routing, the gate/up/down batched GEMMs (each may add a
// split-K reduction), SwiGLU or the activation, the combine.
uint64_t MoeOp::getMaxDecodeLaunches() { return 9; }

FailureOr<RuntimeCall> MoeOp::getRuntimeCall() {
  if (failed(requireBuffers(*this)))
    return failure();
  int64_t flags = 0;
  if (getNormalizeTopK())
    flags |= KILN_MOE_NORMALIZE_TOP_K;
  if (getRoundWeights())
    flags |= KILN_MOE_ROUND_WEIGHTS;
  if (getScoring() == MoeScoring::sigmoid)
    flags |= KILN_MOE_SIGMOID;
  const bool f32Logits = shapedOf(getLogits()).getElementType().isF32();
  if (f32Logits)
    flags |= KILN_MOE_F32_LOGITS;
  if (getAccumulateF32())
    flags |= KILN_MOE_F32_COMBINE;
  if (getGroupMax())
    flags |= KILN_MOE_GROUP_MAX;
  if (getSwigluLimitAttr())
    flags |= KILN_MOE_CLAMPED_SWIGLU;
  return RuntimeCall{
      "kiln_rt_moe",
      {RuntimeArg::pointer(getInput()),
       f32Logits ? RuntimeArg::f32Pointer(getLogits()) : RuntimeArg::pointer(getLogits()),
       RuntimeArg::pointer(getGate()),
       RuntimeArg::pointer(getUp()),
       RuntimeArg::pointer(getDown()),
       RuntimeArg::f32Pointer(getScoreBias()),
       RuntimeArg::pointer(getGateBias()),
       RuntimeArg::pointer(getUpBias()),
       RuntimeArg::pointer(getDownBias()),
       RuntimeArg::pointer(getInit()),
       RuntimeArg::pointer(getScratch()),
       RuntimeArg::dim(getInput(), 0),
       RuntimeArg::dim(getInput(), 1),
       RuntimeArg::dim(getUp(), 1),
       RuntimeArg::dim(getUp(), 0),
       RuntimeArg::i32(static_cast<int64_t>(getTopK())),
       RuntimeArg::i32(flags),
       RuntimeArg::i32(static_cast<int64_t>(getGroups())),
       RuntimeArg::i32(static_cast<int64_t>(getTopGroups())),
       RuntimeArg::f32(getRoutedScale().convertToDouble()),
       RuntimeArg::i32(static_cast<int64_t>(getActivation())),
       RuntimeArg::f32(getSwigluAlphaAttr() ? getSwigluAlphaAttr().getValueAsDouble() : 0.0),
       RuntimeArg::f32(getSwigluLimitAttr() ? getSwigluLimitAttr().getValueAsDouble() : 0.0),
       RuntimeArg::dim(getScratch(), 1)}};
}

/// A rope's head dimension (even) and rotary_dim (even, 2 to the head dimension), shared
/// by kiln.rope and kiln.rope_pair.
static LogicalResult verifyRopeDims(Operation *op, int64_t headDim,
                                    std::optional<int64_t> rotary) {
  if (headDim != ShapedType::kDynamic && headDim % 2 != 0)
    return op->emitOpError() << "head dimension " << headDim << " must be even";
  if (rotary &&
      (*rotary < 2 || *rotary % 2 != 0 || (headDim != ShapedType::kDynamic && *rotary > headDim)))
    return op->emitOpError() << "'rotary_dim' " << *rotary
                             << " must be even, at least 2 and at most the head dimension "
                             << headDim;
  return success();
}

/// kiln_rt_rope's trailing arguments (kiln_rt_rope_pair's too): rotary_dim, then the
/// rope parameters.
static void appendRopeArgs(RuntimeCall &call, RopeAttr rope, std::optional<int64_t> rotary) {
  call.args.append({RuntimeArg::i64(rotary.value_or(0)),
                    RuntimeArg::i32(static_cast<int64_t>(rope.getType())),
                    RuntimeArg::f32(rope.getThetaValue()), RuntimeArg::f32(rope.getFactorValue()),
                    RuntimeArg::f32(rope.getLowValue()), RuntimeArg::f32(rope.getHighValue()),
                    RuntimeArg::i64(rope.getOriginalMaxPosition()),
                    RuntimeArg::f32(rope.getAttentionFactorValue())});
}

LogicalResult RopeOp::verify() {
  Operation *op = *this;
  if (failed(checkOneForm(op)) || failed(checkRank(op, "input", getInput(), 3)) ||
      failed(checkRank(op, "positions", getPositions(), 1)) ||
      failed(checkElementType(op, "positions", getPositions(), i32Type(op))) ||
      failed(checkDimEquals(op, "positions", getPositions(), 0, sizeOf(getInput(), 0),
                            "the token count")) ||
      failed(checkSameShape(op, "input", getInput(), "init", getInit())))
    return failure();
  return verifyRopeDims(op, sizeOf(getInput(), 2), getRotaryDim());
}
FailureOr<RuntimeCall> RopeOp::getRuntimeCall() {
  if (failed(requireBuffers(*this)))
    return failure();
  RuntimeCall call{"kiln_rt_rope",
                   {RuntimeArg::pointer(getInput()), RuntimeArg::pointer(getPositions()),
                    RuntimeArg::pointer(getInit()), RuntimeArg::dim(getInput(), 0),
                    RuntimeArg::dim(getInput(), 1), RuntimeArg::dim(getInput(), 2)}};
  appendRopeArgs(call, getRope(), getRotaryDim());
  return call;
}

LogicalResult RopePairOp::verify() {
  Operation *op = *this;
  Type bf16 = BFloat16Type::get(getContext());
  for (auto [name, value] : {std::pair<const char *, Value>{"input0", getInput0()},
                             {"input1", getInput1()},
                             {"init0", getInit0()},
                             {"init1", getInit1()}})
    if (failed(checkRank(op, name, value, 3)) || failed(checkElementType(op, name, value, bf16)))
      return failure();
  if (failed(checkRank(op, "positions", getPositions(), 1)) ||
      failed(checkElementType(op, "positions", getPositions(), i32Type(op))) ||
      failed(checkDimEquals(op, "positions", getPositions(), 0, sizeOf(getInput0(), 0),
                            "the token count")) ||
      failed(checkDimEquals(op, "input1", getInput1(), 0, sizeOf(getInput0(), 0),
                            "the token count")) ||
      failed(checkDimEquals(op, "input1", getInput1(), 2, sizeOf(getInput0(), 2),
                            "the head dimension")) ||
      failed(checkSameShape(op, "input0", getInput0(), "init0", getInit0())) ||
      failed(checkSameShape(op, "input1", getInput1(), "init1", getInit1())))
    return failure();
  return verifyRopeDims(op, sizeOf(getInput0(), 2), getRotaryDim());
}

FailureOr<RuntimeCall> RopePairOp::getRuntimeCall() {
  RuntimeCall call{"kiln_rt_rope_pair",
                   {RuntimeArg::pointer(getInput0()), RuntimeArg::pointer(getInput1()),
                    RuntimeArg::pointer(getPositions()), RuntimeArg::pointer(getInit0()),
                    RuntimeArg::pointer(getInit1()), RuntimeArg::dim(getInput0(), 0),
                    RuntimeArg::dim(getInput0(), 1), RuntimeArg::dim(getInput1(), 1),
                    RuntimeArg::dim(getInput0(), 2)}};
  appendRopeArgs(call, getRope(), getRotaryDim());
  return call;
}

namespace {
template <typename OpT>
LogicalResult verifyElementwise(OpT op, StringRef lhs, Value a, StringRef rhs, Value b) {
  if (failed(checkOneForm(op)) || failed(checkSameShape(op, lhs, a, rhs, b)) ||
      failed(checkSameShape(op, lhs, a, "init", op.getInit())) ||
      failed(checkElementType(op, rhs, b, shapedOf(a).getElementType())) ||
      failed(checkElementType(op, "init", op.getInit(), shapedOf(a).getElementType())))
    return failure();
  return success();
}

/// An element-wise op's output may go over either input.
template <typename OpT>
bool elementwiseMayOverwrite(OpT op, OpOperand &init, OpOperand &input) {
  return &init == &op.getInitMutable() && &input != &op.getInitMutable();
}

template <typename OpT>
FailureOr<RuntimeCall> elementwiseCall(OpT op, StringRef callee, Value a, Value b) {
  if (failed(requireBuffers(op)))
    return failure();
  return RuntimeCall{callee.str(),
                     {RuntimeArg::pointer(a), RuntimeArg::pointer(b),
                      RuntimeArg::pointer(op.getInit()), RuntimeArg::elements(a)}};
}
} // namespace

LogicalResult AddOp::verify() { return verifyElementwise(*this, "lhs", getLhs(), "rhs", getRhs()); }
bool AddOp::mayOverwriteInput(OpOperand &init, OpOperand &input) {
  return elementwiseMayOverwrite(*this, init, input);
}
bool SwigluOp::mayOverwriteInput(OpOperand &init, OpOperand &input) {
  return elementwiseMayOverwrite(*this, init, input);
}
FailureOr<RuntimeCall> AddOp::getRuntimeCall() {
  return elementwiseCall(*this, "kiln_rt_add", getLhs(), getRhs());
}
LogicalResult AllReduceOp::verify() {
  Operation *op = *this;
  if (failed(checkOneForm(op)) ||
      failed(checkSameShape(op, "input", getInput(), "init", getInit())) ||
      failed(checkElementType(op, "input", getInput(), bf16Type(op))) ||
      failed(checkElementType(op, "init", getInit(), bf16Type(op))))
    return failure();
  return success();
}
bool AllReduceOp::mayOverwriteInput(OpOperand &init, OpOperand &input) {
  return &init == &getInitMutable() && &input == &getInputMutable();
}
FailureOr<RuntimeCall> AllReduceOp::getRuntimeCall() {
  if (failed(requireBuffers(*this)))
    return failure();
  return RuntimeCall{"kiln_rt_all_reduce",
                     {RuntimeArg::pointer(getInput()), RuntimeArg::pointer(getInit()),
                      RuntimeArg::elements(getInput())}};
}
LogicalResult AllGatherOp::verify() {
  Operation *op = *this;
  if (failed(checkOneForm(op)) || failed(checkRank(op, "input", getInput(), 2)) ||
      failed(checkRank(op, "init", getInit(), 2)) ||
      failed(checkRank(op, "blocks", getBlocks(), 3)) ||
      failed(checkElementType(op, "input", getInput(), bf16Type(op))) ||
      failed(checkElementType(op, "init", getInit(), bf16Type(op))) ||
      failed(checkElementType(op, "blocks", getBlocks(), bf16Type(op))))
    return failure();
  int64_t ranks = sizeOf(getBlocks(), 0), rows = sizeOf(getInput(), 0),
          cols = sizeOf(getInput(), 1);
  if (ShapedType::isDynamic(ranks) || ranks < 1)
    return emitOpError() << "'blocks' must have a static rank count (dimension 0) of at "
                            "least 1, got "
                         << getBlocks().getType();
  if (ShapedType::isDynamic(cols))
    return emitOpError() << "'input' must have static columns, got " << getInput().getType();
  if (failed(checkDimEquals(op, "init", getInit(), 0, rows, "the row count")) ||
      failed(checkDimEquals(op, "init", getInit(), 1, ranks * cols,
                            "the ranks times the input's columns")) ||
      failed(checkDimEquals(op, "blocks", getBlocks(), 1, rows, "the row count")) ||
      failed(checkDimEquals(op, "blocks", getBlocks(), 2, cols, "the input's columns")))
    return failure();
  return success();
}
uint64_t AllGatherOp::getMaxDecodeLaunches() {
  // The all-gather, then a copy a rank.
  return 1 + static_cast<uint64_t>(std::max<int64_t>(1, sizeOf(getBlocks(), 0)));
}
FailureOr<RuntimeCall> AllGatherOp::getRuntimeCall() {
  if (failed(requireBuffers(*this)))
    return failure();
  return RuntimeCall{"kiln_rt_all_gather",
                     {RuntimeArg::pointer(getInput()), RuntimeArg::pointer(getBlocks()),
                      RuntimeArg::pointer(getInit()), RuntimeArg::dim(getInput(), 0),
                      RuntimeArg::dim(getInput(), 1), RuntimeArg::dim(getBlocks(), 0)}};
}
LogicalResult SwigluOp::verify() { return verifyElementwise(*this, "gate", getGate(), "up", getUp()); }
FailureOr<RuntimeCall> SwigluOp::getRuntimeCall() {
  return elementwiseCall(*this, "kiln_rt_swiglu", getGate(), getUp());
}

LogicalResult SigmoidGateOp::verify() {
  Operation *op = *this;
  Type element = shapedOf(getInput()).getElementType();
  if (failed(checkOneForm(op)) || failed(checkRank(op, "input", getInput(), 2)) ||
      failed(checkRank(op, "gate_weight", getGateWeight(), 2)) ||
      failed(checkRank(op, "value", getValue(), 2)) ||
      failed(checkSameShape(op, "value", getValue(), "init", getInit())) ||
      failed(checkDimEquals(op, "gate_weight", getGateWeight(), 0, 1, "one gate output")) ||
      failed(checkDimEquals(op, "gate_weight", getGateWeight(), 1, sizeOf(getInput(), 1),
                            "the input features")) ||
      failed(checkDimEquals(op, "value", getValue(), 0, sizeOf(getInput(), 0), "the rows")) ||
      failed(checkElementType(op, "gate_weight", getGateWeight(), element)) ||
      failed(checkElementType(op, "value", getValue(), element)) ||
      failed(checkElementType(op, "init", getInit(), element)))
    return failure();
  return success();
}
bool SigmoidGateOp::mayOverwriteInput(OpOperand &init, OpOperand &input) {
  return &init == &getInitMutable() && &input == &getValueMutable();
}
FailureOr<RuntimeCall> SigmoidGateOp::getRuntimeCall() {
  if (failed(requireBuffers(*this)))
    return failure();
  return RuntimeCall{"kiln_rt_sigmoid_gate",
                     {RuntimeArg::pointer(getInput()), RuntimeArg::pointer(getGateWeight()),
                      RuntimeArg::pointer(getValue()), RuntimeArg::pointer(getInit()),
                      RuntimeArg::dim(getInput(), 0), RuntimeArg::dim(getInput(), 1),
                      RuntimeArg::dim(getValue(), 1)}};
}

LogicalResult SigmoidMulOp::verify() {
  Operation *op = *this;
  Type element = shapedOf(getInput()).getElementType();
  if (failed(checkOneForm(op)) || failed(checkRank(op, "input", getInput(), 2)) ||
      failed(checkSameShape(op, "input", getInput(), "gate", getGate())) ||
      failed(checkSameShape(op, "input", getInput(), "init", getInit())) ||
      failed(checkElementType(op, "gate", getGate(), element)) ||
      failed(checkElementType(op, "init", getInit(), element)))
    return failure();
  return success();
}
bool SigmoidMulOp::mayOverwriteInput(OpOperand &init, OpOperand &input) {
  return &init == &getInitMutable() && &input == &getInputMutable();
}
FailureOr<RuntimeCall> SigmoidMulOp::getRuntimeCall() {
  if (failed(requireBuffers(*this)))
    return failure();
  return RuntimeCall{"kiln_rt_sigmoid_mul",
                     {RuntimeArg::pointer(getInput()), RuntimeArg::stridedPointer(getGate()),
                      RuntimeArg::pointer(getInit()), RuntimeArg::dim(getInput(), 0),
                      RuntimeArg::dim(getInput(), 1), RuntimeArg::rowStride(getGate())}};
}

LogicalResult GatedRmsNormOp::verify() {
  Operation *op = *this;
  Type element = shapedOf(getInput()).getElementType();
  if (failed(checkOneForm(op)) || failed(checkRank(op, "input", getInput(), 2)) ||
      failed(checkSameShape(op, "input", getInput(), "gate", getGate())) ||
      failed(checkSameShape(op, "input", getInput(), "init", getInit())) ||
      failed(checkRank(op, "weight", getWeight(), 1)) ||
      failed(checkDimEquals(op, "weight", getWeight(), 0,
                            getNormBeforeGate() ? getGroupSize() : sizeOf(getInput(), 1),
                            getNormBeforeGate() ? "the group size" : "the normalized size")) ||
      failed(checkElementType(op, "gate", getGate(), element)) ||
      failed(checkElementType(op, "weight", getWeight(), element)) ||
      failed(checkElementType(op, "init", getInit(), element)))
    return failure();
  int64_t width = sizeOf(getInput(), 1), group = getGroupSize();
  if (group < 1 || (!ShapedType::isDynamic(width) && width % group != 0))
    return emitOpError() << "'group_size' " << group << " must be positive and divide the width "
                         << width;
  return checkEpsilon(op, getEpsilon());
}
FailureOr<RuntimeCall> GatedRmsNormOp::getRuntimeCall() {
  if (failed(requireBuffers(*this)))
    return failure();
  return RuntimeCall{getNormBeforeGate() ? "kiln_rt_rms_norm_gate" : "kiln_rt_gated_rms_norm",
                     {RuntimeArg::pointer(getInput()), RuntimeArg::stridedPointer(getGate()),
                      RuntimeArg::pointer(getWeight()), RuntimeArg::pointer(getInit()),
                      RuntimeArg::dim(getInput(), 0), RuntimeArg::dim(getInput(), 1),
                      RuntimeArg::rowStride(getGate()), RuntimeArg::i64(getGroupSize()),
                      RuntimeArg::f32(getEpsilon().convertToDouble())}};
}

LogicalResult ActivationOp::verify() {
  Operation *op = *this;
  if (failed(checkOneForm(op)) ||
      failed(checkSameShape(op, "input", getInput(), "init", getInit())) ||
      failed(checkElementType(op, "init", getInit(), shapedOf(getInput()).getElementType())))
    return failure();
  return success();
}
bool ActivationOp::mayOverwriteInput(OpOperand &init, OpOperand &input) {
  return &init == &getInitMutable() && &input == &getInputMutable();
}
FailureOr<RuntimeCall> ActivationOp::getRuntimeCall() {
  if (failed(requireBuffers(*this)))
    return failure();
  return RuntimeCall{"kiln_rt_activation",
                     {RuntimeArg::pointer(getInput()), RuntimeArg::pointer(getInit()),
                      RuntimeArg::elements(getInput()),
                      RuntimeArg::i32(static_cast<int64_t>(getKind()))}};
}

LogicalResult GatherRowsOp::verify() {
  Operation *op = *this;
  if (failed(checkOneForm(op)) || failed(checkRank(op, "input", getInput(), 2)) ||
      failed(checkRank(op, "rows", getRows(), 1)) ||
      failed(checkRank(op, "init", getInit(), 2)) ||
      failed(checkElementType(op, "rows", getRows(), i32Type(op))) ||
      failed(checkDimEquals(op, "init", getInit(), 0, sizeOf(getRows(), 0), "the row count")) ||
      failed(checkDimEquals(op, "init", getInit(), 1, sizeOf(getInput(), 1), "the row size")) ||
      failed(checkElementType(op, "init", getInit(), shapedOf(getInput()).getElementType())))
    return failure();
  return success();
}
FailureOr<RuntimeCall> GatherRowsOp::getRuntimeCall() {
  if (failed(requireBuffers(*this)))
    return failure();
  return RuntimeCall{"kiln_rt_gather_rows",
                     {RuntimeArg::pointer(getInput()), RuntimeArg::pointer(getRows()),
                      RuntimeArg::pointer(getInit()), RuntimeArg::dim(getRows(), 0),
                      RuntimeArg::dim(getInput(), 1), RuntimeArg::dim(getInput(), 0)}};
}

LogicalResult ConcatOp::verify() {
  Operation *op = *this;
  if (failed(checkOneForm(op)) || failed(checkRank(op, "lhs", getLhs(), 2)) ||
      failed(checkRank(op, "rhs", getRhs(), 2)) || failed(checkRank(op, "init", getInit(), 2)))
    return failure();
  Type element = shapedOf(getLhs()).getElementType();
  int64_t a = sizeOf(getLhs(), 1), b = sizeOf(getRhs(), 1);
  if (failed(checkElementType(op, "rhs", getRhs(), element)) ||
      failed(checkElementType(op, "init", getInit(), element)) ||
      failed(checkDimEquals(op, "rhs", getRhs(), 0, sizeOf(getLhs(), 0), "the row count")) ||
      failed(checkDimEquals(op, "init", getInit(), 0, sizeOf(getLhs(), 0), "the row count")) ||
      failed(checkDimEquals(op, "init", getInit(), 1,
                            ShapedType::isDynamic(a) || ShapedType::isDynamic(b)
                                ? ShapedType::kDynamic
                                : a + b,
                            "the two widths")))
    return failure();
  return success();
}
FailureOr<RuntimeCall> ConcatOp::getRuntimeCall() {
  if (failed(requireBuffers(*this)))
    return failure();
  return RuntimeCall{"kiln_rt_concat",
                     {RuntimeArg::pointer(getLhs()), RuntimeArg::pointer(getRhs()),
                      RuntimeArg::pointer(getInit()), RuntimeArg::dim(getLhs(), 0),
                      RuntimeArg::dim(getLhs(), 1), RuntimeArg::dim(getRhs(), 1)}};
}

LogicalResult ArgmaxOp::verify() {
  Operation *op = *this;
  if (failed(checkOneForm(op)) || failed(checkRank(op, "logits", getLogits(), 2)) ||
      failed(checkRank(op, "init", getInit(), 2)) ||
      failed(checkElementType(op, "init", getInit(), i32Type(op))) ||
      failed(checkDimEquals(op, "init", getInit(), 0, sizeOf(getLogits(), 0), "the row count")) ||
      failed(checkDimEquals(op, "init", getInit(), 1, 1, "one token a row")))
    return failure();
  if (!shapedOf(getLogits()).getElementType().isBF16())
    return emitOpError() << "'logits' must be bf16, got " << getLogits().getType();
  return success();
}
FailureOr<RuntimeCall> ArgmaxOp::getRuntimeCall() {
  if (failed(requireBuffers(*this)))
    return failure();
  return RuntimeCall{"kiln_rt_argmax",
                     {RuntimeArg::pointer(getLogits()), RuntimeArg::pointer(getInit()),
                      RuntimeArg::dim(getLogits(), 0), RuntimeArg::dim(getLogits(), 1)}};
}

LogicalResult NextTokensOp::verify() {
  Operation *op = *this;
  if (failed(checkOneForm(op)) || failed(checkRank(op, "ids", getIds(), 1)) ||
      failed(checkRank(op, "picks", getPicks(), 2)) ||
      failed(checkRank(op, "rows", getRows(), 1)) ||
      failed(checkRank(op, "init", getInit(), 1)) ||
      failed(checkElementType(op, "ids", getIds(), i32Type(op))) ||
      failed(checkElementType(op, "picks", getPicks(), i32Type(op))) ||
      failed(checkElementType(op, "rows", getRows(), i32Type(op))) ||
      failed(checkElementType(op, "init", getInit(), i32Type(op))) ||
      failed(checkDimEquals(op, "init", getInit(), 0, sizeOf(getIds(), 0), "the token count")) ||
      failed(checkDimEquals(op, "picks", getPicks(), 0, sizeOf(getRows(), 0), "the row count")) ||
      failed(checkDimEquals(op, "picks", getPicks(), 1, 1, "one token a row")))
    return failure();
  return success();
}
FailureOr<RuntimeCall> NextTokensOp::getRuntimeCall() {
  if (failed(requireBuffers(*this)))
    return failure();
  return RuntimeCall{"kiln_rt_next_tokens",
                     {RuntimeArg::pointer(getIds()), RuntimeArg::pointer(getPicks()),
                      RuntimeArg::pointer(getRows()), RuntimeArg::pointer(getInit()),
                      RuntimeArg::dim(getIds(), 0), RuntimeArg::dim(getRows(), 0)}};
}

//===----------------------------------------------------------------------===//
// Weights and step buffers
//===----------------------------------------------------------------------===//

std::optional<uint64_t> WeightOp::getBytes() {
  RankedTensorType type = getTensorType();
  uint64_t bytes = getElementBytes(type.getElementType());
  for (int64_t dim : type.getShape())
    if (dim < 0 || __builtin_mul_overflow(bytes, static_cast<uint64_t>(dim), &bytes))
      return std::nullopt;
  return bytes;
}

LogicalResult WeightOp::verify() {
  if (!getBytes())
    return emitOpError() << "weight '" << getSymName() << "' of type " << getType()
                         << " has a byte size that overflows 64 bits";
  if (std::optional<uint64_t> offset = getOffset();
      offset && static_cast<int64_t>(*offset) < 0)
    return emitOpError() << "'offset' must be >= 0";
  // A stacked weight: the checkpoint's tensors with `*` = 0, 1, ... along dimension 0.
  StringRef name = getSymName();
  if (name.count('*') > 1)
    return emitOpError() << "weight '" << name << "' holds more than one '*'";
  if (name.contains('*') && getTensorType().getRank() < 2)
    return emitOpError() << "stacked weight '" << name
                         << "' needs rank >= 2 (the leading dimension indexes '*')";
  if (failed(verifyCheckpointLayout()) || failed(verifyRowGroups()))
    return failure();
  return verifyShard();
}

/// A weight's (or a weight family's members') `shard`: a dimension of `type`, no
/// rearrangement of the checkpoint tensor (`rearranged`), a stack's own dimensions only,
/// segments summing to the declared size.
static LogicalResult verifyWeightShard(Operation *op, StringRef name, RankedTensorType type,
                                       ShardAttr shard, bool rearranged) {
  if (!shard)
    return success();
  if (shard.getDim() >= type.getRank())
    return op->emitOpError() << "'shard' dimension " << shard.getDim()
                             << " is not a dimension of " << type;
  if (rearranged)
    return op->emitOpError() << "a sharded weight is read as a block of the checkpoint tensor; "
                                "'checkpoint_shape', 'transpose_checkpoint', 'mxfp4_checkpoint' "
                                "and 'row_groups' do not combine with 'shard' yet";
  // A stack's dimension 0 indexes the checkpoint's tensors: each of them is sharded.
  if (name.contains('*') && shard.getDim() == 0)
    return op->emitOpError() << "stacked weight '" << name
                             << "' is sharded along a dimension of each stacked tensor ('shard' "
                                "dimension >= 1; dimension 0 indexes '*')";
  if (DenseI64ArrayAttr segments = shard.getSegments()) {
    int64_t sum = 0;
    for (int64_t size : segments.asArrayRef())
      sum += size;
    int64_t declared = type.getDimSize(shard.getDim());
    if (sum != declared)
      return op->emitOpError() << "'shard' segments sum to " << sum << ", but dimension "
                               << shard.getDim() << " of " << type << " is " << declared;
  }
  return success();
}

LogicalResult WeightOp::verifyShard() {
  bool rearranged =
      getCheckpointShape() || getTransposeCheckpoint() || getMxfp4Checkpoint() || getRowGroups();
  return verifyWeightShard(*this, getSymName(), getTensorType(), getShardAttr(), rearranged);
}

/// Values a scale covers in MXFP4 (the OCP microscaling block).
constexpr int64_t kMxfp4BlockValues = 32;

LogicalResult WeightOp::verifyCheckpointLayout() {
  std::optional<ArrayRef<int64_t>> shape = getCheckpointShape();
  if (!shape && !getTransposeCheckpoint() && !getMxfp4Checkpoint())
    return success();
  if (getSymName().contains('*'))
    return emitOpError() << "a stacked weight loads each checkpoint tensor as it is; "
                            "'checkpoint_shape', 'transpose_checkpoint' and "
                            "'mxfp4_checkpoint' do not apply";
  int64_t declared = getTensorType().getNumElements();
  if (shape) {
    if (shape->empty() || llvm::any_of(*shape, [](int64_t d) { return d <= 0; }))
      return emitOpError() << "'checkpoint_shape' needs positive dimensions";
    int64_t elements = 1;
    for (int64_t dim : *shape)
      if (llvm::MulOverflow(elements, dim, elements))
        return emitOpError() << "'checkpoint_shape' overflows 64 bits";
    if (elements != declared)
      return emitOpError() << "'checkpoint_shape' holds " << elements
                           << " elements, but the weight's type " << getType() << " holds "
                           << declared;
  }
  size_t rank = shape ? shape->size() : static_cast<size_t>(getTensorType().getRank());
  if (getTransposeCheckpoint() && rank < 2)
    return emitOpError() << "'transpose_checkpoint' needs a checkpoint tensor of rank >= 2";
  if (getMxfp4Checkpoint()) {
    if (!getTensorType().getElementType().isBF16())
      return emitOpError() << "an MXFP4 checkpoint tensor loads as bf16, not "
                           << getTensorType().getElementType();
    int64_t last = shape ? shape->back() : getTensorType().getShape().back();
    if (last % kMxfp4BlockValues != 0)
      return emitOpError() << "an MXFP4 checkpoint tensor's last dimension (" << last
                           << ") must be a multiple of its " << kMxfp4BlockValues
                           << "-value blocks";
  }
  return success();
}

LogicalResult WeightOp::verifyRowGroups() {
  std::optional<ArrayRef<int64_t>> groups = getRowGroups();
  if (!groups)
    return success();
  if (groups->size() < 3)
    return emitOpError() << "'row_groups' needs a group count and at least two parts, got "
                         << groups->size() << " values";
  if (llvm::any_of(*groups, [](int64_t value) { return value <= 0; }))
    return emitOpError() << "'row_groups' values must be positive";
  if (getSymName().contains('*'))
    return emitOpError() << "a stacked weight cannot regroup its rows";
  int64_t perGroup = 0;
  for (int64_t part : groups->drop_front())
    if (llvm::AddOverflow(perGroup, part, perGroup))
      return emitOpError() << "'row_groups' parts overflow";
  int64_t elements = getTensorType().getNumElements(), units = 0;
  if (llvm::MulOverflow(groups->front(), perGroup, units) || elements % units != 0)
    return emitOpError() << "'row_groups' describes " << groups->front() << " groups of "
                         << perGroup << " units, which do not divide the weight's " << elements
                         << " elements evenly";
  return success();
}

LogicalResult WeightRefOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  auto weight = symbolTable.lookupNearestSymbolFrom<WeightOp>(*this, getWeightAttr());
  if (!weight)
    return emitOpError() << "'" << getWeight() << "' does not name a kiln.weight";
  auto result = cast<ShapedType>(getResult().getType());
  RankedTensorType declared = weight.getTensorType();
  if (result.getShape() != declared.getShape() ||
      result.getElementType() != declared.getElementType())
    return emitOpError() << "type " << getResult().getType() << " does not match weight '"
                         << getWeight() << "' of type " << declared;
  return success();
}

/// The `{}` a family's name substitutes its member index for.
static constexpr llvm::StringLiteral kMemberIndexHole = "{}";

std::optional<uint64_t> WeightFamilyOp::getMemberBytes() {
  RankedTensorType type = getTensorType();
  uint64_t bytes = getElementBytes(type.getElementType());
  for (int64_t dim : type.getShape())
    if (dim < 0 || __builtin_mul_overflow(bytes, static_cast<uint64_t>(dim), &bytes))
      return std::nullopt;
  return bytes;
}

std::string WeightFamilyOp::getMemberName(int64_t index) {
  StringRef pattern = getSymName();
  size_t hole = pattern.find(kMemberIndexHole);
  return (pattern.take_front(hole) + Twine(index) +
          pattern.drop_front(hole + kMemberIndexHole.size()))
      .str();
}

LogicalResult WeightFamilyOp::verify() {
  StringRef name = getSymName();
  if (name.count(kMemberIndexHole) != 1)
    return emitOpError() << "weight family '" << name
                         << "' needs exactly one '{}' for the member index";
  std::optional<uint64_t> bytes = getMemberBytes();
  uint64_t total = 0;
  if (!bytes || __builtin_mul_overflow(*bytes, static_cast<uint64_t>(getCount()), &total))
    return emitOpError() << "weight family '" << name << "' of " << getCount() << " x " << getType()
                         << " has a byte size that overflows 64 bits";
  for (std::optional<uint64_t> value : {getOffset(), getStride()})
    if (value && static_cast<int64_t>(*value) < 0)
      return emitOpError() << "'offset' and 'stride' must be >= 0";
  if (getStride() && *getStride() < *bytes)
    return emitOpError() << "'stride' (" << *getStride() << ") is less than a member's " << *bytes
                         << " bytes";
  bool rearranged =
      getCheckpointShape() || getTransposeCheckpoint() || getMxfp4Checkpoint() || getRowGroups();
  return verifyWeightShard(*this, name, getTensorType(), getShardAttr(), rearranged);
}

LogicalResult WeightMemberOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  auto family = symbolTable.lookupNearestSymbolFrom<WeightFamilyOp>(*this, getFamilyAttr());
  if (!family)
    return emitOpError() << "'" << getFamily() << "' does not name a kiln.weight_family";
  auto shaped = cast<ShapedType>(getResult().getType());
  if (shaped.getShape() != family.getTensorType().getShape() ||
      shaped.getElementType() != family.getTensorType().getElementType())
    return emitOpError() << "type " << getResult().getType() << " does not match weight family '"
                         << getFamily() << "' of type " << family.getType();
  return success();
}

namespace {
LogicalResult checkDynamicSizes(Operation *op, Type type, size_t numSizes) {
  auto memref = cast<MemRefType>(type);
  if (!memref.getLayout().isIdentity())
    return op->emitOpError() << "needs a memref with the identity layout, got " << type;
  if (static_cast<size_t>(memref.getNumDynamicDims()) != numSizes)
    return op->emitOpError() << "needs " << memref.getNumDynamicDims()
                             << " dynamic sizes for " << type << ", got " << numSizes;
  return success();
}
} // namespace

LogicalResult ActivationBufferOp::verify() {
  if (static_cast<int64_t>(getOffset()) < 0 || static_cast<int64_t>(getCapacity()) < 0)
    return emitOpError() << "'offset' and 'capacity' must be >= 0";
  return checkDynamicSizes(*this, getBuffer().getType(), getSizes().size());
}

LogicalResult BufferFromPointerOp::verify() {
  return checkDynamicSizes(*this, getBuffer().getType(), getSizes().size());
}

// Records where the step's result is; launches nothing.
uint64_t OutputOp::getMaxDecodeLaunches() { return 0; }

LogicalResult OutputOp::verify() {
  auto type = cast<MemRefType>(getBuffer().getType());
  if (getKind() == OutputKind::logits && type.getRank() != 2)
    return emitOpError() << "logits must be a [rows, vocab] buffer, got " << type;
  if (getKind() == OutputKind::draft_tokens &&
      (type.getRank() != 2 || type.getDimSize(1) != 1 || !type.getElementType().isInteger(32)))
    return emitOpError() << "draft tokens must be a [rows, 1] i32 buffer, got " << type;
  return success();
}

FailureOr<RuntimeCall> OutputOp::getRuntimeCall() {
  return RuntimeCall{"kiln_rt_output",
                     {RuntimeArg::i32(static_cast<int64_t>(getKind())),
                      RuntimeArg::pointer(getBuffer()), RuntimeArg::dim(getBuffer(), 0),
                      RuntimeArg::dim(getBuffer(), 1)}};
}
