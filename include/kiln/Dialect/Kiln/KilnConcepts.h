//===- KilnConcepts.h - plain C++ vocabulary of the kiln dialect ----------===//
//
// Small value types shared by the dialect's interfaces, passes and embedders.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_DIALECT_KILNCONCEPTS_H
#define KILN_DIALECT_KILNCONCEPTS_H

#include "mlir/IR/Types.h"
#include "mlir/IR/Value.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <string>
#include <optional>

#include "mlir/IR/OpImplementation.h"

#include "kiln/Dialect/Kiln/KilnEnums.h.inc"

namespace kiln {

/// Architecture features a kernel variant may require (bit flags).
enum class TargetFeature : uint32_t {
  tma = 1u << 0,      // cp.async.bulk.tensor (sm_90+)
  wgmma = 1u << 1,    // warpgroup MMA (sm_90a only)
  tcgen05 = 1u << 2,  // 5th-gen tensor cores + TMEM (sm_100/103)
  fp8 = 1u << 3,      // fp8 tensor-core MMA (sm_89+)
  clusters = 1u << 4, // thread-block clusters / DSMEM (sm_90+)
};
llvm::StringRef stringifyTargetFeature(TargetFeature feature);
std::optional<TargetFeature> symbolizeTargetFeature(llvm::StringRef name);
/// All features, in printing order.
llvm::ArrayRef<TargetFeature> allTargetFeatures();

/// How a resource is allocated.
enum class AllocationUnit { perSlot, perToken };

/// Kernel family serving a cached op.
enum class OpFamily { attention, mla, ssm, conv, gdn };
llvm::StringRef stringifyOpFamily(OpFamily family);

/// Kinds that exist only for speculative decoding.
bool isSpeculativeOnlyKind(ResourceKind kind);
/// Kinds allocated per token (KV pages) rather than per sequence slot.
bool isPerTokenKind(ResourceKind kind);
/// Speculative kinds holding one entry per verified token (1 + max_draft_len): their
/// bytes grow with the draft length (the intermediate states of rewind mode).
bool isPerDraftStepKind(ResourceKind kind);

/// One resource slot of a cached op.
struct CacheSlot {
  llvm::StringRef name;           // e.g. "kv", "intermediate"
  llvm::SmallVector<ResourceKind, 2> acceptedKinds;
  bool speculative;               // only ever holds speculative-only resources
  mlir::Value value;              // null: empty slot
};

/// What a cached op needs of a kernel, as the kernel registry matches it (the op family
/// and the phase come from elsewhere). Each cached op states its own through
/// CachedOpInterface::getKernelShape, so kernel selection names no op.
struct KernelShape {
  int64_t headDim = 0;     // attention head dim, MLA latent + rope width, SSM head dim
  mlir::Type dtype;        // cache / state element type
  int64_t pageSize = 0;    // KV page size (0: not paged)
  int64_t groupSize = 1;   // q heads per kv head (MLA: all heads share the latent)
  int64_t numHeads = 0;    // q heads on one TP rank
  bool needsIntermediates = false; // speculative per-draft states are attached
  bool needsReplay = false;        // replay buffers are attached
};

/// A resource a model op asks `kiln-insert-caches` for.
struct ResourceRequest {
  ResourceKind kind;
  llvm::SmallVector<int64_t> unit; // shape of one slot / token, whole model
  mlir::Type elementType;
  std::optional<int64_t> shard;    // dimension divided across TP ranks
  std::optional<int64_t> window;   // sliding window (per-token kinds)
};

/// One argument of a runtime call (see RuntimeCallOpInterface). Buffers are memrefs of
/// the op; sizes are read from them at run time, so dynamic token counts need no
/// constants.
struct RuntimeArg {
  enum class Kind {
    pointer,        // device pointer of `buffer` (null pointer when `buffer` is null)
    dim,            // i64 size of dimension `index` of `buffer`
    leadingElements,// i64 product of all dimensions of `buffer` but the last
    elements,       // i64 product of all dimensions of `buffer`
    i32,            // i32 constant `integer`
    i64,            // i64 constant `integer`
    f32,            // f32 constant `real`
    kernel,         // i32 runtime id of the kernel variant named `symbol` (0: none)
    rowStride       // i64 elements between two indices of `buffer`'s first dimension
  };
  Kind kind;
  mlir::Value buffer = {};
  int64_t integer = 0;
  double real = 0;
  llvm::StringRef symbol = {};
  /// A pointer whose first dimension may be strided (a column slice of a wider
  /// tensor); the rest of the buffer is contiguous. The call passes its rowStride.
  bool strided = false;
  /// A pointer to f32 data (per-head parameters); other pointers carry bf16 tensors, i32
  /// indices or i8 scratch.
  bool f32Data = false;
  /// An i32 or i64 that changes per layer: in iteration i of a layer loop (counted from
  /// the loop's first) the value is `integer + i * perLayer`. The layer index (1) and a
  /// cache resource's offset (the resource's planned stride).
  int64_t perLayer = 0;

  static RuntimeArg pointer(mlir::Value b) { return {Kind::pointer, b}; }
  static RuntimeArg stridedPointer(mlir::Value b) {
    RuntimeArg arg{Kind::pointer, b};
    arg.strided = true;
    return arg;
  }
  static RuntimeArg f32Pointer(mlir::Value b) {
    RuntimeArg arg{Kind::pointer, b};
    arg.f32Data = true;
    return arg;
  }
  static RuntimeArg rowStride(mlir::Value b) { return {Kind::rowStride, b}; }
  static RuntimeArg dim(mlir::Value b, int64_t i) { return {Kind::dim, b, i}; }
  static RuntimeArg leadingElements(mlir::Value b) { return {Kind::leadingElements, b}; }
  static RuntimeArg elements(mlir::Value b) { return {Kind::elements, b}; }
  static RuntimeArg i32(int64_t v) { return {Kind::i32, {}, v}; }
  static RuntimeArg i64(int64_t v) { return {Kind::i64, {}, v}; }
  static RuntimeArg f32(double v) { return {Kind::f32, {}, 0, v}; }
  /// The op's layer index, as an i32.
  static RuntimeArg layer(int64_t layer) {
    RuntimeArg arg{Kind::i32, {}, layer};
    arg.perLayer = 1;
    return arg;
  }
  /// A planned cache offset (i64) whose resource is one a layer (`stride` apart).
  static RuntimeArg cacheOffset(int64_t offset, int64_t stride) {
    RuntimeArg arg{Kind::i64, {}, offset};
    arg.perLayer = stride;
    return arg;
  }
};

/// A call `status = callee(ctx, args...)` of the Kiln runtime (docs/abi.md).
struct RuntimeCall {
  std::string callee;
  llvm::SmallVector<RuntimeArg> args;
};

} // namespace kiln

#endif
