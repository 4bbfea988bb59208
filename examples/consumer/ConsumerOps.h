// The embedder's own dialect: an attention op Kiln has never heard of, written in plain
// C++ (no TableGen), that takes part in Kiln's pipeline through Kiln's interfaces only:
//   consumer.attention         ModelOpInterface: asks for its KV cache, builds its
//                              cached form (kiln-insert-caches)
//   consumer.cached_attention  CachedOpInterface: cache slots and kernel shape (caches
//                              verified, kernels selected, memory planned);
//                              DestinationStyleOpInterface (+ Kiln's bufferization
//                              model); RuntimeCallOpInterface: its runtime call
// Both carry `layer`, `num_heads`, `num_kv_heads` and `head_dim` (i64 attributes).
#ifndef KILN_CONSUMER_CONSUMEROPS_H
#define KILN_CONSUMER_CONSUMEROPS_H

#include "kiln/Dialect/Kiln/Kiln.h"

#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/DestinationStyleOpInterface.h"

namespace consumer {

class ConsumerDialect : public mlir::Dialect {
public:
  explicit ConsumerDialect(mlir::MLIRContext *context);
  static llvm::StringRef getDialectNamespace() { return "consumer"; }
};

/// Shape attributes both ops carry.
struct AttentionShape {
  int64_t layer = 0, numHeads = 0, numKvHeads = 0, headDim = 0;
  static mlir::FailureOr<AttentionShape> of(mlir::Operation *op);
};

class AttentionOp
    : public mlir::Op<AttentionOp, mlir::OpTrait::OneResult, mlir::OpTrait::ZeroSuccessors,
                      mlir::OpTrait::NOperands<3>::Impl,
                      kiln::ModelOpInterface::Trait> {
public:
  using Op::Op;
  static llvm::StringRef getOperationName() { return "consumer.attention"; }
  static llvm::ArrayRef<llvm::StringRef> getAttributeNames() { return {}; }
  mlir::LogicalResult verify();

  // ModelOpInterface
  int64_t getLayerIndex();
  llvm::SmallVector<kiln::ResourceRequest> getResourceRequests(kiln::SpecAttr spec,
                                                               kiln::RuntimeAttr runtime);
  mlir::Operation *buildCachedForm(mlir::OpBuilder &builder, mlir::ValueRange resources);
};

/// Operands: q, k, v, kv (the cache resource), init (destination). On tensors one
/// result; after bufferization none.
class CachedAttentionOp
    : public mlir::Op<CachedAttentionOp, mlir::OpTrait::VariadicResults,
                      mlir::OpTrait::ZeroSuccessors, mlir::OpTrait::NOperands<5>::Impl,
                      kiln::CachedOpInterface::Trait,
                      kiln::RuntimeCallOpInterface::Trait,
                      mlir::DestinationStyleOpInterface::Trait> {
public:
  using Op::Op;
  static llvm::StringRef getOperationName() { return "consumer.cached_attention"; }
  static llvm::ArrayRef<llvm::StringRef> getAttributeNames() { return {}; }
  mlir::LogicalResult verify();

  // CachedOpInterface (setChosenKernels: the interface's default attributes)
  int64_t getLayerIndex();
  kiln::OpFamily getOpFamily() { return kiln::OpFamily::attention; }
  llvm::SmallVector<kiln::CacheSlot> getCacheSlots();
  void detachResource(mlir::Value resource);
  std::optional<kiln::DraftKind> getDraftKind() { return std::nullopt; }
  kiln::KernelShape getKernelShape(kiln::RuntimeAttr runtime);

  // RuntimeCallOpInterface
  mlir::FailureOr<kiln::RuntimeCall> getRuntimeCall();

  // DestinationStyleOpInterface
  mlir::MutableOperandRange getDpsInitsMutable() {
    return mlir::MutableOperandRange(getOperation(), 4, 1);
  }
};

/// Registers the dialect and attaches Kiln's destination-style bufferization to the
/// cached op.
void registerConsumerDialect(mlir::DialectRegistry &registry);

} // namespace consumer

#endif
