// The embedder's own attention ops (ConsumerOps.h): everything Kiln needs of them goes
// through its interfaces; no Kiln pass or pattern knows their names.
#include "ConsumerOps.h"

#include "kiln/Dialect/Kiln/KilnBufferization.h"

#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"

using namespace mlir;

namespace consumer {

ConsumerDialect::ConsumerDialect(MLIRContext *context)
    : Dialect(getDialectNamespace(), context, TypeID::get<ConsumerDialect>()) {
  getContext()->loadDialect<tensor::TensorDialect>();
  addOperations<AttentionOp, CachedAttentionOp>();
}

FailureOr<AttentionShape> AttentionShape::of(Operation *op) {
  AttentionShape shape;
  const struct {
    const char *name;
    int64_t *value;
  } fields[] = {{"layer", &shape.layer},
                {"num_heads", &shape.numHeads},
                {"num_kv_heads", &shape.numKvHeads},
                {"head_dim", &shape.headDim}};
  for (const auto &field : fields) {
    auto attr = op->getAttrOfType<IntegerAttr>(field.name);
    if (!attr)
      return op->emitOpError() << "needs an integer '" << field.name << "' attribute";
    *field.value = attr.getInt();
  }
  if (shape.layer < 0 || shape.numHeads < 1 || shape.numKvHeads < 1 || shape.headDim < 1 ||
      shape.numHeads % shape.numKvHeads != 0)
    return op->emitOpError() << "needs layer >= 0 and positive heads (num_heads a multiple "
                                "of num_kv_heads) and head_dim";
  return shape;
}

// ---- consumer.attention ------------------------------------------------------------------

LogicalResult AttentionOp::verify() { return AttentionShape::of(*this); }

int64_t AttentionOp::getLayerIndex() { return AttentionShape::of(*this)->layer; }

SmallVector<kiln::ResourceRequest> AttentionOp::getResourceRequests(kiln::SpecAttr,
                                                                    kiln::RuntimeAttr runtime) {
  AttentionShape shape = *AttentionShape::of(*this);
  // K and V of every token: [2, kv heads, head dim], kv heads split across TP ranks.
  return {kiln::ResourceRequest{kiln::ResourceKind::kv, {2, shape.numKvHeads, shape.headDim},
                                runtime.getKvDtype(), 1, std::nullopt}};
}

Operation *AttentionOp::buildCachedForm(OpBuilder &builder, ValueRange resources) {
  Value kv = resources.empty() ? Value() : resources.front();
  auto type = cast<RankedTensorType>(getOperation()->getResult(0).getType());
  SmallVector<Value> dynamicSizes;
  for (int64_t dim = 0; dim < type.getRank(); ++dim)
    if (type.isDynamicDim(dim))
      dynamicSizes.push_back(tensor::DimOp::create(builder, getLoc(), getOperand(0), dim));
  Value init = tensor::EmptyOp::create(builder, getLoc(), type, dynamicSizes);
  OperationState state(getLoc(), CachedAttentionOp::getOperationName());
  state.addOperands({getOperand(0), getOperand(1), getOperand(2), kv, init});
  state.addTypes(type);
  state.addAttributes(getOperation()->getAttrs());
  return builder.create(state);
}

// ---- consumer.cached_attention -----------------------------------------------------------

LogicalResult CachedAttentionOp::verify() {
  if (failed(AttentionShape::of(*this)))
    return failure();
  if (!getOperand(3) || !isa<kiln::CacheType>(getOperand(3).getType()))
    return emitOpError() << "operand 3 must be the KV cache resource";
  return success();
}

int64_t CachedAttentionOp::getLayerIndex() { return AttentionShape::of(*this)->layer; }

SmallVector<kiln::CacheSlot> CachedAttentionOp::getCacheSlots() {
  return {kiln::CacheSlot{"kv", {kiln::ResourceKind::kv}, false, getOperand(3)}};
}

// The KV slot is never speculative-only, so kiln-drop-speculative-resources never
// detaches it.
void CachedAttentionOp::detachResource(Value) {}

kiln::KernelShape CachedAttentionOp::getKernelShape(kiln::RuntimeAttr runtime) {
  AttentionShape shape = *AttentionShape::of(*this);
  kiln::KernelShape kernel;
  kernel.headDim = shape.headDim;
  kernel.dtype = runtime.getKvDtype();
  kernel.pageSize = runtime.getPageSize();
  kernel.groupSize = shape.numHeads / shape.numKvHeads;
  kernel.numHeads = shape.numHeads;
  return kernel;
}

FailureOr<kiln::RuntimeCall> CachedAttentionOp::getRuntimeCall() {
  for (Value operand : getOperation()->getOperands())
    if (isa<TensorType>(operand.getType()))
      return emitOpError() << "lowers to a runtime call only on buffers";
  AttentionShape shape = *AttentionShape::of(*this);
  auto resource = getOperand(3).getDefiningOp<kiln::CacheResourceOp>();
  if (!resource || !resource.getOffset())
    return emitOpError() << "its KV resource has no planned offset; run kiln-plan-memory";
  kiln::ModuleConfig config = kiln::getModuleConfig((*this)->getParentOfType<ModuleOp>());
  if (!config.runtime)
    return emitOpError() << "needs the module's kiln.runtime";
  auto kernel = [&](const char *name) {
    kiln::RuntimeArg arg{kiln::RuntimeArg::Kind::kernel};
    if (auto chosen = getOperation()->getAttrOfType<StringAttr>(name))
      arg.symbol = chosen.getValue();
    return arg;
  };
  using Arg = kiln::RuntimeArg;
  return kiln::RuntimeCall{
      "kiln_rt_attention",
      {Arg::i32(shape.layer), Arg::i64(*resource.getOffset()), Arg::pointer(getOperand(0)),
       Arg::pointer(getOperand(1)), Arg::pointer(getOperand(2)), Arg::pointer(getOperand(4)),
       Arg::dim(getOperand(0), 0), Arg::i32(shape.numHeads), Arg::i32(shape.numKvHeads),
       Arg::i32(shape.headDim), Arg::i32(config.runtime.getPageSize()), Arg::i32(0),
       kernel("decode_kernel"), kernel("prefill_kernel"), Arg::i32(0), Arg::f32(0.0)}};
}

void registerConsumerDialect(DialectRegistry &registry) {
  registry.insert<ConsumerDialect>();
  registry.addExtension(+[](MLIRContext *context, ConsumerDialect *) {
    CachedAttentionOp::attachInterface<kiln::DestinationStyleBufferization<CachedAttentionOp>>(
        *context);
  });
}

} // namespace consumer

MLIR_DECLARE_EXPLICIT_TYPE_ID(consumer::ConsumerDialect)
MLIR_DEFINE_EXPLICIT_TYPE_ID(consumer::ConsumerDialect)
