//===- Kiln.h - the kiln dialect: attributes, types, interfaces, ops ------===//
#ifndef KILN_DIALECT_KILN_H
#define KILN_DIALECT_KILN_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Interfaces/DestinationStyleOpInterface.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMTypes.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

#include <cstdint>
#include <string>

#include "kiln/Dialect/Kiln/KilnConcepts.h"
#include "kiln/Dialect/Kiln/Targets.h"

#include "kiln/Dialect/Kiln/KilnDialect.h.inc"

#define GET_ATTRDEF_CLASSES
#include "kiln/Dialect/Kiln/KilnAttrs.h.inc"

#define GET_TYPEDEF_CLASSES
#include "kiln/Dialect/Kiln/KilnTypes.h.inc"

#include "kiln/Dialect/Kiln/KilnInterfaces.h.inc"

#define GET_OP_CLASSES
#include "kiln/Dialect/Kiln/KilnOps.h.inc"

namespace kiln {

/// The module configuration, read from the module's attributes.
struct ModuleConfig {
  TargetAttr target;   // null when absent
  SpecAttr spec;       // null: speculation off
  RuntimeAttr runtime; // null when absent
  ModelAttr model;     // null when absent
};
ModuleConfig getModuleConfig(mlir::ModuleOp module);

/// What one forward step of a compiled model may hold; these bound the dynamic
/// (token) dimensions when the activation arena is planned.
struct StepLimits {
  uint64_t maxStepTokens = 0; // tokens of one step (prefill chunk or decode batch)
  uint64_t maxLogitRows = 0;  // rows of logits one step returns
  uint64_t maxDraftLen = 0;   // draft tokens verified per sequence and step
};
/// Tokens a prefill step holds unless `max_step_tokens` says otherwise.
constexpr uint64_t kDefaultPrefillTokens = 2048;
/// Decode step shapes captured in CUDA graphs unless `#kiln.runtime` says otherwise.
constexpr unsigned kDefaultCudaGraphs = 64;
/// max_logit_rows = max_batch x (1 + max_draft_len); max_step_tokens from
/// `kiln.runtime`, or the larger of max_logit_rows and min(max_seq_len, 2048).
StepLimits getStepLimits(const ModuleConfig &config);

/// Bytes of one element of `type` (bf16: 2, f32: 4, i32: 4, ...).
uint64_t getElementBytes(mlir::Type type);

/// What the plan still divides heads, cache units and weights by: the runtime's tp over
/// the ranks the graph was imported for (`#kiln.model`'s tp_ranks; a per-rank graph is
/// already divided). 1 without a runtime. `inModule`: any op of the module.
unsigned planShardDivisor(const ModuleConfig &config);
unsigned planShardDivisor(mlir::Operation *inModule, RuntimeAttr runtime);

/// Unit shape of a resource on one TP rank: the shard dimension divided by tp
/// (kept at 1 when smaller than tp: KV heads are replicated, not split).
llvm::SmallVector<int64_t> shardUnitShape(llvm::ArrayRef<int64_t> unit,
                                          std::optional<int64_t> shard, unsigned tp);

/// Tokens per sequence a per-token resource holds: max_seq_len rounded up to whole
/// pages. A sliding-window layer's pool too: the KV pages are one id space shared by
/// every layer (one block table), so a windowed layer keeps the pages its sequence
/// holds; a pool per window whose pages are recycled is the planned refinement
/// (docs/overview.md, "Sliding windows").
uint64_t tokensPerSequence(RuntimeAttr runtime);

/// "1.50 GiB": binary units with two decimals (B below 1 KiB), up to EiB. The one
/// formatter of sizes in diagnostics and reports.
std::string formatBytes(uint64_t bytes);

/// The most bytes any planned quantity may have: offsets and sizes are int64
/// attributes, and no device comes near it.
constexpr uint64_t kMaxPlanBytes = static_cast<uint64_t>(INT64_MAX);

/// Bytes of one unit (token or slot) of a resource under `runtime`; nullopt when the
/// product of its shape and element size exceeds kMaxPlanBytes.
std::optional<uint64_t> computeUnitBytes(CacheResourceInterface resource,
                                         RuntimeAttr runtime);
/// The same for a unit of `shape` (one TP rank's) of `elementType`.
std::optional<uint64_t> computeUnitBytes(llvm::ArrayRef<int64_t> shape, mlir::Type elementType);

/// Ring pages per slot of a KV resource whose sliding window is the runtime's
/// kv_ring_window (kiln_rt_ring_pages, include/kiln/Runtime/Layout.h); 0 for any other
/// resource (its pool holds pages for max_seq_len).
uint64_t ringPagesPerSlot(CacheResourceInterface resource, RuntimeAttr runtime);

/// Bytes of a resource under `runtime`: slots = max_batch for per-slot kinds;
/// pages = max_batch * ceil(tokens per sequence / page_size) for per-token kinds
/// unless `kvPagesOverride` is given, and max_batch * ringPagesPerSlot for a ring pool
/// (whatever the override). nullopt when that exceeds kMaxPlanBytes
/// (describeResourceBytes says why).
std::optional<uint64_t>
computeResourceBytes(CacheResourceInterface resource, RuntimeAttr runtime,
                     std::optional<uint64_t> kvPagesOverride = std::nullopt);

/// "unit [a x b x c] of 2 bytes x 8192 tokens x 64 sequences": the factors of
/// computeResourceBytes, for the message when their product overflows.
std::string describeResourceBytes(CacheResourceInterface resource, RuntimeAttr runtime,
                                  std::optional<uint64_t> kvPagesOverride = std::nullopt);

} // namespace kiln

#endif
