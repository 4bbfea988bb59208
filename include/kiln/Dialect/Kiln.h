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

#include "kiln/Dialect/KilnConcepts.h"
#include "kiln/Dialect/Targets.h"

#include "kiln/Dialect/KilnDialect.h.inc"

#define GET_ATTRDEF_CLASSES
#include "kiln/Dialect/KilnAttrs.h.inc"

#define GET_TYPEDEF_CLASSES
#include "kiln/Dialect/KilnTypes.h.inc"

#include "kiln/Dialect/KilnInterfaces.h.inc"

#define GET_OP_CLASSES
#include "kiln/Dialect/KilnOps.h.inc"

namespace kiln {

/// The module configuration, read from the module's attributes.
struct ModuleConfig {
  TargetAttr target;   // null when absent
  SpecAttr spec;       // null: speculation off
  RuntimeAttr runtime; // null when absent
  ModelAttr model;     // null when absent
};
ModuleConfig getModuleConfig(mlir::ModuleOp module);

/// Bytes of one element of `type` (bf16: 2, f32: 4, i32: 4, ...).
uint64_t getElementBytes(mlir::Type type);

/// Unit shape of a resource on one TP rank: the shard dimension divided by tp
/// (kept at 1 when smaller than tp: KV heads are replicated, not split).
llvm::SmallVector<int64_t> shardUnitShape(llvm::ArrayRef<int64_t> unit,
                                          std::optional<int64_t> shard, unsigned tp);

/// Tokens per sequence a per-token resource holds: min(window, max_seq_len)
/// rounded up to whole pages.
uint64_t tokensPerSequence(RuntimeAttr runtime, int64_t window);

/// Bytes of a resource under `runtime`: slots = max_batch for per-slot kinds;
/// pages = max_batch * ceil(tokens per sequence / page_size) for per-token kinds
/// unless `kvPagesOverride` is given.
uint64_t computeResourceBytes(CacheResourceInterface resource, RuntimeAttr runtime,
                              std::optional<uint64_t> kvPagesOverride = std::nullopt);

} // namespace kiln

#endif
