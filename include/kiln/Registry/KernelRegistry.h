//===- KernelRegistry.h - declarative table of Kiln's kernel variants -----===//
//
// Every kernel variant states what it needs (SM range, architecture features, shared
// memory per block) and what it supports (head dims, dtypes, page sizes, GQA group
// sizes, query tokens per sequence). `kiln-select-kernels` derives every decision,
// including the spec-dec mode of decode attention, from this table: no SM-specific
// rule lives in code. An embedding compiler adds its own variants with `add`.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_REGISTRY_KERNELREGISTRY_H
#define KILN_REGISTRY_KERNELREGISTRY_H

#include "kiln/Dialect/Kiln/Kiln.h"

#include "llvm/ADT/SmallVector.h"

#include <string>
#include <vector>

namespace kiln {

/// Storage types a kernel variant reads (bit flags).
// fp8: OCP e4m3 (f8E4M3FN); fp8_e5m2: f8E5M2 (no Kiln kernel reads it yet).
enum class DtypeBit : uint32_t { bf16 = 1, f16 = 2, f32 = 4, fp8 = 8, fp8_e5m2 = 16 };
/// The flag of `type`, or 0 for types no kernel handles.
uint32_t dtypeBitOf(mlir::Type type);

struct KernelVariant {
  std::string name;                        // "gqa_decode" (the C ABI launcher's family)
  OpFamily family;
  Phase phase;
  unsigned minSm = 80, maxSm = 121;        // inclusive
  uint32_t requiredFeatures = 0;           // TargetFeature flags
  uint64_t smemBytes = 0;                  // dynamic shared memory per block
  llvm::SmallVector<int64_t, 4> headDims;  // empty: any
  uint32_t dtypes = 0;                     // DtypeBit flags of the cache / state type
  llvm::SmallVector<int64_t, 4> pageSizes; // empty: any (or not paged)
  unsigned maxGroupSize = 0;               // q heads per kv head; 0: any
  unsigned maxHeads = 0;                   // q heads; 0: any
  unsigned maxQueryLen = 1;                // > 1: multi-token decode (draft verify)
  bool writesIntermediates = false;        // SSM/conv spec variant (rewind mode)
  bool replay = false;                     // SSM replay-mode variant
  bool implemented = true;                 // false: planned, never lowered
  int priority = 0;                        // higher wins among fitting variants
  std::string note;                        // one line for docs and reports
  int runtimeKernel = 0;                   // kiln_rt_kernel_t the lowering emits (0: none)
};

/// The runtime id (include/kiln/Runtime/ABI.def) of the kernel variant `name`; 0 when
/// the ABI has no such kernel. Builtin variants take their ids from here.
int runtimeKernelId(llvm::StringRef name);

/// What one op needs from a kernel.
struct KernelQuery {
  OpFamily family;
  Phase phase;
  int64_t headDim = 0;     // attention head dim, MLA latent+rope, SSM head dim
  mlir::Type dtype;        // cache / state element type
  int64_t pageSize = 0;    // KV page size (0: not paged)
  int64_t groupSize = 1;   // q heads per kv head
  int64_t numHeads = 0;    // q heads (MLA)
  unsigned queryLen = 1;   // tokens per sequence in one decode step
  bool needsIntermediates = false;
  bool needsReplay = false;
};

class KernelRegistry {
public:
  /// Kiln's own kernels.
  static KernelRegistry builtin();
  /// The registry `kiln-select-kernels` uses; starts as `builtin()`. Embedders add to it.
  static KernelRegistry &global();

  void add(KernelVariant variant) { variants.push_back(std::move(variant)); }
  llvm::ArrayRef<KernelVariant> all() const { return variants; }
  const KernelVariant *lookup(llvm::StringRef name) const;

  /// Why `variant` cannot serve `query` on `target`; empty when it can.
  static std::string whyRejected(const KernelVariant &variant, const KernelQuery &query,
                                 TargetAttr target);

  /// Fitting variants of the query's family and phase, best first (priority, then
  /// implemented, then name). `rejections` receives (variant, reason) of the others.
  std::vector<const KernelVariant *>
  candidates(const KernelQuery &query, TargetAttr target,
             std::vector<std::pair<const KernelVariant *, std::string>> *rejections =
                 nullptr) const;

  /// Most query tokens any implemented decode variant of `family` verifies.
  unsigned maxQueryLen(OpFamily family) const;

private:
  std::vector<KernelVariant> variants;
};

} // namespace kiln

#endif
