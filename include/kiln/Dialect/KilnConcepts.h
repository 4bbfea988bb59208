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
#include <optional>

#include "mlir/IR/OpImplementation.h"

#include "kiln/Dialect/KilnEnums.h.inc"

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

/// Where the memory planner puts a resource.
enum class PoolCategory { kv, state, unmanaged };
llvm::StringRef stringifyPoolCategory(PoolCategory category);

/// Kernel family serving a cached op.
enum class OpFamily { attention, mla, ssm, conv };
llvm::StringRef stringifyOpFamily(OpFamily family);

/// Kinds that exist only for speculative decoding.
bool isSpeculativeOnlyKind(ResourceKind kind);
/// Kinds allocated per token (KV pages) rather than per sequence slot.
bool isPerTokenKind(ResourceKind kind);

/// One resource slot of a cached op.
struct CacheSlot {
  llvm::StringRef name;           // e.g. "kv", "intermediate"
  llvm::SmallVector<ResourceKind, 2> acceptedKinds;
  bool speculative;               // only ever holds speculative-only resources
  mlir::Value value;              // null: empty slot
};

/// A resource a model op asks `kiln-insert-caches` for.
struct ResourceRequest {
  ResourceKind kind;
  llvm::SmallVector<int64_t> unit; // shape of one slot / token, whole model
  mlir::Type elementType;
  std::optional<int64_t> shard;    // dimension divided across TP ranks
  std::optional<int64_t> window;   // sliding window (per-token kinds)
};

} // namespace kiln

#endif
